/* OpenAI request parsing and validation for `deltafin serve`: body bytes in,
 * a validated request (or an error carrying the HTTP status and the `param`
 * at fault) out. Pure: no server, no model, no globals, so it is unit-tested
 * and fuzzed on its own. Anything the engine cannot honour is refused here,
 * never silently ignored. */
#ifndef DF_SERVE_REQUEST_H
#define DF_SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "engine/sample.h"
#include "serve/jsongram.h"
#include "serve/toolgram.h"
#include "tokenizer/chat.h"

#define DF_SERVE_MAX_STOP 16    /* OpenAI allows 4; llama.cpp-style clients send more */
#define DF_SERVE_MAX_N 16       /* choices per request (generated one after another) */
#define DF_SERVE_MAX_TOP_LOGPROBS 20
#define DF_SERVE_MAX_STOP_LEN 256

typedef enum { DF_SERVE_CHAT = 0, DF_SERVE_COMPLETION = 1 } df_serve_kind;

/* An error in OpenAI's shape: {"error":{"message","type","param","code"}}. */
typedef struct df_serve_err {
  int status;       /* HTTP status */
  const char *type; /* "invalid_request_error", "server_error", ... */
  const char *code; /* NULL -> null */
  char param[160];  /* "" -> null; e.g. "messages[0].content[1].type" */
  char msg[512];
} df_serve_err;

/* Fills e and returns -1. param NULL or "" means no param. */
int df_serve_err_set(df_serve_err *e, int status, const char *type, const char *code,
                     const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

typedef struct df_serve_limits {
  const char *model_id; /* the one served id; requests naming another get 400 */
  int vocab;            /* completions: prompt token ids must be below this */
  int model_optional;   /* /apply-template: 'model' may be left out */
} df_serve_limits;

/* One validated request: about 45 fields, every option the OpenAI endpoints
 * accept (sampling, stops, tools, response format, streaming, reuse). One
 * struct on purpose: the parser fills it once, strictly, and every endpoint
 * reads the same fields, so an option cannot mean two things. */
typedef struct df_serve_req {
  df_serve_kind kind;
  char *model;
  /* chat */
  df_chat_msg *msgs;
  size_t nmsgs;
  df_effort effort; /* default max */
  int thinking;     /* 1 (default): think mode; 0: the release's instruct mode, no reasoning
                       (chat_template_kwargs.thinking false, reasoning_effort "none") */
  /* completion: text prompt, or token ids when the prompt was given as ids */
  char *prompt;
  size_t prompt_len;
  int *prompt_ids;
  size_t nprompt_ids;
  int prompt_is_ids;
  /* common */
  long max_tokens;             /* -1: not sent (df_serve_max_new decides) */
  const char *max_tokens_param; /* which field set it (for context errors) */
  int stream, include_usage;
  double temperature; /* 0 = greedy (the default) */
  double top_p;       /* 1 = off */
  int has_seed;
  uint64_t seed;
  char *stop[DF_SERVE_MAX_STOP];
  size_t stop_len[DF_SERVE_MAX_STOP];
  int nstop;
  /* sampling extensions (llama.cpp / Ollama / OpenAI penalties), off by default */
  int top_k;              /* 0 = off */
  double min_p;           /* 0 = off */
  double repeat_penalty;  /* 1 = off */
  double presence_penalty, frequency_penalty;
  df_sample_bias *bias;   /* logit_bias */
  int nbias;
  int n;                  /* choices (1 by default) */
  /* tools: declared in the prompt (df_chat_render) and the output parsed for
   * tool calls (df_chat_parser) */
  char *tools_json;       /* the request's tools array, compact JSON; NULL: none */
  size_t tools_len;
  df_tool_choice tool_choice;  /* a named function renders as required */
  char *tool_choice_name; /* tool_choice {"type":"function","function":{"name"}}; NULL: none */
  int parallel_tool_calls;     /* default 1; 0: the reply ends after its first call */
  df_tg *toolgram;        /* none / required / named / one call, enforced while decoding */
  df_jg **tool_args;      /* the forced tools' argument grammars (toolgram points at them) */
  int ntool_args;
  df_jg *grammar;         /* response_format json_object / json_schema: the constraint */
  char *response_format_json; /* and the request's response_format (compact JSON) for the
                               * release's response-format message; NULL: none or text */
  size_t response_format_len;
  int logprobs;           /* return the chosen tokens' log-probabilities */
  int top_logprobs;       /* and this many alternatives per token */
  /* internal: every string above lives here */
  char **owned;
  size_t nowned, capowned;
} df_serve_req;

/* The release's efforts for what OpenAI's SDK allows in reasoning_effort:
 * minimal -> low (low is K3's least), low, medium, high as named, xhigh and
 * max -> max. -1 for anything else ("none" is not an effort: it turns
 * thinking off, which df_serve_parse handles). */
int df_serve_effort(const char *s, df_effort *out);

/* Parses and validates body (len bytes, not necessarily NUL-terminated).
 * Returns 0 with *out filled (free with df_serve_req_free), or -1 with *err
 * (status 400) naming the field. */
int df_serve_parse(df_serve_kind kind, const char *body, size_t len, const df_serve_limits *lim,
                   df_serve_req *out, df_serve_err *err);
void df_serve_req_free(df_serve_req *r);

/* POST /tokenize, llama-server's shape: {"content": string, "with_pieces"?:
 * bool, "parse_special"?: bool (special-token text becomes their ids;
 * default false), "add_special"?: bool (K3 adds no BOS: no effect),
 * "model"?: string}. *text points into *owned (free it). */
int df_serve_parse_tokenize(const char *body, size_t len, char **owned, size_t *text_len,
                            int *with_pieces, int *parse_special, df_serve_err *err);
/* POST /detokenize: {"tokens": [ids below vocab], "model"?: string}; *ids malloc'd. */
int df_serve_parse_detokenize(const char *body, size_t len, int vocab, int **ids, size_t *n,
                              df_serve_err *err);

/* OpenAI's default for /v1/completions when max_tokens is absent. */
#define DF_SERVE_COMPLETION_DEFAULT_MAX 16

/* The number of new tokens a request may generate: its max_tokens when set;
 * otherwise 16 for a completion (OpenAI's default) and the rest of the
 * context for chat, either capped by dflt (--max-tokens-default; 0: none)
 * and never past the context. */
long df_serve_max_new(const df_serve_req *r, long nprompt, long max_pos, long dflt);

/* Checks the encoded prompt length (and max_tokens) against the context
 * limit: 400 naming the limit. */
int df_serve_check_context(const df_serve_req *r, long nprompt, long max_pos, df_serve_err *err);

#endif

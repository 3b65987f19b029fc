/* Response bodies in OpenAI's shapes: errors, chat completions, text
 * completions, their SSE chunks and the model list. Pure builders (jansson),
 * so the exact bytes are unit-tested without a server. */
#ifndef DF_SERVE_RESPONSE_H
#define DF_SERVE_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "serve/request.h"
#include "serve/stop.h"

typedef struct df_serve_meta {
  df_serve_kind kind;
  char id[48];        /* chatcmpl-... / cmpl-... */
  long long created;  /* unix seconds */
  const char *model;
  int include_usage;  /* streams: every chunk carries "usage": null, then a usage chunk */
} df_serve_meta;

/* Speculation's blocks for usage.deltafin_speculation (OpenAI's usage has
 * no place for them): the draft source that ran and, per block length k,
 * the blocks of k drafts (block_len[k-1]) and, per draft position j
 * (0-based), the drafts kept there (acc_at[j]). */
#define DF_SERVE_SPEC_MAX 16
typedef struct df_serve_spec {
  const char *draft; /* NULL: no draft ran */
  long blocks;
  long block_len[DF_SERVE_SPEC_MAX];
  long acc_at[DF_SERVE_SPEC_MAX];
} df_serve_spec;

typedef struct df_serve_usage {
  long prompt, completion, reasoning;
  long cached; /* prompt tokens taken from a kept state, not prefilled again */
  /* speculation (--draft): drafts kept and thrown away by the verify blocks;
   * reported under OpenAI's accepted/rejected_prediction_tokens */
  long drafted, accepted;
  const df_serve_spec *spec; /* NULL or no draft: no deltafin_speculation */
} df_serve_usage;

/* A fresh random id with the kind's prefix. */
void df_serve_meta_init(df_serve_meta *m, df_serve_kind kind, const char *model, long long created);

/* {"error":{"message","type","param","code"}}; caller frees. */
char *df_serve_error_json(const df_serve_err *e);

/* SSE frames ("data: {...}\n\n") appended to out. field is "content" or
 * "reasoning_content" (chat) and ignored for text completions; role, text and
 * finish may be NULL (finish NULL -> null). */
void df_serve_sse_delta(df_sbuf *out, const df_serve_meta *m, const char *role, const char *field,
                        const char *text, size_t len, const char *finish);
void df_serve_sse_usage(df_sbuf *out, const df_serve_meta *m, const df_serve_usage *u);
void df_serve_sse_error(df_sbuf *out, const df_serve_err *e);
void df_serve_sse_done(df_sbuf *out);

/* Whole (non-streamed) responses; caller frees. reasoning is ignored for
 * text completions. */
char *df_serve_response_json(const df_serve_meta *m, const char *reasoning, size_t nreasoning,
                             const char *content, size_t ncontent, const char *finish,
                             const df_serve_usage *u);

/* Log-probabilities of one generated token (the bytes point into the
 * tokenizer: a token may hold part of a UTF-8 character). */
typedef struct df_serve_lp_alt {
  const uint8_t *p;
  size_t n;
  double lp;
} df_serve_lp_alt;
typedef struct df_serve_lp {
  const uint8_t *p;
  size_t n;
  double lp;
  int ntop;
  df_serve_lp_alt top[DF_SERVE_MAX_TOP_LOGPROBS];
} df_serve_lp;

/* A tool call the model made (OpenAI tool_calls[]). */
typedef struct df_serve_call {
  char id[40]; /* call_... */
  const char *name;
  size_t nname;
  const char *args; /* the arguments JSON text */
  size_t nargs;
} df_serve_call;

/* A streamed tool-call delta of choice index: the first one of call k
 * carries id, type and name (arguments ""), later ones argument pieces. */
void df_serve_sse_tool_delta(df_sbuf *out, const df_serve_meta *m, int index, int k,
                             const df_serve_call *first, const char *args, size_t nargs);

/* One choice of a response. logprobs: they were asked for, so the choice
 * carries an object (chat: {"content":[...],"refusal":null}; completions:
 * {"tokens","token_logprobs","top_logprobs","text_offset"}) instead of null. */
typedef struct df_serve_choice {
  const char *reasoning;
  size_t nreasoning;
  const char *content;
  size_t ncontent;
  const char *finish;
  const df_serve_lp *lp;
  size_t nlp;
  int logprobs;
  const df_serve_call *calls; /* chat: message.tool_calls */
  size_t ncalls;
} df_serve_choice;

char *df_serve_response_choices_json(const df_serve_meta *m, const df_serve_choice *c, int n,
                                     const df_serve_usage *u);

/* A streamed delta of choice index, with the log-probabilities of the
 * tokens it covers (want_lp: asked for; text_offset: completions' offset of
 * the first of them in the choice's text). */
void df_serve_sse_delta_lp(df_sbuf *out, const df_serve_meta *m, int index, const char *role,
                           const char *field, const char *text, size_t len, const char *finish,
                           const df_serve_lp *lp, size_t nlp, int want_lp, size_t text_offset);

char *df_serve_models_json(const char *model_id, long long created);
char *df_serve_model_json(const char *model_id, long long created);

/* GET /health: {"status":"ok","model","busy","queue","queue_max"}. */
char *df_serve_health_json(const char *model_id, int busy, int queued, int queue_max);

/* POST /tokenize: {"tokens":[ids]} or, with pieces (pieces != NULL),
 * {"tokens":[{"id","piece"}]} (a piece that is not whole UTF-8 is given as
 * its byte values). POST /detokenize: {"content": text}. */
char *df_serve_tokens_json(const int *ids, size_t n, const uint8_t *const *pieces,
                           const size_t *piece_len);
char *df_serve_content_json(const char *text, size_t len);
/* POST /apply-template: {"prompt": text, "tokens": [ids]}. */
char *df_serve_template_json(const char *text, size_t len, const int *ids, size_t n);

/* GET /metrics: Prometheus text exposition. stats_json is the engine's
 * statistics (df_engine_stats_json; NULL: none yet). */
/* A Prometheus histogram of seconds with fixed buckets (upper bounds
 * DF_SERVE_HIST_BOUNDS; the last bucket is +Inf). */
#define DF_SERVE_HIST_N 13
typedef struct df_serve_hist {
  unsigned long long le[DF_SERVE_HIST_N]; /* observations <= each bound (not cumulative) */
  unsigned long long count;
  double sum;
} df_serve_hist;
void df_serve_hist_add(df_serve_hist *h, double seconds);

typedef struct df_serve_metrics {
  unsigned long long requests, prompt_tokens, cached_tokens, gen_tokens;
  unsigned long long drafted, accepted; /* speculation's drafts, and those kept */
  unsigned long long blocks;            /* verify blocks */
  unsigned long long acc_at[DF_SERVE_SPEC_MAX]; /* drafts kept at each block position */
  double prefill_s, decode_s;
  int busy, queued, queue_max;
  unsigned long long kept_bytes;
  int kept_states;
  unsigned long long rejected_429, rejected_503; /* replies refusing a request: busy, stopping */
  df_serve_hist latency; /* generation requests answered 200: arrival to the reply's end */
  df_serve_hist ttft;    /* arrival to the first generated token */
  double last_tps;       /* the last generation's decode speed, tokens per second */
} df_serve_metrics;
char *df_serve_metrics_text(const df_serve_metrics *m, const char *stats_json);

/* Replaces invalid UTF-8 with U+FFFD (fresh string; *outlen set). */
char *df_serve_utf8_sanitize(const char *s, size_t len, size_t *outlen);

#endif

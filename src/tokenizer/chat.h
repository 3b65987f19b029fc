/* The K3 chat format (kimi-k3.md section 7): control tokens are specials,
 * tag names and attributes are ordinary text, user content is always
 * encoded as ordinary text.
 *
 * Two layers:
 * - df_chat_render / df_chat_render_json: the one chat encoder, the
 *   release's (encoding_k3.py build_chat_segments, as the public ports quote
 *   it): OpenAI-style messages + tools + options -> prompt text and ids.
 *   Every caller renders through it (run --chat, chat, template, tokenize
 *   --chat, the server's chats and /apply-template), with the defaults of
 *   the release's apply_chat_template (df_chat_opts_default), so one
 *   conversation is one list of ids whichever way it comes in.
 * - df_chat_parser: the model's output ids -> reasoning, content and tool
 *   calls (name + OpenAI arguments JSON), incrementally for streaming.
 *   df_chat_split is the simpler splitter (reasoning / response only) for
 *   replies without tools. */
#ifndef DF_TOKENIZER_CHAT_H
#define DF_TOKENIZER_CHAT_H

#include <stddef.h>

#include "tokenizer/tokenizer.h"

typedef enum { DF_ROLE_SYSTEM, DF_ROLE_USER, DF_ROLE_ASSISTANT, DF_ROLE_TOOL, DF_ROLE_DEVELOPER } df_role;
typedef enum { DF_EFFORT_LOW, DF_EFFORT_MEDIUM, DF_EFFORT_HIGH, DF_EFFORT_MAX } df_effort;

/* An assistant's tool call, as OpenAI sends it back in history. */
typedef struct df_chat_call {
  const char *id;        /* tool_calls[].id; NULL if none (tool results then keep their order) */
  const char *name;      /* function.name, required, non-empty */
  const char *arguments; /* function.arguments: a JSON object as text; NULL or blank = none.
                          * Not parseable JSON: rendered raw in a json element, as the
                          * release does; JSON that is not an object: an error. */
  size_t arguments_len;
} df_chat_call;

typedef struct df_chat_msg {
  df_role role;
  const char *content; /* NULL = no content (e.g. an assistant that only called tools) */
  size_t content_len;
  const char *tool_name; /* tool messages: tool="name" (NULL: the matching call's name) */
  /* assistant messages in history: optional reasoning (think part); blank
   * (white space only) renders as an empty think block, as the release does */
  const char *reasoning;
  size_t reasoning_len;
  /* df_chat_render only (zero-initialised fields mean "absent"): */
  const char *name;           /* user/system/assistant: name="..." (NULL or "" = none) */
  const df_chat_call *calls;  /* assistant: tool calls, rendered after the response */
  size_t ncalls;
  const char *tool_call_id;   /* tool: tool_call_id, matched against the last calls[].id */
  const char *tools_json;     /* system: a JSON array of tools declared mid-conversation */
  size_t tools_len;           /* (the release's "New Tools Available" tool-declare) */
} df_chat_msg;

/* ---- rendering (the release's encoder) ---- */

typedef enum { DF_TOOL_CHOICE_AUTO = 0, DF_TOOL_CHOICE_NONE, DF_TOOL_CHOICE_REQUIRED } df_tool_choice;

typedef struct df_chat_opts {
  int thinking;        /* 1: think mode (generation prompt opens think); 0: instruct mode
                        * (opens response; history carries no think blocks) */
  const char *effort;  /* the thinking-effort message: "low", "high" or "max" (the default,
                        * as apply_chat_template passes it); anything else (including
                        * "medium", which the release refuses) is an error. NULL: no
                        * effort message, what build_chat_segments writes when called
                        * without one (its goldens; no caller's default). Ignored when
                        * thinking is 0, as the release does. */
  df_tool_choice tool_choice; /* none / required add the release's tool-choice message */
  int add_generation_prompt;  /* 1: end with the assistant opening */
  const char *tools_json;     /* JSON array of OpenAI tools (NULL or "[]" = none): the
                               * tool-declare message, keys sorted, compact */
  size_t tools_len;
  const char *response_format_json; /* OpenAI response_format object (NULL = none): type
                                     * json_object / json_schema add the release's
                                     * response-format message; "text" adds nothing */
  size_t response_format_len;
} df_chat_opts;

/* apply_chat_template's defaults: thinking on at effort max, tool_choice auto,
 * generation prompt, no tools, no response format. */
df_chat_opts df_chat_opts_default(void);

/* A rendered prompt. text is what the segments spell (NUL-terminated, for
 * display and /apply-template); ids are what the model is fed: each segment
 * encoded on its own, control segments as special ids, all other text as
 * ordinary text (a user's literal "<|open|>" stays ordinary tokens). */
typedef struct df_chat_prompt {
  char *text;
  size_t text_len;
  int *ids;
  size_t n;
} df_chat_prompt;
void df_chat_prompt_free(df_chat_prompt *p);

/* Renders msgs (in order; the release's reordering of consecutive tool results
 * by tool_call_id is applied). Roles: system, user, assistant, tool as the
 * release renders them; DF_ROLE_DEVELOPER renders as role="system" (the
 * release's encoder has no developer branch and would drop the message; OpenAI
 * clients send their instructions under it). Errors name the message index. */
int df_chat_render(const df_tok *t, const df_chat_msg *msgs, size_t nmsgs, const df_chat_opts *o,
                   df_chat_prompt *out, df_err *e);

/* The same from an OpenAI "messages" JSON array (text): role, content (string,
 * null, or a list of {"type":"text","text":...} parts), name, reasoning_content
 * (or its alias "reasoning", taken when reasoning_content is absent or empty,
 * as the release does), tool_calls [{id, type, function{name, arguments}}],
 * tool_call_id, and "tools" on a system message. o->tools_json as above. */
int df_chat_render_json(const df_tok *t, const char *messages_json, size_t len,
                        const df_chat_opts *o, df_chat_prompt *out, df_err *e);

/* ---- parsing the model's output ---- */

typedef enum {
  DF_CHAT_EV_REASONING, /* text: reasoning bytes (think channel) */
  DF_CHAT_EV_CONTENT,   /* text: response bytes */
  DF_CHAT_EV_CALL_BEGIN,/* call: its 0-based position in this message; text: the name */
  DF_CHAT_EV_CALL_ARGS, /* call; text: the next piece of its OpenAI "arguments" string (all
                         * pieces of one call concatenated are one JSON object) */
  DF_CHAT_EV_CALL_END,  /* call */
  DF_CHAT_EV_END        /* <|end_of_msg|>: the message is complete */
} df_chat_ev_kind;

typedef struct df_chat_event {
  df_chat_ev_kind kind;
  int call;
  const char *text; /* valid UTF-8, not NUL-terminated; valid only during the callback */
  size_t len;
} df_chat_event;

typedef void (*df_chat_event_fn)(const df_chat_event *ev, void *ctx);

typedef struct df_chat_parser df_chat_parser;

/* thinking: 1 if the generation prompt opened the think channel, 0 if it
 * opened response (the ids pushed are what the model wrote after it). */
df_chat_parser *df_chat_parser_new(const df_tok *t, int thinking);
void df_chat_parser_free(df_chat_parser *p);
/* Pushes one generated id; calls fn for every event it completes (text comes
 * as soon as it is whole UTF-8; a call's name when its <|sep|> arrives; a
 * string argument piece by piece, JSON-escaped). Any id sequence is accepted
 * (a model may write garbage): markup it cannot place is dropped, text it
 * cannot place goes to content. After DF_CHAT_EV_END, pushes do nothing. */
void df_chat_parser_push(df_chat_parser *p, int id, df_chat_event_fn fn, void *ctx);
/* End of generation without <|end_of_msg|> (length limit, stop string):
 * flushes held bytes and closes an open call so its arguments are valid JSON.
 * Emits no DF_CHAT_EV_END. */
void df_chat_parser_finish(df_chat_parser *p, df_chat_event_fn fn, void *ctx);
/* 1 once <|end_of_msg|> was seen. */
int df_chat_parser_ended(const df_chat_parser *p);

/* Non-streaming: the whole output at once. Caller frees with df_chat_parsed_free. */
typedef struct df_chat_parsed_call {
  char *name;
  char *arguments; /* a JSON object as text, for OpenAI's tool_calls[].function.arguments */
} df_chat_parsed_call;
typedef struct df_chat_parsed {
  char *reasoning; /* NUL-terminated (possibly empty) */
  size_t reasoning_len;
  char *content;
  size_t content_len;
  df_chat_parsed_call *calls;
  size_t ncalls;
  int ended; /* <|end_of_msg|> seen */
} df_chat_parsed;
void df_chat_parse_ids(const df_tok *t, const int *ids, size_t n, int thinking,
                       df_chat_parsed *out);
void df_chat_parsed_free(df_chat_parsed *p);

int df_effort_parse(const char *s, df_effort *out); /* "low","medium","high","max" */
/* 1 if the release's encoder accepts this thinking_effort ("low", "high", "max"). */
int df_chat_effort_valid(const char *s);
/* The release's thinking_effort for an effort (df_chat_opts.effort): low, high
 * and max as named; medium, which the release refuses, as high (OpenAI's
 * reasoning_effort scale sits medium just below high). NULL for a value
 * outside df_effort. */
const char *df_chat_effort_name(df_effort e);

/* Splits generated ids (after the generation prompt) into reasoning and
 * response text. Streaming use: feed ids one at a time; the splitter tells
 * which channel each decoded byte run belongs to and when the message ended. */
typedef enum { DF_CH_REASONING, DF_CH_RESPONSE, DF_CH_CONTROL, DF_CH_END } df_channel;

typedef struct df_chat_split {
  const df_tok *tok;
  df_channel ch;    /* current channel */
  int state;        /* internal: which control sequence is being matched */
  df_tok_stream stream;
  int ended;
  /* internal: where text goes (reasoning, response, between blocks) and the
   * tag name being collected after <|open|> or <|close|> */
  int mode;
  int ntag;
  char tag[32];
} df_chat_split;

void df_chat_split_init(df_chat_split *s, const df_tok *t);
/* Pushes one generated id. Writes the text it completes (possibly empty) to
 * out and sets *ch to the channel that text belongs to. Returns the byte
 * count, or -1 when outcap is too small. Control tokens and tag text
 * (`think<|sep|>`, `<|open|>response<|sep|>`, ...) produce no text.
 *
 * Rules (any id sequence is accepted; a model may emit garbage):
 * - text starts in the reasoning channel (the generation prompt opened think);
 * - <|open|>NAME<|sep|> and <|close|>NAME<|sep|> are markup: NAME is
 *   collected from ordinary tokens and dropped; open think -> reasoning, open
 *   response -> response, a close -> between blocks; unknown names change
 *   nothing. Another special in the middle abandons the tag;
 * - between blocks (after a close), white space is dropped (DF_CH_CONTROL);
 *   other text is taken as response text (a model that skipped the tag);
 * - <|end_of_msg|> ends the message: s->ended = 1 and *ch = DF_CH_END; from
 *   then on every push returns 0 with DF_CH_END;
 * - a special token flushes a dangling partial UTF-8 character of the
 *   current channel as U+FFFD: that push then returns those bytes with *ch
 *   naming the channel (check s->ended when the flushing special was
 *   <|end_of_msg|>); other specials and unknown ids produce no text.
 * The text of each channel is valid UTF-8 (see df_tok_stream_push). */
int df_chat_split_push(df_chat_split *s, int id, char *out, size_t outcap, df_channel *ch);

#endif

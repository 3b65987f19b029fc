/* POST /v1/responses (OpenAI's Responses API) as a layer over chat
 * completions: a request becomes a Chat Completions body (run by the same
 * parser, encoder and generation), and the chat result - whole, or the chat
 * SSE chunks as they are made - becomes a Response object or the Responses
 * stream events. Conversations continue through previous_response_id: the
 * server keeps each response's message history (and the kept prompt
 * states make the longer prompt cheap). Pure (no server): unit-tested. */
#ifndef DF_SERVE_RESPONSES_H
#define DF_SERVE_RESPONSES_H

#include <jansson.h>
#include <stddef.h>

#include "base/sbuf.h"
#include "serve/request.h"
#include "serve/response.h"

typedef struct df_resp_req {
  char *chat;       /* the Chat Completions body this request runs as */
  json_t *history;  /* the messages before this turn's output, instructions left out */
  json_t *echo;     /* the request's settings the Response object repeats */
  int stream, store;
} df_resp_req;

/* The stored history (a JSON messages array, malloc'd) of a response id, or
 * NULL when there is none. */
typedef char *(*df_resp_lookup)(void *ud, const char *id);

/* Translates a Responses request. Refusals are 400s naming the field, as for
 * chat (a previous_response_id the server does not hold included). */
int df_serve_responses_parse(const char *body, size_t len, df_resp_lookup lookup, void *ud,
                             df_resp_req *out, df_serve_err *err);
void df_resp_req_free(df_resp_req *r);

/* What one generation gave (the fields of a chat choice). */
typedef struct df_resp_result {
  const char *reasoning;
  size_t nreasoning;
  const char *content;
  size_t ncontent;
  const df_serve_call *calls;
  size_t ncalls;
  const char *finish; /* "stop", "length", "tool_calls" */
  df_serve_usage usage;
} df_resp_result;

/* A fresh "resp_..." id. */
void df_resp_new_id(char *id, size_t cap);

/* The Response object (caller frees). */
char *df_serve_responses_object(const char *id, long long created, const char *model,
                                const df_resp_req *q, const df_resp_result *res);
/* The history after this response (the assistant turn appended; compact
 * JSON, caller frees), what a later previous_response_id continues. */
char *df_serve_responses_history(const df_resp_req *q, const df_resp_result *res);

/* Chat SSE chunks in, Responses events out ("event: T\ndata: {...}\n\n"),
 * as the generation makes them (a frame cut between feeds waits for its
 * end). Once the chat stream's [DONE] has been fed, df_resp_stream_result
 * gives what was generated (calls: room for DF_RESP_MAX_CALLS; pointers
 * valid until free); it returns 0 before, or when the stream ended with an
 * error frame. */
#define DF_RESP_MAX_CALLS 64
typedef struct df_resp_stream df_resp_stream;
df_resp_stream *df_resp_stream_new(const char *id, long long created, const char *model,
                                   const df_resp_req *q);
void df_resp_stream_feed(df_resp_stream *s, const char *frames, size_t n, df_sbuf *out);
int df_resp_stream_result(const df_resp_stream *s, df_resp_result *res, df_serve_call *calls);
void df_resp_stream_free(df_resp_stream *s);

#endif

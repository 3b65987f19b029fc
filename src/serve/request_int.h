/* Internals shared by the request parser's files (request*.c): owned
 * strings, field checks and the chat-message parser; not a public header. */
#ifndef DF_SERVE_REQUEST_INT_H
#define DF_SERVE_REQUEST_INT_H

#include <jansson.h>
#include <stddef.h>

#include "serve/request.h"

#define BAD(e, param, ...) \
  df_serve_err_set((e), 400, "invalid_request_error", NULL, (param), __VA_ARGS__)

char *df_req_own(df_serve_req *r, const char *s, size_t n);
void *df_req_own_raw(df_serve_req *r, size_t n);
char *df_req_own_json_str(df_serve_req *r, const json_t *v, size_t *len);
const char *df_req_json_kind(const json_t *v);
int df_req_want_bool(const json_t *v, const char *param, int *out, df_serve_err *e);
int df_req_want_str(const json_t *v, const char *param, df_serve_err *e);
int df_req_unsupported(const char *param, const char *why, df_serve_err *e);
int df_req_parse_response_format(df_serve_req *r, const json_t *v, df_serve_err *e);
int df_req_parse_tools(df_serve_req *r, const json_t *v, df_serve_err *e);
int df_req_parse_tool_choice(df_serve_req *r, const json_t *v, df_serve_err *e);
int df_req_build_toolgram(df_serve_req *r, const json_t *tools, df_serve_err *e);
int df_req_parse_messages(df_serve_req *r, const json_t *arr, df_serve_err *e);

#endif

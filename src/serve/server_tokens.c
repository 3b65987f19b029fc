/* POST /tokenize, /detokenize and /apply-template. */

#include <stdlib.h>

#include "base/util.h"
#include "serve/server_int.h"

/* POST /tokenize and /detokenize: the tokenizer is read-only, so this runs
 * in the connection thread, beside a generation. */
enum MHD_Result df_srv_handle_tokenize(srv *S, struct MHD_Connection *c, conn_ctx *r) {
  df_serve_err err;
  const char *body = r->body.p ? r->body.p : "";
  if (r->too_big) {
    df_serve_err_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
                     "the request body is larger than %zu bytes (--max-request-bytes)",
                     S->o.max_request_bytes);
    return df_srv_reply_err(c, r, &err, NULL, NULL);
  }
  if (r->route == DF_ROUTE_DETOKENIZE) {
    int *ids;
    size_t n, len;
    if (df_serve_parse_detokenize(body, r->body.n, S->limits.vocab, &ids, &n, &err))
      return df_srv_reply_err(c, r, &err, NULL, NULL);
    char *text = df_tok_decode(S->tok, ids, n, &len);
    free(ids);
    enum MHD_Result ret =
        df_srv_reply_json(c, r, 200, df_serve_content_json(text ? text : "", text ? len : 0));
    free(text);
    return ret;
  }
  char *text;
  size_t tlen, nids = 0, cap = 0;
  int pieces, special, *ids = NULL;
  if (df_serve_parse_tokenize(body, r->body.n, &text, &tlen, &pieces, &special, &err))
    return df_srv_reply_err(c, r, &err, NULL, NULL);
  df_err e;
  int rc = special ? df_tok_encode_with_specials(S->tok, text, tlen, &ids, &nids, &cap, &e)
                   : df_tok_encode(S->tok, text, tlen, &ids, &nids, &cap, &e);
  free(text);
  if (rc) {
    free(ids);
    df_serve_err_set(&err, 400, "invalid_request_error", NULL, "content",
                     "the text cannot be encoded: %s", e.msg);
    return df_srv_reply_err(c, r, &err, NULL, NULL);
  }
  const uint8_t **pp = NULL;
  size_t *pl = NULL;
  if (pieces) {
    pp = df_xmalloc((nids ? nids : 1) * sizeof *pp);
    pl = df_xmalloc((nids ? nids : 1) * sizeof *pl);
    for (size_t i = 0; i < nids; i++) pp[i] = df_tok_piece(S->tok, ids[i], &pl[i]);
  }
  enum MHD_Result ret = df_srv_reply_json(c, r, 200, df_serve_tokens_json(ids, nids, pp, pl));
  free(pp);
  free(pl);
  free(ids);
  return ret;
}

/* POST /apply-template: a chat completions body in, the prompt the server
 * would run for it out ({"prompt": text, "tokens": ids}), through the same
 * encoder as a generation; 'model' may be left out. */
enum MHD_Result df_srv_handle_apply_template(srv *S, struct MHD_Connection *c, conn_ctx *r) {
  df_serve_err err;
  if (r->too_big) {
    df_serve_err_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
                     "the request body is larger than %zu bytes (--max-request-bytes)",
                     S->o.max_request_bytes);
    return df_srv_reply_err(c, r, &err, NULL, NULL);
  }
  df_serve_limits lim = S->limits;
  lim.model_optional = 1;
  df_serve_req q;
  if (df_serve_parse(DF_SERVE_CHAT, r->body.p ? r->body.p : "", r->body.n, &lim, &q, &err))
    return df_srv_reply_err(c, r, &err, NULL, NULL);
  int *ids = NULL;
  size_t n = 0, len = 0;
  if (df_srv_encode_prompt(S, &q, &ids, &n, &err)) {
    df_serve_req_free(&q);
    return df_srv_reply_err(c, r, &err, NULL, NULL);
  }
  df_serve_req_free(&q);
  char *text = df_tok_decode(S->tok, ids, n, &len);
  char *body = df_serve_template_json(text ? text : "", text ? len : 0, ids, n);
  free(text);
  free(ids);
  return df_srv_reply_json(c, r, 200, body);
}

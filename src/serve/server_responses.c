/* POST /v1/responses: the request becomes a chat completion (responses.c)
 * and the kept histories let previous_response_id continue a conversation. */

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "serve/server_int.h"

/* Takes history (malloc'd). The oldest kept response makes room. */
void df_srv_resp_keep(srv *S, const char *id, char *history) {
  pthread_mutex_lock(&S->rmu);
  struct resp_kept *k = &S->resp[S->resp_next];
  free(k->history);
  snprintf(k->id, sizeof k->id, "%s", id);
  k->history = history;
  S->resp_next = (S->resp_next + 1) % DF_SRV_RESP_KEPT;
  if (S->nresp < DF_SRV_RESP_KEPT) S->nresp++;
  pthread_mutex_unlock(&S->rmu);
}

void df_srv_resp_free_all(srv *S) {
  for (int i = 0; i < DF_SRV_RESP_KEPT; i++) free(S->resp[i].history);
  memset(S->resp, 0, sizeof S->resp);
  S->nresp = S->resp_next = 0;
}

static char *lookup(void *ud, const char *id) {
  srv *S = ud;
  char *h = NULL;
  pthread_mutex_lock(&S->rmu);
  for (int i = 0; i < DF_SRV_RESP_KEPT && !h; i++)
    if (S->resp[i].history && !strcmp(S->resp[i].id, id)) h = df_xstrdup(S->resp[i].history);
  pthread_mutex_unlock(&S->rmu);
  return h;
}

enum MHD_Result df_srv_handle_responses(srv *S, struct MHD_Connection *c, conn_ctx *r) {
  if (r->too_big) return df_srv_handle_generation(S, c, r, DF_SERVE_CHAT); /* its 413 */
  df_serve_err err;
  df_resp_req *q = df_xcalloc(1, sizeof *q);
  if (df_serve_responses_parse(r->body.p ? r->body.p : "", r->body.n, lookup, S, q, &err)) {
    free(q);
    df_srv_conn_release_slot(S, r);
    return df_srv_reply_err(c, r, &err, NULL, NULL);
  }
  /* from here it is a chat completion, answered in the Responses shapes */
  r->body.n = 0;
  df_sbuf_addstr(&r->body, q->chat);
  r->rq = q;
  return df_srv_handle_generation(S, c, r, DF_SERVE_CHAT);
}

/* GET endpoints: /health, /metrics, /v1/models and the other read-only routes. */

#include <string.h>

#include "serve/server_int.h"

enum MHD_Result df_srv_handle_get(srv *S, struct MHD_Connection *c, conn_ctx *r) {
  df_serve_err err;
  if (r->route == DF_ROUTE_METRICS) {
    df_serve_metrics m;
    memset(&m, 0, sizeof m);
    pthread_mutex_lock(&S->mu);
    m.requests = S->m_requests;
    m.prompt_tokens = S->m_prompt_tokens;
    m.cached_tokens = S->m_cached_tokens;
    m.gen_tokens = S->m_gen_tokens;
    m.drafted = S->m_drafted;
    m.accepted = S->m_accepted;
    m.blocks = S->m_blocks;
    memcpy(m.acc_at, S->m_acc_at, sizeof m.acc_at);
    m.prefill_s = S->m_prefill_s;
    m.decode_s = S->m_decode_s;
    m.busy = S->running != NULL;
    m.queued = S->fifo.n;
    m.queue_max = S->o.queue;
    m.kept_bytes = S->m_kept_bytes;
    m.kept_states = S->m_kept_states;
    m.rejected_429 = S->m_429;
    m.rejected_503 = S->m_503;
    m.latency = S->m_latency;
    m.ttft = S->m_ttft;
    m.last_tps = S->m_tps;
    char *text = df_serve_metrics_text(&m, S->stats_json);
    pthread_mutex_unlock(&S->mu);
    return df_srv_reply_body(c, r, 200, text, "text/plain; version=0.0.4", NULL, NULL);
  }
  if (r->route == DF_ROUTE_MODELS)
    return df_srv_reply_json(c, r, 200, df_serve_models_json(S->model_id, S->started));
  if (r->route == DF_ROUTE_MODEL) {
    if (!strcmp(r->arg, S->model_id))
      return df_srv_reply_json(c, r, 200, df_serve_model_json(S->model_id, S->started));
    df_serve_err_set(&err, 404, "invalid_request_error", "model_not_found", "model",
                     "The model '%s' does not exist (this server serves '%s')", r->arg,
                     S->model_id);
    return df_srv_reply_err(c, r, &err, NULL, NULL);
  }
  /* health */
  pthread_mutex_lock(&S->mu);
  int busy = S->running != NULL, queued = S->fifo.n;
  pthread_mutex_unlock(&S->mu);
  return df_srv_reply_json(c, r, 200, df_serve_health_json(S->model_id, busy, queued, S->o.queue));
}

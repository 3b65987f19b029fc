/* The OpenAI generation endpoints (chat completions, completions): encode
 * the prompt, queue the job, and answer whole or as an SSE stream. */

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "serve/server_int.h"

/* ---------------------------------------------------------- streaming */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  job *j = cls;
  srv *S = j->S;
  ssize_t ret;
  pthread_mutex_lock(&S->mu);
  for (;;) {
    size_t avail = j->out.n - j->out_off;
    if (avail && !j->idle_back && (j->prefilled >= (long)j->nprompt || j->n_gen > 0)) {
      /* the prefill is over: from here a reader that stops reading is idle
       * (setting the timeout from 0 restarts MHD's timer) */
      MHD_set_connection_option(j->conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                (unsigned)S->o.idle_timeout_s);
      j->idle_back = 1;
    }
    if (avail) {
      size_t n = avail < max ? avail : max;
      memcpy(buf, j->out.p + j->out_off, n);
      j->out_off += n;
      if (j->out_off == j->out.n) j->out.n = j->out_off = 0;
      pthread_cond_broadcast(&j->cv);
      ret = (ssize_t)n;
      break;
    }
    if (j->state == JOB_DONE) {
      ret = MHD_CONTENT_READER_END_OF_STREAM;
      break;
    }
    if (df_srv_peer_gone_locked(j)) {
      ret = MHD_CONTENT_READER_END_WITH_ERROR;
      break;
    }
    if (max >= 3 && df_srv_probe_due_locked(j)) {
      /* between frames: an SSE comment, ignored by clients, makes a closed
       * peer reset the connection */
      memcpy(buf, ":\n\n", 3);
      ret = 3;
      break;
    }
    df_srv_timed_wait(&j->cv, &S->mu, WAIT_SLICE_MS);
  }
  pthread_mutex_unlock(&S->mu);
  return ret;
}

static void stream_free(void *cls) {
  job *j = cls;
  srv *S = j->S; /* j may be freed below */
  pthread_mutex_lock(&S->mu);
  if (j->state != JOB_DONE) j->gone = 1; /* the connection ended early */
  pthread_cond_broadcast(&j->cv);
  df_srv_job_unref_locked(j);
  S->streams--;
  pthread_cond_broadcast(&S->work_cv);
  pthread_mutex_unlock(&S->mu);
}

/* --------------------------------------------------------- generation */

int df_srv_encode_prompt(srv *S, const df_serve_req *q, int **ids, size_t *n, df_serve_err *err) {
  if (q->prompt_is_ids) {
    *ids = df_xmalloc(q->nprompt_ids * sizeof **ids);
    memcpy(*ids, q->prompt_ids, q->nprompt_ids * sizeof **ids);
    *n = q->nprompt_ids;
    return 0;
  }
  size_t cap = 0;
  df_err e;
  int rc;
  *ids = NULL;
  *n = 0;
  /* a loaded df_tok is read-only: connection threads encode concurrently */
  if (q->kind == DF_SERVE_CHAT) {
    /* the one chat encoder, as `deltafin template` and `run --chat` render */
    df_chat_opts o = df_chat_opts_default();
    /* structured output: instruct mode, the reply opens with the response
     * (the constraint covers the whole reply) */
    o.thinking = q->grammar ? 0 : q->thinking;
    o.effort = df_chat_effort_name(q->effort);
    o.tool_choice = q->tool_choice;
    o.tools_json = q->tools_json;
    o.tools_len = q->tools_len;
    o.response_format_json = q->response_format_json;
    o.response_format_len = q->response_format_len;
    df_chat_prompt pr;
    memset(&pr, 0, sizeof pr);
    rc = df_chat_render(S->tok, q->msgs, q->nmsgs, &o, &pr, &e);
    if (!rc) {
      *ids = pr.ids;
      *n = pr.n;
      pr.ids = NULL;
    }
    df_chat_prompt_free(&pr);
  } else /* a completions prompt is text the client may have rendered itself, specials
          * included (vLLM and transformers read them too); chat content above never is */
    rc = df_tok_encode_with_specials(S->tok, q->prompt, q->prompt_len, ids, n, &cap, &e);
  if (rc) {
    free(*ids);
    *ids = NULL;
    return df_serve_err_set(err, 400, "invalid_request_error", NULL,
                            q->kind == DF_SERVE_CHAT ? "messages" : "prompt",
                            "the prompt cannot be encoded: %s", e.msg);
  }
  return 0;
}

enum MHD_Result df_srv_handle_generation(srv *S, struct MHD_Connection *c, conn_ctx *r,
                                         df_serve_kind kind) {
  df_serve_err err;
  if (r->too_big) {
    df_srv_conn_release_slot(S, r);
    df_serve_err_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
                     "the request body is larger than %zu bytes (--max-request-bytes)",
                     S->o.max_request_bytes);
    return df_srv_reply_err(c, r, &err, NULL, NULL);
  }
  job *j = df_xcalloc(1, sizeof *j);
  j->S = S;
  j->peer_fd = -1;
  j->prefilled_at_cancel = -1;
  j->t0 = r->t0;
  df_srv_cond_init_mono(&j->cv);
  j->refs = 1;
  if (df_serve_parse(kind, r->body.p ? r->body.p : "", r->body.n, &S->limits, &j->req, &err) ||
      df_srv_encode_prompt(S, &j->req, &j->prompt, &j->nprompt, &err) ||
      df_serve_check_context(&j->req, (long)j->nprompt, S->max_pos, &err)) {
    pthread_mutex_lock(&S->mu);
    df_srv_job_unref_locked(j);
    pthread_mutex_unlock(&S->mu);
    df_srv_conn_release_slot(S, r);
    return df_srv_reply_err(c, r, &err, NULL, NULL);
  }
  df_serve_meta_init(&j->meta, kind, S->model_id, (long long)time(NULL));
  j->meta.include_usage = j->req.include_usage;
  if (r->rq) { /* /v1/responses */
    j->rq = r->rq;
    r->rq = NULL;
    df_resp_new_id(j->resp_id, sizeof j->resp_id);
    if (j->req.stream) j->rs = df_resp_stream_new(j->resp_id, j->meta.created, S->model_id, j->rq);
  }
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (ci) j->peer_fd = dup(ci->connect_fd);
  j->http11 = r->http11;

  pthread_mutex_lock(&S->mu);
  /* admitted when the headers arrived (df_srv_admit_or_refuse); the slot passes to the job */
  if (S->stopping || !r->slot || df_fifo_push(&S->fifo, j)) {
    int stopping = S->stopping;
    df_srv_job_unref_locked(j);
    if (r->slot) {
      r->slot = 0;
      S->inflight--;
    }
    pthread_mutex_unlock(&S->mu);
    if (stopping) {
      df_serve_err_set(&err, 503, "server_error", "shutting_down", NULL,
                       "the server is shutting down");
      return df_srv_reply_err(c, r, &err, NULL, NULL);
    }
    df_serve_err_set(&err, 500, "server_error", NULL, NULL,
                     "internal error: an admitted request found the queue full");
    return df_srv_reply_err(c, r, &err, NULL, NULL);
  }
  j->slot = 1;
  r->slot = 0;
  /* a queued or generating request is not idle: MHD measures idleness from
   * the last byte moved, so a long prefill (or wait in the queue) would read
   * as a silent client; df_srv_on_completed puts the idle timeout back */
  MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
  j->conn = c;
  j->refs++; /* the queue's (then the generation thread's) reference */
  r->j = j;
  pthread_cond_signal(&S->work_cv);
  /* wait for our turn; a client that leaves the queue leaves it for good */
  while (j->state == JOB_QUEUED) {
    if (df_srv_peer_gone_locked(j)) {
      if (df_fifo_remove(&S->fifo, j)) {
        df_srv_job_finish_locked(S, j);
        df_srv_job_unref_locked(j);
      }
      pthread_mutex_unlock(&S->mu);
      return MHD_NO;
    }
    df_srv_probe_interim_locked(j);
    df_srv_timed_wait(&j->cv, &S->mu, WAIT_SLICE_MS);
  }
  if (j->state == JOB_DONE && j->shutdown) {
    pthread_mutex_unlock(&S->mu);
    df_serve_err_set(&err, 503, "server_error", "shutting_down", NULL,
                     "the server is shutting down");
    return df_srv_reply_err(c, r, &err, NULL, NULL);
  }
  if (j->req.stream) {
    j->refs++; /* the response's reference */
    S->streams++;
    pthread_mutex_unlock(&S->mu);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, j, stream_free);
    if (!resp) {
      stream_free(j);
      return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    df_srv_add_cors(resp, r);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    if (ret == MHD_YES) {
      r->status = 200;
      r->responded = 1;
    }
    return ret;
  }
  while (j->state != JOB_DONE) {
    if (df_srv_peer_gone_locked(j)) {
      pthread_mutex_unlock(&S->mu);
      return MHD_NO;
    }
    df_srv_probe_interim_locked(j);
    df_srv_timed_wait(&j->cv, &S->mu, WAIT_SLICE_MS);
  }
  pthread_mutex_unlock(&S->mu);
  /* the reply is ready: from here a client that does not read it is idle */
  MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)S->o.idle_timeout_s);
  if (j->failed) return df_srv_reply_err(c, r, &j->err, NULL, NULL);
  if (!j->finish) return MHD_NO; /* the generation saw the client leave first */
  df_serve_usage u = {(long)j->nprompt, j->n_gen, j->n_reasoning, j->cached, j->n_drafted,
                      j->n_accepted, &j->spec};
  if (j->rq) {
    choice *ch = &j->ch[0];
    df_serve_call *calls = ch->ncb ? df_xmalloc(ch->ncb * sizeof *calls) : NULL;
    for (size_t k = 0; k < ch->ncb; k++) calls[k] = ch->cb[k].c;
    df_resp_result res = {ch->reasoning.p, ch->reasoning.n, ch->content.p, ch->content.n,
                          calls, ch->ncb, ch->finish, u};
    char *body = df_serve_responses_object(j->resp_id, j->meta.created, S->model_id, j->rq, &res);
    if (j->rq->store) df_srv_resp_keep(S, j->resp_id, df_serve_responses_history(j->rq, &res));
    free(calls);
    return df_srv_reply_json(c, r, 200, body);
  }
  df_serve_choice cs[DF_SERVE_MAX_N];
  for (int i = 0; i < j->nch && i < DF_SERVE_MAX_N; i++) {
    choice *ch = &j->ch[i];
    df_serve_call *calls = ch->ncb ? df_xmalloc(ch->ncb * sizeof *calls) : NULL;
    for (size_t k = 0; k < ch->ncb; k++) calls[k] = ch->cb[k].c;
    cs[i] = (df_serve_choice){ch->reasoning.p, ch->reasoning.n, ch->content.p, ch->content.n,
                              ch->finish, ch->lp, ch->nlp, j->req.logprobs, calls, ch->ncb};
  }
  char *body = df_serve_response_choices_json(&j->meta, cs, j->nch, &u);
  for (int i = 0; i < j->nch && i < DF_SERVE_MAX_N; i++) free((void *)cs[i].calls);
  return df_srv_reply_json(c, r, 200, body);
}

/* HTTP framing: request admission, body collection, routing to a handler,
 * replies with CORS headers, and the end of a request. */

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/util.h"
#include "serve/server_int.h"

/* ------------------------------------------------------------ replies */

void df_srv_add_cors(struct MHD_Response *resp, const conn_ctx *r) {
  if (!r->origin[0]) return;
  MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->origin);
  MHD_add_response_header(resp, "Vary", "Origin");
}

enum MHD_Result df_srv_reply_body(struct MHD_Connection *c, conn_ctx *r, int status, char *body,
                                  const char *ctype, const char *hname, const char *hval) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
  if (!resp) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  if (hname) MHD_add_response_header(resp, hname, hval);
  df_srv_add_cors(resp, r);
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
  MHD_destroy_response(resp);
  if (ret == MHD_YES) {
    r->status = status;
    r->responded = 1;
  }
  return ret;
}

enum MHD_Result df_srv_reply_json(struct MHD_Connection *c, conn_ctx *r, int status, char *body) {
  return df_srv_reply_body(c, r, status, body, "application/json", NULL, NULL);
}

enum MHD_Result df_srv_reply_err(struct MHD_Connection *c, conn_ctx *r, const df_serve_err *e,
                                 const char *hname, const char *hval) {
  return df_srv_reply_body(c, r, e->status, df_serve_error_json(e), "application/json", hname,
                           hval);
}
typedef struct framing {
  const char *cl[8];
  int ncl;
  const char *te;
  int nte;
  int nhost;
} framing;

static enum MHD_Result collect_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value) {
  (void)kind;
  framing *f = cls;
  if (!value) value = "";
  if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
    if (f->ncl < 8) f->cl[f->ncl++] = value;
    else f->cl[1] = "x"; /* more than 8: malformed */
  } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
    f->te = value;
    f->nte++;
  } else if (!strcasecmp(key, MHD_HTTP_HEADER_HOST)) {
    f->nhost++;
  }
  return MHD_YES;
}

/* how much of an oversized body is read and dropped so that its 413 arrives
 * intact; past it the connection is dropped */
#define DRAIN_BYTES ((unsigned long long)16 << 20)

static int expects_continue(struct MHD_Connection *c) {
  const char *e = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
  return e && !strcasecmp(e, "100-continue");
}

static void set_complete(srv *S, conn_ctx *r, int complete) {
  if (!r->sc) return;
  pthread_mutex_lock(&S->cmu);
  r->sc->complete = complete;
  pthread_mutex_unlock(&S->cmu);
}

static enum MHD_Result reply_preflight(struct MHD_Connection *c, conn_ctx *r) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
  if (!resp) return MHD_NO;
  char allow[1024];
  df_srv_add_cors(resp, r);
  /* the answer depends on the requested headers too: a cache must keep them apart */
  MHD_add_response_header(resp, "Vary", "Access-Control-Request-Headers");
  MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
  MHD_add_response_header(
      resp, "Access-Control-Allow-Headers",
      df_serve_cors_allow_headers(
          MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers"),
          allow, sizeof allow));
  MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, resp);
  MHD_destroy_response(resp);
  if (ret == MHD_YES) {
    r->status = 204;
    r->responded = 1;
  }
  return ret;
}

enum MHD_Result df_srv_admit_or_refuse(srv *S, struct MHD_Connection *c, conn_ctx *r) {
  df_serve_err err;
  pthread_mutex_lock(&S->mu);
  int stopping = S->stopping, ok = !stopping && df_serve_admit(S->inflight, S->o.queue);
  if (ok) {
    S->inflight++;
    r->slot = 1;
  }
  pthread_mutex_unlock(&S->mu);
  if (ok) return MHD_YES;
  if (stopping) {
    df_serve_err_set(&err, 503, "server_error", "shutting_down", NULL,
                     "the server is shutting down");
    return df_srv_reply_err(c, r, &err, NULL, NULL);
  }
  df_serve_err_set(&err, 429, "requests", "rate_limit_exceeded", NULL,
                   "the server is busy with another generation%s; retry later",
                   S->o.queue ? " and its queue is full" : "");
  return df_srv_reply_err(c, r, &err, MHD_HTTP_HEADER_RETRY_AFTER, "1");
}

enum MHD_Result df_srv_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  srv *S = cls;
  conn_ctx *r = *con_cls;
  df_serve_err err;
  if (!r) {
    r = df_xcalloc(1, sizeof *r);
    *con_cls = r;
    r->t0 = df_now();
    pthread_mutex_lock(&S->mu);
    S->reqs++;
    pthread_mutex_unlock(&S->mu);
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->path, sizeof r->path, "%s", url);
    r->http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) df_srv_addr_text(ci->client_addr, r->peer, sizeof r->peer);
    const union MHD_ConnectionInfo *si =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    r->sc = si ? si->socket_context : NULL;
    if (r->sc) {
      pthread_mutex_lock(&S->cmu);
      r->sc->complete = 1; /* until it turns out a body must still arrive */
      pthread_mutex_unlock(&S->cmu);
    }
    pthread_mutex_lock(&S->cmu);
    int refuse = r->sc ? r->sc->refuse : 0;
    pthread_mutex_unlock(&S->cmu);
    if (refuse) {
      df_serve_err_set(&err, refuse, refuse == 429 ? "requests" : "server_error",
                       refuse == 429 ? "rate_limit_exceeded" : "server_busy", NULL,
                       refuse == 429 ? "this address holds too many connections "
                                       "(--max-client-connections); retry later"
                                     : "the server holds too many connections (--max-connections); "
                                       "retry later");
      MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 1u); /* then it goes */
      return df_srv_reply_err(c, r, &err, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    }
    if (df_srv_trusted(S, r->peer)) {
      /* a proxy's request: the client is the last X-Forwarded-For hop (the
       * one the proxy saw); it is logged and counted as that client */
      const char *xff = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Forwarded-For");
      if (xff && *xff) {
        const char *last = strrchr(xff, ',');
        last = last ? last + 1 : xff;
        while (*last == ' ' || *last == '\t') last++;
        size_t n = strcspn(last, " \t");
        if (n && n < sizeof r->peer) {
          memcpy(r->peer, last, n);
          r->peer[n] = 0;
        }
      }
      if (!df_srv_fwd_count(S, r->peer, 1)) {
        df_serve_err_set(&err, 429, "requests", "rate_limit_exceeded", NULL,
                         "this client has too many requests in progress "
                         "(--max-client-connections); retry later");
        return df_srv_reply_err(c, r, &err, MHD_HTTP_HEADER_RETRY_AFTER, "1");
      }
      r->fwd = 1;
    }
    framing fr = {.ncl = 0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, collect_framing, &fr);
    const char *why;
    int fst = fr.nte > 1 ? 501 : df_serve_framing(fr.cl, fr.ncl, fr.te, &why);
    if (fr.nte > 1) why = "more than one Transfer-Encoding header";
    if (fst) {
      df_serve_err_set(&err, fst, "invalid_request_error", fst == 501 ? "not_implemented" : NULL,
                       NULL, "the request's framing is refused: %s", why);
      return df_srv_reply_err(c, r, &err, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    /* RFC 9112 3.2: an HTTP/1.1 request without Host, or any with two, is a 400
     * (two Hosts could name different servers to a proxy and to us) */
    if (fr.nhost > 1 || (r->http11 && fr.nhost == 0)) {
      df_serve_err_set(&err, 400, "invalid_request_error", NULL, NULL,
                       fr.nhost ? "the request has more than one Host header"
                                : "an HTTP/1.1 request must have a Host header");
      return df_srv_reply_err(c, r, &err, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!df_serve_host_ok(host, S->o.host, S->o.allow_hosts, S->o.nallow_hosts)) {
      df_serve_err_set(&err, 403, "invalid_request_error", "host_not_allowed", NULL,
                       "the Host header '%.100s' does not name this server (start it with "
                       "--allow-host NAME to accept that name)",
                       host);
      return df_srv_reply_err(c, r, &err, NULL, NULL);
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (df_serve_cors_ok(origin, S->o.cors, S->o.ncors))
      snprintf(r->origin, sizeof r->origin, "%s", origin);
    if (!strcmp(method, MHD_HTTP_METHOD_OPTIONS) && r->origin[0]) return reply_preflight(c, r);
    const char *allow, *arg;
    r->route = df_serve_route(method, url, &allow, &arg);
    if (arg) snprintf(r->arg, sizeof r->arg, "%s", arg);
    if (r->route == DF_ROUTE_NOT_FOUND) {
      df_serve_err_set(&err, 404, "invalid_request_error", "unknown_url", NULL,
                       "Invalid URL (%.20s %.200s)", method, url);
      return df_srv_reply_err(c, r, &err, NULL, NULL);
    }
    if (r->route == DF_ROUTE_BAD_METHOD) {
      df_serve_err_set(&err, 405, "invalid_request_error", "method_not_allowed", NULL,
                       "%.20s is not allowed on %.200s (allowed: %s)", method, url, allow);
      return df_srv_reply_err(c, r, &err, MHD_HTTP_HEADER_ALLOW, allow);
    }
    if (S->o.api_key && r->route != DF_ROUTE_HEALTH &&
        !df_serve_auth_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                      MHD_HTTP_HEADER_AUTHORIZATION),
                          S->o.api_key)) {
      df_serve_err_set(&err, 401, "invalid_request_error", "invalid_api_key", NULL,
                       "Incorrect or missing API key: send 'Authorization: Bearer <key>'");
      return df_srv_reply_err(c, r, &err, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    }
    int gen = r->route == DF_ROUTE_CHAT || r->route == DF_ROUTE_COMPLETIONS ||
              r->route == DF_ROUTE_RESPONSES;
    if (gen || r->route == DF_ROUTE_TOKENIZE || r->route == DF_ROUTE_DETOKENIZE ||
        r->route == DF_ROUTE_APPLY_TEMPLATE) {
      if (!df_serve_ctype_json(
              MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE))) {
        df_serve_err_set(&err, 415, "invalid_request_error", "unsupported_media_type", NULL,
                         "POST bodies must be sent with 'Content-Type: application/json'");
        return df_srv_reply_err(c, r, &err, NULL, NULL);
      }
      /* refuse an oversized body before reading it */
      const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_CONTENT_LENGTH);
      if (cl) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(cl, &end, 10);
        if (errno || *end || v > S->o.max_request_bytes) {
          r->too_big = 1;
          /* A client that waits for "100 Continue" has sent nothing yet and
           * hears 413 now. One already sending is read to the end first:
           * closing a socket with unread bytes makes the kernel send a reset,
           * which can reach the client before it reads the 413 (curl then
           * reports "connection reset" and never sees the answer). */
          if (errno || *end || expects_continue(c) || v > S->o.max_request_bytes + DRAIN_BYTES)
            return df_srv_handle_generation(S, c, r, DF_SERVE_CHAT);
          set_complete(S, r, 0);
          return MHD_YES;
        }
      }
      if (!gen) { /* cheap and not queued: answered in this thread */
        set_complete(S, r, 0);
        return MHD_YES;
      }
      /* admit before the body is read, parsed or tokenized: a refused
       * request costs nothing but its headers */
      enum MHD_Result ar = df_srv_admit_or_refuse(S, c, r);
      if (!r->responded) set_complete(S, r, 0);
      return ar;
    }
    /* answered on the next call: MHD 0.9.75 closes a connection whose reply was
     * queued while the request was still being read, so a GET answered here
     * would say "Connection: close" and drop a request pipelined after it */
    return MHD_YES;
  }
  if (r->responded) { /* answered early: the rest of the body is dropped */
    *upload_size = 0;
    return MHD_YES;
  }
  if (!*upload_size) set_complete(S, r, 1);
  if (*upload_size) {
    size_t n = *upload_size;
    *upload_size = 0;
    r->received += n;
    if (r->too_big || r->body.n + n > S->o.max_request_bytes) {
      r->too_big = 1;
      df_sbuf_free(&r->body);
      /* A body without a length (chunked) is counted as it arrives. MHD
       * 0.9.75 cannot answer in the middle of an upload, so the rest is
       * drained and answered 413 at its end; past DRAIN_BYTES the
       * connection is dropped instead. */
      if (r->received > S->o.max_request_bytes + DRAIN_BYTES) return MHD_NO;
      return MHD_YES;
    }
    df_sbuf_add(&r->body, upload, n);
    return MHD_YES;
  }
  if (r->route == DF_ROUTE_HEALTH || r->route == DF_ROUTE_MODELS || r->route == DF_ROUTE_MODEL ||
      r->route == DF_ROUTE_METRICS)
    return df_srv_handle_get(S, c, r);
  if (r->route == DF_ROUTE_TOKENIZE || r->route == DF_ROUTE_DETOKENIZE)
    return df_srv_handle_tokenize(S, c, r);
  if (r->route == DF_ROUTE_APPLY_TEMPLATE) return df_srv_handle_apply_template(S, c, r);
  if (r->route == DF_ROUTE_RESPONSES) return df_srv_handle_responses(S, c, r);
  return df_srv_handle_generation(S, c, r,
                           r->route == DF_ROUTE_CHAT ? DF_SERVE_CHAT : DF_SERVE_COMPLETION);
}

void df_srv_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  srv *S = cls;
  conn_ctx *r = *con_cls;
  if (!r) return;
  *con_cls = NULL;
  df_srv_conn_release_slot(S, r);
  if (r->j) /* a request that ended early (cancelled, shut down) may not have put it back */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)S->o.idle_timeout_s);
  if (r->sc) {
    pthread_mutex_lock(&S->cmu);
    r->sc->t0 = df_now(); /* a kept-alive connection waits for its next request */
    r->sc->in_request = 0;
    r->sc->complete = 0;
    pthread_mutex_unlock(&S->cmu);
  }
  long np = 0, ng = 0;
  int peer_left = 0, shut = 0;
  if (r->j) {
    job *j = r->j;
    pthread_mutex_lock(&S->mu);
    /* The generation may notice the hang-up first, cancel, and end the stream
     * cleanly, so MHD reports a normal completion: the job's flag still says
     * the client left. */
    peer_left = j->gone;
    shut = j->shutdown && (j->state != JOB_DONE || !j->finish);
    if (j->state != JOB_DONE) j->gone = 1;
    if (j->state == JOB_QUEUED && df_fifo_remove(&S->fifo, j)) {
      df_srv_job_finish_locked(S, j);
      df_srv_job_unref_locked(j);
    }
    pthread_cond_broadcast(&j->cv);
    np = (long)j->nprompt;
    ng = j->n_gen;
    df_srv_job_unref_locked(j);
    pthread_mutex_unlock(&S->mu);
  }
  /* one write per line, so concurrent requests never interleave */
  char line[1024], epath[sizeof r->path * 4], emethod[sizeof r->method * 4];
  int status = r->status;
  if ((toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || peer_left) &&
      (!r->responded || r->status == 200))
    status = 499; /* the client closed the connection first (nginx's convention) */
  else if (shut && r->status == 200)
    status = 503; /* a stream cut short by the shutdown (it ends with an error frame) */
  int n = snprintf(line, sizeof line, "deltafin: %s %s %s %d tokens=%ld+%ld %.3fs\n",
                   r->peer[0] ? r->peer : "-",
                   df_serve_log_escape(emethod, sizeof emethod, r->method),
                   df_serve_log_escape(epath, sizeof epath, r->path), status, np, ng,
                   df_now() - r->t0);
  if (n > 0) {
    ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    (void)w;
  }
  df_sbuf_free(&r->body);
  if (r->fwd) df_srv_fwd_count(S, r->peer, -1);
  df_resp_req_free(r->rq); /* a /v1/responses request refused before it became a job */
  free(r->rq);
  int gen = r->route == DF_ROUTE_CHAT || r->route == DF_ROUTE_COMPLETIONS ||
            r->route == DF_ROUTE_RESPONSES;
  double t0 = r->t0;
  free(r);
  pthread_mutex_lock(&S->mu);
  if (status == 429) S->m_429++;
  if (status == 503) S->m_503++;
  if (gen && status == 200) df_serve_hist_add(&S->m_latency, df_now() - t0);
  S->reqs--;
  pthread_cond_broadcast(&S->work_cv); /* the shutdown waits for the last reply */
  pthread_mutex_unlock(&S->mu);
}

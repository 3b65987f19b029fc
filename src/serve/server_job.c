/* The job lifecycle: references, finishing, the admission slot, and noticing
 * a client that went away. */

#include <poll.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "serve/server_int.h"

/* ---------------------------------------------------------------- jobs */

void df_srv_job_unref_locked(job *j) {
  if (--j->refs > 0) return;
  if (j->peer_fd >= 0) close(j->peer_fd);
  pthread_cond_destroy(&j->cv);
  df_serve_req_free(&j->req);
  free(j->prompt);
  df_sbuf_free(&j->out);
  df_resp_stream_free(j->rs);
  df_resp_req_free(j->rq);
  free(j->rq);
  for (int i = 0; i < j->nch; i++) {
    df_sbuf_free(&j->ch[i].reasoning);
    df_sbuf_free(&j->ch[i].content);
    free(j->ch[i].lp);
    for (size_t k = 0; k < j->ch[i].ncb; k++) {
      df_sbuf_free(&j->ch[i].cb[k].name);
      df_sbuf_free(&j->ch[i].cb[k].args);
    }
    free(j->ch[i].cb);
  }
  free(j->ch);
  df_sbuf_free(&j->tok_r);
  df_sbuf_free(&j->tok_c);
  df_gentext_free(&j->gt);
  df_sbuf_free(&j->frames);
  free(j);
}

/* Under S->mu: the job leaves the system (ran, left the queue or was
 * cancelled there) and gives its admission slot back. */
void df_srv_job_finish_locked(srv *S, job *j) {
  j->state = JOB_DONE;
  if (j->slot) {
    j->slot = 0;
    S->inflight--;
  }
}

void df_srv_conn_release_slot(srv *S, conn_ctx *r) {
  pthread_mutex_lock(&S->mu);
  if (r->slot) {
    r->slot = 0;
    S->inflight--;
  }
  pthread_mutex_unlock(&S->mu);
}

/* Under S->mu: has the client hung up? Only a poll: nothing is read. */
void df_srv_note_cancel_locked(job *j) {
  if (j->prefilled_at_cancel < 0) j->prefilled_at_cancel = j->prefilled;
}

/* A FIN alone does not say the client left: `nc -N` and others shut their
 * sending side after the request and wait for the answer. Such a client is
 * only gone once the socket errs or hangs up, which a closed peer does when
 * it is sent something (it answers with a reset): see the probes below. An
 * HTTP/1.0 client cannot be probed, so its FIN counts as leaving. */
int df_srv_peer_gone_locked(job *j) {
  if (j->gone) return 1;
  if (j->peer_fd < 0) return 0;
  struct pollfd p = {.fd = j->peer_fd, .events = POLLRDHUP};
  if (poll(&p, 1, 0) == 1) {
    if (p.revents & (POLLHUP | POLLERR)) {
      j->gone = 1;
    } else if (p.revents & POLLRDHUP) {
      if (!j->http11) j->gone = 1;
      else if (!j->fin_seen) j->fin_seen = 1, j->next_probe = 0;
    }
    if (j->gone) df_srv_note_cancel_locked(j);
  }
  return j->gone;
}

/* Whether a half-closed client is still there: due every second after its
 * FIN, sent only where bytes may go out (see the callers). */
int df_srv_probe_due_locked(job *j) {
  if (!j->fin_seen || j->gone || j->peer_fd < 0) return 0;
  double now = df_now();
  if (now < j->next_probe) return 0;
  j->next_probe = now + 1.0;
  return 1;
}

/* Before the response is queued the connection thread owns the socket, and
 * an interim 1xx response is allowed in front of the final one. */
void df_srv_probe_interim_locked(job *j) {
  if (!df_srv_probe_due_locked(j)) return;
  static const char msg[] = "HTTP/1.1 102 Processing\r\n\r\n";
  if (send(j->peer_fd, msg, sizeof msg - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    j->gone = 1;
    df_srv_note_cancel_locked(j);
  }
}

void df_srv_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_nsec += (long)ms * 1000000L;
  ts.tv_sec += ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  pthread_cond_timedwait(cv, mu, &ts);
}

void df_srv_cond_init_mono(pthread_cond_t *cv) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
}

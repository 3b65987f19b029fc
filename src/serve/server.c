/* df_serve_run: start-up, the threads, signals and shutdown. */

#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "serve/server_int.h"

/* After the first SIGINT/SIGTERM the shutdown waits for the running
 * generation to stop; a second one does not wait for anything. */
static sigset_t stop_sigs; /* SIGINT + SIGTERM; outlives df_serve_run for this thread */

static void *second_signal(void *arg) {
  (void)arg;
  double first = df_now();
  int sig = 0;
  /* timeout(1) and some supervisors deliver one stop twice within
   * microseconds (to the process and to its group): only a signal sent
   * later is a second request */
  while (sigwait(&stop_sigs, &sig) || df_now() - first < 0.5) {
  }
  static const char msg[] = "deltafin: second signal: exiting now\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(128 + sig);
}

void df_serve_opts_default(df_serve_opts *o) {
  memset(o, 0, sizeof *o);
  o->host = "127.0.0.1";
  o->port = 8000;
  o->queue = 4; /* a second request waits, as llama-server and Ollama do */
  o->max_request_bytes = 1u << 20;
  o->idle_timeout_s = 60;
  o->request_timeout_s = 30;
  o->max_client_conns = 256;
  o->max_conns = 1000;
  o->reuse_mb = 1024;
}

int df_serve_run(df_engine *en, const df_serve_opts *o, df_err *e) {
  srv S;
  memset(&S, 0, sizeof S);
  S.en = en;
  S.o = *o;
  S.tok = df_engine_tok(en);
  S.model_id = o->model_id ? o->model_id : df_engine_model_id(en);
  const df_config *cfg = df_engine_config(en);
  S.max_pos = cfg->max_pos;
  S.reuse_max_bytes = (size_t)o->reuse_mb << 20;
  S.started = (long long)time(NULL);
  S.limits.model_id = S.model_id;
  S.limits.vocab = df_tok_vocab_size(S.tok);
  for (int i = 0; i < o->nforced; i++)
    if (o->forced_ids[i] >= S.limits.vocab)
      return df_err_set(e, "--debug-output-ids: id %d is outside the vocabulary (%d)",
                        o->forced_ids[i], S.limits.vocab);
  /* As `deltafin run`: a chat ends at <|end_of_msg|>; a plain completion at
   * the end-of-text id (which run leaves to --stop). */
  int eom = df_tok_special_id(S.tok, "<|end_of_msg|>");
  S.chat_stop[S.nchat_stop++] = eom >= 0 ? eom : cfg->eos_id;
  if (cfg->eos_id >= 0) S.text_stop[S.ntext_stop++] = cfg->eos_id;
  S.sp_open = df_tok_special_id(S.tok, "<|open|>");
  S.sp_close = df_tok_special_id(S.tok, "<|close|>");
  S.sp_sep = df_tok_special_id(S.tok, "<|sep|>");

  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  char portstr[16];
  snprintf(portstr, sizeof portstr, "%d", o->port);
  int gai = getaddrinfo(o->host, portstr, &hints, &ai);
  if (gai) return df_err_set(e, "--host %s: %s", o->host, gai_strerror(gai));

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);

  pthread_mutex_init(&S.mu, NULL);
  df_srv_cond_init_mono(&S.work_cv);
  pthread_mutex_init(&S.cmu, NULL);
  pthread_mutex_init(&S.rmu, NULL);
  df_srv_cond_init_mono(&S.wd_cv);
  pthread_t wdt;
  int have_wd = o->request_timeout_s > 0 && !pthread_create(&wdt, NULL, df_srv_watchdog, &S);
  df_fifo_init(&S.fifo, df_serve_fifo_cap(o->queue));
  S.sess = df_session_new(en);
  S.stats_json = df_engine_stats_json(en);
  pthread_t wt;
  if (!S.sess || pthread_create(&wt, NULL, df_srv_worker, &S)) {
    freeaddrinfo(ai);
    if (S.sess) df_session_free(S.sess);
    df_fifo_free(&S.fifo);
    return df_err_set(e, "serve: cannot start the generation thread");
  }

  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                   MHD_USE_ITC;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  struct MHD_Daemon *d = MHD_start_daemon(
      flags, (uint16_t)o->port, NULL, NULL, df_srv_on_request, &S, MHD_OPTION_SOCK_ADDR,
      ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, df_srv_on_completed, &S,
      MHD_OPTION_NOTIFY_CONNECTION, df_srv_on_connection, &S, MHD_OPTION_URI_LOG_CALLBACK,
      /* the caps are kept in df_srv_on_connection, which answers over them instead
       * of dropping the connection unanswered; MHD's limit is only a backstop */
      df_srv_on_uri, &S, MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_conns + 64u,
      MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1u << 20),
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->idle_timeout_s,
      MHD_OPTION_END);
  int rc = 0;
  if (!d) {
    rc = df_err_set(e, "serve: cannot listen on %s:%d (port in use or address not local?)",
                    o->host, o->port);
  } else {
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : o->port;
    int v6 = ai->ai_family == AF_INET6;
    df_log_info("serving '%s' on http://%s%s%s:%d/v1 (queue %d, max request %zu bytes%s)",
                S.model_id, v6 ? "[" : "", o->host, v6 ? "]" : "", port, o->queue,
                o->max_request_bytes, o->api_key ? ", API key required" : "");
    int sig = 0;
    while (sigwait(&sigs, &sig)) {
    }
    df_log_info("%s: shutting down (a second signal exits at once)",
                sig == SIGINT ? "SIGINT" : "SIGTERM");
    pthread_t st;
    stop_sigs = sigs;
    if (!pthread_create(&st, NULL, second_signal, NULL)) pthread_detach(st);
    MHD_socket ls = MHD_quiesce_daemon(d);
    pthread_mutex_lock(&S.mu);
    S.stopping = 1;
    if (S.running) {
      S.running->shutdown = 1;
      df_srv_note_cancel_locked(S.running);
    }
    job *j;
    while ((j = df_fifo_pop(&S.fifo))) {
      df_srv_job_finish_locked(&S, j);
      j->shutdown = 1;
      pthread_cond_broadcast(&j->cv);
      df_srv_job_unref_locked(j);
    }
    if (S.running) pthread_cond_broadcast(&S.running->cv);
    pthread_cond_broadcast(&S.work_cv);
    pthread_mutex_unlock(&S.mu);
    pthread_join(wt, NULL);
    /* Every request begun gets its reply sent before the daemon stops: a
     * 503 (or its result) is only queued on the connection, and stopping the
     * daemon first would close the socket with nothing sent. Streams send
     * their last frames (the cancellation notice). A client that does not
     * read its reply is not waited for past 10 s. */
    pthread_mutex_lock(&S.mu);
    for (int k = 0; (S.streams > 0 || S.reqs > 0) && k < 10000 / WAIT_SLICE_MS; k++)
      df_srv_timed_wait(&S.work_cv, &S.mu, WAIT_SLICE_MS);
    pthread_mutex_unlock(&S.mu);
    MHD_stop_daemon(d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
  }
  if (!d) {
    pthread_mutex_lock(&S.mu);
    S.stopping = 1;
    pthread_cond_broadcast(&S.work_cv);
    pthread_mutex_unlock(&S.mu);
    pthread_join(wt, NULL);
  }
  if (have_wd) {
    pthread_mutex_lock(&S.cmu);
    S.wd_stop = 1;
    pthread_cond_broadcast(&S.wd_cv);
    pthread_mutex_unlock(&S.cmu);
    pthread_join(wdt, NULL);
  }
  pthread_cond_destroy(&S.wd_cv);
  pthread_mutex_destroy(&S.cmu);
  df_srv_resp_free_all(&S);
  pthread_mutex_destroy(&S.rmu);
  freeaddrinfo(ai);
  df_session_free(S.sess);
  while (S.nsnaps) df_srv_drop_kept(&S, S.nsnaps - 1);
  free(S.stats_json);
  free(S.live_ids);
  df_fifo_free(&S.fifo);
  pthread_cond_destroy(&S.work_cv);
  pthread_mutex_destroy(&S.mu);
  return rc;
}

#include "serve/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "serve/gentext.h"
#include "serve/request.h"
#include "serve/response.h"
#include "serve/route.h"
#include "serve/stop.h"

/* How often a waiting connection thread looks at its socket for a client that
 * went away (a poll, no data is read). */
#define WAIT_SLICE_MS 20
/* SSE bytes buffered per stream before the generation waits for the client. */
#define STREAM_HIGH_WATER (1u << 20)

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state;

typedef struct srv srv;

#define MAX_KEPT 8
typedef struct kept {
  df_session_snap *snap;
  int *ids, n;
  unsigned long long used;
} kept;

/* One generation request. Shared by its connection (the request context and,
 * when streaming, the response) and the generation thread; every field below
 * the line is guarded by srv.mu, refs counts the holders. */
/* One choice's results (generation thread only until the job is DONE). */
typedef struct choice {
  df_sbuf reasoning, content; /* non-streamed text */
  const char *finish;
  df_serve_lp *lp; /* logprobs of the visible tokens */
  size_t nlp, caplp;
  size_t lp_sent, text_sent; /* streams: entries and content bytes sent */
  long n_gen, n_reasoning;
  struct callbuf {
    df_serve_call c;
    df_sbuf name, args;
  } *cb; /* tool calls made */
  size_t ncb, capcb;
} choice;

typedef struct job {
  srv *S;
  df_serve_req req;
  int *prompt;
  size_t nprompt;
  df_serve_meta meta;
  /* ---- guarded by S->mu ---- */
  int refs;
  job_state state;
  int slot;     /* holds one of S->inflight (released when DONE) */
  int gone;     /* the client went away */
  int shutdown; /* cancelled by server shutdown */
  int peer_fd;  /* dup of the client socket, polled for hang-up; -1 when done */
  int http11;   /* the client speaks HTTP/1.1 (it must accept 1xx responses) */
  int fin_seen; /* the client shut its sending side: half-closed or gone, see probe */
  double next_probe;
  pthread_cond_t cv;
  df_sbuf out; /* SSE bytes not yet handed to MHD */
  size_t out_off;
  long n_gen;
  long prefilled;         /* prompt positions run so far */
  long cached;            /* prompt positions taken from a kept state (choice 0) */
  int start;              /* the current choice's first prompt position to run */
  int want_snap;          /* take a snapshot when the prompt is done */
  long prefilled_at_cancel; /* ... when the hang-up or shutdown was first seen (-1: not yet) */
  /* ---- generation thread only until DONE ---- */
  choice *ch;
  int nch, cur;
  long n_reasoning;
  df_sbuf tok_r, tok_c; /* streams: text released by the current token */
  const char *finish;   /* set when every choice finished */
  int failed;
  df_serve_err err;
  df_gentext gt;
  df_chat_parser *cp; /* tools: the model's output parsed for tool calls instead of gt */
  int tok_reasoning;  /* the current token gave reasoning text (cp) */
  long n_reasoning_tok;
  int forced_k; /* --debug-output-ids: the next one */
  df_jm jm;     /* structured output: where the reply is in the grammar */
  df_sbuf frames; /* SSE frames built for the current token */
} job;

struct srv {
  df_engine *en;
  const df_tok *tok;
  df_serve_opts o;
  const char *model_id;
  long max_pos;
  long long started;
  df_serve_limits limits;
  int chat_stop[2], nchat_stop;
  int text_stop[2], ntext_stop;

  pthread_mutex_t mu;
  pthread_cond_t work_cv;
  df_fifo fifo;
  job *running;
  int inflight; /* admitted generation requests not finished (df_serve_admit) */
  int stopping;
  int streams; /* streamed responses still being sent */
  df_session *sess; /* generation thread only */
  /* conversation reuse (generation thread only): the ids the live session
   * covers, and snapshots taken at the end of recent prompts (least
   * recently used dropped first, within reuse_max_bytes) */
  int *live_ids, nlive, live_ok;
  kept snaps[MAX_KEPT];
  int nsnaps;
  unsigned long long use_clock;
  size_t reuse_max_bytes;
  /* counters for /metrics (guarded by mu) */
  unsigned long long m_requests, m_prompt_tokens, m_cached_tokens, m_gen_tokens, m_kept_bytes;
  int m_kept_states;
  double m_prefill_s, m_decode_s;
  char *stats_json; /* the engine's statistics after the last job */

  /* open connections, for the request deadline (watchdog thread) */
  pthread_mutex_t cmu;
  pthread_cond_t wd_cv;
  struct sock_ctx *socks;
  int wd_stop;
};

/* Per-connection state (MHD's socket context): when the current request
 * began and whether all of it has arrived. */
typedef struct sock_ctx {
  int fd;
  double t0;
  int complete, killed;
  struct sock_ctx *prev, *next;
} sock_ctx;

/* Per-request state of a connection (MHD's con_cls). */
typedef struct conn_ctx {
  double t0;
  char method[16], path[200], peer[64];
  df_route route;
  char arg[200];
  df_sbuf body;
  size_t received;
  int too_big, responded, status;
  int slot; /* admitted: holds one of S->inflight until a job takes it over */
  int http11;
  char origin[256]; /* an allowed CORS origin, echoed back; "" when none */
  sock_ctx *sc;
  job *j;
} conn_ctx;

/* ---------------------------------------------------------------- jobs */

static void job_unref_locked(job *j) {
  if (--j->refs > 0) return;
  if (j->peer_fd >= 0) close(j->peer_fd);
  pthread_cond_destroy(&j->cv);
  df_serve_req_free(&j->req);
  free(j->prompt);
  df_sbuf_free(&j->out);
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
static void job_finish_locked(srv *S, job *j) {
  j->state = JOB_DONE;
  if (j->slot) {
    j->slot = 0;
    S->inflight--;
  }
}

static void conn_release_slot(srv *S, conn_ctx *r) {
  pthread_mutex_lock(&S->mu);
  if (r->slot) {
    r->slot = 0;
    S->inflight--;
  }
  pthread_mutex_unlock(&S->mu);
}

/* Under S->mu: has the client hung up? Only a poll: nothing is read. */
static void note_cancel_locked(job *j) {
  if (j->prefilled_at_cancel < 0) j->prefilled_at_cancel = j->prefilled;
}

/* A FIN alone does not say the client left: `nc -N` and others shut their
 * sending side after the request and wait for the answer. Such a client is
 * only gone once the socket errs or hangs up, which a closed peer does when
 * it is sent something (it answers with a reset): see the probes below. An
 * HTTP/1.0 client cannot be probed, so its FIN counts as leaving. */
static int peer_gone_locked(job *j) {
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
    if (j->gone) note_cancel_locked(j);
  }
  return j->gone;
}

/* Whether a half-closed client is still there: due every second after its
 * FIN, sent only where bytes may go out (see the callers). */
static int probe_due_locked(job *j) {
  if (!j->fin_seen || j->gone || j->peer_fd < 0) return 0;
  double now = df_now();
  if (now < j->next_probe) return 0;
  j->next_probe = now + 1.0;
  return 1;
}

/* Before the response is queued the connection thread owns the socket, and
 * an interim 1xx response is allowed in front of the final one. */
static void probe_interim_locked(job *j) {
  if (!probe_due_locked(j)) return;
  static const char msg[] = "HTTP/1.1 102 Processing\r\n\r\n";
  if (send(j->peer_fd, msg, sizeof msg - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    j->gone = 1;
    note_cancel_locked(j);
  }
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_nsec += (long)ms * 1000000L;
  ts.tv_sec += ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  pthread_cond_timedwait(cv, mu, &ts);
}

static void cond_init_mono(pthread_cond_t *cv) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
}

/* ------------------------------------------------------ generation side */

/* The gentext sink: text a client may see now. Streams collect a token's
 * text and turn it into frames after the token (emit), so that a content
 * frame carries the log-probabilities of the tokens it covers. */
static void deliver(void *ud, df_channel ch, const char *text, size_t n) {
  job *j = ud;
  choice *c = &j->ch[j->cur];
  if (j->req.stream)
    df_sbuf_add(ch == DF_CH_REASONING ? &j->tok_r : &j->tok_c, text, n);
  else
    df_sbuf_add(ch == DF_CH_REASONING ? &c->reasoning : &c->content, text, n);
}

/* Streams: the frames for the text released since the last call. at_end
 * also sends log-probabilities still waiting for text (held back by a stop
 * matcher or a partial character). */
static void emit(job *j, int at_end) {
  choice *c = &j->ch[j->cur];
  int chat = j->req.kind == DF_SERVE_CHAT;
  if (j->tok_r.n) {
    df_serve_sse_delta_lp(&j->frames, &j->meta, j->cur, NULL, "reasoning_content", j->tok_r.p,
                          j->tok_r.n, NULL, NULL, 0, 0, 0);
    j->tok_r.n = 0;
  }
  size_t pend = c->nlp - c->lp_sent;
  if (j->tok_c.n || (at_end && pend && j->req.logprobs)) {
    df_serve_sse_delta_lp(&j->frames, &j->meta, j->cur, NULL, chat ? "content" : NULL,
                          j->tok_c.p ? j->tok_c.p : "", j->tok_c.n, NULL, c->lp + c->lp_sent,
                          pend, j->req.logprobs, c->text_sent);
    c->lp_sent = c->nlp;
    c->text_sent += j->tok_c.n;
    j->tok_c.n = 0;
  }
}

/* Hands the frames built so far to the connection. */
static void publish(job *j) {
  srv *S = j->S;
  pthread_mutex_lock(&S->mu);
  if (j->frames.n) {
    df_sbuf_add(&j->out, j->frames.p, j->frames.n);
    pthread_cond_broadcast(&j->cv);
  }
  pthread_mutex_unlock(&S->mu);
  j->frames.n = 0;
}

/* The chosen token's log-probability and the alternatives, from the logits
 * it was drawn from (the model's distribution, before penalties and
 * temperature). Only tokens of the visible text count: chat's response
 * channel (not its reasoning, no special tokens); a completion's every token
 * but the end of text. */
static void record_logprob(job *j, int id) {
  srv *S = j->S;
  if (j->req.kind == DF_SERVE_CHAT) {
    if (df_tok_is_special(S->tok, id) || j->gt.last_ch != DF_CH_RESPONSE) return;
  } else if (id == j->gt.eot_id) {
    return; /* ends the text, adds none (a completion shows other specials by name) */
  }
  choice *c = &j->ch[j->cur];
  if (c->nlp == c->caplp) {
    c->caplp = c->caplp ? c->caplp * 2 : 64;
    c->lp = df_xrealloc(c->lp, c->caplp * sizeof *c->lp);
  }
  df_serve_lp *e = &c->lp[c->nlp++];
  int top[DF_SERVE_MAX_TOP_LOGPROBS];
  double tlp[DF_SERVE_MAX_TOP_LOGPROBS];
  int ntop = j->req.top_logprobs;
  e->lp = df_sample_logprobs(df_session_logits(S->sess), S->limits.vocab, id, ntop, top, tlp);
  e->p = df_tok_piece(S->tok, id, &e->n);
  e->ntop = ntop;
  for (int k = 0; k < ntop; k++) {
    e->top[k].p = df_tok_piece(S->tok, top[k], &e->top[k].n);
    e->top[k].lp = tlp[k];
  }
}

/* Tool-using requests: the release's output parser's events. */
static void on_chat_event(const df_chat_event *ev, void *ctx) {
  job *j = ctx;
  choice *c = &j->ch[j->cur];
  switch (ev->kind) {
    case DF_CHAT_EV_REASONING:
      j->tok_reasoning = 1;
      deliver(j, DF_CH_REASONING, ev->text, ev->len);
      break;
    case DF_CHAT_EV_CONTENT:
      deliver(j, DF_CH_RESPONSE, ev->text, ev->len);
      break;
    case DF_CHAT_EV_CALL_BEGIN: {
      if (c->ncb == c->capcb) {
        c->capcb = c->capcb ? 2 * c->capcb : 4;
        c->cb = df_xrealloc(c->cb, c->capcb * sizeof *c->cb);
      }
      struct callbuf *b = &c->cb[c->ncb++];
      memset(b, 0, sizeof *b);
      df_sbuf_add(&b->name, ev->text, ev->len);
      df_sbuf_add(&b->args, "", 0);
      df_serve_meta tmp;
      df_serve_meta_init(&tmp, DF_SERVE_CHAT, "", 0); /* a fresh random suffix */
      snprintf(b->c.id, sizeof b->c.id, "call_%.24s", tmp.id + strlen("chatcmpl-"));
      if (j->req.stream) {
        emit(j, 0); /* text before the call goes first */
        b->c.name = b->name.p;
        b->c.nname = b->name.n;
        df_serve_sse_tool_delta(&j->frames, &j->meta, j->cur, (int)c->ncb - 1, &b->c, "", 0);
      }
      break;
    }
    case DF_CHAT_EV_CALL_ARGS:
      if (ev->call >= 0 && (size_t)ev->call < c->ncb) {
        df_sbuf_add(&c->cb[ev->call].args, ev->text, ev->len);
        if (j->req.stream)
          df_serve_sse_tool_delta(&j->frames, &j->meta, j->cur, ev->call, NULL, ev->text, ev->len);
      }
      break;
    default:
      break;
  }
}

static int on_token(void *ud, int id) {
  job *j = ud;
  srv *S = j->S;
  if (S->o.token_delay_ms > 0) usleep((useconds_t)S->o.token_delay_ms * 1000u);
  int forced_end = 0;
  if (S->o.nforced) {
    id = S->o.forced_ids[j->forced_k < S->o.nforced ? j->forced_k : S->o.nforced - 1];
    forced_end = ++j->forced_k >= S->o.nforced;
  }
  if (j->req.grammar && !df_tok_is_special(S->tok, id)) {
    size_t pn;
    const uint8_t *pp = df_tok_piece(S->tok, id, &pn);
    df_jm_feed(&j->jm, pp, pn);
  }
  if (j->cp) {
    j->tok_reasoning = 0;
    df_chat_parser_push(j->cp, id, on_chat_event, j);
    if (j->tok_reasoning) j->n_reasoning_tok++;
  }
  int was_stopped = j->gt.stopped;
  /* tools: the message ends at <|end_of_msg|> as the parser sees it */
  int stopped = j->cp ? df_chat_parser_ended(j->cp) : df_gentext_push(&j->gt, id);
  if (j->cp && stopped) j->gt.stopped = 1; /* the message is complete: finish "stop" */
  if (j->req.logprobs && !was_stopped && !j->cp) record_logprob(j, id);
  if (j->req.stream) emit(j, 0);
  pthread_mutex_lock(&S->mu);
  j->n_gen++;
  if (j->frames.n) {
    df_sbuf_add(&j->out, j->frames.p, j->frames.n);
    pthread_cond_broadcast(&j->cv);
  }
  /* a slow reader holds the generation back instead of growing the buffer */
  while (j->out.n - j->out_off > STREAM_HIGH_WATER && !peer_gone_locked(j) && !j->shutdown)
    timed_wait(&j->cv, &S->mu, WAIT_SLICE_MS);
  int cancel = peer_gone_locked(j) || j->shutdown;
  pthread_mutex_unlock(&S->mu);
  j->frames.n = 0;
  return cancel || stopped || forced_end;
}

/* Structured output: every token whose bytes would leave the reply no longer
 * a prefix of an accepted document is masked; specials are masked but for
 * the end of the message once the document is complete (and then only it). */
static void grammar_mask(void *ud, float *lg) {
  job *j = ud;
  srv *S = j->S;
  int V = S->limits.vocab;
  for (int id = 0; id < V; id++) {
    if (df_tok_is_special(S->tok, id)) {
      if (!(j->jm.done && id == S->chat_stop[0])) lg[id] = -INFINITY;
      continue;
    }
    size_t pn;
    const uint8_t *pp = df_tok_piece(S->tok, id, &pn);
    if (j->jm.done || !pn || !df_jm_accepts(&j->jm, pp, pn)) lg[id] = -INFINITY;
  }
}

/* df_generate's cancel poll: runs after every layer, so a long prefill stops
 * within a layer of the hang-up or the shutdown. */
static int gen_cancelled(void *ud) {
  job *j = ud;
  srv *S = j->S;
  pthread_mutex_lock(&S->mu);
  int cancel = peer_gone_locked(j) || j->shutdown;
  pthread_mutex_unlock(&S->mu);
  return cancel;
}

static int prefix_of(const int *a, int na, const int *b, int nb) {
  return na <= nb && !memcmp(a, b, sizeof(int) * (size_t)na);
}

/* At the end of the prompt: its state is kept (a later prompt extending it
 * skips this prefill, and so do the job's further choices), unless it would
 * take more than --reuse-mb. */
static void drop_kept(srv *S, int i) {
  df_session_snap_free(S->snaps[i].snap);
  free(S->snaps[i].ids);
  S->snaps[i] = S->snaps[--S->nsnaps];
}

static size_t kept_bytes(const srv *S) {
  size_t b = 0;
  for (int i = 0; i < S->nsnaps; i++) b += df_session_snap_bytes(S->snaps[i].snap);
  return b;
}

static void keep_prompt_state(srv *S, job *j) {
  size_t need = df_session_state_bytes(S->sess);
  if (need > S->reuse_max_bytes) return;
  for (int i = 0; i < S->nsnaps; i++)
    if (S->snaps[i].n == (int)j->nprompt && prefix_of(S->snaps[i].ids, S->snaps[i].n, j->prompt,
                                                      (int)j->nprompt)) {
      S->snaps[i].used = ++S->use_clock;
      return;
    }
  while (S->nsnaps && (S->nsnaps == MAX_KEPT || kept_bytes(S) + need > S->reuse_max_bytes)) {
    int lru = 0;
    for (int i = 1; i < S->nsnaps; i++)
      if (S->snaps[i].used < S->snaps[lru].used) lru = i;
    drop_kept(S, lru);
  }
  kept *k = &S->snaps[S->nsnaps++];
  k->snap = df_session_snapshot(S->sess);
  k->ids = df_xmalloc(sizeof(int) * (j->nprompt ? j->nprompt : 1));
  memcpy(k->ids, j->prompt, sizeof(int) * j->nprompt);
  k->n = (int)j->nprompt;
  k->used = ++S->use_clock;
}

static void on_prefill(void *ud, int done) {
  job *j = ud;
  srv *S = j->S;
  pthread_mutex_lock(&S->mu);
  j->prefilled = j->start + done;
  pthread_mutex_unlock(&S->mu);
  if (j->want_snap && j->start + done == (int)j->nprompt) keep_prompt_state(S, j);
}

/* Where a prompt can start: the live session if the prompt extends the ids
 * it covers, else the kept prompt snapshot if it extends that, else 0 (a
 * reset). Either way the results are those of a full prefill (the forward
 * pass is the same for any batch split). Returns the positions skipped. */
static int reuse_start(srv *S, job *j) {
  int np = (int)j->nprompt;
  if (!S->reuse_max_bytes) {
    df_session_reset(S->sess);
    return 0;
  }
  /* at least one position to run, or logits already there for the last */
  int live = S->live_ok && S->nlive > 0 && prefix_of(S->live_ids, S->nlive, j->prompt, np) &&
                     (S->nlive < np || df_session_has_logits(S->sess))
                 ? S->nlive
                 : 0;
  int best = -1;
  for (int i = 0; i < S->nsnaps; i++) {
    kept *k = &S->snaps[i];
    if (k->n > live && (best < 0 || k->n > S->snaps[best].n) && (k->n < np || k->n == np) &&
        prefix_of(k->ids, k->n, j->prompt, np))
      best = i;
  }
  if (best >= 0) {
    df_session_restore(S->sess, S->snaps[best].snap);
    S->snaps[best].used = ++S->use_clock;
    if (S->snaps[best].n < np || df_session_has_logits(S->sess)) return S->snaps[best].n;
  } else if (live) {
    return live;
  }
  df_session_reset(S->sess);
  return 0;
}

/* The engine's counters are the generation thread's to read: it copies them
 * out after each job for /metrics. */
static void publish_stats(srv *S) {
  char *sj = df_engine_stats_json(S->en);
  size_t kb = kept_bytes(S);
  pthread_mutex_lock(&S->mu);
  free(S->stats_json);
  S->stats_json = sj;
  S->m_kept_bytes = kb;
  S->m_kept_states = S->nsnaps;
  pthread_mutex_unlock(&S->mu);
}

/* Runs the job's choices one after another (n > 1 is sequential: one
 * session). Choice i > 0 draws with a seed derived from the request's. */
static void run_job(srv *S, job *j) {
  df_gen_opts go;
  df_gen_opts_default(&go);
  go.max_new = j->req.max_tokens > 0 ? (int)j->req.max_tokens : (int)(S->max_pos - (long)j->nprompt);
  if (j->req.kind == DF_SERVE_CHAT) {
    go.stop_ids = S->chat_stop;
    go.nstop = S->nchat_stop;
  } else {
    go.stop_ids = S->text_stop;
    go.nstop = S->ntext_stop;
  }
  df_sample_opts so;
  df_sample_opts_default(&so);
  so.temperature = (float)j->req.temperature;
  so.top_p = (float)j->req.top_p;
  so.top_k = j->req.top_k;
  so.min_p = (float)j->req.min_p;
  so.repeat_penalty = (float)j->req.repeat_penalty;
  so.presence_penalty = (float)j->req.presence_penalty;
  so.frequency_penalty = (float)j->req.frequency_penalty;
  so.bias = j->req.bias;
  so.nbias = j->req.nbias;
  go.temperature = so.temperature;
  go.top_p = so.top_p;
  go.sampling = &so;
  uint64_t seed = j->req.seed;
  if (!j->req.has_seed && getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
    seed = (uint64_t)time(NULL);
  go.on_token = on_token;
  if (j->req.grammar) go.mask = grammar_mask;
  go.cancel = gen_cancelled;
  go.on_prefill = on_prefill;
  go.ud = j;
  j->nch = j->req.n > 0 ? j->req.n : 1;
  j->ch = df_xcalloc((size_t)j->nch, sizeof *j->ch);

  df_gen_stats st;
  memset(&st, 0, sizeof st);
  df_err e;
  int rc = 0, gone = 0, shutdown = 0, stopped = 0;
  long total_gen = 0, total_reasoning = 0;
  for (int ci = 0; ci < j->nch; ci++) {
    j->cur = ci;
    choice *c = &j->ch[ci];
    go.seed = seed;
    if (ci > 0) {
      uint64_t x = seed + (uint64_t)ci;
      go.seed = df_sample_splitmix(&x);
    }
    df_gentext_init(&j->gt, j->req.kind, S->tok, S->ntext_stop ? S->text_stop[0] : -1,
                    j->req.stop, j->req.stop_len, j->req.nstop, deliver, j);
    j->forced_k = 0;
    if (j->req.grammar) df_jm_init(&j->jm, j->req.grammar);
    if (j->req.tools_json || j->req.grammar) {
      j->cp = df_chat_parser_new(S->tok, j->req.grammar ? 0 : 1);
      j->n_reasoning_tok = 0;
    }
    if (j->req.stream && j->req.kind == DF_SERVE_CHAT) {
      df_serve_sse_delta_lp(&j->frames, &j->meta, ci, "assistant", "content", "", 0, NULL, NULL,
                            0, 0, 0);
      publish(j);
    }
    j->start = reuse_start(S, j);
    if (ci == 0) j->cached = j->start;
    j->want_snap = S->reuse_max_bytes && j->start < (int)j->nprompt;
    S->live_ok = 0; /* until this generation ends cleanly */
    int *ids = NULL, nids = 0;
    memset(&st, 0, sizeof st);
    rc = df_generate(S->sess, j->prompt + j->start, (int)j->nprompt - j->start, &go, &ids, &nids,
                     &st, &e);
    if (!rc && st.finish != DF_FINISH_CANCEL && S->reuse_max_bytes) {
      /* the live state covers the prompt and every new id but the last
       * (which was drawn, not run) */
      int nl = (int)j->nprompt + (nids > 0 ? nids - 1 : 0);
      S->live_ids = df_xrealloc(S->live_ids, sizeof(int) * (size_t)(nl ? nl : 1));
      memcpy(S->live_ids, j->prompt, sizeof(int) * j->nprompt);
      if (nids > 1) memcpy(S->live_ids + j->nprompt, ids, sizeof(int) * (size_t)(nids - 1));
      S->nlive = nl;
      S->live_ok = 1;
    }
    free(ids);
    pthread_mutex_lock(&S->mu);
    S->m_prefill_s += st.prefill_s;
    S->m_decode_s += st.decode_s;
    pthread_mutex_unlock(&S->mu);

    pthread_mutex_lock(&S->mu);
    gone = peer_gone_locked(j);
    shutdown = j->shutdown;
    long at_cancel = j->prefilled_at_cancel;
    pthread_mutex_unlock(&S->mu);
    if (!rc && st.finish == DF_FINISH_CANCEL && j->start + st.n_prefilled < (int)j->nprompt)
      /* how far past the cancellation the prefill ran, for operators and tests */
      df_log_info("prefill cancelled (%s) at %d of %zu prompt positions, %ld run after the "
                  "cancellation",
                  shutdown ? "shutdown" : "client gone", j->start + st.n_prefilled, j->nprompt,
                  at_cancel >= 0 ? j->start + st.n_prefilled - at_cancel : 0L);
    stopped = j->gt.stopped;
    if (rc || (shutdown && !stopped) || gone) {
      df_gentext_free(&j->gt);
      memset(&j->gt, 0, sizeof j->gt);
      df_chat_parser_free(j->cp);
      j->cp = NULL;
      break;
    }
    if (j->cp) {
      if (!df_chat_parser_ended(j->cp)) df_chat_parser_finish(j->cp, on_chat_event, j);
      df_chat_parser_free(j->cp);
      j->cp = NULL;
      j->gt.n_reasoning = j->n_reasoning_tok;
    } else {
      df_gentext_finish(&j->gt);
    }
    if (j->req.stream) emit(j, 1);
    c->finish = c->ncb ? "tool_calls" : stopped || st.finish == DF_FINISH_STOP ? "stop" : "length";
    for (size_t k = 0; k < c->ncb; k++) {
      c->cb[k].c.name = c->cb[k].name.p;
      c->cb[k].c.nname = c->cb[k].name.n;
      c->cb[k].c.args = c->cb[k].args.p;
      c->cb[k].c.nargs = c->cb[k].args.n;
    }
    c->n_gen = st.n_gen;
    c->n_reasoning = j->gt.n_reasoning;
    total_gen += st.n_gen;
    total_reasoning += j->gt.n_reasoning;
    if (j->req.stream)
      df_serve_sse_delta_lp(&j->frames, &j->meta, ci, NULL, NULL, NULL, 0, c->finish, NULL, 0, 0,
                            0);
    publish(j);
    df_gentext_free(&j->gt);
    memset(&j->gt, 0, sizeof j->gt);
  }
  pthread_mutex_lock(&S->mu);
  if (!rc && !gone && !(shutdown && !stopped)) j->n_gen = total_gen;
  S->m_requests++;
  S->m_prompt_tokens += j->nprompt;
  S->m_cached_tokens += (unsigned long long)j->cached;
  S->m_gen_tokens += (unsigned long long)j->n_gen;
  pthread_mutex_unlock(&S->mu);
  publish_stats(S);
  j->n_reasoning = total_reasoning;
  if (rc) {
    j->failed = 1;
    df_serve_err_set(&j->err, 500, "server_error", NULL, NULL, "generation failed: %s", e.msg);
  } else if (shutdown && !stopped) {
    j->failed = 1;
    df_serve_err_set(&j->err, 503, "server_error", "shutting_down", NULL,
                     "the server is shutting down; the generation was cancelled");
  } else if (!gone) {
    j->finish = j->ch[j->nch - 1].finish;
  }
  if (j->req.stream && !gone) {
    if (j->failed) {
      df_serve_sse_error(&j->frames, &j->err);
    } else if (j->req.include_usage) {
      df_serve_usage u = {(long)j->nprompt, total_gen, total_reasoning, j->cached};
      df_serve_sse_usage(&j->frames, &j->meta, &u);
    }
    df_serve_sse_done(&j->frames);
  }
  publish(j);
}

static void *worker(void *arg) {
  srv *S = arg;
  pthread_mutex_lock(&S->mu);
  for (;;) {
    while (!S->stopping && S->fifo.n == 0) pthread_cond_wait(&S->work_cv, &S->mu);
    if (S->stopping) break;
    job *j = df_fifo_pop(&S->fifo);
    j->state = JOB_RUNNING;
    S->running = j;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&S->mu);
    run_job(S, j);
    pthread_mutex_lock(&S->mu);
    job_finish_locked(S, j);
    if (j->peer_fd >= 0) close(j->peer_fd);
    j->peer_fd = -1;
    S->running = NULL;
    pthread_cond_broadcast(&j->cv);
    job_unref_locked(j);
  }
  pthread_mutex_unlock(&S->mu);
  return NULL;
}

/* ------------------------------------------------------------ replies */

static void add_cors(struct MHD_Response *resp, const conn_ctx *r) {
  if (!r->origin[0]) return;
  MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->origin);
  MHD_add_response_header(resp, "Vary", "Origin");
}

static enum MHD_Result reply_body(struct MHD_Connection *c, conn_ctx *r, int status, char *body,
                                  const char *ctype, const char *hname, const char *hval) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
  if (!resp) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  if (hname) MHD_add_response_header(resp, hname, hval);
  add_cors(resp, r);
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
  MHD_destroy_response(resp);
  if (ret == MHD_YES) {
    r->status = status;
    r->responded = 1;
  }
  return ret;
}

static enum MHD_Result reply_json(struct MHD_Connection *c, conn_ctx *r, int status, char *body) {
  return reply_body(c, r, status, body, "application/json", NULL, NULL);
}

static enum MHD_Result reply_err(struct MHD_Connection *c, conn_ctx *r, const df_serve_err *e,
                                 const char *hname, const char *hval) {
  return reply_body(c, r, e->status, df_serve_error_json(e), "application/json", hname, hval);
}

/* ---------------------------------------------------------- streaming */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  job *j = cls;
  srv *S = j->S;
  ssize_t ret;
  pthread_mutex_lock(&S->mu);
  for (;;) {
    size_t avail = j->out.n - j->out_off;
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
    if (peer_gone_locked(j)) {
      ret = MHD_CONTENT_READER_END_WITH_ERROR;
      break;
    }
    if (max >= 3 && probe_due_locked(j)) {
      /* between frames: an SSE comment, ignored by clients, makes a closed
       * peer reset the connection */
      memcpy(buf, ":\n\n", 3);
      ret = 3;
      break;
    }
    timed_wait(&j->cv, &S->mu, WAIT_SLICE_MS);
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
  job_unref_locked(j);
  S->streams--;
  pthread_cond_broadcast(&S->work_cv);
  pthread_mutex_unlock(&S->mu);
}

/* --------------------------------------------------------- generation */

static int encode_prompt(srv *S, const df_serve_req *q, int **ids, size_t *n, df_serve_err *err) {
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
  if (q->kind == DF_SERVE_CHAT && q->use_render) {
    /* tools or tool calls: the release's encoder. Its efforts are low, high
     * and max: medium is taken as high. */
    static const char *const eff[] = {"low", "high", "high", "max"};
    df_chat_opts o = df_chat_opts_default();
    /* structured output: instruct mode, the reply opens with the response
     * (the constraint covers the whole reply) */
    o.thinking = q->grammar ? 0 : 1;
    o.effort = eff[q->effort];
    o.tool_choice = q->tool_choice;
    o.tools_json = q->tools_json;
    o.tools_len = q->tools_len;
    df_chat_prompt pr;
    memset(&pr, 0, sizeof pr);
    rc = df_chat_render(S->tok, q->msgs, q->nmsgs, &o, &pr, &e);
    if (!rc) {
      *ids = pr.ids;
      *n = pr.n;
      pr.ids = NULL;
    }
    df_chat_prompt_free(&pr);
  } else if (q->kind == DF_SERVE_CHAT)
    rc = df_chat_encode(S->tok, q->msgs, q->nmsgs, q->effort, 1, ids, n, &cap, &e);
  else
    rc = df_tok_encode(S->tok, q->prompt, q->prompt_len, ids, n, &cap, &e);
  if (rc) {
    free(*ids);
    *ids = NULL;
    return df_serve_err_set(err, 400, "invalid_request_error", NULL,
                            q->kind == DF_SERVE_CHAT ? "messages" : "prompt",
                            "the prompt cannot be encoded: %s", e.msg);
  }
  return 0;
}

static enum MHD_Result handle_generation(srv *S, struct MHD_Connection *c, conn_ctx *r,
                                         df_serve_kind kind) {
  df_serve_err err;
  if (r->too_big) {
    conn_release_slot(S, r);
    df_serve_err_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
                     "the request body is larger than %zu bytes (--max-request-bytes)",
                     S->o.max_request_bytes);
    return reply_err(c, r, &err, NULL, NULL);
  }
  job *j = df_xcalloc(1, sizeof *j);
  j->S = S;
  j->peer_fd = -1;
  j->prefilled_at_cancel = -1;
  cond_init_mono(&j->cv);
  j->refs = 1;
  if (df_serve_parse(kind, r->body.p ? r->body.p : "", r->body.n, &S->limits, &j->req, &err) ||
      encode_prompt(S, &j->req, &j->prompt, &j->nprompt, &err) ||
      df_serve_check_context(&j->req, (long)j->nprompt, S->max_pos, &err)) {
    pthread_mutex_lock(&S->mu);
    job_unref_locked(j);
    pthread_mutex_unlock(&S->mu);
    conn_release_slot(S, r);
    return reply_err(c, r, &err, NULL, NULL);
  }
  df_serve_meta_init(&j->meta, kind, S->model_id, (long long)time(NULL));
  j->meta.include_usage = j->req.include_usage;
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (ci) j->peer_fd = dup(ci->connect_fd);
  j->http11 = r->http11;

  pthread_mutex_lock(&S->mu);
  /* admitted when the headers arrived (admit_or_refuse); the slot passes to the job */
  if (S->stopping || !r->slot || df_fifo_push(&S->fifo, j)) {
    int stopping = S->stopping;
    job_unref_locked(j);
    if (r->slot) {
      r->slot = 0;
      S->inflight--;
    }
    pthread_mutex_unlock(&S->mu);
    if (stopping) {
      df_serve_err_set(&err, 503, "server_error", "shutting_down", NULL,
                       "the server is shutting down");
      return reply_err(c, r, &err, NULL, NULL);
    }
    df_serve_err_set(&err, 500, "server_error", NULL, NULL,
                     "internal error: an admitted request found the queue full");
    return reply_err(c, r, &err, NULL, NULL);
  }
  j->slot = 1;
  r->slot = 0;
  j->refs++; /* the queue's (then the generation thread's) reference */
  r->j = j;
  pthread_cond_signal(&S->work_cv);
  /* wait for our turn; a client that leaves the queue leaves it for good */
  while (j->state == JOB_QUEUED) {
    if (peer_gone_locked(j)) {
      if (df_fifo_remove(&S->fifo, j)) {
        job_finish_locked(S, j);
        job_unref_locked(j);
      }
      pthread_mutex_unlock(&S->mu);
      return MHD_NO;
    }
    probe_interim_locked(j);
    timed_wait(&j->cv, &S->mu, WAIT_SLICE_MS);
  }
  if (j->state == JOB_DONE && j->shutdown) {
    pthread_mutex_unlock(&S->mu);
    df_serve_err_set(&err, 503, "server_error", "shutting_down", NULL,
                     "the server is shutting down");
    return reply_err(c, r, &err, NULL, NULL);
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
    add_cors(resp, r);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    if (ret == MHD_YES) {
      r->status = 200;
      r->responded = 1;
    }
    return ret;
  }
  while (j->state != JOB_DONE) {
    if (peer_gone_locked(j)) {
      pthread_mutex_unlock(&S->mu);
      return MHD_NO;
    }
    probe_interim_locked(j);
    timed_wait(&j->cv, &S->mu, WAIT_SLICE_MS);
  }
  pthread_mutex_unlock(&S->mu);
  if (j->failed) return reply_err(c, r, &j->err, NULL, NULL);
  if (!j->finish) return MHD_NO; /* the generation saw the client leave first */
  df_serve_usage u = {(long)j->nprompt, j->n_gen, j->n_reasoning, j->cached};
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
  return reply_json(c, r, 200, body);
}

/* ------------------------------------------------------------ routing */

/* POST /tokenize and /detokenize: the tokenizer is read-only, so this runs
 * in the connection thread, beside a generation. */
static enum MHD_Result handle_tokenize(srv *S, struct MHD_Connection *c, conn_ctx *r) {
  df_serve_err err;
  const char *body = r->body.p ? r->body.p : "";
  if (r->too_big) {
    df_serve_err_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
                     "the request body is larger than %zu bytes (--max-request-bytes)",
                     S->o.max_request_bytes);
    return reply_err(c, r, &err, NULL, NULL);
  }
  if (r->route == DF_ROUTE_DETOKENIZE) {
    int *ids;
    size_t n, len;
    if (df_serve_parse_detokenize(body, r->body.n, S->limits.vocab, &ids, &n, &err))
      return reply_err(c, r, &err, NULL, NULL);
    char *text = df_tok_decode(S->tok, ids, n, &len);
    free(ids);
    enum MHD_Result ret = reply_json(c, r, 200, df_serve_content_json(text ? text : "", text ? len : 0));
    free(text);
    return ret;
  }
  char *text;
  size_t tlen, nids = 0, cap = 0;
  int pieces, special, *ids = NULL;
  if (df_serve_parse_tokenize(body, r->body.n, &text, &tlen, &pieces, &special, &err))
    return reply_err(c, r, &err, NULL, NULL);
  df_err e;
  int rc = special ? df_tok_encode_with_specials(S->tok, text, tlen, &ids, &nids, &cap, &e)
                   : df_tok_encode(S->tok, text, tlen, &ids, &nids, &cap, &e);
  free(text);
  if (rc) {
    free(ids);
    df_serve_err_set(&err, 400, "invalid_request_error", NULL, "content",
                     "the text cannot be encoded: %s", e.msg);
    return reply_err(c, r, &err, NULL, NULL);
  }
  const uint8_t **pp = NULL;
  size_t *pl = NULL;
  if (pieces) {
    pp = df_xmalloc((nids ? nids : 1) * sizeof *pp);
    pl = df_xmalloc((nids ? nids : 1) * sizeof *pl);
    for (size_t i = 0; i < nids; i++) pp[i] = df_tok_piece(S->tok, ids[i], &pl[i]);
  }
  enum MHD_Result ret = reply_json(c, r, 200, df_serve_tokens_json(ids, nids, pp, pl));
  free(pp);
  free(pl);
  free(ids);
  return ret;
}

/* POST /apply-template: a chat completions body in, the prompt the server
 * would run for it out ({"prompt": text, "tokens": ids}), through the same
 * encoder as a generation; 'model' may be left out. */
static enum MHD_Result handle_apply_template(srv *S, struct MHD_Connection *c, conn_ctx *r) {
  df_serve_err err;
  if (r->too_big) {
    df_serve_err_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
                     "the request body is larger than %zu bytes (--max-request-bytes)",
                     S->o.max_request_bytes);
    return reply_err(c, r, &err, NULL, NULL);
  }
  df_serve_limits lim = S->limits;
  lim.model_optional = 1;
  df_serve_req q;
  if (df_serve_parse(DF_SERVE_CHAT, r->body.p ? r->body.p : "", r->body.n, &lim, &q, &err))
    return reply_err(c, r, &err, NULL, NULL);
  int *ids = NULL;
  size_t n = 0, len = 0;
  if (encode_prompt(S, &q, &ids, &n, &err)) {
    df_serve_req_free(&q);
    return reply_err(c, r, &err, NULL, NULL);
  }
  df_serve_req_free(&q);
  char *text = df_tok_decode(S->tok, ids, n, &len);
  char *body = df_serve_template_json(text ? text : "", text ? len : 0, ids, n);
  free(text);
  free(ids);
  return reply_json(c, r, 200, body);
}

static enum MHD_Result handle_get(srv *S, struct MHD_Connection *c, conn_ctx *r) {
  df_serve_err err;
  if (r->route == DF_ROUTE_METRICS) {
    df_serve_metrics m;
    memset(&m, 0, sizeof m);
    pthread_mutex_lock(&S->mu);
    m.requests = S->m_requests;
    m.prompt_tokens = S->m_prompt_tokens;
    m.cached_tokens = S->m_cached_tokens;
    m.gen_tokens = S->m_gen_tokens;
    m.prefill_s = S->m_prefill_s;
    m.decode_s = S->m_decode_s;
    m.busy = S->running != NULL;
    m.queued = S->fifo.n;
    m.queue_max = S->o.queue;
    m.kept_bytes = S->m_kept_bytes;
    m.kept_states = S->m_kept_states;
    char *text = df_serve_metrics_text(&m, S->stats_json);
    pthread_mutex_unlock(&S->mu);
    return reply_body(c, r, 200, text, "text/plain; version=0.0.4", NULL, NULL);
  }
  if (r->route == DF_ROUTE_MODELS) return reply_json(c, r, 200, df_serve_models_json(S->model_id, S->started));
  if (r->route == DF_ROUTE_MODEL) {
    if (!strcmp(r->arg, S->model_id))
      return reply_json(c, r, 200, df_serve_model_json(S->model_id, S->started));
    df_serve_err_set(&err, 404, "invalid_request_error", "model_not_found", "model",
                     "The model '%s' does not exist (this server serves '%s')", r->arg,
                     S->model_id);
    return reply_err(c, r, &err, NULL, NULL);
  }
  /* health */
  pthread_mutex_lock(&S->mu);
  int busy = S->running != NULL, queued = S->fifo.n;
  pthread_mutex_unlock(&S->mu);
  return reply_json(c, r, 200, df_serve_health_json(S->model_id, busy, queued, S->o.queue));
}

typedef struct framing {
  const char *cl[8];
  int ncl;
  const char *te;
  int nte;
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
  }
  return MHD_YES;
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
  add_cors(resp, r);
  MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
  MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
  MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, resp);
  MHD_destroy_response(resp);
  if (ret == MHD_YES) {
    r->status = 204;
    r->responded = 1;
  }
  return ret;
}

static enum MHD_Result admit_or_refuse(srv *S, struct MHD_Connection *c, conn_ctx *r) {
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
    return reply_err(c, r, &err, NULL, NULL);
  }
  df_serve_err_set(&err, 429, "requests", "rate_limit_exceeded", NULL,
                   "the server is busy with another generation%s; retry later",
                   S->o.queue ? " and its queue is full" : "");
  return reply_err(c, r, &err, MHD_HTTP_HEADER_RETRY_AFTER, "1");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  srv *S = cls;
  conn_ctx *r = *con_cls;
  df_serve_err err;
  if (!r) {
    r = df_xcalloc(1, sizeof *r);
    *con_cls = r;
    r->t0 = df_now();
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->path, sizeof r->path, "%s", url);
    r->http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
      const struct sockaddr *sa = ci->client_addr;
      if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, r->peer, sizeof r->peer);
      else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, r->peer, sizeof r->peer);
    }
    const union MHD_ConnectionInfo *si =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    r->sc = si ? si->socket_context : NULL;
    if (r->sc) {
      pthread_mutex_lock(&S->cmu);
      r->sc->complete = 1; /* until it turns out a body must still arrive */
      pthread_mutex_unlock(&S->cmu);
    }
    framing fr = {.ncl = 0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, collect_framing, &fr);
    const char *why;
    int fst = fr.nte > 1 ? 501 : df_serve_framing(fr.cl, fr.ncl, fr.te, &why);
    if (fr.nte > 1) why = "more than one Transfer-Encoding header";
    if (fst) {
      df_serve_err_set(&err, fst, "invalid_request_error", fst == 501 ? "not_implemented" : NULL,
                       NULL, "the request's framing is refused: %s", why);
      return reply_err(c, r, &err, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!df_serve_host_ok(host, S->o.host, S->o.allow_hosts, S->o.nallow_hosts)) {
      df_serve_err_set(&err, 403, "invalid_request_error", "host_not_allowed", NULL,
                       "the Host header '%.100s' does not name this server (start it with "
                       "--allow-host NAME to accept that name)",
                       host);
      return reply_err(c, r, &err, NULL, NULL);
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
      return reply_err(c, r, &err, NULL, NULL);
    }
    if (r->route == DF_ROUTE_BAD_METHOD) {
      df_serve_err_set(&err, 405, "invalid_request_error", "method_not_allowed", NULL,
                       "%.20s is not allowed on %.200s (allowed: %s)", method, url, allow);
      return reply_err(c, r, &err, MHD_HTTP_HEADER_ALLOW, allow);
    }
    if (S->o.api_key && r->route != DF_ROUTE_HEALTH &&
        !df_serve_auth_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                      MHD_HTTP_HEADER_AUTHORIZATION),
                          S->o.api_key)) {
      df_serve_err_set(&err, 401, "invalid_request_error", "invalid_api_key", NULL,
                       "Incorrect or missing API key: send 'Authorization: Bearer <key>'");
      return reply_err(c, r, &err, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    }
    int gen = r->route == DF_ROUTE_CHAT || r->route == DF_ROUTE_COMPLETIONS;
    if (gen || r->route == DF_ROUTE_TOKENIZE || r->route == DF_ROUTE_DETOKENIZE ||
        r->route == DF_ROUTE_APPLY_TEMPLATE) {
      if (!df_serve_ctype_json(
              MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE))) {
        df_serve_err_set(&err, 415, "invalid_request_error", "unsupported_media_type", NULL,
                         "POST bodies must be sent with 'Content-Type: application/json'");
        return reply_err(c, r, &err, NULL, NULL);
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
          return handle_generation(S, c, r, DF_SERVE_CHAT);
        }
      }
      if (!gen) { /* cheap and not queued: answered in this thread */
        set_complete(S, r, 0);
        return MHD_YES;
      }
      /* admit before the body is read, parsed or tokenized: a refused
       * request costs nothing but its headers */
      enum MHD_Result ar = admit_or_refuse(S, c, r);
      if (!r->responded) set_complete(S, r, 0);
      return ar;
    }
    return handle_get(S, c, r);
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
       * drained and answered 413 at its end; past a bound the connection
       * is dropped instead. */
      if (r->received > S->o.max_request_bytes + (16u << 20)) return MHD_NO;
      return MHD_YES;
    }
    df_sbuf_add(&r->body, upload, n);
    return MHD_YES;
  }
  if (r->route == DF_ROUTE_TOKENIZE || r->route == DF_ROUTE_DETOKENIZE)
    return handle_tokenize(S, c, r);
  if (r->route == DF_ROUTE_APPLY_TEMPLATE) return handle_apply_template(S, c, r);
  return handle_generation(S, c, r,
                           r->route == DF_ROUTE_CHAT ? DF_SERVE_CHAT : DF_SERVE_COMPLETION);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)c;
  srv *S = cls;
  conn_ctx *r = *con_cls;
  if (!r) return;
  *con_cls = NULL;
  conn_release_slot(S, r);
  if (r->sc) {
    pthread_mutex_lock(&S->cmu);
    r->sc->t0 = df_now(); /* a kept-alive connection's next request */
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
      job_finish_locked(S, j);
      job_unref_locked(j);
    }
    pthread_cond_broadcast(&j->cv);
    np = (long)j->nprompt;
    ng = j->n_gen;
    job_unref_locked(j);
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
  free(r);
}

/* -------------------------------------------------------------- run */

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  srv *S = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    sock_ctx *sc = df_xcalloc(1, sizeof *sc);
    sc->fd = ci ? ci->connect_fd : -1;
    sc->t0 = df_now();
    pthread_mutex_lock(&S->cmu);
    sc->next = S->socks;
    if (S->socks) S->socks->prev = sc;
    S->socks = sc;
    pthread_mutex_unlock(&S->cmu);
    *socket_context = sc;
  } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
    sock_ctx *sc = *socket_context;
    pthread_mutex_lock(&S->cmu);
    if (sc->prev) sc->prev->next = sc->next;
    else S->socks = sc->next;
    if (sc->next) sc->next->prev = sc->prev;
    pthread_mutex_unlock(&S->cmu);
    free(sc);
    *socket_context = NULL;
  }
}

/* The request deadline: --idle-timeout only closes silent connections, so a
 * client trickling a byte a second would hold its thread forever. A request
 * whose headers and body have not all arrived in time has its socket shut
 * down, which ends the connection in MHD's thread. */
static void *watchdog(void *arg) {
  srv *S = arg;
  double lim = S->o.request_timeout_s;
  pthread_mutex_lock(&S->cmu);
  while (!S->wd_stop) {
    timed_wait(&S->wd_cv, &S->cmu, 200);
    double now = df_now();
    for (sock_ctx *sc = S->socks; sc; sc = sc->next)
      if (!sc->complete && !sc->killed && sc->fd >= 0 && now - sc->t0 > lim) {
        sc->killed = 1;
        shutdown(sc->fd, SHUT_RDWR);
      }
  }
  pthread_mutex_unlock(&S->cmu);
  return NULL;
}

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
  cond_init_mono(&S.work_cv);
  pthread_mutex_init(&S.cmu, NULL);
  cond_init_mono(&S.wd_cv);
  pthread_t wdt;
  int have_wd = o->request_timeout_s > 0 && !pthread_create(&wdt, NULL, watchdog, &S);
  df_fifo_init(&S.fifo, df_serve_fifo_cap(o->queue));
  S.sess = df_session_new(en);
  S.stats_json = df_engine_stats_json(en);
  pthread_t wt;
  if (!S.sess || pthread_create(&wt, NULL, worker, &S)) {
    freeaddrinfo(ai);
    if (S.sess) df_session_free(S.sess);
    df_fifo_free(&S.fifo);
    return df_err_set(e, "serve: cannot start the generation thread");
  }

  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                   MHD_USE_ITC;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  struct MHD_Daemon *d = MHD_start_daemon(
      flags, (uint16_t)o->port, NULL, NULL, on_request, &S, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, &S, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
      &S, MHD_OPTION_CONNECTION_LIMIT, 1000u, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      (unsigned)o->max_client_conns,
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
      note_cancel_locked(S.running);
    }
    job *j;
    while ((j = df_fifo_pop(&S.fifo))) {
      job_finish_locked(&S, j);
      j->shutdown = 1;
      pthread_cond_broadcast(&j->cv);
      job_unref_locked(j);
    }
    if (S.running) pthread_cond_broadcast(&S.running->cv);
    pthread_cond_broadcast(&S.work_cv);
    pthread_mutex_unlock(&S.mu);
    pthread_join(wt, NULL);
    /* let streams send their last frames (the cancellation notice) */
    pthread_mutex_lock(&S.mu);
    for (int k = 0; S.streams > 0 && k < 100; k++) timed_wait(&S.work_cv, &S.mu, WAIT_SLICE_MS);
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
  freeaddrinfo(ai);
  df_session_free(S.sess);
  while (S.nsnaps) drop_kept(&S, S.nsnaps - 1);
  free(S.stats_json);
  free(S.live_ids);
  df_fifo_free(&S.fifo);
  pthread_cond_destroy(&S.work_cv);
  pthread_mutex_destroy(&S.mu);
  return rc;
}

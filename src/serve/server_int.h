/* Internals shared by the server's files (server*.c); not a public header.
 * The job, the server and the connection contexts, and the functions one
 * concern's file calls in another's. */
#ifndef DF_SERVE_SERVER_INT_H
#define DF_SERVE_SERVER_INT_H

#include <microhttpd.h>
#include <pthread.h>
#include <stddef.h>

#include "base/fifo.h"
#include "base/sbuf.h"
#include "serve/gentext.h"
#include "serve/request.h"
#include "serve/response.h"
#include "serve/responses.h"
#include "serve/route.h"
#include "serve/server.h"

/* How often a waiting connection thread looks at its socket for a client that
 * went away (a poll, no data is read). */
#define WAIT_SLICE_MS 20
/* SSE bytes buffered per stream before the generation waits for the client. */
#define STREAM_HIGH_WATER (1u << 20)
/* Responses kept for previous_response_id (the oldest is dropped first). */
#define DF_SRV_RESP_KEPT 256

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state;

typedef struct srv srv;

#define MAX_KEPT DF_SERVE_MAX_KEPT
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

/* A generation job: about 50 fields, because it is the one object the HTTP
 * thread and the model's worker share (the request, its stream buffer and
 * high-water state, cancellation, per-choice output and the usage figures);
 * keeping it whole lets one lock guard it. */
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
  double t0;              /* when the request arrived (for the latency histograms) */
  int first_seen;         /* the first token was counted in the time-to-first-token histogram */
  /* ---- generation thread only until DONE ---- */
  choice *ch;
  int nch, cur;
  long n_reasoning;
  long n_drafted, n_accepted; /* speculation over all choices (usage) */
  df_serve_spec spec;         /* ... its source and blocks (usage.deltafin_speculation) */
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
  df_tm tm;     /* tool choice: where the reply is in the tool-call markup */
  df_sbuf frames; /* SSE frames built for the current token */
  /* /v1/responses: the translated request, the Response id, and (streams)
   * the converter of the chat frames into Responses events, which runs
   * where frames go out (under S->mu) */
  df_resp_req *rq;
  char resp_id[64];
  df_resp_stream *rs;
  /* ---- the connection thread only ---- */
  struct MHD_Connection *conn; /* streams: to put the idle timeout back after the prefill */
  int idle_back;               /* ... done */
} job;

/* The server: about 60 fields (listener, limits, the job queue, kept
 * conversation states and responses, metrics counters) that the accept,
 * worker and metrics paths all read under one mutex; split, they would need
 * a lock order. */
struct srv {
  df_engine *en;
  const df_tok *tok;
  df_serve_opts o;
  const char *model_id;
  long max_pos;
  long long started;
  df_serve_limits limits;
  int chat_stop[2], nchat_stop;
  int sp_open, sp_close, sp_sep; /* the chat markup's specials (tool-choice matcher) */
  int text_stop[2], ntext_stop;

  pthread_mutex_t mu;
  pthread_cond_t work_cv;
  df_fifo fifo;
  job *running;
  int inflight; /* admitted generation requests not finished (df_serve_admit) */
  int stopping;
  int streams; /* streamed responses still being sent */
  int reqs;    /* requests begun and not completed (their reply not sent yet) */
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
  unsigned long long m_drafted, m_accepted; /* speculation, over all requests */
  unsigned long long m_blocks, m_acc_at[DF_SERVE_SPEC_MAX];
  int m_kept_states;
  double m_prefill_s, m_decode_s;
  unsigned long long m_429, m_503;
  df_serve_hist m_latency, m_ttft;
  double m_tps;
  char *stats_json; /* the engine's statistics after the last job */

  /* /v1/responses: each stored response's message history (previous_response_id) */
  pthread_mutex_t rmu;
  struct resp_kept {
    char id[64];
    char *history;
  } resp[DF_SRV_RESP_KEPT];
  int nresp, resp_next;
  /* open connections, for the request deadline (watchdog thread) */
  pthread_mutex_t cmu;
  pthread_cond_t wd_cv;
  struct sock_ctx *socks;
  int wd_stop;
  /* behind a --trusted-proxy: requests in progress per forwarded client (under cmu) */
  struct fwd_count {
    char addr[64];
    int n;
  } fwd[256];
};

/* Per-connection state (MHD's socket context): when the current request
 * began and whether all of it has arrived. */
typedef struct sock_ctx {
  int fd;
  double t0;       /* when the current request's line arrived, or the last one ended */
  int in_request;  /* a request line has arrived and its request is not finished */
  int complete, killed;
  char addr[64];   /* the peer's address */
  int refuse;      /* over a connection cap with nothing idle to close: 429 or 503 */
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
  df_resp_req *rq; /* /v1/responses: the translated request (passes to the job) */
  int http11;
  char origin[256]; /* an allowed CORS origin, echoed back; "" when none */
  int fwd;          /* counted in srv.fwd under peer (a forwarded client) */
  sock_ctx *sc;
  job *j;
} conn_ctx;

void df_srv_job_unref_locked(job *j);
void df_srv_job_finish_locked(srv *S, job *j);
void df_srv_conn_release_slot(srv *S, conn_ctx *r);
void df_srv_note_cancel_locked(job *j);
int df_srv_peer_gone_locked(job *j);
int df_srv_probe_due_locked(job *j);
void df_srv_probe_interim_locked(job *j);
void df_srv_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int ms);
void df_srv_cond_init_mono(pthread_cond_t *cv);
void df_srv_deliver(void *ud, df_channel ch, const char *text, size_t n);
void *df_srv_worker(void *arg);
void df_srv_drop_kept(srv *S, int i);
size_t df_srv_kept_bytes(const srv *S);
void df_srv_keep_prompt_state(srv *S, job *j);
int df_srv_reuse_start(srv *S, job *j);
void df_srv_add_cors(struct MHD_Response *resp, const conn_ctx *r);
enum MHD_Result df_srv_reply_body(struct MHD_Connection *c, conn_ctx *r, int status, char *body,
                                  const char *ctype, const char *hname, const char *hval);
enum MHD_Result df_srv_reply_json(struct MHD_Connection *c, conn_ctx *r, int status, char *body);
enum MHD_Result df_srv_reply_err(struct MHD_Connection *c, conn_ctx *r, const df_serve_err *e,
                                 const char *hname, const char *hval);
enum MHD_Result df_srv_admit_or_refuse(srv *S, struct MHD_Connection *c, conn_ctx *r);
enum MHD_Result df_srv_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls);
void df_srv_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe);
int df_srv_encode_prompt(srv *S, const df_serve_req *q, int **ids, size_t *n, df_serve_err *err);
enum MHD_Result df_srv_handle_generation(srv *S, struct MHD_Connection *c, conn_ctx *r,
                                         df_serve_kind kind);
enum MHD_Result df_srv_handle_tokenize(srv *S, struct MHD_Connection *c, conn_ctx *r);
enum MHD_Result df_srv_handle_apply_template(srv *S, struct MHD_Connection *c, conn_ctx *r);
enum MHD_Result df_srv_handle_get(srv *S, struct MHD_Connection *c, conn_ctx *r);
void df_srv_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code);
void *df_srv_watchdog(void *arg);
void *df_srv_on_uri(void *cls, const char *uri, struct MHD_Connection *c);
int df_srv_trusted(const srv *S, const char *addr);
void df_srv_addr_text(const struct sockaddr *sa, char *out, size_t cap);
int df_srv_fwd_count(srv *S, const char *addr, int delta);
enum MHD_Result df_srv_handle_responses(srv *S, struct MHD_Connection *c, conn_ctx *r);
void df_srv_resp_keep(srv *S, const char *id, char *history);
void df_srv_resp_free_all(srv *S);

#endif

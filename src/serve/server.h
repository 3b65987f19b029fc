/* `deltafin serve`: the OpenAI-compatible HTTP server (libmicrohttpd, one
 * thread per connection) in front of one engine. One generation thread owns
 * the session; connection threads validate, tokenize, queue and stream. */
#ifndef DF_SERVE_SERVER_H
#define DF_SERVE_SERVER_H

#include "plan/plan.h"
#include <stddef.h>

#include "base/err.h"
#include "engine/engine.h"

typedef struct df_serve_opts {
  const char *host;         /* default 127.0.0.1 */
  int port;                 /* 0: any free port (the log line says which) */
  const char *model_id;     /* NULL: the engine's id */
  const char *api_key;      /* NULL: no authentication */
  int queue;                /* requests that may wait behind the running one */
  size_t max_request_bytes; /* larger bodies get 413 */
  int idle_timeout_s;       /* a connection silent this long is closed (0: never); a
                               request being generated or waiting its turn is not idle */
  int token_delay_ms;       /* testing aid: pause after each generated token */
  const int *forced_ids;    /* testing aid: these ids replace what the model writes (the
                               output plumbing sees them; the model still runs) */
  int nforced;
  int request_timeout_s;    /* a request's headers and body must all arrive within this
                               (a client trickling bytes is not idle); 0: no limit */
  int max_client_conns;     /* connections one client address may hold (behind a
                               --trusted-proxy: requests in progress per forwarded
                               client address); 0: no limit */
  int max_conns;            /* open connections in all */
  const char *trusted_proxies[16]; /* peers whose X-Forwarded-For names the client */
  int ntrusted;
  long reuse_mb;            /* conversation reuse: the kept prompt state may take this
                               much (MiB); 0: every request starts from a reset */
#define DF_SERVE_MAX_KEPT DF_PLAN_SERVE_KEPT /* kept prompt states at most (the plan counts them) */
  const char *allow_hosts[16]; /* Host names accepted besides IP literals, localhost and
                                  --host ("*": any) */
  int nallow_hosts;
  long max_tokens_default;  /* requests without max_tokens generate at most this many
                               (0: chat until the context ends, completions 16) */
  const char *cors[16];     /* origins that get CORS headers ("*": any); none: no CORS */
  int ncors;
} df_serve_opts;

void df_serve_opts_default(df_serve_opts *o);

/* Serves until SIGINT or SIGTERM, then stops accepting, cancels the running
 * generation, fails the queued ones with 503 and returns 0. The caller must
 * have blocked SIGINT and SIGTERM before starting any thread (the engine's
 * included): they are taken here with sigwait. */
int df_serve_run(df_engine *en, const df_serve_opts *o, df_err *e);

#endif

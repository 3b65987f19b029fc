/* Routing, authorization and admission decisions of the server, as pure
 * functions (unit-tested and fuzzed without sockets). */
#ifndef DF_SERVE_ROUTE_H
#define DF_SERVE_ROUTE_H

#include <stddef.h>

typedef enum {
  DF_ROUTE_NOT_FOUND = 0,
  DF_ROUTE_BAD_METHOD, /* known path, wrong method: 405 with Allow */
  DF_ROUTE_HEALTH,
  DF_ROUTE_MODELS,
  DF_ROUTE_MODEL, /* /v1/models/{id} */
  DF_ROUTE_CHAT,
  DF_ROUTE_COMPLETIONS,
  DF_ROUTE_TOKENIZE,   /* POST /tokenize (llama-server's) */
  DF_ROUTE_DETOKENIZE, /* POST /detokenize */
  DF_ROUTE_METRICS,    /* GET /metrics (Prometheus text) */
  DF_ROUTE_APPLY_TEMPLATE, /* POST /apply-template: the prompt a chat request would run */
  DF_ROUTE_RESPONSES,      /* POST /v1/responses (the Responses API) */
} df_route;

/* Maps method + path (no query string) to a route. *allow gets the Allow
 * header value for the path ("GET, HEAD" / "POST"); *arg the {id} of
 * DF_ROUTE_MODEL (points into path). */
df_route df_serve_route(const char *method, const char *path, const char **allow,
                        const char **arg);

/* 1 if the Authorization header value carries "Bearer <key>" (scheme case-
 * insensitive), compared in constant time for a given key length. */
int df_serve_auth_ok(const char *header, const char *key);

/* One generation runs; up to queue_max wait. inflight counts every admitted
 * generation request that has not finished: running, waiting in the FIFO,
 * or admitted and still receiving its body (a job pushed but not yet picked
 * up by the generation thread is one of them). 1 if one more may be
 * admitted. */
int df_serve_admit(int inflight, int queue_max);

/* The FIFO capacity that holds every job df_serve_admit lets in for
 * queue_max: all of them may be queued at once before the generation thread
 * takes the first. */
int df_serve_fifo_cap(int queue_max);

/* DNS rebinding guard: 1 if the Host header names this server. IP literals
 * (a page whose origin is an address is no rebinding), "localhost", the
 * --host value and the allow list (--allow-host; "*" allows any) pass; the
 * port is not compared. A missing Host (HTTP/1.0) passes. */
int df_serve_host_ok(const char *host, const char *listen_host, const char *const *allow,
                     int nallow);

/* 1 if a Content-Type header value is application/json (any case, with or
 * without parameters). Browsers send cross-origin POSTs without a preflight
 * only for text/plain, form and multipart bodies, so requiring JSON makes a
 * foreign page's request ask first. */
int df_serve_ctype_json(const char *ct);

/* 1 if origin is one of the --cors origins ("*" matches any). */
int df_serve_cors_ok(const char *origin, const char *const *list, int n);

/* The preflight's Access-Control-Allow-Headers for an allowed origin: the
 * requested headers (Access-Control-Request-Headers) when they are a list of
 * header names - the SDKs send their own (x-stainless-*, ...) and a fixed
 * list fails their preflight - else "Authorization, Content-Type". Writes
 * out (cap bytes) and returns it. */
const char *df_serve_cors_allow_headers(const char *requested, char *out, size_t cap);

/* Request framing: the Content-Length values (n of them) and the
 * Transfer-Encoding value (NULL if absent). 0 if well formed, else the
 * status to answer (400: conflicting or malformed lengths, a length with a
 * transfer coding; 501: a transfer coding other than chunked) with *why. */
int df_serve_framing(const char *const *cl, int ncl, const char *te, const char **why);

/* Copies in to out (cap bytes, always NUL-terminated) for the access log:
 * control bytes, DEL, bytes >= 0x80, '"' and '\\' become \xNN, so a request
 * can neither forge a log line nor put terminal escapes in it. Returns out. */
char *df_serve_log_escape(char *out, size_t cap, const char *in);

#endif

/* HTTP for setup and the stream fetcher: libcurl, one handle per thread, strict range requests.
 *
 * Every body fetch of a model file is a range request that must come back as
 * exactly `206` with `Content-Range: bytes first-last/total` equal to what was
 * asked and a body of exactly that length; anything else is retried (5xx,
 * 429, resets, short bodies, stalls, wrong ranges) with exponential backoff,
 * resuming after the bytes already delivered, or fails at once with a message
 * that says what to do (401, 403, 404). Redirects are followed; curl drops the
 * Authorization header when a redirect leaves the original host, and so does
 * a request sent straight to a remembered redirect target (remote/redir.h).
 * The token is only ever put in a request header: never logged, never in a
 * message. */
#ifndef DF_REMOTE_HTTP_H
#define DF_REMOTE_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct df_http df_http;

/* Rate limits. A 429 (or a 503 that says when to come back) is not a
 * failure but an order to wait: the wait is Retry-After (seconds or an HTTP
 * date), else the `t=` of the hub's `RateLimit` header ("api";r=0;t=55),
 * else (429 only) a doubling wait from 1 s up to 60 s. Every connection of
 * one download shares a gate, so once one of them is told to wait none
 * sends a request before the time it was told. Such waits do not count as
 * retries; their total (the union of the waits, as wall time) is bounded by
 * max_wait_s, and a wait asked for beyond what is left fails at once,
 * saying so. One wait is at most DF_HTTP_MAX_ONE_WAIT_S (a later answer
 * says how much longer). */
#define DF_HTTP_MAX_ONE_WAIT_S 3600.0
#define DF_HTTP_DEFAULT_MAX_WAIT_S (6 * 3600.0)
typedef struct df_http_gate df_http_gate; /* thread-safe */
df_http_gate *df_http_gate_new(double max_wait_s);
void df_http_gate_free(df_http_gate *g);
/* Seconds until requests may go again (0 = open), and the waits so far. */
double df_http_gate_remaining(df_http_gate *g);
double df_http_gate_waited(df_http_gate *g);
/* Rate-limit answers (429, 503 with a time) seen through the gate. */
uint64_t df_http_gate_answers(df_http_gate *g);

typedef struct df_http_cfg {
  const char *token;   /* Bearer token or NULL */
  int retries;         /* attempts after the first; <= 0: default 8 */
  double backoff_s;    /* first backoff; <= 0: default 0.2 s, doubled up to 5 s */
  long stall_s;        /* abort a transfer slower than 1 byte/s for this long; <= 0: 30 */
  const char *what;    /* names the repo in 401/403/404 messages ("moonshotai/Kimi-K3") */
  df_http_gate *gate;  /* shared with the other connections; NULL: one of its own */
  double max_wait_s;   /* its own gate's patience; <= 0: DF_HTTP_DEFAULT_MAX_WAIT_S */
} df_http_cfg;

/* The wait a rate-limit answer asks for, from its Retry-After and RateLimit
 * values (either may be NULL): seconds (>= 0), or -1 when neither says.
 * now_epoch: the current time (an HTTP date is relative to it). */
double df_http_retry_after(const char *retry_after, const char *ratelimit, double now_epoch);

/* Call once before threads start (curl_global_init). */
void df_http_global_init(void);

df_http *df_http_new(const df_http_cfg *cfg);
void df_http_free(df_http *h);

/* Facts from the response headers (of any response along the redirect chain). */
typedef struct df_http_meta {
  long status;              /* final status */
  char repo_commit[64];     /* X-Repo-Commit */
  char linked_etag[80];     /* X-Linked-Etag (unquoted) */
  int64_t linked_size;      /* X-Linked-Size, -1 when absent */
  char etag[80];            /* ETag of the last response (unquoted, W/ dropped) */
  int64_t content_length;   /* of the final response, -1 when unknown */
} df_http_meta;

/* GET a small document (model info, a JSON file) into memory; 200 required;
 * at most max_len bytes. *body is NUL-terminated; caller frees. */
int df_http_get(df_http *h, const char *url, size_t max_len, char **body, size_t *len,
                df_http_meta *meta, df_err *e);

/* HEAD of url (redirects followed): the facts only; 200 required. */
int df_http_head(df_http *h, const char *url, df_http_meta *meta, df_err *e);

/* Receives the bytes of a range in order, at absolute offsets; returns 0, or
 * -1 to abort (the fetch then fails with the sink's message in *e). */
typedef int (*df_http_sink)(void *ud, uint64_t off, const void *data, size_t n, df_err *e);

/* GET [off, off + len) of a resource of `total` bytes (total < 0: not
 * checked). Retries resume after the bytes the sink already took. When the
 * URL redirected (the hub's resolve -> signed CDN URL), the handle remembers
 * the target and later ranges of the same URL go straight there, with every
 * check unchanged and the token only when the target has the URL's scheme,
 * host and port. A remembered target that answers 401/403/404/410 (or loops,
 * or fails for good otherwise) is forgotten and the URL asked once more,
 * which resolves it afresh; 5xx and resets are retried there as usual. */
int df_http_get_range(df_http *h, const char *url, uint64_t off, uint64_t len, int64_t total,
                      df_http_sink sink, void *ud, df_err *e);

/* A server (or proxy) that answers a range request with 200 and the whole
 * file: accepted when the range was the whole file (total known); any other
 * range fails with DF_HTTP_NORANGE (e says which server), unless the caller
 * asks for the whole-body fallback: then the body is read as one stream,
 * the bytes before off skipped and those of the range handed to the sink
 * (a retry starts the stream again and skips what the sink already has). */
#define DF_HTTP_NORANGE (-2)
int df_http_get_range_ex(df_http *h, const char *url, uint64_t off, uint64_t len, int64_t total,
                         int whole_ok, df_http_sink sink, void *ud, df_err *e);

/* Counters of this handle since creation. */
typedef struct df_http_stats {
  uint64_t requests, retries, bytes;
  uint64_t rate_limited;       /* answers that said to wait (429, 503 with a time) */
  uint64_t whole_bodies;       /* 200s to a range request, the whole file taken in stream */
  uint64_t redirects_followed; /* redirects curl followed */
  uint64_t redirects_skipped;  /* range requests sent straight to a remembered target */
  uint64_t reresolved;         /* remembered targets that refused and were resolved again */
} df_http_stats;
void df_http_get_stats(const df_http *h, df_http_stats *out);

/* Parses a Content-Range value ("bytes 0-99/1000"; surrounding spaces
 * allowed). Strict: decimal, first <= last < total, total known.
 * 0 on success, -1 otherwise. */
int df_http_parse_content_range(const char *s, size_t n, uint64_t *first, uint64_t *last,
                                uint64_t *total);

#endif

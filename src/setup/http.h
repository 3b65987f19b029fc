/* HTTP for setup: libcurl, one handle per thread, strict range requests.
 *
 * Every body fetch of a model file is a range request that must come back as
 * exactly `206` with `Content-Range: bytes first-last/total` equal to what was
 * asked and a body of exactly that length; anything else is retried (5xx,
 * 429, resets, short bodies, stalls, wrong ranges) with exponential backoff,
 * resuming after the bytes already delivered, or fails at once with a message
 * that says what to do (401, 403, 404). Redirects are followed; curl drops the
 * Authorization header when a redirect leaves the original host, and so does
 * a request sent straight to a remembered redirect target (setup/redir.h).
 * The token is only ever put in a request header: never logged, never in a
 * message. */
#ifndef DF_SETUP_HTTP_H
#define DF_SETUP_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct df_http df_http;

typedef struct df_http_cfg {
  const char *token;   /* Bearer token or NULL */
  int retries;         /* attempts after the first; <= 0: default 8 */
  double backoff_s;    /* first backoff; <= 0: default 0.2 s, doubled up to 5 s */
  long stall_s;        /* abort a transfer slower than 1 byte/s for this long; <= 0: 30 */
  const char *what;    /* names the repo in 401/403/404 messages ("moonshotai/Kimi-K3") */
} df_http_cfg;

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
} df_http_meta;

/* GET a small document (model info, a JSON file) into memory; 200 required;
 * at most max_len bytes. *body is NUL-terminated; caller frees. */
int df_http_get(df_http *h, const char *url, size_t max_len, char **body, size_t *len,
                df_http_meta *meta, df_err *e);

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

/* Counters of this handle since creation. */
typedef struct df_http_stats {
  uint64_t requests, retries, bytes;
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

#include "remote/http.h"

#include <ctype.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/util.h"
#include "remote/redir.h"

/* ---- the rate-limit gate shared by the connections of one download ---- */

struct df_http_gate {
  pthread_mutex_t mu;
  double until;     /* df_now() before which no request goes */
  double waited;    /* the union of the waits so far */
  double max_wait;
  uint64_t answers;
};

df_http_gate *df_http_gate_new(double max_wait_s) {
  df_http_gate *g = df_xcalloc(1, sizeof *g);
  pthread_mutex_init(&g->mu, NULL);
  g->max_wait = max_wait_s > 0 ? max_wait_s : DF_HTTP_DEFAULT_MAX_WAIT_S;
  return g;
}

void df_http_gate_free(df_http_gate *g) {
  if (!g) return;
  pthread_mutex_destroy(&g->mu);
  free(g);
}

double df_http_gate_remaining(df_http_gate *g) {
  pthread_mutex_lock(&g->mu);
  double d = g->until - df_now();
  pthread_mutex_unlock(&g->mu);
  return d > 0 ? d : 0;
}

uint64_t df_http_gate_answers(df_http_gate *g) {
  pthread_mutex_lock(&g->mu);
  uint64_t n = g->answers;
  pthread_mutex_unlock(&g->mu);
  return n;
}

double df_http_gate_waited(df_http_gate *g) {
  pthread_mutex_lock(&g->mu);
  double w = g->waited;
  pthread_mutex_unlock(&g->mu);
  return w;
}

static void sleep_s(double s) {
  if (s <= 0) return;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* Blocks until the gate is open. */
static void gate_pass(df_http_gate *g) {
  for (;;) {
    double d = df_http_gate_remaining(g);
    if (d <= 0) return;
    sleep_s(d < 0.5 ? d : 0.5);
  }
}

/* Closes the gate for `wait` seconds from now (never shortening it). 0, or
 * -1 when that goes beyond the patience left (*left set). *fresh: the wait
 * extends the window by more than a second (worth telling the user). */
static int gate_close(df_http_gate *g, double wait, double *left, int *fresh) {
  if (wait > DF_HTTP_MAX_ONE_WAIT_S) wait = DF_HTTP_MAX_ONE_WAIT_S;
  pthread_mutex_lock(&g->mu);
  g->answers++;
  double now = df_now(), from = g->until > now ? g->until : now, to = now + wait;
  double more = to > from ? to - from : 0;
  int rc = 0;
  *left = g->max_wait - g->waited - (from - now);
  *fresh = g->until <= now || more > 1.0; /* a new window, or a longer one */
  if (g->waited + more > g->max_wait) rc = -1;
  else if (more > 0) {
    g->waited += more;
    g->until = to;
  }
  pthread_mutex_unlock(&g->mu);
  return rc;
}

static int all_digits(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!isdigit((unsigned char)*s)) return 0;
  return 1;
}

/* The number after `key=` in a structured header ("api";r=0;t=55), or -1. */
static double sf_param(const char *v, const char *key) {
  size_t k = strlen(key);
  for (const char *p = v; p && *p; p++) {
    if (strncmp(p, key, k) || p[k] != '=' || (p != v && p[-1] != ';' && p[-1] != ' ' &&
                                              p[-1] != ','))
      continue;
    char *end;
    double d = strtod(p + k + 1, &end);
    if (end != p + k + 1 && d >= 0) return d;
  }
  return -1;
}

double df_http_retry_after(const char *retry_after, const char *ratelimit, double now_epoch) {
  if (retry_after && *retry_after) {
    if (all_digits(retry_after)) return strtod(retry_after, NULL);
    time_t t = curl_getdate(retry_after, NULL);
    if (t != (time_t)-1) {
      double d = (double)t - now_epoch;
      return d > 0 ? d : 0;
    }
  }
  if (ratelimit && *ratelimit) return sf_param(ratelimit, "t");
  return -1;
}

static double epoch_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct df_http {
  CURL *curl;
  struct curl_slist *hdrs;
  df_http_cfg cfg;
  char what[200];
  df_http_stats st;
  unsigned seed;
  df_redir *redir; /* requested URL -> where it redirected (range GETs only) */
  df_http_gate *gate;
  int own_gate;
  int norange_warned;
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void global_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }
void df_http_global_init(void) { pthread_once(&g_once, global_init_once); }

df_http *df_http_new(const df_http_cfg *cfg) {
  df_http_global_init();
  df_http *h = df_xcalloc(1, sizeof *h);
  h->cfg = *cfg;
  if (h->cfg.retries <= 0) h->cfg.retries = 8;
  if (h->cfg.backoff_s <= 0) h->cfg.backoff_s = 0.2;
  if (h->cfg.stall_s <= 0) {
    /* the hub's tools read their download timeout from here */
    const char *t = getenv("HF_HUB_DOWNLOAD_TIMEOUT");
    char *end;
    long v = t && *t ? strtol(t, &end, 10) : 0;
    h->cfg.stall_s = t && *t && !*end && v > 0 ? v : 30;
  }
  snprintf(h->what, sizeof h->what, "%s", cfg->what ? cfg->what : "the repository");
  h->cfg.what = h->what;
  h->curl = curl_easy_init();
  if (!h->curl) abort();
  if (cfg->token && *cfg->token) {
    /* The header lives only in this list; curl does not send it to another
     * host after a redirect (CURLOPT_UNRESTRICTED_AUTH stays off). */
    size_t n = strlen(cfg->token) + 32;
    char *line = df_xmalloc(n);
    snprintf(line, n, "Authorization: Bearer %s", cfg->token);
    h->hdrs = curl_slist_append(NULL, line);
    memset(line, 0, n);
    free(line);
    h->cfg.token = NULL; /* not kept anywhere else */
  }
  h->seed = (unsigned)time(NULL) ^ (unsigned)(uintptr_t)h;
  h->redir = df_redir_new(DF_REDIR_MAX);
  h->gate = cfg->gate;
  if (!h->gate) {
    h->gate = df_http_gate_new(cfg->max_wait_s);
    h->own_gate = 1;
  }
  h->cfg.gate = h->gate;
  return h;
}

void df_http_free(df_http *h) {
  if (!h) return;
  curl_easy_cleanup(h->curl);
  curl_slist_free_all(h->hdrs);
  df_redir_free(h->redir);
  if (h->own_gate) df_http_gate_free(h->gate);
  free(h);
}

void df_http_get_stats(const df_http *h, df_http_stats *out) { *out = h->st; }

/* ---- Content-Range ---- */

static int parse_u64(const char **p, const char *end, uint64_t *out) {
  const char *s = *p;
  if (s >= end || !isdigit((unsigned char)*s)) return -1;
  uint64_t v = 0;
  while (s < end && isdigit((unsigned char)*s)) {
    unsigned d = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
    s++;
  }
  *p = s;
  *out = v;
  return 0;
}

int df_http_parse_content_range(const char *s, size_t n, uint64_t *first, uint64_t *last,
                                uint64_t *total) {
  const char *p = s, *end = s + n;
  while (p < end && (*p == ' ' || *p == '\t')) p++;
  while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
    end--;
  if (end - p < 6 || strncasecmp(p, "bytes ", 6)) return -1;
  p += 6;
  uint64_t a, b, t;
  if (parse_u64(&p, end, &a) || p >= end || *p++ != '-' || parse_u64(&p, end, &b) || p >= end ||
      *p++ != '/' || parse_u64(&p, end, &t) || p != end)
    return -1;
  if (a > b || b >= t) return -1;
  *first = a;
  *last = b;
  *total = t;
  return 0;
}

/* ---- one transfer ---- */

enum { AB_NONE, AB_SINK, AB_STATUS, AB_RANGE, AB_LONG, AB_NORANGE, AB_ENOUGH };

typedef struct xfer {
  df_http *h;
  int range;                  /* range mode */
  uint64_t first, len;        /* wanted range (this attempt) */
  int64_t total;
  df_http_sink sink;
  void *ud;
  uint64_t got;               /* body bytes accepted this attempt */
  char *doc;                  /* document mode buffer */
  size_t doc_len, doc_cap, doc_max;
  int checked;                /* the response's status/range were checked */
  int abort;
  char why[300];
  df_err sink_err;
  char cr[128];               /* Content-Range of the current response */
  int have_cr;
  df_http_meta *meta;
  CURLcode rc;                /* curl's result of the attempt */
  char retry_after[80];       /* Retry-After of the current response */
  char ratelimit[160];        /* RateLimit */
  char rlpolicy[160];         /* RateLimit-Policy */
  double wait_s;              /* rate limited: seconds to wait; -2 = no hint (429); -1 = not */
  int whole_ok;               /* a 200 to a range may be read as one stream */
  int whole;                  /* this response is a 200 with the whole file */
  uint64_t pos;               /* whole: bytes of the body seen */
  long status;                /* the final status of the attempt */
} xfer;

static void copy_hval(char *dst, size_t cap, const char *v, size_t n) {
  while (n && (*v == ' ' || *v == '\t')) v++, n--;
  while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ')) n--;
  if (n && v[0] == '"' && n >= 2 && v[n - 1] == '"') v++, n -= 2;
  if (n >= cap) n = cap - 1;
  memcpy(dst, v, n);
  dst[n] = 0;
}

static int hname(const char *line, size_t n, const char *name, const char **val, size_t *vlen) {
  size_t k = strlen(name);
  if (n <= k || strncasecmp(line, name, k) || line[k] != ':') return 0;
  *val = line + k + 1;
  *vlen = n - k - 1;
  return 1;
}

static size_t on_header(char *buf, size_t sz, size_t nitems, void *ud) {
  xfer *x = ud;
  size_t n = sz * nitems;
  const char *v;
  size_t vl;
  if (n >= 5 && !strncmp(buf, "HTTP/", 5)) { /* a new response along the redirect chain */
    x->have_cr = 0;
    x->cr[0] = 0;
    x->retry_after[0] = x->ratelimit[0] = x->rlpolicy[0] = 0;
  } else if (hname(buf, n, "retry-after", &v, &vl)) {
    copy_hval(x->retry_after, sizeof x->retry_after, v, vl);
  } else if (hname(buf, n, "ratelimit", &v, &vl)) {
    copy_hval(x->ratelimit, sizeof x->ratelimit, v, vl);
  } else if (hname(buf, n, "ratelimit-policy", &v, &vl)) {
    copy_hval(x->rlpolicy, sizeof x->rlpolicy, v, vl);
  } else if (hname(buf, n, "content-range", &v, &vl)) {
    copy_hval(x->cr, sizeof x->cr, v, vl);
    x->have_cr = 1;
  } else if (x->meta && hname(buf, n, "x-repo-commit", &v, &vl)) {
    copy_hval(x->meta->repo_commit, sizeof x->meta->repo_commit, v, vl);
  } else if (x->meta && hname(buf, n, "x-linked-etag", &v, &vl)) {
    copy_hval(x->meta->linked_etag, sizeof x->meta->linked_etag, v, vl);
  } else if (x->meta && hname(buf, n, "x-linked-size", &v, &vl)) {
    char tmp[32];
    copy_hval(tmp, sizeof tmp, v, vl);
    char *end;
    long long s = strtoll(tmp, &end, 10);
    if (*tmp && !*end && s >= 0) x->meta->linked_size = s;
  } else if (x->meta && hname(buf, n, "etag", &v, &vl)) {
    while (vl && (*v == ' ' || *v == '\t')) v++, vl--;
    if (vl >= 2 && v[0] == 'W' && v[1] == '/') v += 2, vl -= 2;
    copy_hval(x->meta->etag, sizeof x->meta->etag, v, vl);
  }
  return n;
}

static int check_response(xfer *x) {
  long code = 0;
  curl_easy_getinfo(x->h->curl, CURLINFO_RESPONSE_CODE, &code);
  if (code >= 300) return 1; /* an error body: swallowed, status handled after the transfer */
  if (!x->range) {
    if (code != 200) {
      snprintf(x->why, sizeof x->why, "status %ld, expected 200", code);
      x->abort = AB_STATUS;
      return -1;
    }
    return 0;
  }
  if (code == 200 && x->total >= 0) {
    /* A server or proxy that ignores Range sends the whole file: that is
     * what was asked for when the range is the whole file; otherwise only
     * a caller that reads it as a stream can use it. */
    curl_off_t cl = -1;
    curl_easy_getinfo(x->h->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
    if (cl >= 0 && cl != x->total) {
      snprintf(x->why, sizeof x->why, "status 200 to a range request with %lld bytes, the file has %lld",
               (long long)cl, (long long)x->total);
      x->abort = AB_RANGE;
      return -1;
    }
    if ((x->first == 0 && x->len == (uint64_t)x->total) || x->whole_ok) {
      x->whole = 1;
      x->h->st.whole_bodies++;
      return 0;
    }
    snprintf(x->why, sizeof x->why,
             "status 200 (the whole file) to a request for bytes %llu-%llu: the server or a proxy "
             "ignores Range",
             (unsigned long long)x->first, (unsigned long long)(x->first + x->len - 1));
    x->abort = AB_NORANGE;
    return -1;
  }
  if (code != 206) {
    snprintf(x->why, sizeof x->why,
             "status %ld to a range request, expected exactly 206 (the server or a proxy "
             "ignored the Range header)",
             code);
    x->abort = AB_STATUS;
    return -1;
  }
  uint64_t a, b, t;
  if (!x->have_cr || df_http_parse_content_range(x->cr, strlen(x->cr), &a, &b, &t)) {
    snprintf(x->why, sizeof x->why, "206 with %s Content-Range '%.60s'",
             x->have_cr ? "an unparsable" : "no", x->cr);
    x->abort = AB_RANGE;
    return -1;
  }
  if (a != x->first || b != x->first + x->len - 1 || (x->total >= 0 && t != (uint64_t)x->total)) {
    snprintf(x->why, sizeof x->why,
             "Content-Range 'bytes %llu-%llu/%llu', asked for bytes %llu-%llu of %lld",
             (unsigned long long)a, (unsigned long long)b, (unsigned long long)t,
             (unsigned long long)x->first, (unsigned long long)(x->first + x->len - 1),
             (long long)x->total);
    x->abort = AB_RANGE;
    return -1;
  }
  return 0;
}

static size_t on_body(char *buf, size_t sz, size_t nitems, void *ud) {
  xfer *x = ud;
  size_t n = sz * nitems;
  if (!x->checked) {
    int r = check_response(x);
    if (r < 0) return 0;
    x->checked = r == 0 ? 1 : 2;
  }
  if (x->checked == 2) return n; /* error body */
  if (!x->range) {
    if (x->doc_len + n > x->doc_max) {
      snprintf(x->why, sizeof x->why, "document larger than %zu bytes", x->doc_max);
      x->abort = AB_LONG;
      return 0;
    }
    if (x->doc_len + n + 1 > x->doc_cap) {
      x->doc_cap = (x->doc_len + n + 1) * 2;
      x->doc = df_xrealloc(x->doc, x->doc_cap);
    }
    memcpy(x->doc + x->doc_len, buf, n);
    x->doc_len += n;
    x->h->st.bytes += n;
    return n;
  }
  if (x->whole) { /* the whole file: skip to the range, stop after it */
    size_t full = n;
    uint64_t at = x->pos;
    x->pos += n;
    x->h->st.bytes += n;
    if (x->pos <= x->first) return n;
    if (at < x->first) {
      buf += x->first - at;
      n -= (size_t)(x->first - at);
    }
    size_t take = x->got + n > x->len ? (size_t)(x->len - x->got) : n;
    if (take && x->sink(x->ud, x->first + x->got, buf, take, &x->sink_err)) {
      x->abort = AB_SINK;
      return 0;
    }
    x->got += take;
    if (take < n) {
      x->abort = AB_ENOUGH; /* the rest of the file is not wanted */
      return 0;
    }
    return full;
  }
  if (x->got + n > x->len) {
    snprintf(x->why, sizeof x->why, "body longer than the %llu bytes asked for",
             (unsigned long long)x->len);
    x->abort = AB_LONG;
    return 0;
  }
  if (x->sink(x->ud, x->first + x->got, buf, n, &x->sink_err)) {
    x->abort = AB_SINK;
    return 0;
  }
  x->got += n;
  x->h->st.bytes += n;
  return n;
}

/* auth: whether the Authorization header may go with this request (not to a
 * remembered target on another origin). */
static void setup_handle(df_http *h, const char *url, int auth, xfer *x, char *errbuf) {
  CURL *c = h->curl;
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_USERAGENT, "deltafin/" DF_VERSION);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, h->cfg.stall_s < 20 ? h->cfg.stall_s : 20L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, h->cfg.stall_s);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
  if (h->hdrs && auth) curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->hdrs);
}

/* 1 = retry, 0 = fatal; fills e with the message either way. */
static int classify_status(df_http *h, long code, const char *url, df_err *e) {
  switch (code) {
  case 401:
    df_err_set(e,
               "%s: 401 Unauthorized: the endpoint wants a token for %s. Set HF_TOKEN to an "
               "access token that can read it (and accept the model's terms on its page if it "
               "is gated), or check HF_ENDPOINT",
               url, h->what);
    return 0;
  case 403:
    df_err_set(e,
               "%s: 403 Forbidden: the token in HF_TOKEN may not read %s. Request access on the "
               "model's page or use a token with read permission for this repository",
               url, h->what);
    return 0;
  case 404:
    df_err_set(e,
               "%s: 404 Not Found: check --repo (%s), --revision and HF_ENDPOINT; a private "
               "repository also answers 404 without a valid HF_TOKEN",
               url, h->what);
    return 0;
  case 416:
    df_err_set(e,
               "%s: 416 Range Not Satisfiable: the file on the server is smaller than the model "
               "info says; the revision may have changed (pin --revision to a commit)",
               url);
    return 0;
  default:
    break;
  }
  df_err_set(e, "%s: HTTP status %ld", url, code);
  return code == 408 || code == 429 || code >= 500;
}

static void backoff(df_http *h, int attempt) {
  double s = h->cfg.backoff_s;
  for (int i = 0; i < attempt && s < 5.0; i++) s *= 2;
  if (s > 5.0) s = 5.0;
  s *= 0.75 + 0.5 * (double)rand_r(&h->seed) / (double)RAND_MAX; /* jitter: spread reconnects */
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static void url_host(const char *url, char *out, size_t cap) {
  const char *p = strstr(url, "://");
  p = p ? p + 3 : url;
  size_t n = strcspn(p, "/?#");
  if (n >= cap) n = cap - 1;
  memcpy(out, p, n);
  out[n] = 0;
}

/* After a rate-limit answer: closes the gate for the time it asked (a
 * doubling wait when it said nothing) and waits; -1 when that is past the
 * patience left. */
static int rate_wait(df_http *h, const xfer *x, int *nohint, df_err *e) {
  double w = x->wait_s;
  const char *why = *x->retry_after ? "as its Retry-After says" : "as its RateLimit header says";
  if (w == -2) {
    w = 1.0;
    for (int i = 0; i < *nohint && w < 60; i++) w *= 2;
    if (w > 60) w = 60;
    (*nohint)++;
    why = "it gave no time: waiting longer each time";
  } else {
    *nohint = 0;
  }
  char host[200], *eff = NULL;
  curl_easy_getinfo(h->curl, CURLINFO_EFFECTIVE_URL, &eff);
  url_host(eff ? eff : "", host, sizeof host);
  double left;
  int fresh;
  if (gate_close(h->gate, w, &left, &fresh))
    return df_err_prefix(e,
                         "rate limited by %s: it asks to wait %.0f s, more than the %.0f s left of "
                         "the patience (--max-wait %.0f s); what is downloaded is kept: run setup "
                         "again later, or with a larger --max-wait: ",
                         host, w, left > 0 ? left : 0, h->gate->max_wait);
  if (fresh)
    df_log_warn("rate limited by %s (HTTP %ld): waiting %.0f s, %s%s%s (%.0f s waited so far, "
                "--max-wait %.0f s)",
                host, x->status, w, why,
                *x->ratelimit ? "; RateLimit: " : "", x->ratelimit,
                df_http_gate_waited(h->gate), h->gate->max_wait);
  gate_pass(h->gate);
  return 0;
}

/* One attempt at `to` (url itself, or the target remembered for it, with
 * auth telling whether the token may go there). Messages name `url`: a
 * signed CDN URL is not for logs. Returns 0 done, 1 retryable failure, -1
 * fatal; e set on failure. */
static int attempt_to(df_http *h, const char *url, const char *to, int auth, xfer *x, df_err *e) {
  char errbuf[CURL_ERROR_SIZE] = "";
  char range[64];
  setup_handle(h, to, auth, x, errbuf);
  if (x->range) {
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)x->first,
             (unsigned long long)(x->first + x->len - 1));
    curl_easy_setopt(h->curl, CURLOPT_RANGE, range);
  }
  h->st.requests++;
  CURLcode rc = x->rc = curl_easy_perform(h->curl);
  long nredir = 0;
  if (curl_easy_getinfo(h->curl, CURLINFO_REDIRECT_COUNT, &nredir) == CURLE_OK && nredir > 0)
    h->st.redirects_followed += (uint64_t)nredir;
  long code = 0;
  curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &code);
  if (x->meta) x->meta->status = code;
  x->status = code;
  if (x->abort == AB_SINK) {
    *e = x->sink_err;
    return -1;
  }
  if (x->abort == AB_NORANGE) {
    df_err_set(e, "%s: %s", url, x->why);
    return DF_HTTP_NORANGE;
  }
  if (x->abort == AB_ENOUGH) return 0;
  if (x->abort) {
    df_err_set(e, "%s: %s", url, x->why);
    return 1;
  }
  if (code >= 300 && (rc == CURLE_OK || rc == CURLE_PARTIAL_FILE)) {
    if (code == 429 || code == 503) {
      double w = df_http_retry_after(x->retry_after, x->ratelimit, epoch_now());
      if (w >= 0 || code == 429) {
        x->wait_s = w >= 0 ? w : -2;
        h->st.rate_limited++;
        df_err_set(e, "%s: HTTP %ld (rate limited%s%s%s%s)", url, code,
                   *x->ratelimit ? "; RateLimit: " : "", x->ratelimit,
                   *x->rlpolicy ? "; RateLimit-Policy: " : "", x->rlpolicy);
        return 1;
      }
    }
    return classify_status(h, code, url, e) ? 1 : -1;
  }
  if (rc != CURLE_OK) {
    df_err_set(e, "%s: %s%s%s", url, curl_easy_strerror(rc), *errbuf ? ": " : "", errbuf);
    /* Everything curl reports here is about the connection or the transfer
     * (resets, timeouts, refused connections, short bodies): worth retrying,
     * except a URL curl cannot even use. */
    return rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL ? -1 : 1;
  }
  if (x->range && x->got != x->len) {
    if (!x->checked) return check_response(x) < 0 ? (df_err_set(e, "%s: %s", url, x->why), 1) : 1;
    df_err_set(e, "%s: short body: %llu of %llu bytes", url, (unsigned long long)x->got,
               (unsigned long long)x->len);
    return 1;
  }
  if (!x->range && !x->checked && code != 200) {
    df_err_set(e, "%s: status %ld, expected 200", url, code);
    return 1;
  }
  return 0;
}

static int attempt(df_http *h, const char *url, xfer *x, df_err *e) {
  return attempt_to(h, url, url, 1, x, e);
}

int df_http_head(df_http *h, const char *url, df_http_meta *meta, df_err *e) {
  int nohint = 0;
  for (int a = 0;; a++) {
    xfer x = {.h = h, .meta = meta, .wait_s = -1};
    memset(meta, 0, sizeof *meta);
    meta->linked_size = meta->content_length = -1;
    gate_pass(h->gate);
    char errbuf[CURL_ERROR_SIZE] = "";
    setup_handle(h, url, 1, &x, errbuf);
    curl_easy_setopt(h->curl, CURLOPT_NOBODY, 1L);
    h->st.requests++;
    CURLcode rc = curl_easy_perform(h->curl);
    long code = 0;
    curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &code);
    x.status = meta->status = code;
    curl_off_t cl = -1;
    curl_easy_getinfo(h->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
    meta->content_length = cl;
    int r;
    if (rc != CURLE_OK) {
      df_err_set(e, "%s: %s%s%s", url, curl_easy_strerror(rc), *errbuf ? ": " : "", errbuf);
      r = 1;
    } else if (code == 200) {
      return 0;
    } else if ((code == 429 || code == 503) &&
               ((x.wait_s = df_http_retry_after(x.retry_after, x.ratelimit, epoch_now())) >= 0 ||
                code == 429)) {
      if (x.wait_s < 0) x.wait_s = -2;
      h->st.rate_limited++;
      df_err_set(e, "%s: HTTP %ld (rate limited)", url, code);
      if (rate_wait(h, &x, &nohint, e)) return -1;
      a--;
      continue;
    } else {
      r = classify_status(h, code, url, e) ? 1 : -1;
    }
    if (r < 0 || a >= h->cfg.retries) {
      if (r > 0) df_err_prefix(e, "giving up after %d attempts: ", a + 1);
      return -1;
    }
    h->st.retries++;
    backoff(h, a);
  }
}

int df_http_get(df_http *h, const char *url, size_t max_len, char **body, size_t *len,
                df_http_meta *meta, df_err *e) {
  int nohint = 0;
  for (int a = 0;; a++) {
    xfer x = {.h = h, .doc_max = max_len, .meta = meta, .wait_s = -1};
    gate_pass(h->gate);
    if (meta) {
      memset(meta, 0, sizeof *meta);
      meta->linked_size = -1;
    }
    int r = attempt(h, url, &x, e);
    if (r == 0) {
      if (!x.doc) x.doc = df_xmalloc(1);
      x.doc[x.doc_len] = 0;
      *body = x.doc;
      *len = x.doc_len;
      return 0;
    }
    free(x.doc);
    if (r > 0 && x.wait_s != -1) {
      if (rate_wait(h, &x, &nohint, e)) return -1;
      a--; /* told to wait: not a failure */
      continue;
    }
    if (r < 0 || a >= h->cfg.retries) {
      if (r > 0) df_err_prefix(e, "giving up after %d attempts: ", a + 1);
      return -1;
    }
    h->st.retries++;
    backoff(h, a);
  }
}

/* After a range GET of `url` succeeded: remember where curl ended up. */
static void remember(df_http *h, const char *url) {
  char *eff = NULL;
  if (curl_easy_getinfo(h->curl, CURLINFO_EFFECTIVE_URL, &eff) != CURLE_OK || !eff) return;
  if (strcmp(eff, url)) df_redir_put(h->redir, url, eff);
}

int df_http_get_range(df_http *h, const char *url, uint64_t off, uint64_t len, int64_t total,
                      df_http_sink sink, void *ud, df_err *e) {
  return df_http_get_range_ex(h, url, off, len, total, 0, sink, ud, e);
}

int df_http_get_range_ex(df_http *h, const char *url, uint64_t off, uint64_t len, int64_t total,
                         int whole_ok, df_http_sink sink, void *ud, df_err *e) {
  uint64_t done = 0;
  int fails = 0, reresolved = 0, nohint = 0;
  while (done < len) {
    xfer x = {.h = h, .range = 1, .first = off + done, .len = len - done, .total = total,
              .sink = sink, .ud = ud, .wait_s = -1, .whole_ok = whole_ok};
    gate_pass(h->gate);
    int same = 0;
    const char *to = df_redir_lookup(h->redir, url, &same);
    if (to) h->st.redirects_skipped++;
    int r = attempt_to(h, url, to ? to : url, !to || same, &x, e);
    done += x.got;
    if (r == 0) {
      if (!to) remember(h, url);
      break;
    }
    if (r == DF_HTTP_NORANGE) return DF_HTTP_NORANGE;
    if (r > 0 && x.wait_s != -1) {
      if (rate_wait(h, &x, &nohint, e)) return -1;
      continue; /* told to wait: not a failure */
    }
    /* A remembered target that refuses for good (401/403/404/410: a signed
     * URL past its expiry; a redirect loop; ...) is forgotten and the
     * original URL asked again, once, which resolves it afresh. */
    int refused = r < 0 ? x.abort != AB_SINK : x.rc == CURLE_TOO_MANY_REDIRECTS;
    if (to && refused && !reresolved) {
      df_redir_forget(h->redir, url);
      reresolved = 1;
      h->st.reresolved++;
      continue;
    }
    if (r < 0) return -1;
    /* Progress resets the failure count: a long transfer over a flaky link
     * keeps going as long as each attempt moves it forward. */
    if (x.got) fails = 0;
    if (fails >= h->cfg.retries) return df_err_prefix(e, "giving up after %d attempts: ", fails + 1);
    h->st.retries++;
    backoff(h, fails++);
  }
  return 0;
}

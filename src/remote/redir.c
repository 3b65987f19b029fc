#include "remote/redir.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"

typedef struct entry {
  char *from, *to;
  int same_origin;
} entry;

struct df_redir {
  entry *e;
  int cap, n, next; /* next: the slot replaced when full (oldest first) */
};

df_redir *df_redir_new(int cap) {
  if (cap <= 0 || cap > DF_REDIR_MAX) cap = DF_REDIR_MAX;
  df_redir *t = df_xcalloc(1, sizeof *t);
  t->e = df_xcalloc((size_t)cap, sizeof *t->e);
  t->cap = cap;
  return t;
}

void df_redir_free(df_redir *t) {
  if (!t) return;
  for (int i = 0; i < t->n; i++) {
    free(t->e[i].from);
    free(t->e[i].to);
  }
  free(t->e);
  free(t);
}

/* scheme, host and port of an http(s) URL; 0 on success. */
typedef struct origin {
  char *scheme, *host, *port;
} origin;

static void origin_free(origin *o) {
  curl_free(o->scheme);
  curl_free(o->host);
  curl_free(o->port);
}

static int origin_of(const char *url, origin *o) {
  memset(o, 0, sizeof *o);
  CURLU *u = curl_url();
  if (!u) return -1;
  int rc = -1;
  if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_SCHEME, &o->scheme, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &o->host, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_PORT, &o->port, CURLU_DEFAULT_PORT) == CURLUE_OK &&
      (!strcasecmp(o->scheme, "http") || !strcasecmp(o->scheme, "https")))
    rc = 0;
  curl_url_cleanup(u);
  if (rc) origin_free(o);
  return rc;
}

int df_redir_same_origin(const char *a, const char *b) {
  origin x, y;
  if (origin_of(a, &x)) return 0;
  if (origin_of(b, &y)) {
    origin_free(&x);
    return 0;
  }
  /* host names compare without case, as curl does for its own redirects */
  int same = !strcasecmp(x.scheme, y.scheme) && !strcasecmp(x.host, y.host) &&
             !strcmp(x.port, y.port);
  origin_free(&x);
  origin_free(&y);
  return same;
}

static int find(const df_redir *t, const char *from) {
  for (int i = 0; i < t->n; i++)
    if (!strcmp(t->e[i].from, from)) return i;
  return -1;
}

const char *df_redir_lookup(const df_redir *t, const char *from, int *same_origin) {
  int i = find(t, from);
  if (i < 0) return NULL;
  if (same_origin) *same_origin = t->e[i].same_origin;
  return t->e[i].to;
}

int df_redir_put(df_redir *t, const char *from, const char *to) {
  origin a, b;
  if (origin_of(from, &a)) return -1;
  origin_free(&a);
  if (origin_of(to, &b)) return -1;
  origin_free(&b);
  int same = df_redir_same_origin(from, to);
  int i = find(t, from);
  if (i < 0) {
    if (t->n < t->cap) {
      i = t->n++;
    } else {
      i = t->next;
      t->next = (t->next + 1) % t->cap;
    }
    free(t->e[i].from);
    free(t->e[i].to);
    t->e[i].from = df_xstrdup(from);
  } else {
    free(t->e[i].to);
  }
  t->e[i].to = df_xstrdup(to);
  t->e[i].same_origin = same;
  return 0;
}

int df_redir_forget(df_redir *t, const char *from) {
  int i = find(t, from);
  if (i < 0) return 0;
  free(t->e[i].from);
  free(t->e[i].to);
  /* keep the slots packed; the replacement order stays roughly oldest first */
  t->e[i] = t->e[--t->n];
  t->e[t->n] = (entry){0};
  if (t->next >= t->n) t->next = 0;
  return 1;
}

int df_redir_count(const df_redir *t) { return t->n; }

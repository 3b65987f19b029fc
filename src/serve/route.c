#include "serve/route.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"

static const char *strip_v1(const char *path) {
  return !strncmp(path, "/v1/", 4) ? path + 3 : path;
}

df_route df_serve_route(const char *method, const char *path, const char **allow,
                        const char **arg) {
  int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
  int post = !strcmp(method, "POST");
  *allow = NULL;
  *arg = NULL;
  df_route r = DF_ROUTE_NOT_FOUND;
  if (!strcmp(path, "/health")) {
    r = DF_ROUTE_HEALTH;
  } else if (!strcmp(path, "/metrics")) {
    r = DF_ROUTE_METRICS;
  } else {
    const char *p = strip_v1(path);
    if (!strcmp(p, "/models")) r = DF_ROUTE_MODELS;
    else if (!strncmp(p, "/models/", 8) && p[8]) r = DF_ROUTE_MODEL, *arg = p + 8;
    else if (!strcmp(p, "/chat/completions")) r = DF_ROUTE_CHAT;
    else if (!strcmp(p, "/completions")) r = DF_ROUTE_COMPLETIONS;
    else if (!strcmp(p, "/tokenize")) r = DF_ROUTE_TOKENIZE;
    else if (!strcmp(p, "/detokenize")) r = DF_ROUTE_DETOKENIZE;
    else if (!strcmp(p, "/apply-template")) r = DF_ROUTE_APPLY_TEMPLATE;
    else if (!strcmp(p, "/responses")) r = DF_ROUTE_RESPONSES;
  }
  if (r == DF_ROUTE_NOT_FOUND) return r;
  int is_post = r == DF_ROUTE_CHAT || r == DF_ROUTE_COMPLETIONS || r == DF_ROUTE_TOKENIZE ||
                r == DF_ROUTE_DETOKENIZE || r == DF_ROUTE_APPLY_TEMPLATE || r == DF_ROUTE_RESPONSES;
  *allow = is_post ? "POST" : "GET, HEAD";
  if (is_post ? !post : !get) {
    *arg = NULL;
    return DF_ROUTE_BAD_METHOD;
  }
  return r;
}

int df_serve_auth_ok(const char *header, const char *key) {
  if (!header || !key) return 0;
  if (strncasecmp(header, "Bearer ", 7)) return 0;
  const char *v = header + 7;
  while (*v == ' ') v++;
  size_t n = strlen(v), k = strlen(key);
  while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
  unsigned char d = n != k;
  for (size_t i = 0; i < k; i++) d |= (unsigned char)(key[i] ^ (i < n ? v[i] : 0));
  return d == 0;
}

int df_serve_admit(int inflight, int queue_max) { return inflight < 1 + queue_max; }

int df_serve_fifo_cap(int queue_max) { return 1 + (queue_max > 0 ? queue_max : 0); }

static int ieq_n(const char *a, size_t n, const char *b) {
  return strlen(b) == n && !strncasecmp(a, b, n);
}

int df_serve_host_ok(const char *host, const char *listen_host, const char *const *allow,
                     int nallow) {
  if (!host) return 1;
  for (int i = 0; i < nallow; i++)
    if (!strcmp(allow[i], "*")) return 1;
  char name[256];
  size_t n;
  if (host[0] == '[') { /* [v6]:port */
    const char *e = strchr(host, ']');
    if (!e || (e[1] && e[1] != ':')) return 0;
    n = (size_t)(e - host - 1);
    if (n >= sizeof name) return 0;
    memcpy(name, host + 1, n);
    name[n] = 0;
    struct in6_addr a6;
    return inet_pton(AF_INET6, name, &a6) == 1;
  }
  const char *colon = strchr(host, ':');
  n = colon ? (size_t)(colon - host) : strlen(host);
  if (n == 0 || n >= sizeof name) return 0;
  if (colon) {
    for (const char *p = colon + 1; *p; p++)
      if (!isdigit((unsigned char)*p)) return 0;
  }
  memcpy(name, host, n);
  name[n] = 0;
  if (n && name[n - 1] == '.') name[--n] = 0; /* "localhost." */
  struct in_addr a4;
  if (inet_pton(AF_INET, name, &a4) == 1) return 1;
  if (ieq_n(name, n, "localhost")) return 1;
  if (listen_host && ieq_n(name, n, listen_host)) return 1;
  for (int i = 0; i < nallow; i++)
    if (ieq_n(name, n, allow[i])) return 1;
  return 0;
}

int df_serve_ctype_json(const char *ct) {
  if (!ct) return 0;
  while (*ct == ' ' || *ct == '\t') ct++;
  static const char want[] = "application/json";
  if (strncasecmp(ct, want, sizeof want - 1)) return 0;
  const char *p = ct + sizeof want - 1;
  while (*p == ' ' || *p == '\t') p++;
  return *p == 0 || *p == ';';
}

int df_serve_cors_ok(const char *origin, const char *const *list, int n) {
  if (!origin) return 0;
  for (int i = 0; i < n; i++)
    if (!strcmp(list[i], "*") || !strcasecmp(list[i], origin)) return 1;
  return 0;
}

/* RFC 9110 tchar: the characters of a header name */
static int tchar(unsigned char c) {
  return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

const char *df_serve_cors_allow_headers(const char *requested, char *out, size_t cap) {
  static const char dflt[] = "Authorization, Content-Type";
  snprintf(out, cap, "%s", dflt);
  if (!requested) return out;
  size_t n = strlen(requested), names = 0;
  if (n + 1 > cap) return out;
  /* a comma-separated list of names with optional white space, nothing else */
  const unsigned char *p = (const unsigned char *)requested;
  for (;;) {
    while (*p == ' ' || *p == '\t') p++;
    const unsigned char *b = p;
    while (tchar(*p)) p++;
    if (p == b) return out;
    names++;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) break;
    if (*p++ != ',') return out;
  }
  if (names) snprintf(out, cap, "%s", requested);
  return out;
}

int df_serve_framing(const char *const *cl, int ncl, const char *te, const char **why) {
  *why = NULL;
  unsigned long long first = 0;
  for (int i = 0; i < ncl; i++) {
    const char *p = cl[i];
    while (*p == ' ' || *p == '\t') p++;
    if (!isdigit((unsigned char)*p)) {
      *why = "a Content-Length that is not a number";
      return 400;
    }
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    while (*end == ' ' || *end == '\t') end++;
    if (*end) {
      *why = "a Content-Length that is not one number";
      return 400;
    }
    if (i && v != first) {
      *why = "two different Content-Length headers";
      return 400;
    }
    first = v;
  }
  if (te) {
    if (ncl) {
      *why = "both Content-Length and Transfer-Encoding";
      return 400;
    }
    while (*te == ' ' || *te == '\t') te++;
    size_t n = strlen(te);
    while (n && (te[n - 1] == ' ' || te[n - 1] == '\t')) n--;
    if (!ieq_n(te, n, "chunked")) {
      *why = "a transfer coding other than chunked";
      return 501;
    }
  }
  return 0;
}

char *df_serve_log_escape(char *out, size_t cap, const char *in) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  if (!cap) return out;
  for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
    int plain = *p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\';
    size_t need = plain ? 1 : 4;
    if (o + need >= cap) break;
    if (plain) {
      out[o++] = (char)*p;
    } else {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[*p >> 4];
      out[o++] = hex[*p & 15];
    }
  }
  out[o] = 0;
  return out;
}

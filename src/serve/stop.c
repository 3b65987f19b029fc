#include "serve/stop.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void df_stop_init(df_stop *s, char *const *stops, const size_t *lens, int n) {
  memset(s, 0, sizeof *s);
  s->stops = stops;
  s->lens = lens;
  s->n = n;
}

void df_stop_free(df_stop *s) { df_sbuf_free(&s->pend); }

int df_stop_push(df_stop *s, const char *text, size_t len, df_sbuf *out) {
  if (s->matched) return 1;
  if (s->n == 0) {
    df_sbuf_add(out, text, len);
    return 0;
  }
  df_sbuf_add(&s->pend, text, len);
  const char *p = s->pend.p;
  size_t n = s->pend.n;
  /* The first sequence to be completed wins (as if generation had stopped
   * right there); of two completed by the same byte, the longer. Earlier
   * pushes left no complete match, so the search only needs the text. */
  size_t best = (size_t)-1, best_end = (size_t)-1;
  for (int i = 0; i < s->n; i++) {
    size_t L = s->lens[i];
    for (size_t at = 0; at + L <= n && at + L <= best_end; at++)
      if (!memcmp(p + at, s->stops[i], L)) {
        if (at + L < best_end || at < best) best = at, best_end = at + L;
        break;
      }
  }
  if (best != (size_t)-1) {
    df_sbuf_add(out, p, best);
    s->pend.n = 0;
    s->matched = 1;
    return 1;
  }
  /* hold back the longest tail that is a proper prefix of some sequence */
  size_t hold = 0;
  for (int i = 0; i < s->n; i++) {
    size_t L = s->lens[i];
    for (size_t k = (L - 1 < n ? L - 1 : n); k > hold; k--)
      if (!memcmp(p + n - k, s->stops[i], k)) {
        hold = k;
        break;
      }
  }
  df_sbuf_add(out, p, n - hold);
  memmove(s->pend.p, p + n - hold, hold);
  s->pend.n = hold;
  return 0;
}

void df_stop_flush(df_stop *s, df_sbuf *out) {
  if (!s->matched) df_sbuf_add(out, s->pend.p, s->pend.n);
  s->pend.n = 0;
}

/* df_sbuf (see sbuf.h). */
#include "base/sbuf.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void df_sbuf_add(df_sbuf *b, const void *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t c = b->cap ? b->cap : 64;
    while (c < b->n + n + 1) c *= 2;
    b->p = df_xrealloc(b->p, c);
    b->cap = c;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

void df_sbuf_addstr(df_sbuf *b, const char *s) { df_sbuf_add(b, s, strlen(s)); }

void df_sbuf_free(df_sbuf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

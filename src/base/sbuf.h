/* A growable byte buffer, always NUL-terminated (not counted in n): the one
 * string builder of the tokenizer's chat code and the server's responses. */
#ifndef DF_BASE_SBUF_H
#define DF_BASE_SBUF_H

#include <stddef.h>

/* Zero-initialised ({0}) is empty; p stays NULL until the first add. */
typedef struct df_sbuf {
  char *p;
  size_t n, cap;
} df_sbuf;

void df_sbuf_add(df_sbuf *b, const void *s, size_t n);
void df_sbuf_addstr(df_sbuf *b, const char *s);
/* Frees p and leaves the buffer empty (reusable). */
void df_sbuf_free(df_sbuf *b);

#endif

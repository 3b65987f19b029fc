/* Stop sequences on streamed text: bytes are released only once they can no
 * longer be the start of a stop sequence, so a streamed response and a
 * non-streamed one are cut at the same place and the stop text itself is
 * never sent. The sequence completed first wins (generation would have
 * stopped at that token). Inputs and stop strings are complete UTF-8, so every cut falls
 * on a character boundary. */
#ifndef DF_SERVE_STOP_H
#define DF_SERVE_STOP_H

#include <stddef.h>

#include "base/sbuf.h"

typedef struct df_stop {
  char *const *stops;
  const size_t *lens;
  int n;
  df_sbuf pend; /* text not yet released */
  int matched;
} df_stop;

void df_stop_init(df_stop *s, char *const *stops, const size_t *lens, int n);
void df_stop_free(df_stop *s);
/* Feeds text; appends what is now safe to release to out. Returns 1 when a
 * stop sequence has been found (the text before it is in out; the rest is
 * dropped and further pushes are ignored), else 0. */
int df_stop_push(df_stop *s, const char *text, size_t len, df_sbuf *out);
/* End of generation without a match: releases the held-back tail. */
void df_stop_flush(df_stop *s, df_sbuf *out);

#endif

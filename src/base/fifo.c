#include "base/fifo.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void df_fifo_init(df_fifo *f, int cap) {
  f->cap = cap > 0 ? cap : 1;
  f->slot = df_xcalloc((size_t)f->cap, sizeof *f->slot);
  f->head = f->n = 0;
}

void df_fifo_free(df_fifo *f) {
  free(f->slot);
  memset(f, 0, sizeof *f);
}

int df_fifo_push(df_fifo *f, void *p) {
  if (f->n == f->cap) return -1;
  f->slot[(f->head + f->n) % f->cap] = p;
  f->n++;
  return 0;
}

void *df_fifo_pop(df_fifo *f) {
  if (!f->n) return NULL;
  void *p = f->slot[f->head];
  f->head = (f->head + 1) % f->cap;
  f->n--;
  return p;
}

int df_fifo_remove(df_fifo *f, void *p) {
  for (int i = 0; i < f->n; i++) {
    if (f->slot[(f->head + i) % f->cap] != p) continue;
    for (int j = i; j + 1 < f->n; j++)
      f->slot[(f->head + j) % f->cap] = f->slot[(f->head + j + 1) % f->cap];
    f->n--;
    return 1;
  }
  return 0;
}

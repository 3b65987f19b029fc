/* The eviction order (see evict.h). */
#include "store/evict.h"

#include <math.h>
#include <stdlib.h>

double df_evict_score(double score, long tick, long now, double half_life) {
  return score * exp2(-(double)(now - tick) / half_life);
}

void df_evict_touch(double *score, long *tick, long now, double half_life) {
  *score = df_evict_score(*score, *tick, now, half_life) + 1.0;
  *tick = now;
}

static double ranked(const df_evict_cand *c) {
  return c->is_new ? c->score - DF_EVICT_ADMIT_MARGIN : c->score;
}

static int cmp(const void *a, const void *b) {
  const df_evict_cand *x = a, *y = b;
  if (x->is_protected != y->is_protected) return x->is_protected - y->is_protected;
  double sx = ranked(x), sy = ranked(y);
  if (sx != sy) return sx < sy ? -1 : 1;
  return x->key - y->key;
}

void df_evict_order(df_evict_cand *c, size_t n) { qsort(c, n, sizeof *c, cmp); }

/* The expert cache's eviction policy, alone so that tests can see it: each
 * entry's score is its access frequency decayed with a half-life in forward
 * passes; when the cache is over budget the unreferenced entries are evicted
 * unprotected first (an entry hit twice is protected, up to 4/5 of the
 * cache), coldest first, ties to the lower key, so the hot set survives a
 * burst of one-off experts (a prefill chunk) and a choice is reproducible. */
#ifndef DF_STORE_EVICT_H
#define DF_STORE_EVICT_H

#include <stddef.h>

typedef struct df_evict_cand {
  int key;          /* the entry's key (layer-major) */
  int is_protected; /* hit at least twice */
  double score;     /* decayed frequency now (df_evict_score) */
} df_evict_cand;

/* The score at pass `now` of one that was `score` at pass `tick`. */
double df_evict_score(double score, long tick, long now, double half_life);
/* An access at pass `now`: the decayed score plus one. */
void df_evict_touch(double *score, long *tick, long now, double half_life);
/* Sorts c[0..n) into eviction order: c[0] goes first. */
void df_evict_order(df_evict_cand *c, size_t n);

#endif

/* The expert cache's eviction policy, alone so that tests can see it: each
 * key's score is its access frequency decayed with a half-life in forward
 * passes, counted whether the key is held or not (an evicted expert keeps
 * its history); when the cache is over budget the unreferenced entries are
 * evicted unprotected first (an entry hit twice is protected, up to 4/5 of
 * the cache), coldest first, ties to the lower key, so the hot set survives
 * a burst of one-off experts (a prefill chunk) and a choice is reproducible.
 * An entry first used in this pass (new: loaded for it, or read ahead by a
 * prediction and used now) counts as DF_EVICT_ADMIT_MARGIN colder than its
 * score: it displaces a held one only when it has been used that much more
 * lately. Without it, experts used
 * every pass in the same order (a model that routes every expert, or a
 * cache smaller than a token's set) met an LRU in disguise: within a pass
 * the held experts not yet reached are the least recently touched, so each
 * was evicted just before its use and none ever hit (the GPU tier's same
 * finding, kernels/dtier.h). */
#ifndef DF_STORE_EVICT_H
#define DF_STORE_EVICT_H

#include <stddef.h>

/* Two uses: in a cycle the held entries not yet reached this pass have
 * about one use fewer than the new one (2^(-1/32) of one less, by the
 * decay), so a margin of one would hold the cycle by 2% of a use, and a
 * heat seed's difference could undo it. */
#define DF_EVICT_ADMIT_MARGIN 2.0

typedef struct df_evict_cand {
  int key;          /* the entry's key (layer-major) */
  int is_protected; /* hit at least twice */
  double score;     /* decayed frequency now (df_evict_score) */
  int is_new;       /* first used this pass: DF_EVICT_ADMIT_MARGIN colder */
} df_evict_cand;

/* The score at pass `now` of one that was `score` at pass `tick`. */
double df_evict_score(double score, long tick, long now, double half_life);
/* An access at pass `now`: the decayed score plus one. */
void df_evict_touch(double *score, long *tick, long now, double half_life);
/* Sorts c[0..n) into eviction order: c[0] goes first. */
void df_evict_order(df_evict_cand *c, size_t n);

#endif

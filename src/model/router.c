/* The router's top-k (see router.h). */
#include "model/router.h"

/* Insertion into a descending list of the best k biased scores: an expert
 * goes before the first kept one whose score is strictly lower, so among
 * equal scores the earlier (lower) id stays ahead and a later one only
 * enters behind it. One body for both activation types (fp32, and float64
 * for --precision f64). */
#define ROUTER_SELECT(NAME, R) \
void NAME(const df_config *c, const R *sc, const float *bias, int *ids, R *w) { \
  int K = c->top_k, n = 0; \
  R best[K > 0 ? K : 1]; \
  for (int e = 0; e < c->n_experts; e++) { \
    R b = sc[e] + (R)bias[e]; \
    int at = n; \
    while (at > 0 && best[at - 1] < b) at--; \
    if (at >= K) continue; \
    int last = n < K ? n : K - 1; \
    for (int i = last; i > at; i--) best[i] = best[i - 1], ids[i] = ids[i - 1]; \
    best[at] = b; \
    ids[at] = e; \
    if (n < K) n++; \
  } \
  for (int i = 1; i < K; i++) \
    for (int j = i; j > 0 && ids[j - 1] > ids[j]; j--) { \
      int t = ids[j]; \
      ids[j] = ids[j - 1]; \
      ids[j - 1] = t; \
    } \
  R sum = 0; \
  for (int i = 0; i < K; i++) sum += sc[ids[i]]; \
  for (int i = 0; i < K; i++) { \
    R v = c->norm_topk_prob ? sc[ids[i]] / sum : sc[ids[i]]; \
    w[i] = v * (R)c->routed_scale; \
  } \
}

ROUTER_SELECT(df_router_select, float)
ROUTER_SELECT(df_router_select64, double)

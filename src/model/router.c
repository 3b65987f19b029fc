/* The router's top-k (see router.h). */
#include "model/router.h"

/* Insertion into a descending list of the best k biased scores: an expert
 * goes before the first kept one whose score is strictly lower, so among
 * equal scores the earlier (lower) id stays ahead and a later one only
 * enters behind it. */
void df_router_select(const df_config *c, const float *sc, const float *bias, int *ids, float *w) {
  int K = c->top_k, n = 0;
  float best[K > 0 ? K : 1];
  for (int e = 0; e < c->n_experts; e++) {
    float b = sc[e] + bias[e];
    int at = n;
    while (at > 0 && best[at - 1] < b) at--;
    if (at >= K) continue;
    int last = n < K ? n : K - 1;
    for (int i = last; i > at; i--) best[i] = best[i - 1], ids[i] = ids[i - 1];
    best[at] = b;
    ids[at] = e;
    if (n < K) n++;
  }
  for (int i = 1; i < K; i++)
    for (int j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
      int t = ids[j];
      ids[j] = ids[j - 1];
      ids[j - 1] = t;
    }
  float sum = 0.0f;
  for (int i = 0; i < K; i++) sum += sc[ids[i]];
  for (int i = 0; i < K; i++) {
    float v = c->norm_topk_prob ? sc[ids[i]] / sum : sc[ids[i]];
    w[i] = v * c->routed_scale;
  }
}


/* The MoE router's choice for one row (kimi-k3.md section 5.4): the top k
 * experts by sigmoid score + correction bias (the bias only selects), ties
 * to the lower expert id; weights from the unbiased scores, renormalised over
 * the chosen k when norm_topk_prob, times routed_scale. */
#ifndef DF_MODEL_ROUTER_H
#define DF_MODEL_ROUTER_H

#include "format/config.h"

/* sc: n_experts sigmoid scores; bias: n_experts correction biases. ids gets
 * the top_k chosen experts in ascending id order, w their weights (same
 * order). */
void df_router_select(const df_config *c, const float *sc, const float *bias, int *ids, float *w);
/* The same choice on float64 scores (--precision f64). */
void df_router_select64(const df_config *c, const double *sc, const float *bias, int *ids,
                        double *w);

#endif

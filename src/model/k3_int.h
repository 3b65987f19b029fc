/* Private to src/model/: the layout of a loaded model. Everything outside
 * the model component uses the accessors of k3.h. */
#ifndef DF_MODEL_K3_INT_H
#define DF_MODEL_K3_INT_H

#include "model/k3.h"

typedef struct df_k3_layer {
  int kind; /* DF_LAYER_KDA / DF_LAYER_MLA */
  int moe;
  const float *in_norm, *post_norm, *attn_res_norm, *mlp_res_norm, *attn_res_proj, *mlp_res_proj;
  /* KDA */
  df_wmat q, k, v, g, fa, fb, b, o;
  const float *conv[3]; /* q, k, v: [P][K] */
  const float *A_log, *dt_bias, *o_norm;
  /* MLA */
  df_wmat qa, qb, kva, kvb, mg, mo;
  const float *qa_norm, *kva_norm;
  /* dense FFN */
  df_wmat gate, up, down;
  /* MoE */
  df_wmat router, lat_down, lat_up, sh_gate, sh_up, sh_down;
  const float *router_bias, *lat_norm;
} df_k3_layer;

struct df_k3 {
  const df_config *cfg;
  int int8;
  df_k3_layer *layers;
  df_wmat embed, lm_head;
  const float *final_norm, *out_res_norm, *out_res_proj;
  df_st_set *int8set; /* owned when int8 */
  void **owned;       /* fp32 copies of small vectors and realigned tensors */
  int nowned, capowned;
  uint64_t spine_bytes_per_token; /* spine weight bytes one decode token reads */
};

#endif

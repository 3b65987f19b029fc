/* Planner inputs computed from a K3 config alone (no checkpoint): the
 * bytes of each unit's matrices as the loader would stream them, so
 * `deltafin plan` can plan full K3 on any machine. Mirrors k3_load.c's
 * tensor list: every 2-D spine matrix streams with its layer except the MoE
 * router (resident); small vectors are fp32 copies. */
#include "plan/plan.h"

static uint64_t mat(int64_t rows, int64_t cols, int int8) {
  return int8 ? (uint64_t)rows * (uint64_t)cols + 4 * (uint64_t)rows
              : 2 * (uint64_t)rows * (uint64_t)cols;
}

void df_plan_k3_units(const df_config *c, int int8, uint64_t *bytes, uint64_t *read,
                      uint64_t *fixed, uint64_t *embed_row) {
  int64_t H = c->hidden, P = (int64_t)c->kda_heads * c->kda_head_dim, D = c->kda_head_dim;
  int64_t Hm = c->mla_heads, S = (int64_t)c->n_shared * c->moe_inter;
  uint64_t fx = 0;
  for (int l = 0; l < c->n_layers; l++) {
    uint64_t b = 0;
    fx += 4 * 6 * (uint64_t)H; /* norms and AttnRes rows as fp32 */
    if (c->layer_kind[l] == DF_LAYER_KDA) {
      b += 4 * mat(P, H, int8) + mat(D, H, int8) + mat(P, D, int8) + mat(c->kda_heads, H, int8) +
           mat(H, P, int8);
      fx += 4 * (3 * (uint64_t)P * (uint64_t)c->kda_conv + 2 * (uint64_t)P + (uint64_t)D + 128);
    } else {
      b += mat(c->q_lora_rank, H, int8) +
           mat(Hm * (c->qk_nope_dim + c->qk_rope_dim), c->q_lora_rank, int8) +
           mat(c->kv_lora_rank + c->qk_rope_dim, H, int8) +
           mat(Hm * (c->qk_nope_dim + c->v_head_dim), c->kv_lora_rank, int8) +
           (c->mla_output_gate ? mat(Hm * c->v_head_dim, H, int8) : 0) +
           mat(H, Hm * c->v_head_dim, int8);
      fx += 4 * (uint64_t)(c->q_lora_rank + c->kv_lora_rank);
    }
    if (l < c->first_k_dense) {
      b += 2 * mat(c->dense_inter, H, int8) + mat(H, c->dense_inter, int8);
    } else {
      b += mat(c->latent, H, int8) + mat(H, c->latent, int8);
      if (S > 0) b += 2 * mat(S, H, int8) + mat(H, S, int8);
      fx += 2 * (uint64_t)c->n_experts * (uint64_t)H + 4 * (uint64_t)(c->n_experts + c->latent);
    }
    bytes[l] = b;
    /* a layer's tensors are a few coalesced extents: one 4 KiB page of slack each */
    read[l] = (b + 4095) / 4096 * 4096 + 3 * 4096;
  }
  bytes[c->n_layers] = mat(c->vocab, H, int8);
  read[c->n_layers] = (bytes[c->n_layers] + 4095) / 4096 * 4096 + 4096;
  *fixed = fx + 4 * 3 * (uint64_t)H;
  *embed_row = int8 ? (uint64_t)H + 4 : 2 * (uint64_t)H;
}

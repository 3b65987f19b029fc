/* The K3 model: spine weights checked against the config at load, per-
 * sequence state, and the exact forward pass of kimi-k3.md section 5 over a
 * batch of T positions. Routed experts come only from the expert store.
 *
 * Pinned choices where the contract leaves one open:
 *   - KDA L2 norm: u / sqrt(sum u^2 + 1e-6) (flash-linear-attention).
 *   - KDA A_log is indexed per head (entries >= num_heads are padding).
 *   - MLA uses the latent cache (kv_lora_rank normalised latent + rope part
 *     per position) with kv_b absorbed into the query and the output.
 *   - MoE: routed experts are summed in ascending expert id.
 *   - --spine int8: every 2-D bf16 spine matrix with more than one row is
 *     read from DIR/spine-int8/, except the router (block_sparse_moe.gate),
 *     which stays bf16 so int8 rounding never changes which experts run.
 */
#ifndef DF_MODEL_K3_H
#define DF_MODEL_K3_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "kernels/kernels.h"
#include "store/store.h"

#define DF_SPINE_INT8_DIR "spine-int8"

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

typedef struct df_k3 {
  const df_config *cfg;
  int int8;
  df_k3_layer *layers;
  df_wmat embed, lm_head;
  const float *final_norm, *out_res_norm, *out_res_proj;
  df_st_set *int8set; /* owned when int8 */
  void **owned;       /* fp32 copies of small vectors and realigned tensors */
  int nowned, capowned;
  uint64_t spine_bytes_per_token; /* spine weight bytes one decode token reads */
} df_k3;

/* Checks every spine tensor (presence, shape, dtype) against the config and
 * maps it; with int8 also DIR/spine-int8/. Messages name the tensor and the
 * config field it contradicts. */
int df_k3_load(df_k3 **out, const df_st_set *set, const df_config *c, int int8,
               const char *model_dir, df_err *e);
void df_k3_free(df_k3 *m);

/* True for the spine tensors the int8 spine replaces (see above). */
int df_k3_int8_eligible(const df_tensor *t);

/* Writes DIR/spine-int8/ (one safetensors file per source shard holding its
 * eligible tensors as `<name>` I8 [rows, cols] + `<name>.scale` F32 [rows],
 * then an index); resumable per shard, every file written atomically. */
int df_k3_convert_spine(const char *model_dir, int threads, int force, df_err *e);

/* ---- per-sequence state and the forward pass ---- */
typedef struct df_k3_state df_k3_state;

df_k3_state *df_k3_state_new(const df_k3 *m);
void df_k3_state_free(df_k3_state *s);
void df_k3_state_reset(df_k3_state *s);
int df_k3_state_pos(const df_k3_state *s);

/* Called after each layer with the T hidden states (the next layer's h). */
typedef void (*df_k3_layer_hook)(void *ud, int layer, const float *h, int T, int hidden);
void df_k3_state_set_hook(df_k3_state *s, df_k3_layer_hook fn, void *ud);

/* Polled after each layer; nonzero stops the pass: df_k3_forward returns
 * DF_K3_CANCELLED (no error set) with the state partly updated (reset it).
 * A layer of a long prefill chunk can take seconds, so a chunk is not the
 * unit of cancellation. NULL removes it. */
#define DF_K3_CANCELLED 1
typedef int (*df_k3_cancel_fn)(void *ud);
void df_k3_state_set_cancel(df_k3_state *s, df_k3_cancel_fn fn, void *ud);

/* What the gate-ahead predictor feeds layer L+1's router with (only when
 * the store wants hints, see df_store_wants_hint). Decode recall measured on
 * the synthetic presets (40 tokens, top-k/E is chance): tiny 0.44 from x vs
 * 0.43 with the shared output (chance 0.25); small 0.41 vs 0.39 (chance
 * 0.06). x alone is as good and needs nothing more, so it is the default. */
enum {
  DF_GATE_FROM_X = 0,        /* L's normalised MLP input x */
  DF_GATE_FROM_X_SHARED = 1, /* L's MLP input + L's shared-expert output, normalised with
                              * L+1's post-attention norm */
};

typedef struct df_k3_run {
  const df_k3 *m;
  const df_kctx *kc;
  df_store *store;
  int gate_input; /* DF_GATE_FROM_* */
} df_k3_run;

/* Runs ids[0..T) at positions pos..pos+T-1. logits_last (vocab) gets the last
 * row's logits, logits_all (T x vocab) every row's; either may be NULL. On
 * error the state is left at its old position but may be partly updated:
 * reset the session. */
int df_k3_forward(const df_k3_run *r, df_k3_state *s, const int *ids, int T, float *logits_last,
                  float *logits_all, df_err *e);

#endif

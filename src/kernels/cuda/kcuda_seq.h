/* The sequence part of a KDA layer on the GPU (issue 21): what
 * model/k3_forward_t.h's conv_task and kda_head_task compute after the
 * layer's products, on device memory, bit for bit (kcuda.h's rules: the
 * lane-16 dot, rounded products, IEEE division and square root, kmath.h's
 * expf). kcuda_seq_ref.h holds the scalar reference both the stand-in of
 * tests/mockgpu and the GPU test compare against.
 *
 * Layouts are the forward pass's: P = heads x D channels, row t of q, k, v,
 * g, f and o at [t * P], beta's at [t * heads]. Every pointer is device
 * memory. */
#ifndef DF_KERNELS_CUDA_KCUDA_SEQ_H
#define DF_KERNELS_CUDA_KCUDA_SEQ_H

#include "kernels/cuda/kcuda.h"

typedef struct df_cuda_kda_args {
  int T, heads, D, K; /* rows, heads, head dim, conv width (>= 1) */
  float lb, eps;      /* the gate's lower bound, o_norm's epsilon */
  float *q, *k, *v;   /* T x P: conv in place, then SiLU, L2 norm (q also scaled) */
  float *g;           /* T x P: the output gate, sigmoid in place */
  float *f;           /* T x P: the gate's input, alpha in its place */
  const float *b;     /* T x heads: beta before its sigmoid */
  float *o;           /* T x P: the output */
  float *S;           /* heads x D x D: the state, updated */
  float *conv_st;     /* 3 x (K-1) x P: the last K-1 inputs of q, k, v, oldest first */
  const float *conv_w; /* 3 x P x K: q's, k's and v's conv weights */
  const float *A_log;  /* heads */
  const float *dt_bias; /* P */
  const float *o_norm;  /* D */
  /* Speculation's per-row boundary states (nrow 0: none): after row t <
   * nrow the state as it then is also goes to rows + t * rstride, S there
   * and the conv windows at + rconv (kgpu.c's layout of a kept state), so
   * a rejected draft is undone by a copy, on the device. */
  int nrow;
  float *rows;
  size_t rstride, rconv;
} df_cuda_kda_args;

/* conv_task then kda_head_task for every head over the T rows in order:
 * the causal depthwise conv of q, k and v (the window the K-1 stored inputs
 * then the new one; conv_st moves on T rows), then per row SiLU of q, k, v,
 * L2 norm of q and k, q scaled by 1/sqrt(D), alpha from f, beta's sigmoid,
 * the KDA step on S, o's RMS norm with o_norm, times sigmoid(g). q, k, v, f
 * and g are left as the CPU's loops leave them; the first nrow rows'
 * states are written out as they are reached.
 *
 * Asynchronous as kcuda.h's calls, on the context's stream: after the
 * copies in queued there, before the copies out (a decode layer waits for
 * the device once, at its copy out). On -1 (a launch refused),
 * df_cuda_kda_error says why; a fault while the kernels run shows at the
 * next call that waits. */
int df_cuda_kda(df_cuda *c, const df_cuda_kda_args *a);
const char *df_cuda_kda_error(void);

/* MLA attention's part between the projections (model/k3_forward_t.h's
 * mla_task): per (row, head) the query's latent (kv_b's key rows absorbed:
 * the transposed product of df_wmat_t), the scores against the latent
 * cache (latent part and rope part, each a lane-16 dot, their sum scaled),
 * the softmax, and the latent output olat; kv_b's value rows and the gate
 * are kgpu.c's (kcuda.h's GEMMs, df_cuda_mla_gate). Queued as df_cuda_kda;
 * errors in df_cuda_kda_error. */
typedef struct df_cuda_mla_args {
  int T, heads, n0;       /* rows, heads, positions before row 0 (row t sees n0 + t + 1) */
  int dn, dr, dv, kr;     /* qk_nope, qk_rope, v_head dims, kv_lora_rank */
  int wkind;              /* kv_b's format: 0 bf16, 1 int8, 2 f32 (heads x (dn + dv) rows of kr) */
  const void *w;
  const float *wscale;    /* int8's row scales */
  const float *q;         /* T x heads x (dn + dr) */
  const float *cache;     /* (n0 + T) x (kr + dr) */
  float *olat;            /* T x heads x kr: out */
  float *sc;              /* T x heads x (n0 + T): scratch */
} df_cuda_mla_args;
int df_cuda_mla_attn(df_cuda *c, const df_cuda_mla_args *a);
/* g = sigmoid(g), o *= g over n floats (the MLA output gate). Queued. */
int df_cuda_mla_gate(df_cuda *c, float *o, float *g, size_t n);

#endif

/* The scalar reference of kcuda_seq.h's kernels on host memory: the
 * forward pass's conv_task and kda_head_task (model/k3_forward_t.h, fp32)
 * written over df_cuda_kda_args' layout, with the scalar table and libm's expf
 * and sqrtf. The stand-in of tests/mockgpu runs it as its "device", so the
 * mock suites compare it with the forward's own code byte for byte; the GPU
 * test compares the CUDA kernels with it. Keep it the same arithmetic as
 * the forward's loops: each product in a named temporary (so no compiler
 * may fuse it), the same order of every sum. */
#ifndef DF_KERNELS_CUDA_KCUDA_SEQ_REF_H
#define DF_KERNELS_CUDA_KCUDA_SEQ_REF_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kcuda_seq.h"
#include "kernels/kernels.h"

static inline void df_kda_ref_conv(const df_cuda_kda_args *a) {
  size_t P = (size_t)a->heads * (size_t)a->D;
  int K = a->K;
  float *X[3] = {a->q, a->k, a->v};
  for (int s = 0; s < 3; s++) {
    size_t win = (size_t)s * (size_t)(K - 1) * P;
    float *st = a->conv_st + win, *x = X[s];
    const float *W = a->conv_w + (size_t)s * P * (size_t)K;
    for (size_t c = 0; c < P; c++) {
      const float *w = W + c * (size_t)K;
      for (int t = 0; t < a->T; t++) {
        float in = x[(size_t)t * P + c], acc = 0;
        for (int i = 0; i < K - 1; i++) {
          float p = st[(size_t)i * P + c] * w[i];
          acc += p;
        }
        float p = in * w[K - 1];
        acc += p;
        for (int i = 0; i + 1 < K - 1; i++) st[(size_t)i * P + c] = st[(size_t)(i + 1) * P + c];
        if (K > 1) st[(size_t)(K - 2) * P + c] = in;
        x[(size_t)t * P + c] = acc;
        if (t < a->nrow) {
          float *b = a->rows + (size_t)t * a->rstride + a->rconv + win;
          for (int i = 0; i < K - 1; i++) b[(size_t)i * P + c] = st[(size_t)i * P + c];
        }
      }
    }
  }
}

static inline void df_kda_ref_l2norm(const df_kern *k, float *u, int n) {
  float ss = k->dot(u, u, n);
  float inv = 1.0f / sqrtf(ss + 1e-6f);
  for (int i = 0; i < n; i++) u[i] *= inv;
}

static inline void df_kda_ref_heads(const df_cuda_kda_args *a) {
  const df_kern *k = df_kern_scalar();
  int D = a->D;
  size_t P = (size_t)a->heads * (size_t)D;
  float *scr = malloc(sizeof(float) * 2 * (size_t)(D > 0 ? D : 1)), *tmp = scr + D;
  float qscale = 1.0f / sqrtf((float)D);
  for (int h = 0; h < a->heads; h++) {
    size_t off = (size_t)h * (size_t)D;
    float *S = a->S + off * (size_t)D;
    float expA = expf(a->A_log[h]), lb = a->lb;
    const float *dtb = a->dt_bias + off;
    for (int t = 0; t < a->T; t++) {
      size_t r = (size_t)t * P + off;
      float *q = a->q + r, *kv = a->k + r, *v = a->v + r, *f = a->f + r, *o = a->o + r;
      k->silu(q, D);
      k->silu(kv, D);
      k->silu(v, D);
      df_kda_ref_l2norm(k, q, D);
      df_kda_ref_l2norm(k, kv, D);
      for (int d = 0; d < D; d++) q[d] *= qscale;
      for (int d = 0; d < D; d++) {
        float x = f[d] + dtb[d];
        tmp[d] = expA * x;
      }
      k->sigmoid(tmp, D);
      for (int d = 0; d < D; d++) {
        float g = lb * tmp[d];
        f[d] = expf(g);
      }
      float beta = a->b[(size_t)t * (size_t)a->heads + (size_t)h];
      k->sigmoid(&beta, 1);
      k->kda_step(S, q, kv, v, f, beta, o, scr, D);
      if (t < a->nrow)
        memcpy(a->rows + (size_t)t * a->rstride + off * (size_t)D, S, sizeof(float) * D * D);
      k->rmsnorm(o, o, a->o_norm, D, a->eps);
      float *g = a->g + r;
      k->sigmoid(g, D);
      for (int d = 0; d < D; d++) o[d] *= g[d];
    }
  }
  free(scr);
}

/* df_cuda_kda's reference. */
static inline void df_kda_ref(const df_cuda_kda_args *a) {
  if (a->T <= 0 || a->heads <= 0 || a->D <= 0) return;
  df_kda_ref_conv(a);
  df_kda_ref_heads(a);
}

/* df_cuda_mla_attn's reference: mla_task up to olat. */
static inline void df_mla_ref_attn(const df_cuda_mla_args *a) {
  const df_kern *k = df_kern_scalar();
  int Hm = a->heads, dn = a->dn, dr = a->dr, dv = a->dv, kr = a->kr;
  size_t w = (size_t)(kr + dr), ntot = (size_t)a->n0 + (size_t)a->T;
  float *qlat = malloc(sizeof(float) * (size_t)(kr > 0 ? kr : 1));
  float scale = 1.0f / sqrtf((float)(dn + dr));
  for (int t = 0; t < a->T; t++)
    for (int h = 0; h < Hm; h++) {
      int n = a->n0 + t + 1, r0 = h * (dn + dv);
      const float *q = a->q + (size_t)t * Hm * (dn + dr) + (size_t)h * (dn + dr);
      float *sc = a->sc + ((size_t)t * Hm + h) * ntot, *olat = a->olat + ((size_t)t * Hm + h) * kr;
      if (a->wkind == 0) {
        k->gemv_t_bf16(a->w, kr, r0, r0 + dn, q, qlat);
      } else if (a->wkind == 1) {
        k->gemv_t_i8(a->w, a->wscale, kr, r0, r0 + dn, q, qlat);
      } else {
        const float *W = a->w;
        for (int c = 0; c < kr; c++) qlat[c] = 0;
        for (int r = r0; r < r0 + dn; r++)
          for (int c = 0; c < kr; c++) {
            float p = W[(size_t)r * kr + c] * q[r - r0];
            qlat[c] += p;
          }
      }
      for (int s = 0; s < n; s++) {
        const float *cs = a->cache + (size_t)s * w;
        float x = k->dot(qlat, cs, kr), y = k->dot(q + dn, cs + kr, dr);
        float sum = x + y;
        sc[s] = sum * scale;
      }
      k->softmax(sc, n);
      for (int i = 0; i < kr; i++) olat[i] = 0;
      for (int s = 0; s < n; s++) {
        const float *cs = a->cache + (size_t)s * w;
        float p = sc[s];
        for (int i = 0; i < kr; i++) {
          float x = p * cs[i];
          olat[i] += x;
        }
      }
    }
  free(qlat);
}

static inline void df_mla_ref_gate(float *o, float *g, size_t n) {
  df_kern_scalar()->sigmoid(g, (int)n);
  for (size_t i = 0; i < n; i++) o[i] *= g[i];
}

/* df_cuda_moe_combine's reference: moe_layer's step 6 loop (kcuda.h). */
static inline void df_moe_combine_ref(float *out, const float *Y, const int *rows, const float *w,
                                      int T, int K, int n) {
  for (int t = 0; t < T; t++)
    for (int d = 0; d < n; d++) {
      float acc = 0.0f;
      for (int k = 0; k < K; k++) {
        float p = w[t * K + k] * Y[(size_t)rows[t * K + k] * n + d];
        acc += p;
      }
      out[(size_t)t * n + d] = acc;
    }
}

/* df_cuda_attn_res's reference: the forward's ar_task and rms_rows (the
 * scalar table's rmsnorm, dot and softmax); tmp holds H + nS + 1 floats. */
static inline void df_attn_res_ref(float *xn, const float *snaps, size_t ss, int nS,
                                   const float *last, int T, int H, const float *res_norm,
                                   const float *res_proj, const float *norm, float eps,
                                   float *tmp) {
  const df_kern *k = df_kern_scalar();
  float *sc = tmp + H;
  for (int t = 0; t < T; t++) {
    const float *lt = last + (size_t)t * H;
    float *y = xn + (size_t)t * H;
    if (nS > 0) {
      for (int i = 0; i <= nS; i++) {
        const float *v = i < nS ? snaps + (size_t)i * ss + (size_t)t * H : lt;
        k->rmsnorm(tmp, v, res_norm, H, eps);
        sc[i] = k->dot(tmp, res_proj, H);
      }
      k->softmax(sc, nS + 1);
      for (int d = 0; d < H; d++) y[d] = 0;
      for (int i = 0; i <= nS; i++) {
        const float *v = i < nS ? snaps + (size_t)i * ss + (size_t)t * H : lt;
        for (int d = 0; d < H; d++) {
          float q = sc[i] * v[d];
          y[d] += q;
        }
      }
      lt = y;
    }
    k->rmsnorm(y, lt, norm, H, eps);
  }
}

#endif

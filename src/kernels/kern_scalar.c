/* The scalar reference kernels. Every loop keeps the lane-16 order of
 * kernels.h; products go to a named temporary before they are added so no
 * compiler may fuse them into an FMA (C forbids contraction across
 * statements). The 16 lanes are independent, so compilers may still
 * vectorise these loops without changing a bit. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

#define L DF_KLANES
#define TB 4 /* vectors per weight pass in GEMM */

const float df_kern_e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

static inline float lane_reduce(float *acc) {
  for (int w = L / 2; w >= 1; w >>= 1)
    for (int j = 0; j < w; j++) acc[j] += acc[j + w];
  return acc[0];
}

/* Accumulates the products of one block of up to 16 weights (already fp32)
 * with nt vectors. */
static inline void acc_block(float acc[TB][L], const float *wf, int n, const float *X, size_t ldx,
                             int t0, int nt, int i) {
  for (int tt = 0; tt < nt; tt++) {
    const float *x = X + (size_t)(t0 + tt) * ldx + i;
    for (int j = 0; j < n; j++) {
      float p = wf[j] * x[j];
      acc[tt][j] += p;
    }
  }
}

/* The dense GEMMs differ only in how a chunk of up to L weights becomes fp32
 * (exactly, in every case); the products, lanes and reduction are shared. */
typedef enum { DENSE_BF16, DENSE_F32, DENSE_I8 } dense_kind;

static void gemm_dense_s(dense_kind k, const void *W, const float *scale, int cols, int r0,
                         int r1, const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  for (int r = r0; r < r1; r++) {
    size_t row = (size_t)r * cols;
    for (int t0 = 0; t0 < T; t0 += TB) {
      int nt = T - t0 < TB ? T - t0 : TB;
      float acc[TB][L];
      memset(acc, 0, sizeof acc);
      for (int i = 0; i < cols; i += L) {
        int n = cols - i < L ? cols - i : L;
        float wf[L];
        for (int j = 0; j < n; j++)
          wf[j] = k == DENSE_BF16 ? df_kbf16(((const uint16_t *)W)[row + i + j])
                  : k == DENSE_F32 ? ((const float *)W)[row + i + j]
                                   : (float)((const int8_t *)W)[row + i + j];
        acc_block(acc, wf, n, X, ldx, t0, nt, i);
      }
      for (int tt = 0; tt < nt; tt++) {
        float s = lane_reduce(acc[tt]);
        Y[(size_t)(t0 + tt) * ldy + (r - r0)] = k == DENSE_I8 ? s * scale[r] : s;
      }
    }
  }
}

static void gemm_bf16_s(const uint16_t *W, int cols, int r0, int r1, const float *X, int T,
                        size_t ldx, float *Y, size_t ldy) {
  gemm_dense_s(DENSE_BF16, W, NULL, cols, r0, r1, X, T, ldx, Y, ldy);
}

static void gemm_f32_s(const float *W, int cols, int r0, int r1, const float *X, int T,
                       size_t ldx, float *Y, size_t ldy) {
  gemm_dense_s(DENSE_F32, W, NULL, cols, r0, r1, X, T, ldx, Y, ldy);
}

static void gemm_i8_s(const int8_t *W, const float *scale, int cols, int r0, int r1,
                      const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  gemm_dense_s(DENSE_I8, W, scale, cols, r0, r1, X, T, ldx, Y, ldy);
}

static void gemm_mxfp4_s(const uint8_t *packed, const uint8_t *scales, int cols, int r0, int r1,
                         const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  int ng = cols / 32;
  for (int r = r0; r < r1; r++) {
    const uint8_t *p = packed + (size_t)r * (cols / 2);
    const uint8_t *sc = scales + (size_t)r * ng;
    for (int t0 = 0; t0 < T; t0 += TB) {
      int nt = T - t0 < TB ? T - t0 : TB;
      float acc[TB][L];
      memset(acc, 0, sizeof acc);
      for (int g = 0; g < ng; g++) {
        float s = df_ke8m0(sc[g]);
        float wf[32];
        for (int j = 0; j < 16; j++) {
          uint8_t b = p[g * 16 + j];
          wf[2 * j] = df_kern_e2m1[b & 15] * s;
          wf[2 * j + 1] = df_kern_e2m1[b >> 4] * s;
        }
        acc_block(acc, wf, L, X, ldx, t0, nt, g * 32);
        acc_block(acc, wf + L, L, X, ldx, t0, nt, g * 32 + L);
      }
      for (int tt = 0; tt < nt; tt++) Y[(size_t)(t0 + tt) * ldy + (r - r0)] = lane_reduce(acc[tt]);
    }
  }
}

static void gemv_t_bf16_s(const uint16_t *W, int cols, int r0, int r1, const float *x, float *y) {
  for (int c = 0; c < cols; c++) y[c] = 0.0f;
  for (int r = r0; r < r1; r++) {
    const uint16_t *w = W + (size_t)r * cols;
    float xr = x[r - r0];
    for (int c = 0; c < cols; c++) {
      float p = df_kbf16(w[c]) * xr;
      y[c] += p;
    }
  }
}

static void gemv_t_i8_s(const int8_t *W, const float *scale, int cols, int r0, int r1,
                        const float *x, float *y) {
  for (int c = 0; c < cols; c++) y[c] = 0.0f;
  for (int r = r0; r < r1; r++) {
    const int8_t *w = W + (size_t)r * cols;
    float xr = scale[r] * x[r - r0];
    for (int c = 0; c < cols; c++) {
      float p = (float)w[c] * xr;
      y[c] += p;
    }
  }
}

static float dot_s(const float *a, const float *b, int n) {
  float acc[L] = {0};
  for (int i = 0; i < n; i += L) {
    int m = n - i < L ? n - i : L;
    for (int j = 0; j < m; j++) {
      float p = a[i + j] * b[i + j];
      acc[j] += p;
    }
  }
  return lane_reduce(acc);
}

static void rmsnorm_s(float *y, const float *x, const float *w, int n, float eps) {
  float ss = dot_s(x, x, n);
  float inv = 1.0f / sqrtf(ss / (float)n + eps);
  if (w)
    for (int i = 0; i < n; i++) {
      float t = x[i] * inv;
      y[i] = t * w[i];
    }
  else
    for (int i = 0; i < n; i++) y[i] = x[i] * inv;
}

static void softmax_s(float *x, int n) {
  float m = x[0];
  for (int i = 1; i < n; i++)
    if (x[i] > m) m = x[i];
  float sum = 0.0f;
  for (int i = 0; i < n; i++) {
    x[i] = expf(x[i] - m);
    sum += x[i];
  }
  for (int i = 0; i < n; i++) x[i] /= sum;
}

static inline float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

static void sigmoid_s(float *x, int n) {
  for (int i = 0; i < n; i++) x[i] = sigm(x[i]);
}

static void silu_s(float *x, int n) {
  for (int i = 0; i < n; i++) x[i] = x[i] * sigm(x[i]);
}

static void situ_s(float *out, const float *g, const float *u, int n, float bg, float bu) {
  for (int i = 0; i < n; i++) {
    float gate = bg * tanhf(g[i] / bg);
    gate = gate * sigm(g[i]);
    float up = bu * tanhf(u[i] / bu);
    out[i] = gate * up;
  }
}

static void kda_step_s(float *S, const float *q, const float *k, const float *v,
                       const float *alpha, float beta, float *o, float *scratch, int D) {
  float *u = scratch;
  for (int j = 0; j < D; j++) u[j] = 0.0f;
  /* decay each key row, then u = S^T k (ascending key index) */
  for (int i = 0; i < D; i++) {
    float *row = S + (size_t)i * D;
    float a = alpha[i], ki = k[i];
    for (int j = 0; j < D; j++) {
      row[j] *= a;
      float p = row[j] * ki;
      u[j] += p;
    }
  }
  /* delta = beta (v - u); S += k delta^T; o = S^T q, read after the update */
  for (int j = 0; j < D; j++) u[j] = beta * (v[j] - u[j]);
  for (int j = 0; j < D; j++) o[j] = 0.0f;
  for (int i = 0; i < D; i++) {
    float *row = S + (size_t)i * D;
    float ki = k[i], qi = q[i];
    for (int j = 0; j < D; j++) {
      float p = ki * u[j];
      row[j] += p;
      float r = row[j] * qi;
      o[j] += r;
    }
  }
}

static const df_kern scalar_table = {
    .name = "scalar",
    .gemm_bf16 = gemm_bf16_s,
    .gemm_i8 = gemm_i8_s,
    .gemm_f32 = gemm_f32_s,
    .gemm_mxfp4 = gemm_mxfp4_s,
    .gemv_t_bf16 = gemv_t_bf16_s,
    .gemv_t_i8 = gemv_t_i8_s,
    .dot = dot_s,
    .rmsnorm = rmsnorm_s,
    .softmax = softmax_s,
    .sigmoid = sigmoid_s,
    .silu = silu_s,
    .situ = situ_s,
    .kda_step = kda_step_s,
};

const df_kern *df_kern_scalar(void) { return &scalar_table; }

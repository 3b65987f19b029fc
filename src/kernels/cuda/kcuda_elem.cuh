/* The element-wise kernels of kcuda.h (sigmoid, SiLU, SiTU, the
 * elementary functions, a MoE layer's routed sum, the add), the single KDA
 * step and the router's top-k: a header of its own, as kcuda_gemm.cuh, so
 * tests/cuda/emu runs these same kernels on the host; the launches stay in
 * kcuda.cu. */
#ifndef DF_KERNELS_CUDA_KCUDA_ELEM_CUH
#define DF_KERNELS_CUDA_KCUDA_ELEM_CUH

#include "kernels/cuda/kcuda_block.cuh"
#include "kernels/cuda/kmath.h"

__global__ void sigmoid_k(float *x, int n, int silu) {
  pdl_enter();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = silu ? __fmul_rn(x[i], sigm(x[i])) : sigm(x[i]);
}

__global__ void situ_k(float *out, const float *g, const float *u, int n, float bg, float bu) {
  pdl_enter();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float gate = __fmul_rn(bg, df_km_tanhf(__fdiv_rn(g[i], bg)));
    gate = __fmul_rn(gate, sigm(g[i]));
    float up = __fmul_rn(bu, df_km_tanhf(__fdiv_rn(u[i], bu)));
    out[i] = __fmul_rn(gate, up);
  }
}

__global__ void elementary_k(int which, const float *x, float *y, size_t n) {
  pdl_enter();
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = x[i];
    y[i] = which == 0 ? df_km_expf(v) : which == 1 ? df_km_tanhf(v) : __fdiv_rn(1.0f, __fsqrt_rn(v));
  }
}

/* one thread per (row, element): the slots in order, each product rounded */
__global__ void moe_combine_k(float *out, const float *Y, const int *rows, const float *w, int T,
                              int K, int n) {
  pdl_enter();
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (long)T * n;
       i += (long)gridDim.x * blockDim.x) {
    int t = (int)(i / n), d = (int)(i % n);
    float acc = 0.0f;
    for (int k = 0; k < K; k++)
      acc = __fadd_rn(acc, __fmul_rn(w[t * K + k], Y[(size_t)rows[t * K + k] * n + d]));
    out[i] = acc;
  }
}
__global__ void add_k(float *y, const float *a, const float *b, size_t n) {
  pdl_enter();
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] = __fadd_rn(a[i], b[i]);
}
/* One block per head, one thread per value column j (kda_column). */
__global__ void kda_step_k(float *S, const float *q, const float *k, const float *v,
                           const float *alpha, const float *beta, float *o, int D) {
  pdl_enter();
  int h = blockIdx.x;
  float *St = S + (size_t)h * D * D;
  const float *qh = q + (size_t)h * D, *kh = k + (size_t)h * D, *ah = alpha + (size_t)h * D;
  for (int j = threadIdx.x; j < D; j += blockDim.x)
    o[(size_t)h * D + j] = kda_column(St, ah, kh, qh, beta[h], v[(size_t)h * D + j], j, D);
}

#define ROUTER_MAX_K 64

/* One thread per row: the insertion of model/router.c, the same
 * comparisons in the same order (ties keep the lower id), then the same
 * sequential sum and scaling. */
__global__ void router_k(const float *sc, const float *bias, int E, int K, int norm, float scale,
                         int rows, int *ids, float *w) {
  pdl_enter();
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float *s = sc + (size_t)r * E;
  int *id = ids + (size_t)r * K;
  float *wr = w + (size_t)r * K;
  float best[ROUTER_MAX_K];
  int n = 0;
  for (int e = 0; e < E; e++) {
    float b = __fadd_rn(s[e], bias[e]);
    int at = n;
    while (at > 0 && best[at - 1] < b) at--;
    if (at >= K) continue;
    int last = n < K ? n : K - 1;
    for (int i = last; i > at; i--) best[i] = best[i - 1], id[i] = id[i - 1];
    best[at] = b;
    id[at] = e;
    if (n < K) n++;
  }
  for (int i = 1; i < K; i++)
    for (int j = i; j > 0 && id[j - 1] > id[j]; j--) {
      int t = id[j];
      id[j] = id[j - 1];
      id[j - 1] = t;
    }
  float sum = 0.0f;
  for (int i = 0; i < K; i++) sum = __fadd_rn(sum, s[id[i]]);
  for (int i = 0; i < K; i++) {
    float v = norm ? __fdiv_rn(s[id[i]], sum) : s[id[i]];
    wr[i] = __fmul_rn(v, scale);
  }
}

#endif

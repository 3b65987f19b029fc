/* The sequence kernels of kcuda_seq.h: a KDA layer's conv and recurrence,
 * MLA's attention between its projections and its gate. A header of its
 * own, as kcuda_gemm.cuh, so tests/cuda/emu runs these same kernels on the
 * host; the launches stay in kcuda_seq.cu. */
#ifndef DF_KERNELS_CUDA_KCUDA_SEQ_CUH
#define DF_KERNELS_CUDA_KCUDA_SEQ_CUH

extern "C" {
#include "kernels/cuda/kcuda_seq.h"
}
#include "kernels/cuda/kcuda_block.cuh"
#include "kernels/cuda/kmath.h"

#define SEQ_LANES 16

/* One thread per (input, channel): the window's sum over the stored inputs
 * then the new one, ascending, as conv_task's; the window after each of
 * the first nrow rows copied out as well. */
__global__ void kda_conv_k(df_cuda_kda_args a) {
  pdl_enter();
  long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
  int P = a.heads * a.D, K = a.K;
  if (idx >= 3L * P) return;
  int s = (int)(idx / P), c = (int)(idx % P);
  float *x = s == 0 ? a.q : s == 1 ? a.k : a.v;
  size_t win = (size_t)s * (size_t)(K - 1) * P;
  float *st = a.conv_st + win;
  const float *w = a.conv_w + ((size_t)s * P + c) * (size_t)K;
  for (int t = 0; t < a.T; t++) {
    float in = x[(size_t)t * P + c], acc = 0.0f;
    for (int i = 0; i < K - 1; i++) acc = __fadd_rn(acc, __fmul_rn(st[(size_t)i * P + c], w[i]));
    acc = __fadd_rn(acc, __fmul_rn(in, w[K - 1]));
    for (int i = 0; i + 1 < K - 1; i++) st[(size_t)i * P + c] = st[(size_t)(i + 1) * P + c];
    if (K > 1) st[(size_t)(K - 2) * P + c] = in;
    x[(size_t)t * P + c] = acc;
    if (t < a.nrow) {
      float *b = a.rows + (size_t)t * a.rstride + a.rconv + win;
      for (int i = 0; i < K - 1; i++) b[(size_t)i * P + c] = st[(size_t)i * P + c];
    }
  }
}

/* dot(x, x) of n shared floats in the scalar dot's order: lane j sums
 * x[j], x[j + 16], ... ascending, then the 8, 4, 2, 1 tree. Every thread
 * of the block calls it (it holds barriers) and gets the sum. */
__device__ static float seq_sumsq(const float *x, int n, float *lane) {
  if (threadIdx.x < SEQ_LANES) {
    float a = 0.0f;
    for (int i = threadIdx.x; i < n; i += SEQ_LANES) a = __fadd_rn(a, __fmul_rn(x[i], x[i]));
    lane[threadIdx.x] = a;
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = SEQ_LANES / 2; w >= 1; w >>= 1)
      for (int j = 0; j < w; j++) lane[j] = __fadd_rn(lane[j], lane[j + w]);
  __syncthreads();
  float r = lane[0];
  __syncthreads();
  return r;
}

/* One block per head; per row: the elementwise part with the head's q, k,
 * v and alpha kept in shared memory, the two L2 norms, then the KDA step
 * with thread j owning column j of S (each of the step's sums runs over the
 * key index for a fixed column, so a column is one thread's ascending
 * loops, as in the scalar step), then o's norm and gate. The state after
 * each of the first nrow rows is copied out column by column. */
__global__ void kda_heads_k(df_cuda_kda_args a) {
  pdl_enter();
  DF_DYN_SHARED(float, sm);
  int D = a.D, h = blockIdx.x;
  float *sq = sm, *sk = sq + D, *sv = sk + D, *sa = sv + D, *so = sa + D, *lane = so + D;
  size_t P = (size_t)a.heads * D, off = (size_t)h * D;
  float *S = a.S + off * D;
  const float *dtb = a.dt_bias + off;
  float expA = df_km_expf(a.A_log[h]);
  float qscale = __fdiv_rn(1.0f, __fsqrt_rn((float)D));
  for (int t = 0; t < a.T; t++) {
    size_t r = (size_t)t * P + off;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      float x = a.q[r + d];
      sq[d] = __fmul_rn(x, sigm(x));
      x = a.k[r + d];
      sk[d] = __fmul_rn(x, sigm(x));
      x = a.v[r + d];
      sv[d] = __fmul_rn(x, sigm(x));
      float y = __fmul_rn(expA, __fadd_rn(a.f[r + d], dtb[d]));
      sa[d] = df_km_expf(__fmul_rn(a.lb, sigm(y)));
    }
    __syncthreads();
    float invq = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(seq_sumsq(sq, D, lane), 1e-6f)));
    float invk = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(seq_sumsq(sk, D, lane), 1e-6f)));
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      sq[d] = __fmul_rn(__fmul_rn(sq[d], invq), qscale);
      sk[d] = __fmul_rn(sk[d], invk);
      a.q[r + d] = sq[d];
      a.k[r + d] = sk[d];
      a.v[r + d] = sv[d];
      a.f[r + d] = sa[d];
    }
    __syncthreads();
    float beta = sigm(a.b[(size_t)t * a.heads + h]);
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
      so[j] = kda_column(S, sa, sk, sq, beta, sv[j], j, D);
      if (t < a.nrow) { /* column j is this thread's alone: no barrier before its copy */
        float *b = a.rows + (size_t)t * a.rstride + off * D;
        for (int i = 0; i < D; i++) b[(size_t)i * D + j] = S[(size_t)i * D + j];
      }
    }
    __syncthreads();
    float ss = seq_sumsq(so, D, lane);
    float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)D), a.eps)));
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      float g = sigm(a.g[r + d]);
      a.g[r + d] = g;
      a.o[r + d] = __fmul_rn(__fmul_rn(__fmul_rn(so[d], inv), a.o_norm[d]), g);
    }
    __syncthreads(); /* the next row overwrites the shared vectors */
  }
}

/* ---- MLA attention between its projections ---- */

/* a * b over n floats in the scalar dot's lane-16 order, by one thread */
__device__ static float seq_dot16(const float *a, const float *b, int n) {
  float acc[SEQ_LANES];
  for (int j = 0; j < SEQ_LANES; j++) acc[j] = 0.0f;
  for (int i = 0; i < n; i += SEQ_LANES) {
    int m = n - i < SEQ_LANES ? n - i : SEQ_LANES;
    for (int j = 0; j < m; j++) acc[j] = __fadd_rn(acc[j], __fmul_rn(a[i + j], b[i + j]));
  }
  for (int w = SEQ_LANES / 2; w >= 1; w >>= 1)
    for (int j = 0; j < w; j++) acc[j] = __fadd_rn(acc[j], acc[j + w]);
  return acc[0];
}

/* kv_b's row r, column c as a float (int8: the row's scale is applied to
 * the input, as the scalar gemv_t_i8 does) */
__device__ static inline float mla_w(const df_cuda_mla_args &a, size_t r, int c) {
  size_t i = r * (size_t)a.kr + c;
  if (a.wkind == 0) return __uint_as_float((uint32_t)((const uint16_t *)a.w)[i] << 16);
  if (a.wkind == 1) return (float)((const int8_t *)a.w)[i];
  return ((const float *)a.w)[i];
}

/* One block per (row, head): the query's latent (thread c sums kv_b's
 * column c over the key rows, ascending, as the scalar transposed GEMV),
 * the scores (a thread per position), the softmax (the max and the sum one
 * thread's ascending loops, as the scalar softmax), then olat (thread i
 * sums over the positions, ascending). */
__global__ void mla_attn_k(df_cuda_mla_args a) {
  pdl_enter();
  DF_DYN_SHARED(float, qlat);
  int t = blockIdx.x / a.heads, h = blockIdx.x % a.heads;
  int dn = a.dn, dr = a.dr, kr = a.kr, n = a.n0 + t + 1;
  size_t w = (size_t)(kr + dr), ntot = (size_t)a.n0 + a.T, r0 = (size_t)h * (dn + a.dv);
  const float *q = a.q + (size_t)t * a.heads * (dn + dr) + (size_t)h * (dn + dr);
  float *sc = a.sc + ((size_t)t * a.heads + h) * ntot;
  float *olat = a.olat + ((size_t)t * a.heads + h) * kr;
  for (int c = threadIdx.x; c < kr; c += blockDim.x) {
    float y = 0.0f;
    for (int r = 0; r < dn; r++) {
      float xr = a.wkind == 1 ? __fmul_rn(a.wscale[r0 + r], q[r]) : q[r];
      y = __fadd_rn(y, __fmul_rn(mla_w(a, r0 + r, c), xr));
    }
    qlat[c] = y;
  }
  __syncthreads();
  float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)(dn + dr)));
  for (int s = threadIdx.x; s < n; s += blockDim.x) {
    const float *cs = a.cache + (size_t)s * w;
    float sum = __fadd_rn(seq_dot16(qlat, cs, kr), seq_dot16(q + dn, cs + kr, dr));
    sc[s] = __fmul_rn(sum, scale);
  }
  __syncthreads();
  block_softmax(sc, n);
  __syncthreads();
  for (int i = threadIdx.x; i < kr; i += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < n; s++) acc = __fadd_rn(acc, __fmul_rn(sc[s], a.cache[(size_t)s * w + i]));
    olat[i] = acc;
  }
}

__global__ void mla_gate_k(float *o, float *g, size_t n) {
  pdl_enter();
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float s = sigm(g[i]);
    g[i] = s;
    o[i] = __fmul_rn(o[i], s);
  }
}

#endif

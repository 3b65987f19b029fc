/* The lane-16 sums on the GPU and the kernels built on them, rmsnorm and
 * AttnRes (kimi-k3.md 5.1), and the block's softmax. A header of its own, as kcuda_gemm.cuh, so
 * tests/cuda/emu runs these same kernels on the host. Needs kcuda_fmt.cuh
 * (LANES) and kmath.h (expf). */
#ifndef DF_KERNELS_CUDA_KCUDA_NORM_CUH
#define DF_KERNELS_CUDA_KCUDA_NORM_CUH

#include "kernels/cuda/kcuda_block.cuh"
#include "kernels/cuda/kcuda_fmt.cuh"
#include "kernels/cuda/kmath.h"

#define VBLOCK 256 /* the vector kernels' block */

/* The lane-16 sum of f(0) .. f(n - 1) (kernels.h's order: lane j adds the
 * terms i = j mod 16 in ascending i, then lane_reduce's tree), every
 * thread of the block getting it. The block computes the terms into
 * shared memory a chunk at a time and threads 0..15 run the chains over
 * them: a chain's adds then wait on shared memory, not on a global load
 * each (16 threads reading a hidden row from global memory one element a
 * step took a 7168-float AttnRes row hundreds of microseconds). */
#define CHUNK 8192 /* K3's hidden row in one; a multiple of LANES: a chain's lane is the same in every chunk */
struct lane16_smem {
  float buf[CHUNK], tot;
};
/* one block of shared memory for every instance of lane16_sum (a static
 * __shared__ in the template would be one per instance) */
__device__ static lane16_smem *lane16_buf(void) {
  __shared__ lane16_smem m;
  return &m;
}
template <class F> __device__ static float lane16_sum(int n, F f) {
  float *buf = lane16_buf()->buf, &tot = lane16_buf()->tot;
  float acc = 0.0f;
  for (int c0 = 0; c0 < n; c0 += CHUNK) {
    int m = n - c0 < CHUNK ? n - c0 : CHUNK;
    for (int i = threadIdx.x; i < m; i += blockDim.x) buf[i] = f(c0 + i);
    __syncthreads();
    if (threadIdx.x < LANES) {
#pragma unroll 8
      for (int i = threadIdx.x; i < m; i += LANES) acc = __fadd_rn(acc, buf[i]);
    }
    __syncthreads();
  }
  if (threadIdx.x < 32) { /* the tree: lane j takes lane j + w's chain, w = 8, 4, 2, 1 */
    for (int w = LANES / 2; w >= 1; w >>= 1) acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, w));
    if (threadIdx.x == 0) tot = acc;
  }
  __syncthreads();
  float r = tot;
  __syncthreads(); /* tot and buf may be written again by the next call */
  return r;
}

/* dot(x, x) in the lane-16 order */
__device__ static float lane16_sumsq(const float *x, int n) {
  return lane16_sum(n, [=](int i) { return __fmul_rn(x[i], x[i]); });
}

/* rmsnorm's 1 / sqrt(ss / n + eps) */
__device__ static float rms_inv(float ss, int n, float eps) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)n), eps)));
}

/* block b: the row at b * n */
__global__ void rmsnorm_k(float *y, const float *x, const float *w, int n, size_t ld, float eps) {
  pdl_enter();
  size_t o = (size_t)blockIdx.x * ld;
  x += o, y += o;
  float inv = rms_inv(lane16_sumsq(x, n), n, eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float t = __fmul_rn(x[i], inv);
    y[i] = w ? __fmul_rn(t, w[i]) : t;
  }
}

__global__ void softmax_k(float *x, int n) { pdl_enter(); block_softmax(x, n); }

/* AttnRes in three kernels: a row's scores are nS + 1 chains of 448 adds
 * at K3's size, so they go a block each, in parallel; the weighted sum a
 * thread an element over as many blocks as the row needs; the norm
 * rmsnorm_k's, a block a row. Block (i, t): value i's score of row t,
 * dot(rmsnorm(V_i[t], rn), rp), into work[t][i]. */
__global__ void attn_scores_k(float *work, const float *snaps, size_t ss, int nS, const float *last,
                              int H, const float *rn, const float *rp, float eps) {
  pdl_enter();
  int i = blockIdx.x;
  size_t t = blockIdx.y;
  const float *v = i < nS ? snaps + (size_t)i * ss + t * (size_t)H : last + t * (size_t)H;
  float inv = rms_inv(lane16_sumsq(v, H), H, eps);
  float d = lane16_sum(H, [=](int j) { return __fmul_rn(__fmul_rn(__fmul_rn(v[j], inv), rn[j]), rp[j]); });
  if (threadIdx.x == 0) work[t * (size_t)H + i] = d;
}

/* Block (b, t): the softmax of row t's scores in thread 0 (softmax_k's
 * loops; every block of the row makes the same), then elements b * VBLOCK
 * .. of the weighted sum a thread each, in ascending i from +0, into out. */
__global__ void attn_combine_k(float *out, const float *work, const float *snaps, size_t ss,
                               int nS, const float *last, int H) {
  pdl_enter();
  DF_DYN_SHARED(float, sc);
  size_t t = blockIdx.y;
  const float *scr = work + t * (size_t)H;
  int nv = nS + 1;
  if (threadIdx.x == 0) {
    float m = scr[0], s = 0.0f;
    for (int i = 1; i < nv; i++)
      if (scr[i] > m) m = scr[i];
    for (int i = 0; i < nv; i++) sc[i] = df_km_expf(__fsub_rn(scr[i], m));
    for (int i = 0; i < nv; i++) s = __fadd_rn(s, sc[i]);
    for (int i = 0; i < nv; i++) sc[i] = __fdiv_rn(sc[i], s);
  }
  __syncthreads();
  int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= H) return;
  float acc = 0.0f;
  for (int i = 0; i < nv; i++) {
    const float *v = i < nS ? snaps + (size_t)i * ss + t * (size_t)H : last + t * (size_t)H;
    acc = __fadd_rn(acc, __fmul_rn(sc[i], v[d]));
  }
  out[t * (size_t)H + d] = acc;
}

#endif

/* What several kernels share: the sigmoid, a block's softmax, one column
 * of the KDA step, and the way a kernel declares its dynamic shared
 * memory. */
#ifndef DF_KERNELS_CUDA_KCUDA_BLOCK_CUH
#define DF_KERNELS_CUDA_KCUDA_BLOCK_CUH

#include "kernels/cuda/kmath.h"
#include "kernels/cuda/kcuda_pdl.cuh"

/* a kernel's dynamic shared memory (the emulator declares it its way) */
#ifndef DF_DYN_SHARED
#define DF_DYN_SHARED(type, name) extern __shared__ type name[]
#endif

/* the scalar table's sigmoid: 1 / (1 + exp(-v)), each step rounded */
__device__ static inline float sigm(float v) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, df_km_expf(-v)));
}

/* x[0 .. n) = softmax(x) by the whole block (every thread calls it: it
 * holds barriers). The max and the sum are thread 0's ascending loops: the
 * scalar softmax sums sequentially, so no tree may replace it; the exps and
 * the divisions go a thread an element. */
__device__ static inline void block_softmax(float *x, int n) {
  __shared__ float m_s, sum_s;
  if (threadIdx.x == 0) {
    float m = x[0];
    for (int i = 1; i < n; i++)
      if (x[i] > m) m = x[i];
    m_s = m;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = df_km_expf(__fsub_rn(x[i], m_s));
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s = __fadd_rn(s, x[i]);
    sum_s = s;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = __fdiv_rn(x[i], sum_s);
}

/* Column j of one head's KDA step (kernels.h's kda_step): S's column j
 * decayed by alpha, the delta rule's update with key k, value vj and beta,
 * then the output S^T q at j, returned. Every sum of the scalar step runs
 * over the key index i for a fixed j, in ascending i, so a column is one
 * thread's loops and no order changes. */
__device__ static inline float kda_column(float *S, const float *alpha, const float *k,
                                          const float *q, float beta, float vj, int j, int D) {
  float u = 0.0f;
  for (int i = 0; i < D; i++) {
    float *cell = S + (size_t)i * D + j;
    float sv = __fmul_rn(*cell, alpha[i]);
    *cell = sv;
    u = __fadd_rn(u, __fmul_rn(sv, k[i]));
  }
  u = __fmul_rn(beta, __fsub_rn(vj, u));
  float acc = 0.0f;
  for (int i = 0; i < D; i++) {
    float *cell = S + (size_t)i * D + j;
    float sv = __fadd_rn(*cell, __fmul_rn(k[i], u));
    *cell = sv;
    acc = __fadd_rn(acc, __fmul_rn(sv, q[i]));
  }
  return acc;
}

#endif

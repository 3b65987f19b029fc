/* The exact GEMM kernels for T > 1: the lanes layout (the GEMV's, each
 * weight applied to a few vectors), the register tiles and one lane a
 * thread. A header of its own, as kcuda_fmt.cuh, so tests/cuda/emu runs
 * these same kernels on the host. Needs kcuda_gemv.cuh (GEMV_BLOCK). */
#ifndef DF_KERNELS_CUDA_KCUDA_GEMM_CUH
#define DF_KERNELS_CUDA_KCUDA_GEMM_CUH

#include "kernels/cuda/kcuda_fmt.cuh"
#include "kernels/cuda/kcuda_gemv.cuh"

/* ---- GEMM: the GEMV's layout, each decoded weight applied to TB vectors ----
 * A thread holds the GEMV's LPT lanes of one row for TB vectors at once
 * (TB x LPT chains); each chain is the one the GEMV runs for that (row,
 * vector), so results equal it bit for bit whatever TB is. One block serves
 * GEMV_BLOCK / G rows for one block of TB vectors, and the vector block
 * varies fastest over blockIdx.x: the blocks reading the same rows are
 * dispatched together, so only the first takes them from HBM and the others
 * find them in L2.
 *
 * Measured on the H200 (ncu), the first version was latency-bound: a
 * quarter of the issue slots used, warps waiting on loads. Hence the vector
 * path's loads are pipelined: the next U steps' weights are in flight while
 * the current ones are used, and a step's x values for all TB vectors are
 * loaded before its products, with no branch between them. A short last
 * vector block therefore reads its last vector again in place of the
 * missing ones (valid memory; those results are not stored).
 *
 * U is below the GEMV's F::unroll: two batches of raw weights are live at
 * once, and with TB vectors each weight feeds TB times the arithmetic, so
 * fewer bytes in flight keep the units busy; the registers go to the
 * accumulators instead. */
template <class F, int TB> struct gemm_unroll {
  static constexpr int v = TB >= 8 ? (F::unroll >= 8 ? F::unroll / 4 : 2)
                           : TB >= 4 ? (F::unroll >= 4 ? F::unroll / 2 : 2)
                                     : F::unroll / 2;
};

template <int LPT> __device__ static inline void load_x(const float *p, float xv[LPT]) {
  if (LPT >= 4) {
#pragma unroll
    for (int q = 0; q < LPT / 4; q++) {
      float4 a = __ldg((const float4 *)p + q);
      xv[4 * q] = a.x, xv[4 * q + 1] = a.y, xv[4 * q + 2] = a.z, xv[4 * q + 3] = a.w;
    }
  } else {
    float2 a = __ldg((const float2 *)p);
    xv[0] = a.x, xv[LPT - 1] = a.y;
  }
}

/* at most 128 registers a thread (8 blocks of 64 per SM): the accumulators
 * fit, and enough warps stay resident to cover the loads */
template <class F, int LPT, bool vec, int TB>
__global__ void __launch_bounds__(GEMV_BLOCK, 8)
    gemm_k(F f, int rows, int cols, const float *X, int T, size_t ldx, float *Y, size_t ldy,
           const float *rowscale, int nvb) {
  pdl_enter();
  constexpr int G = LANES / LPT, U = gemm_unroll<F, TB>::v;
  int vb = (int)(blockIdx.x % (unsigned)nvb);
  long gt = (long)(blockIdx.x / (unsigned)nvb) * GEMV_BLOCK + threadIdx.x;
  int r = (int)(gt / G), g = (int)(gt % G);
  int t0 = vb * TB, nt = T - t0 < TB ? T - t0 : TB;
  bool live = r < rows;
  const float *X0 = X + (size_t)t0 * ldx;
  float acc[TB][LPT];
#pragma unroll
  for (int t = 0; t < TB; t++)
#pragma unroll
    for (int j = 0; j < LPT; j++) acc[t][j] = 0.0f;
  int nsteps = (cols + LANES - 1) / LANES;
  if (live) {
    if (vec) {
      const float *xp[TB];
#pragma unroll
      for (int t = 0; t < TB; t++) xp[t] = X0 + (size_t)(t < nt ? t : nt - 1) * ldx + g * LPT;
      typename F::raw v[U], vn[U];
#pragma unroll
      for (int u = 0; u < U; u++)
        if (u < nsteps) v[u] = f.load((size_t)r, cols, u, g);
      for (int s0 = 0; s0 < nsteps; s0 += U) {
#pragma unroll
        for (int u = 0; u < U; u++)
          if (s0 + U + u < nsteps) vn[u] = f.load((size_t)r, cols, s0 + U + u, g);
#pragma unroll
        for (int u = 0; u < U; u++) {
          if (s0 + u >= nsteps) break;
          int c = (s0 + u) * LANES;
          float w[LPT], xv[TB][LPT];
          f.decode(v[u], w);
#pragma unroll
          for (int t = 0; t < TB; t++) load_x<LPT>(xp[t] + c, xv[t]);
#pragma unroll
          for (int t = 0; t < TB; t++)
#pragma unroll
            for (int j = 0; j < LPT; j++)
              acc[t][j] = __fadd_rn(acc[t][j], __fmul_rn(w[j], xv[t][j]));
        }
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = vn[u];
      }
    } else {
      for (int s = 0; s < nsteps; s++)
#pragma unroll
        for (int j = 0; j < LPT; j++) {
          int c = s * LANES + g * LPT + j;
          if (c >= cols) break; /* the columns past the end: their lanes stay +0 */
          float w = f.one((size_t)r, cols, c);
#pragma unroll
          for (int t = 0; t < TB; t++) {
            if (t >= nt) break;
            acc[t][j] = __fadd_rn(acc[t][j], __fmul_rn(w, X0[(size_t)t * ldx + c]));
          }
        }
    }
  }
  /* the GEMV's tree for each vector; every thread of the warp takes part in
   * the shuffles, dead rows and skipped vectors included */
#pragma unroll
  for (int t = 0; t < TB; t++) {
#pragma unroll
    for (int w = LANES / 2; w >= LPT; w >>= 1)
#pragma unroll
      for (int j = 0; j < LPT; j++) {
        float o = __shfl_down_sync(0xffffffffu, acc[t][j], w / LPT);
        acc[t][j] = __fadd_rn(acc[t][j], o);
      }
#pragma unroll
    for (int w = LPT / 2; w >= 1; w >>= 1)
#pragma unroll
      for (int j = 0; j < w; j++) acc[t][j] = __fadd_rn(acc[t][j], acc[t][j + w]);
  }
  if (live && g == 0)
#pragma unroll
    for (int t = 0; t < TB; t++) {
      if (t >= nt) break;
      Y[(size_t)(t0 + t) * ldy + r] = rowscale ? __fmul_rn(acc[t][0], rowscale[r]) : acc[t][0];
    }
}

/* ---- GEMM, register tiles (T > 1; df_cuda_set_gemm_tiles) ----
 * The lanes layout above re-reads every weight from L2 for each TB (4-8)
 * vectors and decodes it as often: a 512-row prefill batch reads an expert
 * 64-128 times. Here a block of GT_THREADS threads owns GT_R rows x GT_V
 * vectors; per chunk of GT_CK columns the block decodes the rows' weights
 * once into shared memory as floats (the formats' one(): the scalar
 * reference's value of each weight) and stages the vectors' x beside them,
 * then each thread multiplies 4 rows x 4 vectors x 4 lanes out of shared
 * memory, so a decoded weight serves GT_V vectors and an x value GT_R rows.
 *
 * The order is still the reference's: lane j of output (row, vector) is one
 * accumulator in one thread, taking columns j, j + 16, ... ascending (step
 * by step in a chunk, chunk after chunk), each product rounded before its
 * add. Thread lanes cg = tid & 3 own lanes 4 cg .. 4 cg + 3 of their 16
 * outputs; the tree's levels 8 and 4 are shuffles to cg 0 (partners 2 and
 * 1 lanes down in the same warp: acc[j] + acc[j + 8], then acc[j] +
 * acc[j + 4]), levels 2 and 1 in that thread; then the int8 row scale.
 * Columns past the end (and rows and vectors past theirs) are staged as
 * +0: an accumulator that starts at +0 is never -0 (a rounded sum is -0
 * only when both addends are), so adding +0 * +0 leaves it unchanged, as
 * the scalar loop's untouched lanes are; those outputs are not stored. */
#define GT_R 32
#define GT_V 32
#define GT_CK 64
#define GT_LD (GT_CK + 4) /* row stride: 8 lanes' 16-byte loads in distinct banks */
#define GT_THREADS 256

template <class F>
__global__ void __launch_bounds__(GT_THREADS, 2)
    gemm_tile_k(F f, int rows, int cols, const float *X, int T, size_t ldx, float *Y, size_t ldy,
                const float *rowscale) {
  pdl_enter();
  __shared__ __align__(16) float ws[GT_R][GT_LD];
  __shared__ __align__(16) float xs[GT_V][GT_LD];
  const int tid = threadIdx.x, cg = tid & 3, vg = (tid >> 2) & 7, rg = tid >> 5;
  const long r0 = (long)blockIdx.x * GT_R;
  const int t0 = (int)blockIdx.y * GT_V;
  float acc[4][4][4]; /* [lane 4 cg + m][row rg * 4 + i][vector vg * 4 + k] */
#pragma unroll
  for (int m = 0; m < 4; m++)
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int k = 0; k < 4; k++) acc[m][i][k] = 0.0f;
  for (int c0 = 0; c0 < cols; c0 += GT_CK) {
    for (int e = tid; e < GT_R * GT_CK; e += GT_THREADS) {
      int rr = e / GT_CK, cc = e % GT_CK, c = c0 + cc;
      long r = r0 + rr;
      ws[rr][cc] = r < rows && c < cols ? f.one((size_t)r, cols, c) : 0.0f;
    }
    for (int e = tid; e < GT_V * GT_CK; e += GT_THREADS) {
      int vv = e / GT_CK, cc = e % GT_CK, c = c0 + cc, t = t0 + vv;
      xs[vv][cc] = t < T && c < cols ? X[(size_t)t * ldx + c] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int st = 0; st < GT_CK / LANES; st++) {
      float4 w4[4], x4[4];
#pragma unroll
      for (int i = 0; i < 4; i++) w4[i] = *(const float4 *)&ws[rg * 4 + i][st * LANES + cg * 4];
#pragma unroll
      for (int k = 0; k < 4; k++) x4[k] = *(const float4 *)&xs[vg * 4 + k][st * LANES + cg * 4];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
          acc[0][i][k] = __fadd_rn(acc[0][i][k], __fmul_rn(w4[i].x, x4[k].x));
          acc[1][i][k] = __fadd_rn(acc[1][i][k], __fmul_rn(w4[i].y, x4[k].y));
          acc[2][i][k] = __fadd_rn(acc[2][i][k], __fmul_rn(w4[i].z, x4[k].z));
          acc[3][i][k] = __fadd_rn(acc[3][i][k], __fmul_rn(w4[i].w, x4[k].w));
        }
    }
    __syncthreads();
  }
  /* level 8: lanes 0-7 (cg 0, 1) take lanes 8-15 (cg 2, 3); level 4: cg 0
   * takes cg 1; every thread of the warp takes part in both shuffles */
#pragma unroll
  for (int dl = 2; dl >= 1; dl >>= 1)
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int k = 0; k < 4; k++)
          acc[m][i][k] = __fadd_rn(acc[m][i][k], __shfl_down_sync(0xffffffffu, acc[m][i][k], dl));
  if (cg) return;
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int k = 0; k < 4; k++) {
      float a0 = __fadd_rn(acc[0][i][k], acc[2][i][k]), a1 = __fadd_rn(acc[1][i][k], acc[3][i][k]);
      float v = __fadd_rn(a0, a1);
      long r = r0 + rg * 4 + i;
      int t = t0 + vg * 4 + k;
      if (r < rows && t < T) Y[(size_t)t * ldy + r] = rowscale ? __fmul_rn(v, rowscale[r]) : v;
    }
}

/* ---- GEMM, one lane a thread (T > 1; df_cuda_set_gemm_tiles(c, 2)) ----
 * The register tiles above spend their time waiting: each chunk's weights
 * and x are loaded and stored between two barriers with nothing to overlap
 * them, and a thread's 4 rows x 4 vectors x 4 lanes take 20 shared-memory
 * wavefronts a step for 64 products. Here a thread owns one lane j of 8
 * rows x 8 vectors (64 chains, each the reference's lane j of one output:
 * columns j, j + 16, ... ascending, each product rounded before its add),
 * reads a step's 8 weights and 8 x values as single floats (16 wavefronts
 * a step, one per load: the two row groups of a warp sit 16 banks apart,
 * its x values are one broadcast), and the next chunk's weights and x are
 * loaded into registers before the current chunk's products and stored
 * into the other of two shared buffers after them, so the loads' latency
 * is behind the arithmetic and a chunk needs one barrier.
 *
 * The 16 lanes of an output are 16 neighbouring threads; the tree's levels
 * 8, 4, 2, 1 are xor shuffles. Thread j then holds acc[j] + acc[j ^ 8]
 * where the reference's level 8 holds acc[j] + acc[j + 8] for j < 8: the
 * same sum (an IEEE sum does not depend on its operands' order, only on
 * the grouping), so after four levels every one of the 16 threads holds
 * the reference's result, and each stores 4 of the 64.
 *
 * Staging: thread tid brings columns 8 (tid & 7) .. + 7 of a chunk, of
 * weight row r0 + (tid >> 3) and of vector t0 + (tid >> 3). The vector
 * path (vec: cols % 16 == 0, aligned weights and x) loads them as the
 * GEMV's 8-lane loaders do and decodes the weights at the store; otherwise
 * element by element through one(). Columns past the end, rows past the
 * end and vectors past the end are staged as +0, as in the register tiles. */
#define GL_R 32
#define GL_V 32
#define GL_CK 64
#define GL_LD (GL_CK + 2) /* 8 rows apart = 16 banks apart; rows 8-byte aligned for float2 */
#define GL_THREADS 256
#define GL_MR 8
#define GL_MV 8

template <class F, bool vec> struct gl_stage {
  typename F::raw raw;
  bool win;
  float w[8], x[8];
  __device__ void fetch(const F &f, long r, int rows, int cols, const float *X, int t, int T,
                        size_t ldx, int c) {
    if constexpr (vec) {
      win = r < rows && c < cols;
      if (win) raw = f.load((size_t)r, cols, c / LANES, (c / HALF) & 1);
      if (t < T && c < cols) {
        const float4 *p = (const float4 *)(X + (size_t)t * ldx + c);
        float4 a = __ldg(p), b = __ldg(p + 1);
        x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
        x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
      } else {
#pragma unroll
        for (int u = 0; u < 8; u++) x[u] = 0.0f;
      }
    } else {
#pragma unroll
      for (int u = 0; u < 8; u++) {
        int cu = c + u;
        w[u] = r < rows && cu < cols ? f.one((size_t)r, cols, cu) : 0.0f;
        x[u] = t < T && cu < cols ? X[(size_t)t * ldx + cu] : 0.0f;
      }
    }
  }
  __device__ void store(const F &f, float *wd, float *xd) {
    if constexpr (vec) {
      if (win) f.decode(raw, w);
      else {
#pragma unroll
        for (int u = 0; u < 8; u++) w[u] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < 4; u++) {
      *(float2 *)(wd + 2 * u) = make_float2(w[2 * u], w[2 * u + 1]);
      *(float2 *)(xd + 2 * u) = make_float2(x[2 * u], x[2 * u + 1]);
    }
  }
};

template <class F, bool vec>
__global__ void __launch_bounds__(GL_THREADS, 2)
    gemm_lane_k(F f, int rows, int cols, const float *X, int T, size_t ldx, float *Y, size_t ldy,
                const float *rowscale) {
  pdl_enter();
  __shared__ __align__(16) float ws[2][GL_R][GL_LD];
  __shared__ __align__(16) float xs[2][GL_V][GL_LD];
  const int tid = threadIdx.x, j = tid & 15, p = tid >> 4, rg = p & 3, vg = p >> 2;
  const int sr = tid >> 3, sc = (tid & 7) * 8;
  const long r0 = (long)blockIdx.x * GL_R;
  const int t0 = (int)blockIdx.y * GL_V;
  float acc[GL_MR][GL_MV];
#pragma unroll
  for (int i = 0; i < GL_MR; i++)
#pragma unroll
    for (int k = 0; k < GL_MV; k++) acc[i][k] = 0.0f;
  gl_stage<F, vec> st;
  st.fetch(f, r0 + sr, rows, cols, X, t0 + sr, T, ldx, sc);
  st.store(f, &ws[0][sr][sc], &xs[0][sr][sc]);
  __syncthreads();
  int b = 0;
  for (int c0 = 0; c0 < cols; c0 += GL_CK, b ^= 1) {
    const bool more = c0 + GL_CK < cols;
    if (more) st.fetch(f, r0 + sr, rows, cols, X, t0 + sr, T, ldx, c0 + GL_CK + sc);
#pragma unroll
    for (int s = 0; s < GL_CK / LANES; s++) {
      float wv[GL_MR], xv[GL_MV];
#pragma unroll
      for (int i = 0; i < GL_MR; i++) wv[i] = ws[b][rg * GL_MR + i][s * LANES + j];
#pragma unroll
      for (int k = 0; k < GL_MV; k++) xv[k] = xs[b][vg * GL_MV + k][s * LANES + j];
#pragma unroll
      for (int i = 0; i < GL_MR; i++)
#pragma unroll
        for (int k = 0; k < GL_MV; k++)
          acc[i][k] = __fadd_rn(acc[i][k], __fmul_rn(wv[i], xv[k]));
    }
    if (more) st.store(f, &ws[b ^ 1][sr][sc], &xs[b ^ 1][sr][sc]);
    __syncthreads();
  }
#pragma unroll
  for (int d = 8; d >= 1; d >>= 1)
#pragma unroll
    for (int i = 0; i < GL_MR; i++)
#pragma unroll
      for (int k = 0; k < GL_MV; k++)
        acc[i][k] = __fadd_rn(acc[i][k], __shfl_xor_sync(0xffffffffu, acc[i][k], d));
  /* thread j stores vector k = j & 7 of rows 4 (j >> 3) .. + 3 (indices
   * known at compile time: the accumulators stay in registers) */
#pragma unroll
  for (int i = 0; i < GL_MR; i++)
#pragma unroll
    for (int k = 0; k < GL_MV; k++) {
      if (k != (j & 7) || (i >> 2) != (j >> 3)) continue;
      long r = r0 + rg * GL_MR + i;
      int t = t0 + vg * GL_MV + k;
      if (r < rows && t < T)
        Y[(size_t)t * ldy + r] = rowscale ? __fmul_rn(acc[i][k], rowscale[r]) : acc[i][k];
    }
}

#endif

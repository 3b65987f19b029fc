/* The CUDA kernels behind kcuda.h. Compiled with -fmad=false -ftz=false
 * -prec-div=true -prec-sqrt=true (CMakeLists.txt): every product is rounded
 * before it is added, subnormals are kept, division and square root are
 * IEEE, as in the scalar reference.
 *
 * GEMV layout: two threads per output row, each owning 8 of the 16 lanes of
 * the lane-16 order (thread h holds lanes 8h..8h+7), so one step of 16
 * columns is one contiguous load per thread (16 bytes of bf16, 8 of int8, 4
 * of MXFP4) and a row's 16 chains still each run in ascending column order.
 * The 8-4-2-1 tree then starts with the partner's 8 lanes (one shuffle per
 * lane). Loads of F::unroll steps (about 128 bytes) are issued before their
 * products so each thread keeps that much in flight; the chains' order is
 * unchanged. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "kernels/cuda/kcuda.h"
}
#include "kernels/cuda/kmath.h"
#include "kernels/cuda/kcuda_fmt.cuh"
#include "kernels/cuda/kcuda_gemm.cuh"
#include "kernels/cuda/kcuda_norm.cuh"

#define GEMV_BLOCK 64 /* small blocks spread a 3072-row expert over more SMs */
#define PF_CHUNK 1024u /* bytes per L2 prefetch request */
#define PF_AHEAD 2048u /* how far ahead of the loads the prefetches run */

struct df_cuda {
  int dev;
  cudaStream_t s;
  cudaEvent_t ev[2];
  int prefetch;
  int lpt[4]; /* GEMV lanes per thread: bf16, int8, f32, mxfp4 */
  int tiled[4]; /* GEMV kernel: 0 lanes layout, 1 row tiles (variant by shape), 2-5 forced */
  int gemm_tiles; /* T > 1: 0 the lanes layout, 1 the register tiles, 2 a lane a thread */
  int sms;      /* multiprocessors */
  int occ[4][5]; /* resident tile blocks per SM by format and variant (0: not yet asked) */
  char desc[320];
  char err[256];
};

static int fail(df_cuda *c, const char *what, cudaError_t e) {
  snprintf(c->err, sizeof c->err, "%s: %s", what, cudaGetErrorString(e));
  return -1;
}
#define CK(c, what, call)                               \
  do {                                                  \
    cudaError_t e_ = (call);                            \
    if (e_ != cudaSuccess) return fail(c, what, e_);    \
  } while (0)
#define LAUNCHED(c, what) CK(c, what, cudaGetLastError())

extern "C" int df_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); /* no driver: not an error to remember */
    return 0;
  }
  return n;
}

extern "C" df_cuda *df_cuda_open(int dev, char *err, size_t errlen) {
  int n = df_cuda_device_count();
  if (dev < 0 || dev >= n) {
    snprintf(err, errlen, "no CUDA device %d (%d found)", dev, n);
    return NULL;
  }
  df_cuda *c = (df_cuda *)calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  c->dev = dev;
  c->prefetch = 0; /* measured slower on the large shapes (docs/PERFORMANCE.md) */
  for (int i = 0; i < 4; i++) c->lpt[i] = 8, c->tiled[i] = i != 2;
  /* off: exact on the H200, slower there than the lanes layout (run 14) */
  const char *gt = getenv("DF_CUDA_GEMM_TILES");
  c->gemm_tiles = gt && (gt[0] == '1' || gt[0] == '2') ? gt[0] - '0' : 0;
  cudaDeviceProp p;
  cudaError_t e = cudaSetDevice(dev);
  if (e == cudaSuccess) e = cudaGetDeviceProperties(&p, dev);
  if (e == cudaSuccess) c->sms = p.multiProcessorCount > 0 ? p.multiProcessorCount : 1;
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreate(&c->ev[0]);
  if (e == cudaSuccess) e = cudaEventCreate(&c->ev[1]);
  if (e != cudaSuccess) {
    snprintf(err, errlen, "CUDA device %d: %s", dev, cudaGetErrorString(e));
    free(c);
    return NULL;
  }
  snprintf(c->desc, sizeof c->desc, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
           (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
  return c;
}

extern "C" void df_cuda_close(df_cuda *c) {
  if (!c) return;
  cudaStreamSynchronize(c->s);
  cudaEventDestroy(c->ev[0]);
  cudaEventDestroy(c->ev[1]);
  cudaStreamDestroy(c->s);
  free(c);
}

extern "C" void df_cuda_set_prefetch(df_cuda *c, int on) { c->prefetch = on != 0; }

extern "C" const char *df_cuda_describe(const df_cuda *c) { return c->desc; }
extern "C" const char *df_cuda_error(const df_cuda *c) { return c->err; }

extern "C" void *df_cuda_alloc(df_cuda *c, size_t bytes) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    fail(c, "cudaMalloc", e);
    return NULL;
  }
  return p;
}
extern "C" void df_cuda_free(df_cuda *c, void *p) {
  (void)c;
  if (p) cudaFree(p);
}
extern "C" int df_cuda_put(df_cuda *c, void *dst, const void *src, size_t n) {
  CK(c, "copy to device", cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->s));
  return 0;
}
extern "C" int df_cuda_get(df_cuda *c, void *dst, const void *src, size_t n) {
  CK(c, "copy to host", cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->s));
  CK(c, "copy to host", cudaStreamSynchronize(c->s));
  return 0;
}
extern "C" int df_cuda_get_async(df_cuda *c, void *dst, const void *src, size_t n) {
  CK(c, "copy to host", cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->s));
  return 0;
}
extern "C" int df_cuda_copy(df_cuda *c, void *dst, const void *src, size_t n) {
  CK(c, "device copy", cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c->s));
  return 0;
}
extern "C" int df_cuda_sync(df_cuda *c) {
  CK(c, "synchronize", cudaStreamSynchronize(c->s));
  return 0;
}
extern "C" int df_cuda_mark(df_cuda *c, int which) {
  CK(c, "event", cudaEventRecord(c->ev[which ? 1 : 0], c->s));
  return 0;
}
extern "C" double df_cuda_elapsed(df_cuda *c) {
  float ms = 0;
  if (cudaEventSynchronize(c->ev[1]) != cudaSuccess ||
      cudaEventElapsedTime(&ms, c->ev[0], c->ev[1]) != cudaSuccess)
    return -1;
  return ms / 1000.0;
}

/* An L2 prefetch of a contiguous range (the Hopper bulk-copy unit): one
 * request per row and chunk instead of many 32-byte sectors. */
__device__ static inline void l2_prefetch(const void *p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p, (void)bytes;
#endif
}

/* vec: cols % 16 == 0 (whole aligned steps, vector loads); otherwise one
 * element at a time with the columns past the end left out of their lanes
 * (which then stay +0, as the scalar loop's short last block leaves them).
 * The reduction is the lane tree of kern_scalar_t.h, acc[j] += acc[j + w]
 * for w = 8, 4, 2, 1: while w >= LPT lane j + w is in thread g + w / LPT
 * (a shuffle), below that it is in the same thread. */
template <class F, int LPT, bool vec>
__global__ void __launch_bounds__(GEMV_BLOCK) gemv_k(F f, int rows, int cols, const float *x,
                                                     float *y, const float *rowscale, int pf) {
  constexpr int G = LANES / LPT;
  int gt = blockIdx.x * blockDim.x + threadIdx.x;
  int r = gt / G, g = gt % G;
  bool live = r < rows;
  float acc[LPT];
#pragma unroll
  for (int j = 0; j < LPT; j++) acc[j] = 0.0f;
  int nsteps = (cols + LANES - 1) / LANES;
  if (live) {
    if (vec) {
      const char *rowp = (const char *)f.row((size_t)r, cols);
      uint32_t rowbytes = (uint32_t)nsteps * F::step_bytes, fetched = 0;
      for (int s0 = 0; s0 < nsteps; s0 += F::unroll) {
        uint32_t want = (uint32_t)s0 * F::step_bytes + PF_AHEAD;
        while (pf && g == 0 && fetched < rowbytes && fetched < want) {
          uint32_t n = rowbytes - fetched < PF_CHUNK ? rowbytes - fetched : PF_CHUNK;
          l2_prefetch(rowp + fetched, n);
          fetched += n;
        }
        typename F::raw v[F::unroll];
#pragma unroll
        for (int u = 0; u < F::unroll; u++)
          if (s0 + u < nsteps) v[u] = f.load((size_t)r, cols, s0 + u, g);
#pragma unroll
        for (int u = 0; u < F::unroll; u++) {
          if (s0 + u >= nsteps) break;
          int c0 = (s0 + u) * LANES + g * LPT;
          float w[LPT], xv[LPT];
          f.decode(v[u], w);
          if (LPT >= 4) {
#pragma unroll
            for (int q = 0; q < LPT / 4; q++) {
              float4 a = __ldg((const float4 *)(x + c0) + q);
              xv[4 * q] = a.x, xv[4 * q + 1] = a.y, xv[4 * q + 2] = a.z, xv[4 * q + 3] = a.w;
            }
          } else {
            float2 a = __ldg((const float2 *)(x + c0));
            xv[0] = a.x, xv[LPT - 1] = a.y;
          }
#pragma unroll
          for (int j = 0; j < LPT; j++) acc[j] = __fadd_rn(acc[j], __fmul_rn(w[j], xv[j]));
        }
      }
    } else {
      for (int s = 0; s < nsteps; s++)
        for (int j = 0; j < LPT; j++) {
          int c = s * LANES + g * LPT + j;
          if (c < cols) acc[j] = __fadd_rn(acc[j], __fmul_rn(f.one((size_t)r, cols, c), x[c]));
        }
    }
  }
#pragma unroll
  for (int w = LANES / 2; w >= LPT; w >>= 1)
#pragma unroll
    for (int j = 0; j < LPT; j++) {
      float o = __shfl_down_sync(0xffffffffu, acc[j], w / LPT);
      acc[j] = __fadd_rn(acc[j], o); /* kept only where g < w / LPT: lane g*LPT+j < w */
    }
#pragma unroll
  for (int w = LPT / 2; w >= 1; w >>= 1)
#pragma unroll
    for (int j = 0; j < w; j++) acc[j] = __fadd_rn(acc[j], acc[j + w]);
  if (live && g == 0) y[r] = rowscale ? __fmul_rn(acc[0], rowscale[r]) : acc[0];
}

template <template <int> class F, int LPT, class A>
static void gemv_go(df_cuda *c, const A &args, int rows, int cols, const float *x, float *y,
                    const float *rowscale, bool vec) {
  F<LPT> f = args.template as<F<LPT>>();
  long threads = (long)(LANES / LPT) * rows;
  int blocks = (int)((threads + GEMV_BLOCK - 1) / GEMV_BLOCK);
  if (vec)
    gemv_k<F<LPT>, LPT, true><<<blocks, GEMV_BLOCK, 0, c->s>>>(f, rows, cols, x, y, rowscale,
                                                                c->prefetch);
  else
    gemv_k<F<LPT>, LPT, false><<<blocks, GEMV_BLOCK, 0, c->s>>>(f, rows, cols, x, y, rowscale, 0);
}

struct wargs {
  const void *a, *b;
  template <class T> __host__ T as() const {
    T t;
    memcpy((void *)&t, (const void *)this, sizeof(T) < sizeof *this ? sizeof(T) : sizeof *this);
    return t;
  }
};

/* ---- GEMV, row tiles: the default for bf16, int8 and MXFP4 ----
 * The lanes layout above keeps each thread's loads inside its own row, so
 * one warp request touches 16 to 32 rows' sectors and only a few hundred
 * bytes per SM are in flight: 12-50% of the device copy's bandwidth on the
 * H200 whatever the lanes per thread or the prefetch (docs/PERFORMANCE.md).
 *
 * Here a block is one warp owning TROWS consecutive rows, one row per
 * thread, all 16 lanes of the row in that thread. The rows' column chunks
 * (TF::RB bytes of each row) are staged in shared memory by cp.async in
 * 16-byte pieces, so a warp instruction copies whole 128-byte row segments,
 * with NS - 1 chunks in flight per warp and many warps per SM; x's chunk
 * (and MXFP4's scales) ride along. The thread then reads its row from shared
 * memory (rows padded by 16 bytes: 8 consecutive rows' 16-byte loads fall in
 * distinct banks) and x by broadcast. Small blocks keep the tail of the grid
 * short: 12288 rows are 384 blocks.
 *
 * Stages NS: every block does the same work, so the grid runs in rounds of
 * (resident blocks per SM) x SMs, and a last round that is nearly empty
 * costs nearly a full one (57344 rows at 12 blocks an SM: 1.13 rounds).
 * The variants trade shared memory and registers for blocks per SM:
 * 2 stages (most blocks), 3, and a deep one (5-6 stages: few blocks, each
 * with more bytes in flight), also with two threads a row (16-row blocks,
 * each thread 8 of the 16 lanes, the tree's first level a shuffle) for
 * shapes with few rows; tile_pick chooses by the shape (the bench measures
 * each, df_cuda_set_gemv_tiled).
 *
 * The order is the scalar reference's: lane j is acc[j] of the row's thread
 * and takes columns j, j + 16, ... in ascending order (step by step within a
 * chunk, chunk after chunk), each product rounded before its add; then the
 * 8-4-2-1 tree in that thread, then the int8 row scale. Only where the bytes
 * wait and who copies them differ from the lanes layout.
 *
 * Misaligned or odd-sized operands (a row not a multiple of 16 bytes, x not
 * 16-byte aligned, MXFP4 scale rows not a multiple of 8 bytes) are staged
 * element by element instead: slower, the same products in the same order.
 * A last chunk shorter than TF::CK runs its whole steps, then the last
 * partial step's lanes one by one (the lanes past the end stay untouched, as
 * in the scalar loop's short last block). */
#define TROWS 32
#define TILE_WVEC 1
#define TILE_XVEC 2
#define TILE_SVEC 4

__device__ static inline void cp_async16(void *sdst, const void *gsrc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                   (uint32_t)__cvta_generic_to_shared(sdst)),
               "l"(__cvta_generic_to_global(gsrc))
               : "memory");
#else
  *(uint4 *)sdst = *(const uint4 *)gsrc;
#endif
}
__device__ static inline void cp_async8(void *sdst, const void *gsrc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(
                   (uint32_t)__cvta_generic_to_shared(sdst)),
               "l"(__cvta_generic_to_global(gsrc))
               : "memory");
#else
  *(uint2 *)sdst = *(const uint2 *)gsrc;
#endif
}
__device__ static inline void cp_async_commit(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> __device__ static inline void cp_async_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

/* N floats of x from shared memory (one address per row half of the warp) */
template <int N> __device__ __forceinline__ static void tile_xn(const float *x, float xv[N]) {
#pragma unroll
  for (int q = 0; q < N / 4; q++) {
    float4 a = ((const float4 *)x)[q];
    xv[4 * q] = a.x, xv[4 * q + 1] = a.y, xv[4 * q + 2] = a.z, xv[4 * q + 3] = a.w;
  }
}

/* A format for the tiles: CK columns per chunk, RB bytes of a row per chunk,
 * UC columns per unit (what one call of unit() takes, in step order). A
 * unit runs the LPT lanes g * LPT .. g * LPT + LPT - 1 of its row: all 16
 * (g = 0) where a thread owns the row, 8 where two threads share it. */
struct tf_bf16 {
  static constexpr int fmt = 0, CK = 128, RB = 256, UC = 16, scaled = 0, deep = 5;
  __host__ __device__ static size_t rowbytes(int cols) { return (size_t)cols * 2; }
  template <bool = false, int LPT = 16>
  __device__ __forceinline__ static void unit(const uint8_t *w, int u, uint32_t, const float *x,
                                              float acc[LPT], int g) {
    uint32_t v[LPT / 2];
    if constexpr (LPT >= 8) {
      const uint4 *p = (const uint4 *)(w + u * 32 + g * LPT * 2);
#pragma unroll
      for (int i = 0; i < LPT / 8; i++) {
        uint4 a = p[i];
        v[4 * i] = a.x, v[4 * i + 1] = a.y, v[4 * i + 2] = a.z, v[4 * i + 3] = a.w;
      }
    } else {
      uint2 a = *(const uint2 *)(w + u * 32 + g * LPT * 2);
      v[0] = a.x, v[1] = a.y;
    }
    float xv[LPT];
    tile_xn<LPT>(x + u * 16 + g * LPT, xv);
#pragma unroll
    for (int m = 0; m < LPT / 2; m++) {
      acc[2 * m] = __fadd_rn(acc[2 * m], __fmul_rn(__uint_as_float(v[m] << 16), xv[2 * m]));
      acc[2 * m + 1] =
          __fadd_rn(acc[2 * m + 1], __fmul_rn(__uint_as_float(v[m] & 0xffff0000u), xv[2 * m + 1]));
    }
  }
  __device__ static float one(const uint8_t *w, int c) {
    return __uint_as_float((uint32_t)((const uint16_t *)w)[c] << 16);
  }
};

struct tf_i8 {
  static constexpr int fmt = 1, CK = 128, RB = 128, UC = 16, scaled = 0, deep = 6;
  __host__ __device__ static size_t rowbytes(int cols) { return (size_t)cols; }
  /* (float)q exactly as in fmt_i8: 2^23 + (q + 128) as bits, less 2^23 + 128 */
  template <bool = false, int LPT = 16>
  __device__ __forceinline__ static void unit(const uint8_t *w, int u, uint32_t, const float *x,
                                              float acc[LPT], int g) {
    uint32_t v[LPT / 4];
    if constexpr (LPT == 16) {
      uint4 a = ((const uint4 *)w)[u];
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    } else if constexpr (LPT == 8) {
      uint2 a = ((const uint2 *)w)[2 * u + g];
      v[0] = a.x, v[1] = a.y;
    } else {
      v[0] = ((const uint32_t *)w)[4 * u + g];
    }
#pragma unroll
    for (int i = 0; i < LPT / 4; i++) v[i] ^= 0x80808080u;
    float xv[LPT];
    tile_xn<LPT>(x + u * 16 + g * LPT, xv);
#pragma unroll
    for (int m = 0; m < LPT; m++) {
      float wf = __fsub_rn(__uint_as_float(__byte_perm(v[m >> 2], 0x4B000000u, 0x7540u + (m & 3))),
                           8388736.0f);
      acc[m] = __fadd_rn(acc[m], __fmul_rn(wf, xv[m]));
    }
  }
  __device__ static float one(const uint8_t *w, int c) { return (float)((const int8_t *)w)[c]; }
};

/* MXFP4: a unit is one 32-column group, 16 bytes (two steps of 16 lanes) and
 * one scale s. The weight is the scalar reference's e2m1 * 2^(s-127), exact
 * (two significant bits; never below 2^-149), built in two operations:
 * the code's bits placed as a float's sign, exponent bits 1..0 and top
 * mantissa bit are e2m1 * 2^-126 exactly (code 1, 0.5, becomes the
 * subnormal 2^-127), and one exact multiply by 2^(s-1) scales it, for
 * s <= 128. Above that 2^(s-1) is not a float, so the product is
 * e2m1 * 2^(s-127) itself, formed as the reference forms it (the exact
 * e2m1 first): the same rounding, overflow to inf included. */
__device__ static inline uint32_t e2m1_bits(uint32_t q, int e) {
  return (uint32_t)((int32_t)(q << (28 - 4 * e)) >> 6) & 0x81C00000u;
}
struct tf_mxfp4 {
  /* CK / 32 = 8 scales a chunk */
  static constexpr int fmt = 3, CK = 256, RB = 128, UC = 32, scaled = 1, deep = 6;
  __host__ __device__ static size_t rowbytes(int cols) { return (size_t)cols / 2; }
  /* q: the thread's code words of the group, QW a step, step 0 first; with
   * 4 lanes a thread, its 4 codes in the low half of each word */
  template <int LPT> static constexpr int QW = LPT >= 8 ? LPT / 8 : 1;
  template <bool big, int LPT>
  __device__ __forceinline__ static void group(const uint32_t *q, uint32_t s,
                                               const float *x, float acc[LPT]) {
    float sc = big ? __uint_as_float(s << 23) : __uint_as_float((s + 126u) << 23);
#pragma unroll
    for (int st = 0; st < 2; st++) {
      float xv[LPT];
      tile_xn<LPT>(x + st * 16, xv);
#pragma unroll
      for (int j = 0; j < LPT; j++) {
        float f = __uint_as_float(e2m1_bits(q[st * QW<LPT> + (j >> 3)], j & 7));
        float wf = big ? __fmul_rn(__fmul_rn(f, 0x1p126f), sc) : __fmul_rn(f, sc);
        acc[j] = __fadd_rn(acc[j], __fmul_rn(wf, xv[j]));
      }
    }
  }
  /* small: s < 128 known for the whole chunk (one test a chunk instead of a
   * branch a group, so the chunk's groups are one straight run of code) */
  template <bool small = false, int LPT = 16>
  __device__ __forceinline__ static void unit(const uint8_t *w, int u, uint32_t s, const float *x,
                                              float acc[LPT], int g) {
    uint32_t q[2 * QW<LPT>];
    if constexpr (LPT == 16) {
      uint4 a = ((const uint4 *)w)[u];
      q[0] = a.x, q[1] = a.y, q[2] = a.z, q[3] = a.w;
    } else if constexpr (LPT == 8) {
      q[0] = ((const uint32_t *)w)[4 * u + g], q[1] = ((const uint32_t *)w)[4 * u + 2 + g];
    } else { /* lanes 4g .. 4g + 3: half g & 1 of word g >> 1 of each step */
      int sh = 16 * (g & 1);
      q[0] = ((const uint32_t *)w)[4 * u + (g >> 1)] >> sh;
      q[1] = ((const uint32_t *)w)[4 * u + 2 + (g >> 1)] >> sh;
    }
    if (small || s <= 128u) group<false, LPT>(q, s, x + u * 32 + g * LPT, acc);
    else group<true, LPT>(q, s, x + u * 32 + g * LPT, acc);
  }
};

/* blocks per SM the register bound leaves room for, by stages (the shared
 * memory then decides: about 11, 17 and 35 KB a block for MXFP4) */
static constexpr int tile_minb(int ns, int g) {
  return g >= 2 ? 8 : ns <= 2 ? 16 : ns == 3 ? 12 : 4;
}

/* G threads a row (1, 2 or 4): TR = 32 / G rows a block; thread lane owns row
 * lane % TR and its lanes g * LPT ..., g = lane / TR, LPT = 16 / G. blk is
 * the block's place in its matrix (rows blk * TR ...): blockIdx.x for one
 * matrix, less the matrix's first block in a grouped launch. */
template <class TF, int NS, int G>
__device__ __forceinline__ static void tile_run(const uint8_t *W, const uint8_t *S, int rows,
                                                int cols, const float *x, float *y,
                                                const float *rowscale, int flags, long blk) {
  constexpr int PPR = TF::RB / 16, NG = TF::CK / 32, TR = TROWS / G, LPT = LANES / G;
  __shared__ __align__(16) uint8_t wt[NS][TR][TF::RB + 16];
  __shared__ __align__(16) float xt[NS][TF::CK];
  __shared__ __align__(16) uint8_t st[NS][TR][TF::scaled ? NG : 8];
  const int lane = threadIdx.x, row = lane % TR, g = lane / TR;
  const long r0 = blk * TR;
  const int nr = rows - r0 < TR ? (int)(rows - r0) : TR;
  const bool live = row < nr;
  const size_t rb = TF::rowbytes(cols), sb = (size_t)cols / 32;
  const int nch = (cols + TF::CK - 1) / TF::CK;

  /* chunk k of every live row into stage buf */
  auto stage = [&](int k, int buf) {
    size_t off = (size_t)k * TF::RB;
    int rbk = rb - off < (size_t)TF::RB ? (int)(rb - off) : TF::RB;
    const uint8_t *wb = W + (size_t)r0 * rb + off;
    if (flags & TILE_WVEC) {
      int np = rbk >> 4;
#pragma unroll
      for (int it = 0; it < TR * PPR / TROWS; it++) {
        int i = lane + it * TROWS, rr = i / PPR, p = i % PPR;
        if (rr < nr && p < np) cp_async16(&wt[buf][rr][p * 16], wb + (size_t)rr * rb + p * 16);
      }
    } else {
      for (int i = lane; i < nr * rbk; i += TROWS) {
        int rr = i / rbk, b = i % rbk;
        wt[buf][rr][b] = wb[(size_t)rr * rb + b];
      }
    }
    int c0 = k * TF::CK, nx = cols - c0 < TF::CK ? cols - c0 : TF::CK;
    if (flags & TILE_XVEC) {
      for (int i = lane; i < nx / 4; i += TROWS) cp_async16(&xt[buf][4 * i], x + c0 + 4 * i);
    } else {
      for (int i = lane; i < nx; i += TROWS) xt[buf][i] = x[c0 + i];
    }
    if constexpr (TF::scaled != 0) {
      const uint8_t *sbase = S + (size_t)r0 * sb + (size_t)k * NG;
      if (flags & TILE_SVEC) {
        if (lane < nr) cp_async8(&st[buf][lane][0], sbase + (size_t)lane * sb);
      } else {
        int ng = nx / 32;
        for (int i = lane; i < nr * ng; i += TROWS) {
          int rr = i / ng, gi = i % ng;
          st[buf][rr][gi] = sbase[(size_t)rr * sb + gi];
        }
      }
    }
  };

  float acc[LPT];
#pragma unroll
  for (int j = 0; j < LPT; j++) acc[j] = 0.0f;

#pragma unroll
  for (int k = 0; k < NS - 1; k++) {
    if (k < nch) stage(k, k);
    cp_async_commit();
  }
  for (int k = 0; k < nch; k++) {
    cp_async_wait<NS - 2>();
    __syncwarp(); /* chunk k is in for every thread, and stage (k - 1) % NS is read */
    if (k + NS - 1 < nch) stage(k + NS - 1, (k + NS - 1) % NS);
    cp_async_commit();
    if (!live) continue;
    int buf = k % NS, n = cols - k * TF::CK < TF::CK ? cols - k * TF::CK : TF::CK;
    const uint8_t *w = wt[buf][row];
    const float *xs = xt[buf];
    uint2 sv = make_uint2(0, 0);
    if constexpr (TF::scaled != 0) sv = *(const uint2 *)st[buf][row];
    if (n == TF::CK && TF::scaled && ((sv.x | sv.y) & 0x80808080u) == 0) {
#pragma unroll
      for (int u = 0; u < TF::CK / TF::UC; u++)
        TF::template unit<true, LPT>(w, u, ((u < 4 ? sv.x : sv.y) >> (8 * (u & 3))) & 0xffu, xs,
                                     acc, g);
    } else if (n == TF::CK) {
#pragma unroll
      for (int u = 0; u < TF::CK / TF::UC; u++)
        TF::template unit<false, LPT>(w, u, ((u < 4 ? sv.x : sv.y) >> (8 * (u & 3))) & 0xffu, xs,
                                      acc, g);
    } else {
      int nu = n / TF::UC, c = nu * TF::UC + g * LPT;
      for (int u = 0; u < nu; u++)
        TF::template unit<false, LPT>(w, u, ((u < 4 ? sv.x : sv.y) >> (8 * (u & 3))) & 0xffu, xs,
                                      acc, g);
      if constexpr (TF::scaled == 0) { /* MXFP4's columns are whole groups */
#pragma unroll
        for (int j = 0; j < LPT; j++)
          if (c + j < n) acc[j] = __fadd_rn(acc[j], __fmul_rn(TF::one(w, c + j), xs[c + j]));
      }
    }
  }
  cp_async_wait<0>();
  /* the tree, its levels written out: kept in registers. With G threads a
   * row, lane j + 8 is acc[j] of the thread 16 lanes up (g + 2 with four,
   * g + 1 with two), and with four lane j + 4 that of the thread 8 lanes up
   * (g + 1): every thread takes part in the shuffles, dead rows included. */
  if constexpr (G >= 2) {
#pragma unroll
    for (int j = 0; j < 16 / G; j++)
      acc[j] = __fadd_rn(acc[j], __shfl_down_sync(0xffffffffu, acc[j], 16));
  }
  if constexpr (G == 4) {
#pragma unroll
    for (int j = 0; j < 4; j++) acc[j] = __fadd_rn(acc[j], __shfl_down_sync(0xffffffffu, acc[j], 8));
  }
  if (!live || g) return;
  if constexpr (G == 1) {
#pragma unroll
    for (int j = 0; j < 8; j++) acc[j] = __fadd_rn(acc[j], acc[LPT / 2 + j]);
  }
  if constexpr (G <= 2) {
#pragma unroll
    for (int j = 0; j < 4; j++) acc[j] = __fadd_rn(acc[j], acc[j + 4]);
  }
#pragma unroll
  for (int j = 0; j < 2; j++) acc[j] = __fadd_rn(acc[j], acc[j + 2]);
  acc[0] = __fadd_rn(acc[0], acc[1]);
  long r = r0 + row;
  y[r] = rowscale ? __fmul_rn(acc[0], rowscale[r]) : acc[0];
}

template <class TF, int NS, int G = 1>
__global__ void __launch_bounds__(TROWS, tile_minb(NS, G))
    tile_k(const uint8_t *W, const uint8_t *S, int rows, int cols, const float *x, float *y,
           const float *rowscale, int flags) {
  tile_run<TF, NS, G>(W, S, rows, cols, x, y, rowscale, flags, (long)blockIdx.x);
}

/* Grouped GEMVs (df_cuda_gemv_group): matrix i owns blocks [b0, b0 + its
 * blocks) of the one grid; each block runs tile_run on its matrix alone, so
 * a row's floats are those of the matrix's own launch. The table stays in
 * the parameter space (__grid_constant__), read by every thread. */
struct tile_one {
  const uint8_t *W, *S;
  const float *x, *rs;
  float *y;
  int rows, cols, flags, b0;
};
struct tile_set {
  tile_one m[DF_CUDA_GROUP_MAX];
  int n;
};
template <class TF, int NS, int G = 1>
__global__ void __launch_bounds__(TROWS, tile_minb(NS, G))
    tile_group_k(const __grid_constant__ tile_set q) {
  long b = (long)blockIdx.x;
  int i = 0;
  while (i + 1 < q.n && b >= q.m[i + 1].b0) i++;
  const tile_one &m = q.m[i];
  tile_run<TF, NS, G>(m.W, m.S, m.rows, m.cols, m.x, m.y, m.rs, m.flags, b - m.b0);
}

/* Once per format: shared memory preferred over L1 for the tile kernels
 * (only the element-by-element staging reads through L1), then how many
 * blocks of each variant an SM holds. */
template <class TF, int NS, int G> static int tile_occ1(void) {
  int n = 0;
  if (cudaFuncSetAttribute(tile_k<TF, NS, G>, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared) != cudaSuccess)
    cudaGetLastError(); /* a hint: the default split still runs */
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, tile_k<TF, NS, G>, TROWS, 0) !=
      cudaSuccess)
    cudaGetLastError();
  return n > 0 ? n : 1;
}
/* the variants: 0 2 stages, 1 3 stages, 2 deep, 3 deep with two threads a
 * row, 4 deep with four */
template <class TF> static int tile_occ(df_cuda *c, int v) {
  int *o = c->occ[TF::fmt];
  if (!o[0])
    o[0] = tile_occ1<TF, 2, 1>(), o[1] = tile_occ1<TF, 3, 1>(),
    o[2] = tile_occ1<TF, TF::deep, 1>(), o[3] = tile_occ1<TF, TF::deep, 2>(),
    o[4] = tile_occ1<TF, TF::deep, 4>();
  return o[v];
}

/* The variant for `blocks` 32-row blocks. Within one round of 3-stage
 * blocks, a deep one where the SMs would otherwise hold under 64 KB in
 * flight (few rows: KDA q's 12288 are 3 blocks an SM), with four threads a
 * row where the SMs hold four times the blocks, else two where twice (more
 * threads for the arithmetic too: on the H200 four beat two on every such
 * shape but bf16 KDA q's, where they tie, docs/PERFORMANCE.md); beyond one
 * round, 2 stages where their rounds are clearly fuller (the last round's
 * share of a full one). */
template <class TF> static int tile_pick(df_cuda *c, long blocks) {
  long k3 = tile_occ<TF>(c, 1), kd = tile_occ<TF>(c, 2), kd2 = tile_occ<TF>(c, 3);
  long kd4 = tile_occ<TF>(c, 4);
  long k2 = tile_occ<TF>(c, 0), sms = c->sms;
  if (blocks <= k3 * sms) {
    long w = (blocks + sms - 1) / sms;
    if (w * 2 * TROWS * TF::RB >= 64 * 1024) return 1;
    return kd4 >= 4 * w ? 4 : kd2 >= 2 * w ? 3 : kd >= w ? 2 : 1;
  }
  double r3 = (double)blocks / (double)(k3 * sms), r2 = (double)blocks / (double)(k2 * sms);
  double e3 = r3 / ceil(r3), e2 = r2 / ceil(r2);
  return e2 > e3 + 0.05 ? 0 : 1;
}

/* which loads a matrix's alignment and shape allow */
template <class TF> static int tile_flags(const void *W, const void *S, int cols, const float *x) {
  int flags = 0;
  if (((uintptr_t)W & 15) == 0 && TF::rowbytes(cols) % 16 == 0) flags |= TILE_WVEC;
  if (((uintptr_t)x & 15) == 0 && cols % 4 == 0) flags |= TILE_XVEC;
  if (TF::scaled && ((uintptr_t)S & 7) == 0 && (cols / 32) % (TF::CK / 32) == 0) flags |= TILE_SVEC;
  return flags;
}

template <class TF>
static int tile_launch(df_cuda *c, const char *what, const void *W, const void *S, int rows,
                       int cols, const float *x, float *y, const float *rowscale) {
  int flags = tile_flags<TF>(W, S, cols, x);
  long blocks = ((long)rows + TROWS - 1) / TROWS;
  tile_occ<TF>(c, 0);
  int v = c->tiled[TF::fmt] >= 2 ? c->tiled[TF::fmt] - 2 : tile_pick<TF>(c, blocks);
  const uint8_t *w8 = (const uint8_t *)W, *s8 = (const uint8_t *)S;
  if (v == 0)
    tile_k<TF, 2><<<(unsigned)blocks, TROWS, 0, c->s>>>(w8, s8, rows, cols, x, y, rowscale, flags);
  else if (v == 1)
    tile_k<TF, 3><<<(unsigned)blocks, TROWS, 0, c->s>>>(w8, s8, rows, cols, x, y, rowscale, flags);
  else if (v == 2)
    tile_k<TF, TF::deep>
        <<<(unsigned)blocks, TROWS, 0, c->s>>>(w8, s8, rows, cols, x, y, rowscale, flags);
  else if (v == 3)
    tile_k<TF, TF::deep, 2><<<(unsigned)(((long)rows + TROWS / 2 - 1) / (TROWS / 2)), TROWS, 0,
                              c->s>>>(w8, s8, rows, cols, x, y, rowscale, flags);
  else
    tile_k<TF, TF::deep, 4><<<(unsigned)(((long)rows + TROWS / 4 - 1) / (TROWS / 4)), TROWS, 0,
                              c->s>>>(w8, s8, rows, cols, x, y, rowscale, flags);
  LAUNCHED(c, what);
  return 0;
}

/* The grouped launch: the variant chosen for all the blocks together (as
 * one matrix of their rows), each matrix's blocks counted for it (32 / G
 * rows a block with G threads a row). */
template <class TF>
static int tile_group_launch(df_cuda *c, const char *what, int n, const df_cuda_gemv_one *m) {
  tile_set q;
  memset(&q, 0, sizeof q);
  long rows = 0;
  for (int i = 0; i < n; i++) rows += m[i].rows > 0 ? m[i].rows : 0;
  tile_occ<TF>(c, 0);
  int v = c->tiled[TF::fmt] >= 2 ? c->tiled[TF::fmt] - 2
                                 : tile_pick<TF>(c, (rows + TROWS - 1) / TROWS);
  long tr = v == 3 ? TROWS / 2 : v == 4 ? TROWS / 4 : TROWS, b = 0;
  for (int i = 0; i < n; i++) {
    if (m[i].rows <= 0) continue;
    tile_one *o = &q.m[q.n++];
    o->W = (const uint8_t *)m[i].W;
    o->S = TF::scaled ? (const uint8_t *)m[i].S : NULL;
    o->rs = TF::fmt == 1 ? (const float *)m[i].S : NULL;
    o->x = m[i].x, o->y = m[i].y, o->rows = m[i].rows, o->cols = m[i].cols;
    o->flags = tile_flags<TF>(m[i].W, o->S, m[i].cols, m[i].x);
    o->b0 = (int)b;
    b += (m[i].rows + tr - 1) / tr;
  }
  if (!q.n) return 0;
  if (b > 0x7fffffffL) {
    snprintf(c->err, sizeof c->err, "%s: %ld row blocks is too many", what, b);
    return -1;
  }
  if (v == 0) tile_group_k<TF, 2><<<(unsigned)b, TROWS, 0, c->s>>>(q);
  else if (v == 1) tile_group_k<TF, 3><<<(unsigned)b, TROWS, 0, c->s>>>(q);
  else if (v == 2) tile_group_k<TF, TF::deep><<<(unsigned)b, TROWS, 0, c->s>>>(q);
  else if (v == 3) tile_group_k<TF, TF::deep, 2><<<(unsigned)b, TROWS, 0, c->s>>>(q);
  else tile_group_k<TF, TF::deep, 4><<<(unsigned)b, TROWS, 0, c->s>>>(q);
  LAUNCHED(c, what);
  return 0;
}

extern "C" int df_cuda_gemv_group(df_cuda *c, int fmt, int n, const df_cuda_gemv_one *m) {
  if (n < 0 || n > DF_CUDA_GROUP_MAX || (fmt != 0 && fmt != 1 && fmt != 3)) {
    snprintf(c->err, sizeof c->err, "gemv group: %d matrices of format %d (at most %d; bf16, int8 "
             "or MXFP4)", n, fmt, DF_CUDA_GROUP_MAX);
    return -1;
  }
  for (int i = 0; i < n; i++)
    if (fmt == 3 && m[i].cols % 32) {
      snprintf(c->err, sizeof c->err, "gemv group: mxfp4 cols %d is not a multiple of 32",
               m[i].cols);
      return -1;
    }
  if (fmt == 0) return tile_group_launch<tf_bf16>(c, "gemv group bf16", n, m);
  if (fmt == 1) return tile_group_launch<tf_i8>(c, "gemv group int8", n, m);
  return tile_group_launch<tf_mxfp4>(c, "gemv group mxfp4", n, m);
}

/* which tile format serves a lanes-layout format (void: none, f32) */
template <template <int> class F> struct tile_of {
  typedef void type;
};
template <> struct tile_of<fmt_bf16> {
  typedef tf_bf16 type;
};
template <> struct tile_of<fmt_i8> {
  typedef tf_i8 type;
};
template <> struct tile_of<fmt_mxfp4> {
  typedef tf_mxfp4 type;
};
template <class TF>
static int tile_try(df_cuda *c, const char *what, const wargs &a, int rows, int cols,
                    const float *x, float *y, const float *rowscale) {
  if (!c->tiled[TF::fmt]) return 1;
  return tile_launch<TF>(c, what, a.a, a.b, rows, cols, x, y, rowscale);
}
template <>
int tile_try<void>(df_cuda *, const char *, const wargs &, int, int, const float *, float *,
                   const float *) {
  return 1;
}

template <template <int> class F>
static int gemv_launch(df_cuda *c, const char *what, wargs a, int rows, int cols, const float *x,
                       float *y, const float *rowscale, bool vec_ok, int lpt) {
  if (rows <= 0) return 0;
  int rc = tile_try<typename tile_of<F>::type>(c, what, a, rows, cols, x, y, rowscale);
  if (rc <= 0) return rc;
  bool vec = vec_ok && cols % LANES == 0 && ((uintptr_t)x & 15) == 0;
  if (lpt == 2) gemv_go<F, 2>(c, a, rows, cols, x, y, rowscale, vec);
  else if (lpt == 4) gemv_go<F, 4>(c, a, rows, cols, x, y, rowscale, vec);
  else gemv_go<F, 8>(c, a, rows, cols, x, y, rowscale, vec);
  LAUNCHED(c, what);
  return 0;
}

cudaStream_t df_cuda_stream(df_cuda *c) { return c->s; }

extern "C" void df_cuda_set_gemv_lanes(df_cuda *c, int fmt, int lanes) {
  if (fmt >= 0 && fmt < 4 && (lanes == 2 || lanes == 4 || lanes == 8)) c->lpt[fmt] = lanes;
}
extern "C" void df_cuda_set_gemv_tiled(df_cuda *c, int fmt, int how) {
  if (fmt >= 0 && fmt < 4 && fmt != 2 && how >= 0 && how <= 6) c->tiled[fmt] = how;
}

extern "C" int df_cuda_gemv_bf16(df_cuda *c, const uint16_t *W, int rows, int cols, const float *x,
                                 float *y) {
  wargs a = {W, NULL};
  return gemv_launch<fmt_bf16>(c, "gemv bf16", a, rows, cols, x, y, NULL,
                               ((uintptr_t)W & 15) == 0, c->lpt[0]);
}
extern "C" int df_cuda_gemv_i8(df_cuda *c, const int8_t *W, const float *scale, int rows, int cols,
                               const float *x, float *y) {
  wargs a = {W, NULL};
  return gemv_launch<fmt_i8>(c, "gemv int8", a, rows, cols, x, y, scale, ((uintptr_t)W & 15) == 0,
                             c->lpt[1]);
}
extern "C" int df_cuda_gemv_f32(df_cuda *c, const float *W, int rows, int cols, const float *x,
                                float *y) {
  wargs a = {W, NULL};
  return gemv_launch<fmt_f32>(c, "gemv f32", a, rows, cols, x, y, NULL, ((uintptr_t)W & 15) == 0,
                              c->lpt[2]);
}
extern "C" int df_cuda_gemv_mxfp4(df_cuda *c, const uint8_t *packed, const uint8_t *scales,
                                  int rows, int cols, const float *x, float *y) {
  if (cols % 32) {
    snprintf(c->err, sizeof c->err, "gemv mxfp4: cols %d is not a multiple of 32", cols);
    return -1;
  }
  wargs a = {packed, scales};
  return gemv_launch<fmt_mxfp4>(c, "gemv mxfp4", a, rows, cols, x, y, NULL,
                                ((uintptr_t)packed & 15) == 0, c->lpt[3]);
}

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

template <template <int> class F, int LPT, int TB>
static void gemm_go(df_cuda *c, const wargs &a, int rows, int cols, const float *X, int T,
                    size_t ldx, float *Y, size_t ldy, const float *rowscale, bool vec,
                    long rblocks) {
  F<LPT> f = a.template as<F<LPT>>();
  int nvb = (T + TB - 1) / TB;
  unsigned blocks = (unsigned)(rblocks * nvb);
  if (vec)
    gemm_k<F<LPT>, LPT, true, TB>
        <<<blocks, GEMV_BLOCK, 0, c->s>>>(f, rows, cols, X, T, ldx, Y, ldy, rowscale, nvb);
  else
    gemm_k<F<LPT>, LPT, false, TB>
        <<<blocks, GEMV_BLOCK, 0, c->s>>>(f, rows, cols, X, T, ldx, Y, ldy, rowscale, nvb);
}

/* The vector block: 32 accumulators a thread at most (8 x 8 spilled). */
static constexpr int gemm_tb_max(int lpt) { return lpt >= 8 ? 4 : 8; }

template <template <int> class F, int LPT>
static void gemm_tb(df_cuda *c, const wargs &a, int rows, int cols, const float *X, int T,
                    size_t ldx, float *Y, size_t ldy, const float *rowscale, bool vec,
                    long rblocks) {
  if (T <= 2) gemm_go<F, LPT, 2>(c, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec, rblocks);
  else if (T <= 4) gemm_go<F, LPT, 4>(c, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec, rblocks);
  else gemm_go<F, LPT, gemm_tb_max(LPT)>(c, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec,
                                         rblocks);
}

template <template <int> class F>
static int gemm_tile_launch(df_cuda *c, const char *what, const wargs &a, int rows, int cols,
                            const float *X, int T, size_t ldx, float *Y, size_t ldy,
                            const float *rowscale) {
  long rb = ((long)rows + GT_R - 1) / GT_R, vb = ((long)T + GT_V - 1) / GT_V;
  if (rb > 0x7fffffffL || vb > 65535) {
    snprintf(c->err, sizeof c->err, "%s: %d rows x %d vectors is too many blocks", what, rows, T);
    return -1;
  }
  F<8> f = a.template as<F<8>>();
  gemm_tile_k<F<8>><<<dim3((unsigned)rb, (unsigned)vb), GT_THREADS, 0, c->s>>>(
      f, rows, cols, X, T, ldx, Y, ldy, rowscale);
  LAUNCHED(c, what);
  return 0;
}

template <template <int> class F>
static int gemm_lane_launch(df_cuda *c, const char *what, const wargs &a, int rows, int cols,
                            const float *X, int T, size_t ldx, float *Y, size_t ldy,
                            const float *rowscale, bool vec) {
  long rb = ((long)rows + GL_R - 1) / GL_R, vb = ((long)T + GL_V - 1) / GL_V;
  if (rb > 0x7fffffffL || vb > 65535) {
    snprintf(c->err, sizeof c->err, "%s: %d rows x %d vectors is too many blocks", what, rows, T);
    return -1;
  }
  F<8> f = a.template as<F<8>>();
  dim3 grid((unsigned)rb, (unsigned)vb);
  if (vec)
    gemm_lane_k<F<8>, true><<<grid, GL_THREADS, 0, c->s>>>(f, rows, cols, X, T, ldx, Y, ldy,
                                                           rowscale);
  else
    gemm_lane_k<F<8>, false><<<grid, GL_THREADS, 0, c->s>>>(f, rows, cols, X, T, ldx, Y, ldy,
                                                            rowscale);
  LAUNCHED(c, what);
  return 0;
}

extern "C" void df_cuda_set_gemm_tiles(df_cuda *c, int how) {
  c->gemm_tiles = how >= 0 && how <= 2 ? how : 0;
}

/* T == 1 is the GEMV itself. The vector loads of x need every vector
 * 16-byte aligned, hence ldx % 4 == 0 besides the GEMV's conditions. */
template <template <int> class F>
static int gemm_launch(df_cuda *c, const char *what, wargs a, int rows, int cols, const float *X,
                       int T, size_t ldx, float *Y, size_t ldy, const float *rowscale,
                       bool vec_ok, int lpt) {
  if (T < 0 || (T > 1 && ldy < (size_t)(rows > 0 ? rows : 0))) {
    snprintf(c->err, sizeof c->err, "%s: T %d with ldy %zu for %d rows", what, T, ldy, rows);
    return -1;
  }
  if (rows <= 0 || T == 0) return 0;
  if (T == 1) return gemv_launch<F>(c, what, a, rows, cols, X, Y, rowscale, vec_ok, lpt);
  if (c->gemm_tiles == 1)
    return gemm_tile_launch<F>(c, what, a, rows, cols, X, T, ldx, Y, ldy, rowscale);
  bool vec = vec_ok && cols % LANES == 0 && ((uintptr_t)X & 15) == 0 && ldx % 4 == 0;
  if (c->gemm_tiles == 2)
    return gemm_lane_launch<F>(c, what, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec);
  long rblocks = ((long)(LANES / lpt) * rows + GEMV_BLOCK - 1) / GEMV_BLOCK;
  int tb = T <= 2 ? 2 : T <= 4 ? 4 : gemm_tb_max(lpt);
  if (rblocks * ((T + tb - 1) / tb) > 0x7fffffffL) {
    snprintf(c->err, sizeof c->err, "%s: %d rows x %d vectors is too many blocks", what, rows, T);
    return -1;
  }
  if (lpt == 2) gemm_tb<F, 2>(c, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec, rblocks);
  else if (lpt == 4) gemm_tb<F, 4>(c, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec, rblocks);
  else gemm_tb<F, 8>(c, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec, rblocks);
  LAUNCHED(c, what);
  return 0;
}

extern "C" int df_cuda_gemm_bf16(df_cuda *c, const uint16_t *W, int rows, int cols,
                                 const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  wargs a = {W, NULL};
  return gemm_launch<fmt_bf16>(c, "gemm bf16", a, rows, cols, X, T, ldx, Y, ldy, NULL,
                               ((uintptr_t)W & 15) == 0, c->lpt[0]);
}
extern "C" int df_cuda_gemm_i8(df_cuda *c, const int8_t *W, const float *scale, int rows, int cols,
                               const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  wargs a = {W, NULL};
  return gemm_launch<fmt_i8>(c, "gemm int8", a, rows, cols, X, T, ldx, Y, ldy, scale,
                             ((uintptr_t)W & 15) == 0, c->lpt[1]);
}
extern "C" int df_cuda_gemm_f32(df_cuda *c, const float *W, int rows, int cols, const float *X,
                                int T, size_t ldx, float *Y, size_t ldy) {
  wargs a = {W, NULL};
  return gemm_launch<fmt_f32>(c, "gemm f32", a, rows, cols, X, T, ldx, Y, ldy, NULL,
                              ((uintptr_t)W & 15) == 0, c->lpt[2]);
}
extern "C" int df_cuda_gemm_mxfp4(df_cuda *c, const uint8_t *packed, const uint8_t *scales,
                                  int rows, int cols, const float *X, int T, size_t ldx, float *Y,
                                  size_t ldy) {
  if (cols % 32) {
    snprintf(c->err, sizeof c->err, "gemm mxfp4: cols %d is not a multiple of 32", cols);
    return -1;
  }
  wargs a = {packed, scales};
  return gemm_launch<fmt_mxfp4>(c, "gemm mxfp4", a, rows, cols, X, T, ldx, Y, ldy, NULL,
                                ((uintptr_t)packed & 15) == 0, c->lpt[3]);
}

/* ---- vector functions: one block; the reductions as the scalar loops ---- */


__device__ static inline float sigm(float v) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, df_km_expf(-v)));
}

/* The max and the sum are one thread's ascending loops: the scalar softmax
 * sums sequentially, so no tree may replace it. */
__global__ void softmax_k(float *x, int n) {
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

__global__ void sigmoid_k(float *x, int n, int silu) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = silu ? __fmul_rn(x[i], sigm(x[i])) : sigm(x[i]);
}

__global__ void situ_k(float *out, const float *g, const float *u, int n, float bg, float bu) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float gate = __fmul_rn(bg, df_km_tanhf(__fdiv_rn(g[i], bg)));
    gate = __fmul_rn(gate, sigm(g[i]));
    float up = __fmul_rn(bu, df_km_tanhf(__fdiv_rn(u[i], bu)));
    out[i] = __fmul_rn(gate, up);
  }
}

__global__ void elementary_k(int which, const float *x, float *y, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = x[i];
    y[i] = which == 0 ? df_km_expf(v) : which == 1 ? df_km_tanhf(v) : __fdiv_rn(1.0f, __fsqrt_rn(v));
  }
}

static int grid_for(long n) {
  long b = (n + VBLOCK - 1) / VBLOCK;
  return (int)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

extern "C" int df_cuda_rmsnorm(df_cuda *c, float *y, const float *x, const float *w, int n,
                               float eps) {
  rmsnorm_k<<<1, VBLOCK, 0, c->s>>>(y, x, w, n, (size_t)n, eps);
  LAUNCHED(c, "rmsnorm");
  return 0;
}
extern "C" int df_cuda_rmsnorm_rows(df_cuda *c, float *y, const float *x, const float *w, int n,
                                    int rows, size_t ld, float eps) {
  if (rows <= 0) return 0;
  if (ld < (size_t)n) return -1;
  rmsnorm_k<<<rows, VBLOCK, 0, c->s>>>(y, x, w, n, ld, eps);
  LAUNCHED(c, "rmsnorm rows");
  return 0;
}

extern "C" int df_cuda_attn_res(df_cuda *c, float *xn, float *work, const float *snaps,
                                size_t ss, int nS, const float *last, int T, int H,
                                const float *res_norm, const float *res_proj, const float *norm,
                                float eps) {
  if (T <= 0) return 0;
  if (nS < 0 || H <= 0 || (nS > 0 && (!res_norm || !res_proj || !work || nS + 1 > H)) || !norm ||
      T > 65535) {
    snprintf(c->err, sizeof c->err, "attn res: %d snapshots, %d rows of %d", nS, T, H);
    return -1;
  }
  const float *x = last;
  if (nS > 0) {
    attn_scores_k<<<dim3(nS + 1, T), VBLOCK, 0, c->s>>>(work, snaps, ss, nS, last, H, res_norm,
                                                         res_proj, eps);
    LAUNCHED(c, "attn res scores");
    attn_combine_k<<<dim3((H + VBLOCK - 1) / VBLOCK, T), VBLOCK, sizeof(float) * (size_t)(nS + 1),
                     c->s>>>(xn, work, snaps, ss, nS, last, H);
    LAUNCHED(c, "attn res sum");
    x = xn;
  }
  rmsnorm_k<<<T, VBLOCK, 0, c->s>>>(xn, x, norm, H, (size_t)H, eps); /* in place after the sum */
  LAUNCHED(c, "attn res norm");
  return 0;
}

/* one thread per (row, element): the slots in order, each product rounded */
__global__ void moe_combine_k(float *out, const float *Y, const int *rows, const float *w, int T,
                              int K, int n) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (long)T * n;
       i += (long)gridDim.x * blockDim.x) {
    int t = (int)(i / n), d = (int)(i % n);
    float acc = 0.0f;
    for (int k = 0; k < K; k++)
      acc = __fadd_rn(acc, __fmul_rn(w[t * K + k], Y[(size_t)rows[t * K + k] * n + d]));
    out[i] = acc;
  }
}
extern "C" int df_cuda_moe_combine(df_cuda *c, float *out, const float *Y, const int *rows,
                                   const float *w, int T, int K, int n) {
  if (T <= 0 || n <= 0) return 0;
  moe_combine_k<<<grid_for((long)T * n), VBLOCK, 0, c->s>>>(out, Y, rows, w, T, K, n);
  LAUNCHED(c, "moe combine");
  return 0;
}

__global__ void add_k(float *y, const float *a, const float *b, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] = __fadd_rn(a[i], b[i]);
}
extern "C" int df_cuda_add(df_cuda *c, float *y, const float *a, const float *b, size_t n) {
  if (!n) return 0;
  add_k<<<grid_for((long)(n < (1u << 30) ? n : (1u << 30))), VBLOCK, 0, c->s>>>(y, a, b, n);
  LAUNCHED(c, "add");
  return 0;
}

extern "C" int df_cuda_softmax(df_cuda *c, float *x, int n) {
  if (n <= 0) return 0;
  softmax_k<<<1, VBLOCK, 0, c->s>>>(x, n);
  LAUNCHED(c, "softmax");
  return 0;
}
extern "C" int df_cuda_sigmoid(df_cuda *c, float *x, int n) {
  sigmoid_k<<<grid_for(n), VBLOCK, 0, c->s>>>(x, n, 0);
  LAUNCHED(c, "sigmoid");
  return 0;
}
extern "C" int df_cuda_silu(df_cuda *c, float *x, int n) {
  sigmoid_k<<<grid_for(n), VBLOCK, 0, c->s>>>(x, n, 1);
  LAUNCHED(c, "silu");
  return 0;
}
extern "C" int df_cuda_situ(df_cuda *c, float *out, const float *g, const float *u, int n,
                            float bg, float bu) {
  situ_k<<<grid_for(n), VBLOCK, 0, c->s>>>(out, g, u, n, bg, bu);
  LAUNCHED(c, "situ");
  return 0;
}
extern "C" int df_cuda_elementary(df_cuda *c, int which, const float *x, float *y, size_t n) {
  elementary_k<<<grid_for((long)(n < (1u << 30) ? n : (1u << 30))), VBLOCK, 0, c->s>>>(which, x,
                                                                                      y, n);
  LAUNCHED(c, "elementary");
  return 0;
}

/* ---- the KDA step and the router's top-k ---- */

/* One block per head, one thread per value column j: every sum of the
 * scalar kda_step runs over the key index i for a fixed j, in ascending i,
 * so column j is one thread's sequential loops and no order changes. */
__global__ void kda_step_k(float *S, const float *q, const float *k, const float *v,
                           const float *alpha, const float *beta, float *o, int D) {
  int h = blockIdx.x;
  float *St = S + (size_t)h * D * D;
  const float *qh = q + (size_t)h * D, *kh = k + (size_t)h * D, *ah = alpha + (size_t)h * D;
  for (int j = threadIdx.x; j < D; j += blockDim.x) {
    float u = 0.0f;
    for (int i = 0; i < D; i++) {
      float *cell = St + (size_t)i * D + j;
      float sv = __fmul_rn(*cell, ah[i]);
      *cell = sv;
      u = __fadd_rn(u, __fmul_rn(sv, kh[i]));
    }
    u = __fmul_rn(beta[h], __fsub_rn(v[(size_t)h * D + j], u));
    float acc = 0.0f;
    for (int i = 0; i < D; i++) {
      float *cell = St + (size_t)i * D + j;
      float sv = __fadd_rn(*cell, __fmul_rn(kh[i], u));
      *cell = sv;
      acc = __fadd_rn(acc, __fmul_rn(sv, qh[i]));
    }
    o[(size_t)h * D + j] = acc;
  }
}

extern "C" int df_cuda_kda_step(df_cuda *c, float *S, const float *q, const float *k,
                                const float *v, const float *alpha, const float *beta, float *o,
                                int heads, int D) {
  if (heads <= 0 || D <= 0) return 0;
  kda_step_k<<<heads, D < 256 ? D : 256, 0, c->s>>>(S, q, k, v, alpha, beta, o, D);
  LAUNCHED(c, "kda step");
  return 0;
}

#define ROUTER_MAX_K 64

/* One thread per row: the insertion of model/router.c, the same
 * comparisons in the same order (ties keep the lower id), then the same
 * sequential sum and scaling. */
__global__ void router_k(const float *sc, const float *bias, int E, int K, int norm, float scale,
                         int rows, int *ids, float *w) {
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

extern "C" int df_cuda_router_topk(df_cuda *c, const float *sc, const float *bias, int n_experts,
                                   int top_k, int norm_topk_prob, float routed_scale, int rows,
                                   int *ids, float *w) {
  if (top_k < 1 || top_k > ROUTER_MAX_K || top_k > n_experts) {
    snprintf(c->err, sizeof c->err, "router: top_k %d is not in 1..min(%d, %d)", top_k,
             ROUTER_MAX_K, n_experts);
    return -1;
  }
  if (rows <= 0) return 0;
  router_k<<<(rows + 63) / 64, 64, 0, c->s>>>(sc, bias, n_experts, top_k, norm_topk_prob,
                                              routed_scale, rows, ids, w);
  LAUNCHED(c, "router");
  return 0;
}

/* The GEMV kernels: the lanes layout and the row tiles (the default for
 * bf16, int8 and MXFP4), the single launch and the grouped one. A header of its own, as
 * kcuda_gemm.cuh, so tests/cuda/emu runs these same kernels on the host
 * (where a cp.async copy lands only when a wait_group lets its group
 * complete, so a stage read before its wait reads stale bytes there too).
 * Needs kcuda_fmt.cuh. */
#ifndef DF_KERNELS_CUDA_KCUDA_GEMV_CUH
#define DF_KERNELS_CUDA_KCUDA_GEMV_CUH

extern "C" {
#include "kernels/cuda/kcuda.h"
}
#include "kernels/cuda/kcuda_fmt.cuh"
#include "kernels/cuda/kcuda_block.cuh" /* DF_DYN_SHARED; kcuda_pdl.cuh */

#include <string.h>

/* ---- GEMV, lanes layout (f32's GEMV, and every format's where chosen) ---- */
#define GEMV_BLOCK 64 /* small blocks spread a 3072-row expert over more SMs */
#define PF_CHUNK 1024u /* bytes per L2 prefetch request */
#define PF_AHEAD 2048u /* how far ahead of the loads the prefetches run */

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
  pdl_enter();
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
/* a dependent launch (kcuda_pdl.cuh): the first stages' weights before
 * pdl_wait, their x after it; without it the stages go as they always did */
#define TILE_DEP 8
/* MXFP4's fused form (tf_mxfp4::unit_fma) where x and the scales allow */
#define TILE_FMA 16
/* flags >> TILE_PF_SHIFT: each row's L2 prefetch window in TILE_PF_UNIT
 * bytes (0: none); only with TILE_WVEC (the bulk prefetch wants 16-byte
 * aligned ranges) */
#define TILE_PF_SHIFT 8
#define TILE_PF_UNIT 512

/* A shared-memory address as cp.async takes it: 32 bits on the GPU, taken
 * from a pointer once a thread (the conversion reads the block's window
 * base: made a copy, it was most of the ten instructions each copy cost);
 * elsewhere the pointer itself. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
typedef uint32_t sh_addr;
__device__ __forceinline__ static sh_addr sh_of(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
#else
typedef uintptr_t sh_addr;
__device__ __forceinline__ static sh_addr sh_of(const void *p) { return (uintptr_t)p; }
#endif

/* N (16 or 8) bytes from global to shared memory, asynchronously (16 through
 * L2 only, 8 also cached in L1, as PTX allows each) */
template <int N> __device__ static inline void cp_async(sh_addr s, const void *gsrc) {
  static_assert(N == 16 || N == 8, "cp.async copies 16 or 8 bytes here");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (N == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s),
                 "l"(__cvta_generic_to_global(gsrc))
                 : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(s),
                 "l"(__cvta_generic_to_global(gsrc))
                 : "memory");
#elif defined(DF_CUDA_EMU)
  emu_cp_async((void *)s, gsrc, N);
#else
  memcpy((void *)s, gsrc, N);
#endif
}
__device__ static inline void cp_async_commit(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#elif defined(DF_CUDA_EMU)
  emu_cp_commit();
#endif
}
template <int N> __device__ static inline void cp_async_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#elif defined(DF_CUDA_EMU)
  emu_cp_wait(N);
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
  template <int LPT = 16>
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
  template <int LPT = 16>
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
 * e2m1 first): the same rounding, overflow to inf included.
 *
 * Placing the bits: a float wants the sign 7 places above the magnitude's
 * top bit, a nibble has it 1 place above. A word of 8 codes is spread once
 * into two (e2m1_spread): the signs where they are, each magnitude rotated
 * 6 places down, which for code e lands on code e - 2's sign; so one word
 * keeps codes 0, 1, 4 and 5 (their signs from the word, all else from the
 * rotation) and the other codes 2, 3, 6 and 7. Each code is then a rotate
 * bringing its sign to bit 31 (none for code 7) and a mask: two
 * instructions a code and three a word, against three a code before (a
 * shift, an arithmetic shift, a mask), the integer pipe being the
 * kernel's busiest (docs/PERFORMANCE.md, run 33). Which bits end up in
 * the float is exactly as before: the same floats, the same products. */
struct e2m1_pair {
  uint32_t a, b; /* a: codes 0, 1, 4, 5; b: codes 2, 3, 6, 7 */
};
/* m's bits from a, the others from b: one lop3 (the compiler, given the
 * expression, made two of it) */
template <uint32_t m> __device__ __forceinline__ static uint32_t bits_from(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(d) : "r"(a), "r"(b), "n"(m));
  return d;
#else
  return (a & m) | (b & ~m);
#endif
}
__device__ __forceinline__ static e2m1_pair e2m1_spread(uint32_t q) {
  uint32_t r = __funnelshift_r(q, q, 6);
  return e2m1_pair{bits_from<0x00880088u>(q, r), bits_from<0x88008800u>(q, r)};
}
/* With four lanes a thread a word holds its 4 codes in the low half: the
 * spread would cost as much a code as it saves (measured 5% slower), so
 * these take the three operations (shift, arithmetic shift, mask). */
__device__ __forceinline__ static uint32_t e2m1_bits(uint32_t q, int e) {
  return (uint32_t)((int32_t)(q << (28 - 4 * e)) >> 6) & 0x81C00000u;
}
/* code e (0..7) of a spread word: e2m1 * 2^-126 as float bits */
__device__ __forceinline__ static uint32_t e2m1_at(e2m1_pair p, int e) {
  uint32_t w = e & 2 ? p.b : p.a;
  /* codes 2..6 keep their bits clear of the wrap: a plain shift does */
  uint32_t t = e == 7 ? w : e >= 2 ? w << (28 - 4 * e) : __funnelshift_l(w, w, 28 - 4 * e);
  return t & 0x81C00000u;
}
/* The fused form's codes (tf_mxfp4::unit_fma), one operation each: a
 * float whose top byte is the sign (0x80 or 0) and whose second byte is
 * n = 2 * e2m1 (0..12), the rest zero, is n * 2^-133 (a subnormal for
 * n < 128, and 2^-126 * (1 + (n - 128) / 128) above: linear in n
 * throughout), so e2m1 * 2^-132 exactly, its sign included. A word of 8
 * codes gives, in four operations, each code's n as a byte (its magnitude
 * looked up in an 8-byte table by prmt, four codes a lookup) and, in
 * three, each code's sign alone in a byte's top bit (the odd codes' signs
 * are already there; the even codes' 4 places lower); then one prmt a code
 * puts its sign byte and its n byte in place, and the low two bytes as n's
 * top bit (always 0) replicated. Fifteen operations a word, against
 * eighteen for the rotate and mask (e2m1_spread, e2m1_at). */
struct e2m1_lut {
  uint32_t n[2]; /* n of codes 0-3, 4-7 (byte k: code k, k + 4) */
  uint32_t s[2]; /* the signs of the even codes, the odd (byte k: code 2k, 2k + 1) */
};
/* PTX's prmt in its generic form: byte i of the result is byte c_i & 7
 * of {b, a} (a the low four), or with c_i & 8 that byte's top bit
 * replicated (CUDA's __byte_perm has no such mode) */
__device__ __forceinline__ static uint32_t prmt(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  uint64_t v = (uint64_t)b << 32 | a;
  uint32_t d = 0;
  for (int i = 0; i < 4; i++) {
    uint32_t k = c >> (4 * i) & 15u, byte = (uint32_t)(v >> (8 * (k & 7))) & 0xffu;
    if (k & 8) byte = byte & 0x80u ? 0xffu : 0u;
    d |= byte << (8 * i);
  }
  return d;
#endif
}
/* lo: 0x03020100, n of magnitudes 0..3 (the caller's register); hi: n of 4..7 */
__device__ __forceinline__ static e2m1_lut e2m1_lut_of(uint32_t q, uint32_t lo) {
  const uint32_t hi = 0x0C080604u;
  uint32_t mag = q & 0x77777777u;
  return e2m1_lut{{prmt(lo, hi, mag), prmt(lo, hi, mag >> 16)}, {(q << 4) & 0x80808080u, q & 0x80808080u}};
}
/* code e (0..7): e2m1 * 2^-132 as float bits */
__device__ __forceinline__ static uint32_t e2m1_lut_at(const e2m1_lut &l, int e) {
  const uint32_t nb = 4u + (uint32_t)(e & 3); /* n's byte, in prmt's b */
  return prmt(l.s[e & 1], l.n[e >> 2], (uint32_t)(e >> 1) << 12 | nb << 8 | (8u | nb) << 4 | (8u | nb));
}
struct tf_mxfp4 {
  /* CK / 32 = 8 scales a chunk */
  static constexpr int fmt = 3, CK = 256, RB = 128, UC = 32, scaled = 1, deep = 6;
  __host__ __device__ static size_t rowbytes(int cols) { return (size_t)cols / 2; }
  /* q: the thread's code words of the group, QW a step, step 0 first; with
   * 4 lanes a thread, its 4 codes in the low half of each word */
  template <int LPT> static constexpr int QW = LPT >= 8 ? LPT / 8 : 1;
  template <int LPT>
  __device__ __forceinline__ static void load(const uint8_t *w, int u, int g, uint32_t q[2 * QW<LPT>]) {
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
  }
  template <int LPT>
  __device__ __forceinline__ static void spread(const uint32_t *q, e2m1_pair sp[2 * QW<LPT>]) {
#pragma unroll
    for (int i = 0; i < 2 * QW<LPT>; i++) sp[i] = LPT >= 8 ? e2m1_spread(q[i]) : e2m1_pair{q[i], 0};
  }
  /* lane j of step st: e2m1 * 2^-126 */
  template <int LPT>
  __device__ __forceinline__ static float code(const e2m1_pair *sp, int st, int j) {
    return __uint_as_float(LPT >= 8 ? e2m1_at(sp[st * QW<LPT> + (j >> 3)], j & 7)
                                    : e2m1_bits(sp[st].a, j));
  }
  template <bool big, int LPT>
  __device__ __forceinline__ static void group(const uint32_t *q, uint32_t s,
                                               const float *x, float acc[LPT]) {
    float sc = big ? __uint_as_float(s << 23) : __uint_as_float((s + 126u) << 23);
    e2m1_pair sp[2 * QW<LPT>];
    spread<LPT>(q, sp);
#pragma unroll
    for (int st = 0; st < 2; st++) {
      float xv[LPT];
      tile_xn<LPT>(x + st * 16, xv);
#pragma unroll
      for (int j = 0; j < LPT; j++) {
        float f = code<LPT>(sp, st, j);
        float wf = big ? __fmul_rn(__fmul_rn(f, 0x1p126f), sc) : __fmul_rn(f, sc);
        acc[j] = __fadd_rn(acc[j], __fmul_rn(wf, xv[j]));
      }
    }
  }
  /* a group as the reference takes it, for any scale (the row tiles' chunks
   * that the fused form may not take) */
  template <int LPT = 16>
  __device__ __forceinline__ static void unit(const uint8_t *w, int u, uint32_t s, const float *x,
                                              float acc[LPT], int g) {
    uint32_t q[2 * QW<LPT>];
    load<LPT>(w, u, g, q);
    if (s <= 128u) group<false, LPT>(q, s, x + u * 32 + g * LPT, acc);
    else group<true, LPT>(q, s, x + u * 32 + g * LPT, acc);
  }
  /* The fused form: the same sums, two instructions a code fewer. The
   * code's float f = e2m1 * 2^-FB (e2m1_lut_at's, FB = 132) times
   * x' = x * 2^XUP (tile_xscale puts x' in place of x) is e2m1 * x * 2^-62
   * rounded once; times 2^(s-65), a power of two, it is exactly the
   * reference's round(e2m1 * 2^(s-127) * x) wherever both products are
   * normal floats (a rounding commutes with a power of two there), so one
   * fused multiply-add by 2^(s-65) rounds the reference's own sum acc +
   * product. Both are normal for every nonzero x in [2^-62, 2^58)
   * (tile_xscale's range: x' below 2^128) and s in [64, 191]
   * (tile_fused_s): 0.5 * 2^-62 * 2^(64-127) = 2^-126 at the bottom,
   * 6 * 2^58 * 2^(191-127) < 2^126 at the top; zeros are exact both ways.
   * f itself may be subnormal (code 1 is 2^-133): a multiply takes it
   * exactly, and the product, at least 2^-125, is normal. */
  static constexpr uint32_t XUP = 70, FB = 132;
  /* m: 2^(s-1-64), tile_fused_m's */
  template <int LPT>
  __device__ __forceinline__ static void unit_fma(const uint8_t *w, int u, float m,
                                                  const float *xq, float acc[LPT], int g, uint32_t lo) {
    uint32_t q[2 * QW<LPT>];
    load<LPT>(w, u, g, q);
#if defined(DF_CUDA_EMU)
    emu_fused_units++; /* which chunks take it is a policy: the emulation counts them */
#endif
    e2m1_lut lt[2 * QW<LPT>];
#pragma unroll
    for (int i = 0; i < 2 * QW<LPT>; i++) lt[i] = e2m1_lut_of(q[i], lo);
#pragma unroll
    for (int st = 0; st < 2; st++) {
      float xv[LPT];
      tile_xn<LPT>(xq + u * 32 + g * LPT + st * 16, xv);
#pragma unroll
      for (int j = 0; j < LPT; j++) {
        float f = __uint_as_float(e2m1_lut_at(lt[st * QW<LPT> + (j >> 3)], j & 7));
        acc[j] = __fmaf_rn(__fmul_rn(f, xv[j]), m, acc[j]);
      }
    }
  }
};

/* The fused form's x (tf_mxfp4::unit_fma): the thread's own 16-byte pieces
 * of a whole chunk (those it staged: tid, tid + NT, ...), each times
 * 2^XUP in place where all four of its nonzero |x| are in [2^-62, 2^58), which
 * keeps x' exact and every product normal (left as it is otherwise: a
 * subnormal, an infinity or a NaN never is). True where every piece was;
 * the block's vote then decides, since a chunk with a piece left as x can
 * only go as before (with x read again from global memory: in the others
 * it is x'). */
template <int CK, int NT> __device__ __forceinline__ static bool tile_xscale(float *xs, int tid) {
  bool ok = true;
#pragma unroll
  for (int it = 0; it < (CK / 4 + NT - 1) / NT; it++) {
    int i = tid + it * NT;
    if ((CK / 4) % NT && i >= CK / 4) break;
    float4 v = ((const float4 *)xs)[i];
    uint32_t b[4] = {__float_as_uint(v.x), __float_as_uint(v.y), __float_as_uint(v.z), __float_as_uint(v.w)};
    bool in = true;
#pragma unroll
    for (int e = 0; e < 4; e++) {
      uint32_t a = b[e] & 0x7fffffffu;
      /* from 2^-62 up to, not including, 2^(128 - XUP), where x' would overflow */
      in = in && (a == 0 || a - 0x20800000u < ((255u - tf_mxfp4::XUP) << 23) - 0x20800000u);
    }
    if (in) {
      const float up = __uint_as_float((127u + tf_mxfp4::XUP) << 23);
      ((float4 *)xs)[i] = make_float4(__fmul_rn(v.x, up), __fmul_rn(v.y, up), __fmul_rn(v.z, up),
                                      __fmul_rn(v.w, up));
    }
    ok = ok && in;
  }
  return ok;
}
/* the fused form's scales: all 8 of a row's in [64, 191] (each byte plus 64
 * has its top bit set; a byte from 192 carries out of its own and clears
 * it, and one is enough to fail) */
__device__ __forceinline__ static bool tile_fused_s(uint2 sv) {
  return ((sv.x + 0x40404040u) & (sv.y + 0x40404040u) & 0x80808080u) == 0x80808080u;
}

/* The fused form's multipliers 2^(s-1-64) of a row's chunk, from its scales'
 * words: tile_fused_mw adds FB - XUP = 62 to each of a word's 4 scale bytes at
 * once (no carry: s <= 191 where the form goes), tile_fused_m moves byte k
 * to a float's exponent, two operations a group (against an extract, an add
 * and a shift) */
__device__ __forceinline__ static uint2 tile_fused_mw(uint2 sv) {
  const uint32_t b = (tf_mxfp4::FB - tf_mxfp4::XUP) * 0x01010101u;
  return make_uint2(sv.x + b, sv.y + b);
}
__device__ __forceinline__ static float tile_fused_m(uint2 mw, int u) {
  uint32_t v = u < 4 ? mw.x : mw.y;
  int k = u & 3;
  return __uint_as_float((k == 3 ? v >> 1 : v << (23 - 8 * k)) & 0x7F800000u);
}

/* A format's wide form: RBX bytes of each row a chunk (512, against 128 or
 * 256), so each row's reads are longer runs of consecutive bytes, at the
 * cost of fewer stages in the same shared memory. The same units in the
 * same order: only how many a chunk holds differs. */
template <class B, int CKX, int RBX> struct tf_wide : B {
  static constexpr int CK = CKX, RB = RBX;
};
typedef tf_wide<tf_bf16, 256, 512> tf_bf16w;
typedef tf_wide<tf_i8, 512, 512> tf_i8w;
typedef tf_wide<tf_mxfp4, 1024, 512> tf_mxfp4w;
/* the medium form: twice the narrow form's chunk (MXFP4: 512 columns, 256
 * bytes of a row), so a chunk's fixed costs (its wait, barrier and vote,
 * its copies' loop, its scales' test) go over twice the codes */
template <class TF> using tf_mid = tf_wide<TF, 2 * TF::CK, 2 * TF::RB>;

/* One stage of a block's shared memory: each warp's rows' weights (16
 * bytes of padding a row, so rows start in different banks) and scales,
 * and the chunk of x. tile_smem: the bytes a launch asks for, 0 where the
 * arrays are static (one warp a block). */
template <class TF, int G, int NW> struct tile_stage {
  typedef uint8_t w[NW][TROWS / G][TF::RB + 16];
  typedef float x[TF::CK];
  typedef uint8_t s[NW][TROWS / G][TF::scaled ? TF::CK / 32 : 8];
};
template <class TF, int NS, int G, int NW> static constexpr size_t tile_smem(void) {
  typedef tile_stage<TF, G, NW> SG;
  return NW == 1 ? 0 : NS * (sizeof(typename SG::w) + sizeof(typename SG::x) + sizeof(typename SG::s));
}

/* The variants a launch picks from, in kcuda.cu's numbering (the
 * emulation runs the same table): 0 2 stages, 1 3 stages, 2 deep, 3 deep
 * with two threads a row, 4 deep with four; then the wide form: 5 2
 * stages, 6 3 stages with two threads a row, 7 5 stages with four; 8 and 9
 * are 6 and 7 in blocks of four warps that stage x once for all four
 * (a one-warp block of the wide int8 form with four threads a row reads
 * half as many bytes of x as of weights, each block its own copy through
 * L2; shared, an eighth); 10 is the narrow form's 3 stages with two
 * threads a row in such blocks (8 lanes a thread hold half the state, so
 * more warps fit an SM; docs/PERFORMANCE.md, runs 38-39); 11 is 10 in the
 * medium form (twice the chunk: run 43); 12 is 11 with 2 stages (11's 60
 * KB of shared memory a block leave room for 3 blocks an SM, 12 warps;
 * 12's 40 KB for 5, as 10), MXFP4's pick (tile_pick_mxfp4).
 * fn is called with a tile_v<format, stages, threads a row, warps a block>. */
#define TILE_VARIANTS DF_CUDA_TILE_VARIANTS /* kcuda.h */
template <class TF> struct tile_wide_of;
template <> struct tile_wide_of<tf_bf16> {
  typedef tf_bf16w type;
};
template <> struct tile_wide_of<tf_i8> {
  typedef tf_i8w type;
};
template <> struct tile_wide_of<tf_mxfp4> {
  typedef tf_mxfp4w type;
};
template <class F_, int NS_, int G_, int NW_ = 1> struct tile_v {
  typedef F_ F;
  static constexpr int NS = NS_, G = G_, NW = NW_, rows = NW_ * TROWS / G_, threads = NW_ * TROWS;
  static constexpr size_t smem(void) { return tile_smem<F_, NS_, G_, NW_>(); }
};
template <class TF, class Fn> __host__ static inline void tile_variant(int v, Fn fn) {
  typedef typename tile_wide_of<TF>::type TW;
  switch (v) {
  case 0: fn(tile_v<TF, 2, 1>()); break;
  case 1: fn(tile_v<TF, 3, 1>()); break;
  case 2: fn(tile_v<TF, TF::deep, 1>()); break;
  case 3: fn(tile_v<TF, TF::deep, 2>()); break;
  case 4: fn(tile_v<TF, TF::deep, 4>()); break;
  case 5: fn(tile_v<TW, 2, 1>()); break;
  case 6: fn(tile_v<TW, 3, 2>()); break;
  case 7: fn(tile_v<TW, 5, 4>()); break;
  case 8: fn(tile_v<TW, 3, 2, 4>()); break;
  case 9: fn(tile_v<TW, 5, 4, 4>()); break;
  case 10: fn(tile_v<TF, 3, 2, 4>()); break;
  case 11: fn(tile_v<tf_mid<TF>, 3, 2, 4>()); break;
  default: fn(tile_v<tf_mid<TF>, 2, 2, 4>()); break;
  }
}

/* MXFP4's variant, at every shape. Its cost is the codes' decode, not the
 * bytes: two threads a row in blocks of four warps (half a row's state a
 * thread lets 20 warps an SM issue), in the medium form (a chunk's fixed
 * costs over 512 columns) with 2 stages, so that five blocks still fit an
 * SM's shared memory (3 stages fit three: 12 warps). On an H100 it leads
 * at both sizes the engine launches: a MoE layer's token 0.694 -> 0.738 of
 * the copy against the medium form's 3 stages, one expert's gate and down
 * 0.140 / 0.160 -> 0.163 / 0.184 against the narrow form's (variant 10);
 * docs/PERFORMANCE.md, runs 39, 42-47. The emulation's policy test holds
 * it to the form it names. */
__host__ static constexpr int tile_pick_mxfp4(void) { return 12; }

/* The variant for `blocks` 32-row blocks of bf16 or int8 (RB bytes of a
 * row a chunk in the narrow form), given occ[v], the blocks of variant v
 * an SM holds, and the SMs. Within one round of the narrow form's 3-stage
 * blocks: the wide form (512 bytes of a row a chunk) with the most threads
 * a row that still fits one round (on the H200, int8 KDA o 0.37 -> 0.62 of
 * the copy bandwidth, KDA q 0.53 -> 0.60, bf16 0.76-0.80 -> 0.80-0.83:
 * docs/PERFORMANCE.md, 2026-12-05), in blocks of four warps sharing x
 * under shared_x (DF_CUDA_SHARED_X=1: no clear gain on the H100, run 23);
 * where those do not fit, a deep one with four threads a row where the
 * SMs hold four times the blocks, else two where twice. Where the narrow
 * form's 3 stages would hold 64 KB or more in flight an SM, and past one
 * round, the wide form's 5 stages with four threads a row: on the H100 as
 * the engine launches it (a dependent launch), int8 KDA qkv 0.733 -> 0.914,
 * the LM head 0.905 -> 0.972, bf16 KDA qkv 0.848 -> 0.932 against the
 * narrow form's 2 or 3 stages (run 48). A host function of numbers alone,
 * so the emulation tests the policy on a device's occupancies. */
__host__ static inline int tile_pick_rows(const int occ[TILE_VARIANTS], long sms, long blocks,
                                          int rb, int shared_x) {
  long w = (blocks + sms - 1) / sms;
  bool round = blocks <= occ[1] * sms;
  if (round && 4 * blocks <= occ[7] * sms) return shared_x ? 9 : 7;
  if (round && 2 * blocks <= occ[6] * sms) return shared_x ? 8 : 6;
  if (!round || w * 2 * TROWS * rb >= 64 * 1024) return shared_x ? 9 : 7;
  return occ[4] >= 4 * w ? 4 : occ[3] >= 2 * w ? 3 : occ[2] >= w ? 2 : 1;
}

/* Which loads a matrix's alignment and shape allow (kcuda.cu's launches
 * and the emulation's alike): whole 16-byte pieces of the rows and of x,
 * MXFP4's scales 8 at a time (every chunk's but a short last one's are
 * whole 8s when a row's groups are); and the L2 prefetch window, pf bytes
 * (a multiple of TILE_PF_UNIT; 0: none). */
template <class TF>
__host__ static inline int tile_flags(const void *W, const void *S, int cols, const float *x,
                                      unsigned pf) {
  int flags = 0;
  if (((uintptr_t)W & 15) == 0 && TF::rowbytes(cols) % 16 == 0) flags |= TILE_WVEC;
  if (((uintptr_t)x & 15) == 0 && cols % 4 == 0) flags |= TILE_XVEC;
  if (TF::scaled && ((uintptr_t)S & 7) == 0 && (cols / 32) % 8 == 0) flags |= TILE_SVEC;
  return flags | (int)((pf / TILE_PF_UNIT) << TILE_PF_SHIFT);
}

/* blocks per SM the register bound leaves room for, by stages (the shared
 * memory then decides: about 11, 17 and 35 KB a block for MXFP4); the wide
 * form's 32 to 44 KB leave room for 5 or fewer, so all the registers its
 * unrolled chunk wants (under more blocks' bound it spilled) */
static constexpr int tile_minb(int ns, int g, int rb, int nw = 1) {
  return rb <= 256 && g == 2 && nw == 4 ? 5 /* 20 warps: 96 registers, none spilled */
                                        : ((rb > 256 ? 4 : g >= 2 ? 8 : ns <= 2 ? 16 : ns == 3 ? 12 : 4) + nw - 1) / nw;
}

/* G threads a row (1, 2 or 4): TR = 32 / G rows a warp; thread lane owns row
 * lane % TR of its warp's and its lanes g * LPT ..., g = lane / TR, LPT =
 * 16 / G. NW warps a block: warp w has rows (blk * NW + w) * TR ...; each
 * stages its own rows' weights, and all of the block's threads stage x, so
 * with NW > 1 a chunk is in when every thread's copies are, a block barrier
 * apart. blk is the block's place in its matrix: blockIdx.x for one
 * matrix, less the matrix's first block in a grouped launch. */
template <class TF, int NS, int G, int NW = 1>
__device__ __forceinline__ static void tile_run(const uint8_t *W, const uint8_t *S, int rows,
                                                int cols, const float *x, float *y,
                                                const float *rowscale, int flags, long blk) {
  constexpr int PPR = TF::RB / 16, NG = TF::CK / 32, TR = TROWS / G, LPT = LANES / G;
  typedef tile_stage<TF, G, NW> SG;
  typename SG::w *wt;
  typename SG::x *xt;
  typename SG::s *st;
  if constexpr (NW == 1) {
    __shared__ __align__(16) typename SG::w wt1[NS];
    __shared__ __align__(16) typename SG::x xt1[NS];
    __shared__ __align__(16) typename SG::s st1[NS];
    wt = wt1, xt = xt1, st = st1;
  } else { /* over the 48 KB a block's static arrays may take */
    DF_DYN_SHARED(uint8_t, tile_dyn);
    xt = (typename SG::x *)tile_dyn;
    wt = (typename SG::w *)(tile_dyn + NS * sizeof(typename SG::x));
    st = (typename SG::s *)(tile_dyn + NS * (sizeof(typename SG::x) + sizeof(typename SG::w)));
  }
  constexpr int NT = NW * TROWS;
  const int tid = threadIdx.x, lane = tid % TROWS, row = lane % TR, g = lane / TR;
  const int wp = tid / TROWS;
  const long r0 = (blk * NW + wp) * TR;
  const int nr = rows - r0 < TR ? (int)(rows - r0) : TR;
  const bool live = row < nr;
  const size_t rb = TF::rowbytes(cols), sb = (size_t)cols / 32;
  const int nch = (cols + TF::CK - 1) / TF::CK;
  /* The fused form's table of n for magnitudes 0..3 (e2m1_lut_of's lo),
   * made from cols (never negative) so that ptxas cannot fold it to a
   * constant: as a constant it was made again before each lookup (a move
   * from a uniform register, prmt taking no constant there), 4.66
   * instructions a code in the fused loop; held in a register, 4.41
   * (docs/PERFORMANCE.md, runs 49-50). */
  const uint32_t lut_lo = 0x03020100u | ((uint32_t)cols >> 31);

  /* The copies' addresses, computed once a thread (recomputed a copy they
   * were 1.2 of the 7.5 instructions a code: docs/PERFORMANCE.md, run 35):
   * a stage's and a chunk's only move them by a constant.
   * Weights: 16-byte piece wpp of rows wrr, wrr + WRI, ... (WRI rows an
   * iteration of the warp's 32 threads). */
  constexpr int WRI = TROWS / PPR, WIT = TR / WRI;
  const int wrr = lane / PPR, wpp = lane % PPR;
  const sh_addr w_sh = sh_of(&wt[0][wp][0][0]) + (uint32_t)(wrr * (TF::RB + 16) + wpp * 16);
  const uint8_t *w_g = W + (size_t)(r0 + wrr) * rb + wpp * 16;
  const uint32_t w_rs = (uint32_t)(WRI * rb); /* a row's bytes are far below 4 GB */
  /* MXFP4's scales: 8-byte piece spp of rows srr, srr + SRI, ... */
  constexpr int SP = NG / 8 > 0 ? NG / 8 : 1, SRI = TROWS / SP, SIT = (TR + SRI - 1) / SRI;
  constexpr int SROW = TF::scaled ? NG : 8;
  const int srr = lane / SP, spp = lane % SP;
  const sh_addr s_sh = sh_of(&st[0][wp][0][0]) + (uint32_t)(srr * SROW + spp * 8);
  const uint8_t *s_g = TF::scaled ? S + (size_t)(r0 + srr) * sb + spp * 8 : S;
  /* x: 16-byte piece tid, tid + NT, ... */
  constexpr int XIT = (TF::CK / 4 + NT - 1) / NT;
  const sh_addr x_sh = sh_of(&xt[0][0]) + (uint32_t)tid * 16u;

  /* chunk k of every live row's weights (and scales) into stage buf */
  auto stage_w = [&](int k, int buf) {
    size_t off = (size_t)k * TF::RB;
    int rbk = rb - off < (size_t)TF::RB ? (int)(rb - off) : TF::RB;
    if (flags & TILE_WVEC) {
      const int np = rbk >> 4;
      const uint8_t *g = w_g + off;
      const sh_addr sa = w_sh + (uint32_t)buf * (uint32_t)sizeof(typename SG::w);
      if (nr == TR && np == PPR) { /* every row, a whole chunk: no test a copy */
#pragma unroll
        for (int it = 0; it < WIT; it++, g += w_rs)
          cp_async<16>(sa + (uint32_t)(it * WRI * (TF::RB + 16)), g);
      } else {
#pragma unroll
        for (int it = 0; it < WIT; it++, g += w_rs)
          if (wrr + it * WRI < nr && wpp < np) cp_async<16>(sa + (uint32_t)(it * WRI * (TF::RB + 16)), g);
      }
    } else {
      const uint8_t *wb = W + (size_t)r0 * rb + off;
      for (int i = lane; i < nr * rbk; i += TROWS) {
        int rr = i / rbk, b = i % rbk;
        wt[buf][wp][rr][b] = wb[(size_t)rr * rb + b];
      }
    }
    if constexpr (TF::scaled != 0) {
      int c0 = k * TF::CK, nx = cols - c0 < TF::CK ? cols - c0 : TF::CK;
      if (flags & TILE_SVEC) { /* 8 scales a piece: a short last chunk has fewer pieces */
        const int np = nx / 256;
        const uint8_t *g = s_g + (size_t)k * NG;
        const sh_addr sa = s_sh + (uint32_t)buf * (uint32_t)sizeof(typename SG::s);
#pragma unroll
        for (int it = 0; it < SIT; it++)
          if (srr + it * SRI < nr && spp < np)
            cp_async<8>(sa + (uint32_t)(it * SRI * SROW), g + (size_t)(it * SRI) * sb);
      } else {
        const uint8_t *sbase = S + (size_t)r0 * sb + (size_t)k * NG;
        int ng = nx / 32;
        for (int i = lane; i < nr * ng; i += TROWS) {
          int rr = i / ng, gi = i % ng;
          st[buf][wp][rr][gi] = sbase[(size_t)rr * sb + gi];
        }
      }
    }
  };
  /* chunk k of x into stage buf: by cp.async, or (now) by plain loads */
  auto stage_x = [&](int k, int buf, bool now) {
    int c0 = k * TF::CK, nx = cols - c0 < TF::CK ? cols - c0 : TF::CK;
    if ((flags & TILE_XVEC) && !now) {
      const sh_addr sa = x_sh + (uint32_t)buf * (uint32_t)sizeof(typename SG::x);
      if (nx == TF::CK && (TF::CK / 4) % NT == 0) {
#pragma unroll
        for (int it = 0; it < XIT; it++)
          cp_async<16>(sa + (uint32_t)(it * NT * 16), x + c0 + 4 * (tid + it * NT));
      } else {
#pragma unroll
        for (int it = 0; it < XIT; it++)
          if (tid + it * NT < nx / 4)
            cp_async<16>(sa + (uint32_t)(it * NT * 16), x + c0 + 4 * (tid + it * NT));
      }
    } else if (flags & TILE_XVEC) {
      for (int i = tid; i < nx / 4; i += NT)
        *(float4 *)&xt[buf][4 * i] = *(const float4 *)(x + c0 + 4 * i);
    } else {
      for (int i = tid; i < nx; i += NT) xt[buf][i] = x[c0 + i];
    }
  };

  float acc[LPT];
#pragma unroll
  for (int j = 0; j < LPT; j++) acc[j] = 0.0f;

  /* the L2 prefetch: thread g == 0 of each row asks for its row's bytes a
   * window ahead of the stages (the first two at the start, the next each
   * time the stages enter one), so the memory sees runs of pfw consecutive
   * bytes a row; the stages then read them from L2 */
  const uint32_t pfw = (uint32_t)(flags >> TILE_PF_SHIFT) * TILE_PF_UNIT;
  const bool pfon = pfw && (flags & TILE_WVEC) && live && g == 0;
  const uint8_t *prow = W + (size_t)(r0 + row) * rb;
  auto prefetch = [&](size_t from) {
    if (from < rb) l2_prefetch(prow + from, (uint32_t)(rb - from < pfw ? rb - from : pfw));
  };
  if (pfon) prefetch(0), prefetch(pfw);
  if (flags & TILE_DEP) {
    /* The first stages' weights before pdl_wait (kcuda_pdl.cuh: no kernel
     * writes them), a group each as in the loop, so they are on the way
     * while the kernel before this one ends; their x after it, by plain
     * loads (a later group would hold chunk 0 back until every first stage
     * had landed), whose latency the weights' own covers. */
#pragma unroll
    for (int k = 0; k < NS - 1; k++) {
      if (k < nch) stage_w(k, k);
      cp_async_commit();
    }
    pdl_wait();
#pragma unroll
    for (int k = 0; k < NS - 1; k++)
      if (k < nch) stage_x(k, k, true);
  } else {
    pdl_wait(); /* a no-op outside a dependent launch: every thread still waits once */
#pragma unroll
    for (int k = 0; k < NS - 1; k++) {
      if (k < nch) stage_w(k, k), stage_x(k, k, false);
      cp_async_commit();
    }
  }
  for (int k = 0; k < nch; k++) {
    cp_async_wait<NS - 2>();
    int buf = k % NS, n = cols - k * TF::CK < TF::CK ? cols - k * TF::CK : TF::CK;
    /* MXFP4's fused form on a whole chunk staged by 16-byte pieces: each
     * thread's own pieces made x' (its copies are in for it), the barrier
     * then makes them everyone's and says whether all were (fok) */
    bool fz = false, fok = false;
    if constexpr (TF::fmt == 3) fz = (flags & (TILE_FMA | TILE_XVEC)) == (TILE_FMA | TILE_XVEC) && n == TF::CK;
    const bool xin = fz && tile_xscale<TF::CK, NT>(xt[buf], tid);
    /* chunk k is in for every thread, and stage (k - 1) % NS is read */
    if constexpr (NW > 1) {
      if constexpr (TF::fmt == 3) fok = __syncthreads_and(xin);
      else __syncthreads();
    } else {
      __syncwarp();
      if (fz) fok = __all_sync(0xffffffffu, xin);
    }
    if (k + NS - 1 < nch) {
      size_t at = (size_t)(k + NS - 1) * TF::RB;
      if (pfon && at % pfw < TF::RB) prefetch(at / pfw * pfw + pfw);
      stage_w(k + NS - 1, (k + NS - 1) % NS);
      stage_x(k + NS - 1, (k + NS - 1) % NS, false);
    }
    cp_async_commit();
    if (!live) continue;
    const uint8_t *w = wt[buf][wp][row];
    const float *xs = xt[buf];
    /* a whole chunk: its units 8 at a time (MXFP4: with the 8 scales they
     * use, one a unit) */
    constexpr int NU = TF::CK / TF::UC, UB = NU < 8 ? NU : 8;
    if (n == TF::CK) {
#pragma unroll
      for (int u0 = 0; u0 < NU; u0 += UB) {
        if constexpr (TF::fmt == 3) {
          /* MXFP4: the fused form where it may go, unrolled; elsewhere a
           * unit at a time, so the kernel's code and registers are the
           * fused form's (with both unrolled, a MoE layer's token was 5%
           * slower: docs/PERFORMANCE.md, runs 41-42). Where chunk k was
           * staged for it, x from global memory, as the shared copy may be
           * part x'. */
          const uint2 sv = *(const uint2 *)&st[buf][wp][row][u0];
          if (fok && tile_fused_s(sv)) {
            const uint2 mw = tile_fused_mw(sv);
#pragma unroll
            for (int u = 0; u < UB; u++) TF::template unit_fma<LPT>(w, u0 + u, tile_fused_m(mw, u), xs, acc, g, lut_lo);
          } else {
            const float *xu = fz ? x + (size_t)k * TF::CK : xs;
#pragma unroll 1
            for (int u = 0; u < UB; u++)
              TF::template unit<LPT>(w, u0 + u, ((u < 4 ? sv.x : sv.y) >> (8 * (u & 3))) & 0xffu, xu,
                                     acc, g);
          }
        } else {
#pragma unroll
          for (int u = 0; u < UB; u++) TF::template unit<LPT>(w, u0 + u, 0u, xs, acc, g);
        }
      }
    } else {
      int nu = n / TF::UC, c = nu * TF::UC + g * LPT;
      for (int u = 0; u < nu; u++)
        TF::template unit<LPT>(w, u, TF::scaled ? (uint32_t)st[buf][wp][row][u] : 0u, xs, acc, g);
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

template <class TF, int NS, int G = 1, int NW = 1>
__global__ void __launch_bounds__(NW *TROWS, tile_minb(NS, G, TF::RB, NW))
    tile_k(const uint8_t *W, const uint8_t *S, int rows, int cols, const float *x, float *y,
           const float *rowscale, int flags) {
  pdl_trigger();
  tile_run<TF, NS, G, NW>(W, S, rows, cols, x, y, rowscale, flags, (long)blockIdx.x);
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
template <class TF, int NS, int G = 1, int NW = 1>
__global__ void __launch_bounds__(NW *TROWS, tile_minb(NS, G, TF::RB, NW))
    tile_group_k(const __grid_constant__ tile_set q) {
  pdl_trigger();
  /* the block's matrix: the last whose first block is at or before it (b0
   * ascending), found by halving, so a block of a 32-matrix gate+up reads
   * 5 entries of the table, not up to 31 in a chain, before its first copy */
  long b = (long)blockIdx.x;
  int lo = 0, hi = q.n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (q.m[mid].b0 <= b) lo = mid;
    else hi = mid - 1;
  }
  const tile_one &m = q.m[lo];
  tile_run<TF, NS, G, NW>(m.W, m.S, m.rows, m.cols, m.x, m.y, m.rs, m.flags, b - m.b0);
}

#endif

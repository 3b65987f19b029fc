/* AVX-512 kernels (F + BW + VL). They keep the pinned lane-16 order of
 * kernels.h exactly: one 16-lane register is the 16 accumulators, every
 * product is a separate multiply then add (never FMA), ragged tails use
 * masked loads and a masked add so lanes that receive no element keep their
 * value bit for bit (a +0 added to a -0 lane would flip its sign), and the
 * final combine adds the upper half onto the lower at widths 8, 4, 2, 1 as
 * the scalar tree does. So this table equals the scalar one bit for bit.
 *
 * Speed comes from independent accumulator chains, not from a different
 * order: a GEMV works on 4 rows at once (MXFP4: 8), a GEMM on 4 rows x 4
 * vectors, and MXFP4 codes become weights with one table permute per 16
 * (the E2M1 table times the group scale, an exact product, as the scalar
 * code forms it; see the MXFP4 section). DF_AVX512_NO_VBMI=1 in the
 * environment keeps the MXFP4 code expansion to AVX-512 F/BW even where the
 * CPU has VBMI (the unit test runs both).
 *
 * Compiled with per-function target attributes so the rest of the build
 * stays baseline x86-64; the table is only handed out when the CPU (and OS)
 * support AVX-512 F/BW/VL. Elementwise functions built on expf/tanhf keep
 * the scalar code: a vector exp would not match libm bit for bit, and they
 * are a negligible share of a token's time. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#include "kernels/kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
#define AI static inline __attribute__((always_inline)) TGT
/* The row/vector block loops have constant trip counts after inlining;
 * unrolled, their accumulators live in registers. */
#define UNROLL _Pragma("GCC unroll 8")

#define RB 4 /* rows per block */
#define NB 4 /* vectors per block */

/* The lane-16 tree: acc[j] += acc[j+8], +4, +2, +1. */
AI float hsum16(__m512 v) {
  __m256 lo = _mm512_castps512_ps256(v);
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

AI __mmask16 tail_mask(int n) { return (__mmask16)((1u << n) - 1u); }

enum { K_BF16, K_I8, K_F32 };

/* 16 weights from column i of a row as exact fp32. */
AI __m512 wload(int K, const void *w, size_t i) {
  if (K == K_BF16) {
    __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  }
  if (K == K_I8)
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)((const int8_t *)w + i))));
  return _mm512_loadu_ps((const float *)w + i);
}
AI __m512 wload_m(int K, const void *w, size_t i, __mmask16 m) {
  if (K == K_BF16) {
    __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  }
  if (K == K_I8)
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, (const int8_t *)w + i)));
  return _mm512_maskz_loadu_ps(m, (const float *)w + i);
}
AI size_t esize(int K) { return K == K_BF16 ? 2 : K == K_I8 ? 1 : 4; }

/* rb rows from r, nb vectors from t0; rb, nb are constants after inlining. */
AI void dense_blk(int K, const void *W, const float *scale, int cols, int r, int rb, int r0,
                  const float *X, size_t ldx, int t0, int nb, float *Y, size_t ldy) {
  __m512 acc[RB][NB];
  const char *wr[RB];
  UNROLL
  for (int a = 0; a < rb; a++) {
    wr[a] = (const char *)W + (size_t)(r + a) * (size_t)cols * esize(K);
    UNROLL
    for (int t = 0; t < nb; t++) acc[a][t] = _mm512_setzero_ps();
  }
  int i = 0;
  for (; i + 16 <= cols; i += 16) {
    __m512 x[NB];
    UNROLL
    for (int t = 0; t < nb; t++) x[t] = _mm512_loadu_ps(X + (size_t)(t0 + t) * ldx + i);
    UNROLL
    for (int a = 0; a < rb; a++) {
      __m512 w = wload(K, wr[a], (size_t)i);
      UNROLL
      for (int t = 0; t < nb; t++) acc[a][t] = _mm512_add_ps(acc[a][t], _mm512_mul_ps(w, x[t]));
    }
  }
  if (i < cols) {
    __mmask16 m = tail_mask(cols - i);
    __m512 x[NB];
    UNROLL
    for (int t = 0; t < nb; t++) x[t] = _mm512_maskz_loadu_ps(m, X + (size_t)(t0 + t) * ldx + i);
    UNROLL
    for (int a = 0; a < rb; a++) {
      __m512 w = wload_m(K, wr[a], (size_t)i, m);
      UNROLL
      for (int t = 0; t < nb; t++)
        acc[a][t] = _mm512_mask_add_ps(acc[a][t], m, acc[a][t], _mm512_mul_ps(w, x[t]));
    }
  }
  UNROLL
  for (int a = 0; a < rb; a++)
    UNROLL
    for (int t = 0; t < nb; t++) {
      float s = hsum16(acc[a][t]);
      if (K == K_I8) s = s * scale[r + a];
      Y[(size_t)(t0 + t) * ldy + (size_t)(r + a - r0)] = s;
    }
}

/* Vectors are tiled so a tile of X stays in L2 while the rows stream past. */
AI int x_tile(int cols) {
  int tt = 65536 / (cols > 0 ? cols : 1);
  tt &= ~(NB - 1);
  return tt < NB ? NB : tt;
}

#define DENSE_ROWS(K, nb)                                                                       \
  do {                                                                                          \
    int r = r0;                                                                                 \
    for (; r + RB <= r1; r += RB) dense_blk(K, W, scale, cols, r, RB, r0, X, ldx, t, nb, Y, ldy); \
    for (; r < r1; r++) dense_blk(K, W, scale, cols, r, 1, r0, X, ldx, t, nb, Y, ldy);          \
  } while (0)

AI void dense(int K, const void *W, const float *scale, int cols, int r0, int r1, const float *X,
              int T, size_t ldx, float *Y, size_t ldy) {
  int tt = x_tile(cols);
  for (int tb = 0; tb < T; tb += tt) {
    int te = tb + tt < T ? tb + tt : T;
    int t = tb;
    for (; t + NB <= te; t += NB) DENSE_ROWS(K, NB);
    switch (te - t) {
    case 3: DENSE_ROWS(K, 3); break;
    case 2: DENSE_ROWS(K, 2); break;
    case 1: DENSE_ROWS(K, 1); break;
    default: break;
    }
  }
}

TGT static void gemm_bf16_v(const uint16_t *W, int cols, int r0, int r1, const float *X, int T,
                            size_t ldx, float *Y, size_t ldy) {
  dense(K_BF16, W, NULL, cols, r0, r1, X, T, ldx, Y, ldy);
}
TGT static void gemm_i8_v(const int8_t *W, const float *scale, int cols, int r0, int r1,
                          const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  dense(K_I8, W, scale, cols, r0, r1, X, T, ldx, Y, ldy);
}
TGT static void gemm_f32_v(const float *W, int cols, int r0, int r1, const float *X, int T,
                           size_t ldx, float *Y, size_t ldy) {
  dense(K_F32, W, NULL, cols, r0, r1, X, T, ldx, Y, ldy);
}

/* ---- MXFP4 ----
 *
 * A weight is E2M1(code) * 2^(s-127), an exact product. mx_tab holds that
 * product for every scale byte s and code (256 x 16 floats, 16 KiB, formed
 * once with the same float multiply the scalar code does), so a group's 32
 * weights are two vpermps of its table row by 16 code indices each, with no
 * per-group multiply or scale conversion.
 *
 * vpermps reads only bits 3..0 of each 32-bit lane, so each lane needs its
 * column's code (low nibble = even column) at the bottom; the bits above
 * may be anything (mx_idx). The one-vector GEMV is bound by vector issue
 * (per group and row: 2 index ops, 2 permutes, 2 multiplies, 2 adds), so it
 * uses the cheapest index: a broadcast and one shift, which yields the lanes
 * in the order pi (lane 2q = column q, lane 2q+1 = column q + 8). x is
 * copied into the same order once per call, the accumulators then hold the
 * lane-16 sums in order pi and are put back in natural order (one permute
 * per row) before the usual combine tree: same products, same additions.
 *
 * GEMV (T <= NB) converts the codes of MRB rows once per group, shares the
 * x loads between them and prefetches each row's codes ahead; GEMM (T > NB)
 * dequantises a block of RB rows once into a stack buffer and runs the fp32
 * block kernel on it for all vectors of the x tile, so conversion is paid
 * per row block, not per 4 vectors. Rows wider than MXDQ use the direct
 * blocks in natural lane order. Either way every weight and product is the
 * scalar one, added in the lane-16 order. */

#define MRB 8                     /* rows per block, MXFP4 GEMV (one vector) */
#define MRB_OF(nb) ((nb) == 1 ? MRB : 4) /* 4 rows x nb vectors: accumulators stay in registers */
#define MXDQ 4096  /* widest row dequantised for the GEMM path (RB rows on the stack) */

static float mx_tab[256][16] __attribute__((aligned(64)));

static void mx_tab_init(void) {
  for (int s = 0; s < 256; s++) {
    float f = df_ke8m0((uint8_t)s);
    for (int k = 0; k < 16; k++) mx_tab[s][k] = df_kern_e2m1[k] * f;
  }
}

AI int64_t ld64(const uint8_t *p) {
  int64_t v;
  __builtin_memcpy(&v, p, 8);
  return v;
}

/* Index-building constants: VBMI multishift control (qword q: byte 0 from
 * bit 8q, byte 4 from bit 8q + 4), or the vpshufb control (lane j <- byte
 * j/2 of its 128-bit lane, which holds the 8 bytes) and per-lane shifts. */
typedef struct {
  __m512i a, b;
} mx_ctl;

AI mx_ctl mx_ctl_make(int VB) {
  mx_ctl c;
  if (VB == 2) {
    c.a = _mm512_set_epi64(28, 24, 20, 16, 12, 8, 4, 0);
    c.b = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0); /* pi -> natural */
  } else if (VB == 1) {
    c.a = _mm512_set_epi64(0x3C00000038ll, 0x3400000030ll, 0x2C00000028ll, 0x2400000020ll,
                           0x1C00000018ll, 0x1400000010ll, 0x0C00000008ll, 0x0400000000ll);
    c.b = _mm512_setzero_si512();
  } else {
    c.a = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    c.b = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
  }
  return c;
}

/* 16 code indices for the columns packed in p[0..7]. VB = 2: lane order
 * pi (lane 2q = column q, lane 2q+1 = column q + 8): every qword holds the 8
 * bytes and is shifted right by 4q, which puts nibble q at bit 0 and nibble
 * q + 8 at bit 32; a shift, not a shuffle, so only the table permute uses
 * the shuffle unit. VB = 1: natural order by VBMI vpmultishiftqb (lane j's
 * low byte from bit 4j; inline asm, its 8 bytes broadcast by the
 * instruction itself, so this file needs no VBMI target attribute: the path
 * only runs where the CPU reports VBMI). VB = 0: natural order by vpshufb
 * (byte j/2 to lane j) and a variable shift dropping odd lanes' low nibble. */
AI __m512i mx_idx(int VB, const uint8_t *p, mx_ctl c) {
  if (VB == 1) {
    __m512i r;
    __asm__("vpmultishiftqb %1%{1to8%}, %2, %0" : "=v"(r) : "m"(*(const uint8_t(*)[8])p), "v"(c.a));
    return r;
  }
  __m512i q = _mm512_set1_epi64(ld64(p));
  if (VB == 2) return _mm512_srlv_epi64(q, c.a);
  return _mm512_srlv_epi32(_mm512_shuffle_epi8(q, c.a), c.b);
}

/* rb rows from r (GEMV and small T): codes converted per group, shared by
 * nb vectors. */
AI void mx_blk(int VB, const uint8_t *packed, const uint8_t *scales, int cols, int r, int rb,
                int r0, const float *X, size_t ldx, int t0, int nb, float *Y, size_t ldy,
                mx_ctl ctl) {
  int ng = cols / 32;
  __m512 acc[MRB][NB];
  const uint8_t *pr[MRB], *sr[MRB];
  UNROLL
  for (int a = 0; a < rb; a++) {
    pr[a] = packed + (size_t)(r + a) * (size_t)(cols / 2);
    sr[a] = scales + (size_t)(r + a) * (size_t)ng;
    UNROLL
    for (int t = 0; t < nb; t++) acc[a][t] = _mm512_setzero_ps();
  }
  /* Prefetch one whole block ahead: row a fetches the same columns of row
   * a + rb (and row 0 the next block's scales, which are contiguous), so
   * every line of the next block, its rows' first bytes included, is asked
   * for while this one computes. A fixed distance within the row instead
   * left each row's first bytes to the hardware prefetcher, which missed
   * them more often at 1792-byte rows (w1/w3) than at 1536 (w2). Past the
   * matrix's end a prefetch never faults. */
  const size_t pfd = (size_t)rb * (size_t)(cols / 2), pfs = (size_t)rb * (size_t)ng;
  for (int g = 0; g < ng; g++) {
    if ((g & 3) == 0) {
      UNROLL
      for (int a = 0; a < rb; a++) _mm_prefetch((const char *)(pr[a] + (size_t)g * 16 + pfd), _MM_HINT_T0);
      if (((g * rb) & 63) < 4 * rb) _mm_prefetch((const char *)(sr[0] + (size_t)g * (size_t)rb + pfs), _MM_HINT_T0);
    }
    __m512 x0[NB], x1[NB];
    UNROLL
    for (int t = 0; t < nb; t++) {
      const float *x = X + (size_t)(t0 + t) * ldx + (size_t)g * 32;
      x0[t] = _mm512_loadu_ps(x);
      x1[t] = _mm512_loadu_ps(x + 16);
    }
    UNROLL
    for (int a = 0; a < rb; a++) {
      const uint8_t *p = pr[a] + (size_t)g * 16;
      __m512 tab = _mm512_load_ps(mx_tab[sr[a][g]]);
      __m512 w0 = _mm512_permutexvar_ps(mx_idx(VB, p, ctl), tab);
      __m512 w1 = _mm512_permutexvar_ps(mx_idx(VB, p + 8, ctl), tab);
      UNROLL
      for (int t = 0; t < nb; t++) acc[a][t] = _mm512_add_ps(acc[a][t], _mm512_mul_ps(w0, x0[t]));
      UNROLL
      for (int t = 0; t < nb; t++) acc[a][t] = _mm512_add_ps(acc[a][t], _mm512_mul_ps(w1, x1[t]));
    }
  }
  UNROLL
  for (int a = 0; a < rb; a++)
    UNROLL
    for (int t = 0; t < nb; t++) {
      __m512 v = acc[a][t];
      if (VB == 2) v = _mm512_permutexvar_ps(ctl.b, v); /* lanes back in natural order */
      Y[(size_t)(t0 + t) * ldy + (size_t)(r + a - r0)] = hsum16(v);
    }
}

/* rb rows from r as fp32 into buf[rb][cols]. */
AI void mx_dequant(int VB, const uint8_t *packed, const uint8_t *scales, int cols, int r, int rb,
                    float *buf, mx_ctl ctl) {
  int ng = cols / 32;
  for (int a = 0; a < rb; a++) {
    const uint8_t *p = packed + (size_t)(r + a) * (size_t)(cols / 2);
    const uint8_t *s = scales + (size_t)(r + a) * (size_t)ng;
    float *o = buf + (size_t)a * (size_t)cols;
    for (int g = 0; g < ng; g++) {
      __m512 tab = _mm512_load_ps(mx_tab[s[g]]);
      _mm512_store_ps(o + 32 * g, _mm512_permutexvar_ps(mx_idx(VB, p + 16 * g, ctl), tab));
      _mm512_store_ps(o + 32 * g + 16, _mm512_permutexvar_ps(mx_idx(VB, p + 16 * g + 8, ctl), tab));
    }
  }
}

#define MX_ROWS(nb)                                                                              \
  do {                                                                                           \
    int r = r0;                                                                                  \
    for (; r + MRB_OF(nb) <= r1; r += MRB_OF(nb))                                                \
      mx_blk(VB, packed, scales, cols, r, MRB_OF(nb), r0, X, ldx, t, nb, Y, ldy, ctl);           \
    for (; r < r1; r++) mx_blk(VB, packed, scales, cols, r, 1, r0, X, ldx, t, nb, Y, ldy, ctl);  \
  } while (0)

/* All vectors of [tb, te) against rb dequantised rows in buf. */
#define DQ_VECS(rb)                                                                              \
  do {                                                                                           \
    float *Yr = Y + (size_t)(r - r0);                                                            \
    int t = tb;                                                                                  \
    for (; t + NB <= te; t += NB) dense_blk(K_F32, buf, NULL, cols, 0, rb, 0, X, ldx, t, NB, Yr, ldy); \
    switch (te - t) {                                                                            \
    case 3: dense_blk(K_F32, buf, NULL, cols, 0, rb, 0, X, ldx, t, 3, Yr, ldy); break;           \
    case 2: dense_blk(K_F32, buf, NULL, cols, 0, rb, 0, X, ldx, t, 2, Yr, ldy); break;           \
    case 1: dense_blk(K_F32, buf, NULL, cols, 0, rb, 0, X, ldx, t, 1, Yr, ldy); break;           \
    default: break;                                                                              \
    }                                                                                            \
  } while (0)

AI void mx_gemv_pi(const uint8_t *packed, const uint8_t *scales, int cols, int r0, int r1,
                   const float *X, int T, float *Y, size_t ldy) {
  const int VB = 2;
  mx_ctl ctl = mx_ctl_make(VB);
  size_t ldx = (size_t)cols;
  int t = 0;
  switch (T) {
  case 4: MX_ROWS(4); break;
  case 3: MX_ROWS(3); break;
  case 2: MX_ROWS(2); break;
  case 1: MX_ROWS(1); break;
  default: break;
  }
}

AI void mx_gemm(int VB, const uint8_t *packed, const uint8_t *scales, int cols, int r0, int r1,
                 const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  if (T <= NB && cols <= MXDQ) {
    /* GEMV: x in lane order pi, codes expanded by a shift */
    float xp[NB * MXDQ] __attribute__((aligned(64)));
    const __m512i pi = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
    for (int t = 0; t < T; t++)
      for (int c = 0; c < cols; c += 16)
        _mm512_store_ps(xp + (size_t)t * (size_t)cols + c,
                        _mm512_permutexvar_ps(pi, _mm512_loadu_ps(X + (size_t)t * ldx + c)));
    mx_gemv_pi(packed, scales, cols, r0, r1, xp, T, Y, ldy);
    return;
  }
  mx_ctl ctl = mx_ctl_make(VB);
  int tt = x_tile(cols);
  if (T > NB && cols <= MXDQ) {
    float buf[RB * MXDQ] __attribute__((aligned(64)));
    for (int tb = 0; tb < T; tb += tt) {
      int te = tb + tt < T ? tb + tt : T;
      int r = r0;
      for (; r + RB <= r1; r += RB) {
        mx_dequant(VB, packed, scales, cols, r, RB, buf, ctl);
        DQ_VECS(RB);
      }
      for (; r < r1; r++) {
        mx_dequant(VB, packed, scales, cols, r, 1, buf, ctl);
        DQ_VECS(1);
      }
    }
    return;
  }
  for (int tb = 0; tb < T; tb += tt) {
    int te = tb + tt < T ? tb + tt : T;
    int t = tb;
    for (; t + NB <= te; t += NB) MX_ROWS(NB);
    switch (te - t) {
    case 3: MX_ROWS(3); break;
    case 2: MX_ROWS(2); break;
    case 1: MX_ROWS(1); break;
    default: break;
    }
  }
}

TGT static void gemm_mxfp4_vbmi(const uint8_t *packed, const uint8_t *scales, int cols, int r0,
                                 int r1, const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  mx_gemm(1, packed, scales, cols, r0, r1, X, T, ldx, Y, ldy);
}
TGT static void gemm_mxfp4_v(const uint8_t *packed, const uint8_t *scales, int cols, int r0,
                             int r1, const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  mx_gemm(0, packed, scales, cols, r0, r1, X, T, ldx, Y, ldy);
}

/* ---- transposed GEMV: y[c] = sum_r W[r][c] x_r, r ascending, per c ---- */

AI void gemv_t(int K, const void *W, const float *scale, int cols, int r0, int r1,
               const float *x, float *y) {
  for (int c = 0; c < cols; c++) y[c] = 0.0f;
  int r = r0;
  for (; r < r1; r += RB) {
    int n = r1 - r < RB ? r1 - r : RB;
    __m512 xr[RB];
    const char *wr[RB];
    for (int a = 0; a < n; a++) {
      float s = x[r + a - r0];
      if (K == K_I8) s = scale[r + a] * s;
      xr[a] = _mm512_set1_ps(s);
      wr[a] = (const char *)W + (size_t)(r + a) * (size_t)cols * esize(K);
    }
    int c = 0;
    for (; c + 16 <= cols; c += 16) {
      __m512 acc = _mm512_loadu_ps(y + c);
      for (int a = 0; a < n; a++) acc = _mm512_add_ps(acc, _mm512_mul_ps(wload(K, wr[a], (size_t)c), xr[a]));
      _mm512_storeu_ps(y + c, acc);
    }
    if (c < cols) {
      __mmask16 m = tail_mask(cols - c);
      __m512 acc = _mm512_maskz_loadu_ps(m, y + c);
      for (int a = 0; a < n; a++)
        acc = _mm512_add_ps(acc, _mm512_mul_ps(wload_m(K, wr[a], (size_t)c, m), xr[a]));
      _mm512_mask_storeu_ps(y + c, m, acc);
    }
  }
}

TGT static void gemv_t_bf16_v(const uint16_t *W, int cols, int r0, int r1, const float *x, float *y) {
  gemv_t(K_BF16, W, NULL, cols, r0, r1, x, y);
}
TGT static void gemv_t_i8_v(const int8_t *W, const float *scale, int cols, int r0, int r1,
                            const float *x, float *y) {
  gemv_t(K_I8, W, scale, cols, r0, r1, x, y);
}

/* ---- vectors ---- */

TGT static float dot_v(const float *a, const float *b, int n) {
  __m512 acc = _mm512_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16)
    acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  if (i < n) {
    __mmask16 m = tail_mask(n - i);
    __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i));
    acc = _mm512_mask_add_ps(acc, m, acc, p);
  }
  return hsum16(acc);
}

TGT static void rmsnorm_v(float *y, const float *x, const float *w, int n, float eps) {
  float ss = dot_v(x, x, n);
  float inv = 1.0f / sqrtf(ss / (float)n + eps);
  __m512 vi = _mm512_set1_ps(inv);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 t = _mm512_mul_ps(_mm512_loadu_ps(x + i), vi);
    if (w) t = _mm512_mul_ps(t, _mm512_loadu_ps(w + i));
    _mm512_storeu_ps(y + i, t);
  }
  if (i < n) {
    __mmask16 m = tail_mask(n - i);
    __m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vi);
    if (w) t = _mm512_mul_ps(t, _mm512_maskz_loadu_ps(m, w + i));
    _mm512_mask_storeu_ps(y + i, m, t);
  }
}

/* ---- KDA step, vectorised over the value index j (each u[j], o[j] still
 * sums over the key index i in ascending order) ---- */

#define KV 4 /* value vectors per pass */

AI void kda_cols(float *S, const float *q, const float *k, const float *v, const float *alpha,
                 float beta, float *o, int D, int j0, int nv, __mmask16 last) {
  __m512 u[KV], ov[KV];
  for (int b = 0; b < nv; b++) u[b] = _mm512_setzero_ps();
  for (int i = 0; i < D; i++) {
    float *row = S + (size_t)i * D + j0;
    __m512 a = _mm512_set1_ps(alpha[i]), ki = _mm512_set1_ps(k[i]);
    for (int b = 0; b < nv; b++) {
      __mmask16 m = b == nv - 1 ? last : (__mmask16)0xFFFF;
      __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + 16 * b), a);
      _mm512_mask_storeu_ps(row + 16 * b, m, s);
      u[b] = _mm512_add_ps(u[b], _mm512_mul_ps(s, ki));
    }
  }
  __m512 vb = _mm512_set1_ps(beta);
  for (int b = 0; b < nv; b++) {
    __mmask16 m = b == nv - 1 ? last : (__mmask16)0xFFFF;
    u[b] = _mm512_mul_ps(vb, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, v + j0 + 16 * b), u[b]));
    ov[b] = _mm512_setzero_ps();
  }
  for (int i = 0; i < D; i++) {
    float *row = S + (size_t)i * D + j0;
    __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
    for (int b = 0; b < nv; b++) {
      __mmask16 m = b == nv - 1 ? last : (__mmask16)0xFFFF;
      __m512 s = _mm512_add_ps(_mm512_maskz_loadu_ps(m, row + 16 * b), _mm512_mul_ps(ki, u[b]));
      _mm512_mask_storeu_ps(row + 16 * b, m, s);
      ov[b] = _mm512_add_ps(ov[b], _mm512_mul_ps(s, qi));
    }
  }
  for (int b = 0; b < nv; b++) {
    __mmask16 m = b == nv - 1 ? last : (__mmask16)0xFFFF;
    _mm512_mask_storeu_ps(o + j0 + 16 * b, m, ov[b]);
  }
}

TGT static void kda_step_v(float *S, const float *q, const float *k, const float *v,
                           const float *alpha, float beta, float *o, float *scratch, int D) {
  (void)scratch;
  int j = 0;
  for (; j + 16 * KV <= D; j += 16 * KV) kda_cols(S, q, k, v, alpha, beta, o, D, j, KV, 0xFFFF);
  while (j < D) {
    int n = D - j < 16 ? D - j : 16;
    kda_cols(S, q, k, v, alpha, beta, o, D, j, 1, tail_mask(n));
    j += n;
  }
}

static df_kern avx512_table;
static int avx512_ok;
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;

static void avx512_init(void) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl"))
    return;
  avx512_table = *df_kern_scalar();
  avx512_table.name = "avx512";
  avx512_table.gemm_bf16 = gemm_bf16_v;
  avx512_table.gemm_i8 = gemm_i8_v;
  avx512_table.gemm_f32 = gemm_f32_v;
  mx_tab_init();
  avx512_table.gemm_mxfp4 = gemm_mxfp4_v;
  if (__builtin_cpu_supports("avx512vbmi") && !getenv("DF_AVX512_NO_VBMI")) avx512_table.gemm_mxfp4 = gemm_mxfp4_vbmi;
  avx512_table.gemv_t_bf16 = gemv_t_bf16_v;
  avx512_table.gemv_t_i8 = gemv_t_i8_v;
  avx512_table.dot = dot_v;
  avx512_table.rmsnorm = rmsnorm_v;
  avx512_table.kda_step = kda_step_v;
  avx512_ok = 1;
}

const df_kern *df_kern_avx512(void) {
  pthread_once(&avx512_once, avx512_init);
  return avx512_ok ? &avx512_table : NULL;
}

#else
const df_kern *df_kern_avx512(void) { return NULL; }
#endif

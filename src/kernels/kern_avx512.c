/* AVX-512 kernels (F + BW + VL). They keep the pinned lane-16 order of
 * kernels.h exactly: one 16-lane register is the 16 accumulators, every
 * product is a separate multiply then add (never FMA), ragged tails use
 * masked loads and a masked add so lanes that receive no element keep their
 * value bit for bit (a +0 added to a -0 lane would flip its sign), and the
 * final combine adds the upper half onto the lower at widths 8, 4, 2, 1 as
 * the scalar tree does. So this table equals the scalar one bit for bit.
 *
 * Speed comes from independent accumulator chains, not from a different
 * order: a GEMV works on 4 rows at once, a GEMM on 4 rows x 4 vectors, and
 * MXFP4 codes become weights with one table permute (the 16-entry E2M1 table
 * times the group scale, an exact product, as the scalar code forms it).
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

/* ---- MXFP4 ---- */

/* The 32 weights of one group, columns 0..15 in w[0] and 16..31 in w[1].
 * Byte b holds column 2b (low nibble) and 2b+1 (high nibble); interleaving
 * the bytes with themselves shifted right by 4 puts each column's code in
 * the low 4 bits of its own byte, and vpermps only reads those 4 bits. The
 * table is the E2M1 table times the group scale (exact, as the scalar code
 * forms each weight). */
AI void mx_group(const uint8_t *p, const float *scale, __m512 lut, __m512 w[2]) {
  __m512 tab = _mm512_mul_ps(lut, _mm512_set1_ps(*scale));
  __m128i b = _mm_loadu_si128((const __m128i *)p);
  __m128i bh = _mm_srli_epi16(b, 4);
  w[0] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, bh)), tab);
  w[1] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(b, bh)), tab);
}

/* 16 E8M0 scale bytes (n valid) -> the floats df_ke8m0 gives (s = 0 is
 * 2^-127), converted together instead of one by one in the inner loop. */
AI void e8m0x16(const uint8_t *s, int n, float *out) {
  __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8((__mmask16)((1u << n) - 1u), s));
  __m512i f = _mm512_slli_epi32(v, 23);
  f = _mm512_mask_mov_epi32(f, _mm512_cmpeq_epi32_mask(v, _mm512_setzero_si512()),
                            _mm512_set1_epi32(0x00400000));
  _mm512_storeu_si512((void *)out, f);
}

AI void mx_blk(const uint8_t *packed, const uint8_t *scales, int cols, int r, int rb, int r0,
               const float *X, size_t ldx, int t0, int nb, float *Y, size_t ldy, __m512 lut) {
  int ng = cols / 32;
  __m512 acc[RB][NB];
  const uint8_t *pr[RB], *sr[RB];
  float sc[RB][16] __attribute__((aligned(64)));
  UNROLL
  for (int a = 0; a < rb; a++) {
    pr[a] = packed + (size_t)(r + a) * (size_t)(cols / 2);
    sr[a] = scales + (size_t)(r + a) * (size_t)ng;
    UNROLL
    for (int t = 0; t < nb; t++) acc[a][t] = _mm512_setzero_ps();
  }
  for (int g0 = 0; g0 < ng; g0 += 16) {
    int n16 = ng - g0 < 16 ? ng - g0 : 16;
    UNROLL
    for (int a = 0; a < rb; a++) e8m0x16(sr[a] + g0, n16, sc[a]);
    for (int g = g0; g < g0 + n16; g++) {
      __m512 x0[NB], x1[NB];
      UNROLL
      for (int t = 0; t < nb; t++) {
        const float *x = X + (size_t)(t0 + t) * ldx + (size_t)g * 32;
        x0[t] = _mm512_loadu_ps(x);
        x1[t] = _mm512_loadu_ps(x + 16);
      }
      UNROLL
      for (int a = 0; a < rb; a++) {
        __m512 w[2];
        mx_group(pr[a] + (size_t)g * 16, &sc[a][g - g0], lut, w);
        UNROLL
        for (int t = 0; t < nb; t++) acc[a][t] = _mm512_add_ps(acc[a][t], _mm512_mul_ps(w[0], x0[t]));
        UNROLL
        for (int t = 0; t < nb; t++) acc[a][t] = _mm512_add_ps(acc[a][t], _mm512_mul_ps(w[1], x1[t]));
      }
    }
  }
  UNROLL
  for (int a = 0; a < rb; a++)
    UNROLL
    for (int t = 0; t < nb; t++) Y[(size_t)(t0 + t) * ldy + (size_t)(r + a - r0)] = hsum16(acc[a][t]);
}

#define MX_ROWS(nb)                                                                              \
  do {                                                                                           \
    int r = r0;                                                                                  \
    for (; r + RB <= r1; r += RB) mx_blk(packed, scales, cols, r, RB, r0, X, ldx, t, nb, Y, ldy, lut); \
    for (; r < r1; r++) mx_blk(packed, scales, cols, r, 1, r0, X, ldx, t, nb, Y, ldy, lut);      \
  } while (0)

TGT static void gemm_mxfp4_v(const uint8_t *packed, const uint8_t *scales, int cols, int r0,
                             int r1, const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  __m512 lut = _mm512_loadu_ps(df_kern_e2m1);
  int tt = x_tile(cols);
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
  avx512_table.gemm_mxfp4 = gemm_mxfp4_v;
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

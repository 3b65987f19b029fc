/* AVX2 kernels. The 16 lane-16 accumulators of kernels.h are two 8-lane
 * registers (lanes 0..7 and 8..15); products are a separate multiply then
 * add (FMA is never used), ragged tails are read through a zero-padded copy
 * and added with a blend so lanes that receive no element keep their value
 * bit for bit, and the combine adds 8..15 onto 0..7, then halves of 4, 2, 1,
 * as the scalar tree does. So this table equals the scalar one bit for bit.
 *
 * Independent chains come from several rows (GEMV: 4 rows) or rows x
 * vectors (GEMM: 2 x 2) per pass; with 16 registers that is what fits.
 * MXFP4: a code's magnitude comes from an 8-entry table (times the group
 * scale, exact) by vpermps, its sign bit (code bit 3) is xor-ed in; this is
 * the same value the scalar table lookup times the scale gives, -0 included.
 *
 * Per-function target attributes keep the rest of the build baseline; the
 * table is only handed out when the CPU supports AVX2. Elementwise functions
 * built on expf/tanhf stay scalar (see kern_avx512.c). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#include "kernels/kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#define TGT __attribute__((target("avx2,f16c")))
#define AI static inline __attribute__((always_inline)) TGT
/* The row/vector block loops have constant trip counts after inlining;
 * unrolled, their accumulators live in registers. */
#define UNROLL _Pragma("GCC unroll 8")

typedef struct {
  __m256 lo, hi;
} v16;

AI v16 v16_zero(void) { return (v16){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
AI v16 v16_load(const float *p) { return (v16){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
AI v16 v16_muladd(v16 acc, v16 w, v16 x) {
  acc.lo = _mm256_add_ps(acc.lo, _mm256_mul_ps(w.lo, x.lo));
  acc.hi = _mm256_add_ps(acc.hi, _mm256_mul_ps(w.hi, x.hi));
  return acc;
}
/* Adds w*x only in lanes selected by m (sign bits). */
AI v16 v16_muladd_m(v16 acc, v16 w, v16 x, v16 m) {
  acc.lo = _mm256_blendv_ps(acc.lo, _mm256_add_ps(acc.lo, _mm256_mul_ps(w.lo, x.lo)), m.lo);
  acc.hi = _mm256_blendv_ps(acc.hi, _mm256_add_ps(acc.hi, _mm256_mul_ps(w.hi, x.hi)), m.hi);
  return acc;
}
AI v16 v16_mask(int n) {
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i nn = _mm256_set1_epi32(n);
  __m256i lo = _mm256_cmpgt_epi32(nn, idx);
  __m256i hi = _mm256_cmpgt_epi32(nn, _mm256_add_epi32(idx, _mm256_set1_epi32(8)));
  return (v16){_mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi)};
}

/* The lane-16 tree: acc[j] += acc[j+8], +4, +2, +1. */
AI float hsum16(v16 v) {
  __m256 s8 = _mm256_add_ps(v.lo, v.hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

enum { K_BF16, K_I8, K_F32 };
AI size_t esize(int K) { return K == K_BF16 ? 2 : K == K_I8 ? 1 : 4; }

AI __m256 bf8(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
AI __m256 i8x8(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)); }

/* 16 weights at column i as exact fp32 (all 16 must be readable). */
AI v16 wload(int K, const void *w, size_t i) {
  if (K == K_BF16) {
    const uint16_t *p = (const uint16_t *)w + i;
    return (v16){bf8(_mm_loadu_si128((const __m128i *)p)), bf8(_mm_loadu_si128((const __m128i *)(p + 8)))};
  }
  if (K == K_I8) {
    __m128i b = _mm_loadu_si128((const __m128i *)((const int8_t *)w + i));
    return (v16){i8x8(b), i8x8(_mm_srli_si128(b, 8))};
  }
  return v16_load((const float *)w + i);
}
/* n < 16 weights at column i, zero padded (never reads past them). */
AI v16 wload_n(int K, const void *w, size_t i, int n) {
  if (K == K_BF16) {
    uint16_t b[16] = {0};
    memcpy(b, (const uint16_t *)w + i, (size_t)n * 2);
    return wload(K, b, 0);
  }
  if (K == K_I8) {
    int8_t b[16] = {0};
    memcpy(b, (const int8_t *)w + i, (size_t)n);
    return wload(K, b, 0);
  }
  float b[16] = {0};
  memcpy(b, (const float *)w + i, (size_t)n * 4);
  return v16_load(b);
}
AI v16 xload_n(const float *x, int n) {
  float b[16] = {0};
  memcpy(b, x, (size_t)n * 4);
  return v16_load(b);
}

#define MR 4 /* array bounds; the blocks used are 4 x 1 (GEMV) and 2 x 2 */
#define MN 2

AI void dense_blk(int K, const void *W, const float *scale, int cols, int r, int rb, int r0,
                  const float *X, size_t ldx, int t0, int nb, float *Y, size_t ldy) {
  v16 acc[MR][MN];
  const char *wr[MR];
  UNROLL
  for (int a = 0; a < rb; a++) {
    wr[a] = (const char *)W + (size_t)(r + a) * (size_t)cols * esize(K);
    UNROLL
    for (int t = 0; t < nb; t++) acc[a][t] = v16_zero();
  }
  int i = 0;
  for (; i + 16 <= cols; i += 16) {
    v16 x[MN];
    UNROLL
    for (int t = 0; t < nb; t++) x[t] = v16_load(X + (size_t)(t0 + t) * ldx + i);
    UNROLL
    for (int a = 0; a < rb; a++) {
      v16 w = wload(K, wr[a], (size_t)i);
      UNROLL
      for (int t = 0; t < nb; t++) acc[a][t] = v16_muladd(acc[a][t], w, x[t]);
    }
  }
  if (i < cols) {
    int n = cols - i;
    v16 m = v16_mask(n);
    v16 x[MN];
    UNROLL
    for (int t = 0; t < nb; t++) x[t] = xload_n(X + (size_t)(t0 + t) * ldx + i, n);
    UNROLL
    for (int a = 0; a < rb; a++) {
      v16 w = wload_n(K, wr[a], (size_t)i, n);
      UNROLL
      for (int t = 0; t < nb; t++) acc[a][t] = v16_muladd_m(acc[a][t], w, x[t], m);
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

AI int x_tile(int cols) {
  int tt = 65536 / (cols > 0 ? cols : 1);
  tt &= ~1;
  return tt < 2 ? 2 : tt;
}

AI void dense(int K, const void *W, const float *scale, int cols, int r0, int r1, const float *X,
              int T, size_t ldx, float *Y, size_t ldy) {
  if (T == 1) {
    int r = r0;
    for (; r + 4 <= r1; r += 4) dense_blk(K, W, scale, cols, r, 4, r0, X, ldx, 0, 1, Y, ldy);
    for (; r < r1; r++) dense_blk(K, W, scale, cols, r, 1, r0, X, ldx, 0, 1, Y, ldy);
    return;
  }
  int tt = x_tile(cols);
  for (int tb = 0; tb < T; tb += tt) {
    int te = tb + tt < T ? tb + tt : T;
    int r = r0;
    for (; r + 2 <= r1; r += 2) {
      int t = tb;
      for (; t + 2 <= te; t += 2) dense_blk(K, W, scale, cols, r, 2, r0, X, ldx, t, 2, Y, ldy);
      if (t < te) dense_blk(K, W, scale, cols, r, 2, r0, X, ldx, t, 1, Y, ldy);
    }
    for (; r < r1; r++) {
      int t = tb;
      for (; t + 2 <= te; t += 2) dense_blk(K, W, scale, cols, r, 1, r0, X, ldx, t, 2, Y, ldy);
      if (t < te) dense_blk(K, W, scale, cols, r, 1, r0, X, ldx, t, 1, Y, ldy);
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

/* Magnitudes of E2M1 codes 0..7; code bit 3 is the sign. */
static const float e2m1_mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

AI __m256 mx8(__m128i codes, __m256 tab) {
  __m256i idx = _mm256_cvtepu8_epi32(codes);
  __m256i sign = _mm256_and_si256(_mm256_slli_epi32(idx, 28), _mm256_set1_epi32((int)0x80000000u));
  return _mm256_xor_ps(_mm256_permutevar8x32_ps(tab, idx), _mm256_castsi256_ps(sign));
}

/* Columns 0..15 of a group in w[0], 16..31 in w[1]. Interleaving the bytes
 * with themselves shifted right by 4 gives each column's code in the low 4
 * bits of its own byte (upper bits are ignored below). */
AI void mx_group(const uint8_t *p, uint8_t sc, __m256 mag, v16 w[2]) {
  __m256 tab = _mm256_mul_ps(mag, _mm256_set1_ps(df_ke8m0(sc)));
  __m128i b = _mm_loadu_si128((const __m128i *)p);
  __m128i bh = _mm_srli_epi16(b, 4);
  __m128i c0 = _mm_unpacklo_epi8(b, bh), c1 = _mm_unpackhi_epi8(b, bh);
  w[0].lo = mx8(c0, tab);
  w[0].hi = mx8(_mm_srli_si128(c0, 8), tab);
  w[1].lo = mx8(c1, tab);
  w[1].hi = mx8(_mm_srli_si128(c1, 8), tab);
}

AI void mx_blk(const uint8_t *packed, const uint8_t *scales, int cols, int r, int rb, int r0,
               const float *X, size_t ldx, int t0, int nb, float *Y, size_t ldy, __m256 mag) {
  int ng = cols / 32;
  v16 acc[MR][MN];
  const uint8_t *pr[MR], *sr[MR];
  UNROLL
  for (int a = 0; a < rb; a++) {
    pr[a] = packed + (size_t)(r + a) * (size_t)(cols / 2);
    sr[a] = scales + (size_t)(r + a) * (size_t)ng;
    UNROLL
    for (int t = 0; t < nb; t++) acc[a][t] = v16_zero();
  }
  for (int g = 0; g < ng; g++) {
    UNROLL
    for (int a = 0; a < rb; a++) {
      v16 w[2];
      mx_group(pr[a] + (size_t)g * 16, sr[a][g], mag, w);
      UNROLL
      for (int t = 0; t < nb; t++) {
        const float *x = X + (size_t)(t0 + t) * ldx + (size_t)g * 32;
        acc[a][t] = v16_muladd(acc[a][t], w[0], v16_load(x));
        acc[a][t] = v16_muladd(acc[a][t], w[1], v16_load(x + 16));
      }
    }
  }
  UNROLL
  for (int a = 0; a < rb; a++)
    UNROLL
    for (int t = 0; t < nb; t++) Y[(size_t)(t0 + t) * ldy + (size_t)(r + a - r0)] = hsum16(acc[a][t]);
}

TGT static void gemm_mxfp4_v(const uint8_t *packed, const uint8_t *scales, int cols, int r0,
                             int r1, const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  __m256 mag = _mm256_loadu_ps(e2m1_mag);
  if (T == 1) {
    int r = r0;
    for (; r + 4 <= r1; r += 4) mx_blk(packed, scales, cols, r, 4, r0, X, ldx, 0, 1, Y, ldy, mag);
    for (; r < r1; r++) mx_blk(packed, scales, cols, r, 1, r0, X, ldx, 0, 1, Y, ldy, mag);
    return;
  }
  int tt = x_tile(cols);
  for (int tb = 0; tb < T; tb += tt) {
    int te = tb + tt < T ? tb + tt : T;
    int r = r0;
    for (; r + 2 <= r1; r += 2) {
      int t = tb;
      for (; t + 2 <= te; t += 2) mx_blk(packed, scales, cols, r, 2, r0, X, ldx, t, 2, Y, ldy, mag);
      if (t < te) mx_blk(packed, scales, cols, r, 2, r0, X, ldx, t, 1, Y, ldy, mag);
    }
    for (; r < r1; r++) {
      int t = tb;
      for (; t + 2 <= te; t += 2) mx_blk(packed, scales, cols, r, 1, r0, X, ldx, t, 2, Y, ldy, mag);
      if (t < te) mx_blk(packed, scales, cols, r, 1, r0, X, ldx, t, 1, Y, ldy, mag);
    }
  }
}

/* ---- transposed GEMV: y[c] = sum_r W[r][c] x_r, r ascending, per c ---- */

AI __m256 w8(int K, const char *w, size_t c) {
  if (K == K_BF16) return bf8(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + c)));
  if (K == K_I8) return i8x8(_mm_loadl_epi64((const __m128i *)((const int8_t *)w + c)));
  return _mm256_loadu_ps((const float *)w + c);
}

AI void gemv_t(int K, const void *W, const float *scale, int cols, int r0, int r1,
               const float *x, float *y) {
  for (int c = 0; c < cols; c++) y[c] = 0.0f;
  for (int r = r0; r < r1; r += 4) {
    int n = r1 - r < 4 ? r1 - r : 4;
    __m256 xr[4];
    float xs[4];
    const char *wr[4];
    for (int a = 0; a < n; a++) {
      float s = x[r + a - r0];
      if (K == K_I8) s = scale[r + a] * s;
      xs[a] = s;
      xr[a] = _mm256_set1_ps(s);
      wr[a] = (const char *)W + (size_t)(r + a) * (size_t)cols * esize(K);
    }
    int c = 0;
    for (; c + 8 <= cols; c += 8) {
      __m256 acc = _mm256_loadu_ps(y + c);
      for (int a = 0; a < n; a++) acc = _mm256_add_ps(acc, _mm256_mul_ps(w8(K, wr[a], (size_t)c), xr[a]));
      _mm256_storeu_ps(y + c, acc);
    }
    for (; c < cols; c++)
      for (int a = 0; a < n; a++) {
        float wv = K == K_BF16 ? df_kbf16(((const uint16_t *)wr[a])[c])
                   : K == K_I8 ? (float)((const int8_t *)wr[a])[c]
                               : ((const float *)wr[a])[c];
        float p = wv * xs[a];
        y[c] += p;
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
  v16 acc = v16_zero();
  int i = 0;
  for (; i + 16 <= n; i += 16) acc = v16_muladd(acc, v16_load(a + i), v16_load(b + i));
  if (i < n) acc = v16_muladd_m(acc, xload_n(a + i, n - i), xload_n(b + i, n - i), v16_mask(n - i));
  return hsum16(acc);
}

TGT static void rmsnorm_v(float *y, const float *x, const float *w, int n, float eps) {
  float ss = dot_v(x, x, n);
  float inv = 1.0f / sqrtf(ss / (float)n + eps);
  __m256 vi = _mm256_set1_ps(inv);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 t = _mm256_mul_ps(_mm256_loadu_ps(x + i), vi);
    if (w) t = _mm256_mul_ps(t, _mm256_loadu_ps(w + i));
    _mm256_storeu_ps(y + i, t);
  }
  for (; i < n; i++) {
    float t = x[i] * inv;
    if (w) t = t * w[i];
    y[i] = t;
  }
}

/* ---- KDA step: vectorised over the value index j, 8 at a time ---- */

TGT static void kda_step_v(float *S, const float *q, const float *k, const float *v,
                           const float *alpha, float beta, float *o, float *scratch, int D) {
  float *u = scratch;
  int j = 0;
  /* 4 registers of j per pass keep 4 independent add chains */
  for (; j + 32 <= D; j += 32) {
    __m256 acc[4];
    for (int b = 0; b < 4; b++) acc[b] = _mm256_setzero_ps();
    for (int i = 0; i < D; i++) {
      float *row = S + (size_t)i * D + j;
      __m256 a = _mm256_set1_ps(alpha[i]), ki = _mm256_set1_ps(k[i]);
      for (int b = 0; b < 4; b++) {
        __m256 s = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * b), a);
        _mm256_storeu_ps(row + 8 * b, s);
        acc[b] = _mm256_add_ps(acc[b], _mm256_mul_ps(s, ki));
      }
    }
    for (int b = 0; b < 4; b++) _mm256_storeu_ps(u + j + 8 * b, acc[b]);
  }
  for (; j < D; j++) {
    float acc = 0.0f;
    for (int i = 0; i < D; i++) {
      float *s = S + (size_t)i * D + j;
      *s *= alpha[i];
      float p = *s * k[i];
      acc += p;
    }
    u[j] = acc;
  }
  for (j = 0; j < D; j++) u[j] = beta * (v[j] - u[j]);
  j = 0;
  for (; j + 32 <= D; j += 32) {
    __m256 acc[4], uv[4];
    for (int b = 0; b < 4; b++) {
      acc[b] = _mm256_setzero_ps();
      uv[b] = _mm256_loadu_ps(u + j + 8 * b);
    }
    for (int i = 0; i < D; i++) {
      float *row = S + (size_t)i * D + j;
      __m256 ki = _mm256_set1_ps(k[i]), qi = _mm256_set1_ps(q[i]);
      for (int b = 0; b < 4; b++) {
        __m256 s = _mm256_add_ps(_mm256_loadu_ps(row + 8 * b), _mm256_mul_ps(ki, uv[b]));
        _mm256_storeu_ps(row + 8 * b, s);
        acc[b] = _mm256_add_ps(acc[b], _mm256_mul_ps(s, qi));
      }
    }
    for (int b = 0; b < 4; b++) _mm256_storeu_ps(o + j + 8 * b, acc[b]);
  }
  for (; j < D; j++) {
    float acc = 0.0f;
    for (int i = 0; i < D; i++) {
      float *s = S + (size_t)i * D + j;
      float p = k[i] * u[j];
      *s += p;
      float r = *s * q[i];
      acc += r;
    }
    o[j] = acc;
  }
}

static df_kern avx2_table;
static int avx2_ok;
static pthread_once_t avx2_once = PTHREAD_ONCE_INIT;

static void avx2_init(void) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2")) return;
  avx2_table = *df_kern_scalar();
  avx2_table.name = "avx2";
  avx2_table.gemm_bf16 = gemm_bf16_v;
  avx2_table.gemm_i8 = gemm_i8_v;
  avx2_table.gemm_f32 = gemm_f32_v;
  avx2_table.gemm_mxfp4 = gemm_mxfp4_v;
  avx2_table.gemv_t_bf16 = gemv_t_bf16_v;
  avx2_table.gemv_t_i8 = gemv_t_i8_v;
  avx2_table.dot = dot_v;
  avx2_table.rmsnorm = rmsnorm_v;
  avx2_table.kda_step = kda_step_v;
  avx2_ok = 1;
}

const df_kern *df_kern_avx2(void) {
  pthread_once(&avx2_once, avx2_init);
  return avx2_ok ? &avx2_table : NULL;
}

#else
const df_kern *df_kern_avx2(void) { return NULL; }
#endif

/* NEON kernels (aarch64 only; elsewhere df_kern_neon() is NULL). The 16
 * lane-16 accumulators of kernels.h are four 4-lane registers (lanes 0..3,
 * 4..7, 8..11, 12..15); every product is a separate vmulq then vaddq (never
 * vfmaq), ragged tails go through a zero-padded copy and a bit-select add so
 * lanes that receive no element keep their value, and the combine adds lanes
 * 8..15 onto 0..7, then 4, 2, 1, as the scalar tree does: this table equals
 * the scalar one bit for bit.
 *
 * MXFP4: the code's magnitude x 2 is an integer (0,1,2,3,4,6,8,12) taken with
 * a byte table lookup, converted to fp32 and multiplied by scale/2 (both
 * exact: a small integer times a power of two), then the code's sign bit is
 * set, so -0 codes stay -0 exactly as the scalar table gives them.
 *
 * Not testable on the x86 build machines; test_kernels_simd runs it against
 * the scalar table wherever it is built (an ARM CI runner). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#include "kernels/kernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

typedef struct {
  float32x4_t v[4];
} v16;

static inline v16 v16_zero(void) {
  v16 r;
  for (int i = 0; i < 4; i++) r.v[i] = vdupq_n_f32(0.0f);
  return r;
}
static inline v16 v16_load(const float *p) {
  v16 r;
  for (int i = 0; i < 4; i++) r.v[i] = vld1q_f32(p + 4 * i);
  return r;
}
static inline v16 v16_muladd(v16 acc, v16 w, v16 x) {
  for (int i = 0; i < 4; i++) acc.v[i] = vaddq_f32(acc.v[i], vmulq_f32(w.v[i], x.v[i]));
  return acc;
}
static inline v16 v16_muladd_n(v16 acc, v16 w, v16 x, int n) {
  for (int i = 0; i < 4; i++) {
    int32x4_t idx = {4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3};
    uint32x4_t m = vcltq_s32(idx, vdupq_n_s32(n));
    acc.v[i] = vbslq_f32(m, vaddq_f32(acc.v[i], vmulq_f32(w.v[i], x.v[i])), acc.v[i]);
  }
  return acc;
}
/* The lane-16 tree: acc[j] += acc[j+8], +4, +2, +1. */
static inline float hsum16(v16 a) {
  float32x4_t s0 = vaddq_f32(a.v[0], a.v[2]), s1 = vaddq_f32(a.v[1], a.v[3]); /* width 8 */
  float32x4_t s4 = vaddq_f32(s0, s1);                                        /* width 4 */
  float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));           /* width 2 */
  return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);                       /* width 1 */
}

enum { K_BF16, K_I8, K_F32 };

static inline v16 wconv(int K, const void *w) {
  v16 r;
  if (K == K_BF16) {
    uint16x8_t a = vld1q_u16((const uint16_t *)w), b = vld1q_u16((const uint16_t *)w + 8);
    r.v[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(a), 16));
    r.v[1] = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(a), 16));
    r.v[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16));
    r.v[3] = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(b), 16));
  } else if (K == K_I8) {
    int8x16_t q = vld1q_s8((const int8_t *)w);
    int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
    r.v[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    r.v[1] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo)));
    r.v[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    r.v[3] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi)));
  } else {
    r = v16_load((const float *)w);
  }
  return r;
}
static inline size_t esize(int K) { return K == K_BF16 ? 2 : K == K_I8 ? 1 : 4; }
static inline v16 wload_n(int K, const void *w, int n) {
  uint8_t b[64] = {0};
  memcpy(b, w, (size_t)n * esize(K));
  return wconv(K, b);
}
static inline v16 xload_n(const float *x, int n) {
  float b[16] = {0};
  memcpy(b, x, (size_t)n * 4);
  return v16_load(b);
}

static inline void dense_blk(int K, const void *W, const float *scale, int cols, int r, int rb,
                             int r0, const float *X, size_t ldx, int t0, int nb, float *Y,
                             size_t ldy) {
  v16 acc[2][2];
  const char *wr[2];
  for (int a = 0; a < rb; a++) {
    wr[a] = (const char *)W + (size_t)(r + a) * (size_t)cols * esize(K);
    for (int t = 0; t < nb; t++) acc[a][t] = v16_zero();
  }
  int i = 0;
  for (; i + 16 <= cols; i += 16) {
    v16 x[2];
    for (int t = 0; t < nb; t++) x[t] = v16_load(X + (size_t)(t0 + t) * ldx + i);
    for (int a = 0; a < rb; a++) {
      v16 w = wconv(K, wr[a] + (size_t)i * esize(K));
      for (int t = 0; t < nb; t++) acc[a][t] = v16_muladd(acc[a][t], w, x[t]);
    }
  }
  if (i < cols) {
    int n = cols - i;
    v16 x[2];
    for (int t = 0; t < nb; t++) x[t] = xload_n(X + (size_t)(t0 + t) * ldx + i, n);
    for (int a = 0; a < rb; a++) {
      v16 w = wload_n(K, wr[a] + (size_t)i * esize(K), n);
      for (int t = 0; t < nb; t++) acc[a][t] = v16_muladd_n(acc[a][t], w, x[t], n);
    }
  }
  for (int a = 0; a < rb; a++)
    for (int t = 0; t < nb; t++) {
      float s = hsum16(acc[a][t]);
      if (K == K_I8) s = s * scale[r + a];
      Y[(size_t)(t0 + t) * ldy + (size_t)(r + a - r0)] = s;
    }
}

static inline void dense(int K, const void *W, const float *scale, int cols, int r0, int r1,
                         const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  int r = r0;
  for (; r + 2 <= r1; r += 2) {
    int t = 0;
    for (; t + 2 <= T; t += 2) dense_blk(K, W, scale, cols, r, 2, r0, X, ldx, t, 2, Y, ldy);
    if (t < T) dense_blk(K, W, scale, cols, r, 2, r0, X, ldx, t, 1, Y, ldy);
  }
  for (; r < r1; r++) {
    int t = 0;
    for (; t + 2 <= T; t += 2) dense_blk(K, W, scale, cols, r, 1, r0, X, ldx, t, 2, Y, ldy);
    if (t < T) dense_blk(K, W, scale, cols, r, 1, r0, X, ldx, t, 1, Y, ldy);
  }
}

static void gemm_bf16_n(const uint16_t *W, int cols, int r0, int r1, const float *X, int T,
                        size_t ldx, float *Y, size_t ldy) {
  dense(K_BF16, W, NULL, cols, r0, r1, X, T, ldx, Y, ldy);
}
static void gemm_i8_n(const int8_t *W, const float *scale, int cols, int r0, int r1,
                      const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  dense(K_I8, W, scale, cols, r0, r1, X, T, ldx, Y, ldy);
}
static void gemm_f32_n(const float *W, int cols, int r0, int r1, const float *X, int T,
                       size_t ldx, float *Y, size_t ldy) {
  dense(K_F32, W, NULL, cols, r0, r1, X, T, ldx, Y, ldy);
}

/* 2 x |E2M1| for codes 0..15 (bit 3, the sign, is applied separately). */
static const uint8_t mag2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12};

/* 4 weights from 4 codes (bytes, low 4 bits significant). */
static inline float32x4_t mx4(uint8x8_t codes4, uint8x16_t tab, float32x4_t half_scale) {
  uint8x8_t c = vand_u8(codes4, vdup_n_u8(15));
  uint8x8_t m = vqtbl1_u8(tab, c);
  uint32x4_t mi = vmovl_u16(vget_low_u16(vmovl_u8(m)));
  float32x4_t w = vmulq_f32(vcvtq_f32_u32(mi), half_scale);
  uint32x4_t ci = vmovl_u16(vget_low_u16(vmovl_u8(c)));
  uint32x4_t sign = vshlq_n_u32(vshrq_n_u32(ci, 3), 31);
  return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(w), sign));
}

static void gemm_mxfp4_n(const uint8_t *packed, const uint8_t *scales, int cols, int r0, int r1,
                         const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  int ng = cols / 32;
  uint8x16_t tab = vld1q_u8(mag2);
  for (int r = r0; r < r1; r++) {
    const uint8_t *p = packed + (size_t)r * (size_t)(cols / 2);
    const uint8_t *sc = scales + (size_t)r * (size_t)ng;
    for (int t0 = 0; t0 < T; t0 += 2) {
      int nb = T - t0 < 2 ? T - t0 : 2;
      v16 acc[2] = {v16_zero(), v16_zero()};
      for (int g = 0; g < ng; g++) {
        /* scale / 2 is exact except for s = 0 (2^-127 -> 2^-128, still exact
         * as a subnormal) */
        float32x4_t hs = vdupq_n_f32(df_ke8m0(sc[g]) * 0.5f);
        uint8x16_t b = vld1q_u8(p + (size_t)g * 16);
        uint8x16x2_t z = vzipq_u8(b, vshrq_n_u8(b, 4)); /* column order */
        v16 w[2];
        for (int h = 0; h < 2; h++) {
          uint8x16_t c = z.val[h];
          w[h].v[0] = mx4(vget_low_u8(c), tab, hs);
          w[h].v[1] = mx4(vext_u8(vget_low_u8(c), vget_low_u8(c), 4), tab, hs);
          w[h].v[2] = mx4(vget_high_u8(c), tab, hs);
          w[h].v[3] = mx4(vext_u8(vget_high_u8(c), vget_high_u8(c), 4), tab, hs);
        }
        for (int t = 0; t < nb; t++) {
          const float *x = X + (size_t)(t0 + t) * ldx + (size_t)g * 32;
          acc[t] = v16_muladd(acc[t], w[0], v16_load(x));
          acc[t] = v16_muladd(acc[t], w[1], v16_load(x + 16));
        }
      }
      for (int t = 0; t < nb; t++) Y[(size_t)(t0 + t) * ldy + (size_t)(r - r0)] = hsum16(acc[t]);
    }
  }
}

static void gemv_t(int K, const void *W, const float *scale, int cols, int r0, int r1,
                   const float *x, float *y) {
  for (int c = 0; c < cols; c++) y[c] = 0.0f;
  for (int r = r0; r < r1; r++) {
    const char *w = (const char *)W + (size_t)r * (size_t)cols * esize(K);
    float s = x[r - r0];
    if (K == K_I8) s = scale[r] * s;
    float32x4_t xs = vdupq_n_f32(s);
    int c = 0;
    for (; c + 16 <= cols; c += 16) {
      v16 wv = wconv(K, w + (size_t)c * esize(K));
      for (int i = 0; i < 4; i++)
        vst1q_f32(y + c + 4 * i, vaddq_f32(vld1q_f32(y + c + 4 * i), vmulq_f32(wv.v[i], xs)));
    }
    for (; c < cols; c++) {
      float wv = K == K_BF16 ? df_kbf16(((const uint16_t *)w)[c])
                 : K == K_I8 ? (float)((const int8_t *)w)[c]
                             : ((const float *)w)[c];
      float p = wv * s;
      y[c] += p;
    }
  }
}
static void gemv_t_bf16_n(const uint16_t *W, int cols, int r0, int r1, const float *x, float *y) {
  gemv_t(K_BF16, W, NULL, cols, r0, r1, x, y);
}
static void gemv_t_i8_n(const int8_t *W, const float *scale, int cols, int r0, int r1,
                        const float *x, float *y) {
  gemv_t(K_I8, W, scale, cols, r0, r1, x, y);
}

static float dot_n(const float *a, const float *b, int n) {
  v16 acc = v16_zero();
  int i = 0;
  for (; i + 16 <= n; i += 16) acc = v16_muladd(acc, v16_load(a + i), v16_load(b + i));
  if (i < n) acc = v16_muladd_n(acc, xload_n(a + i, n - i), xload_n(b + i, n - i), n - i);
  return hsum16(acc);
}

static void rmsnorm_n(float *y, const float *x, const float *w, int n, float eps) {
  float ss = dot_n(x, x, n);
  float inv = 1.0f / sqrtf(ss / (float)n + eps);
  float32x4_t vi = vdupq_n_f32(inv);
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    float32x4_t t = vmulq_f32(vld1q_f32(x + i), vi);
    if (w) t = vmulq_f32(t, vld1q_f32(w + i));
    vst1q_f32(y + i, t);
  }
  for (; i < n; i++) {
    float t = x[i] * inv;
    if (w) t = t * w[i];
    y[i] = t;
  }
}

static void kda_step_n(float *S, const float *q, const float *k, const float *v,
                       const float *alpha, float beta, float *o, float *scratch, int D) {
  float *u = scratch;
  for (int j = 0; j < D; j++) u[j] = 0.0f;
  for (int i = 0; i < D; i++) {
    float *row = S + (size_t)i * D;
    float32x4_t a = vdupq_n_f32(alpha[i]), ki = vdupq_n_f32(k[i]);
    int j = 0;
    for (; j + 4 <= D; j += 4) {
      float32x4_t s = vmulq_f32(vld1q_f32(row + j), a);
      vst1q_f32(row + j, s);
      vst1q_f32(u + j, vaddq_f32(vld1q_f32(u + j), vmulq_f32(s, ki)));
    }
    for (; j < D; j++) {
      row[j] *= alpha[i];
      float p = row[j] * k[i];
      u[j] += p;
    }
  }
  for (int j = 0; j < D; j++) u[j] = beta * (v[j] - u[j]);
  for (int j = 0; j < D; j++) o[j] = 0.0f;
  for (int i = 0; i < D; i++) {
    float *row = S + (size_t)i * D;
    float32x4_t ki = vdupq_n_f32(k[i]), qi = vdupq_n_f32(q[i]);
    int j = 0;
    for (; j + 4 <= D; j += 4) {
      float32x4_t s = vaddq_f32(vld1q_f32(row + j), vmulq_f32(ki, vld1q_f32(u + j)));
      vst1q_f32(row + j, s);
      vst1q_f32(o + j, vaddq_f32(vld1q_f32(o + j), vmulq_f32(s, qi)));
    }
    for (; j < D; j++) {
      float p = k[i] * u[j];
      row[j] += p;
      float r = row[j] * q[i];
      o[j] += r;
    }
  }
}

static df_kern neon_table;
static pthread_once_t neon_once = PTHREAD_ONCE_INIT;

/* NEON is part of every aarch64 CPU: no feature check. */
static void neon_init(void) {
  neon_table = *df_kern_scalar();
  neon_table.name = "neon";
  neon_table.gemm_bf16 = gemm_bf16_n;
  neon_table.gemm_i8 = gemm_i8_n;
  neon_table.gemm_f32 = gemm_f32_n;
  neon_table.gemm_mxfp4 = gemm_mxfp4_n;
  neon_table.gemv_t_bf16 = gemv_t_bf16_n;
  neon_table.gemv_t_i8 = gemv_t_i8_n;
  neon_table.dot = dot_n;
  neon_table.rmsnorm = rmsnorm_n;
  neon_table.kda_step = kda_step_n;
}

const df_kern *df_kern_neon(void) {
  pthread_once(&neon_once, neon_init);
  return &neon_table;
}

#else
const df_kern *df_kern_neon(void) { return NULL; }
#endif

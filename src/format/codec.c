/* Number formats. Conversions work on bit patterns so results do not depend
 * on the compiler's or the FPU's handling of half types; every rounding is
 * round-to-nearest-even. */
#include "format/codec.h"

#include <math.h>
#include <string.h>

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ------------------------------------------------------------------- bf16 */

float df_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t df_f32_to_bf16(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and payload top, force quiet */
    return (uint16_t)((u >> 16) | 0x0040u);
  /* Adding 0x7fff plus the lowest kept bit rounds half to even; a carry into
   * the exponent is the correct result (up to infinity). */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* -------------------------------------------------------------------- f16 */

float df_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t ex = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (ex == 0x1f) return u2f(sign | 0x7f800000u | (m << 13));
  if (ex == 0) {
    /* zero or subnormal: m * 2^-24, exact in f32 */
    float v = ldexpf((float)m, -24);
    return sign ? -v : v;
  }
  return u2f(sign | ((ex + 112u) << 23) | (m << 13));
}

uint16_t df_f32_to_f16(float f) {
  uint32_t u = f2u(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  /* 65520 is halfway between 65504 (odd mantissa) and 65536: ties go up to inf */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (a >= 0x38800000u) { /* normal in f16 (>= 2^-14) */
    a += 0xfffu + ((a >> 13) & 1u);
    a -= 0x38000000u; /* rebias 127 -> 15 */
    return (uint16_t)(sign | (a >> 13));
  }
  uint32_t ex = a >> 23;
  if (ex < 102) return sign; /* below 2^-25: rounds to zero (2^-25 itself ties to 0) */
  /* value = m * 2^(ex-150); in units of 2^-24 that is m >> (126 - ex) */
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  uint32_t sh = 126 - ex; /* 14..24 */
  uint32_t r = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
  if (rem > half || (rem == half && (r & 1u))) r++;
  return (uint16_t)(sign | r); /* r == 0x400 is the smallest normal: correct */
}

/* ------------------------------------------------------------------ MXFP4 */

const float df_e2m1_table[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

float df_e8m0_to_f32(uint8_t s) {
  if (s == 255) return u2f(0x7fc00000u);
  if (s == 0) return u2f(0x00400000u); /* 2^-127 is the subnormal 2^22 * 2^-149 */
  return u2f((uint32_t)s << 23);
}

int df_mxfp4_check_scales(const uint8_t *scales, size_t n, const char *label, df_err *e) {
  const void *p = memchr(scales, 255, n);
  if (!p) return 0;
  size_t i = (size_t)((const uint8_t *)p - scales);
  return df_err_set(e, "%s: E8M0 scale at index %zu is 255 (NaN), not a valid scale",
                    label ? label : "mxfp4 scales", i);
}

void df_mxfp4_dequant_row(const uint8_t *packed, const uint8_t *scales, int cols, float *out) {
  for (int g = 0; g < cols / DF_MXFP4_GROUP; g++) {
    float s = df_e8m0_to_f32(scales[g]);
    const uint8_t *p = packed + g * (DF_MXFP4_GROUP / 2);
    float *o = out + g * DF_MXFP4_GROUP;
    for (int i = 0; i < DF_MXFP4_GROUP / 2; i++) {
      o[2 * i] = df_e2m1_table[p[i] & 15] * s;
      o[2 * i + 1] = df_e2m1_table[p[i] >> 4] * s;
    }
  }
}

/* Nearest E2M1 magnitude code (0..7) for 0 <= v <= 6, ties to the even code
 * (= ties to the even mantissa, as IEEE rounding would). */
static int e2m1_code(double v) {
  static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  if (!(v > 0)) return 0; /* also NaN */
  int best = 0;
  for (int c = 1; c < 8; c++) {
    double dc = fabs(v - mag[c]), db = fabs(v - mag[best]);
    if (dc < db || (dc == db && (c & 1) == 0)) best = c;
  }
  return best;
}

void df_mxfp4_quant_row(const float *x, int cols, uint8_t *packed, uint8_t *scales) {
  for (int g = 0; g < cols / DF_MXFP4_GROUP; g++) {
    const float *xg = x + g * DF_MXFP4_GROUP;
    double amax = 0;
    for (int i = 0; i < DF_MXFP4_GROUP; i++) {
      double a = fabs((double)xg[i]);
      if (a > amax) amax = a; /* NaN never compares greater: ignored */
    }
    /* Smallest s with amax <= 6 * 2^(s-127); an all-zero group gets s = 0.
     * Every finite float fits by s = 254 (6 * 2^127 > FLT_MAX). */
    int s = 0;
    if (amax > 0) {
      int ex;
      frexp(amax / 6.0, &ex); /* amax/6 in [2^(ex-1), 2^ex) */
      s = ex - 1 + 127;
      if (s < 0) s = 0;
      if (s > 254) s = 254;
      while (s > 0 && amax <= 6.0 * ldexp(1.0, s - 1 - 127)) s--;
      while (s < 254 && amax > 6.0 * ldexp(1.0, s - 127)) s++;
    }
    scales[g] = (uint8_t)s;
    double inv = ldexp(1.0, 127 - s); /* exact division by the scale */
    uint8_t *p = packed + g * (DF_MXFP4_GROUP / 2);
    for (int i = 0; i < DF_MXFP4_GROUP; i++) {
      double v = (double)xg[i] * inv;
      int code = e2m1_code(fabs(v));
      if (signbit(xg[i]) && !isnan(xg[i])) code |= 8;
      if (i & 1) p[i / 2] = (uint8_t)(p[i / 2] | (code << 4));
      else p[i / 2] = (uint8_t)code;
    }
  }
}

/* ---------------------------------------------------------------- row int8 */

/* scale = absmax / 127. An all-zero row gets scale 0 and all-zero codes, so
 * dequantisation gives exact zeros. Inputs must be finite; a NaN element is
 * stored as 0 rather than left undefined. */
void df_int8_quant_row(const float *x, int cols, int8_t *q, float *scale) {
  float amax = 0;
  for (int i = 0; i < cols; i++) {
    float a = fabsf(x[i]);
    if (a > amax) amax = a;
  }
  float s = amax / 127.0f;
  *scale = s;
  for (int i = 0; i < cols; i++) {
    if (s == 0) {
      q[i] = 0;
      continue;
    }
    /* nearbyintf uses the current rounding mode: the default, to nearest even */
    float v = nearbyintf(x[i] / s);
    if (v > 127) v = 127;
    else if (v < -127) v = -127;
    else if (v != v) v = 0;
    q[i] = (int8_t)v;
  }
}

void df_int8_dequant_row(const int8_t *q, float scale, int cols, float *out) {
  for (int i = 0; i < cols; i++) out[i] = (float)q[i] * scale;
}

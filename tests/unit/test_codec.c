/* Number formats against references derived here from the bit definitions
 * (never from the tables or conversions under test). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "format/codec.h"

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float fbits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* E2M1 from its definition: 1 sign bit, 2 exponent bits (bias 1), 1 mantissa
 * bit; exponent 0 is subnormal: value = mantissa/2. */
static double e2m1_ref(unsigned code) {
  unsigned sign = (code >> 3) & 1, ex = (code >> 1) & 3, man = code & 1;
  double mag = ex == 0 ? man * 0.5 : ldexp(1.0 + man * 0.5, (int)ex - 1);
  return sign ? -mag : mag;
}

static void test_e2m1_table_matches_definition(void **st) {
  (void)st;
  for (unsigned c = 0; c < 16; c++) {
    float want = (float)e2m1_ref(c);
    assert_int_equal(bits(df_e2m1_table[c]), bits(want)); /* also checks -0 */
  }
}

static void test_e8m0_all(void **st) {
  (void)st;
  for (int s = 0; s < 255; s++) {
    float want = (float)ldexp(1.0, s - 127); /* exact: every power in range is a float */
    assert_int_equal(bits(df_e8m0_to_f32((uint8_t)s)), bits(want));
  }
  assert_true(df_e8m0_to_f32(0) > 0); /* 2^-127 is subnormal, not flushed */
  assert_true(isnan(df_e8m0_to_f32(255)));
}

static const int scales_to_test[] = {0, 1, 100, 127, 128, 200, 254};

/* Every byte value under every scale: a 512-column row holding bytes 0..255. */
static void test_mxfp4_decode_all_bytes(void **st) {
  (void)st;
  uint8_t packed[256], sc[16];
  float out[512];
  for (int b = 0; b < 256; b++) packed[b] = (uint8_t)b;
  for (size_t k = 0; k < sizeof scales_to_test / sizeof *scales_to_test; k++) {
    int s = scales_to_test[k];
    memset(sc, s, sizeof sc);
    df_mxfp4_dequant_row(packed, sc, 512, out);
    for (int b = 0; b < 256; b++) {
      double lo = e2m1_ref(b & 15) * ldexp(1.0, s - 127);
      double hi = e2m1_ref(b >> 4) * ldexp(1.0, s - 127);
      /* (float) of the exact double product: exact, or inf when out of range */
      assert_int_equal(bits(out[2 * b]), bits((float)lo));
      assert_int_equal(bits(out[2 * b + 1]), bits((float)hi));
    }
  }
}

/* Different scales per group of one row: each group uses its own byte. */
static void test_mxfp4_decode_mixed_scales(void **st) {
  (void)st;
  enum { COLS = 7 * 32 };
  uint8_t packed[COLS / 2], sc[7];
  float out[COLS];
  for (int i = 0; i < COLS / 2; i++) packed[i] = (uint8_t)(i * 37 + 11);
  for (int g = 0; g < 7; g++) sc[g] = (uint8_t)scales_to_test[g];
  df_mxfp4_dequant_row(packed, sc, COLS, out);
  for (int c = 0; c < COLS; c++) {
    unsigned code = (c & 1) ? packed[c / 2] >> 4 : packed[c / 2] & 15;
    double want = e2m1_ref(code) * ldexp(1.0, sc[c / 32] - 127);
    assert_int_equal(bits(out[c]), bits((float)want));
  }
}

static void test_mxfp4_check_scales(void **st) {
  (void)st;
  uint8_t s[300];
  for (int i = 0; i < 300; i++) s[i] = (uint8_t)(i % 255); /* 0..254 */
  df_err e = {{0}};
  assert_int_equal(df_mxfp4_check_scales(s, 300, "layers.3.experts.7.w2.weight_scale", &e), 0);
  s[123] = 255;
  assert_int_equal(df_mxfp4_check_scales(s, 300, "layers.3.experts.7.w2.weight_scale", &e), -1);
  assert_non_null(strstr(e.msg, "layers.3.experts.7.w2.weight_scale"));
  assert_non_null(strstr(e.msg, "123"));
}

static void test_mxfp4_quant(void **st) {
  (void)st;
  float x[64], y[64];
  uint8_t p[32], s[2];
  /* Group 0: max 6 -> scale 2^0; values on and between grid points (ties). */
  const float g0[16] = {6, 2.5f, 5, 0.25f, 0.75f, 1.25f, 1.75f, 3.5f,
                        -2.5f, -0.25f, 0, 1.5f, -6, 3, 0.5f, -0.0f};
  const float w0[16] = {6, 2, 4, 0, 1, 1, 2, 4, -2, -0.0f, 0, 1.5f, -6, 3, 0.5f, -0.0f};
  for (int i = 0; i < 32; i++) x[i] = i < 16 ? g0[i] : 0;
  /* Group 1: max 6.0001 needs the next power: scale 2^1, then values /2. */
  for (int i = 0; i < 32; i++) x[32 + i] = 0;
  x[32] = 6.0001f;
  x[33] = 1.0f; /* 0.5 in units of the scale: exact */
  x[34] = 2.5f; /* 1.25 units -> tie -> 1.0 unit = 2 */
  df_mxfp4_quant_row(x, 64, p, s);
  assert_int_equal(s[0], 127);
  assert_int_equal(s[1], 128);
  df_mxfp4_dequant_row(p, s, 64, y);
  for (int i = 0; i < 16; i++) assert_int_equal(bits(y[i]), bits(w0[i]));
  assert_true(y[32] == 6.0f); /* 6.0001/2 = 3.00005 -> 3 units of 2 */
  assert_true(y[33] == 1.0f);
  assert_true(y[34] == 2.0f);

  /* amax exactly 3 fits scale 2^-1 (3 <= 6 * 0.5); all-zero group -> s = 0 */
  for (int i = 0; i < 64; i++) x[i] = 0;
  x[0] = 3;
  df_mxfp4_quant_row(x, 64, p, s);
  assert_int_equal(s[0], 126);
  assert_int_equal(s[1], 0);

  /* Exactly representable values survive a round trip for many scales. */
  for (int sc = 0; sc <= 252; sc += 4) { /* 6 * 2^(sc-127) must stay finite */
    for (int i = 0; i < 64; i++) x[i] = (float)(e2m1_ref((unsigned)(i * 5 + sc) & 15) *
                                               ldexp(1.0, sc - 127));
    x[0] = (float)ldexp(6.0, sc - 127); /* pins the scale */
    df_mxfp4_quant_row(x, 64, p, s);
    df_mxfp4_dequant_row(p, s, 64, y);
    for (int i = 0; i < 64; i++) assert_int_equal(bits(y[i]), bits(x[i]));
  }
}

/* ---- bf16 ---- */

/* Reference rounding of a finite f32 to bf16, as a double value: quantum at
 * the value's binade (8 significant bits; subnormal quantum 2^-133), ties to
 * even via nearbyint in the default rounding mode. */
static double bf16_ref(float x) {
  double a = fabs((double)x);
  if (a == 0) return (double)x;
  int ex;
  frexp(a, &ex); /* a in [2^(ex-1), 2^ex) */
  int e = ex - 1 < -126 ? -126 : ex - 1;
  double q = ldexp(1.0, e - 7);
  double r = nearbyint(a / q) * q;
  if (r >= ldexp(1.0, 128)) r = INFINITY;
  return signbit(x) ? -r : r;
}

static void test_bf16_cases(void **st) {
  (void)st;
  assert_int_equal(df_f32_to_bf16(1.0f), 0x3F80);
  assert_int_equal(df_f32_to_bf16(fbits(0x3F808000)), 0x3F80); /* tie -> even (down) */
  assert_int_equal(df_f32_to_bf16(fbits(0x3F818000)), 0x3F82); /* tie -> even (up) */
  assert_int_equal(df_f32_to_bf16(fbits(0x3F808001)), 0x3F81); /* above half */
  assert_int_equal(df_f32_to_bf16(fbits(0x3F807FFF)), 0x3F80); /* below half */
  assert_int_equal(df_f32_to_bf16(INFINITY), 0x7F80);
  assert_int_equal(df_f32_to_bf16(-INFINITY), 0xFF80);
  assert_int_equal(df_f32_to_bf16(fbits(0x7F7FFFFF)), 0x7F80); /* FLT_MAX rounds to inf */
  assert_int_equal(df_f32_to_bf16(fbits(0x7F7F7FFF)), 0x7F7F);
  assert_int_equal(df_f32_to_bf16(-0.0f), 0x8000);
  assert_int_equal(df_f32_to_bf16(fbits(0x00010000)), 0x0001); /* subnormal */
  assert_int_equal(df_f32_to_bf16(fbits(0x00018000)), 0x0002); /* subnormal tie, odd -> up */
  assert_int_equal(df_f32_to_bf16(fbits(0x00008000)), 0x0000); /* tie to even zero */
  assert_int_equal(df_f32_to_bf16(fbits(0x00008001)), 0x0001);
  /* NaNs stay NaN, including a signalling NaN whose payload sits in the
   * discarded low bits (truncation would turn it into infinity). */
  assert_true(isnan(df_bf16_to_f32(df_f32_to_bf16(NAN))));
  assert_true(isnan(df_bf16_to_f32(df_f32_to_bf16(fbits(0x7F800001)))));
  assert_true(isnan(df_bf16_to_f32(df_f32_to_bf16(fbits(0xFF800001)))));
  assert_int_equal(df_f32_to_bf16(fbits(0xFF800001)) & 0x8000, 0x8000);
  assert_true(df_bf16_to_f32(0x3F80) == 1.0f);
  assert_true(df_bf16_to_f32(0xC040) == -3.0f);
}

static void test_bf16_exhaustive(void **st) {
  (void)st;
  /* Every bf16 decodes to its bits << 16 and converts back to itself. */
  for (uint32_t h = 0; h < 65536; h++) {
    float f = df_bf16_to_f32((uint16_t)h);
    assert_int_equal(bits(f), h << 16);
    if (!isnan(f)) assert_int_equal(df_f32_to_bf16(f), h);
  }
  /* f32 -> bf16 on a spread of bit patterns, against the reference. */
  for (uint64_t u = 0; u < 0x100000000ull; u += 40009) {
    float x = fbits((uint32_t)u);
    if (isnan(x)) continue;
    double got = df_bf16_to_f32(df_f32_to_bf16(x));
    double want = bf16_ref(x);
    assert_true(got == want);
    assert_int_equal(signbit(got) != 0, signbit(want) != 0);
  }
}

/* ---- f16 ---- */

static double f16_decode_ref(unsigned h) {
  unsigned s = h >> 15, ex = (h >> 10) & 31, m = h & 1023;
  double v;
  if (ex == 31) v = m ? NAN : INFINITY;
  else if (ex == 0) v = ldexp((double)m, -24);
  else v = ldexp(1.0 + m / 1024.0, (int)ex - 15);
  return s ? -v : v;
}

/* f16: 11 significant bits, smallest normal 2^-14, subnormal quantum 2^-24,
 * values >= 65520 (halfway past 65504, ties to even = up) become inf. */
static double f16_ref(float x) {
  double a = fabs((double)x);
  if (a == 0) return (double)x;
  int ex;
  frexp(a, &ex);
  int e = ex - 1 < -14 ? -14 : ex - 1;
  double q = ldexp(1.0, e - 10);
  double r = nearbyint(a / q) * q;
  if (r > 65504) r = INFINITY;
  return signbit(x) ? -r : r;
}

static void test_f16_cases(void **st) {
  (void)st;
  assert_int_equal(df_f32_to_f16(1.0f), 0x3C00);
  assert_int_equal(df_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);        /* tie -> even */
  assert_int_equal(df_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);    /* tie -> even up */
  assert_int_equal(df_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
  assert_int_equal(df_f32_to_f16(65504.0f), 0x7BFF);
  assert_int_equal(df_f32_to_f16(65519.0f), 0x7BFF);
  assert_int_equal(df_f32_to_f16(65520.0f), 0x7C00);
  assert_int_equal(df_f32_to_f16(1e6f), 0x7C00);
  assert_int_equal(df_f32_to_f16(-1e6f), 0xFC00);
  assert_int_equal(df_f32_to_f16(INFINITY), 0x7C00);
  assert_int_equal(df_f32_to_f16(0x1p-14f), 0x0400);                 /* smallest normal */
  assert_int_equal(df_f32_to_f16(1023.5f * 0x1p-24f), 0x0400);       /* tie 0x3FF/0x400 */
  assert_int_equal(df_f32_to_f16(1022.5f * 0x1p-24f), 0x03FE);       /* tie -> even down */
  assert_int_equal(df_f32_to_f16(0x1p-24f), 0x0001);
  assert_int_equal(df_f32_to_f16(0x1p-25f), 0x0000);                 /* tie to even 0 */
  assert_int_equal(df_f32_to_f16(1.5f * 0x1p-25f), 0x0001);
  assert_int_equal(df_f32_to_f16(3.0f * 0x1p-25f), 0x0002);          /* 1.5 quanta -> 2 */
  assert_int_equal(df_f32_to_f16(-0x1p-24f), 0x8001);
  assert_int_equal(df_f32_to_f16(-1e-30f), 0x8000);
  assert_int_equal(df_f32_to_f16(-0.0f), 0x8000);
  uint16_t n = df_f32_to_f16(NAN);
  assert_int_equal(n & 0x7C00, 0x7C00);
  assert_true((n & 0x3FF) != 0);
  n = df_f32_to_f16(fbits(0x7F800001)); /* payload only in low bits: still NaN */
  assert_true((n & 0x7C00) == 0x7C00 && (n & 0x3FF) != 0);
}

static void test_f16_exhaustive(void **st) {
  (void)st;
  for (unsigned h = 0; h < 65536; h++) {
    float f = df_f16_to_f32((uint16_t)h);
    double want = f16_decode_ref(h);
    if (isnan(want)) {
      assert_true(isnan(f));
      continue;
    }
    assert_true((double)f == want);
    assert_int_equal(signbit(f) != 0, signbit(want) != 0);
    assert_int_equal(df_f32_to_f16(f), h);
  }
  /* Dense over the f16 range (2^-26 .. 2^17), sparse elsewhere. */
  for (uint32_t u = 0x32800000u; u < 0x48000000u; u += 97) {
    float x = fbits(u);
    assert_true((double)df_f16_to_f32(df_f32_to_f16(x)) == f16_ref(x));
    assert_true((double)df_f16_to_f32(df_f32_to_f16(-x)) == f16_ref(-x));
  }
  for (uint64_t u = 0; u < 0x100000000ull; u += 65521) {
    float x = fbits((uint32_t)u);
    if (isnan(x)) continue;
    double got = df_f16_to_f32(df_f32_to_f16(x));
    double want = f16_ref(x);
    assert_true(got == want);
    assert_int_equal(signbit(got) != 0, signbit(want) != 0);
  }
}

/* ---- row int8 ---- */

static void test_int8_ties(void **st) {
  (void)st;
  /* absmax 127 -> scale exactly 1: x/scale = x, so ties are visible. */
  const float x[10] = {127, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.5f, 126.5f, -127};
  const int8_t want[10] = {127, 0, 2, 2, 0, -2, -2, 4, 126, -127};
  int8_t q[10];
  float s;
  df_int8_quant_row(x, 10, q, &s);
  assert_true(s == 1.0f);
  for (int i = 0; i < 10; i++) assert_int_equal(q[i], want[i]);

  /* absmax 254 -> scale 2: odd integers are ties. */
  const float y[6] = {254, 1, 3, 5, -3, -7};
  const int8_t wy[6] = {127, 0, 2, 2, -2, -4};
  df_int8_quant_row(y, 6, q, &s);
  assert_true(s == 2.0f);
  for (int i = 0; i < 6; i++) assert_int_equal(q[i], wy[i]);
  float d[6];
  df_int8_dequant_row(q, s, 6, d);
  for (int i = 0; i < 6; i++) assert_true(d[i] == (float)wy[i] * 2.0f);
}

static void test_int8_zero_row_and_range(void **st) {
  (void)st;
  float x[64] = {0};
  int8_t q[64];
  float s = -1, d[64];
  x[5] = -0.0f;
  df_int8_quant_row(x, 64, q, &s);
  assert_true(s == 0.0f);
  for (int i = 0; i < 64; i++) assert_int_equal(q[i], 0);
  df_int8_dequant_row(q, s, 64, d);
  for (int i = 0; i < 64; i++) assert_true(d[i] == 0.0f);

  /* Awkward maxima: the max element maps to +-127, nothing leaves the range,
   * and every code is within half a step of x/scale. */
  uint32_t r = 12345;
  for (int row = 0; row < 200; row++) {
    for (int i = 0; i < 64; i++) {
      r = r * 1664525u + 1013904223u;
      x[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * (float)(row + 1) * 0.37f;
    }
    df_int8_quant_row(x, 64, q, &s);
    int amax_i = 0;
    for (int i = 1; i < 64; i++)
      if (fabsf(x[i]) > fabsf(x[amax_i])) amax_i = i;
    assert_int_equal(abs(q[amax_i]), 127);
    for (int i = 0; i < 64; i++) {
      assert_true(q[i] >= -127 && q[i] <= 127);
      assert_true(fabs((double)q[i] - (double)x[i] / (double)s) <= 0.5 + 1e-5);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_e2m1_table_matches_definition),
      cmocka_unit_test(test_e8m0_all),
      cmocka_unit_test(test_mxfp4_decode_all_bytes),
      cmocka_unit_test(test_mxfp4_decode_mixed_scales),
      cmocka_unit_test(test_mxfp4_check_scales),
      cmocka_unit_test(test_mxfp4_quant),
      cmocka_unit_test(test_bf16_cases),
      cmocka_unit_test(test_bf16_exhaustive),
      cmocka_unit_test(test_f16_cases),
      cmocka_unit_test(test_f16_exhaustive),
      cmocka_unit_test(test_int8_ties),
      cmocka_unit_test(test_int8_zero_row_and_range),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

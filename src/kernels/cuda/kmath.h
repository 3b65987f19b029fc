/* expf and tanhf for the GPU, computing what the CPU path's C library
 * computes (glibc's: expf since 2.27 with its x86-64 FMA build, tanhf and
 * expm1f the fdlibm single-precision algorithms of glibc up to 2.40), so the
 * sigmoid, softmax, SiLU and SiTU kernels equal the scalar reference bit for
 * bit. CUDA's expf/tanhf are other approximations (up to 2 ulp) and would not.
 *
 * Written from the published algorithms and constants (table-driven exp2 with
 * a degree-3 polynomial in double; fdlibm's argument reduction for expm1);
 * the 32-entry table is 2^(i/32) rounded to double, computed for this file.
 * Plain C17 as well as CUDA (DF_KM_HD), so the host can test this code
 * against libm exhaustively (tests/cuda/test_cuda_kernels.c) without a GPU.
 * Compile without FP contraction: the fused multiply-adds are written out
 * where the library's build has them, every other product is rounded. */
#ifndef DF_KERNELS_CUDA_KMATH_H
#define DF_KERNELS_CUDA_KMATH_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DF_KM_HD __host__ __device__ static inline
#define DF_KM_FMA(a, b, c) fma(a, b, c)
#else
#include <math.h>
#define DF_KM_HD static inline
#define DF_KM_FMA(a, b, c) fma(a, b, c)
#endif

/* 2^(i/32) as double bits, minus i << 47 (the exponent is added back from
 * the rounded k). Host copy and device copy hold the same numbers. */
#define DF_KM_EXP2_TABLE                                                                    \
  {0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull, \
   0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull, \
   0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull, \
   0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull, \
   0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull, \
   0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull, \
   0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull, \
   0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull}

static const uint64_t df_km_t2_host[32] = DF_KM_EXP2_TABLE;
#ifdef __CUDACC__
__device__ __constant__ static const uint64_t df_km_t2_dev[32] = DF_KM_EXP2_TABLE;
#endif
#ifdef __CUDA_ARCH__
#define DF_KM_T2 df_km_t2_dev
#else
#define DF_KM_T2 df_km_t2_host
#endif

DF_KM_HD uint32_t df_km_fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
DF_KM_HD float df_km_bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
DF_KM_HD uint64_t df_km_dbits(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}
DF_KM_HD double df_km_bitsd(uint64_t u) {
  double d;
  memcpy(&d, &u, 8);
  return d;
}

DF_KM_HD float df_km_expf(float x) {
  const double InvLn2N = 0x1.71547652b82fep+0 * 32, SHIFT = 0x1.8p+52;
  const double C0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, C1 = 0x1.ebfce50fac4f3p-3 / 32 / 32,
               C2 = 0x1.62e42ff0c52d6p-1 / 32;
  uint32_t ux = df_km_fbits(x);
  uint32_t abstop = (ux >> 20) & 0x7ff;
  if (abstop >= (0x42b00000u >> 20)) { /* |x| >= 88: inf, nan, overflow, underflow */
    if (ux == 0xff800000u) return 0.0f;
    if (abstop >= 0x7f8) return x + x;
    if (x > 0x1.62e42ep6f) return df_km_bitsf(0x7f800000u);
    if (x < -0x1.9fe368p6f) return 0.0f;
  }
  /* z = x 32/ln2 = k + r. The library's FMA build fuses the product into
   * both of its uses (the rounding to k and r), so z itself is never rounded:
   * an exhaustive comparison tells the fused and unfused variants apart. */
  double xd = x;
  double kd = DF_KM_FMA(InvLn2N, xd, SHIFT); /* k in the low bits */
  uint64_t ki = df_km_dbits(kd);
  kd -= SHIFT;
  double r = DF_KM_FMA(InvLn2N, xd, -kd);
  uint64_t t = DF_KM_T2[ki % 32];
  t += ki << 47;
  double s = df_km_bitsd(t);
  double zp = DF_KM_FMA(C0, r, C1);
  double r2 = r * r;
  double y = DF_KM_FMA(C2, r, 1.0);
  y = DF_KM_FMA(zp, r2, y);
  y = y * s;
  return (float)y;
}

/* fdlibm's expm1f: exact reduction x = k ln2 + r (ln2 split hi/lo), a
 * rational approximation on r, then 2^k (e^r - 1) + (2^k - 1) arranged to
 * avoid cancellation. */
DF_KM_HD float df_km_expm1f(float x) {
  const float ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f, invln2 = 1.4426950216e+00f;
  const float Q1 = -3.3333335072e-02f, Q2 = 1.5873016091e-03f, Q3 = -7.9365076090e-05f,
              Q4 = 4.0082177293e-06f, Q5 = -2.0109921195e-07f;
  float y, hi, lo, c = 0, t, e, hxs, hfx, r1;
  int32_t k;
  uint32_t hx = df_km_fbits(x);
  uint32_t xsb = hx & 0x80000000u;
  hx &= 0x7fffffffu;
  if (hx >= 0x4195b844u) { /* |x| >= 27 ln2 */
    if (hx >= 0x42b17218u) {
      if (hx > 0x7f800000u) return x + x;
      if (hx == 0x7f800000u) return xsb == 0 ? x : -1.0f;
      if (x > 8.8721679688e+01f) return df_km_bitsf(0x7f800000u);
    }
    if (xsb != 0) return 1.0e-30f - 1.0f;
  }
  if (hx > 0x3eb17218u) { /* |x| > 0.5 ln2 */
    if (hx < 0x3F851592u) { /* and < 1.5 ln2 */
      if (xsb == 0) {
        hi = x - ln2_hi;
        lo = ln2_lo;
        k = 1;
      } else {
        hi = x + ln2_hi;
        lo = -ln2_lo;
        k = -1;
      }
    } else {
      float kf = invln2 * x;
      kf = kf + (xsb == 0 ? 0.5f : -0.5f);
      k = (int32_t)kf;
      t = (float)k;
      float th = t * ln2_hi;
      hi = x - th;
      lo = t * ln2_lo;
    }
    x = hi - lo;
    c = (hi - x) - lo;
  } else if (hx < 0x33000000u) { /* |x| < 2^-25 */
    return x;
  } else
    k = 0;
  hfx = 0.5f * x;
  hxs = x * hfx;
  {
    float p = hxs * Q5;
    p = Q4 + p;
    p = hxs * p;
    p = Q3 + p;
    p = hxs * p;
    p = Q2 + p;
    p = hxs * p;
    p = Q1 + p;
    p = hxs * p;
    r1 = 1.0f + p;
  }
  {
    float q = r1 * hfx;
    t = 3.0f - q;
    float d = x * t;
    d = 6.0f - d;
    float n = r1 - t;
    e = n / d;
    e = hxs * e;
  }
  if (k == 0) {
    float xe = x * e;
    xe = xe - hxs;
    return x - xe;
  }
  {
    float ec = e - c;
    ec = x * ec;
    e = ec - c;
    e -= hxs;
  }
  if (k == -1) {
    float a = x - e;
    a = 0.5f * a;
    return a - 0.5f;
  }
  if (k == 1) {
    if (x < -0.25f) {
      float a = x + 0.5f;
      a = e - a;
      return -2.0f * a;
    }
    float a = x - e;
    a = 2.0f * a;
    return 1.0f + a;
  }
  if (k <= -2 || k > 56) {
    y = 1.0f - (e - x);
    if (k == 128) {
      y = y * 2.0f;
      y = y * 0x1p127f;
    } else
      y = df_km_bitsf(df_km_fbits(y) + ((uint32_t)k << 23));
    return y - 1.0f;
  }
  if (k < 23) {
    t = df_km_bitsf(0x3f800000u - (0x1000000u >> k)); /* 1 - 2^-k */
    y = t - (e - x);
    y = df_km_bitsf(df_km_fbits(y) + ((uint32_t)k << 23));
  } else {
    t = df_km_bitsf((uint32_t)(0x7f - k) << 23); /* 2^-k */
    y = x - (e + t);
    y += 1.0f;
    y = df_km_bitsf(df_km_fbits(y) + ((uint32_t)k << 23));
  }
  return y;
}

DF_KM_HD float df_km_tanhf(float x) {
  uint32_t jx = df_km_fbits(x), ix = jx & 0x7fffffffu;
  float z;
  if (ix >= 0x7f800000u) { /* inf or nan */
    float r = 1.0f / x;
    return (jx >> 31) == 0 ? r + 1.0f : r - 1.0f;
  }
  if (ix < 0x41b00000u) { /* |x| < 22 */
    if (ix == 0) return x;
    if (ix < 0x24000000u) return x * (1.0f + x); /* |x| < 2^-55 */
    float ax = df_km_bitsf(ix);
    if (ix >= 0x3f800000u) { /* |x| >= 1 */
      float t = df_km_expm1f(2.0f * ax);
      float d = t + 2.0f;
      d = 2.0f / d;
      z = 1.0f - d;
    } else {
      float t = df_km_expm1f(-2.0f * ax);
      float d = t + 2.0f;
      z = -t / d;
    }
  } else
    z = 1.0f - 1.0e-30f;
  return (jx >> 31) == 0 ? z : -z;
}

#endif

/* The weight formats as the CUDA kernels read them: the exact conversions
 * and, per format, "LPT lanes of one step" loaders and the one-element
 * value. A header of its own so the same code is compiled by nvcc for the
 * GPU and, through tests/cuda/emu's host stand-ins for the CUDA built-ins,
 * by the host compiler for the kernels' emulation tests. */
#ifndef DF_KERNELS_CUDA_KCUDA_FMT_CUH
#define DF_KERNELS_CUDA_KCUDA_FMT_CUH

#include <stddef.h>
#include <stdint.h>

#define LANES 16
#define HALF 8

/* ---- exact conversions (kernels.h's df_kbf16, df_ke8m0, df_kern_e2m1) ---- */

__device__ static inline float bf16f(uint32_t h) { return __uint_as_float(h << 16); }
__device__ static inline float e8m0f(uint32_t s) {
  return __uint_as_float(s ? s << 23 : 0x00400000u);
}
/* E2M1 code -> value {0, .5, 1, 1.5, 2, 3, 4, 6} with sign bit 3, from bits
 * (a table in constant memory would serialise on divergent codes). */
__device__ static inline float e2m1f(uint32_t code) {
  uint32_t m = code & 7u;
  uint32_t mag = m >= 2 ? (((m >> 1) + 126u) << 23) | ((m & 1u) << 22) : (m ? 0x3f000000u : 0u);
  return __uint_as_float(mag | ((code & 8u) << 28));
}

/* ---- GEMV: the weight formats as "LPT lanes of one step" loaders ----
 * LPT (lanes per thread) is 8, 4 or 2: G = 16 / LPT threads share a row,
 * thread g owning lanes g*LPT .. g*LPT + LPT - 1. Fewer lanes per thread
 * means more threads per row (more parallelism for few rows) and narrower
 * loads; df_cuda_set_gemv_lanes picks it (the bench measures each). */

template <int BYTES> struct vraw;
template <> struct vraw<16> {
  uint32_t w[4];
  __device__ void ld(const void *p) {
    uint4 v = __ldg((const uint4 *)p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  }
};
template <> struct vraw<8> {
  uint32_t w[2];
  __device__ void ld(const void *p) {
    uint2 v = __ldg((const uint2 *)p);
    w[0] = v.x, w[1] = v.y;
  }
};
template <> struct vraw<4> {
  uint32_t w[1];
  __device__ void ld(const void *p) { w[0] = __ldg((const uint32_t *)p); }
};
template <> struct vraw<2> {
  uint32_t w[1];
  __device__ void ld(const void *p) { w[0] = __ldg((const unsigned short *)p); }
};
template <> struct vraw<1> {
  uint32_t w[1];
  __device__ void ld(const void *p) { w[0] = __ldg((const unsigned char *)p); }
};

template <int LPT> struct fmt_bf16 {
  const uint16_t *W;
  static constexpr int unroll = LPT == 8 ? 8 : 16, step_bytes = 32;
  __device__ const void *row(size_t r, int cols) const { return W + r * cols; }
  struct raw {
    vraw<LPT * 2> v;
  };
  __device__ raw load(size_t r, int cols, int s, int g) const {
    raw v;
    v.v.ld(W + r * cols + (size_t)s * LANES + g * LPT);
    return v;
  }
  __device__ void decode(const raw &v, float w[LPT]) const {
#pragma unroll
    for (int m = 0; m < LPT / 2; m++) {
      w[2 * m] = __uint_as_float(v.v.w[m] << 16);
      w[2 * m + 1] = __uint_as_float(v.v.w[m] & 0xffff0000u);
    }
  }
  __device__ float one(size_t r, int cols, int c) const { return bf16f(W[r * cols + c]); }
};

template <int LPT> struct fmt_i8 {
  const int8_t *W;
  static constexpr int unroll = 16, step_bytes = 16;
  __device__ const void *row(size_t r, int cols) const { return W + r * cols; }
  struct raw {
    vraw<LPT> v;
  };
  __device__ raw load(size_t r, int cols, int s, int g) const {
    raw v;
    v.v.ld(W + r * cols + (size_t)s * LANES + g * LPT);
    return v;
  }
  /* (float)q exactly, without the quarter-rate int-to-float conversion:
   * 2^23 + (q + 128) is assembled as bits, then 2^23 + 128 subtracted. */
  __device__ void decode(const raw &v, float w[LPT]) const {
#pragma unroll
    for (int m = 0; m < LPT; m++)
      w[m] = __fsub_rn(__uint_as_float(__byte_perm(v.v.w[m >> 2] ^ 0x80808080u, 0x4B000000u,
                                                   0x7540u + (m & 3))),
                       8388736.0f);
  }
  __device__ float one(size_t r, int cols, int c) const { return (float)W[r * cols + c]; }
};

template <int LPT> struct fmt_f32 {
  const float *W;
  static constexpr int unroll = LPT == 8 ? 4 : 8, step_bytes = 64;
  __device__ const void *row(size_t r, int cols) const { return W + r * cols; }
  struct raw {
    float v[LPT];
  };
  __device__ raw load(size_t r, int cols, int s, int g) const {
    raw v;
    const float4 *p = (const float4 *)(W + r * cols + (size_t)s * LANES + g * LPT);
    if (LPT >= 4) {
#pragma unroll
      for (int q = 0; q < LPT / 4; q++) {
        float4 a = __ldg(p + q);
        v.v[4 * q] = a.x, v.v[4 * q + 1] = a.y, v.v[4 * q + 2] = a.z, v.v[4 * q + 3] = a.w;
      }
    } else {
      float2 a = __ldg((const float2 *)p);
      v.v[0] = a.x, v.v[LPT - 1] = a.y;
    }
    return v;
  }
  __device__ void decode(const raw &v, float w[LPT]) const {
#pragma unroll
    for (int m = 0; m < LPT; m++) w[m] = v.v[m];
  }
  __device__ float one(size_t r, int cols, int c) const { return W[r * cols + c]; }
};

/* MXFP4: LPT codes of one step are LPT / 2 bytes (low nibble = even
 * column); the step's group scale (32 columns = 2 steps) rides along.
 * w = E2M1 * 2^(s-127) rounded as the CPU rounds it. E2M1 values are bf16
 * values: their top and second bytes come from two 8-entry byte tables,
 * looked up four codes at a time by __byte_perm. */
template <int LPT> struct fmt_mxfp4 {
  const uint8_t *P, *S;
  static constexpr int unroll = 16, step_bytes = 8;
  __device__ const void *row(size_t r, int cols) const { return P + r * (cols / 2); }
  struct raw {
    vraw<LPT / 2> v;
    uint32_t sc;
  };
  __device__ raw load(size_t r, int cols, int s, int g) const {
    raw v;
    v.v.ld(P + r * (cols / 2) + (size_t)s * HALF + g * (LPT / 2));
    v.sc = __ldg(S + r * (cols / 32) + s / 2);
    return v;
  }
  __device__ void decode(const raw &v, float w[LPT]) const {
    float sc = e8m0f(v.sc);
    uint32_t q = v.v.w[0], mq = q & 0x77777777u;
#pragma unroll
    for (int half = 0; half < (LPT + 3) / 4; half++) {
      uint32_t sel = half ? mq >> 16 : mq & 0xffffu;
      uint32_t top = __byte_perm(0x3F3F3F00u, 0x40404040u, sel);
      uint32_t sec = __byte_perm(0xC0800000u, 0xC0804000u, sel);
      uint32_t p01 = __byte_perm(sec, top, 0x5140u), p23 = __byte_perm(sec, top, 0x7362u);
      uint32_t b[4] = {p01 << 16, p01 & 0xffff0000u, p23 << 16, p23 & 0xffff0000u};
#pragma unroll
      for (int k = 0; k < 4 && half * 4 + k < LPT; k++) {
        int e = half * 4 + k;
        uint32_t sign = (q << (28 - 4 * e)) & 0x80000000u;
        w[e] = __fmul_rn(__uint_as_float(b[k] | sign), sc);
      }
    }
  }
  __device__ float one(size_t r, int cols, int c) const {
    uint32_t b = P[r * (cols / 2) + c / 2];
    return __fmul_rn(e2m1f(c & 1 ? b >> 4 : b), e8m0f(S[r * (cols / 32) + c / 32]));
  }
};

#endif

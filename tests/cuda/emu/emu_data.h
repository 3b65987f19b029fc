/* The emulation tests' random inputs, from rand_bits.h's stream (include
 * it first, with the test's own seed): float vectors whose every bit is
 * random within a binary exponent range, and weights in the release's
 * layouts (kernels.h): fmt 0 bf16 and 2 f32 row-major, 1 int8 with one
 * float scale a row, 3 MXFP4 two codes a byte (low nibble the even column)
 * with an E8M0 scale per 32 columns (255 excluded, as the loader rejects
 * it; 2^127 x 6 would overflow, so scales stop at 2^12). */
#ifndef DF_TESTS_CUDA_EMU_EMU_DATA_H
#define DF_TESTS_CUDA_EMU_EMU_DATA_H

#include <math.h>
#include <string.h>

#include <vector>

static inline std::vector<float> emu_rnd_vec(size_t n, int lo, int hi) {
  std::vector<float> v(n ? n : 1);
  for (size_t i = 0; i < n; i++) v[i] = rndf(lo, hi);
  return v;
}

static inline void emu_weights(int fmt, int rows, int cols, std::vector<uint8_t> &W,
                               std::vector<uint8_t> &S) {
  size_t n = (size_t)rows * cols;
  S.clear();
  if (fmt == 0) {
    W.resize(n * 2);
    for (size_t i = 0; i < n; i++) {
      float f = rndf(-10, 1);
      uint32_t u;
      memcpy(&u, &f, 4);
      uint16_t h = (uint16_t)(u >> 16);
      memcpy(&W[2 * i], &h, 2);
    }
  } else if (fmt == 1) {
    W.resize(n), S.resize((size_t)rows * 4);
    for (size_t i = 0; i < n; i++) W[i] = (uint8_t)rnd();
    for (int r = 0; r < rows; r++) {
      float s = fabsf(rndf(-12, -4));
      memcpy(&S[4 * (size_t)r], &s, 4);
    }
  } else if (fmt == 2) {
    W.resize(n * 4);
    for (size_t i = 0; i < n; i++) {
      float f = rndf(-10, 1);
      memcpy(&W[4 * i], &f, 4);
    }
  } else {
    W.resize(n / 2), S.resize(n / 32);
    for (size_t i = 0; i < n / 2; i++) W[i] = (uint8_t)rnd();
    for (size_t i = 0; i < n / 32; i++) {
      uint32_t v = rnd() % 64;
      S[i] = (uint8_t)(v == 0 ? 0 : v == 1 ? 1 : 100 + v % 40);
    }
  }
}

#endif

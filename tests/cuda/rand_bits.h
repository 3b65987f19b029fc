/* Random test inputs for the GPU tests: a xorshift stream (its seed is the
 * including test's RAND_BITS_SEED, so each test keeps its own inputs) and
 * floats whose every bit is random within a binary exponent range, which
 * reach the rounding cases a uniform draw in [0, 1) never does. */
#ifndef DF_TESTS_CUDA_RAND_BITS_H
#define DF_TESTS_CUDA_RAND_BITS_H

#include <stdint.h>
#include <string.h>

#ifndef RAND_BITS_SEED
#error "define RAND_BITS_SEED before including rand_bits.h"
#endif

static uint64_t rng = RAND_BITS_SEED;

static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}
/* A float with random sign, mantissa and a binary exponent in [lo, hi]. */
static float rndf(int lo, int hi) {
  uint32_t e = (uint32_t)(127 + lo + (int)(rnd() % (uint32_t)(hi - lo + 1)));
  uint32_t u = (rnd() & 0x80000000u) | (e << 23) | (rnd() & 0x7fffffu);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

#endif

/* Deterministic pseudo-random numbers: splitmix64 (seeding, one-off mixing)
 * and xoshiro256** streams seeded from it. The same seed gives the same
 * sequence on every machine; the generator's checkpoint bytes depend on it
 * (tests/unit/test_synth.c pins the published first outputs). */
#ifndef DF_BASE_RNG_H
#define DF_BASE_RNG_H

#include <stdint.h>

/* splitmix64: advances *state and returns the next output. */
uint64_t df_splitmix64(uint64_t *state);

/* A xoshiro256** stream. */
typedef struct df_rng {
  uint64_t s[4];
} df_rng;

/* The four state words are splitmix64's first outputs from seed. */
void df_rng_seed(df_rng *r, uint64_t seed);
/* Seeds from a seed and a name (FNV-1a of the name mixed in), so a stream's
 * values do not depend on what was drawn from other streams before it. */
void df_rng_seed_named(df_rng *r, uint64_t seed, const char *name);
uint64_t df_rng_next(df_rng *r);
/* Uniform in [-a, a) with 2^24 steps: an integer in [-2^23, 2^23) times a*2^-23. */
double df_rng_uniform(df_rng *r, double a);

#endif

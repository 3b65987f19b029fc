/* splitmix64 and xoshiro256** (see rng.h). */
#include "base/rng.h"

uint64_t df_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void df_rng_seed(df_rng *r, uint64_t seed) {
  uint64_t st = seed;
  for (int i = 0; i < 4; i++) r->s[i] = df_splitmix64(&st);
}

void df_rng_seed_named(df_rng *r, uint64_t seed, const char *name) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    h ^= *p;
    h *= 0x100000001b3ull;
  }
  uint64_t st = seed ^ 0x5eed5eed5eed5eedull;
  df_rng_seed(r, df_splitmix64(&st) ^ h);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t df_rng_next(df_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

double df_rng_uniform(df_rng *r, double a) {
  /* one exactly-rounded multiply of an exact integer: the same on every IEEE machine */
  int32_t i = (int32_t)(df_rng_next(r) >> 40) - (1 << 23);
  return (double)i * (a * 0x1p-23);
}


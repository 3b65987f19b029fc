/* The GPU's expf and tanhf (kmath.h), compiled for the host, against this
 * machine's libm over a strided sweep of all 2^32 float bit patterns: the
 * CPU side of the CUDA kernels' bit-identity, run without a GPU (label unit).
 * Exhaustive runs (step 1) found no difference on glibc 2.36 (x86-64, FMA);
 * argument 1 is the step (default 61). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/kmath.h"

int main(int argc, char **argv) {
  uint32_t step = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 61;
  if (!step) step = 1;
  long bad = 0, n = 0;
  /* the two inputs (of 2^32) where an unfused z = x 32/ln2 gives another
   * expf than glibc's FMA build */
  static const uint32_t witness[] = {0x4202422fu, 0xc27c65d9u};
  for (int i = 0; i < 2; i++) {
    float x = df_km_bitsf(witness[i]);
    if (df_km_fbits(expf(x)) != df_km_fbits(df_km_expf(x)) && bad++ < 10)
      printf("x %a: expf %a / %a\n", (double)x, (double)expf(x), (double)df_km_expf(x));
  }
  for (uint64_t i = 0; i < (1ull << 32); i += step, n++) {
    float x = df_km_bitsf((uint32_t)i);
    float e = expf(x), t = tanhf(x), me = df_km_expf(x), mt = df_km_tanhf(x);
    int de = df_km_fbits(e) != df_km_fbits(me) && !(isnan(e) && isnan(me));
    int dt = df_km_fbits(t) != df_km_fbits(mt) && !(isnan(t) && isnan(mt));
    if ((de || dt) && bad++ < 10)
      printf("x %a (%08x): expf %a / %a, tanhf %a / %a\n", (double)x, (unsigned)i, (double)e,
             (double)me, (double)t, (double)mt);
  }
  printf("%ld inputs, %ld differ from libm\n", n, bad);
  return bad ? 1 : 0;
}

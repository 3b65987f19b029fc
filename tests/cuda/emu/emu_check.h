/* The emulation tests' comparison: n floats of the kernel against the
 * reference by memcmp (a NaN equals only the same NaN bits), one line of
 * output each, counted for main's exit status. */
#ifndef DF_TESTS_CUDA_EMU_EMU_CHECK_H
#define DF_TESTS_CUDA_EMU_EMU_CHECK_H

#include <stdio.h>
#include <string.h>

static int failures, checks;

/* extra: further differences the caller found (bytes written outside) */
static void emu_same(const char *what, const float *ref, const float *got, size_t n,
                     size_t extra = 0) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&ref[i], &got[i], 4) && !bad++) first = i;
  checks++;
  if (bad + extra) {
    failures++;
    printf("FAIL %s: %zu of %zu differ", what, bad, n);
    if (bad) printf(", first [%zu] ref %a got %a", first, (double)ref[first], (double)got[first]);
    if (extra) printf(", %zu written outside", extra);
    printf("\n");
  } else
    printf("ok   %s (%zu values)\n", what, n);
}

/* a property the kernel must have, with what was seen */
static inline void emu_true(const char *what, bool ok, const char *seen) {
  checks++;
  if (!ok) failures++;
  printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, ok ? "" : ": ", ok ? "" : seen);
}

static int emu_summary(void) {
  printf("%d of %d checks failed\n", failures, checks);
  return failures ? 1 : 0;
}

#endif

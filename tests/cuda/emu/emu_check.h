/* The emulation tests' comparison: n floats of the kernel against the
 * reference by memcmp, one line of output each, counted for main's exit
 * status. A NaN equals any NaN but the all-ones pattern that marks a y no
 * kernel wrote: which of two NaN operands an add passes on is the machine's
 * choice (IEEE 754 leaves it open; the host's compiler may swap an add's
 * operands, and the GPU returns its one canonical NaN whatever they are),
 * so only where a result is NaN is the order's, not its bits. */
#ifndef DF_TESTS_CUDA_EMU_EMU_CHECK_H
#define DF_TESTS_CUDA_EMU_EMU_CHECK_H

#include <stdio.h>
#include <string.h>

static int failures, checks;

/* extra: further differences the caller found (bytes written outside) */
static void emu_same(const char *what, const float *ref, const float *got, size_t n,
                     size_t extra = 0) {
  size_t bad = 0, first = 0;
  const uint32_t unwritten = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    bool nans = ref[i] != ref[i] && got[i] != got[i] && memcmp(&got[i], &unwritten, 4);
    if (!nans && memcmp(&ref[i], &got[i], 4) && !bad++) first = i;
  }
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

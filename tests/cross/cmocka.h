/* A minimal stand-in for the part of cmocka's API the kernel tests use
 * (tests/unit/test_kernels*.c), for the cross build where no cmocka for the
 * target is installed: unit tests with state, assertions, fail_msg, skip.
 * Written here; same meaning as cmocka's macros, not its code. Each test
 * runs until its first failure (longjmp back to the runner); skip() counts
 * as skipped; the group returns the number of failed tests. */
#ifndef DF_CROSS_CMOCKA_H
#define DF_CROSS_CMOCKA_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef void (*CMUnitTestFunction)(void **state);
typedef int (*CMFixtureFunction)(void **state);

struct CMUnitTest {
  const char *name;
  CMUnitTestFunction test_func;
  CMFixtureFunction setup_func;
  CMFixtureFunction teardown_func;
  void *initial_state;
};

#define cmocka_unit_test(f) {#f, f, NULL, NULL, NULL}

enum { DF_CM_PASS = 0, DF_CM_FAIL = 1, DF_CM_SKIP = 2 };
static jmp_buf df_cm_jmp;

static inline void df_cm_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
static inline void df_cm_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("ERROR: ");
  vprintf(fmt, ap);
  printf("\n%s:%d: error: Failure!\n", file, line);
  va_end(ap);
  longjmp(df_cm_jmp, DF_CM_FAIL);
}

#define fail_msg(...) df_cm_fail(__FILE__, __LINE__, __VA_ARGS__)
#define skip() longjmp(df_cm_jmp, DF_CM_SKIP)
#define print_message(...) printf(__VA_ARGS__)
#define assert_true(c) \
  do { \
    if (!(c)) df_cm_fail(__FILE__, __LINE__, "%s", #c); \
  } while (0)
#define assert_false(c) assert_true(!(c))
#define assert_null(p) assert_true((p) == NULL)
#define assert_non_null(p) assert_true((p) != NULL)
#define assert_ptr_equal(a, b) \
  do { \
    const void *df_a_ = (const void *)(a), *df_b_ = (const void *)(b); \
    if (df_a_ != df_b_) df_cm_fail(__FILE__, __LINE__, "%p != %p", df_a_, df_b_); \
  } while (0)
#define assert_int_equal(a, b) \
  do { \
    intmax_t df_a_ = (intmax_t)(a), df_b_ = (intmax_t)(b); \
    if (df_a_ != df_b_) df_cm_fail(__FILE__, __LINE__, "%jd != %jd", df_a_, df_b_); \
  } while (0)
#define assert_string_equal(a, b) \
  do { \
    const char *df_a_ = (a), *df_b_ = (b); \
    if (strcmp(df_a_, df_b_)) df_cm_fail(__FILE__, __LINE__, "\"%s\" != \"%s\"", df_a_, df_b_); \
  } while (0)
#define assert_memory_equal(a, b, n) \
  do { \
    if (memcmp((a), (b), (n))) df_cm_fail(__FILE__, __LINE__, "%s and %s differ", #a, #b); \
  } while (0)

/* One test; its own frame holds the setjmp, so the runner's counters are
 * never live across a longjmp. */
static inline int df_cm_run_one(const struct CMUnitTest *t) {
  void *state = t->initial_state;
  int r = setjmp(df_cm_jmp);
  if (r == 0) {
    if (t->setup_func && t->setup_func(&state)) return DF_CM_FAIL;
    t->test_func(&state);
    if (t->teardown_func && t->teardown_func(&state)) return DF_CM_FAIL;
  }
  return r;
}

static inline int df_cm_run(const struct CMUnitTest *t, size_t n) {
  int failed = 0, skipped = 0;
  printf("[==========] Running %zu test(s).\n", n);
  for (size_t i = 0; i < n; i++) {
    printf("[ RUN      ] %s\n", t[i].name);
    fflush(stdout);
    int r = df_cm_run_one(&t[i]);
    if (r == DF_CM_FAIL) failed++;
    if (r == DF_CM_SKIP) skipped++;
    printf("%s %s\n", r == DF_CM_PASS ? "[       OK ]" : r == DF_CM_SKIP ? "[  SKIPPED ]" : "[  FAILED  ]",
           t[i].name);
    fflush(stdout);
  }
  printf("[==========] %zu test(s) run: %zu passed, %d skipped, %d failed.\n", n,
         n - (size_t)failed - (size_t)skipped, skipped, failed);
  return failed;
}

#define cmocka_run_group_tests(tests, setup, teardown) \
  ((void)(setup), (void)(teardown), df_cm_run((tests), sizeof(tests) / sizeof((tests)[0])))

#endif

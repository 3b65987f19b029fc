/* The trained nano-K3 opened for the speculation and state tests (test_spec.c,
 * test_spec_sampling.c, test_state.c) and their prompt: cmocka tests, one definition each. */
#ifndef DF_TESTS_NANO_ENGINE_H
#define DF_TESTS_NANO_ENGINE_H

#include <stdio.h>
#include <stdlib.h>

#include "engine/engine.h"

static const int PROMPT[] __attribute__((unused)) = {698, 608, 258, 3728, 2783, 3705, 1071, 296, 489, 2713, 46,
                             363, 626, 304, 260, 1447, 307, 2256, 46, 363, 626};
#define NP ((int)(sizeof PROMPT / sizeof *PROMPT))

/* f64: --precision f64 (test_state.c). */
static inline df_engine *open_nano_prec(int threads, long cache_mb, const char *draft, int f64) {
  const char *src = getenv("DF_SRC");
  if (!src) fail_msg("DF_SRC is not set (run through ctest)");
  static char dir[1024];
  snprintf(dir, sizeof dir, "%s/models/nano-k3", src);
  df_engine_opts o;
  df_engine_opts_default(&o);
  o.model_dir = dir;
  o.threads = threads;
  o.store.heat_path = ""; /* the committed model folder stays as it is */
  if (cache_mb >= 0) o.store.cache_mb = cache_mb;
  o.draft = draft;
  o.f64 = f64;
  df_engine *en;
  df_err e;
  if (df_engine_open(&en, &o, &e)) fail_msg("engine open: %s", e.msg);
  return en;
}

static inline df_engine *open_nano(int threads, long cache_mb, const char *draft) {
  return open_nano_prec(threads, cache_mb, draft, 0);
}

#endif

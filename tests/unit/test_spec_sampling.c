/* Speculative sampling (engine/gen.c, df_sample_verify) on the trained
 * nano-K3: the ids at generated positions 1 and 2 (the first drawn inside
 * verify blocks) against plain sampling, a two-sample chi-square at p = 1e-4
 * (bound below) with a power check, and seeded runs reproducible; with the
 * self draft and with the trained nano-DSpark (models/nano-dspark, K 7). A
 * statistical test, labelled `slow`: the sanitizer build skips it (its 4 x 600
 * generations take minutes there; nothing in it is about memory). */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/util.h"
#include "engine/engine.h"

#include "nano_engine.h"

/* Two-sample chi-square over the ids at one generated position: bins with
 * fewer than 10 draws in both samples together are pooled. Returns the
 * statistic and its degrees of freedom. */
static double chi2(const int *a, const int *b, int n, int V, int *dof) {
  int *ca = calloc((size_t)V, sizeof(int)), *cb = calloc((size_t)V, sizeof(int));
  for (int i = 0; i < n; i++) ca[a[i]]++, cb[b[i]]++;
  double x = 0;
  int bins = 0, ra = 0, rb = 0;
  for (int v = 0; v < V; v++) {
    if (ca[v] + cb[v] < 10) {
      ra += ca[v], rb += cb[v];
      continue;
    }
    double d = ca[v] - cb[v];
    x += d * d / (ca[v] + cb[v]);
    bins++;
  }
  if (ra + rb > 0) {
    double d = ra - rb;
    x += d * d / (ra + rb);
    bins++;
  }
  free(ca), free(cb);
  *dof = bins - 1;
  return x;
}

/* The chi-square quantile at p = 1e-4 (Wilson-Hilferty: accurate to a few
 * percent for dof >= 3, z = 3.719). */
static double chi2_crit(int dof) {
  double k = dof, z = 3.719, t = 1 - 2 / (9 * k) + z * sqrt(2 / (9 * k));
  return k * t * t * t;
}

#define SEEDS 600
#define SPOS 3 /* generated ids per draw; position 1.. come from verify blocks */

/* prompt NULL: from snap (the prompt prefilled); else snap is the empty
 * state and each run prefills the prompt (a DSpark needs its taps). Returns
 * the drafts proposed over all runs. */
static long sample_runs_from(df_session *s, const df_session_snap *snap, const int *prompt, int np,
                             df_gen_opts *go, float temp, int *out) {
  static df_sample_opts so; /* go keeps a pointer to it */
  df_sample_opts_default(&so);
  so.temperature = temp;
  go->sampling = &so;
  long drafted = 0;
  for (int i = 0; i < SEEDS; i++) {
    df_session_restore(s, snap);
    go->seed = 1000003u * (uint64_t)i + 7;
    int *ids, n;
    df_err e;
    df_gen_stats gs;
    if (df_generate(s, prompt, prompt ? np : 0, go, &ids, &n, &gs, &e)) fail_msg("generate: %s", e.msg);
    assert_true(n >= SPOS); /* (go->max_new may run past the ids compared) */
    for (int j = 0; j < SPOS; j++) out[j * SEEDS + i] = ids[j];
    free(ids);
    drafted += gs.n_drafted;
  }
  return drafted;
}

static void sample_runs(df_session *s, const df_session_snap *snap, df_gen_opts *go, float temp,
                        int *out) {
  sample_runs_from(s, snap, NULL, 0, go, temp, out);
}

/* The ids at positions 1.. of spec against plain: below the p = 1e-4 bound. */
static void check_same(const int *plain, const int *spec, int V, const char *what) {
  for (int j = 1; j < SPOS; j++) {
    int dof;
    double x = chi2(plain + j * SEEDS, spec + j * SEEDS, SEEDS, V, &dof);
    printf("[ spec ] %s, id %d: chi2 plain vs speculative %.1f (dof %d, p=1e-4 bound %.1f)\n", what, j,
           x, dof, chi2_crit(dof));
    assert_true(x < chi2_crit(dof));
  }
}

static void test_sampling_distribution(void **st) {
  (void)st;
  df_engine *en = open_nano(1, -1, NULL);
  int V = df_engine_config(en)->vocab;
  df_session *s = df_session_new(en);
  df_err e;
  df_session_snap *empty = df_session_snapshot(s);
  assert_int_equal(df_session_forward(s, PROMPT, NP, NULL, NULL, &e), 0);
  df_session_snap *snap = df_session_snapshot(s);
  df_gen_opts go;
  df_gen_opts_default(&go);
  go.max_new = SPOS;
  int *plain = malloc(sizeof(int) * SEEDS * SPOS), *spec = malloc(sizeof(int) * SEEDS * SPOS);
  int *hot = malloc(sizeof(int) * SEEDS * SPOS);
  go.no_draft = 1;
  sample_runs(s, snap, &go, 0.9f, plain);
  sample_runs(s, snap, &go, 1.2f, hot);
  df_draft *ds = df_draft_new_self(en);
  go.no_draft = 0;
  go.draft = ds;
  go.draft_max = 3;
  sample_runs(s, snap, &go, 0.9f, spec);
  for (int j = 1; j < SPOS; j++) {
    int dof, dof2;
    double x = chi2(plain + j * SEEDS, spec + j * SEEDS, SEEDS, V, &dof);
    double y = chi2(plain + j * SEEDS, hot + j * SEEDS, SEEDS, V, &dof2);
    printf("[ spec ] id %d: chi2 plain vs speculative %.1f (dof %d, p=1e-4 bound %.1f); "
           "plain T 0.9 vs 1.2 %.1f (dof %d, bound %.1f)\n",
           j, x, dof, chi2_crit(dof), y, dof2, chi2_crit(dof2));
    assert_true(x < chi2_crit(dof));
    /* the test can tell a changed distribution at this sample size */
    assert_true(y > chi2_crit(dof2));
  }
  /* and a seed gives the same ids every time */
  int *again = malloc(sizeof(int) * SEEDS * SPOS);
  sample_runs(s, snap, &go, 0.9f, again);
  assert_memory_equal(again, spec, sizeof(int) * SEEDS * SPOS);
  /* K3's own drafter, trained: 9 new ids, so the first block holds up to 7
   * proposals (positions 1..7 drawn inside it; 1 and 2 compared), each run
   * prefilling the prompt with the draft attached */
  const char *src = getenv("DF_SRC");
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/models/nano-dspark", src);
  df_draft *dk = df_draft_new_dspark(en, dir, 0, &e);
  if (!dk) fail_msg("nano-dspark: %s", e.msg);
  go.draft = dk;
  go.draft_max = 7;
  go.max_new = 9;
  long drafted = sample_runs_from(s, empty, PROMPT, NP, &go, 0.9f, spec);
  printf("[ spec ] nano-DSpark: %ld drafts proposed over %d runs\n", drafted, SEEDS);
  /* it drafted whole blocks in every run, not a plain run in disguise */
  assert_true(drafted >= 4 * SEEDS);
  check_same(plain, spec, V, "nano-DSpark K 7");
  sample_runs_from(s, empty, PROMPT, NP, &go, 0.9f, again);
  assert_memory_equal(again, spec, sizeof(int) * SEEDS * SPOS);
  df_draft_free(dk);
  df_session_snap_free(empty);
  free(again), free(plain), free(spec), free(hot);
  df_draft_free(ds);
  df_session_snap_free(snap);
  df_session_free(s);
  df_engine_close(en);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sampling_distribution),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

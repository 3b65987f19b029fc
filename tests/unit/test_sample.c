/* The sampling policy (engine/sample.h) against hand-computed references on
 * small known distributions: greedy, the exact nucleus, top-k, min-p, the
 * penalties, logit bias, seeded determinism and log-probabilities. Each
 * truncation test checks the exact id the policy must draw for a stream of
 * seeds (reference: the kept candidates' mass and the documented uniform),
 * so a change of policy (say top_p ignored) fails. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/sample.h"

#define V 6
/* probabilities 0.40 0.25 0.15 0.10 0.06 0.04 at temperature 1 */
static const double P[V] = {0.40, 0.25, 0.15, 0.10, 0.06, 0.04};
static float L[V];

static void init_logits(void) {
  for (int i = 0; i < V; i++) L[i] = (float)log(P[i]);
}

/* Reference draw: u over the kept ids' (unnormalised, as the policy
 * computes them) weights, in the given order. */
static int ref_draw(uint64_t seed, const int *kept, int n, const float *lg, float temp) {
  float mx = lg[0];
  for (int i = 1; i < V; i++)
    if (lg[i] > mx) mx = lg[i];
  float w[V];
  double sum = 0;
  for (int i = 0; i < n; i++) {
    w[i] = (float)exp(((double)lg[kept[i]] - mx) / temp);
    sum += w[i];
  }
  uint64_t x = seed;
  double u = (double)(df_sample_splitmix(&x) >> 11) * 0x1p-53 * sum, acc = 0;
  for (int i = 0; i < n; i++) {
    acc += w[i];
    if (u < acc) return kept[i];
  }
  return kept[n - 1];
}

static void check_policy(const df_sample_opts *o, const int *kept, int n) {
  df_sampler *s = df_sampler_new(V);
  int hits[V] = {0};
  for (uint64_t seed = 1; seed <= 4000; seed++) {
    uint64_t rng = seed * 7919;
    int id = df_sample_pick(s, L, o, NULL, 0, 0, &rng);
    assert_int_equal(id, ref_draw(seed * 7919, kept, n, L, o->temperature));
    hits[id]++;
  }
  /* every kept id is drawn at some point, nothing else ever */
  for (int i = 0; i < V; i++) {
    int in = 0;
    for (int k = 0; k < n; k++) in |= kept[k] == i;
    if (in) assert_true(hits[i] > 0);
    else assert_int_equal(hits[i], 0);
  }
  df_sampler_free(s);
}

static void test_greedy(void **st) {
  (void)st;
  init_logits();
  df_sample_opts o;
  df_sample_opts_default(&o);
  df_sampler *s = df_sampler_new(V);
  uint64_t rng = 5, r0 = rng;
  assert_int_equal(df_sample_pick(s, L, &o, NULL, 0, 0, &rng), 0);
  assert_true(rng == r0); /* greedy draws nothing */
  float tie[V] = {1, 3, 3, 0, 0, 0};
  assert_int_equal(df_sample_pick(s, tie, &o, NULL, 0, 0, &rng), 1);
  /* truncation settings do not change greedy */
  o.top_k = 3;
  o.top_p = 0.1f;
  o.min_p = 0.9f;
  assert_int_equal(df_sample_pick(s, tie, &o, NULL, 0, 0, &rng), 1);
  df_sampler_free(s);
}

static void test_full_distribution(void **st) {
  (void)st;
  init_logits();
  df_sample_opts o;
  df_sample_opts_default(&o);
  o.temperature = 1.0f;
  int all[V] = {0, 1, 2, 3, 4, 5}; /* no truncation: id order */
  check_policy(&o, all, V);
  o.temperature = 0.5f;
  check_policy(&o, all, V);
}

static void test_top_p(void **st) {
  (void)st;
  init_logits();
  df_sample_opts o;
  df_sample_opts_default(&o);
  o.temperature = 1.0f;
  /* 0.40 + 0.25 = 0.65 < 0.70 <= 0.80: the nucleus is {0, 1, 2} */
  o.top_p = 0.70f;
  int k3[] = {0, 1, 2};
  check_policy(&o, k3, 3);
  o.top_p = 0.30f; /* the first already reaches it */
  int k1[] = {0};
  check_policy(&o, k1, 1);
  o.top_p = 0.95f; /* 0.90 < 0.95 <= 0.96 */
  int k5[] = {0, 1, 2, 3, 4};
  check_policy(&o, k5, 5);
}

static void test_top_k_min_p(void **st) {
  (void)st;
  init_logits();
  df_sample_opts o;
  df_sample_opts_default(&o);
  o.temperature = 1.0f;
  o.top_k = 2;
  int k2[] = {0, 1};
  check_policy(&o, k2, 2);
  /* top_k then top_p over the kept mass: 0.40 / 0.80 = 0.5 < 0.6 */
  o.top_k = 4;
  o.top_p = 0.6f;
  int k2b[] = {0, 1};
  check_policy(&o, k2b, 2);
  df_sample_opts_default(&o);
  o.temperature = 1.0f;
  o.min_p = 0.3f; /* p >= 0.12: 0.40 0.25 0.15 */
  int k3[] = {0, 1, 2};
  check_policy(&o, k3, 3);
  o.min_p = 0.7f; /* p >= 0.28 */
  int k1[] = {0};
  check_policy(&o, k1, 1);
}

static void test_penalties(void **st) {
  (void)st;
  df_sample_opts o;
  df_sampler *s = df_sampler_new(V);
  uint64_t rng = 1;
  float lg[V] = {3.0f, 2.5f, -1.0f, -1.2f, 0, 0};
  /* presence/frequency count the generated ids only (the last ngen of ctx) */
  int ctx[] = {0, 0, 0};
  df_sample_opts_default(&o);
  o.frequency_penalty = 0.3f; /* two generated 0s: 3.0 - 0.6 = 2.4 < 2.5 */
  assert_int_equal(df_sample_pick(s, lg, &o, ctx, 3, 2, &rng), 1);
  assert_int_equal(df_sample_pick(s, lg, &o, ctx, 3, 1, &rng), 0); /* 2.7 */
  assert_int_equal(df_sample_pick(s, lg, &o, ctx, 3, 0, &rng), 0); /* prompt only */
  df_sample_opts_default(&o);
  o.presence_penalty = 0.4f; /* once however many: 2.6 */
  assert_int_equal(df_sample_pick(s, lg, &o, ctx, 3, 3, &rng), 0);
  o.presence_penalty = 0.6f; /* 2.4 */
  assert_int_equal(df_sample_pick(s, lg, &o, ctx, 3, 3, &rng), 1);
  /* repeat penalty (llama.cpp): positive logits divided, negative multiplied,
   * over the last repeat_last_n ids of the whole context, once per id */
  df_sample_opts_default(&o);
  o.repeat_penalty = 1.25f; /* 3.0 / 1.25 = 2.4 < 2.5 */
  assert_int_equal(df_sample_pick(s, lg, &o, ctx, 3, 0, &rng), 1);
  int ctx2[] = {0, 5, 5};
  o.repeat_last_n = 2; /* 0 is outside the window */
  assert_int_equal(df_sample_pick(s, lg, &o, ctx2, 3, 0, &rng), 0);
  /* negative: -1.0 * 1.25 = -1.25 < -1.2; only 2 and 3 left in the race */
  float neg[V] = {-1.0f, -1.2f, -9, -9, -9, -9};
  int ctx3[] = {0};
  o.repeat_last_n = 64;
  assert_int_equal(df_sample_pick(s, neg, &o, ctx3, 1, 0, &rng), 1);
  /* logit bias */
  df_sample_opts_default(&o);
  df_sample_bias b = {3, 4.5f};
  o.bias = &b;
  o.nbias = 1;
  assert_int_equal(df_sample_pick(s, lg, &o, NULL, 0, 0, &rng), 3); /* -1.2 + 4.5 = 3.3 */
  /* the caller's logits are left as they were */
  assert_true(lg[0] == 3.0f && lg[3] == -1.2f);
  df_sampler_free(s);
}

static void test_seeded(void **st) {
  (void)st;
  init_logits();
  df_sample_opts o;
  df_sample_opts_default(&o);
  o.temperature = 0.8f;
  o.top_p = 0.9f;
  df_sampler *s = df_sampler_new(V);
  int a[64], b[64], c[64];
  uint64_t r1 = 42, r2 = 42, r3 = 43;
  for (int i = 0; i < 64; i++) a[i] = df_sample_pick(s, L, &o, NULL, 0, 0, &r1);
  for (int i = 0; i < 64; i++) b[i] = df_sample_pick(s, L, &o, NULL, 0, 0, &r2);
  for (int i = 0; i < 64; i++) c[i] = df_sample_pick(s, L, &o, NULL, 0, 0, &r3);
  assert_memory_equal(a, b, sizeof a);
  assert_true(memcmp(a, c, sizeof a) != 0);
  df_sampler_free(s);
}

static void test_logprobs(void **st) {
  (void)st;
  init_logits();
  int ids[3];
  double lp[3];
  double l1 = df_sample_logprobs(L, V, 1, 3, ids, lp);
  assert_true(fabs(l1 - log(0.25)) < 1e-6);
  assert_int_equal(ids[0], 0);
  assert_int_equal(ids[1], 1);
  assert_int_equal(ids[2], 2);
  assert_true(fabs(lp[0] - log(0.40)) < 1e-6);
  assert_true(fabs(lp[2] - log(0.15)) < 1e-6);
  float tie[V] = {0, 2, 2, 1, 2, 0};
  df_sample_logprobs(tie, V, 0, 3, ids, lp);
  assert_int_equal(ids[0], 1);
  assert_int_equal(ids[1], 2);
  assert_int_equal(ids[2], 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_greedy),     cmocka_unit_test(test_full_distribution),
      cmocka_unit_test(test_top_p),      cmocka_unit_test(test_top_k_min_p),
      cmocka_unit_test(test_penalties),  cmocka_unit_test(test_seeded),
      cmocka_unit_test(test_logprobs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

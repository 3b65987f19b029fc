/* The router's top-k (model/router.c) against the rule of kimi-k3.md 5.4,
 * with a reference written here from the rule (sort by biased score
 * descending, then id ascending; take k): crafted exact ties and near-ties
 * against the correction bias, the bias selecting but never weighting, and
 * random rows with many exact ties. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/router.h"

static df_config cfg(int E, int K, int norm, float scale) {
  df_config c;
  memset(&c, 0, sizeof c);
  c.n_experts = E;
  c.top_k = K;
  c.norm_topk_prob = norm;
  c.routed_scale = scale;
  return c;
}

/* ---- the reference ---- */
static const float *g_key;
static int by_rule(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  if (g_key[x] != g_key[y]) return g_key[x] > g_key[y] ? -1 : 1;
  return x - y; /* ties: the lower id wins */
}
static int by_id(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void ref_select(const df_config *c, const float *sc, const float *bias, int *ids, float *w) {
  int E = c->n_experts, K = c->top_k;
  float *key = malloc(sizeof(float) * (size_t)E);
  int *ord = malloc(sizeof(int) * (size_t)E);
  for (int e = 0; e < E; e++) key[e] = sc[e] + bias[e], ord[e] = e;
  g_key = key;
  qsort(ord, (size_t)E, sizeof *ord, by_rule);
  memcpy(ids, ord, sizeof(int) * (size_t)K);
  qsort(ids, (size_t)K, sizeof *ids, by_id);
  double sum = 0;
  for (int i = 0; i < K; i++) sum += sc[ids[i]];
  for (int i = 0; i < K; i++) w[i] = (float)((c->norm_topk_prob ? sc[ids[i]] / sum : sc[ids[i]]) * c->routed_scale);
  free(key);
  free(ord);
}

static void expect_ids(const int *got, const int *want, int k) {
  for (int i = 0; i < k; i++)
    if (got[i] != want[i]) fail_msg("slot %d: expert %d, want %d", i, got[i], want[i]);
}

/* Every score equal, no bias: the k lowest ids. */
static void test_exact_ties_go_to_lower_ids(void **st) {
  (void)st;
  df_config c = cfg(8, 3, 1, 1.0f);
  float sc[8], bias[8] = {0};
  for (int i = 0; i < 8; i++) sc[i] = 0.5f;
  int ids[3];
  float w[3];
  df_router_select(&c, sc, bias, ids, w);
  expect_ids(ids, (int[]){0, 1, 2}, 3);
  for (int i = 0; i < 3; i++) assert_float_equal(w[i], 1.0f / 3, 1e-7);
  /* a tie at the boundary: 5 > everything, then 1, 4 and 6 tie for two places */
  float s2[8] = {0.1f, 0.3f, 0.1f, 0.1f, 0.3f, 0.9f, 0.3f, 0.1f};
  df_router_select(&c, s2, bias, ids, w);
  expect_ids(ids, (int[]){1, 4, 5}, 3);
}

/* Ties made by the bias: equal biased scores from different raw scores. */
static void test_bias_made_ties(void **st) {
  (void)st;
  df_config c = cfg(6, 2, 1, 1.0f);
  /* biased: e0 0.25+0.25 = 0.5, e3 0.5+0 = 0.5, e5 0.375+0.125 = 0.5 (all exact
   * in binary), the rest lower: the two lowest ids of the tie, 0 and 3 */
  float sc[6] = {0.25f, 0.4f, 0.1f, 0.5f, 0.2f, 0.375f};
  float bias[6] = {0.25f, 0.0f, 0.0f, 0.0f, 0.0f, 0.125f};
  int ids[2];
  float w[2];
  df_router_select(&c, sc, bias, ids, w);
  expect_ids(ids, (int[]){0, 3}, 2);
  /* the weights are the unbiased scores renormalised: 0.25 : 0.5 */
  assert_float_equal(w[0], 0.25f / 0.75f, 1e-7);
  assert_float_equal(w[1], 0.5f / 0.75f, 1e-7);
}

/* Near-ties: one ulp of biased score decides, whichever way the bias points. */
static void test_near_ties_against_the_bias(void **st) {
  (void)st;
  df_config c = cfg(4, 1, 0, 2.5f);
  float sc[4] = {0.5f, 0.4f, 0.3f, 0.2f}, bias[4] = {0};
  /* e1 biased one ulp above e0: e1 wins although its raw score is lower */
  bias[1] = nextafterf(0.5f, 1.0f) - 0.4f;
  assert_true(sc[1] + bias[1] > sc[0] + bias[0]);
  int id;
  float w;
  df_router_select(&c, sc, bias, &id, &w);
  assert_int_equal(id, 1);
  /* the weight is its unbiased score (norm off) times the scale */
  assert_float_equal(w, 0.4f * 2.5f, 1e-7);
  /* one ulp below e0: e0 keeps it */
  bias[1] = nextafterf(0.5f, 0.0f) - 0.4f;
  assert_true(sc[1] + bias[1] < sc[0] + bias[0]);
  df_router_select(&c, sc, bias, &id, &w);
  assert_int_equal(id, 0);
  assert_float_equal(w, 0.5f * 2.5f, 1e-7);
  /* exactly equal: the lower id */
  bias[1] = 0.5f - 0.4f;
  if (sc[1] + bias[1] == sc[0] + bias[0]) {
    df_router_select(&c, sc, bias, &id, &w);
    assert_int_equal(id, 0);
  }
  /* a negative bias pushes the best raw score out */
  float b2[4] = {-0.3f, 0, 0, 0};
  df_router_select(&c, sc, b2, &id, &w);
  assert_int_equal(id, 1);
}

/* Random rows on a coarse grid (many exact ties), against the reference. */
static void test_matches_reference_with_many_ties(void **st) {
  (void)st;
  uint64_t x = 0x243F6A8885A308D3ull;
  for (int trial = 0; trial < 2000; trial++) {
    int E = 4 + trial % 61, K = 1 + trial % (E < 16 ? E : 16);
    df_config c = cfg(E, K, trial % 3 != 0, trial % 2 ? 1.0f : 2.0f);
    float sc[64], bias[64], w[16], rw[16];
    int ids[16], rids[16];
    for (int e = 0; e < E; e++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      sc[e] = (float)((x >> 33) % 8) / 8.0f + 0.0625f; /* 8 values: ties everywhere */
      bias[e] = trial % 4 == 0 ? 0.0f : (float)((int)((x >> 20) % 5) - 2) / 16.0f;
    }
    df_router_select(&c, sc, bias, ids, w);
    ref_select(&c, sc, bias, rids, rw);
    for (int i = 0; i < K; i++) {
      if (ids[i] != rids[i])
        fail_msg("trial %d (E %d K %d) slot %d: expert %d, reference %d", trial, E, K, i, ids[i],
                 rids[i]);
      if (fabsf(w[i] - rw[i]) > 1e-6f * fabsf(rw[i]) + 1e-7f)
        fail_msg("trial %d slot %d: weight %g, reference %g", trial, i, w[i], rw[i]);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exact_ties_go_to_lower_ids),
      cmocka_unit_test(test_bias_made_ties),
      cmocka_unit_test(test_near_ties_against_the_bias),
      cmocka_unit_test(test_matches_reference_with_many_ties),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

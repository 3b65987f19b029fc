/* The GPU's memory plan (plan.h, df_plan_gpu_make) as a pure function:
 * which spine units are kept on the device (all when they fit, else
 * largest first with ties to the lower index, pinned here on hand-made
 * sizes so a change of policy fails), the routed experts' share (at least
 * one token's batch of a layer, then the rest), the per-use buffers (and
 * the tier giving back what the device beyond it lacks), invariants over a
 * sweep of budgets, the K3 unit sizes against the RAM planner's, the
 * sequence state kept beside the tier, and the summaries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "plan/plan.h"
#include "synth/synth.h"

#define NU 9 /* tiny: 8 layers + head */
#define REC 10240 /* a multiple of the tier's alignment */

static df_config cfg;

static int setup(void **st) {
  (void)st;
  df_synth_opts o = {.preset = "tiny", .seed = 1};
  df_err e;
  return df_synth_config(&o, &cfg, &e) ? -1 : 0;
}

static df_plan_gpu_in in_of(const uint64_t *ub, const uint64_t *big, uint64_t budget,
                            uint64_t outside) {
  int nmoe = cfg.n_layers - cfg.first_k_dense;
  df_plan_gpu_in in = {.cfg = &cfg, .nunits = NU, .unit_bytes = ub, .unit_largest = big,
                       .expert_record_bytes = REC,
                       .expert_total_bytes = (uint64_t)REC * (uint64_t)cfg.n_experts * (uint64_t)nmoe,
                       .budget = budget, .outside = outside, .max_rows = 4};
  return in;
}

static uint64_t kmin(void) {
  return (uint64_t)(cfg.top_k < cfg.n_experts ? cfg.top_k : cfg.n_experts) * REC;
}

/* Sizes with a tie (units 1 and 2) and a unit order unlike the size
 * order, so first-fit, smallest-first or ties-to-the-higher-index each
 * choose differently. */
static const uint64_t U[NU] = {300000, 500000, 500000, 200000, 100000, 50000, 50000, 20000, 400000};

static void test_policy_pinned(void **st) {
  (void)st;
  uint64_t big[NU];
  for (int u = 0; u < NU; u++) big[u] = U[u] / 2;
  static const struct {
    uint64_t room;
    uint8_t on[NU];
  } want[] = {
      /* 500 (unit 1, the lower of the tie) + 400 (head); nothing else fits */
      /* 500 (unit 1, the lower of the tie) + 400 (head) + 50 (unit 5, the lower) */
      {950000, {0, 1, 0, 0, 0, 1, 0, 0, 1}},
      /* 500 + 500; head, 300 and 200 do not fit; 100 and 50 do */
      {1150000, {0, 1, 1, 0, 1, 1, 0, 0, 0}},
      /* 500; then only 100 and 20 fit */
      {620000, {0, 1, 0, 0, 1, 0, 0, 1, 0}},
      {0, {0}},
  };
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    df_plan_gpu_in in = in_of(U, big, want[k].room + kmin(), DF_PLAN_GPU_UNKNOWN);
    df_plan_gpu g;
    df_plan_gpu_make(&g, &in);
    uint64_t got = 0;
    for (int u = 0; u < NU; u++) {
      if (g.on_gpu[u] != want[k].on[u]) fail_msg("room %llu: unit %d on_gpu %d, want %d",
                                                 (unsigned long long)want[k].room, u, g.on_gpu[u],
                                                 want[k].on[u]);
      got += g.on_gpu[u] ? U[u] : 0;
    }
    assert_int_equal(g.spine_bytes, got);
    assert_int_equal(g.keep_cap, got); /* the tier is capped at exactly what was chosen */
    assert_int_equal(g.usable, g.budget);
    assert_int_equal(g.expert_bytes, g.usable - got);
    assert_int_equal(g.expert_records, g.expert_bytes / REC);
    assert_true(g.expert_bytes >= kmin());
    df_plan_gpu_free(&g);
  }
}

static void test_all_fit(void **st) {
  (void)st;
  uint64_t big[NU], total = 0;
  for (int u = 0; u < NU; u++) big[u] = U[u] / 2, total += U[u];
  df_plan_gpu_in in = in_of(U, big, total + kmin(), DF_PLAN_GPU_UNKNOWN);
  df_plan_gpu g;
  df_plan_gpu_make(&g, &in);
  assert_int_equal(g.n_gpu, NU);
  assert_int_equal(g.spine_bytes, total);
  assert_true(g.keep_cap == UINT64_MAX); /* nothing to cap: a draft's matrices may be kept too */
  assert_int_equal(g.expert_bytes, kmin());
  assert_int_equal(g.peruse_weights, 0); /* every matrix kept: no per-use weight buffer */
  df_plan_gpu_free(&g);
  /* one byte less: the spine no longer fits whole; the experts keep their batch */
  in.budget--;
  df_plan_gpu_make(&g, &in);
  assert_int_equal(g.n_gpu, NU - 1);
  assert_int_equal(g.on_gpu[7], 0); /* the smallest goes: 20000 */
  assert_true(g.expert_bytes >= kmin());
  assert_int_equal(g.peruse_weights, U[7] / 2 + U[7] / 8); /* its largest matrix, grown a quarter */
  df_plan_gpu_free(&g);
  /* far more than everything: the experts' share stops at all of them */
  in.budget = total + in.expert_total_bytes * 3;
  df_plan_gpu_make(&g, &in);
  assert_int_equal(g.expert_bytes, in.expert_total_bytes);
  assert_int_equal(g.expert_records, g.expert_records_all);
  df_plan_gpu_free(&g);
}

/* The device beyond the tier too small for the per-use buffers: the tier
 * gives the difference back, and keeps less. */
static void test_given_back(void **st) {
  (void)st;
  uint64_t big[NU], total = 0;
  for (int u = 0; u < NU; u++) big[u] = U[u] / 2, total += U[u];
  df_plan_gpu_in in = in_of(U, big, total + kmin(), DF_PLAN_GPU_UNKNOWN);
  df_plan_gpu g;
  df_plan_gpu_make(&g, &in);
  uint64_t need = g.peruse_bytes;
  assert_true(need > 0);
  assert_int_equal(g.given_back, 0);
  df_plan_gpu_free(&g);
  in.outside = need; /* exactly enough */
  df_plan_gpu_make(&g, &in);
  assert_int_equal(g.given_back, 0);
  assert_int_equal(g.n_gpu, NU);
  df_plan_gpu_free(&g);
  in.outside = need / 2;
  df_plan_gpu_make(&g, &in);
  /* the tier gives up the half and more: a unit not kept needs the weight buffer */
  assert_true(g.given_back > need - need / 2);
  assert_int_equal(g.given_back, g.peruse_bytes - in.outside);
  assert_int_equal(g.usable, g.budget - g.given_back);
  assert_true(g.n_gpu < NU);
  uint64_t w = 0;
  for (int u = 0; u < NU; u++)
    if (!g.on_gpu[u] && big[u] > w) w = big[u];
  assert_true(g.peruse_weights >= w + w / 4);
  assert_true(g.spine_bytes + g.expert_bytes <= g.usable);
  df_plan_gpu_free(&g);
}

/* The sequence state the device keeps (df_plan_gpu_state_bytes) from the
 * config's own sizes: KDA matrices and conv windows per KDA layer, the
 * latent cache's rows per MLA layer; marks are KDA states, --draft self a
 * second sequence. Beside the per-use buffers it comes out of the tier
 * when the device beyond it is short, byte for byte. */
static void test_state(void **st) {
  (void)st;
  const df_config *c = &cfg;
  uint64_t kda = (uint64_t)c->n_kda * 4 *
                 ((uint64_t)c->kda_heads * c->kda_head_dim * c->kda_head_dim +
                  3 * (uint64_t)(c->kda_conv - 1) * c->kda_heads * c->kda_head_dim);
  uint64_t row = (uint64_t)c->n_mla * 4 * (uint64_t)(c->kv_lora_rank + c->qk_rope_dim);
  assert_true(kda > 0 && row > 0);
  assert_int_equal(df_plan_gpu_state_bytes(c, 100, 0, 0), kda + 100 * row);
  assert_int_equal(df_plan_gpu_state_bytes(c, 100, 4, 0), 5 * kda + 100 * row);
  assert_int_equal(df_plan_gpu_state_bytes(c, 100, 1, 1), 3 * kda + 200 * row);
  uint64_t big[NU], total = 0;
  for (int u = 0; u < NU; u++) big[u] = U[u] / 2, total += U[u];
  df_plan_gpu_in in = in_of(U, big, total + kmin() + 500000, DF_PLAN_GPU_UNKNOWN);
  df_plan_gpu g;
  df_plan_gpu_make(&g, &in);
  uint64_t need = g.peruse_bytes, usable = g.usable;
  df_plan_gpu_free(&g);
  in.outside = need, in.state_bytes = 300000; /* room for the buffers, none for the state */
  df_plan_gpu_make(&g, &in);
  assert_int_equal(g.state_bytes, 300000);
  assert_int_equal(g.given_back, 300000);
  assert_int_equal(g.usable, usable - 300000);
  assert_int_equal(g.n_gpu, NU); /* the spine still fits; the experts' share gave way */
  char *j = df_plan_gpu_json(&g);
  json_t *o = json_loads(j, 0, NULL);
  assert_int_equal(json_integer_value(json_object_get(o, "state_bytes")), 300000);
  json_decref(o);
  free(j);
  char *t = df_plan_gpu_text(&g);
  assert_non_null(strstr(t, "sequence state 0.3 MB"));
  free(t);
  df_plan_gpu_free(&g);
  in.outside = need + 300000; /* room for both */
  df_plan_gpu_make(&g, &in);
  assert_int_equal(g.given_back, 0);
  df_plan_gpu_free(&g);
}

/* Invariants over budgets from nothing to everything, with and without a
 * known device: within the budget, maximal, the experts' minimum first. */
static void test_sweep(void **st) {
  (void)st;
  uint64_t ub[NU], big[NU], total = 0;
  for (int u = 0; u < NU; u++) {
    ub[u] = (uint64_t)(u % 3 + 1) * 100000 + (uint64_t)u * 1000;
    big[u] = ub[u] / 3;
    total += ub[u];
  }
  int saw_all = 0, saw_none = 0, saw_some = 0;
  for (int known = 0; known < 2; known++)
    for (uint64_t B = 0; B < total + 400000; B += 13001) {
      df_plan_gpu_in in = in_of(ub, big, B, known ? 150000 : DF_PLAN_GPU_UNKNOWN);
      df_plan_gpu g;
      df_plan_gpu_make(&g, &in);
      uint64_t s = 0;
      for (int u = 0; u < NU; u++) s += g.on_gpu[u] ? ub[u] : 0;
      assert_int_equal(s, g.spine_bytes);
      assert_int_equal(g.usable, B > g.given_back ? B - g.given_back : 0);
      assert_true(g.spine_bytes + g.expert_bytes <= g.usable);
      assert_int_equal(g.peruse_bytes, g.peruse_act + g.peruse_experts + g.peruse_weights);
      if (known) assert_int_equal(g.given_back, g.peruse_bytes > 150000 ? g.peruse_bytes - 150000 : 0);
      else assert_int_equal(g.given_back, 0);
      uint64_t room = g.usable > kmin() ? g.usable - kmin() : 0;
      if (g.n_gpu < NU) {
        assert_true(g.spine_bytes <= room);
        for (int u = 0; u < NU; u++) /* maximal: nothing left out would fit */
          if (!g.on_gpu[u]) assert_true(ub[u] > room - g.spine_bytes);
        assert_int_equal(g.keep_cap, g.spine_bytes);
      }
      saw_all |= g.n_gpu == NU;
      saw_none |= g.n_gpu == 0;
      saw_some |= g.n_gpu > 0 && g.n_gpu < NU;
      df_plan_gpu_free(&g);
    }
  assert_true(saw_all && saw_none && saw_some);
}

/* The K3 units as the GPU holds them, against the RAM planner's (the
 * loader's): the router added (bf16), MLA's kv_b taken out, a little
 * alignment; int8 about half of bf16; the head the largest matrix. */
static void test_k3_units(void **st) {
  (void)st;
  df_synth_opts so = {.preset = "k3-trunk", .layers = 6, .experts = 16};
  df_config c;
  df_err e;
  assert_int_equal(df_synth_config(&so, &c, &e), 0);
  int n = c.n_layers + 1;
  uint64_t gb[DF_MAX_LAYERS + 1], gl[DF_MAX_LAYERS + 1], gi[DF_MAX_LAYERS + 1],
      gil[DF_MAX_LAYERS + 1], rb[DF_MAX_LAYERS + 1], rr[DF_MAX_LAYERS + 1], fx, er;
  df_plan_gpu_units(&c, 0, gb, gl);
  df_plan_gpu_units(&c, 1, gi, gil);
  df_plan_k3_units(&c, 0, rb, rr, &fx, &er);
  uint64_t H = (uint64_t)c.hidden, V = (uint64_t)c.vocab;
  for (int u = 0; u < n; u++) {
    uint64_t want = rb[u];
    if (u < c.n_layers && u >= c.first_k_dense) want += 2 * (uint64_t)c.n_experts * H;
    if (u < c.n_layers && c.layer_kind[u] == DF_LAYER_MLA)
      want -= 2 * (uint64_t)c.mla_heads * (uint64_t)(c.qk_nope_dim + c.v_head_dim) *
              (uint64_t)c.kv_lora_rank;
    assert_true(gb[u] >= want);
    assert_true(gb[u] < want + 256 * 16);
    assert_true(gi[u] < gb[u]);
    assert_true(gl[u] <= gb[u]);
  }
  assert_int_equal(gl[c.n_layers], (2 * V * H + 255) / 256 * 256);
  assert_int_equal(gil[c.n_layers], (V * H + 255) / 256 * 256 + 4 * V);
}

static void test_summaries(void **st) {
  (void)st;
  uint64_t big[NU], total = 0;
  for (int u = 0; u < NU; u++) big[u] = U[u] / 2, total += U[u];
  df_plan_gpu_in in = in_of(U, big, 950000 + kmin(), 5000000);
  df_plan_gpu g;
  df_plan_gpu_make(&g, &in);
  char *t = df_plan_gpu_text(&g);
  assert_non_null(strstr(t, "gpu      tier "));
  assert_non_null(strstr(t, "(3 of 9 units: layers 1,5,head; per use: 0,2-4,6-7)"));
  assert_non_null(strstr(t, "per-use buffers"));
  free(t);
  char *j = df_plan_gpu_json(&g);
  json_t *o = json_loads(j, 0, NULL);
  assert_non_null(o);
  assert_int_equal(json_integer_value(json_object_get(o, "spine_gpu_bytes")), 950000);
  assert_int_equal(json_integer_value(json_object_get(o, "spine_total_bytes")), total);
  assert_int_equal(json_integer_value(json_object_get(o, "keep_cap_bytes")), 950000);
  assert_int_equal(json_integer_value(json_object_get(o, "outside_bytes")), 5000000);
  assert_int_equal(json_array_size(json_object_get(o, "gpu_units")), 3);
  assert_string_equal(json_string_value(json_array_get(json_object_get(o, "gpu_units"), 2)), "head");
  assert_int_equal(json_array_size(json_object_get(o, "per_use_units")), 6);
  json_decref(o);
  free(j);
  df_plan_gpu_free(&g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_policy_pinned), cmocka_unit_test(test_all_fit),
      cmocka_unit_test(test_given_back),    cmocka_unit_test(test_sweep),
      cmocka_unit_test(test_k3_units),      cmocka_unit_test(test_summaries),
      cmocka_unit_test(test_state),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}

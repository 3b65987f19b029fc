/* The memory planner as a pure function: for a sweep of memory limits over
 * a real preset config with made-up unit sizes, every plan must fit its
 * limit (sum of its parts, recomputed here), keep the ring as large as the
 * largest streamed unit's read, be maximal (no streamed unit fits in what is
 * left), and refuse with the
 * least memory it names only when that much is really missing. Plus the
 * explicit cache, the automatic context, units that cannot stream, the size
 * parser and the JSON/text summaries, and a server's kept conversation
 * states (serve --reuse-mb), which take memory before the spine does. */
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

static df_config cfg;
static uint64_t ub[NU], ur[NU];

static int setup(void **st) {
  (void)st;
  df_synth_opts o = {.preset = "tiny", .seed = 1};
  df_err e;
  if (df_synth_config(&o, &cfg, &e)) return -1;
  for (int u = 0; u < NU; u++) {
    ub[u] = (uint64_t)(u % 3 + 1) * 1000000 + (uint64_t)u * 1000; /* distinct sizes */
    ur[u] = (ub[u] + 3 * 4096 + 4095) / 4096 * 4096;              /* aligned extents */
  }
  return 0;
}

static df_plan_in base_in(uint64_t M) {
  df_plan_in in = {.cfg = &cfg, .nunits = NU, .unit_bytes = ub, .unit_read = ur,
                   .fixed_bytes = 50000, .embed_row_bytes = 128, .expert_record_bytes = 20000,
                   .mem_limit = M, .cache_req = -1, .cache_default = 1 << 20, .ctx_req = 512,
                   .max_rows = 4};
  return in;
}

static uint64_t used_of(const df_plan *p) {
  return p->scratch_bytes + p->fixed_bytes + p->expert_min_bytes + p->state_bytes + p->ring_bytes +
         p->resident_bytes + p->cache_bytes + p->reuse_bytes;
}

static void test_sweep(void **st) {
  (void)st;
  uint64_t total = 0;
  for (int u = 0; u < NU; u++) total += ub[u];
  int saw_all = 0, saw_none = 0, refused = 0, planned = 0;
  for (uint64_t M = total + 4000000; M > 100000; M -= 97000) {
    df_plan_in in = base_in(M);
    df_plan p;
    df_err e;
    if (df_plan_make(&p, &in, &e)) {
      /* refusing is only right when streaming everything cannot fit */
      uint64_t mx = 0;
      for (int u = 0; u < NU; u++) mx = ur[u] > mx ? ur[u] : mx;
      uint64_t infl = 4u * (uint64_t)cfg.top_k;
      if (infl > (uint64_t)cfg.n_experts) infl = (uint64_t)cfg.n_experts;
      uint64_t least = df_plan_scratch_bytes(&cfg, 4) + 50000 + infl * 20000 +
                       df_plan_state_bytes(&cfg, 512) + DF_PLAN_RING_SLOTS * mx;
      assert_true(least > M);
      assert_non_null(strstr(e.msg, "at least"));
      refused++;
      df_plan_free(&p);
      continue;
    }
    planned++;
    assert_true(used_of(&p) <= M);
    uint64_t res = 0, str = 0, mxs = 0;
    int nres = 0;
    for (int u = 0; u < NU; u++) {
      if (p.resident[u]) res += ub[u], nres++;
      else {
        str += ub[u];
        if (ur[u] > mxs) mxs = ur[u];
      }
    }
    assert_int_equal(res, p.resident_bytes);
    assert_int_equal(str, p.streamed_per_token);
    assert_int_equal(nres, p.n_resident);
    assert_int_equal(p.ring_slot_bytes, mxs);
    assert_int_equal(p.ring_bytes, mxs ? DF_PLAN_RING_SLOTS * mxs : 0);
    /* maximal: nothing streamed would fit in what is left over */
    uint64_t left = M - (used_of(&p) - p.cache_bytes);
    for (int u = 0; u < NU; u++)
      if (!p.resident[u]) assert_true(ub[u] > left);
    /* the expert cache only gets what the spine did not need */
    assert_true(p.cache_bytes <= (uint64_t)in.cache_default);
    if (p.n_streamed) assert_true(p.cache_bytes <= left);
    saw_all |= p.n_streamed == 0;
    saw_none |= p.n_resident == 0;
    df_plan_free(&p);
  }
  assert_true(saw_all);
  assert_true(saw_none);
  assert_true(refused > 0);
  assert_true(planned > 0);
}

static void test_cache_given_first(void **st) {
  (void)st;
  uint64_t total = 0;
  for (int u = 0; u < NU; u++) total += ub[u];
  df_plan_in in = base_in(total + 3000000);
  df_plan p;
  df_err e;
  assert_int_equal(df_plan_make(&p, &in, &e), 0);
  assert_int_equal(p.n_streamed, 0);
  df_plan_free(&p);
  in.cache_req = 2500000; /* an explicit cache pushes spine out */
  assert_int_equal(df_plan_make(&p, &in, &e), 0);
  assert_true(p.n_streamed > 0);
  assert_int_equal(p.cache_bytes, 2500000);
  assert_true(p.cache_given);
  assert_true(used_of(&p) <= in.mem_limit);
  df_plan_free(&p);
  /* a cache larger than every expert together is only what they need */
  in.cache_req = 1ll << 40;
  in.expert_total_bytes = 700000;
  assert_int_equal(df_plan_make(&p, &in, &e), 0);
  assert_int_equal(p.cache_bytes, 700000);
  assert_true(used_of(&p) <= in.mem_limit);
  df_plan_free(&p);
}

static void test_must_resident(void **st) {
  (void)st;
  uint8_t mr[NU] = {0};
  mr[3] = 1;
  df_plan_in in = base_in(10000000);
  in.must_resident = mr;
  df_plan p;
  df_err e;
  assert_int_equal(df_plan_make(&p, &in, &e), 0);
  assert_true(p.resident[3]);
  assert_true(p.n_streamed > 0);
  df_plan_free(&p);
}

/* A unit much larger than the rest is kept resident when that lets the ring
 * shrink to the small units: streaming it would need a ring of twice its size. */
static void test_ring_choice(void **st) {
  (void)st;
  uint64_t b[NU], r[NU];
  for (int u = 0; u < NU; u++) b[u] = r[u] = 1000000;
  b[NU - 1] = r[NU - 1] = 5000000;
  df_plan_in in = base_in(0);
  in.unit_bytes = b;
  in.unit_read = r;
  uint64_t fixed = df_plan_scratch_bytes(&cfg, 4) + 50000 + 16 * 20000 + df_plan_state_bytes(&cfg, 512);
  in.mem_limit = fixed + 5000000 + 2 * 1000000 + 500000;
  df_plan p;
  df_err e;
  assert_int_equal(df_plan_make(&p, &in, &e), 0);
  assert_true(p.resident[NU - 1]);
  assert_int_equal(p.ring_slot_bytes, 1000000);
  assert_int_equal(p.n_streamed, NU - 1);
  assert_true(used_of(&p) <= in.mem_limit);
  df_plan_free(&p);
  /* below that, streaming the head needs a 10 MB ring: refused, naming the least */
  in.mem_limit = fixed + 5000000 + 2 * 1000000 - 1000;
  assert_int_equal(df_plan_make(&p, &in, &e), -1);
  assert_non_null(strstr(e.msg, "larger than the ring"));
  df_plan_free(&p);
}

/* Random unit sizes and limits (fixed seed): every accepted plan fits, is
 * maximal (no streamed unit fits in what is left) and rings only what
 * streams; every refusal names the least memory. */
static void test_random(void **st) {
  (void)st;
  uint64_t x = 12345;
  int ok = 0, refused = 0;
  for (int it = 0; it < 3000; it++) {
    uint64_t b[NU], r[NU];
    for (int u = 0; u < NU; u++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      b[u] = (x >> 33) % 8000000 + 1000;
      r[u] = (b[u] + 4095) / 4096 * 4096 + 4096 * ((x >> 20) % 3);
    }
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    df_plan_in in = base_in((x >> 30) % 60000000);
    in.unit_bytes = b;
    in.unit_read = r;
    in.ctx_req = it % 2 ? 0 : 512;
    df_plan p;
    df_err e;
    if (df_plan_make(&p, &in, &e)) {
      assert_non_null(strstr(e.msg, "at least"));
      refused++;
    } else {
      ok++;
      assert_true(used_of(&p) <= in.mem_limit);
      uint64_t left = in.mem_limit - (used_of(&p) - p.cache_bytes), mx = 0;
      for (int u = 0; u < NU; u++)
        if (!p.resident[u]) {
          assert_true(b[u] > left);
          if (r[u] > mx) mx = r[u];
        }
      assert_int_equal(p.ring_slot_bytes, mx);
    }
    df_plan_free(&p);
  }
  assert_true(ok > 100 && refused > 100);
}

static void test_ctx(void **st) {
  (void)st;
  /* explicit context: the state grows with it (MLA latent per position) */
  uint64_t s1 = df_plan_state_bytes(&cfg, 1000), s2 = df_plan_state_bytes(&cfg, 2000);
  assert_int_equal(s2 - s1, (uint64_t)cfg.n_mla * 4 * (cfg.kv_lora_rank + cfg.qk_rope_dim) * 1000);
  /* automatic context is min(max_position_embeddings, 32768) with room */
  df_plan_in in = base_in(1ull << 40);
  in.ctx_req = 0;
  df_plan p;
  df_err e;
  assert_int_equal(df_plan_make(&p, &in, &e), 0);
  assert_int_equal(p.ctx, cfg.max_pos < 32768 ? cfg.max_pos : 32768);
  df_plan_free(&p);
}

static void test_refuse_message(void **st) {
  (void)st;
  df_plan_in in = base_in(1000);
  df_plan p;
  df_err e;
  assert_int_equal(df_plan_make(&p, &in, &e), -1);
  assert_non_null(strstr(e.msg, "--mem-limit"));
  assert_non_null(strstr(e.msg, "streamed"));
  df_plan_free(&p);
}

static void test_summaries(void **st) {
  (void)st;
  df_plan_in in = base_in(7000000);
  df_plan p;
  df_err e;
  assert_int_equal(df_plan_make(&p, &in, &e), 0);
  char *j = df_plan_json(&p);
  json_t *o = json_loads(j, 0, NULL);
  assert_non_null(o);
  assert_int_equal(json_array_size(json_object_get(o, "resident")) +
                       json_array_size(json_object_get(o, "streamed")),
                   NU);
  assert_int_equal(json_integer_value(json_object_get(o, "streamed_spine_bytes_per_token")),
                   (json_int_t)p.streamed_per_token);
  json_decref(o);
  free(j);
  char *t = df_plan_text(&p);
  assert_non_null(strstr(t, "streamed"));
  free(t);
  df_plan_free(&p);
}

/* The kept conversation states: budgeted as min(--reuse-mb, states x one
 * state with its logits), counted in what the plan uses, taken from the
 * spine before anything else, shown in both summaries and named in a
 * refusal. */
static void test_reuse(void **st) {
  (void)st;
  uint64_t one = df_plan_state_bytes(&cfg, 512) + 4 * (uint64_t)cfg.vocab;
  uint64_t total = 0;
  for (int u = 0; u < NU; u++) total += ub[u];
  df_plan p0, p1;
  df_err e;
  /* a limit where everything is resident without reuse */
  df_plan_in in = base_in(total + 4000000);
  in.cache_req = 0;
  assert_int_equal(df_plan_make(&p0, &in, &e), 0);
  assert_int_equal(p0.n_streamed, 0);
  assert_int_equal(p0.reuse_bytes, 0);
  /* a budget above what 8 states take: 8 states are counted */
  in.reuse_bytes = 100 * one;
  in.reuse_states = 8;
  assert_int_equal(df_plan_make(&p1, &in, &e), 0);
  assert_int_equal(p1.reuse_bytes, 8 * one);
  df_plan_free(&p1);
  /* a budget below that: the budget */
  in.reuse_bytes = 3 * one + 5;
  assert_int_equal(df_plan_make(&p1, &in, &e), 0);
  assert_int_equal(p1.reuse_bytes, 3 * one + 5);
  df_plan_free(&p1);
  /* no count limit: the budget as given; the spine makes room for it */
  in.reuse_states = 0;
  in.reuse_bytes = 4000000;
  assert_int_equal(df_plan_make(&p1, &in, &e), 0);
  assert_int_equal(p1.reuse_bytes, 4000000);
  assert_true(used_of(&p1) <= in.mem_limit);
  assert_true(p1.resident_bytes < p0.resident_bytes);
  assert_true(p1.n_streamed > 0);
  assert_int_equal(p1.state_bytes, p0.state_bytes);
  /* the summaries show it */
  char *j = df_plan_json(&p1);
  json_t *o = json_loads(j, 0, NULL);
  assert_int_equal(json_integer_value(json_object_get(o, "reuse_bytes")), 4000000);
  json_decref(o);
  free(j);
  char *t = df_plan_text(&p1);
  assert_non_null(strstr(t, "kept conversation states 4.0 MB"));
  free(t);
  df_plan_free(&p1);
  df_plan_free(&p0);
  /* the least memory without reuse fits nothing more: with reuse it is
   * refused, the least named grows by the reuse budget, and --reuse-mb is
   * named as a way out */
  in = base_in(100000);
  assert_int_equal(df_plan_make(&p0, &in, &e), -1);
  df_plan_free(&p0);
  unsigned long long least0 = 0, least1 = 0;
  assert_non_null(strstr(e.msg, "bytes)"));
  assert_int_equal(sscanf(strstr(e.msg, "MB (") + 4, "%llu", &least0), 1);
  in = base_in(least0);
  assert_int_equal(df_plan_make(&p0, &in, &e), 0);
  df_plan_free(&p0);
  in.reuse_bytes = 2000000;
  in.reuse_states = 0;
  assert_int_equal(df_plan_make(&p0, &in, &e), -1);
  df_plan_free(&p0);
  assert_non_null(strstr(e.msg, "kept conversation states 2.00 MB"));
  assert_non_null(strstr(e.msg, "--reuse-mb"));
  assert_int_equal(sscanf(strstr(e.msg, "MB (") + 4, "%llu", &least1), 1);
  assert_int_equal(least1, least0 + 2000000);
}

static void test_parse_size(void **st) {
  (void)st;
  uint64_t v;
  assert_int_equal(df_plan_parse_size("64G", &v), 0);
  assert_int_equal(v, 64000000000ull);
  assert_int_equal(df_plan_parse_size("1.5GiB", &v), 0);
  assert_int_equal(v, 1610612736ull);
  assert_int_equal(df_plan_parse_size("512M", &v), 0);
  assert_int_equal(v, 512000000ull);
  assert_int_equal(df_plan_parse_size("4096", &v), 0);
  assert_int_equal(v, 4096);
  assert_int_equal(df_plan_parse_size("12X", &v), -1);
  assert_int_equal(df_plan_parse_size("", &v), -1);
  assert_int_equal(df_plan_parse_size("-1G", &v), -1);
}

static void test_detect(void **st) {
  (void)st;
  uint64_t b = 0;
  char why[256];
  df_err e;
  assert_int_equal(df_plan_mem_detect(&b, why, sizeof why, &e), 0);
  assert_true(b > 0);
  assert_true(why[0]);
}

int main(void) {
  const struct CMUnitTest t[] = {
      cmocka_unit_test(test_sweep),          cmocka_unit_test(test_cache_given_first),
      cmocka_unit_test(test_must_resident),  cmocka_unit_test(test_ctx),
      cmocka_unit_test(test_ring_choice),    cmocka_unit_test(test_random),
      cmocka_unit_test(test_refuse_message), cmocka_unit_test(test_summaries),
      cmocka_unit_test(test_parse_size),     cmocka_unit_test(test_detect),
      cmocka_unit_test(test_reuse),
  };
  return cmocka_run_group_tests(t, setup, NULL);
}

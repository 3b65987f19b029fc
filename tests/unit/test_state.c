/* The sequence state's size and its separation from scratch.
 *
 * 1. The size formula (df_plan_state_parts / df_plan_state_bytes) on full
 *    K3's config against an independent count from kimi-k3.md's stated
 *    sizes: per KDA layer 96 x 128 x 128 fp32 plus the conv state
 *    3 x 3 x 12288, x 69 KDA layers; per position 576 floats per MLA
 *    layer, x 24 MLA layers.
 * 2. The trained nano-K3's live states report exactly that formula (fp32
 *    and float64) at 0, NP and NP + 3 positions, and so do their snapshots
 *    (plus the last logits), whatever batch the source ran.
 * 3. A snapshot, restored into the session it came from or into a fresh one
 *    (whose state has no scratch yet), continues bit for bit as the
 *    original. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/engine.h"
#include "plan/plan.h"
#include "synth/synth.h"
#include "nano_engine.h"

static void test_formula_full_k3(void **st) {
  (void)st;
  df_config c;
  df_err e;
  df_synth_opts so = {.preset = "k3-trunk", .layers = 93, .experts = 896};
  if (df_synth_config(&so, &c, &e)) fail_msg("config: %s", e.msg);
  assert_int_equal(c.n_kda, 69);
  assert_int_equal(c.n_mla, 24);
  /* kimi-k3.md 5.2 and 5.3, in bytes */
  const uint64_t kda_layer = 96ull * 128 * 128 * 4 + 3ull * 3 * 12288 * 4;
  const uint64_t mla_pos = 576ull * 4; /* "2,304 bytes in fp32" */
  assert_int_equal(mla_pos, 2304);
  uint64_t fixed, per_pos;
  df_plan_state_parts(&c, &fixed, &per_pos);
  assert_int_equal(fixed, 69 * kda_layer);
  assert_int_equal(per_pos, 24 * mla_pos);
  assert_int_equal(df_plan_state_bytes(&c, 4096), 69 * kda_layer + 4096ull * 24 * mla_pos);
  assert_int_equal(df_plan_state_bytes(&c, 32768), 69 * kda_layer + 32768ull * 24 * mla_pos);
  /* the figures docs/ARCHITECTURE.md ("Sequence state") gives */
  assert_int_equal(df_plan_state_bytes(&c, 4096), 691126272ull);
  assert_int_equal(df_plan_state_bytes(&c, 32768), 2276573184ull);
  char *t = df_plan_state_text(&c, 0);
  assert_non_null(strstr(t, "659.1 MiB at 4096 positions, 2171.1 MiB at 32768"));
  free(t);
}

static void check_bytes(int f64) {
  df_engine *en = open_nano_prec(2, -1, NULL, f64);
  const df_config *c = df_engine_config(en);
  size_t lg = sizeof(float) * (size_t)c->vocab, x = f64 ? 2 : 1;
  df_session *s = df_session_new(en);
  df_err e;
  assert_int_equal(df_session_state_bytes(s), x * df_plan_state_bytes(c, 0) + lg);
  /* a batch of NP rows grows the scratch; the state counts positions only */
  if (df_session_forward(s, PROMPT, NP, NULL, NULL, &e)) fail_msg("forward: %s", e.msg);
  assert_int_equal(df_session_state_bytes(s), x * df_plan_state_bytes(c, NP) + lg);
  df_session_snap *p = df_session_snapshot(s);
  assert_int_equal(df_session_snap_bytes(p), x * df_plan_state_bytes(c, NP) + lg);
  if (df_session_forward(s, PROMPT, 3, NULL, NULL, &e)) fail_msg("forward: %s", e.msg);
  assert_int_equal(df_session_state_bytes(s), x * df_plan_state_bytes(c, NP + 3) + lg);
  df_session_snap_free(p);
  df_session_free(s);
  df_engine_close(en);
}

static void test_bytes_f32(void **st) {
  (void)st;
  check_bytes(0);
}

static void test_bytes_f64(void **st) {
  (void)st;
  check_bytes(1);
}

/* Runs the 5 ids after the prompt one at a time (decode), each step's logits into out. */
static void continue5(df_session *s, float *out, int V) {
  df_err e;
  for (int i = 0; i < 5; i++)
    if (df_session_forward(s, &PROMPT[i], 1, out + (size_t)i * V, NULL, &e))
      fail_msg("forward: %s", e.msg);
}

static void test_snapshot_continues(void **st) {
  (void)st;
  df_engine *en = open_nano(2, -1, NULL);
  int V = df_engine_config(en)->vocab;
  float *a = malloc(sizeof(float) * 5 * (size_t)V), *b = malloc(sizeof(float) * 5 * (size_t)V);
  df_session *s = df_session_new(en);
  df_err e;
  if (df_session_forward(s, PROMPT, NP, NULL, NULL, &e)) fail_msg("forward: %s", e.msg);
  df_session_snap *p = df_session_snapshot(s);
  continue5(s, a, V);
  /* back into the same session */
  df_session_restore(s, p);
  assert_int_equal(df_session_pos(s), NP);
  continue5(s, b, V);
  assert_memory_equal(a, b, sizeof(float) * 5 * (size_t)V);
  /* into a fresh session, which has never run a pass */
  df_session *f = df_session_new(en);
  df_session_restore(f, p);
  assert_int_equal(df_session_pos(f), NP);
  memset(b, 0, sizeof(float) * 5 * (size_t)V);
  continue5(f, b, V);
  assert_memory_equal(a, b, sizeof(float) * 5 * (size_t)V);
  df_session_free(f);
  df_session_snap_free(p);
  df_session_free(s);
  df_engine_close(en);
  free(a);
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_formula_full_k3),
      cmocka_unit_test(test_bytes_f32),
      cmocka_unit_test(test_bytes_f64),
      cmocka_unit_test(test_snapshot_continues),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

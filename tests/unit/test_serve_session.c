/* The engine support the server relies on, on a generated tiny model:
 * cancellation polled between prefill chunks and between layers (a long
 * prompt stops within a layer), a cancelled session that is reset gives
 * the same ids as a fresh one, and conversation reuse: continuing a kept
 * session or a restored snapshot with only the new part of a prompt gives
 * the ids of a fresh session prefilling all of it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/util.h"
#include "engine/engine.h"

static char tmpdir[256];
static df_engine *en;

static int setup(void **st) {
  (void)st;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/df_test_serve_session_XXXXXX");
  if (!mkdtemp(tmpdir)) return -1;
  const char *bin = getenv("DF_BIN");
  if (!bin) {
    fprintf(stderr, "DF_BIN is not set (run through ctest)\n");
    return -1;
  }
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' make-model --preset tiny --seed 3 --out '%s/m' >/dev/null", bin,
           tmpdir);
  if (system(cmd) != 0) return -1;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/m", tmpdir);
  df_engine_opts o;
  df_engine_opts_default(&o);
  o.model_dir = dir;
  o.threads = 1;
  o.kernels_scalar = 1;
  df_err e;
  if (df_engine_open(&en, &o, &e)) {
    fprintf(stderr, "engine: %s\n", e.msg);
    return -1;
  }
  return 0;
}

static int teardown(void **st) {
  (void)st;
  df_engine_close(en);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) ? -1 : 0;
}

#define NP 40
static void prompt_ids(int *p, int n) {
  for (int i = 0; i < n; i++) p[i] = 10 + (i * 7) % 200;
}

typedef struct {
  int polls, cancel_at, tokens, prefill_calls;
} counter;

static int cancel_cb(void *ud) {
  counter *c = ud;
  return ++c->polls >= c->cancel_at;
}
static int token_cb(void *ud, int id) {
  (void)id;
  ((counter *)ud)->tokens++;
  return 0;
}
static void prefill_cb(void *ud, int done) {
  (void)done;
  ((counter *)ud)->prefill_calls++;
}

static void gen(df_session *s, const int *p, int n, int cancel_at, counter *c, int **out, int *nout,
                df_gen_stats *gs) {
  df_gen_opts go;
  df_gen_opts_default(&go);
  go.max_new = 6;
  go.prefill_chunk = 8;
  go.ud = c;
  go.on_token = token_cb;
  go.on_prefill = prefill_cb;
  c->cancel_at = cancel_at;
  if (cancel_at > 0) go.cancel = cancel_cb;
  df_err e;
  if (df_generate(s, p, n, &go, out, nout, gs, &e)) fail_msg("generate: %s", e.msg);
}

static void test_cancel_prefill(void **st) {
  (void)st;
  int p[NP];
  prompt_ids(p, NP);
  int L = df_engine_config(en)->n_layers;
  df_session *s = df_session_new(en);
  int *ref, nref, *out, nout;
  df_gen_stats gs;
  counter c = {0};
  gen(s, p, NP, 0, &c, &ref, &nref, &gs);
  assert_int_equal(nref, 6);
  assert_int_equal(gs.n_prefilled, NP);
  assert_int_equal(c.prefill_calls, NP / 8);

  /* inside the first chunk, after its second layer: nothing is prefilled */
  df_session_reset(s);
  memset(&c, 0, sizeof c);
  gen(s, p, NP, 3, &c, &out, &nout, &gs);
  assert_int_equal(gs.finish, DF_FINISH_CANCEL);
  assert_int_equal(gs.n_prefilled, 0);
  assert_int_equal(nout, 0);
  assert_int_equal(c.tokens, 0);
  assert_int_equal(c.polls, 3); /* not polled again after it said stop */
  free(out);

  /* between chunks: the poll before chunk 3 (each chunk: 1 + L polls) */
  df_session_reset(s);
  memset(&c, 0, sizeof c);
  gen(s, p, NP, 2 * (1 + L) + 1, &c, &out, &nout, &gs);
  assert_int_equal(gs.finish, DF_FINISH_CANCEL);
  assert_int_equal(gs.n_prefilled, 16);
  assert_int_equal(nout, 0);
  free(out);

  /* during decode: the ids so far are returned */
  df_session_reset(s);
  memset(&c, 0, sizeof c);
  int prefill_polls = (NP / 8) * (1 + L);
  gen(s, p, NP, prefill_polls + L + 1, &c, &out, &nout, &gs);
  assert_int_equal(gs.finish, DF_FINISH_CANCEL);
  assert_int_equal(gs.n_prefilled, NP);
  assert_int_equal(nout, 2);
  assert_memory_equal(out, ref, sizeof(int) * 2);
  free(out);

  /* reset after a cancellation: the same ids as the first run */
  df_session_reset(s);
  memset(&c, 0, sizeof c);
  gen(s, p, NP, 0, &c, &out, &nout, &gs);
  assert_int_equal(nout, nref);
  assert_memory_equal(out, ref, sizeof(int) * (size_t)nref);
  free(out);
  free(ref);
  df_session_free(s);
}

static void greedy(df_session *s, const int *p, int n, int max_new, int **out, int *nout,
                   df_gen_stats *gs) {
  df_gen_opts go;
  df_gen_opts_default(&go);
  go.max_new = max_new;
  go.prefill_chunk = 8;
  df_err e;
  if (df_generate(s, p, n, &go, out, nout, gs, &e)) fail_msg("generate: %s", e.msg);
}

static void test_reuse(void **st) {
  (void)st;
  int A[NP];
  prompt_ids(A, NP);
  df_session *s = df_session_new(en);
  int *g1, n1;
  df_gen_stats gs;
  greedy(s, A, NP, 6, &g1, &n1, &gs);
  assert_int_equal(n1, 6);
  /* the live session covers A and the first 5 ids (the 6th was not run) */
  assert_int_equal(df_session_pos(s), NP + 5);
  df_session_snap *snap = df_session_snapshot(s);
  assert_true(df_session_snap_bytes(snap) > 0);
  assert_true(df_session_snap_bytes(snap) <= df_session_state_bytes(s));

  /* the next turn: A, the reply so far, 7 new ids */
  int B[NP + 5 + 7];
  memcpy(B, A, sizeof A);
  memcpy(B + NP, g1, sizeof(int) * 5);
  for (int i = 0; i < 7; i++) B[NP + 5 + i] = 300 + i;
  int nb = NP + 5 + 7;
  df_session *fresh = df_session_new(en);
  int *ref, nref;
  greedy(fresh, B, nb, 8, &ref, &nref, &gs);
  assert_int_equal(gs.n_prefilled, nb);

  int *out, nout;
  greedy(s, B + NP + 5, 7, 8, &out, &nout, &gs); /* keep and extend */
  assert_int_equal(gs.n_prefilled, 7);
  assert_int_equal(nout, nref);
  assert_memory_equal(out, ref, sizeof(int) * (size_t)nref);
  free(out);

  /* a snapshot restored into a session that ran something else */
  df_session_reset(fresh);
  greedy(fresh, A + 3, 20, 4, &out, &nout, &gs);
  free(out);
  df_session_restore(fresh, snap);
  assert_int_equal(df_session_pos(fresh), NP + 5);
  greedy(fresh, B + NP + 5, 7, 8, &out, &nout, &gs);
  assert_int_equal(gs.n_prefilled, 7);
  assert_memory_equal(out, ref, sizeof(int) * (size_t)nref);
  free(out);
  /* nothing new: the snapshot's logits give the 6th id of the first reply */
  df_session_restore(fresh, snap);
  assert_true(df_session_has_logits(fresh));
  greedy(fresh, NULL, 0, 1, &out, &nout, &gs);
  assert_int_equal(nout, 1);
  assert_int_equal(out[0], g1[5]);
  free(out);

  df_session_snap_free(snap);
  free(ref);
  free(g1);
  df_session_free(fresh);
  df_session_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cancel_prefill),
      cmocka_unit_test(test_reuse),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

/* Speculative decoding (engine/gen.c) on the trained nano-K3: the ids of
 * plain greedy decoding with every draft source and block size, a draft that
 * is always right and one that is always wrong, a stop inside a block
 * leaving the session exactly where plain decoding leaves it, and a block's
 * experts read once. Speculative sampling's distribution: test_spec_sampling.c. */
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
#define NGEN 24

static int *gen(df_session *s, const df_gen_opts *go, int *n, df_gen_stats *st) {
  int *out;
  df_err e;
  df_session_reset(s);
  if (df_generate(s, PROMPT, NP, go, &out, n, st, &e)) fail_msg("generate: %s", e.msg);
  return out;
}

/* Drafts from a known answer: right proposes the plain run's next ids,
 * wrong the same ids plus one (never what the target picks). */
typedef struct oracle {
  const int *ref;
  int wrong, V;
} oracle;

static int oracle_propose(void *ud, const int *hist, int n, int *out, int kmax, df_err *e) {
  (void)hist, (void)e;
  const oracle *o = ud;
  int g = n - NP, k = 0;
  while (k < kmax && g + k < NGEN) {
    out[k] = o->wrong ? (o->ref[g + k] + 1) % o->V : o->ref[g + k];
    k++;
  }
  return k;
}

static void test_ids_and_sources(void **st) {
  (void)st;
  df_engine *en = open_nano(2, -1, NULL);
  df_session *s = df_session_new(en);
  df_gen_opts go;
  df_gen_opts_default(&go);
  go.max_new = NGEN;
  go.no_draft = 1;
  int nref, n;
  df_gen_stats gs;
  int *ref = gen(s, &go, &nref, &gs);
  assert_int_equal(nref, NGEN);
  go.no_draft = 0;
  oracle right = {ref, 0, df_engine_config(en)->vocab}, wrong = {ref, 1, right.V};
  df_draft *dr = df_draft_new_fn("right", oracle_propose, &right);
  df_draft *dw = df_draft_new_fn("wrong", oracle_propose, &wrong);
  df_draft *dn = df_draft_new_ngram();
  df_draft *ds = df_draft_new_self(en);
  df_draft *all[] = {dr, dw, dn, ds};
  static const int ks[] = {1, 3, 8}; /* e2e.test_spec covers the others through run */
  for (int ki = 0; ki < 3; ki++)
    for (int d = 0; d < 4; d++) {
      int k = ks[ki];
      go.draft = all[d];
      go.draft_max = k;
      int *out = gen(s, &go, &n, &gs);
      assert_int_equal(n, NGEN);
      assert_memory_equal(out, ref, sizeof(int) * NGEN);
      assert_true(gs.n_verify > 0 || d == 2); /* n-gram may find no match */
      if (all[d] == dr || all[d] == ds) {
        /* always right: every draft kept, no rollback, fewer passes than tokens */
        assert_int_equal(gs.n_accepted, gs.n_drafted);
        assert_int_equal(gs.n_rollback, 0);
        assert_true(gs.n_passes < NGEN - 1 || k == 1);
      }
      if (all[d] == dw) {
        assert_int_equal(gs.n_accepted, 0);
        assert_int_equal(gs.n_rollback, gs.n_verify);
      }
      free(out);
    }
  printf("[ spec ] ids of plain decoding for 4 sources x K 1, 3, 8\n");
  for (int d = 0; d < 4; d++) df_draft_free(all[d]);
  free(ref);
  df_session_free(s);
  df_engine_close(en);
}

/* A stop id inside a block: the same ids, and the session holds what plain
 * decoding leaves (every id out but the last, and the logits it came
 * from), so a kept conversation continues identically. */
static void test_stop_in_block(void **st) {
  (void)st;
  df_engine *en = open_nano(1, -1, NULL);
  int V = df_engine_config(en)->vocab;
  df_session *a = df_session_new(en), *b = df_session_new(en);
  df_gen_opts go;
  df_gen_opts_default(&go);
  go.max_new = NGEN;
  go.no_draft = 1;
  int nref, n;
  df_gen_stats gs;
  int *ref = gen(a, &go, &nref, &gs);
  int stop = ref[11];
  int first = 0;
  while (ref[first] != stop) first++;
  go.stop_ids = &stop;
  go.nstop = 1;
  int *p = gen(a, &go, &nref, &gs);
  assert_int_equal(nref, first + 1);
  df_draft *ds = df_draft_new_self(en);
  go.no_draft = 0;
  go.draft = ds;
  go.draft_max = 6;
  int *q = gen(b, &go, &n, &gs);
  assert_int_equal(gs.finish, DF_FINISH_STOP);
  assert_int_equal(n, nref);
  assert_memory_equal(p, q, sizeof(int) * (size_t)n);
  assert_int_equal(df_session_pos(a), df_session_pos(b));
  assert_memory_equal(df_session_logits(a), df_session_logits(b), sizeof(float) * (size_t)V);
  /* and both continue alike */
  int next = 5;
  float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
  df_err e;
  assert_int_equal(df_session_forward(a, &next, 1, la, NULL, &e), 0);
  assert_int_equal(df_session_forward(b, &next, 1, lb, NULL, &e), 0);
  assert_memory_equal(la, lb, sizeof(float) * (size_t)V);
  free(la), free(lb), free(p), free(q), free(ref);
  df_draft_free(ds);
  df_session_free(a);
  df_session_free(b);
  df_engine_close(en);
}

/* A block of rows reads the union of its experts once: with no cache, the
 * bytes read equal (experts in the union, summed over layers) x record. */
typedef struct uni {
  uint8_t seen[64][256];
  long count;
} uni;

static void route(void *ud, int layer, const float *sc, const int *ids, int n, int E, int K) {
  (void)sc;
  uni *u = ud;
  for (int i = 0; i < n * K; i++)
    if (!u->seen[layer][ids[i]]) u->seen[layer][ids[i]] = 1, u->count++;
  assert_true(E <= 256 && layer < 64);
}

static void test_block_reads_once(void **st) {
  (void)st;
  df_engine *en = open_nano(1, 0, NULL);
  df_session *s = df_session_new(en);
  df_err e;
  assert_int_equal(df_session_forward(s, PROMPT, NP, NULL, NULL, &e), 0);
  char *js = df_engine_stats_json(en);
  json_t *o = json_loads(js, 0, NULL);
  free(js);
  long rec = (long)json_integer_value(json_object_get(json_object_get(o, "store"), "record_bytes"));
  json_decref(o);
  assert_true(rec > 0);
  uni *u = calloc(1, sizeof *u);
  df_session_set_route_hook(s, route, u);
  int blk[5] = {10, 256, 307, 267, 626};
  uint64_t b0 = df_engine_expert_bytes(en);
  assert_int_equal(df_session_forward(s, blk, 5, NULL, NULL, &e), 0);
  uint64_t got = df_engine_expert_bytes(en) - b0;
  printf("[ spec ] a 5-row block: %ld experts in the union, %llu bytes read (%ld each)\n",
         u->count, (unsigned long long)got, rec);
  assert_true(got == (uint64_t)(u->count * rec));
  free(u);
  df_session_free(s);
  df_engine_close(en);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ids_and_sources),
      cmocka_unit_test(test_stop_in_block),
      cmocka_unit_test(test_block_reads_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The draft models behind the model seam (qwen3/qwen3_model.c,
 * dspark/dspark_model.c): each seam call gives what the family's own API
 * gives (the direct calls are the reference; their numbers are checked
 * against outside references in test_qwen3, test_dspark_golden and the e2e
 * tests), the sizes are config.json's, read here independently, and the
 * state life cycle the speculation code relies on holds through the seam:
 * a clone or a copy continues bit for bit like its source, a truncation
 * forgets, bytes count the positions held. What a family cannot do is
 * refused (no marks, no causal forward for DSpark, no cut for K3). */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/util.h"
#include "dspark/dspark.h"
#include "dspark/dspark_make.h"
#include "engine/engine_int.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "qwen3/qwen3.h"

#include "nano_engine.h"

static const int ids[] = {79, 110, 347, 654, 264, 260, 781, 44, 889, 700, 260, 337};
#define N ((int)(sizeof ids / sizeof ids[0]))

static long cfg_int(const char *dir, const char *key) {
  char p[1200];
  snprintf(p, sizeof p, "%s/config.json", dir);
  json_t *r = json_load_file(p, 0, NULL);
  assert_non_null(r);
  json_t *v = json_object_get(r, key);
  if (!json_is_integer(v)) fail_msg("%s: no integer '%s'", p, key);
  long x = (long)json_integer_value(v);
  json_decref(r);
  return x;
}

static void nano_draft_dir(char *dir, size_t n) {
  const char *src = getenv("DF_SRC");
  snprintf(dir, n, "%s/models/nano-draft", src ? src : ".");
}

static void test_qwen3_seam(void **st) {
  (void)st;
  char dir[1024];
  nano_draft_dir(dir, sizeof dir);
  df_err e;
  df_model *m;
  df_qwen3 *q;
  assert_int_equal(df_model_open_qwen3(&m, dir, 0, &e), 0);
  assert_int_equal(df_qwen3_load(&q, dir, &e), 0);
  assert_string_equal(df_model_family(m), "qwen3");
  assert_null(df_model_config(m));
  int V = df_model_vocab(m);
  assert_int_equal(V, cfg_int(dir, "vocab_size"));
  assert_int_equal(df_model_hidden(m), cfg_int(dir, "hidden_size"));
  assert_int_equal(df_model_layers(m), cfg_int(dir, "num_hidden_layers"));
  assert_int_equal(df_model_eos(m), cfg_int(dir, "eos_token_id"));
  assert_int_equal(df_model_ctx_limit(m), cfg_int(dir, "max_position_embeddings"));

  df_mstate *s = df_mstate_new(m);
  float *all = df_xmalloc(sizeof(float) * (size_t)N * V), *ref = df_xmalloc(sizeof(float) * (size_t)N * V);
  /* not bound yet: no kernels to run on */
  assert_int_equal(df_model_forward(m, s, ids, 2, NULL, all, &e), -1);
  assert_non_null(strstr(e.msg, "df_model_bind"));
  assert_int_equal(df_mstate_pos(s), 0);
  df_kctx kc = {.k = df_kern_select(0)};
  df_model_bind(m, &(df_model_run){.kc = &kc});

  /* the seam's forward is the family's, bit for bit */
  df_qwen3_state *qs = df_qwen3_state_new(q);
  assert_int_equal(df_qwen3_forward(q, &kc, qs, ids, N, NULL, ref, &e), 0);
  float *last = df_xmalloc(sizeof(float) * (size_t)V);
  assert_int_equal(df_model_forward(m, s, ids, N, last, all, &e), 0);
  assert_memory_equal(all, ref, sizeof(float) * (size_t)N * V);
  assert_memory_equal(last, ref + (size_t)(N - 1) * V, sizeof(float) * (size_t)V);
  assert_int_equal(df_mstate_pos(s), N);
  size_t row = (size_t)cfg_int(dir, "num_key_value_heads") * (size_t)cfg_int(dir, "head_dim") *
               sizeof(float) * 2 * (size_t)cfg_int(dir, "num_hidden_layers");
  assert_int_equal(df_mstate_bytes(s), (size_t)N * row);

  /* truncate, then the rest again: the same rows as the single pass */
  assert_int_equal(df_mstate_truncate(s, 5), 0);
  assert_int_equal(df_mstate_pos(s), 5);
  assert_int_equal(df_mstate_truncate(s, 9), 0); /* past the end: nothing */
  assert_int_equal(df_mstate_pos(s), 5);
  assert_int_equal(df_mstate_bytes(s), 5 * row);
  df_mstate *c = df_mstate_clone(s); /* at 5 */
  assert_int_equal(df_mstate_pos(c), 5);
  assert_int_equal(df_mstate_bytes(c), 5 * row);
  assert_int_equal(df_model_forward(m, s, ids + 5, N - 5, NULL, all, &e), 0);
  assert_memory_equal(all, ref + (size_t)5 * V, sizeof(float) * (size_t)(N - 5) * V);
  /* the clone continues like its source did */
  assert_int_equal(df_model_forward(m, c, ids + 5, N - 5, NULL, all, &e), 0);
  assert_memory_equal(all, ref + (size_t)5 * V, sizeof(float) * (size_t)(N - 5) * V);
  /* a copy into a state that held something else (a longer other sequence) */
  df_mstate *o = df_mstate_new(m);
  int other[N];
  for (int i = 0; i < N; i++) other[i] = (ids[i] * 7 + 3) % V;
  assert_int_equal(df_model_forward(m, o, other, N, NULL, NULL, &e), 0);
  assert_int_equal(df_mstate_truncate(c, 3), 0);
  df_mstate_copy(o, c);
  assert_int_equal(df_mstate_pos(o), 3);
  assert_int_equal(df_model_forward(m, o, ids + 3, N - 3, NULL, all, &e), 0);
  assert_memory_equal(all, ref + (size_t)3 * V, sizeof(float) * (size_t)(N - 3) * V);
  /* and the other sequence's logits differ (the checks above can fail) */
  assert_int_equal(df_mstate_truncate(o, 3), 0);
  assert_int_equal(df_model_forward(m, o, other + 3, 1, last, NULL, &e), 0);
  assert_memory_not_equal(last, ref + (size_t)3 * V, sizeof(float) * (size_t)V);
  df_mstate_reset(o);
  assert_int_equal(df_mstate_pos(o), 0);
  assert_int_equal(df_mstate_bytes(o), 0);

  /* what Qwen3 has not: marks, row marks, hooks (a no-op) */
  assert_null(df_mmark_new(s));
  assert_int_equal(df_mstate_set_row_marks(s, NULL, 0), -1);
  df_mstate_set_tap(s, NULL, NULL);
  df_mstate_set_cancel(s, NULL, NULL);
  assert_null(df_dspark_of(m));
  assert_null(df_dspark_state_of(s));
  df_plan_in in;
  df_model_plan_req rq = {0};
  df_model_plan_in(m, &rq, &in);
  assert_null(in.cfg);

  df_mstate_free(o);
  df_mstate_free(c);
  df_mstate_free(s);
  df_qwen3_state_free(qs);
  df_qwen3_free(q);
  df_model_free(m);
  free(all), free(ref), free(last);
  printf("[ seam ] qwen3: forward, truncate, clone, copy, bytes through the seam as df_qwen3_*\n");
}

/* Deterministic stand-in taps (the draft's context rows need not come from
 * a real target run to check that the seam moves them exactly). */
static void fill(float *x, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((int)(seed >> 9) % 2001 - 1000) / 1000.0f;
  }
}

static void propose_of(const df_dspark *ds, const df_kctx *kc, const df_dspark_state *s, int *out,
                       float *logits) {
  df_err e;
  float conf[4];
  assert_int_equal(df_dspark_propose(ds, kc, s, 17, 4, 0, out, conf, logits, &e), 4);
}

static void test_dspark_seam(void **st) {
  (void)st;
  char g[64];
  snprintf(g, sizeof g, "/tmp/df_dseam_XXXXXX");
  assert_non_null(mkdtemp(g));
  char target[1024];
  snprintf(target, sizeof target, "%s/models/nano-k3", getenv("DF_SRC"));
  df_dspark_make_opts mo = {.target_dir = target, .out_dir = g, .seed = 7, .layers = 2};
  df_err e;
  if (df_dspark_make(&mo, &e)) fail_msg("make: %s", e.msg);
  df_engine *en = open_nano(1, -1, NULL);
  const df_model *k3 = en->model;
  df_model *m;
  if (df_model_open_dspark(&m, g, k3, &e)) fail_msg("open: %s", e.msg);
  assert_string_equal(df_model_family(m), "dspark");
  assert_null(df_model_config(m));
  const df_dspark *ds = df_dspark_of(m);
  assert_non_null(ds);
  assert_null(df_dspark_of(k3));
  int V = df_model_vocab(m), H = df_model_hidden(m), L = df_model_layers(m);
  assert_int_equal(V, cfg_int(g, "vocab_size"));
  assert_int_equal(V, df_model_vocab(k3));
  assert_int_equal(H, cfg_int(g, "hidden_size"));
  assert_int_equal(L, cfg_int(g, "num_hidden_layers"));
  assert_int_equal(df_model_eos(m), df_engine_config(en)->eos_id);
  assert_int_equal(df_model_ctx_limit(m), df_model_ctx_limit(k3));

  int T = 9, nt = df_dspark_n_taps(ds);
  size_t trow = (size_t)nt * (size_t)H;
  float *taps = df_xmalloc(sizeof(float) * trow * (size_t)T);
  fill(taps, trow * (size_t)T, 11);
  df_kctx kc = {.k = df_kern_select(0)};
  df_mstate *s = df_mstate_new(m);
  assert_non_null(df_dspark_state_of(s));
  assert_int_equal(df_dspark_context(ds, &kc, df_dspark_state_of(s), taps, T, &e), 0);
  assert_int_equal(df_mstate_pos(s), T);
  size_t lrow = sizeof(float) * (size_t)(cfg_int(g, "kv_lora_rank") + cfg_int(g, "qk_rope_head_dim")) *
                (size_t)L;
  assert_int_equal(df_mstate_bytes(s), (size_t)T * lrow);

  /* the reference: a family state built from the first p rows directly */
  int p = 5;
  df_dspark_state *ref = df_dspark_state_new(ds);
  assert_int_equal(df_dspark_context(ds, &kc, ref, taps, p, &e), 0);
  int a[4], b[4];
  float *la = df_xmalloc(sizeof(float) * 4 * (size_t)V), *lb = df_xmalloc(sizeof(float) * 4 * (size_t)V);
  propose_of(ds, &kc, ref, b, lb);
  /* at T the proposal differs from the one at p (so the checks below can fail) */
  propose_of(ds, &kc, df_dspark_state_of(s), a, la);
  assert_memory_not_equal(la, lb, sizeof(float) * 4 * (size_t)V);
  /* a clone at T, then the source cut to p: the cut forgets rows p.. */
  df_mstate *c = df_mstate_clone(s);
  assert_int_equal(df_mstate_truncate(s, p), 0);
  assert_int_equal(df_mstate_pos(s), p);
  assert_int_equal(df_mstate_bytes(s), (size_t)p * lrow);
  propose_of(ds, &kc, df_dspark_state_of(s), a, la);
  assert_memory_equal(la, lb, sizeof(float) * 4 * (size_t)V);
  assert_memory_equal(a, b, sizeof a);
  /* the clone kept T rows; cut to p it proposes the same */
  assert_int_equal(df_mstate_pos(c), T);
  assert_int_equal(df_mstate_truncate(c, p), 0);
  propose_of(ds, &kc, df_dspark_state_of(c), a, la);
  assert_memory_equal(la, lb, sizeof(float) * 4 * (size_t)V);
  /* a copy into a fresh state, then the same rows appended to both: equal */
  df_mstate *f = df_mstate_new(m);
  df_mstate_copy(f, s);
  assert_int_equal(df_mstate_pos(f), p);
  assert_int_equal(df_dspark_context(ds, &kc, df_dspark_state_of(f), taps + trow * p, T - p, &e), 0);
  assert_int_equal(df_dspark_context(ds, &kc, df_dspark_state_of(s), taps + trow * p, T - p, &e), 0);
  propose_of(ds, &kc, df_dspark_state_of(f), a, la);
  propose_of(ds, &kc, df_dspark_state_of(s), b, lb);
  assert_memory_equal(la, lb, sizeof(float) * 4 * (size_t)V);
  df_mstate_reset(f);
  assert_int_equal(df_mstate_pos(f), 0);
  assert_int_equal(df_mstate_bytes(f), 0);

  /* what DSpark has not: a causal forward over ids, marks */
  assert_int_equal(df_model_forward(m, s, ids, 1, NULL, NULL, &e), -1);
  assert_non_null(strstr(e.msg, "dspark: no forward pass over ids"));
  assert_null(df_mmark_new(s));
  /* what K3 has not: a cut (its recurrent state rolls back by marks) */
  df_mstate *ks = df_mstate_new(k3);
  assert_int_equal(df_mstate_truncate(ks, 0), -1);
  assert_null(df_dspark_state_of(ks));
  df_mstate_free(ks);
  /* a DSpark for a target that is not K3 is refused by name */
  char qd[1024];
  nano_draft_dir(qd, sizeof qd);
  df_model *qm, *bad;
  assert_int_equal(df_model_open_qwen3(&qm, qd, 0, &e), 0);
  assert_int_equal(df_model_open_dspark(&bad, g, qm, &e), -1);
  assert_non_null(strstr(e.msg, "the target (qwen3) is not a K3 model"));
  df_model_free(qm);

  df_mstate_free(f);
  df_mstate_free(c);
  df_mstate_free(s);
  df_dspark_state_free(ref);
  df_model_free(m);
  df_engine_close(en);
  free(taps), free(la), free(lb);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g);
  assert_int_equal(system(cmd), 0);
  printf("[ seam ] dspark: truncate, clone, copy, bytes through the seam as df_dspark_*\n");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qwen3_seam),
      cmocka_unit_test(test_dspark_seam),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The C DSpark forward against the independent float64 PyTorch reference
 * (tools/reference/dspark_ref.py) on nano-K3: tests/fixtures/dspark/
 * blocks.json holds blocks drafted by the reference from the checkpoint
 * `deltafin make-model --preset dspark --target models/nano-k3 --seed 1`
 * writes (regenerated here: its bytes follow the seed). The context taps are
 * the C target's own, so the tolerances cover the target's fp32 error too.
 *
 * Tolerances (stated; measured errors are printed): logits and
 * confidences within LOGIT_TOL / CONF_TOL absolute; the proposals are the
 * reference's wherever its top-2 margin exceeds 2 x LOGIT_TOL, and a
 * differing proposal is allowed only at a near-tie, after which the chain
 * conditions on another token and the rest of the block is not compared. */
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

#include "dspark/dspark.h"
#include "dspark/dspark_make.h"
#include "engine/draft.h"
#include "engine/engine.h"
#include "kernels/kernels.h"

#define LOGIT_TOL 1e-4
#define CONF_TOL 1e-5

typedef struct tapbuf {
  const int *ids;
  int nt, H, n;
  float *rows;
} tapbuf;

static void hook(void *ud, int layer, const float *h, int T, int hidden) {
  tapbuf *t = ud;
  for (int i = 0; i < t->nt; i++)
    if (t->ids[i] == layer)
      for (int r = 0; r < T; r++)
        memcpy(t->rows + ((size_t)r * t->nt + i) * hidden, h + (size_t)r * hidden,
               sizeof(float) * (size_t)hidden);
  t->n = T;
}

static void test_golden(void **st) {
  (void)st;
  const char *src = getenv("DF_SRC");
  if (!src) fail_msg("DF_SRC is not set (run through ctest)");
  char path[1024], target[1024], dir[] = "/tmp/df_dspark_golden_XXXXXX";
  snprintf(path, sizeof path, "%s/tests/fixtures/dspark/blocks.json", src);
  snprintf(target, sizeof target, "%s/models/nano-k3", src);
  json_error_t je;
  json_t *g = json_load_file(path, 0, &je);
  if (!g) fail_msg("%s: %s", path, je.text);
  assert_non_null(mkdtemp(dir));
  df_dspark_make_opts mo = {.target_dir = target, .out_dir = dir, .seed = 1, .layers = 2};
  df_err e;
  if (df_dspark_make(&mo, &e)) fail_msg("make: %s", e.msg);

  df_engine_opts o;
  df_engine_opts_default(&o);
  o.model_dir = target;
  o.threads = 1;
  o.store.heat_path = "";
  df_engine *en;
  if (df_engine_open(&en, &o, &e)) fail_msg("engine: %s", e.msg);
  df_draft *d = df_draft_new_dspark(en, dir, 0, &e);
  if (!d) fail_msg("%s", e.msg);
  const df_dspark *ds = df_draft_dspark(d, NULL);
  int H = df_engine_config(en)->hidden, V = df_engine_config(en)->vocab;
  int nt = df_dspark_n_taps(ds);
  json_t *gl = json_object_get(g, "target_layer_ids");
  assert_int_equal((int)json_array_size(gl), nt);
  for (int i = 0; i < nt; i++)
    assert_int_equal(df_dspark_taps(ds)[i], (int)json_integer_value(json_array_get(gl, i)));

  /* the C target's taps over the whole prompt */
  json_t *pj = json_object_get(g, "prompt_ids");
  int np = (int)json_array_size(pj);
  int *prompt = malloc(sizeof(int) * (size_t)np);
  for (int i = 0; i < np; i++) prompt[i] = (int)json_integer_value(json_array_get(pj, i));
  tapbuf tb = {.ids = df_dspark_taps(ds), .nt = nt, .H = H};
  tb.rows = malloc(sizeof(float) * (size_t)np * nt * H);
  df_session *s = df_session_new(en);
  df_session_set_layer_hook(s, hook, &tb);
  if (df_session_forward(s, prompt, np, NULL, NULL, &e)) fail_msg("%s", e.msg);
  df_session_set_layer_hook(s, NULL, NULL);
  assert_int_equal(tb.n, np);

  df_kctx kc = {.k = df_kern_select(0)};
  float *lg = malloc(sizeof(float) * (size_t)DF_DSPARK_BLOCK_MAX * V);
  double worst_l = 0, worst_c = 0;
  int compared = 0, nblocks = 0, ties = 0;
  size_t bi;
  json_t *b;
  json_array_foreach(json_object_get(g, "blocks"), bi, b) {
    int n = (int)json_integer_value(json_object_get(b, "n"));
    int x = (int)json_integer_value(json_object_get(b, "anchor"));
    int k = (int)json_integer_value(json_object_get(b, "k"));
    assert_true(n >= 1 && n <= np && k >= 1 && k <= 7);
    df_dspark_state *ctx = df_dspark_state_new(ds);
    assert_int_equal(df_dspark_context(ds, &kc, ctx, tb.rows, n, &e), 0);
    int out[DF_DSPARK_BLOCK_MAX];
    float conf[DF_DSPARK_BLOCK_MAX];
    assert_int_equal(df_dspark_propose(ds, &kc, ctx, x, k, 0, out, conf, lg, &e), k);
    json_t *pos = json_object_get(b, "positions");
    for (int j = 0; j < k; j++) {
      json_t *pj1 = json_array_get(pos, (size_t)j);
      const float *l = lg + (size_t)j * V;
      json_t *head = json_object_get(pj1, "logits_head");
      for (size_t c = 0; c < json_array_size(head); c++) {
        double diff = fabs(l[c] - json_real_value(json_array_get(head, c)));
        if (diff > worst_l) worst_l = diff;
        if (diff > LOGIT_TOL) fail_msg("block %zu j %d: logit %zu off by %g", bi, j + 1, c, diff);
      }
      json_t *ti = json_object_get(pj1, "top_ids"), *tv = json_object_get(pj1, "top_logits");
      for (size_t c = 0; c < json_array_size(ti); c++) {
        int id = (int)json_integer_value(json_array_get(ti, c));
        double diff = fabs(l[id] - json_real_value(json_array_get(tv, c)));
        if (diff > worst_l) worst_l = diff;
        if (diff > LOGIT_TOL) fail_msg("block %zu j %d: logit of %d off by %g", bi, j + 1, id, diff);
      }
      double cref = json_real_value(json_array_get(json_object_get(b, "confidences"), (size_t)j));
      double dc = fabs(conf[j] - cref);
      if (dc > worst_c) worst_c = dc;
      if (dc > CONF_TOL) fail_msg("block %zu j %d: confidence %g vs %g", bi, j + 1, conf[j], cref);
      int want = (int)json_integer_value(json_array_get(json_object_get(b, "proposals"), (size_t)j));
      double margin = json_real_value(json_object_get(pj1, "margin"));
      compared++;
      if (out[j] != want) {
        if (margin > 2 * LOGIT_TOL)
          fail_msg("block %zu j %d: proposal %d, the reference's %d (margin %g)", bi, j + 1, out[j],
                   want, margin);
        ties++;
        break; /* the chain now conditions on another token */
      }
    }
    df_dspark_state_free(ctx);
    nblocks++;
  }
  assert_true(nblocks >= 4);
  printf("[ dspark golden ] %d blocks, %d positions: worst logit error %.3g (tol %g), "
         "confidence %.3g (tol %g), %d near-tie proposals\n",
         nblocks, compared, worst_l, LOGIT_TOL, worst_c, CONF_TOL, ties);
  free(lg);
  free(tb.rows);
  free(prompt);
  df_session_free(s);
  df_draft_free(d);
  df_engine_close(en);
  json_decref(g);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_golden)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The DSpark draft (dspark/, engine/draft.c) on nano-K3 with a generated
 * (random) checkpoint: the loader refuses bad configs naming the key; the
 * ids of plain greedy decoding with blocks forced to be rejected at every
 * position; after every block the draft's context is exactly what a fresh
 * state built from the plain run's hidden states holds (its proposals'
 * logits bit for bit), so rollback leaves nothing of rejected rows behind. */
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
#include "engine/engine.h"
#include "kernels/kernels.h"

#include "nano_engine.h"
#define NGEN 24

static char g_dir[256]; /* the generated checkpoint */

static int setup(void **st) {
  (void)st;
  snprintf(g_dir, sizeof g_dir, "/tmp/df_dspark_XXXXXX");
  if (!mkdtemp(g_dir)) return -1;
  const char *src = getenv("DF_SRC");
  char target[1024];
  snprintf(target, sizeof target, "%s/models/nano-k3", src ? src : ".");
  df_dspark_make_opts o = {.target_dir = target, .out_dir = g_dir, .seed = 5, .layers = 2};
  df_err e;
  if (df_dspark_make(&o, &e)) {
    fprintf(stderr, "make: %s\n", e.msg);
    return -1;
  }
  return 0;
}

static int teardown(void **st) {
  (void)st;
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) ? -1 : 0;
}

/* Opens nano-K3 with the draft in dir; returns the error (NULL: opened). */
static const char *open_with(const char *dir, df_engine **out, int threads) {
  static df_err e;
  static char d[600];
  snprintf(d, sizeof d, "dspark:%s", dir);
  const char *src = getenv("DF_SRC");
  static char m[1024];
  snprintf(m, sizeof m, "%s/models/nano-k3", src);
  df_engine_opts o;
  df_engine_opts_default(&o);
  o.model_dir = m;
  o.threads = threads;
  o.store.heat_path = "";
  o.draft = d;
  *out = NULL;
  return df_engine_open(out, &o, &e) ? e.msg : NULL;
}

/* A copy of the checkpoint with one config key replaced (NULL: removed). */
static void variant(const char *dst, const char *key, json_t *val) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && ln -s '%s/model.safetensors' '%s/'",
           dst, dst, g_dir, dst);
  assert_int_equal(system(cmd), 0);
  char p[1024];
  snprintf(p, sizeof p, "%s/config.json", g_dir);
  json_t *c = json_load_file(p, 0, NULL);
  assert_non_null(c);
  if (val) json_object_set_new(c, key, val);
  else json_object_del(c, key);
  snprintf(p, sizeof p, "%s/config.json", dst);
  assert_int_equal(json_dump_file(c, p, 0), 0);
  json_decref(c);
}

static void test_refusals(void **st) {
  (void)st;
  df_engine *en;
  const char *msg = open_with(g_dir, &en, 1);
  assert_null(msg);
  df_engine_close(en);
  struct {
    const char *key;
    json_t *val;
    const char *says;
  } cases[] = {
      {"model_type", json_string("qwen3"), "'model_type'"},
      {"hidden_size", json_integer(128), "'hidden_size' = 128 does not match the target"},
      {"target_hidden_size", json_integer(512), "'target_hidden_size'"},
      {"target_num_hidden_layers", json_integer(93), "'target_num_hidden_layers' = 93 does not match"},
      {"vocab_size", json_integer(163840), "'vocab_size' = 163840 does not match"},
      {"aux_hidden_stream", json_string("residual"), "'aux_hidden_stream' = residual"},
      {"markov_head_type", json_string("mlp"), "'markov_head_type' = mlp"},
      {"target_layer_ids", json_pack("[i,i,i]", 1, 3, 8), "'target_layer_ids'[2]"},
      {"target_layer_ids", json_pack("[i,i]", -1, 3), "'target_layer_ids'[0]"},
      {"mask_token_id", NULL, "'mask_token_id' is missing"},
      {"block_size", json_integer(40), "'block_size' = 40 is out of range"},
      {"tie_word_embeddings", json_false(), "'tie_word_embeddings' = false"},
      {"enable_confidence_head", json_string("yes"), "'enable_confidence_head' must be"},
  };
  char dst[300];
  snprintf(dst, sizeof dst, "%s-bad", g_dir);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    variant(dst, cases[i].key, cases[i].val);
    msg = open_with(dst, &en, 1);
    if (!msg || !strstr(msg, cases[i].says))
      fail_msg("%s: got '%s', wanted '%s'", cases[i].key, msg ? msg : "(opened)", cases[i].says);
  }
  /* a tensor of the wrong shape is named */
  char cmd[4096];
  char target[1024];
  snprintf(target, sizeof target, "%s/models/nano-k3", getenv("DF_SRC"));
  char three[300];
  snprintf(three, sizeof three, "%s-3", g_dir);
  df_dspark_make_opts o = {.target_dir = target, .out_dir = three, .seed = 5, .layers = 3};
  df_err e;
  assert_int_equal(df_dspark_make(&o, &e), 0); /* 3 layers written, 4 claimed */
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && ln -s '%s/model.safetensors' '%s/'",
           dst, dst, three, dst);
  assert_int_equal(system(cmd), 0);
  json_t *c = json_load_file(strcat(strcpy(cmd, three), "/config.json"), 0, NULL);
  assert_non_null(c);
  json_object_set_new(c, "num_hidden_layers", json_integer(4));
  assert_int_equal(json_dump_file(c, strcat(strcpy(cmd, dst), "/config.json"), 0), 0);
  json_decref(c);
  msg = open_with(dst, &en, 1);
  if (!msg || !strstr(msg, "model.layers.3.input_layernorm.weight' is missing"))
    fail_msg("missing layer: got '%s'", msg ? msg : "(opened)");
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", dst, three);
  assert_int_equal(system(cmd), 0);
  printf("[ dspark ] %zu bad configs and a missing tensor refused by name\n",
         sizeof cases / sizeof *cases);
}

/* The plain run's taps, position by position (no rollback there). */
typedef struct taps {
  const int *ids;
  int nt, H, n, cap;
  float *rows; /* [cap][nt * H] */
  int cur;     /* rows of this forward call at the layer being collected */
} taps;

static void tap_hook(void *ud, int layer, const float *h, int T, int hidden) {
  taps *t = ud;
  for (int i = 0; i < t->nt; i++) {
    if (t->ids[i] != layer) continue;
    if (t->n + T > t->cap) {
      t->cap = (t->n + T) * 2;
      t->rows = realloc(t->rows, sizeof(float) * (size_t)t->cap * t->nt * t->H);
    }
    for (int r = 0; r < T; r++)
      memcpy(t->rows + ((size_t)(t->n + r) * t->nt + i) * hidden, h + (size_t)r * hidden,
             sizeof(float) * (size_t)hidden);
    if (i == t->nt - 1) t->n += T; /* the last tap in list order is the deepest here */
  }
}

/* Forced blocks: the right ids up to position p of the block, then a wrong
 * one; p runs through 0..kmax over the blocks. Checks the draft's state at
 * each proposal against a fresh one from the plain run's taps. */
typedef struct forcer {
  const int *ref;
  int V, blocks, checked;
  df_draft *d;
  const taps *tp;
  df_kctx kc;
} forcer;

static void force_edit(void *ud, const int *hist, int n, int *out, int *k, int kmax) {
  forcer *f = ud;
  int g = n - NP; /* ids emitted so far; hist[n-1] = ref[g-1] is not run yet */
  const df_dspark_state *st;
  const df_dspark *ds = df_draft_dspark(f->d, &st);
  assert_non_null(ds);
  assert_int_equal(df_dspark_state_pos(st), n - 1);
  assert_true(f->tp->n >= n - 1);
  df_dspark_state *fresh = df_dspark_state_new(ds);
  df_err e;
  assert_int_equal(df_dspark_context(ds, &f->kc, fresh, f->tp->rows, n - 1, &e), 0);
  int V = f->V, a[8], b[8];
  float *la = malloc(sizeof(float) * 7 * V), *lb = malloc(sizeof(float) * 7 * V);
  float ca[8], cb[8];
  assert_int_equal(df_dspark_propose(ds, &f->kc, st, hist[n - 1], 7, 0, a, ca, la, &e), 7);
  assert_int_equal(df_dspark_propose(ds, &f->kc, fresh, hist[n - 1], 7, 0, b, cb, lb, &e), 7);
  assert_memory_equal(la, lb, sizeof(float) * 7 * (size_t)V);
  assert_memory_equal(ca, cb, sizeof ca - sizeof(float));
  assert_memory_equal(a, b, sizeof(int) * 7);
  f->checked++;
  free(la), free(lb);
  df_dspark_state_free(fresh);
  int p = f->blocks++ % (kmax + 1);
  int kk = 0;
  while (kk < kmax && g + kk < NGEN) {
    out[kk] = kk < p ? f->ref[g + kk] : (f->ref[g + kk] + 1) % V;
    if (kk++ >= p) break;
  }
  *k = kk;
}

static void run_forced(int threads) {
  df_engine *en = NULL;
  const char *msg = open_with(g_dir, &en, threads);
  if (msg) fail_msg("%s", msg);
  df_session *s = df_session_new(en);
  df_gen_opts go;
  df_gen_opts_default(&go);
  go.max_new = NGEN;
  go.no_draft = 1;
  df_draft *d = NULL;
  df_err e;
  /* plain run with the taps collected */
  static const int ids_nano[5] = {1, 3, 4, 6, 7};
  taps tp = {.ids = ids_nano, .nt = 5, .H = df_engine_config(en)->hidden};
  df_session_set_layer_hook(s, tap_hook, &tp);
  int nref, n, *ref;
  df_gen_stats gs;
  if (df_generate(s, PROMPT, NP, &go, &ref, &nref, &gs, &e)) fail_msg("%s", e.msg);
  df_session_set_layer_hook(s, NULL, NULL);
  assert_int_equal(nref, NGEN);
  assert_int_equal(tp.n, NP + NGEN - 1);
  d = df_draft_new_dspark(en, g_dir, 0, &e);
  if (!d) fail_msg("%s", e.msg);
  forcer f = {.ref = ref, .V = df_engine_config(en)->vocab, .d = d, .tp = &tp,
              .kc = {.k = df_kern_select(0)}};
  df_draft_set_edit(d, force_edit, &f);
  go.no_draft = 0;
  go.draft = d;
  for (int k = 1; k <= 7; k++) {
    go.draft_max = k;
    f.blocks = 0;
    df_session_reset(s);
    int *out;
    if (df_generate(s, PROMPT, NP, &go, &out, &n, &gs, &e)) fail_msg("K %d: %s", k, e.msg);
    assert_int_equal(n, NGEN);
    assert_memory_equal(out, ref, sizeof(int) * NGEN);
    assert_true(gs.n_verify > 0);
    assert_true(gs.n_rollback > 0);
    free(out);
  }
  printf("[ dspark ] %d threads, K 1..7: plain ids with rejections forced at every block "
         "position; %d draft states equal to fresh ones\n", threads, f.checked);
  df_draft_free(d);
  free(tp.rows);
  free(ref);
  df_session_free(s);
  df_engine_close(en);
}

static void test_rollback_every_position(void **st) {
  (void)st;
  run_forced(1);
  run_forced(2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_rollback_every_position),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

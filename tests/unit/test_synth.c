/* The checkpoint generator: PRNG known answers, preset configs (K3's real
 * expert record size for k3-shaped), option errors, and a generated tiny
 * directory read back through the project's own readers: safetensors set,
 * config parser, expert store contiguity, tokenizer (specials placed right
 * after the ranks, ordinary text round-trips), and the --spine int8 variant
 * against it (the tensors kept byte-equal, the holes marked). Byte-level determinism and the
 * value recipe are checked independently in tools/reference/selfcheck.py. */
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
#include "format/codec.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "model/k3.h"
#include "model/spine_int8.h"
#include "store/store.h"
#include "synth/synth.h"
#include "tokenizer/tokenizer.h"

static char dir[256];

static int setup(void **st) {
  (void)st;
  snprintf(dir, sizeof dir, "/tmp/df_test_synth_XXXXXX");
  if (!mkdtemp(dir)) return -1;
  df_synth_opts o = {.preset = "tiny", .seed = 7, .out_dir = dir};
  df_err e = {{0}};
  if (df_synth_make_model(&o, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return -1;
  }
  return 0;
}

static int teardown(void **st) {
  (void)st;
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_prng_known_answers(void **st) {
  (void)st;
  /* splitmix64 from state 0: the published first outputs */
  uint64_t s = 0;
  assert_true(df_splitmix64(&s) == 0xe220a8397b1dcdafull);
  assert_true(df_splitmix64(&s) == 0x6e789e6aa1b965f4ull);
  /* xoshiro256** from the state {1, 2, 3, 4}: first output rotl(2*5, 7)*9 = 11520 */
  df_rng r = {{1, 2, 3, 4}};
  assert_true(df_rng_next(&r) == 11520u);
  assert_true(df_rng_next(&r) == 0u);
  /* uniform stays inside [-a, a) and is exactly representable steps of a*2^-23 */
  df_rng_seed_named(&r, 1, "x");
  for (int i = 0; i < 10000; i++) {
    double v = df_rng_uniform(&r, 0.75);
    assert_true(v >= -0.75 && v < 0.75);
    double steps = v / (0.75 * 0x1p-23);
    assert_true(steps == (double)(long long)steps);
  }
  /* streams depend on the name and the seed */
  df_rng a, b, c;
  df_rng_seed_named(&a, 1, "layers.0.q");
  df_rng_seed_named(&b, 1, "layers.0.k");
  df_rng_seed_named(&c, 2, "layers.0.q");
  uint64_t x = df_rng_next(&a);
  assert_true(x != df_rng_next(&b));
  assert_true(x != df_rng_next(&c));
}

static void test_presets(void **st) {
  (void)st;
  df_config c;
  df_err e = {{0}};
  df_synth_opts o = {.preset = "k3-shaped"};
  assert_int_equal(df_synth_config(&o, &c, &e), 0);
  df_expert_layout l;
  df_expert_layout_of(&c, &l);
  assert_true(l.total == 17547264u); /* kimi-k3.md section 4 */
  assert_true(l.w1s == 5505024u && l.w2p == 5849088u && l.w2s == 11354112u);
  assert_true(l.w3p == 11698176u && l.w3s == 17203200u);
  assert_int_equal(c.top_k, 16);
  assert_int_equal(c.n_experts, 64);
  assert_int_equal(c.n_layers, 5);
  o.experts = 128;
  o.moe_layers = 2;
  assert_int_equal(df_synth_config(&o, &c, &e), 0);
  assert_int_equal(c.n_experts, 128);
  assert_int_equal(c.n_layers, 3);
  assert_int_equal(c.layer_kind[2], DF_LAYER_MLA); /* the last layer is MLA, like K3 */

  o.experts = 8; /* fewer than top-k */
  assert_int_equal(df_synth_config(&o, &c, &e), -1);
  assert_non_null(strstr(e.msg, "--experts"));
  df_synth_opts t = {.preset = "tiny", .experts = 64};
  assert_int_equal(df_synth_config(&t, &c, &e), -1);
  assert_non_null(strstr(e.msg, "k3-shaped"));
  df_synth_opts u = {.preset = "huge"};
  assert_int_equal(df_synth_config(&u, &c, &e), -1);
  assert_non_null(strstr(e.msg, "unknown preset"));

  t.experts = 0;
  assert_int_equal(df_synth_config(&t, &c, &e), 0);
  assert_int_equal(c.vocab, c.bos_id + 256);
  assert_int_equal(c.eos_id, c.bos_id + 2);
  assert_int_equal(c.pad_id, c.bos_id + 255);
  assert_true(c.attn_res_block * 2 <= c.n_layers); /* >= 2 AttnRes blocks */
  assert_true(c.n_kda > 0 && c.n_mla > 0);
  assert_true(c.n_experts >= 16 && c.top_k >= 4 && c.latent % 32 == 0 && c.moe_inter % 32 == 0);
}

static void test_reads_back(void **st) {
  (void)st;
  df_err e = {{0}};
  df_config c;
  char *cp = df_path_join(dir, "config.json");
  assert_int_equal(df_config_load(&c, cp, &e), 0);
  free(cp);
  assert_true(c.nested);
  df_st_set s;
  assert_int_equal(df_st_set_open(&s, dir, &e), 0);
  assert_true(s.nfiles >= 2); /* sharded with an index */
  const df_tensor *al = df_st_set_find(&s, "language_model.model.layers.0.self_attn.A_log");
  assert_non_null(al);
  assert_int_equal(al->dtype, DF_DT_F32);
  assert_int_equal(al->shape[0], c.kda_head_dim > c.kda_heads ? c.kda_head_dim : c.kda_heads);
  const float *a = al->data;
  for (int i = c.kda_heads; i < al->shape[0]; i++) assert_true(a[i] == 0.0f); /* K3's padding */
  for (int i = 0; i < c.kda_heads; i++) assert_true(a[i] != 0.0f);
  const df_tensor *conv = df_st_set_find(&s, "language_model.model.layers.1.self_attn.q_conv1d.weight");
  assert_non_null(conv);
  assert_int_equal(conv->ndim, 3);
  assert_int_equal(conv->shape[1], 1);
  assert_non_null(df_st_set_find(&s, "vision_tower.encoder.blocks.0.attn.qkv.weight"));
  const df_tensor *lm = df_st_set_find(&s, "language_model.lm_head.weight");
  assert_non_null(lm);
  assert_int_equal(lm->dtype, DF_DT_BF16);
  /* scales are valid E8M0 everywhere; one expert's six tensors are one record */
  df_store *store = NULL;
  df_store_opts so = {.model_dir = dir, .cache_mb = 0, .no_pack = 1};
  assert_int_equal(df_store_open(&store, &s, &c, &so, &e), 0);
  df_store_close(store);
  const df_tensor *sc = df_st_set_find(&s, "language_model.model.layers.3.block_sparse_moe.experts.5.w2.weight_scale");
  assert_non_null(sc);
  assert_int_equal(df_mxfp4_check_scales(sc->data, sc->nbytes, "scale", &e), 0);
  df_st_set_close(&s);
}

static void test_tokenizer(void **st) {
  (void)st;
  df_err e = {{0}};
  df_tok *t = NULL;
  assert_int_equal(df_tok_load(&t, dir, &e), 0);
  df_config c;
  df_synth_opts o = {.preset = "tiny"};
  assert_int_equal(df_synth_config(&o, &c, &e), 0);
  assert_int_equal(df_tok_vocab_size(t), c.vocab);
  assert_int_equal(df_tok_special_id(t, "[BOS]"), c.bos_id);
  assert_int_equal(df_tok_special_id(t, "<|end_of_msg|>"), c.eos_id);
  assert_int_equal(df_tok_special_id(t, "[PAD]"), c.pad_id);
  assert_int_equal(df_tok_special_id(t, "<|open|>"), c.bos_id + 3);
  assert_int_equal(df_tok_special_id(t, "<|media_pad|>"), c.bos_id + 21);
  const char *text = "The capital of France is Paris.\n  int main(void) { return 0; }";
  int *ids = NULL;
  size_t n = 0, cap = 0, len = 0;
  assert_int_equal(df_tok_encode(t, text, strlen(text), &ids, &n, &cap, &e), 0);
  assert_true(n < strlen(text) / 2); /* the learned merges compress English and C */
  char *back = df_tok_decode(t, ids, n, &len);
  assert_int_equal(len, strlen(text));
  assert_memory_equal(back, text, len);
  free(back);
  free(ids);
  df_tok_free(t);
}

/* --spine int8 (tiny, the setup's seed): every tensor the int8 copy does not
 * replace has the normal model's bytes, every one it replaces reads as zeros
 * and the index marks them so no bf16 reader takes them; the int8 copy's
 * index lists exactly the replaced ones. */
static void test_spine_int8(void **st) {
  (void)st;
  char *out = df_path_join(dir, "i8");
  df_synth_opts o = {.preset = "tiny", .seed = 7, .out_dir = out, .spine_int8 = 1, .threads = 3};
  df_err e = {{0}};
  assert_int_equal(df_synth_make_model(&o, &e), 0);
  df_st_set a, b, q;
  assert_int_equal(df_st_set_open(&a, dir, &e), 0);
  assert_int_equal(df_st_set_open(&b, out, &e), 0);
  char *qdir = df_path_join(out, DF_SPINE_INT8_DIR);
  assert_int_equal(df_st_set_open(&q, qdir, &e), 0);
  assert_int_equal(a.ntensors, b.ntensors);
  int holes = 0;
  for (int i = 0; i < a.ntensors; i++) {
    const df_tensor *x = a.all[i], *y = b.all[i];
    assert_string_equal(x->name, y->name);
    assert_int_equal(x->offset, y->offset);
    assert_int_equal(x->nbytes, y->nbytes);
    if (df_k3_int8_eligible(x)) {
      holes++;
      for (uint64_t k = 0; k < y->nbytes; k++) assert_int_equal(((const uint8_t *)y->data)[k], 0);
      assert_non_null(df_st_set_find(&q, x->name));
    } else {
      assert_memory_equal(x->data, y->data, x->nbytes);
      assert_null(df_st_set_find(&q, x->name));
    }
  }
  assert_true(holes > 0);
  assert_int_equal(q.ntensors, 2 * holes); /* each with its scales */
  assert_false(df_k3_spine_is_holes(&a));
  assert_true(df_k3_spine_is_holes(&b));
  assert_int_equal(df_k3_spine_holes_check(&a, 0, "t", &e), 0);
  assert_int_equal(df_k3_spine_holes_check(&b, 1, "t", &e), 0);
  assert_int_equal(df_k3_spine_holes_check(&b, 0, "t", &e), -1);
  assert_non_null(strstr(e.msg, "--spine int8"));
  df_st_set_close(&a);
  df_st_set_close(&b);
  df_st_set_close(&q);
  free(qdir);
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prng_known_answers),
      cmocka_unit_test(test_presets),
      cmocka_unit_test(test_reads_back),
      cmocka_unit_test(test_tokenizer),
      cmocka_unit_test(test_spine_int8),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

/* The Qwen3 draft model's state API on models/nano-draft (prefill against
 * single steps, rollback by truncate, thread counts, errors) and the
 * tokenizer.json BPE's merge rule and load errors on small hand-written files.
 * The forward's numbers are checked against the references elsewhere
 * (tests/e2e/test_qwen3_ref.sh); here the invariants the speculation code
 * relies on: equal bits whatever the split, and a rollback that forgets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/pool.h"
#include "base/util.h"
#include "kernels/kernels.h"
#include "qwen3/qwen3.h"
#include "tokenizer/hf_bpe.h"

static df_qwen3 *model;
static int V;
static const int ids[] = {79, 110, 347, 654, 264, 260, 781, 44, 889, 700, 260, 337};
#define N ((int)(sizeof ids / sizeof ids[0]))

static int setup(void **st) {
  (void)st;
  const char *src = getenv("DF_SRC");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/models/nano-draft", src ? src : ".");
  df_err e;
  if (df_qwen3_load(&model, dir, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return -1;
  }
  V = df_qwen3_vocab(model);
  return 0;
}

static int teardown(void **st) {
  (void)st;
  df_qwen3_free(model);
  return 0;
}

static void test_config(void **st) {
  (void)st;
  assert_int_equal(V, 3072);
  assert_int_equal(df_qwen3_eos(model), 3069);
  assert_int_equal(df_qwen3_max_pos(model), 4096);
}

/* Logits of ids fed one at a time, row t = after ids[0..t]. */
static float *single_steps(const df_kctx *kc) {
  df_err e;
  df_qwen3_state *s = df_qwen3_state_new(model);
  float *out = df_xmalloc((size_t)N * V * sizeof *out);
  for (int t = 0; t < N; t++) {
    assert_int_equal(df_qwen3_forward(model, kc, s, ids + t, 1, out + (size_t)t * V, NULL, &e), 0);
    assert_int_equal(df_qwen3_state_pos(s), t + 1);
  }
  df_qwen3_state_free(s);
  return out;
}

static void test_prefill_equals_steps(void **st) {
  (void)st;
  df_err e;
  df_kctx kc = {.k = df_kern_select(0)};
  float *ref = single_steps(&kc);
  float *all = df_xmalloc((size_t)N * V * sizeof *all), *last = df_xmalloc((size_t)V * sizeof *last);
  df_pool *pool = df_pool_create(3);
  for (int threaded = 0; threaded < 2; threaded++) {
    df_kctx k2 = {.k = kc.k, .pool = threaded ? pool : NULL};
    for (int split = 1; split <= N; split++) {
      df_qwen3_state *s = df_qwen3_state_new(model);
      for (int at = 0; at < N; at += split) {
        int T = N - at < split ? N - at : split;
        assert_int_equal(
            df_qwen3_forward(model, &k2, s, ids + at, T, last, all + (size_t)at * V, &e), 0);
        assert_memory_equal(last, all + (size_t)(at + T - 1) * V, (size_t)V * sizeof *last);
      }
      assert_memory_equal(all, ref, (size_t)N * V * sizeof *all);
      df_qwen3_state_free(s);
    }
  }
  df_pool_destroy(pool);
  free(all);
  free(last);
  free(ref);
}

/* Rollback: after truncate(p), the state is the one that only saw ids[0..p):
 * re-feeding the same ids gives the same bits, other ids give what a fresh
 * state fed prefix + other ids gives. */
static void test_truncate(void **st) {
  (void)st;
  df_err e;
  df_kctx kc = {.k = df_kern_select(0)};
  float *ref = single_steps(&kc);
  float *all = df_xmalloc((size_t)N * V * sizeof *all);
  df_qwen3_state *s = df_qwen3_state_new(model);
  assert_int_equal(df_qwen3_forward(model, &kc, s, ids, N, NULL, all, &e), 0);
  df_qwen3_state_truncate(s, 5);
  assert_int_equal(df_qwen3_state_pos(s), 5);
  df_qwen3_state_truncate(s, 9); /* past the end: ignored */
  assert_int_equal(df_qwen3_state_pos(s), 5);
  assert_int_equal(df_qwen3_forward(model, &kc, s, ids + 5, N - 5, NULL, all, &e), 0);
  assert_memory_equal(all, ref + (size_t)5 * V, (size_t)(N - 5) * V * sizeof *all);
  /* a rejected draft: different ids after position 5, then rolled back again */
  int other[] = {11, 12, 13, 14};
  df_qwen3_state_truncate(s, 5);
  assert_int_equal(df_qwen3_forward(model, &kc, s, other, 4, NULL, all, &e), 0);
  df_qwen3_state *f = df_qwen3_state_new(model);
  int seq[9];
  memcpy(seq, ids, 5 * sizeof *seq);
  memcpy(seq + 5, other, sizeof other);
  float *fresh = df_xmalloc((size_t)9 * V * sizeof *fresh);
  assert_int_equal(df_qwen3_forward(model, &kc, f, seq, 9, NULL, fresh, &e), 0);
  assert_memory_equal(all, fresh + (size_t)5 * V, (size_t)4 * V * sizeof *all);
  /* the logits do depend on the history (the test above could not pass by accident) */
  assert_memory_not_equal(all, ref + (size_t)5 * V, (size_t)V * sizeof *all);
  df_qwen3_state_reset(s);
  assert_int_equal(df_qwen3_state_pos(s), 0);
  assert_int_equal(df_qwen3_forward(model, &kc, s, ids, N, NULL, all, &e), 0);
  assert_memory_equal(all, ref, (size_t)N * V * sizeof *all);
  df_qwen3_state_free(f);
  df_qwen3_state_free(s);
  free(fresh);
  free(all);
  free(ref);
}

static void test_forward_errors(void **st) {
  (void)st;
  df_err e;
  df_kctx kc = {.k = df_kern_select(0)};
  df_qwen3_state *s = df_qwen3_state_new(model);
  float *last = df_xmalloc((size_t)V * sizeof *last);
  assert_int_equal(df_qwen3_forward(model, &kc, s, ids, 3, last, NULL, &e), 0);
  int bad[] = {5, 3072};
  assert_int_equal(df_qwen3_forward(model, &kc, s, bad, 2, last, NULL, &e), -1);
  assert_non_null(strstr(e.msg, "id 3072 at row 1 is outside the vocabulary"));
  assert_int_equal(df_qwen3_state_pos(s), 3); /* unchanged */
  assert_int_equal(df_qwen3_forward(model, &kc, s, ids, 0, last, NULL, &e), -1);
  df_qwen3_state_free(s);
  free(last);
}

/* ---- tokenizer.json ---- */

static df_hftok *parse(const char *json, df_err *e) {
  df_hftok *t = NULL;
  if (df_hftok_parse(&t, json, strlen(json), "test.json", e)) return NULL;
  return t;
}

#define PRE "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}," \
            "\"decoder\":{\"type\":\"ByteLevel\"},"

/* Only listed pairs merge: "ab" + "c" is the vocab's "abc" but not a merge,
 * so "abc" is [ab, c] (tiktoken's rule, merging any adjacent pair whose bytes
 * are a token, would give [abc]). Merges as "a b" strings and as [a, b]. */
static void test_hf_pair_rule(void **st) {
  (void)st;
  const char *forms[] = {
      "{" PRE "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"bc\":4,"
      "\"abc\":5},\"merges\":[\"a b\",\"a bc\",\"b c\"]}}",
      "{" PRE "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"bc\":4,"
      "\"abc\":5},\"merges\":[[\"a\",\"b\"],[\"a\",\"bc\"],[\"b\",\"c\"]]}}"};
  for (int f = 0; f < 2; f++) {
    df_err e;
    df_hftok *t = parse(forms[f], &e);
    if (!t) fail_msg("%s", e.msg);
    int *ids = NULL;
    size_t n = 0, cap = 0;
    assert_int_equal(df_hftok_encode(t, "abc", 3, 1, &ids, &n, &cap, &e), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[1], 2);
    /* the lowest rank merges first wherever it is: (a b) at 2 before (b c) at 0 */
    n = 0;
    assert_int_equal(df_hftok_encode(t, "bcab", 4, 1, &ids, &n, &cap, &e), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 4);
    assert_int_equal(ids[1], 3);
    size_t l;
    char *s = df_hftok_decode(t, ids, n, &l);
    assert_string_equal(s, "bcab");
    free(s);
    free(ids);
    df_hftok_free(t);
  }
}

static void test_hf_added(void **st) {
  (void)st;
  df_err e;
  df_hftok *t = parse(
      "{" PRE "\"added_tokens\":[{\"id\":6,\"content\":\"<s>\",\"special\":true},"
      "{\"id\":7,\"content\":\"<ss>\",\"special\":false}],"
      "\"model\":{\"type\":\"BPE\",\"vocab\":{\"<\":0,\">\":1,\"s\":2},\"merges\":[]}}",
      &e);
  if (!t) fail_msg("%s", e.msg);
  assert_int_equal(df_hftok_vocab_size(t), 8);
  assert_int_equal(df_hftok_added_id(t, "<ss>"), 7);
  assert_true(df_hftok_is_special(t, 6));
  assert_false(df_hftok_is_special(t, 7));
  int *ids = NULL;
  size_t n = 0, cap = 0;
  assert_int_equal(df_hftok_encode(t, "s<ss><s>", 8, 1, &ids, &n, &cap, &e), 0);
  int want[] = {2, 7, 6};
  assert_int_equal(n, 3);
  assert_memory_equal(ids, want, sizeof want);
  n = 0;
  assert_int_equal(df_hftok_encode(t, "<s>", 3, 0, &ids, &n, &cap, &e), 0);
  int plain[] = {0, 2, 1};
  assert_int_equal(n, 3);
  assert_memory_equal(ids, plain, sizeof plain);
  assert_int_equal(df_hftok_encode(t, "\xff", 1, 1, &ids, &n, &cap, &e), -1);
  assert_non_null(strstr(e.msg, "not valid UTF-8"));
  free(ids);
  df_hftok_free(t);
}

static void test_hf_errors(void **st) {
  (void)st;
  static const struct {
    const char *json, *want;
  } cases[] = {
      {"{" PRE "\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", "model.type 'Unigram'"},
      {"{" PRE "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}",
       "model.merges[0]: 'b' is not in the vocab"},
      {"{" PRE "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]}}",
       "model.merges[0] 'ab' is not \"left right\""},
      {"{" PRE "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}",
       "model.vocab['a'] must be an id"},
      {"{" PRE "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}",
       "id 0 is used twice"},
      {"{\"pre_tokenizer\":{\"type\":\"Whitespace\"},\"decoder\":{\"type\":\"ByteLevel\"},"
       "\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}",
       "pre_tokenizer type 'Whitespace' is not supported"},
      {"{\"normalizer\":{\"type\":\"NFKC\"}," PRE
       "\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}",
       "normalizer 'NFKC' is not supported"},
      {"{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":"
       "\"Isolated\"},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
       "\"vocab\":{},\"merges\":[]}}",
       "Split pattern"},
      {"{" PRE "\"added_tokens\":[{\"id\":1,\"content\":\"x\",\"lstrip\":true}],"
       "\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}",
       "lstrip/rstrip/single_word unsupported"},
      {"{\"model\":", "test.json:"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    df_err e;
    df_hftok *t = parse(cases[i].json, &e);
    if (t) fail_msg("case %zu was accepted", i);
    if (!strstr(e.msg, cases[i].want)) fail_msg("case %zu: '%s' lacks '%s'", i, e.msg, cases[i].want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config),
      cmocka_unit_test(test_prefill_equals_steps),
      cmocka_unit_test(test_truncate),
      cmocka_unit_test(test_forward_errors),
      cmocka_unit_test(test_hf_pair_rule),
      cmocka_unit_test(test_hf_added),
      cmocka_unit_test(test_hf_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

/* The public API (include/deltafin.h) over the committed nano-K3: its error
 * messages, what generate hands the callback and the caller, stop ids,
 * cancelling from the callback, sessions continuing and resetting, and the
 * store's counters. The ids themselves are checked against `deltafin run` in
 * e2e.test_api_example; here the reference is the API's own plain run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "deltafin.h"

static df_api_engine *open_nano(void) {
  const char *src = getenv("DF_SRC");
  if (!src) fail_msg("DF_SRC is not set (run through ctest)");
  static char dir[1024];
  snprintf(dir, sizeof dir, "%s/models/nano-k3", src);
  df_api_opts o;
  df_api_opts_init(&o);
  o.model_dir = dir;
  o.threads = 2;
  df_api_engine *en;
  char err[1024];
  if (df_api_engine_open(&en, &o, err, sizeof err)) fail_msg("open: %s", err);
  return en;
}

static void test_open_errors(void **st) {
  (void)st;
  df_api_opts o;
  df_api_opts_init(&o);
  df_api_engine *en = (df_api_engine *)1;
  char err[256] = "";
  assert_int_equal(df_api_engine_open(&en, &o, err, sizeof err), -1);
  assert_null(en);
  assert_non_null(strstr(err, "model_dir"));
  o.model_dir = "/nonexistent/deltafin-model";
  assert_int_equal(df_api_engine_open(&en, &o, err, sizeof err), -1);
  assert_non_null(strstr(err, "/nonexistent/deltafin-model"));
  o.threads = -1;
  assert_int_equal(df_api_engine_open(&en, &o, NULL, 0), -1); /* no buffer: still refused */
}

typedef struct seen {
  int ids[64], n, stop_after;
} seen;

static int record(void *ud, int id) {
  seen *s = ud;
  if (s->n < 64) s->ids[s->n] = id;
  s->n++;
  return s->stop_after && s->n >= s->stop_after;
}

static void test_generate(void **st) {
  (void)st;
  df_api_engine *en = open_nano();
  char err[1024];
  int *prompt;
  size_t np;
  assert_int_equal(df_api_tokenize(en, "The cat sat on the mat", &prompt, &np, err, sizeof err), 0);
  assert_true(np > 0);
  char *back = df_api_detokenize(en, prompt, np);
  assert_string_equal(back, "The cat sat on the mat");
  df_api_free(back);
  int bad = df_api_vocab(en);
  assert_null(df_api_detokenize(en, &bad, 1));

  df_api_session *s = df_api_session_new(en);
  df_api_gen_opts g;
  df_api_gen_opts_init(&g);
  g.max_new = 8;
  seen sn = {.n = 0};
  g.on_token = record;
  g.ud = &sn;
  int *ids, n;
  df_api_gen_result r;
  assert_int_equal(df_api_generate(s, prompt, (int)np, &g, &ids, &n, &r, err, sizeof err), 0);
  assert_int_equal(n, 8);
  assert_int_equal(sn.n, 8);
  assert_memory_equal(ids, sn.ids, sizeof(int) * 8);
  assert_int_equal(r.n_prompt, (int)np);
  assert_int_equal(r.n_gen, 8);
  assert_int_equal(r.finish, DF_API_FINISH_LENGTH);
  assert_true(df_api_session_pos(s) >= (int)np + 7);

  /* the same prompt after a reset: the same ids (greedy is exact) */
  df_api_session_reset(s);
  assert_int_equal(df_api_session_pos(s), 0);
  g.on_token = NULL;
  int *again, na;
  assert_int_equal(df_api_generate(s, prompt, (int)np, &g, &again, &na, NULL, err, sizeof err), 0);
  assert_int_equal(na, 8);
  assert_memory_equal(again, ids, sizeof(int) * 8);
  df_api_free(again);

  /* a stop id: generation ends right after it */
  df_api_session_reset(s);
  g.stop_ids = &ids[2];
  g.nstop = 1;
  int first = 0;
  while (ids[first] != ids[2]) first++; /* the first time that id comes */
  assert_int_equal(df_api_generate(s, prompt, (int)np, &g, &again, &na, &r, err, sizeof err), 0);
  assert_int_equal(r.finish, DF_API_FINISH_STOP);
  assert_int_equal(na, first + 1);
  df_api_free(again);

  /* the callback cancels after 3 ids */
  df_api_session_reset(s);
  g.stop_ids = NULL;
  g.nstop = 0;
  seen c = {.stop_after = 3};
  g.on_token = record;
  g.ud = &c;
  assert_int_equal(df_api_generate(s, prompt, (int)np, &g, &again, &na, &r, err, sizeof err), 0);
  assert_int_equal(r.finish, DF_API_FINISH_CANCEL);
  assert_int_equal(c.n, 3);
  assert_memory_equal(c.ids, ids, sizeof(int) * 3);
  df_api_free(again);

  /* bad options are refused with the rule */
  df_api_session_reset(s);
  g.top_p = 0;
  assert_int_equal(df_api_generate(s, prompt, (int)np, &g, NULL, NULL, NULL, err, sizeof err), -1);
  assert_non_null(strstr(err, "top_p"));

  df_api_store_stats ss;
  assert_int_equal(df_api_store_stats_get(en, &ss, err, sizeof err), 0);
  assert_true(ss.expert_requests > 0);
  assert_true(ss.cache_hits <= ss.expert_requests);
  assert_true(ss.expert_bytes_read > 0);
  assert_int_equal(ss.read_errors, 0);
  assert_int_equal(ss.checksum_errors, 0);

  df_api_free(ids);
  df_api_free(prompt);
  df_api_session_free(s);
  df_api_engine_close(en);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_open_errors),
      cmocka_unit_test(test_generate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The expert cache's eviction policy (store/evict.c): the decayed score
 * against its definition (frequency halving every half-life passes), the
 * order (unprotected first, coldest first, ties to the lower key), and for
 * given access sequences exactly which entries a cache of C keeps. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/evict.h"

#define HL 32.0

static void test_score_decays_by_half_life(void **st) {
  (void)st;
  assert_float_equal(df_evict_score(4.0, 10, 10, HL), 4.0, 0);
  assert_float_equal(df_evict_score(4.0, 10, 42, HL), 2.0, 1e-12);
  assert_float_equal(df_evict_score(4.0, 10, 74, HL), 1.0, 1e-12);
  double s = 0;
  long t = 0;
  df_evict_touch(&s, &t, 5, HL);
  assert_float_equal(s, 1.0, 0);
  assert_int_equal(t, 5);
  df_evict_touch(&s, &t, 37, HL); /* one half-life later: 1/2 + 1 */
  assert_float_equal(s, 1.5, 1e-12);
  assert_int_equal(t, 37);
}

static void test_order(void **st) {
  (void)st;
  df_evict_cand c[] = {{7, 0, 3.0}, {2, 1, 0.1}, {5, 0, 1.0}, {3, 0, 1.0}, {9, 1, 5.0}, {1, 0, 9.0}};
  df_evict_order(c, 6);
  int want[] = {3, 5, 7, 1, 2, 9}; /* unprotected coldest first (tie 1.0: key 3 before 5), then protected */
  for (int i = 0; i < 6; i++) assert_int_equal(c[i].key, want[i]);
}

/* A cache of `cap` entries fed batches of keys, one batch per pass; after
 * each batch it evicts down to cap in the policy's order (as the store does
 * at df_store_end). An entry hit twice is protected while fewer than 4/5 of
 * the cache are (the store's rule, cache.c).
 * Returns the kept keys, ascending, in kept[] (their count). */
typedef struct sim_entry {
  int key, present, hits, prot;
  double score;
  long tick;
} sim_entry;

static int simulate(const int *seq, int cap, int *kept) {
  sim_entry e[16];
  memset(e, 0, sizeof e);
  long pass = 0;
  int nprot = 0;
  for (const int *p = seq; *p != -2; p++) {
    pass++;
    for (; *p >= 0; p++) {
      sim_entry *x = &e[*p];
      x->key = *p;
      if (x->present && ++x->hits >= 2 && !x->prot && nprot < cap * 4 / 5) x->prot = 1, nprot++;
      x->present = 1;
      df_evict_touch(&x->score, &x->tick, pass, HL);
    }
    df_evict_cand c[16];
    int n = 0;
    for (int k = 0; k < 16; k++)
      if (e[k].present) c[n++] = (df_evict_cand){k, e[k].prot, df_evict_score(e[k].score, e[k].tick, pass, HL)};
    df_evict_order(c, (size_t)n);
    for (int i = 0; i < n - cap; i++) {
      nprot -= e[c[i].key].prot;
      e[c[i].key] = (sim_entry){0};
    }
    if (*p == -2) break;
  }
  int m = 0;
  for (int k = 0; k < 16; k++)
    if (e[k].present) kept[m++] = k;
  return m;
}

static void expect_kept(const int *seq, int cap, const int *want, int nwant) {
  int kept[16];
  int n = simulate(seq, cap, kept);
  if (n != nwant) fail_msg("kept %d entries, want %d", n, nwant);
  for (int i = 0; i < n; i++)
    if (kept[i] != want[i]) fail_msg("kept[%d] = %d, want %d", i, kept[i], want[i]);
}

static void test_access_sequences(void **st) {
  (void)st;
  /* batches (-1 ends one, -2 ends the sequence); cache of 2:
   * pass 1 {0,1,2}: 2 scores lowest? all 1.0: evict the lowest key first -> keeps {1,2} */
  expect_kept((int[]){0, 1, 2, -1, -2}, 2, (int[]){1, 2}, 2);
  /* 0 every pass, 1 twice, then one-offs 2, 3, 4: the frequent ones stay */
  expect_kept((int[]){0, 1, -1, 0, 1, -1, 0, 2, -1, 0, 3, -1, 0, 4, -1, -2}, 2, (int[]){0, 1}, 2);
  /* a burst of one-offs (a prefill chunk) does not flush the hot pair */
  expect_kept((int[]){5, 6, -1, 5, 6, -1, 5, 6, -1, 7, 8, 9, 10, 11, -1, -2}, 2, (int[]){5, 6}, 2);
  /* decay: 3 used twice at passes 1-2 (score 1.98), 4 once later; a cache
   * of 1 (nothing protected) keeps 3 while 1.98 * 2^(-d/32) > 1 */
  int seq[256], n = 0;
  for (int gap = 18; gap <= 38; gap += 20) {
    n = 0;
    seq[n++] = 3, seq[n++] = -1, seq[n++] = 3, seq[n++] = -1;
    for (int i = 0; i < gap - 1; i++) seq[n++] = -1; /* passes with other layers' work */
    seq[n++] = 4, seq[n++] = -1, seq[n++] = -2;
    expect_kept(seq, 1, (int[]){gap == 18 ? 3 : 4}, 1);
  }
  /* protection: 8, hit twice in passes 1-3, is protected; 100 passes later
   * its score (0.33) is below two one-offs (1.0 each), yet the unprotected
   * one-off goes first (9: the tie with 10 to the lower key) */
  n = 0;
  seq[n++] = 8, seq[n++] = -1, seq[n++] = 8, seq[n++] = -1, seq[n++] = 8, seq[n++] = -1;
  for (int i = 0; i < 99; i++) seq[n++] = -1;
  seq[n++] = 9, seq[n++] = 10, seq[n++] = -1, seq[n++] = -2;
  expect_kept(seq, 2, (int[]){8, 10}, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_score_decays_by_half_life),
      cmocka_unit_test(test_order),
      cmocka_unit_test(test_access_sequences),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The expert cache's eviction policy (store/evict.c): the decayed score
 * against its definition (frequency halving every half-life passes), the
 * order (unprotected first, coldest first, new entries a margin colder, ties
 * to the lower key), and for given access sequences exactly which entries a
 * cache of C keeps, a cycle larger than the cache included. */
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
  df_evict_cand c[] = {{7, 0, 3.0, 0}, {2, 1, 0.1, 0}, {5, 0, 1.0, 0},
                       {3, 0, 1.0, 0}, {9, 1, 5.0, 0}, {1, 0, 9.0, 0}};
  df_evict_order(c, 6);
  int want[] = {3, 5, 7, 1, 2, 9}; /* unprotected coldest first (tie 1.0: key 3 before 5), then protected */
  for (int i = 0; i < 6; i++) assert_int_equal(c[i].key, want[i]);
}

/* A new entry ranks DF_EVICT_ADMIT_MARGIN (2) below its score: 4.5 new is
 * 2.5, below 3.0 held; 5.0 new ties 3.0 held (the lower key first); 5.5 new
 * is above it. Protection still comes first. */
static void test_admission_margin(void **st) {
  (void)st;
  df_evict_cand c[] = {{4, 0, 4.5, 1}, {6, 0, 3.0, 0}, {8, 1, 0.5, 1}};
  df_evict_order(c, 3);
  int want[] = {4, 6, 8};
  for (int i = 0; i < 3; i++) assert_int_equal(c[i].key, want[i]);
  df_evict_cand d[] = {{6, 0, 3.0, 0}, {4, 0, 5.0, 1}};
  df_evict_order(d, 2);
  assert_int_equal(d[0].key, 4); /* 3.0 = 3.0: key 4 before 6 */
  df_evict_cand f[] = {{6, 0, 3.0, 0}, {4, 0, 5.5, 1}};
  df_evict_order(f, 2);
  assert_int_equal(f[0].key, 6);
}

/* A cache of `cap` entries fed batches of keys (-1 ends a batch and its
 * pass, -3 a batch with more of the same pass to come: a layer's, -2 the
 * sequence); after each batch it evicts down to cap in the policy's order
 * (as the store does at df_store_end). Every key's score is kept whether it is held or not; an
 * entry first used in this pass is new; an entry hit twice is
 * protected while fewer than 4/5 of the cache are (the store's rules,
 * cache.c). Returns the kept keys, ascending, in kept[] (their count), and
 * the hits of the last pass in *last_hits. */
typedef struct sim_entry {
  int present, hits, prot;
  long born;
} sim_entry;

static int simulate_hits(const int *seq, int cap, int *kept, int *last_hits) {
  sim_entry e[16];
  double score[16] = {0};
  long tick[16] = {0};
  memset(e, 0, sizeof e);
  long pass = 0;
  int nprot = 0, hits = 0;
  int new_pass = 1;
  for (const int *p = seq; *p != -2; p++) {
    if (new_pass) pass++, hits = 0;
    for (; *p >= 0; p++) {
      sim_entry *x = &e[*p];
      if (x->present) {
        hits++;
        if (++x->hits >= 2 && !x->prot && nprot < cap * 4 / 5) x->prot = 1, nprot++;
      } else {
        *x = (sim_entry){.present = 1, .born = pass};
      }
      df_evict_touch(&score[*p], &tick[*p], pass, HL);
    }
    df_evict_cand c[16];
    int n = 0;
    for (int k = 0; k < 16; k++)
      if (e[k].present)
        c[n++] = (df_evict_cand){k, e[k].prot, df_evict_score(score[k], tick[k], pass, HL),
                                 e[k].born == pass};
    df_evict_order(c, (size_t)n);
    for (int i = 0; i < n - cap; i++) {
      nprot -= e[c[i].key].prot;
      e[c[i].key] = (sim_entry){0};
    }
    if (*p == -2) break;
    new_pass = *p == -1;
  }
  int m = 0;
  for (int k = 0; k < 16; k++)
    if (e[k].present) kept[m++] = k;
  if (last_hits) *last_hits = hits;
  return m;
}

static void expect_kept(const int *seq, int cap, const int *want, int nwant) {
  int kept[16];
  int n = simulate_hits(seq, cap, kept, NULL);
  if (n != nwant) fail_msg("kept %d entries, want %d", n, nwant);
  for (int i = 0; i < n; i++)
    if (kept[i] != want[i]) fail_msg("kept[%d] = %d, want %d", i, kept[i], want[i]);
}

static void test_access_sequences(void **st) {
  (void)st;
  /* batches (-1 ends one, -2 ends the sequence); cache of 2:
   * pass 1 {0,1,2}: all new at 1.0: evict the lowest key first -> keeps {1,2} */
  expect_kept((int[]){0, 1, 2, -1, -2}, 2, (int[]){1, 2}, 2);
  /* 0 every pass, 1 twice, then one-offs 2, 3, 4: the frequent ones stay */
  expect_kept((int[]){0, 1, -1, 0, 1, -1, 0, 2, -1, 0, 3, -1, 0, 4, -1, -2}, 2, (int[]){0, 1}, 2);
  /* a burst of one-offs (a prefill chunk) does not flush the hot pair */
  expect_kept((int[]){5, 6, -1, 5, 6, -1, 5, 6, -1, 7, 8, 9, 10, 11, -1, -2}, 2, (int[]){5, 6}, 2);
  /* decay and admission: 3 used at passes 1-2 (score 1.98, never hit
   * twice, so a cache of 1 protects nothing), then after a gap 4 used every
   * pass. 4 gets in at its j-th use, the first where its score less the
   * margin, sum_{i<j} 2^(-i/32) - 2, reaches 3's, 1.98 * 2^(-(gap + j - 1)/32)
   * (computed here from the definition, not by the policy's code) */
  int seq[256], n = 0;
  for (int gap = 18; gap <= 38; gap += 20) {
    double s3 = 1.0 * exp2(-1.0 / HL) + 1.0, s4 = 0;
    int j = 0;
    do {
      s4 += exp2(-(double)j / HL); /* the newest use counts 1, older ones decayed */
      j++;
      /* s4 here is the score at the j-th use: sum_{i<j} 2^(-i/32) */
    } while (s4 - 2.0 < s3 * exp2(-(double)(gap + j - 1) / HL));
    assert_true(j > 1); /* one use is never enough: a one-off does not displace */
    for (int uses = j - 1; uses <= j; uses++) {
      n = 0;
      seq[n++] = 3, seq[n++] = -1, seq[n++] = 3, seq[n++] = -1;
      for (int i = 0; i < gap - 1; i++) seq[n++] = -1; /* passes with other layers' work */
      for (int u = 0; u < uses; u++) seq[n++] = 4, seq[n++] = -1;
      seq[n++] = -2;
      expect_kept(seq, 1, (int[]){uses == j ? 4 : 3}, 1);
    }
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

/* A cycle larger than the cache: keys 0-5 every pass in the same order,
 * each its own batch (a layer's), a cache of 4. The four that are held after
 * the first pass stay and hit every pass; the two others are loaded and
 * dropped. Without the margin (or with an LRU) none hits: within a pass the
 * held keys not yet reached are the least recently used, so each is evicted
 * just before its use. */
static void test_cycle(void **st) {
  (void)st;
  int seq[128], n = 0;
  for (int pass = 0; pass < 8; pass++) {
    for (int k = 0; k < 6; k++) seq[n++] = k, seq[n++] = k < 5 ? -3 : -1;
  }
  seq[n++] = -2;
  int kept[16], hits;
  int m = simulate_hits(seq, 4, kept, &hits);
  assert_int_equal(m, 4);
  assert_int_equal(hits, 4);
  int want[] = {2, 3, 4, 5}; /* pass 1 dropped the lowest keys (all new, all 1.0) */
  for (int i = 0; i < 4; i++) assert_int_equal(kept[i], want[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_score_decays_by_half_life),
      cmocka_unit_test(test_order),
      cmocka_unit_test(test_admission_margin),
      cmocka_unit_test(test_access_sequences),
      cmocka_unit_test(test_cycle),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

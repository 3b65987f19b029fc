/* The device weight tier's policy (kernels/dtier.c), on a host allocator
 * that counts and can be told to fail: least recently used out first, a hit
 * refreshes, an entry over the budget is refused, a failed allocation
 * evicts and retries; KEEP entries are never evicted, so a cycle of spine
 * matrices larger than the budget keeps hitting on its kept part where an
 * LRU would never hit; and, against a reference model (plain arrays kept
 * in recency order) over a long random sequence of both classes, the same
 * entries present after every step, so a change of the policy or a
 * hash-table slip (lost key, stale tombstone) shows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/dtier.h"

typedef struct heap {
  long live;       /* allocations not freed */
  long fail_after; /* allocations left before one fails (-1: never) */
} heap;

static void *h_alloc(void *ud, size_t n) {
  heap *h = ud;
  if (h->fail_after == 0) return NULL;
  if (h->fail_after > 0) h->fail_after--;
  h->live++;
  return malloc(n ? n : 1);
}
static void h_free(void *ud, void *p) {
  heap *h = ud;
  h->live--;
  free(p);
}

static df_dtier *mk(heap *h, uint64_t cap) {
  h->live = 0;
  h->fail_after = -1;
  return df_dtier_new(cap, (df_dtier_mem){h_alloc, h_free, h});
}

static void test_lru_order(void **st) {
  (void)st;
  heap h;
  df_dtier *t = mk(&h, 300);
  assert_non_null(df_dtier_put(t, 1, 100, DF_DTIER_LRU));
  assert_non_null(df_dtier_put(t, 2, 100, DF_DTIER_LRU));
  assert_non_null(df_dtier_put(t, 3, 100, DF_DTIER_LRU));
  assert_non_null(df_dtier_get(t, 1)); /* 1 is now the most recent: 2 goes first */
  assert_non_null(df_dtier_put(t, 4, 100, DF_DTIER_LRU));
  assert_null(df_dtier_get(t, 2));
  assert_non_null(df_dtier_get(t, 1));
  assert_non_null(df_dtier_get(t, 3));
  assert_non_null(df_dtier_get(t, 4));
  /* a 200-byte entry needs two evictions: 1 (least recent now), then 3 */
  assert_non_null(df_dtier_put(t, 5, 200, DF_DTIER_LRU));
  assert_null(df_dtier_get(t, 1));
  assert_null(df_dtier_get(t, 3));
  assert_non_null(df_dtier_get(t, 4));
  df_dtier_stats s;
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.entries, 2);
  assert_int_equal(s.bytes, 300);
  assert_int_equal(s.evictions, 3);
  assert_int_equal(s.hits, 5);
  assert_int_equal(s.misses, 3);
  assert_int_equal(h.live, 2);
  df_dtier_free(t);
  assert_int_equal(h.live, 0);
}

static void test_refuse_and_alloc_failure(void **st) {
  (void)st;
  heap h;
  df_dtier *t = mk(&h, 300);
  assert_null(df_dtier_put(t, 9, 301, DF_DTIER_LRU)); /* over the whole budget: refused, nothing evicted */
  assert_non_null(df_dtier_put(t, 1, 100, DF_DTIER_LRU));
  assert_non_null(df_dtier_put(t, 2, 100, DF_DTIER_LRU));
  h.fail_after = 0; /* the device is out of memory although the budget is not */
  assert_null(df_dtier_put(t, 3, 50, DF_DTIER_LRU));
  assert_null(df_dtier_get(t, 1)); /* both evicted trying */
  assert_null(df_dtier_get(t, 2));
  h.fail_after = 1;                /* one more succeeds, then memory runs out */
  assert_non_null(df_dtier_put(t, 4, 10, DF_DTIER_LRU));
  /* fails with 4 present: 4 is evicted, the retry fails too: refused */
  assert_null(df_dtier_put(t, 5, 10, DF_DTIER_LRU));
  df_dtier_stats s;
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.refused, 3);
  assert_int_equal(s.entries, 0);
  assert_int_equal(h.live, 0);
  df_dtier_free(t);
}

/* KEEP: never evicted; an entry that would need a KEEP entry's room is
 * refused; LRU entries make room for KEEP ones. A cyclic pass over 10
 * spine matrices with room for 4: the first 4 kept and hit on every later
 * pass (a plain LRU would miss all 10 every time). */
static void test_keep(void **st) {
  (void)st;
  heap h;
  df_dtier *t = mk(&h, 400);
  assert_non_null(df_dtier_put(t, 100, 100, DF_DTIER_LRU));
  assert_non_null(df_dtier_put(t, 101, 100, DF_DTIER_LRU));
  for (int pass = 0; pass < 3; pass++)
    for (uint64_t k = 1; k <= 10; k++) {
      void *p = df_dtier_get(t, k);
      if (pass > 0) assert_true((p != NULL) == (k <= 4));
      if (!p) {
        void *q = df_dtier_put(t, k, 100, DF_DTIER_KEEP);
        assert_true((q != NULL) == (pass == 0 && k <= 4));
      }
    }
  assert_null(df_dtier_get(t, 100)); /* the LRU entries made room for KEEP ones */
  assert_null(df_dtier_get(t, 101));
  assert_null(df_dtier_put(t, 102, 1, DF_DTIER_LRU)); /* the KEEP entries fill it */
  df_dtier_stats s;
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.keep_bytes, 400);
  assert_int_equal(s.bytes, 400);
  assert_int_equal(s.evictions, 2);
  assert_int_equal(s.hits, 8);
  assert_int_equal(h.live, 4);
  df_dtier_free(t);
  assert_int_equal(h.live, 0);

  /* a failed allocation evicts LRU entries only, then refuses */
  t = mk(&h, 1000);
  assert_non_null(df_dtier_put(t, 1, 100, DF_DTIER_KEEP));
  assert_non_null(df_dtier_put(t, 2, 100, DF_DTIER_LRU));
  h.fail_after = 0;
  assert_null(df_dtier_put(t, 3, 100, DF_DTIER_KEEP));
  assert_null(df_dtier_get(t, 2));
  assert_non_null(df_dtier_get(t, 1));
  df_dtier_free(t);
  assert_int_equal(h.live, 0);
}

/* shrink: the budget becomes what the entries hold less the bytes given
 * back; LRU entries go first, then KEEP ones, least recent first. */
/* The KEEP cap (the memory plan's spine on the GPU): kept entries stop at
 * the cap and are refused past it, LRU entries still get the rest of the
 * budget, and a cap below what is kept refuses every KEEP entry without
 * evicting one. */
static void test_keep_cap(void **st) {
  (void)st;
  heap h;
  df_dtier *t = mk(&h, 500);
  df_dtier_keep_cap(t, 250);
  assert_non_null(df_dtier_put(t, 1, 100, DF_DTIER_KEEP));
  assert_non_null(df_dtier_put(t, 2, 100, DF_DTIER_KEEP));
  assert_null(df_dtier_put(t, 3, 100, DF_DTIER_KEEP)); /* 300 > 250 */
  assert_non_null(df_dtier_put(t, 4, 50, DF_DTIER_KEEP)); /* exactly the cap */
  assert_null(df_dtier_put(t, 5, 1, DF_DTIER_KEEP));
  /* the experts' share: 500 - 250, evicted among themselves */
  assert_non_null(df_dtier_put(t, 10, 125, DF_DTIER_LRU));
  assert_non_null(df_dtier_put(t, 11, 125, DF_DTIER_LRU));
  assert_non_null(df_dtier_put(t, 12, 125, DF_DTIER_LRU));
  assert_null(df_dtier_get(t, 10));
  df_dtier_stats s;
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.keep_bytes, 250);
  assert_int_equal(s.keep_cap, 250);
  assert_int_equal(s.refused, 2);
  assert_int_equal(s.bytes, 500);
  /* lowered below what is kept: nothing more kept, nothing evicted */
  df_dtier_keep_cap(t, 100);
  assert_null(df_dtier_put(t, 6, 1, DF_DTIER_KEEP));
  assert_non_null(df_dtier_get(t, 1));
  assert_non_null(df_dtier_get(t, 4));
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.keep_bytes, 250);
  df_dtier_free(t);
  assert_int_equal(h.live, 0);
  /* no cap by default: KEEP fills the whole budget */
  t = mk(&h, 300);
  df_dtier_stats_get(t, &s);
  assert_true(s.keep_cap == UINT64_MAX);
  for (uint64_t k = 1; k <= 3; k++) assert_non_null(df_dtier_put(t, k, 100, DF_DTIER_KEEP));
  df_dtier_free(t);
}

static void test_shrink(void **st) {
  (void)st;
  heap h;
  df_dtier *t = mk(&h, 1000);
  assert_non_null(df_dtier_put(t, 1, 100, DF_DTIER_KEEP));
  assert_non_null(df_dtier_put(t, 2, 100, DF_DTIER_KEEP));
  assert_non_null(df_dtier_put(t, 3, 100, DF_DTIER_LRU));
  assert_non_null(df_dtier_put(t, 4, 100, DF_DTIER_LRU));
  assert_non_null(df_dtier_get(t, 1)); /* 2 is now the least recent KEEP entry */
  df_dtier_shrink(t, 250);             /* 400 held -> budget 150: both LRU entries, then 2 */
  df_dtier_stats s;
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.cap, 150);
  assert_int_equal(s.bytes, 100);
  assert_int_equal(s.keep_bytes, 100);
  assert_non_null(df_dtier_get(t, 1));
  assert_null(df_dtier_get(t, 2));
  assert_null(df_dtier_get(t, 3));
  assert_null(df_dtier_get(t, 4));
  assert_null(df_dtier_put(t, 5, 51, DF_DTIER_LRU)); /* the lower budget holds */
  assert_non_null(df_dtier_put(t, 6, 50, DF_DTIER_LRU));
  df_dtier_shrink(t, 5000);
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.cap, 0);
  assert_int_equal(s.entries, 0);
  assert_int_equal(h.live, 0);
  df_dtier_free(t);
}

/* The reference: keys in recency order (most recent first) with sizes and
 * classes; eviction takes the last LRU one. */
typedef struct ref {
  uint64_t key[4096];
  size_t sz[4096];
  int cls[4096];
  int n;
  uint64_t bytes, cap, keep;
} ref;

static int ref_find(const ref *r, uint64_t k) {
  for (int i = 0; i < r->n; i++)
    if (r->key[i] == k) return i;
  return -1;
}
static void ref_insert(ref *r, int at, uint64_t k, size_t z, int c) {
  memmove(r->key + at + 1, r->key + at, sizeof r->key[0] * (size_t)(r->n - at));
  memmove(r->sz + at + 1, r->sz + at, sizeof r->sz[0] * (size_t)(r->n - at));
  memmove(r->cls + at + 1, r->cls + at, sizeof r->cls[0] * (size_t)(r->n - at));
  r->key[at] = k, r->sz[at] = z, r->cls[at] = c;
  r->n++;
}
static void ref_remove(ref *r, int i) {
  memmove(r->key + i, r->key + i + 1, sizeof r->key[0] * (size_t)(r->n - i - 1));
  memmove(r->sz + i, r->sz + i + 1, sizeof r->sz[0] * (size_t)(r->n - i - 1));
  memmove(r->cls + i, r->cls + i + 1, sizeof r->cls[0] * (size_t)(r->n - i - 1));
  r->n--;
}
static void ref_front(ref *r, int i) {
  uint64_t k = r->key[i];
  size_t z = r->sz[i];
  int c = r->cls[i];
  ref_remove(r, i);
  ref_insert(r, 0, k, z, c);
}
/* 1 when kept */
static int ref_put(ref *r, uint64_t k, size_t z, int c) {
  if (z > r->cap - r->keep) return 0;
  while (r->bytes + z > r->cap) {
    int i = r->n - 1;
    while (r->cls[i] != DF_DTIER_LRU) i--;
    r->bytes -= r->sz[i];
    ref_remove(r, i);
  }
  ref_insert(r, 0, k, z, c);
  r->bytes += z;
  if (c == DF_DTIER_KEEP) r->keep += z;
  return 1;
}

static void test_against_reference(void **st) {
  (void)st;
  heap h;
  static ref r;
  memset(&r, 0, sizeof r);
  r.cap = 20000;
  df_dtier *t = mk(&h, r.cap);
  uint64_t x = 12345;
  for (int step = 0; step < 200000; step++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    /* keys of both kinds the engine uses: small df_wmat ids and bit-63 expert keys */
    uint64_t k = (x >> 33) % 600;
    if (k & 1) k = 1ull << 63 | k << 2;
    int i = ref_find(&r, k);
    void *p = df_dtier_get(t, k);
    assert_true((i >= 0) == (p != NULL));
    if (i >= 0) {
      ref_front(&r, i);
      assert_int_equal(*(uint64_t *)p, k); /* the memory is the entry's own */
    } else {
      size_t z = 8 + (size_t)((x >> 20) % 400);
      if ((x >> 50) % 97 == 0) z = 30000; /* now and then one over the budget */
      /* the spine's: 15 small ids, kept once they get in (a few KB of the 20) */
      int c = k < 30 ? DF_DTIER_KEEP : DF_DTIER_LRU;
      uint64_t *q = df_dtier_put(t, k, z, (df_dtier_class)c);
      int kept = ref_put(&r, k, z, c);
      assert_true((q != NULL) == kept);
      if (q) *q = k;
    }
    df_dtier_stats s;
    df_dtier_stats_get(t, &s);
    assert_int_equal(s.entries, r.n);
    assert_int_equal(s.bytes, r.bytes);
    assert_int_equal(s.keep_bytes, r.keep);
  }
  assert_int_equal(h.live, r.n);
  df_dtier_free(t);
  assert_int_equal(h.live, 0);
}

/* has() looks without touching: no hit or miss counted, and the order is
 * the same as if it had not been called (the engine asks it for every
 * expert of a batch before deciding what to read). */
static void test_has_is_a_look(void **st) {
  (void)st;
  heap h;
  df_dtier *t = mk(&h, 200);
  assert_non_null(df_dtier_put(t, 1, 100, DF_DTIER_LRU));
  assert_non_null(df_dtier_put(t, 2, 100, DF_DTIER_LRU));
  assert_true(df_dtier_has(t, 1));
  assert_true(df_dtier_has(t, 2));
  assert_false(df_dtier_has(t, 3));
  df_dtier_stats s;
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.hits, 0);
  assert_int_equal(s.misses, 0);
  /* 1 is still the least recent: a get would have made it the most recent */
  assert_non_null(df_dtier_put(t, 3, 100, DF_DTIER_LRU));
  assert_false(df_dtier_has(t, 1));
  assert_true(df_dtier_has(t, 2));
  assert_true(df_dtier_has(t, 3));
  df_dtier_free(t);
  assert_int_equal(h.live, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lru_order),
      cmocka_unit_test(test_refuse_and_alloc_failure),
      cmocka_unit_test(test_keep),
      cmocka_unit_test(test_keep_cap),
      cmocka_unit_test(test_shrink),
      cmocka_unit_test(test_against_reference),
      cmocka_unit_test(test_has_is_a_look),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

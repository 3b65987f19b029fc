/* The device weight tier's policy (kernels/dtier.c), on a host allocator
 * that counts and can be told to fail: least recently used out first, a hit
 * refreshes, an entry over the budget is refused, a failed allocation
 * lowers the budget to what is held and retries under it; KEEP entries are
 * never evicted, so a cycle of spine matrices larger than the budget keeps
 * hitting on its kept part where an LRU would never hit; an LRU entry
 * evicts only entries with 2 uses fewer (a cycle of experts larger than the
 * budget hits on the part held, in any order; a hot key gets in, a scan
 * does not; skewed routing hits more than an LRU), counts halved every
 * period; and, against a reference model (plain arrays kept in recency
 * order) over a long random sequence of both classes, the same entries
 * present after every step, so a change of the policy or a hash-table slip
 * (lost key, stale tombstone) shows. */
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

/* n gets of key, as the engine's misses before a put */
static void uses(df_dtier *t, uint64_t key, int n) {
  for (int i = 0; i < n; i++) df_dtier_get(t, key);
}

static void test_lru_order(void **st) {
  (void)st;
  heap h;
  df_dtier *t = mk(&h, 300);
  assert_non_null(df_dtier_put(t, 1, 100, DF_DTIER_LRU)); /* room: no uses needed */
  assert_non_null(df_dtier_put(t, 2, 100, DF_DTIER_LRU));
  assert_non_null(df_dtier_put(t, 3, 100, DF_DTIER_LRU));
  assert_non_null(df_dtier_get(t, 1)); /* 1 is now the most recent: 2 goes first */
  uses(t, 4, 2);                       /* 2 uses against 2's 0: admitted */
  assert_non_null(df_dtier_put(t, 4, 100, DF_DTIER_LRU));
  assert_null(df_dtier_get(t, 2));
  assert_non_null(df_dtier_get(t, 1));
  assert_non_null(df_dtier_get(t, 3));
  assert_non_null(df_dtier_get(t, 4));
  /* a 200-byte entry needs two evictions: 1 (least recent now, 2 uses),
   * then 3 (1 use); 3 uses of 5 are not 2 more than 1's: refused, and
   * nothing is evicted; a fourth use admits it */
  uses(t, 5, 3);
  assert_null(df_dtier_put(t, 5, 200, DF_DTIER_LRU));
  assert_int_equal(h.live, 3);
  uses(t, 5, 1);
  assert_int_equal(df_dtier_uses(t, 5), 4);
  assert_non_null(df_dtier_put(t, 5, 200, DF_DTIER_LRU));
  assert_null(df_dtier_get(t, 1));
  assert_null(df_dtier_get(t, 3));
  assert_non_null(df_dtier_get(t, 4));
  df_dtier_stats s;
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.entries, 2);
  assert_int_equal(s.bytes, 300);
  assert_int_equal(s.evictions, 3);
  assert_int_equal(s.refused, 1);
  assert_int_equal(s.hits, 5);
  assert_int_equal(s.misses, 9);
  assert_int_equal(h.live, 2);
  df_dtier_free(t);
  assert_int_equal(h.live, 0);
}

/* A cycle of 12 experts with room for 10, every one used every pass (a
 * trunk routing all its experts): the first 10 get in and hit on every
 * later pass, the other 2 are refused every time, nothing is evicted. A
 * plain LRU would evict each just before its use and never hit. Then the
 * same held set under an order that interleaves the refused ones with the
 * held: still 10 hits a pass (with a margin of 1, the first refused one
 * would evict the next held one, which would evict the next, to the end of
 * the pass). */
static void test_admission_cycle(void **st) {
  (void)st;
  static const uint64_t mixed[12] = {1, 11, 2, 12, 3, 4, 5, 6, 7, 8, 9, 10};
  heap h;
  df_dtier *t = mk(&h, 1000);
  for (int pass = 0; pass < 40; pass++) {
    int hits = 0;
    for (int j = 0; j < 12; j++) {
      uint64_t k = pass < 20 ? (uint64_t)j + 1 : mixed[j];
      if (df_dtier_get(t, k)) {
        hits++;
        continue;
      }
      void *p = df_dtier_put(t, k, 100, DF_DTIER_LRU);
      assert_true((p != NULL) == (pass == 0 && k <= 10));
    }
    assert_int_equal(hits, pass ? 10 : 0);
  }
  df_dtier_stats s;
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.evictions, 0);
  assert_int_equal(s.refused, 2 * 40);
  df_dtier_free(t);
  assert_int_equal(h.live, 0);
}

/* Skew: a key used often displaces the least recent held one once it has 2
 * uses more; a key used once never displaces one used as often. */
static void test_admission_hot(void **st) {
  (void)st;
  heap h;
  df_dtier *t = mk(&h, 300);
  for (uint64_t k = 1; k <= 3; k++) {
    uses(t, k, 1);
    assert_non_null(df_dtier_put(t, k, 100, DF_DTIER_LRU));
  }
  for (uint64_t k = 100; k < 200; k++) { /* a scan of keys used once */
    uses(t, k, 1);
    assert_null(df_dtier_put(t, k, 100, DF_DTIER_LRU));
  }
  uses(t, 50, 2); /* 2 uses against 1's 1: not yet */
  assert_null(df_dtier_put(t, 50, 100, DF_DTIER_LRU));
  uses(t, 50, 1); /* 3: in, and 1, the least recent, out */
  assert_non_null(df_dtier_put(t, 50, 100, DF_DTIER_LRU));
  assert_false(df_dtier_has(t, 1));
  assert_true(df_dtier_has(t, 2) && df_dtier_has(t, 3) && df_dtier_has(t, 50));
  df_dtier_stats s;
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.evictions, 1);
  assert_int_equal(s.refused, 101);
  df_dtier_free(t);
}

/* Routing with a skew, as a MoE router's: 16 layers of 128 experts, 8
 * distinct a token, expert i drawn with weight 1 / (i + 1), 300 tokens, each
 * expert fetched on a miss. Against a plain LRU of the same room run on the
 * same trace here: with room for 5% of the experts (102, fewer than a
 * token's 128) the LRU never hits, and the tier does; with 10% the tier
 * hits at least 1.5 times as often. */
static long lru_hits(const uint64_t *trace, int n, int room) {
  uint64_t *q = calloc((size_t)room, sizeof *q); /* most recent first */
  int held = 0;
  long hits = 0;
  for (int a = 0; a < n; a++) {
    int i = 0;
    while (i < held && q[i] != trace[a]) i++;
    if (i < held) hits++;
    else if (held < room) i = held++;
    else i = room - 1;
    memmove(q + 1, q, sizeof *q * (size_t)i);
    q[0] = trace[a];
  }
  free(q);
  return hits;
}

static void test_admission_skew(void **st) {
  (void)st;
  enum { LAYERS = 16, EXPERTS = 128, TOPK = 8, TOKENS = 300, N = LAYERS * TOPK * TOKENS };
  static uint64_t trace[N];
  double cum[EXPERTS], tot = 0;
  for (int i = 0; i < EXPERTS; i++) cum[i] = tot += 1.0 / (i + 1);
  uint64_t x = 99;
  int n = 0;
  for (int tok = 0; tok < TOKENS; tok++)
    for (int l = 0; l < LAYERS; l++) {
      int pick[EXPERTS] = {0}, got = 0;
      while (got < TOPK) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(x >> 11) / 9007199254740992.0 * tot;
        int e = 0;
        while (cum[e] < u && e < EXPERTS - 1) e++;
        if (!pick[e]) pick[e] = 1, got++;
      }
      for (int e = 0; e < EXPERTS; e++) /* in expert order, as a layer's batch */
        if (pick[e]) trace[n++] = 1ull << 63 | (uint64_t)(l * EXPERTS + e);
    }
  for (int pct = 5; pct <= 10; pct += 5) {
    int room = LAYERS * EXPERTS * pct / 100;
    heap h;
    df_dtier *t = mk(&h, (uint64_t)room * 100);
    long hits = 0;
    for (int a = 0; a < N; a++) {
      if (df_dtier_get(t, trace[a])) hits++;
      else df_dtier_put(t, trace[a], 100, DF_DTIER_LRU);
    }
    long lru = lru_hits(trace, N, room);
    print_message("skewed routing, room for %d%% of the experts: tier %ld hits, plain LRU %ld of %d\n",
                  pct, hits, lru, N);
    if (pct == 5) {
      assert_int_equal(lru, 0);
      assert_true(hits > N / 10);
    } else {
      assert_true(lru > 0 && hits * 2 >= lru * 3);
    }
    df_dtier_free(t);
  }
}

/* Aging: after DF_DTIER_AGE_MIN gets (few keys counted) every count is
 * halved, rounding down; a count of 1 becomes 0 and the key is forgotten. */
static void test_aging(void **st) {
  (void)st;
  heap h;
  df_dtier *t = mk(&h, 300);
  uses(t, 7, 5);
  uses(t, 8, 1);
  uses(t, 9, DF_DTIER_AGE_MIN - 7); /* one get short of the period */
  assert_int_equal(df_dtier_uses(t, 7), 5);
  assert_int_equal(df_dtier_uses(t, 8), 1);
  uses(t, 9, 1);
  assert_int_equal(df_dtier_uses(t, 7), 2);
  assert_int_equal(df_dtier_uses(t, 8), 0);
  assert_int_equal(df_dtier_uses(t, 9), (DF_DTIER_AGE_MIN - 6) / 2);
  /* the next period starts from 0 */
  uses(t, 7, DF_DTIER_AGE_MIN - 1);
  assert_int_equal(df_dtier_uses(t, 7), 2 + DF_DTIER_AGE_MIN - 1);
  uses(t, 7, 1);
  assert_int_equal(df_dtier_uses(t, 7), (2 + DF_DTIER_AGE_MIN) / 2);
  /* with many keys the period is DF_DTIER_AGE_USES gets per key */
  df_dtier_free(t);
  t = mk(&h, 300);
  int nk = 2 * DF_DTIER_AGE_MIN / DF_DTIER_AGE_USES; /* enough keys to pass AGE_MIN */
  for (int k = 0; k < nk; k++) uses(t, 1000 + (uint64_t)k, 1);
  uses(t, 5, 2);
  uses(t, 6, 1); /* nk + 2 keys, nk + 3 gets */
  int period = (nk + 2) * DF_DTIER_AGE_USES;
  uses(t, 6, period - (nk + 3) - 1); /* one short */
  assert_int_equal(df_dtier_uses(t, 5), 2);
  uses(t, 6, 1);
  assert_int_equal(df_dtier_uses(t, 5), 1);
  df_dtier_free(t);
}

static void test_refuse_and_alloc_failure(void **st) {
  (void)st;
  heap h;
  df_dtier *t = mk(&h, 300);
  df_dtier_stats s;
  assert_null(df_dtier_put(t, 9, 301, DF_DTIER_LRU)); /* over the whole budget: refused, nothing evicted */
  assert_non_null(df_dtier_put(t, 1, 100, DF_DTIER_LRU));
  assert_non_null(df_dtier_put(t, 2, 100, DF_DTIER_LRU));
  h.fail_after = 0; /* the device is out of memory although the budget is not */
  uses(t, 3, 1);
  /* the budget becomes the 200 held; 3 would have to evict 1, which has
   * not 2 uses fewer: refused, nothing evicted */
  assert_null(df_dtier_put(t, 3, 50, DF_DTIER_LRU));
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.cap, 200);
  assert_true(df_dtier_has(t, 1) && df_dtier_has(t, 2));
  uses(t, 3, 2);
  /* now admitted over 1, whose eviction does not help: the budget becomes
   * the 100 held, 2 goes too, and with no LRU entry left it is refused */
  assert_null(df_dtier_put(t, 3, 50, DF_DTIER_LRU));
  assert_false(df_dtier_has(t, 1) || df_dtier_has(t, 2));
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.cap, 100);
  h.fail_after = 1; /* one more succeeds, then memory runs out */
  assert_non_null(df_dtier_put(t, 4, 10, DF_DTIER_LRU));
  /* fails with 4 present: the budget becomes 10, and 5 is no hotter than 4 */
  assert_null(df_dtier_put(t, 5, 10, DF_DTIER_LRU));
  assert_true(df_dtier_has(t, 4));
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.refused, 4);
  assert_int_equal(s.evictions, 2);
  assert_int_equal(s.cap, 10);
  assert_int_equal(s.entries, 1);
  assert_int_equal(h.live, 1);
  df_dtier_free(t);
  assert_int_equal(h.live, 0);
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

  /* a failed allocation: the budget becomes the 200 held, the KEEP entry
   * evicts the LRU one, fails again, and with no LRU entry left is refused */
  t = mk(&h, 1000);
  assert_non_null(df_dtier_put(t, 1, 100, DF_DTIER_KEEP));
  assert_non_null(df_dtier_put(t, 2, 100, DF_DTIER_LRU));
  h.fail_after = 0;
  assert_null(df_dtier_put(t, 3, 100, DF_DTIER_KEEP));
  assert_null(df_dtier_get(t, 2));
  assert_non_null(df_dtier_get(t, 1));
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.cap, 200);
  df_dtier_free(t);
  assert_int_equal(h.live, 0);
}

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
  uses(t, 12, 2); /* admitted over 10's 0 uses */
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

/* shrink: the budget becomes what the entries hold less the bytes given
 * back; LRU entries go first, then KEEP ones, least recent first. */
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

/* grow after shrink (kgpu.c's trim gives the buffers' memory back): the
 * budget rises by exactly the bytes, so new entries fill that room and no
 * more, and never past the budget the tier was made with. */
static void test_grow(void **st) {
  (void)st;
  heap h;
  df_dtier *t = mk(&h, 1000);
  df_dtier_stats s;
  df_dtier_grow(t, 500); /* never shrunk: stays at the budget it was made with */
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.cap, 1000);
  assert_non_null(df_dtier_put(t, 1, 100, DF_DTIER_KEEP));
  assert_non_null(df_dtier_put(t, 2, 100, DF_DTIER_KEEP));
  for (uint64_t k = 3; k <= 10; k++) assert_non_null(df_dtier_put(t, k, 100, DF_DTIER_LRU));
  df_dtier_shrink(t, 300); /* full: budget 700, 3, 4 and 5 out */
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.cap, 700);
  assert_int_equal(s.evictions, 3);
  df_dtier_grow(t, 200);
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.cap, 900);
  /* the regained room takes new entries of both classes without an
   * eviction; past it an unused key is refused (no margin over those held) */
  assert_non_null(df_dtier_put(t, 20, 100, DF_DTIER_LRU));
  assert_non_null(df_dtier_put(t, 21, 100, DF_DTIER_KEEP));
  assert_null(df_dtier_put(t, 22, 1, DF_DTIER_LRU));
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.bytes, 900);
  assert_int_equal(s.evictions, 3);
  /* more than was shrunk: the budget stops at the one it was made with */
  df_dtier_grow(t, 5000);
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.cap, 1000);
  assert_non_null(df_dtier_put(t, 22, 100, DF_DTIER_LRU));
  assert_null(df_dtier_put(t, 23, 1, DF_DTIER_LRU));
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.bytes, 1000);
  assert_int_equal(s.evictions, 3);
  /* from nothing: everything given up, then some of it back */
  df_dtier_shrink(t, 5000);
  df_dtier_grow(t, 150);
  df_dtier_stats_get(t, &s);
  assert_int_equal(s.cap, 150);
  assert_non_null(df_dtier_put(t, 24, 100, DF_DTIER_KEEP));
  assert_null(df_dtier_put(t, 25, 51, DF_DTIER_KEEP));
  df_dtier_free(t);
  assert_int_equal(h.live, 0);
}

/* The reference: keys in recency order (most recent first) with sizes and
 * classes; eviction takes the last LRU one; use counts by the key's id
 * (below 600, as the test draws them), halved every period. */
typedef struct ref {
  uint64_t key[4096];
  size_t sz[4096];
  int cls[4096];
  int n;
  uint64_t bytes, cap, keep;
  uint32_t uses[600];
  uint64_t since;
} ref;

static int ref_id(uint64_t k) { return (int)(k >> 63 ? (k >> 2) & 0x3ff : k); }

static void ref_use(ref *r, uint64_t k) {
  r->uses[ref_id(k)]++;
  uint64_t keys = 0;
  for (int i = 0; i < 600; i++) keys += r->uses[i] > 0;
  uint64_t period = keys * DF_DTIER_AGE_USES;
  if (++r->since >= (period > DF_DTIER_AGE_MIN ? period : DF_DTIER_AGE_MIN)) {
    for (int i = 0; i < 600; i++) r->uses[i] /= 2;
    r->since = 0;
  }
}

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
  if (c == DF_DTIER_LRU) { /* each LRU victim 2 uses short of k, or refused */
    uint64_t need = r->bytes + z;
    for (int i = r->n - 1; i >= 0 && need > r->cap; i--) {
      if (r->cls[i] != DF_DTIER_LRU) continue;
      if (r->uses[ref_id(r->key[i])] + 2 > r->uses[ref_id(k)]) return 0;
      need -= r->sz[i];
    }
  }
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
    ref_use(&r, k);
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
  uses(t, 3, 2);
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
      cmocka_unit_test(test_admission_cycle),
      cmocka_unit_test(test_admission_hot),
      cmocka_unit_test(test_admission_skew),
      cmocka_unit_test(test_aging),
      cmocka_unit_test(test_refuse_and_alloc_failure),
      cmocka_unit_test(test_keep),
      cmocka_unit_test(test_keep_cap),
      cmocka_unit_test(test_shrink),
      cmocka_unit_test(test_grow),
      cmocka_unit_test(test_against_reference),
      cmocka_unit_test(test_has_is_a_look),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The ranking of one drive's reads (store/rank.c): demand, then spine, then
 * prefetch, a prefetch never taking the last free slot nor starting while
 * a demand or spine read waits. Checked by hand on small cases and on a
 * simulated busy drive (random arrivals, fixed seed) against the policy's
 * invariants, which a change of the order would break. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/rank.h"

/* A simulated drive: FIFO queues per class, reads in flight with a finish
 * tick. dispatch() takes reads as the drive's engine would (while the
 * ranking names a class) and logs their ids in order. */
#define MAXR 512
typedef struct sim {
  int qd, pf_max;
  int q[DF_RANK_N][MAXR], qh[DF_RANK_N], qt[DF_RANK_N];
  int fl_id[64], fl_cls[64], fl_end[64], nfl;
  int log[MAXR], nlog;
} sim;

static void sim_init(sim *s, int qd) {
  memset(s, 0, sizeof *s);
  s->qd = qd;
  s->pf_max = 1;
}
static void push(sim *s, int cls, int id) { s->q[cls][s->qt[cls]++] = id; }
static int waiting(const sim *s, int c) { return s->qt[c] - s->qh[c]; }
static df_rank_drive view(const sim *s) {
  df_rank_drive d = {.qd = s->qd, .inflight = s->nfl, .pf_max = s->pf_max};
  for (int c = 0; c < DF_RANK_N; c++) d.waiting[c] = waiting(s, c);
  for (int i = 0; i < s->nfl; i++) d.spine_inflight += s->fl_cls[i] == DF_RANK_SPINE;
  return d;
}
static void dispatch(sim *s, int now, int dur) {
  for (;;) {
    df_rank_drive d = view(s);
    df_rank_class c = df_rank_next(&d);
    if (c == DF_RANK_NONE) return;
    assert_true(waiting(s, c) > 0);
    assert_true(s->nfl < s->qd);
    int id = s->q[c][s->qh[c]++];
    s->fl_id[s->nfl] = id;
    s->fl_cls[s->nfl] = c;
    s->fl_end[s->nfl++] = now + dur;
    s->log[s->nlog++] = id;
  }
}
static void complete(sim *s, int now) {
  for (int i = 0; i < s->nfl;)
    if (s->fl_end[i] <= now) {
      s->nfl--;
      s->fl_id[i] = s->fl_id[s->nfl];
      s->fl_cls[i] = s->fl_cls[s->nfl];
      s->fl_end[i] = s->fl_end[s->nfl];
    } else {
      i++;
    }
}

/* ids: 100+ demand, 200+ spine, 300+ prefetch */
static void test_order_on_busy_drive(void **st) {
  (void)st;
  sim s;
  sim_init(&s, 4);
  /* submitted interleaved, prefetches first */
  push(&s, DF_RANK_PREFETCH, 300);
  push(&s, DF_RANK_PREFETCH, 301);
  push(&s, DF_RANK_SPINE, 200);
  push(&s, DF_RANK_SPINE, 201);
  push(&s, DF_RANK_DEMAND, 100);
  push(&s, DF_RANK_SPINE, 202);
  push(&s, DF_RANK_SPINE, 203);
  push(&s, DF_RANK_DEMAND, 101);
  for (int t = 0; t < 10; t++) {
    complete(&s, t);
    dispatch(&s, t, 1);
  }
  /* tick 0: both demand reads, then spine up to the free slots;
   * tick 1: the rest of the spine; tick 2, 3: one prefetch at a time */
  int want[] = {100, 101, 200, 201, 202, 203, 300, 301};
  assert_int_equal(s.nlog, 8);
  for (int i = 0; i < 8; i++) assert_int_equal(s.log[i], want[i]);
}

static void test_spine_leaves_a_slot_for_demand(void **st) {
  (void)st;
  sim s;
  sim_init(&s, 4);
  for (int i = 0; i < 8; i++) push(&s, DF_RANK_SPINE, 200 + i);
  dispatch(&s, 0, 10);
  assert_int_equal(s.nfl, 3); /* qd - 1 */
  push(&s, DF_RANK_DEMAND, 100);
  push(&s, DF_RANK_PREFETCH, 300);
  dispatch(&s, 1, 10);
  assert_int_equal(s.nfl, 4);
  assert_int_equal(s.log[s.nlog - 1], 100); /* the demand read, at once */
  assert_int_equal(waiting(&s, DF_RANK_PREFETCH), 1);
}

static void test_prefetch_never_takes_last_slot(void **st) {
  (void)st;
  /* qd 1: the only slot is never given to a speculative read */
  df_rank_drive d = {.qd = 1, .pf_max = 1, .waiting = {0, 0, 5}};
  assert_int_equal(df_rank_next(&d), DF_RANK_NONE);
  d.waiting[DF_RANK_SPINE] = 1;
  assert_int_equal(df_rank_next(&d), DF_RANK_SPINE);
  /* qd 2, idle: one prefetch (one slot stays free) */
  df_rank_drive d2 = {.qd = 2, .pf_max = 1, .waiting = {0, 0, 5}};
  assert_int_equal(df_rank_next(&d2), DF_RANK_PREFETCH);
  d2.inflight = 1;
  assert_int_equal(df_rank_next(&d2), DF_RANK_NONE);
  /* spine at its cap with a slot free: still no prefetch */
  df_rank_drive d3 = {.qd = 4, .pf_max = 4, .inflight = 3, .spine_inflight = 3, .waiting = {0, 2, 1}};
  assert_int_equal(df_rank_next(&d3), DF_RANK_NONE);
  /* full drive: nothing */
  df_rank_drive d4 = {.qd = 2, .pf_max = 1, .inflight = 2, .waiting = {3, 3, 3}};
  assert_int_equal(df_rank_next(&d4), DF_RANK_NONE);
}

/* Random arrivals on drives of queue depth 1..8, reads of 1..4 ticks: after
 * every dispatch round, no demand read waits while a slot is free, no spine
 * read waits while a slot is free and spine reads are under their cap, and
 * every prefetch started with no demand or spine read waiting and a slot
 * left free. */
static void test_invariants_random(void **st) {
  (void)st;
  uint32_t x = 12345;
  int started_pf = 0, started_spine = 0;
  for (int qd = 1; qd <= 8; qd++) {
    sim s;
    sim_init(&s, qd);
    int next_id = 0;
    for (int t = 0; t < 400; t++) {
      complete(&s, t);
      for (int k = 0; k < 3; k++) {
        x = x * 1103515245u + 12345u;
        int r = (int)(x >> 16) % 10;
        int c = r < 2 ? DF_RANK_DEMAND : r < 5 ? DF_RANK_SPINE : r < 8 ? DF_RANK_PREFETCH : -1;
        if (c >= 0 && s.qt[c] < MAXR) push(&s, c, next_id++);
      }
      x = x * 1103515245u + 12345u;
      int dur = 1 + (int)(x >> 16) % 4;
      /* dispatch one read at a time, checking each prefetch's moment */
      for (;;) {
        df_rank_drive d = view(&s);
        df_rank_class c = df_rank_next(&d);
        if (c == DF_RANK_NONE) break;
        if (c == DF_RANK_PREFETCH) {
          assert_int_equal(d.waiting[DF_RANK_DEMAND], 0);
          assert_int_equal(d.waiting[DF_RANK_SPINE], 0);
          assert_true(d.qd - d.inflight >= 2);
          started_pf++;
        }
        if (c == DF_RANK_SPINE) {
          assert_int_equal(d.waiting[DF_RANK_DEMAND], 0);
          started_spine++;
        }
        int id = s.q[c][s.qh[c]++];
        s.fl_id[s.nfl] = id;
        s.fl_cls[s.nfl] = c;
        s.fl_end[s.nfl++] = t + dur;
      }
      df_rank_drive d = view(&s);
      int sp_cap = qd > 1 ? qd - 1 : 1;
      if (d.inflight < qd) {
        assert_int_equal(d.waiting[DF_RANK_DEMAND], 0);
        if (d.spine_inflight < sp_cap) assert_int_equal(d.waiting[DF_RANK_SPINE], 0);
      }
      if (qd > 1) assert_true(d.spine_inflight <= qd - 1);
    }
  }
  /* the run exercised every class */
  assert_true(started_pf > 0);
  assert_true(started_spine > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_order_on_busy_drive),
      cmocka_unit_test(test_spine_leaves_a_slot_for_demand),
      cmocka_unit_test(test_prefetch_never_takes_last_slot),
      cmocka_unit_test(test_invariants_random),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

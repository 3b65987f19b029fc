/* The tier's device heap (kernels/dheap.c) on a mapper that keeps the
 * mapped granules in a table, can be told to fail and can hold only so
 * many: blocks share granules (three 700-byte blocks in three 1 KiB
 * granules, not six); a granule whose last block goes stays mapped, empty,
 * until a trim, which unmaps exactly the empty ones; a freed block's place
 * is taken again without a mapping; a hole over mapped granules is taken
 * before a lower one that needs a mapping; a failed mapping leaves nothing
 * new mapped and the heap as it was, and one that fails for want of memory
 * gives the empty granules back and succeeds; and over a long random
 * sequence of allocations, frees and trims, the blocks never overlap, lie
 * in the range, every granule under one is mapped, the empty ones are
 * counted, and after a trim the granules mapped are exactly those under
 * the live blocks (none leaked, none missing). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/dheap.h"

#define GR 1024
#define NG 64

typedef struct fake {
  int mapped[NG];   /* 1 while the granule is mapped */
  uint64_t hd[NG];  /* the handle given for it */
  long maps_left;   /* granule mappings before one fails (-1: never) */
  int cap;          /* the most granules mapped at once (0: no limit) */
  uint64_t next_hd; /* handles given so far */
  int bad;          /* a map of a mapped granule, an unmap of an unmapped one or of the wrong handle */
} fake;

static int f_map(void *ud, uint64_t off, int n, uint64_t *h) {
  fake *f = ud;
  if (f->maps_left >= 0 && f->maps_left < n) return -1;
  int live = 0;
  for (int g = 0; g < NG; g++) live += f->mapped[g];
  if (f->cap && live + n > f->cap) return -1;
  if (f->maps_left > 0) f->maps_left -= n;
  for (int i = 0; i < n; i++) {
    uint64_t g = off / GR + (uint64_t)i;
    if (off % GR || g >= NG || f->mapped[g]) f->bad = 1;
    else f->mapped[g] = 1, f->hd[g] = h[i] = ++f->next_hd;
  }
  return 0;
}
static void f_unmap(void *ud, uint64_t off, uint64_t h) {
  fake *f = ud;
  uint64_t g = off / GR;
  if (off % GR || g >= NG || !f->mapped[g] || f->hd[g] != h) f->bad = 1;
  else f->mapped[g] = 0;
}

static df_dheap *mk(fake *f) {
  memset(f, 0, sizeof *f);
  f->maps_left = -1;
  return df_dheap_new((uint64_t)NG * GR, GR, 16, (df_dheap_mem){f_map, f_unmap, f});
}

static int nmapped(const fake *f) {
  int n = 0;
  for (int g = 0; g < NG; g++) n += f->mapped[g];
  return n;
}

static void test_blocks_share_granules(void **st) {
  (void)st;
  fake f;
  df_dheap *h = mk(&f);
  /* 700 rounds to 704 (align 16): end to end, not a granule each */
  assert_int_equal(df_dheap_alloc(h, 700), 0);
  assert_int_equal(df_dheap_alloc(h, 700), 704);
  assert_int_equal(df_dheap_alloc(h, 700), 1408);
  assert_int_equal(nmapped(&f), 3); /* 2112 bytes: granules 0, 1, 2 */
  df_dheap_stats s;
  df_dheap_stats_get(h, &s);
  assert_int_equal(s.used, 3 * 704);
  assert_int_equal(s.mapped, 3 * GR);
  assert_int_equal(s.empty, 0);
  /* the middle block spans granules 0 and 1, both still under a neighbour */
  df_dheap_release(h, 704);
  assert_int_equal(df_dheap_trim(h), 0);
  assert_int_equal(nmapped(&f), 3);
  /* the first block alone over granule 0: empty now, mapped until a trim */
  df_dheap_release(h, 0);
  df_dheap_stats_get(h, &s);
  assert_int_equal(s.empty, GR);
  assert_int_equal(f.mapped[0], 1);
  assert_int_equal(df_dheap_trim(h), GR);
  assert_int_equal(f.mapped[0], 0);
  assert_int_equal(f.mapped[1], 1);
  df_dheap_release(h, 1408);
  assert_int_equal(nmapped(&f), 2);
  assert_int_equal(df_dheap_trim(h), 2 * GR);
  assert_int_equal(nmapped(&f), 0);
  df_dheap_stats_get(h, &s);
  assert_int_equal(s.extents, 1); /* merged back into the whole range */
  assert_int_equal(s.blocks, 0);
  assert_int_equal(s.mapped, 0);
  assert_int_equal(s.empty, 0);
  assert_false(f.bad);
  df_dheap_free(h);
}

/* A decode's eviction: an expert out, another of its size in, in the same
 * place and granules, with no call to the driver. */
static void test_same_place_again(void **st) {
  (void)st;
  fake f;
  df_dheap *h = mk(&f);
  for (int i = 0; i < 4; i++) assert_int_equal(df_dheap_alloc(h, 2500), (uint64_t)i * 2512);
  df_dheap_stats s0, s1;
  df_dheap_stats_get(h, &s0);
  for (int k = 0; k < 8; k++) {
    uint64_t off = (uint64_t)(k % 4) * 2512;
    df_dheap_release(h, off);
    assert_int_equal(df_dheap_alloc(h, 2500), off);
  }
  df_dheap_stats_get(h, &s1);
  assert_int_equal(s1.maps, s0.maps);
  assert_int_equal(s1.unmaps, 0);
  assert_int_equal(s1.mapped, s0.mapped);
  assert_false(f.bad);
  df_dheap_free(h);
}

static void test_mapped_hole_first(void **st) {
  (void)st;
  fake f;
  df_dheap *h = mk(&f);
  assert_int_equal(df_dheap_alloc(h, 1024), 0);    /* granule 0 */
  assert_int_equal(df_dheap_alloc(h, 1024), 1024); /* granule 1 */
  assert_int_equal(df_dheap_alloc(h, 512), 2048);  /* half of granule 2 */
  df_dheap_release(h, 1024);                       /* a hole at 1024 */
  assert_int_equal(df_dheap_trim(h), GR);          /* granule 1 unmapped */
  assert_int_equal(f.mapped[1], 0);
  /* 256 bytes fit the lower hole (a new granule) and the rest of granule
   * 2 (mapped): the mapped one wins */
  assert_int_equal(df_dheap_alloc(h, 256), 2560);
  assert_int_equal(f.mapped[1], 0);
  assert_int_equal(nmapped(&f), 2);
  /* a block that fits nowhere mapped takes the lowest hole that fits */
  assert_int_equal(df_dheap_alloc(h, 1024), 1024);
  assert_int_equal(f.mapped[1], 1);
  assert_false(f.bad);
  df_dheap_free(h);
  assert_int_equal(nmapped(&f), 0);
}

/* A device with room for 3 granules: a block that needs a fourth gets it
 * from the empty ones, given back first. */
static void test_full_gives_empty_back(void **st) {
  (void)st;
  fake f;
  df_dheap *h = mk(&f);
  f.cap = 3;
  assert_int_equal(df_dheap_alloc(h, GR), 0);
  assert_int_equal(df_dheap_alloc(h, GR), GR);
  assert_int_equal(df_dheap_alloc(h, GR), 2 * GR);
  df_dheap_release(h, 0);
  df_dheap_release(h, 2 * GR); /* granules 0 and 2 empty, 1 under a block */
  assert_int_equal(df_dheap_alloc(h, 2 * GR), 2 * GR);
  assert_int_equal(f.mapped[0], 0);
  assert_int_equal(nmapped(&f), 3); /* 1, 2, 3 */
  df_dheap_stats s;
  df_dheap_stats_get(h, &s);
  assert_int_equal(s.failed, 0);
  assert_int_equal(s.empty, 0);
  /* nothing empty left to give: refused */
  assert_true(df_dheap_alloc(h, GR) == DF_DHEAP_NONE);
  df_dheap_stats_get(h, &s);
  assert_int_equal(s.failed, 1);
  assert_false(f.bad);
  df_dheap_free(h);
}

static void test_failed_map(void **st) {
  (void)st;
  fake f;
  df_dheap *h = mk(&f);
  assert_int_equal(df_dheap_alloc(h, 512), 0);
  /* 3000 bytes at 512 need granules 1, 2, 3 beyond the mapped 0: one run
   * of three, and the mapper has room for two */
  f.maps_left = 2;
  assert_true(df_dheap_alloc(h, 3000) == DF_DHEAP_NONE);
  assert_int_equal(nmapped(&f), 1);
  df_dheap_stats s;
  df_dheap_stats_get(h, &s);
  assert_int_equal(s.failed, 1);
  assert_int_equal(s.used, 512);
  assert_int_equal(s.mapped, GR);
  /* what still fits the mapped granule is placed there without a mapping */
  assert_int_equal(df_dheap_alloc(h, 512), 512);
  assert_int_equal(f.maps_left, 2);
  f.maps_left = -1;
  assert_int_equal(df_dheap_alloc(h, 3000), 1024);
  assert_int_equal(nmapped(&f), 4); /* 1024 + 3008: granules 1 to 3 */
  assert_false(f.bad);
  df_dheap_free(h);
}

static void test_range_full(void **st) {
  (void)st;
  fake f;
  df_dheap *h = mk(&f);
  assert_int_equal(df_dheap_alloc(h, (size_t)NG * GR - 32), 0);
  assert_int_equal(df_dheap_alloc(h, 32), NG * GR - 32);
  assert_true(df_dheap_alloc(h, 16) == DF_DHEAP_NONE);
  df_dheap_release(h, 0);
  assert_int_equal(df_dheap_alloc(h, 16), 0);
  assert_false(f.bad);
  df_dheap_free(h);
}

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

static void test_random_invariants(void **st) {
  (void)st;
  fake f;
  df_dheap *h = mk(&f);
  enum { MAXB = 96 };
  uint64_t off[MAXB], len[MAXB], seed = 0x9e3779b97f4a7c15ull;
  int nb = 0;
  for (int step = 0; step < 20000; step++) {
    if (nb < MAXB && (nb == 0 || rnd(&seed) % 100 < 55)) {
      size_t n = 1 + rnd(&seed) % (3 * GR);
      if (rnd(&seed) % 50 == 0) f.maps_left = (long)(rnd(&seed) % 3);
      uint64_t o = df_dheap_alloc(h, n);
      f.maps_left = -1;
      if (o != DF_DHEAP_NONE) off[nb] = o, len[nb] = (n + 15) / 16 * 16, nb++;
    } else {
      int i = (int)(rnd(&seed) % (uint64_t)nb);
      df_dheap_release(h, off[i]);
      off[i] = off[nb - 1], len[i] = len[nb - 1], nb--;
    }
    int want[NG] = {0};
    uint64_t used = 0;
    for (int i = 0; i < nb; i++) {
      assert_true(off[i] % 16 == 0 && off[i] + len[i] <= (uint64_t)NG * GR);
      for (int j = i + 1; j < nb; j++)
        assert_true(off[i] + len[i] <= off[j] || off[j] + len[j] <= off[i]);
      for (uint64_t g = off[i] / GR; g <= (off[i] + len[i] - 1) / GR; g++) want[g] = 1;
      used += len[i];
    }
    int extra = 0;
    for (int g = 0; g < NG; g++) {
      assert_true(!want[g] || f.mapped[g]);
      extra += f.mapped[g] && !want[g];
    }
    df_dheap_stats s;
    df_dheap_stats_get(h, &s);
    assert_int_equal(s.used, used);
    assert_int_equal(s.blocks, nb);
    assert_int_equal(s.mapped, (uint64_t)nmapped(&f) * GR);
    assert_int_equal(s.empty, (uint64_t)extra * GR);
    if (step % 97 == 0) {
      assert_int_equal(df_dheap_trim(h), (uint64_t)extra * GR);
      assert_memory_equal(want, f.mapped, sizeof want);
    }
  }
  assert_false(f.bad);
  df_dheap_free(h);
  assert_int_equal(nmapped(&f), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_blocks_share_granules), cmocka_unit_test(test_same_place_again),
      cmocka_unit_test(test_mapped_hole_first),     cmocka_unit_test(test_full_gives_empty_back),
      cmocka_unit_test(test_failed_map),                  cmocka_unit_test(test_range_full),            cmocka_unit_test(test_random_invariants),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

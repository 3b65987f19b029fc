/* The pack's spine section: where its chunks go (store/spine_place.c) and
 * how the manifest carries them (store/manifest.c). Placement is checked
 * against its promises on random unit sizes (fixed seed) for 1..4 drives:
 * every chunk aligned and within the size cap, each unit's chunks adding up
 * to it, every drive's chunks packed from its base without gaps or overlap,
 * the drives' spine bytes within one chunk of each other (equal bandwidth),
 * large units on every drive, the result identical on a second call; with
 * unequal bandwidths the bytes follow them. The manifest round-trips a
 * section and rejects one that overlaps a record, is misaligned, or does
 * not add up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/manifest.h"
#include "store/spine_place.h"

#define AL 4096u
#define CMAX (8u << 20)

static uint64_t rng(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void check_place(int nd, int nunits, uint64_t *seed) {
  int ids[64];
  uint64_t bytes[64], base[4], end[4], end2[4];
  for (int u = 0; u < nunits; u++) {
    ids[u] = u * 2; /* unit ids need not be dense */
    /* from one page to ~40 MB: some units smaller than nd pages, some many chunks */
    uint64_t pages = 1 + rng(seed) % (rng(seed) % 2 ? 8 : 10000);
    bytes[u] = pages * AL;
  }
  for (int d = 0; d < nd; d++) base[d] = (uint64_t)(d + 1) * 3 * AL;
  df_mf_spine sp, sp2;
  df_spine_place(&sp, ids, bytes, nunits, nd, NULL, CMAX, AL, base, end);
  assert_int_equal(sp.nunits, nunits);
  uint64_t per[4] = {0}, next[4], maxlen = 0;
  memcpy(next, base, sizeof next);
  int c = 0;
  for (int u = 0; u < nunits; u++) {
    const df_mf_spine_unit *su = &sp.units[u];
    assert_int_equal(su->unit, ids[u]);
    assert_int_equal(su->first, c);
    uint64_t sum = 0;
    uint8_t on[4] = {0};
    for (int k = su->first; k < su->first + su->nchunks; k++, c++) {
      const df_mf_chunk *ch = &sp.chunks[k];
      assert_true(ch->drive >= 0 && ch->drive < nd);
      assert_true(ch->len > 0 && ch->len <= CMAX);
      assert_int_equal(ch->len % AL, 0);
      assert_int_equal(ch->offset % AL, 0);
      assert_int_equal(ch->offset, next[ch->drive]); /* packed, in placement order */
      next[ch->drive] += ch->len;
      per[ch->drive] += ch->len;
      on[ch->drive] = 1;
      sum += ch->len;
      if (ch->len > maxlen) maxlen = ch->len;
    }
    assert_int_equal(sum, bytes[u]);
    /* a unit of nd pages or more is cut in at least nd chunks, one per drive:
     * its read uses every drive */
    if (bytes[u] >= (uint64_t)nd * AL) {
      assert_true(su->nchunks >= nd);
      for (int d = 0; d < nd; d++) assert_true(on[d]);
    }
  }
  assert_int_equal(c, sp.nchunks);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int d = 0; d < nd; d++) {
    assert_int_equal(end[d], next[d]);
    if (per[d] < lo) lo = per[d];
    if (per[d] > hi) hi = per[d];
  }
  assert_true(hi - lo <= maxlen); /* balanced to within one chunk */
  df_spine_place(&sp2, ids, bytes, nunits, nd, NULL, CMAX, AL, base, end2);
  assert_int_equal(sp2.nchunks, sp.nchunks);
  assert_memory_equal(sp2.chunks, sp.chunks, (size_t)sp.nchunks * sizeof *sp.chunks);
  assert_memory_equal(sp2.units, sp.units, (size_t)sp.nunits * sizeof *sp.units);
  assert_memory_equal(end2, end, (size_t)nd * sizeof *end);
  df_mf_spine_free(&sp);
  df_mf_spine_free(&sp2);
}

static void test_place_random(void **st) {
  (void)st;
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int nd = 1; nd <= 4; nd++)
    for (int rep = 0; rep < 20; rep++) check_place(nd, 1 + (int)(rng(&seed) % 40), &seed);
}

/* A unit of 2 drives x 3 full chunks: three chunks each; a small unit is cut
 * in nd pieces so its read still uses both drives. */
static void test_place_by_hand(void **st) {
  (void)st;
  int ids[2] = {0, 5};
  uint64_t bytes[2] = {6ull * CMAX, 4 * AL}, base[2] = {0, 0}, end[2];
  df_mf_spine sp;
  df_spine_place(&sp, ids, bytes, 2, 2, NULL, CMAX, AL, base, end);
  assert_int_equal(sp.units[0].nchunks, 6);
  assert_int_equal(sp.units[1].nchunks, 2);
  for (int k = 0; k < 6; k++) {
    assert_int_equal(sp.chunks[k].drive, k % 2);
    assert_int_equal(sp.chunks[k].len, CMAX);
  }
  assert_int_equal(sp.chunks[6].len, 2 * AL);
  assert_int_equal(sp.chunks[7].len, 2 * AL);
  assert_int_not_equal(sp.chunks[6].drive, sp.chunks[7].drive);
  assert_int_equal(end[0], 3ull * CMAX + 2 * AL);
  assert_int_equal(end[1], 3ull * CMAX + 2 * AL);
  df_mf_spine_free(&sp);
}

/* Declared bandwidths 2:1: drive 0 holds about two thirds of the bytes. */
static void test_place_bandwidth(void **st) {
  (void)st;
  int ids[8];
  uint64_t bytes[8], base[2] = {0, 0}, end[2];
  for (int u = 0; u < 8; u++) ids[u] = u, bytes[u] = 12ull * CMAX;
  double bw[2] = {2e9, 1e9};
  df_mf_spine sp;
  df_spine_place(&sp, ids, bytes, 8, 2, bw, CMAX, AL, base, end);
  double want0 = 2.0 / 3.0 * (double)(end[0] + end[1]);
  assert_true((double)end[0] > want0 - CMAX && (double)end[0] < want0 + CMAX);
  df_mf_spine_free(&sp);
}

static const char *HEAD =
    "{\"format\":\"deltafin-pack\",\"version\":1,\"model\":{\"fingerprint\":\"0123456789abcdef\","
    "\"first_layer\":1,\"n_layers\":2,\"n_experts\":2,\"record_bytes\":100},\"align\":4096,"
    "\"drives\":[{\"path\":\"/a\",\"file\":\"x.dfpack\",\"bytes\":16384,\"bandwidth\":0},"
    "{\"path\":\"/b\",\"file\":\"x.dfpack\",\"bytes\":12288,\"bandwidth\":0}],"
    "\"records\":[[1,0,[[0,0,\"00000000000000aa\"]]],[1,1,[[1,0,\"00000000000000bb\"]]]]";

static int parse_with(const char *spine, df_manifest *m, df_err *e) {
  char buf[2048];
  snprintf(buf, sizeof buf, "%s%s}", HEAD, spine);
  return df_manifest_parse(m, buf, strlen(buf), "t", e);
}

static void test_manifest_spine(void **st) {
  (void)st;
  df_manifest m, m2;
  df_err e;
  const char *ok = ",\"spine\":{\"kind\":\"int8\",\"layout\":\"00000000000000cc\",\"units\":["
                   "[0,8192,[[0,4096,4096,\"0000000000000001\"],[1,4096,4096,\"0000000000000002\"]]],"
                   "[2,12288,[[0,8192,8192,\"0000000000000003\"],[1,8192,4096,\"0000000000000004\"]]]]}";
  assert_int_equal(parse_with(ok, &m, &e), 0);
  assert_true(m.has_spine);
  assert_string_equal(m.spine.kind, "int8");
  assert_int_equal(m.spine.layout, 0xcc);
  assert_int_equal(m.spine.nunits, 2);
  assert_int_equal(m.spine.nchunks, 4);
  assert_int_equal(m.spine.chunks[3].xxh3, 4);
  assert_ptr_equal(df_manifest_spine_unit(&m, 2), &m.spine.units[1]);
  assert_null(df_manifest_spine_unit(&m, 1));
  char *js = df_manifest_to_json(&m);
  assert_int_equal(df_manifest_parse(&m2, js, strlen(js), "again", &e), 0);
  assert_memory_equal(m2.spine.chunks, m.spine.chunks, 4 * sizeof *m.spine.chunks);
  free(js);
  df_manifest_free(&m2);
  df_manifest_free(&m);
  /* without a section: still a valid manifest */
  assert_int_equal(parse_with("", &m, &e), 0);
  assert_false(m.has_spine);
  df_manifest_free(&m);
  struct {
    const char *spine, *msg;
  } bad[] = {
      /* over record (layer 1, expert 0) on drive 0 */
      {",\"spine\":{\"kind\":\"bf16\",\"layout\":\"00000000000000cc\",\"units\":[[0,4096,[[0,0,4096,"
       "\"0000000000000001\"]]]]}", "overlap"},
      {",\"spine\":{\"kind\":\"bf16\",\"layout\":\"00000000000000cc\",\"units\":[[0,4096,[[0,4100,4096,"
       "\"0000000000000001\"]]]]}", "multiples"},
      {",\"spine\":{\"kind\":\"bf16\",\"layout\":\"00000000000000cc\",\"units\":[[0,8192,[[0,4096,4096,"
       "\"0000000000000001\"]]]]}", "not 8192"},
      {",\"spine\":{\"kind\":\"fp8\",\"layout\":\"00000000000000cc\",\"units\":[[0,4096,[[0,4096,4096,"
       "\"0000000000000001\"]]]]}", "kind"},
      {",\"spine\":{\"kind\":\"bf16\",\"layout\":\"00000000000000cc\",\"units\":[[0,4096,[[0,16384,4096,"
       "\"0000000000000001\"]]]]}", "ends past"},
      {",\"spine\":{\"kind\":\"bf16\",\"layout\":\"00000000000000cc\",\"units\":[[3,4096,[[0,4096,4096,"
       "\"0000000000000001\"]]],[3,4096,[[1,4096,4096,\"0000000000000002\"]]]]}", "out of order"},
      {",\"spine\":{\"kind\":\"bf16\",\"layout\":\"00000000000000cc\",\"units\":[[0,4096,[[0,4096,4096,"
       "\"0000000000000001\"]]]],\"extra\":1}", "unknown field"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_not_equal(parse_with(bad[i].spine, &m, &e), 0);
    if (!strstr(e.msg, bad[i].msg)) fail_msg("case %zu: '%s' lacks '%s'", i, e.msg, bad[i].msg);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_place_random),
      cmocka_unit_test(test_place_by_hand),
      cmocka_unit_test(test_place_bandwidth),
      cmocka_unit_test(test_manifest_spine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

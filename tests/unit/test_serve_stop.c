/* Stop sequences on streamed text: whatever the chunking, the released text
 * equals the text cut at the first stop sequence (an exhaustive search over
 * the whole text is the reference), the stop text is never
 * released, and every released piece is whole UTF-8. The sequence that is
 * completed first wins, as if generation had stopped at that token. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/util.h"
#include "serve/stop.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static unsigned rnd(unsigned n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (unsigned)(rng % n);
}

/* characters of 1, 2, 3 and 4 bytes, few enough that stops occur often */
static const char *const alphabet[] = {"a", "b", "\n", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};

/* Reference: of all occurrences in the whole text, the one that ends first
 * (generation would have stopped there); at equal ends, the longer one. */
static size_t ref_cut(const char *t, size_t n, char **stops, size_t *lens, int ns, int *found) {
  size_t best = n, best_end = (size_t)-1;
  *found = 0;
  for (int i = 0; i < ns; i++)
    for (size_t at = 0; at + lens[i] <= n; at++)
      if (!memcmp(t + at, stops[i], lens[i])) {
        size_t end = at + lens[i];
        if (end < best_end || (end == best_end && at < best)) best = at, best_end = end;
        *found = 1;
      }
  return best;
}

static void rand_str(df_sbuf *b, int nchars) {
  for (int i = 0; i < nchars; i++) df_sbuf_addstr(b, alphabet[rnd(6)]);
}

static void test_random_against_reference(void **st) {
  (void)st;
  for (int iter = 0; iter < 20000; iter++) {
    df_sbuf text = {0}, sb[4] = {{0}};
    rand_str(&text, (int)rnd(40));
    int ns = (int)rnd(4) + (iter % 7 == 0 ? 0 : 1);
    char *stops[4];
    size_t lens[4];
    for (int i = 0; i < ns; i++) {
      rand_str(&sb[i], 1 + (int)rnd(4));
      stops[i] = sb[i].p;
      lens[i] = sb[i].n;
    }
    int found;
    size_t cut = ref_cut(text.p ? text.p : "", text.n, stops, lens, ns, &found);

    df_stop s;
    df_stop_init(&s, stops, lens, ns);
    df_sbuf out = {0};
    size_t pos = 0;
    int hit = 0;
    while (pos < text.n && !hit) {
      /* chunks of whole characters, as the token stream delivers them */
      size_t end = pos, k = 1 + rnd(5);
      while (k-- && end < text.n) {
        end++;
        while (end < text.n && ((unsigned char)text.p[end] & 0xC0) == 0x80) end++;
      }
      size_t before = out.n;
      hit = df_stop_push(&s, text.p + pos, end - pos, &out);
      assert_true(df_utf8_valid(out.p + before, out.n - before));
      pos = end;
    }
    if (!hit) df_stop_flush(&s, &out);
    assert_int_equal(hit, found);
    assert_int_equal(out.n, cut);
    if (cut) assert_memory_equal(out.p, text.p, cut);
    df_stop_free(&s);
    df_sbuf_free(&out);
    df_sbuf_free(&text);
    for (int i = 0; i < 4; i++) df_sbuf_free(&sb[i]);
  }
}

static void test_holds_back_only_what_could_match(void **st) {
  (void)st;
  char *stops[] = {"END"};
  size_t lens[] = {3};
  df_stop s;
  df_stop_init(&s, stops, lens, 1);
  df_sbuf out = {0};
  assert_int_equal(df_stop_push(&s, "hello E", 7, &out), 0);
  assert_int_equal(out.n, 6); /* "E" may start END */
  assert_memory_equal(out.p, "hello ", 6);
  assert_int_equal(df_stop_push(&s, "N", 1, &out), 0);
  assert_int_equal(out.n, 6);
  assert_int_equal(df_stop_push(&s, "X", 1, &out), 0); /* "ENX": not a stop after all */
  assert_int_equal(out.n, 9);
  assert_memory_equal(out.p, "hello ENX", 9);
  assert_int_equal(df_stop_push(&s, "yEND tail", 9, &out), 1);
  assert_int_equal(out.n, 10);
  assert_memory_equal(out.p, "hello ENXy", 10);
  assert_int_equal(df_stop_push(&s, "more", 4, &out), 1); /* ignored after the match */
  assert_int_equal(out.n, 10);
  df_stop_free(&s);
  df_sbuf_free(&out);
}

static void test_no_stops_passes_through(void **st) {
  (void)st;
  df_stop s;
  df_stop_init(&s, NULL, NULL, 0);
  df_sbuf out = {0};
  assert_int_equal(df_stop_push(&s, "abc", 3, &out), 0);
  assert_int_equal(out.n, 3);
  df_stop_flush(&s, &out);
  assert_int_equal(out.n, 3);
  df_stop_free(&s);
  df_sbuf_free(&out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_against_reference),
      cmocka_unit_test(test_holds_back_only_what_could_match),
      cmocka_unit_test(test_no_stops_passes_through),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

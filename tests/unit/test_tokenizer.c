/* The tokenizer on a tiny hand-made vocabulary: ids worked out by hand from
 * tiktoken's merge rule, a naive reference merge written here, special
 * tokens, UTF-8 validation, decoding and streaming, bad vocabulary files.
 * (The real vocabularies are checked against tiktoken itself in
 * tests/e2e/test_tokenizer_oracle.sh.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/util.h"
#include "tokenizer/tokenizer.h"
#include "synth/synth.h"
#include <jansson.h>

/* ---- writing vocabularies ---- */

static char tmpdir[64];

static char *tpath(const char *name) {
  static char buf[8][256];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, 256, "%s/%s", tmpdir, name);
  return p;
}

static void b64(const uint8_t *p, size_t n, char *out) {
  static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                 (i + 2 < n ? p[i + 2] : 0);
    out[o++] = a[w >> 18 & 63];
    out[o++] = a[w >> 12 & 63];
    out[o++] = i + 1 < n ? a[w >> 6 & 63] : '=';
    out[o++] = i + 2 < n ? a[w & 63] : '=';
  }
  out[o] = 0;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* The test vocabulary: rank b = the single byte b, then these merges. */
static const char *const merges[] = {
    "ab",           /* 256 */
    "cd",           /* 257 */
    "abcd",         /* 258 */
    "bc",           /* 259 */
    "\xAD\xEF",     /* 260: last byte of 中 + first byte of ， */
    "\xE4\xB8",     /* 261 */
    "\xE4\xB8\xAD", /* 262: 中 */
    "aa",           /* 263 */
    "ba",           /* 264 */
    "dc",           /* 265 */
    "abab",         /* 266 */
    "cdcd",         /* 267 */
    "aaaa",         /* 268 */
    "dcba",         /* 269 */
    "bab",          /* 270 */
    " a",           /* 271 */
    "'t",           /* 272 */
};
#define NMERGES (sizeof merges / sizeof merges[0])
#define NRANKS (256 + (int)NMERGES)

/* rank -> bytes for the reference merge below */
static uint8_t vbytes[NRANKS][8];
static size_t vlen[NRANKS];

static void write_vocab(const char *path) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  char enc[64];
  for (int r = 0; r < NRANKS; r++) {
    if (r < 256) {
      vbytes[r][0] = (uint8_t)r;
      vlen[r] = 1;
    } else {
      vlen[r] = strlen(merges[r - 256]);
      memcpy(vbytes[r], merges[r - 256], vlen[r]);
    }
    b64(vbytes[r], vlen[r], enc);
    /* a rank file in shuffled line order is still valid */
    fprintf(f, "%s %d\n", enc, r);
  }
  fclose(f);
}

static const char specials_json[] =
    "{\"added_tokens_decoder\": {"
    "\"273\": {\"content\": \"[BOS]\", \"special\": true},"
    "\"275\": {\"content\": \"<|open|>\", \"special\": true},"
    "\"276\": {\"content\": \"<|close|>\", \"special\": true},"
    "\"277\": {\"content\": \"<|sep|>\", \"special\": true},"
    "\"278\": {\"content\": \"<|end_of_msg|>\", \"special\": true},"
    "\"279\": {\"content\": \"<|open|>x\", \"special\": true}"
    "}, \"model_max_length\": 1000}";

static df_tok *tok;

static int setup(void **st) {
  (void)st;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/df-test-tok.XXXXXX");
  if (!mkdtemp(tmpdir)) return -1;
  write_vocab(tpath("tiktoken.model"));
  write_file(tpath("tokenizer_config.json"), specials_json);
  df_err e;
  if (df_tok_load(&tok, tmpdir, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return -1;
  }
  return 0;
}

static int teardown(void **st) {
  (void)st;
  df_tok_free(tok);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

/* ---- helpers ---- */

static size_t enc(const char *s, int specials, int *out, size_t max) {
  int *ids = NULL;
  size_t n = 0, cap = 0;
  df_err e;
  int rc = specials ? df_tok_encode_with_specials(tok, s, strlen(s), &ids, &n, &cap, &e)
                    : df_tok_encode(tok, s, strlen(s), &ids, &n, &cap, &e);
  if (rc) fail_msg("encode failed: %s", e.msg);
  assert_true(n <= max);
  if (n) memcpy(out, ids, n * sizeof *ids);
  free(ids);
  return n;
}

#define EXPECT_IDS(text, specials, ...)                                   \
  do {                                                                    \
    const int want_[] = {__VA_ARGS__};                                    \
    int got_[256];                                                        \
    size_t n_ = enc(text, specials, got_, 256);                           \
    assert_int_equal(n_, sizeof want_ / sizeof want_[0]);                 \
    for (size_t k_ = 0; k_ < n_; k_++) assert_int_equal(got_[k_], want_[k_]); \
  } while (0)

/* ---- encoding, worked out by hand ---- */

static void test_basic_info(void **st) {
  (void)st;
  assert_int_equal(df_tok_n_ranks(tok), NRANKS);
  assert_int_equal(df_tok_vocab_size(tok), 280); /* max special id + 1 */
  assert_int_equal(df_tok_special_id(tok, "<|open|>"), 275);
  assert_int_equal(df_tok_special_id(tok, "<|nope|>"), -1);
  assert_true(df_tok_is_special(tok, 278));
  assert_false(df_tok_is_special(tok, 274)); /* a hole in the special ids */
  assert_false(df_tok_is_special(tok, 100));
  size_t l;
  const uint8_t *p = df_tok_piece(tok, 258, &l);
  assert_int_equal(l, 4);
  assert_memory_equal(p, "abcd", 4);
  p = df_tok_piece(tok, 276, &l);
  assert_int_equal(l, 9);
  assert_memory_equal(p, "<|close|>", 9);
  assert_null(df_tok_piece(tok, 274, &l));
  assert_null(df_tok_piece(tok, -1, &l));
  assert_null(df_tok_piece(tok, 280, &l));
}

static void test_bpe_by_hand(void **st) {
  (void)st;
  /* a pre-token that is itself a rank is one token */
  EXPECT_IDS("abcd", 0, 258);
  /* abcde: ab(256) < cd(257) -> [ab c d e] -> [ab cd e] -> abcd(258) -> [abcd e] */
  EXPECT_IDS("abcde", 0, 258, 'e');
  /* bcd: the lowest rank wins, not the leftmost pair: cd(257) before bc(259) */
  EXPECT_IDS("bcd", 0, 'b', 257);
  /* aaa: equal ranks merge leftmost first */
  EXPECT_IDS("aaa", 0, 263, 'a');
  /* aaaaa: [aa a a a]... -> [aa aa a] -> [aaaa a] */
  EXPECT_IDS("aaaaa", 0, 268, 'a');
  /* dcbab: ab(256) first -> [d c b ab]; dc(265) -> [dc b ab]; bab(270) ->
   * [dc bab]; "dcbab" is no rank */
  EXPECT_IDS("dcbab", 0, 265, 270);
  /* pre-tokens: "ab" and " cd"; " cd" has pairs " c"(none) and cd(257) */
  EXPECT_IDS("ab cd", 0, 256, ' ', 257);
  /* " a" is a rank but a space before a word belongs to the word */
  EXPECT_IDS(" a", 0, 271);
  EXPECT_IDS(" ab", 0, ' ', 256);
  /* the contraction stays in the word's pre-token; BPE then merges 't */
  EXPECT_IDS("don't", 0, 'd', 'o', 'n', 272);
  int none[4];
  assert_int_equal(enc("", 0, none, 4), 0);
}

static void test_han_is_script_not_extensions(void **st) {
  (void)st;
  /* 中， : Han is Script=Han, and ， (U+FF0C) is Common script, so they are
   * two pre-tokens: 中 = 262 and ， = its three bytes. Were ， part of the Han
   * run (Script_Extensions), the pair AD EF (260) would merge first and give
   * [E4B8, ADEF, BC, 8C]. */
  EXPECT_IDS("中，", 0, 262, 0xEF, 0xBC, 0x8C);
  EXPECT_IDS("中中", 0, 262, 262);
}

/* tiktoken's merge rule, written as plainly as possible. */
static int ref_rank(const uint8_t *p, size_t n) {
  for (int r = 0; r < NRANKS; r++)
    if (vlen[r] == n && !memcmp(vbytes[r], p, n)) return r;
  return -1;
}

static size_t ref_bpe(const uint8_t *p, size_t n, int *out) {
  size_t start[1024], np = n + 1;
  for (size_t i = 0; i <= n; i++) start[i] = i;
  for (;;) {
    int best = -1;
    size_t bi = 0;
    for (size_t i = 0; i + 2 < np; i++) {
      int r = ref_rank(p + start[i], start[i + 2] - start[i]);
      if (r >= 0 && (best < 0 || r < best)) best = r, bi = i;
    }
    if (best < 0) break;
    memmove(start + bi + 1, start + bi + 2, (np - bi - 2) * sizeof *start);
    np--;
  }
  for (size_t i = 0; i + 1 < np; i++) out[i] = ref_rank(p + start[i], start[i + 1] - start[i]);
  return np - 1;
}

static void test_bpe_matches_reference(void **st) {
  (void)st;
  /* Lower-case runs are one pre-token; lengths cross the point where the
   * library switches from the quadratic scan to the heap. */
  uint64_t x = 88172645463325252ull;
  char s[600];
  int want[600], got[600];
  for (int iter = 0; iter < 300; iter++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t n = 1 + (size_t)(x % (iter < 250 ? 70 : 400));
    for (size_t i = 0; i < n; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      s[i] = "abcd"[x % 4];
    }
    s[n] = 0;
    size_t nw = ref_bpe((const uint8_t *)s, n, want);
    size_t ng = enc(s, 0, got, 600);
    assert_int_equal(ng, nw);
    for (size_t k = 0; k < nw; k++) assert_int_equal(got[k], want[k]);
  }
}

/* ---- specials ---- */

static void test_specials(void **st) {
  (void)st;
  /* recognised in trusted text */
  EXPECT_IDS("ab<|open|>cd", 1, 256, 275, 257);
  EXPECT_IDS("<|open|><|sep|>", 1, 275, 277);
  /* the longest special starting at a position wins */
  EXPECT_IDS("<|open|>x", 1, 279);
  EXPECT_IDS("[BOS]ab", 1, 273, 256);
  /* an incomplete special is text: pre-tokens "<|", "open", "|" */
  EXPECT_IDS("<|open|", 1, '<', '|', 'o', 'p', 'e', 'n', '|');
  /* ordinary text (user content): never a special id. Pre-tokens: "ab",
   * "<|", "open", "|>", "cd" */
  EXPECT_IDS("ab<|open|>cd", 0, 256, '<', '|', 'o', 'p', 'e', 'n', '|', '>', 257);
  int ids[64];
  size_t n = enc("<|open|><|close|><|sep|><|end_of_msg|>[BOS]", 0, ids, 64);
  for (size_t i = 0; i < n; i++) assert_true(ids[i] < NRANKS);
}

/* ---- UTF-8 ---- */

static void test_invalid_utf8_is_an_error(void **st) {
  (void)st;
  static const char *const bad[] = {
      "\xff", "a\x80", "\xc0\x80", "\xe4\xb8", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ab\xe4",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int *ids = NULL;
    size_t n = 0, cap = 0;
    df_err e = {{0}};
    assert_int_equal(df_tok_encode(tok, bad[i], strlen(bad[i]), &ids, &n, &cap, &e), -1);
    assert_non_null(strstr(e.msg, "UTF-8"));
    assert_int_equal(df_tok_encode_with_specials(tok, bad[i], strlen(bad[i]), &ids, &n, &cap, &e),
                     -1);
    assert_int_equal(n, 0);
    free(ids);
  }
  /* embedded NUL is valid text */
  int *ids = NULL;
  size_t n = 0, cap = 0;
  df_err e;
  assert_int_equal(df_tok_encode(tok, "a\0b", 3, &ids, &n, &cap, &e), 0);
  assert_int_equal(n, 3);
  assert_int_equal(ids[1], 0);
  free(ids);
}

static void test_decode_round_trip(void **st) {
  (void)st;
  static const char *const texts[] = {
      "abcd abcde\tdon't\r\n", "中，文。「」 😀👍🏽 e\xcc\x81", "  \n\n  x ", "<|open|>",
      "12345 6789 ٣٤", "\xe2\x80\x8b\xc2\xa0\xe3\x80\x80",
  };
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    for (int sp = 0; sp < 2; sp++) {
      int ids[256];
      size_t n = enc(texts[i], sp, ids, 256), len;
      char *back = df_tok_decode(tok, ids, n, &len);
      assert_int_equal(len, strlen(texts[i]));
      assert_memory_equal(back, texts[i], len);
      free(back);
    }
  }
  /* unknown ids decode to nothing */
  int ids[] = {'a', 274, -5, 100000, 'b'};
  size_t len;
  char *s = df_tok_decode(tok, ids, 5, &len);
  assert_string_equal(s, "ab");
  free(s);
}

static void test_stream_holds_incomplete_utf8(void **st) {
  (void)st;
  df_tok_stream s;
  df_tok_stream_init(&s, tok);
  char out[64];
  /* 😀 = F0 9F 98 80, one byte token each */
  assert_int_equal(df_tok_stream_push(&s, 'a', out, sizeof out), 1);
  assert_int_equal(out[0], 'a');
  assert_int_equal(df_tok_stream_push(&s, 0xF0, out, sizeof out), 0);
  assert_int_equal(df_tok_stream_push(&s, 0x9F, out, sizeof out), 0);
  assert_int_equal(df_tok_stream_push(&s, 0x98, out, sizeof out), 0);
  assert_int_equal(df_tok_stream_push(&s, 0x80, out, sizeof out), 4);
  assert_memory_equal(out, "\xF0\x9F\x98\x80", 4);
  assert_int_equal(df_tok_stream_flush(&s, out, sizeof out), 0);
  /* 中 split as E4B8 (261) + AD: nothing until complete */
  assert_int_equal(df_tok_stream_push(&s, 261, out, sizeof out), 0);
  assert_int_equal(df_tok_stream_push(&s, 0xAD, out, sizeof out), 3);
  assert_memory_equal(out, "中", 3);
  /* a dangling partial character becomes U+FFFD at the flush */
  assert_int_equal(df_tok_stream_push(&s, 0xF0, out, sizeof out), 0);
  assert_int_equal(df_tok_stream_push(&s, 0x9F, out, sizeof out), 0);
  assert_int_equal(df_tok_stream_flush(&s, out, sizeof out), 3);
  assert_memory_equal(out, "\xEF\xBF\xBD", 3);
  assert_int_equal(df_tok_stream_flush(&s, out, sizeof out), 0);
  /* a broken sequence: E4 then 'b' -> U+FFFD b; a stray continuation byte */
  assert_int_equal(df_tok_stream_push(&s, 0xE4, out, sizeof out), 0);
  assert_int_equal(df_tok_stream_push(&s, 'b', out, sizeof out), 4);
  assert_memory_equal(out, "\xEF\xBF\xBD" "b", 4);
  assert_int_equal(df_tok_stream_push(&s, 0x80, out, sizeof out), 3);
  assert_memory_equal(out, "\xEF\xBF\xBD", 3);
  /* bytes that can never start a character are replaced at once */
  assert_int_equal(df_tok_stream_push(&s, 0xFF, out, sizeof out), 3);
  /* an overlong lead (E0 80) is not held back */
  assert_int_equal(df_tok_stream_push(&s, 0xE0, out, sizeof out), 0);
  assert_int_equal(df_tok_stream_push(&s, 0x80, out, sizeof out), 6);
  assert_memory_equal(out, "\xEF\xBF\xBD\xEF\xBF\xBD", 6);
  /* specials stream as their text */
  assert_int_equal(df_tok_stream_push(&s, 275, out, sizeof out), 8);
  assert_memory_equal(out, "<|open|>", 8);
  /* too small a buffer: -1 and nothing consumed */
  assert_int_equal(df_tok_stream_push(&s, 0xE4, out, sizeof out), 0);
  assert_int_equal(df_tok_stream_push(&s, 258, out, 3), -1);
  assert_int_equal(df_tok_stream_push(&s, 258, out, 7), 7);
  assert_memory_equal(out, "\xEF\xBF\xBD" "abcd", 7);
}

/* ---- bad vocabularies ---- */

static void expect_load_error(const char *ranks, const char *cfg, const char *needle) {
  write_file(tpath("bad.model"), ranks);
  if (cfg) write_file(tpath("bad.json"), cfg);
  df_tok *t = NULL;
  df_err e = {{0}};
  assert_int_equal(df_tok_load_files(&t, tpath("bad.model"), cfg ? tpath("bad.json") : NULL, NULL,
                                     &e),
                   -1);
  assert_null(t);
  if (!strstr(e.msg, needle)) fail_msg("error '%s' does not mention '%s'", e.msg, needle);
}

/* All 256 bytes as ranks 0..255, then extra lines. */
static char *bytes_plus(const char *extra, int skip_byte, int dup_rank) {
  size_t cap = 16384;
  char *s = df_xmalloc(cap), enc[16];
  size_t o = 0;
  int r = 0;
  for (int b = 0; b < 256; b++) {
    if (b == skip_byte) continue;
    uint8_t c = (uint8_t)b;
    b64(&c, 1, enc);
    o += (size_t)snprintf(s + o, cap - o, "%s %d\n", enc, b == dup_rank ? r - 1 : r);
    r++;
  }
  snprintf(s + o, cap - o, "%s", extra);
  return s;
}

static void test_bad_rank_files(void **st) {
  (void)st;
  char *s;
  expect_load_error(s = bytes_plus("YWI= 256\nYWI= 257\n", -1, -1), NULL, "same bytes");
  free(s);
  expect_load_error(s = bytes_plus("", -1, 7), NULL, "appears twice");
  free(s);
  expect_load_error(s = bytes_plus("YWI= 257\n", -1, -1), NULL, "contiguous");
  free(s);
  expect_load_error(s = bytes_plus("YWI= 255\n", 'A', -1), NULL, "0x41");
  free(s);
  expect_load_error(s = bytes_plus("Y!I= 256\n", -1, -1), NULL, "base64");
  free(s);
  expect_load_error(s = bytes_plus("YWI=256\n", -1, -1), NULL, "base64 rank");
  free(s);
  expect_load_error(s = bytes_plus("YWI= 2x6\n", -1, -1), NULL, "integer");
  free(s);
  expect_load_error(s = bytes_plus("YWI= \n", -1, -1), NULL, "missing rank");
  free(s);
  expect_load_error(s = bytes_plus("\nYWI= 256\n", -1, -1), NULL, "empty line");
  free(s);
  expect_load_error("", NULL, "no ranks");
  /* specials */
  s = bytes_plus("", -1, -1);
  expect_load_error(s, "{\"added_tokens_decoder\": {\"255\": {\"content\": \"<x>\"}}}", "collides");
  expect_load_error(s, "{\"added_tokens_decoder\": {\"x1\": {\"content\": \"<x>\"}}}", "token id");
  expect_load_error(s, "{\"added_tokens_decoder\": {\"300\": {\"special\": true}}}", "content");
  expect_load_error(s,
                    "{\"added_tokens_decoder\": {\"300\": {\"content\": \"<x>\"},"
                    " \"301\": {\"content\": \"<x>\"}}}",
                    "both token");
  expect_load_error(s, "{\"vocab\": 3}", "added_tokens_decoder");
  expect_load_error(s, "{\"added_tokens_decoder\": ", "bad.json");
  free(s);
  /* a missing file names the file */
  df_tok *t = NULL;
  df_err e;
  assert_int_equal(df_tok_load(&t, "/nonexistent-dir-df", &e), -1);
  assert_non_null(strstr(e.msg, "/nonexistent-dir-df/tiktoken.model"));
  /* a bad pattern is reported */
  s = bytes_plus("", -1, -1);
  write_file(tpath("ok.model"), s);
  free(s);
  assert_int_equal(df_tok_load_files(&t, tpath("ok.model"), NULL, "(unclosed", &e), -1);
  assert_non_null(strstr(e.msg, "pattern"));
  /* CRLF rank files and a missing final newline are fine */
  s = bytes_plus("YWI= 256", -1, -1);
  size_t n = strlen(s), o = 0;
  char *crlf = df_xmalloc(2 * n + 1);
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\n') crlf[o++] = '\r';
    crlf[o++] = s[i];
  }
  crlf[o] = 0;
  write_file(tpath("crlf.model"), crlf);
  assert_int_equal(df_tok_load_files(&t, tpath("crlf.model"), NULL, NULL, &e), 0);
  assert_int_equal(df_tok_n_ranks(t), 257);
  df_tok_free(t);
  free(crlf);
  free(s);
}

/* The release's table: a TikTokenTokenizer config that lists 16 of the 256
 * specials (the generator writes one like it); every other id is
 * <|reserved_token_ID|> by position, and every one of the 256 decodes. */
static void test_sparse_specials(void **st) {
  (void)st;
  char dir[] = "/tmp/df-test-sparse.XXXXXX";
  assert_non_null(mkdtemp(dir));
  df_synth_vocab v;
  df_synth_vocab_build(&v);
  df_err e = {{0}};
  assert_int_equal(df_synth_write_tokenizer(dir, &v, &e), 0);
  int n = v.n;
  df_synth_vocab_free(&v);
  /* the file lists exactly the release's 16, at the release's offsets */
  char *cfg = df_path_join(dir, "tokenizer_config.json");
  json_t *j = json_load_file(cfg, 0, NULL);
  assert_non_null(j);
  json_t *dec = json_object_get(j, "added_tokens_decoder");
  assert_int_equal(json_object_size(dec), 16);
  static const struct {
    int off;
    const char *name;
  } rel[16] = {{0, "[BOS]"}, {1, "[EOS]"}, {2, "<|end_of_msg|>"}, {3, "<|open|>"},
               {4, "<|close|>"}, {5, "<|sep|>"}, {6, "[start_header_id]"},
               {7, "[end_header_id]"}, {9, "[EOT]"}, {18, "<|media_begin|>"},
               {19, "<|media_content|>"}, {20, "<|media_end|>"}, {21, "<|media_pad|>"},
               {65, "<osagent_mode>"}, {254, "[UNK]"}, {255, "[PAD]"}};
  for (int k = 0; k < 16; k++) {
    char id[16];
    snprintf(id, sizeof id, "%d", n + rel[k].off);
    assert_string_equal(json_string_value(json_object_get(json_object_get(dec, id), "content")),
                        rel[k].name);
  }
  assert_string_equal(json_string_value(json_object_get(j, "tokenizer_class")),
                      "TikTokenTokenizer");
  json_decref(j);
  df_tok *t;
  if (df_tok_load(&t, dir, &e)) fail_msg("%s", e.msg);
  assert_int_equal(df_tok_vocab_size(t), n + 256);
  for (int k = 0; k < 256; k++) {
    int id = n + k;
    assert_true(df_tok_is_special(t, id));
    size_t l;
    const uint8_t *p = df_tok_piece(t, id, &l);
    assert_non_null(p);
    char want[48];
    const char *name = NULL;
    for (int r = 0; r < 16; r++)
      if (rel[r].off == k) name = rel[r].name;
    if (!name) {
      snprintf(want, sizeof want, "<|reserved_token_%d|>", id);
      name = want;
    }
    assert_int_equal(l, strlen(name));
    assert_memory_equal(p, name, l);
    assert_int_equal(df_tok_special_id(t, name), id);
    /* and decodes, and reads back as that id when specials are allowed */
    size_t dl;
    char *d = df_tok_decode(t, &id, 1, &dl);
    assert_string_equal(d, name);
    int *ids = NULL;
    size_t ni = 0, cap = 0;
    assert_int_equal(df_tok_encode_with_specials(t, d, dl, &ids, &ni, &cap, &e), 0);
    assert_int_equal(ni, 1);
    assert_int_equal(ids[0], id);
    free(ids);
    free(d);
  }
  assert_false(df_tok_is_special(t, n + 256));
  df_tok_free(t);
  /* a listed special outside the reserved 256 is refused, naming it */
  const char *bad = "{\"tokenizer_class\": \"TikTokenTokenizer\", \"added_tokens_decoder\": "
                    "{\"100000\": {\"content\": \"[FAR]\"}}}";
  assert_int_equal(df_file_write_atomic(cfg, bad, strlen(bad), &e), 0);
  assert_int_equal(df_tok_load(&t, dir, &e), -1);
  assert_non_null(strstr(e.msg, "[FAR]"));
  unlink(cfg);
  free(cfg);
  char *r = df_path_join(dir, "tiktoken.model");
  unlink(r);
  free(r);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sparse_specials),
      cmocka_unit_test(test_basic_info),
      cmocka_unit_test(test_bpe_by_hand),
      cmocka_unit_test(test_han_is_script_not_extensions),
      cmocka_unit_test(test_bpe_matches_reference),
      cmocka_unit_test(test_specials),
      cmocka_unit_test(test_invalid_utf8_is_an_error),
      cmocka_unit_test(test_decode_round_trip),
      cmocka_unit_test(test_stream_holds_incomplete_utf8),
      cmocka_unit_test(test_bad_rank_files),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

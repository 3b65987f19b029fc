/* The server's generated-ids-to-text pipeline on a byte-level tokenizer
 * (256 one-byte ranks + the K3 specials): channels of the chat format,
 * stop sequences per channel, UTF-8 never released in halves, the end-of-text
 * id contributing no text. Expected texts are written out from the chat
 * format in kimi-k3.md section 7. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bytetok_fixture.h"

#include "base/util.h"
#include "serve/gentext.h"

enum { BOS = BT_BOS, EOS = BT_EOS, EOM = BT_EOM, OPEN = BT_OPEN, CLOSE = BT_CLOSE, SEP = BT_SEP, RSV = BT_RSV };

static char tmpdir[64];
static df_tok *tok;

static int setup(void **st) {
  (void)st;
  return (tok = bytetok_load(tmpdir, sizeof tmpdir, "gentext")) ? 0 : -1;
}

static int teardown(void **st) {
  (void)st;
  return bytetok_free(tok, tmpdir);
}

/* What the sink saw, per channel, and how it arrived. */
typedef struct seen {
  df_sbuf ch[2]; /* [0] reasoning, [1] response */
  int calls, order_bad, last;
} seen;

static void sink(void *ud, df_channel ch, const char *text, size_t n) {
  seen *s = ud;
  assert_true(ch == DF_CH_REASONING || ch == DF_CH_RESPONSE);
  assert_true(n > 0);
  assert_true(df_utf8_valid(text, n)); /* never half a character */
  int k = ch == DF_CH_RESPONSE;
  if (k < s->last) s->order_bad = 1; /* reasoning never follows response */
  s->last = k;
  df_sbuf_add(&s->ch[k], text, n);
  s->calls++;
}

static void seen_free(seen *s) {
  df_sbuf_free(&s->ch[0]);
  df_sbuf_free(&s->ch[1]);
}

/* ids: bytes of text, specials by name in the string as \x01..\x07 markers */
static int to_ids(const char *spec, int *ids) {
  int n = 0;
  for (const unsigned char *p = (const unsigned char *)spec; *p; p++)
    ids[n++] = *p >= 1 && *p <= 7 ? 255 + *p : *p;
  return n;
}
#define S_EOS "\x02"
#define S_EOM "\x03"
#define S_OPEN "\x04"
#define S_CLOSE "\x05"
#define S_SEP "\x06"
#define S_RSV "\x07"

static int feed(df_gentext *g, const char *spec) {
  int ids[512], n = to_ids(spec, ids), stopped = 0;
  for (int i = 0; i < n && !stopped; i++) stopped = df_gentext_push(g, ids[i]);
  return stopped;
}

static const char *str(df_sbuf *b) { return b->p ? b->p : ""; }

#define REPLY "I think \xc3\xa9t\xc3\xa9" S_CLOSE "think" S_SEP S_OPEN "response" S_SEP \
  "Hello, world" S_CLOSE "response" S_SEP S_CLOSE "message" S_SEP S_EOM

static void test_chat_channels(void **st) {
  (void)st;
  seen s = {0};
  df_gentext g;
  df_gentext_init(&g, DF_SERVE_CHAT, tok, EOS, NULL, NULL, 0, sink, &s);
  assert_int_equal(feed(&g, REPLY), 0);
  df_gentext_finish(&g);
  assert_string_equal(str(&s.ch[0]), "I think \xc3\xa9t\xc3\xa9");
  assert_string_equal(str(&s.ch[1]), "Hello, world");
  assert_int_equal(s.order_bad, 0);
  assert_int_equal(g.n_reasoning, 13); /* the 13 bytes of the think part */
  df_gentext_free(&g);
  seen_free(&s);
}

static void test_chat_stop_in_response(void **st) {
  (void)st;
  char *stops[] = {"o, w", "zz"};
  size_t lens[] = {4, 2};
  seen s = {0};
  df_gentext g;
  df_gentext_init(&g, DF_SERVE_CHAT, tok, EOS, stops, lens, 2, sink, &s);
  assert_int_equal(feed(&g, REPLY), 1);
  df_gentext_finish(&g);
  assert_string_equal(str(&s.ch[0]), "I think \xc3\xa9t\xc3\xa9");
  assert_string_equal(str(&s.ch[1]), "Hell");
  assert_int_equal(df_gentext_push(&g, 'x'), 1); /* stays stopped */
  df_gentext_free(&g);
  seen_free(&s);
}

static void test_chat_stop_in_reasoning(void **st) {
  (void)st;
  char *stops[] = {"\xc3\xa9t"};
  size_t lens[] = {3};
  seen s = {0};
  df_gentext g;
  df_gentext_init(&g, DF_SERVE_CHAT, tok, EOS, stops, lens, 1, sink, &s);
  assert_int_equal(feed(&g, REPLY), 1);
  df_gentext_finish(&g);
  assert_string_equal(str(&s.ch[0]), "I think ");
  assert_string_equal(str(&s.ch[1]), "");
  df_gentext_free(&g);
  seen_free(&s);
}

/* A stop sequence that is a prefix of the think text's tail is held back
 * until the think part closes, then released before the response. */
static void test_holdback_released_at_channel_switch(void **st) {
  (void)st;
  char *stops[] = {"t\xc3\xa9!"};
  size_t lens[] = {4};
  seen s = {0};
  df_gentext g;
  df_gentext_init(&g, DF_SERVE_CHAT, tok, EOS, stops, lens, 1, sink, &s);
  assert_int_equal(feed(&g, "I think \xc3\xa9t\xc3\xa9" S_CLOSE "think" S_SEP), 0);
  assert_string_equal(str(&s.ch[0]), "I think \xc3\xa9");
  assert_int_equal(feed(&g, S_OPEN "response" S_SEP "ok"), 0);
  assert_string_equal(str(&s.ch[0]), "I think \xc3\xa9t\xc3\xa9");
  assert_string_equal(str(&s.ch[1]), "ok");
  assert_int_equal(s.order_bad, 0);
  df_gentext_free(&g);
  seen_free(&s);
}

static void test_chat_dangling_character(void **st) {
  (void)st;
  seen s = {0};
  df_gentext g;
  df_gentext_init(&g, DF_SERVE_CHAT, tok, EOS, NULL, NULL, 0, sink, &s);
  /* the length limit cuts a 3-byte character after 2 bytes */
  assert_int_equal(feed(&g, "ab\xe2\x82"), 0);
  assert_string_equal(str(&s.ch[0]), "ab");
  df_gentext_finish(&g);
  size_t n = s.ch[0].n;
  assert_true(n > 2);
  assert_true(df_utf8_valid(s.ch[0].p, n));
  assert_memory_equal(s.ch[0].p + n - 3, "\xef\xbf\xbd", 3);
  df_gentext_free(&g);
  seen_free(&s);
}

static void test_completion(void **st) {
  (void)st;
  seen s = {0};
  df_gentext g;
  df_gentext_init(&g, DF_SERVE_COMPLETION, tok, EOS, NULL, NULL, 0, sink, &s);
  /* markup is ordinary text for a plain completion; the end-of-text id is not */
  assert_int_equal(feed(&g, "a" S_RSV "b\xc3\xa9" S_EOS), 0);
  df_gentext_finish(&g);
  assert_string_equal(str(&s.ch[1]), "a<|reserved_token_6|>b\xc3\xa9");
  assert_string_equal(str(&s.ch[0]), "");
  df_gentext_free(&g);
  seen_free(&s);

  char *stops[] = {"b"};
  size_t lens[] = {1};
  seen t = {0};
  df_gentext_init(&g, DF_SERVE_COMPLETION, tok, -1, stops, lens, 1, sink, &t);
  assert_int_equal(feed(&g, "xyzb"), 1);
  assert_string_equal(str(&t.ch[1]), "xyz");
  df_gentext_free(&g);
  seen_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chat_channels),
      cmocka_unit_test(test_chat_stop_in_response),
      cmocka_unit_test(test_chat_stop_in_reasoning),
      cmocka_unit_test(test_holdback_released_at_channel_switch),
      cmocka_unit_test(test_chat_dangling_character),
      cmocka_unit_test(test_completion),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

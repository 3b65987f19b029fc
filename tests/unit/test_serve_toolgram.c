/* The tool-choice matcher: forced calls follow the markup and the chosen
 * tool's argument schema, none refuses tool tags, one call closes the
 * message after the first call. Texts are fed in pieces of every size, as
 * tokens would bring them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "serve/toolgram.h"

/* A script: "<o>" "<c>" "<s>" "<e>" are the specials, anything else bytes. */
static int run(df_tm *m, const char *script, size_t piece) {
  const char *p = script;
  while (*p) {
    if (*p == '<' && p[1] && p[2] == '>' && strchr("ocse", p[1])) {
      df_tg_sym s = p[1] == 'o'   ? DF_TG_OPEN
                    : p[1] == 'c' ? DF_TG_CLOSE
                    : p[1] == 's' ? DF_TG_SEP
                                  : DF_TG_EOM;
      int a = df_tm_accepts_sym(m, s);
      int f = df_tm_feed_sym(m, s);
      assert_int_equal(a, f); /* the check and the step agree */
      if (!f)
        return 0;
      p += 3;
      continue;
    }
    size_t n = 0;
    while (p[n] &&
           !(p[n] == '<' && p[n + 1] && p[n + 2] == '>' &&
             strchr("ocse", p[n + 1])) &&
           n < piece)
      n++;
    int a = df_tm_accepts_bytes(m, (const uint8_t *)p, n);
    int f = df_tm_feed_bytes(m, (const uint8_t *)p, n);
    assert_int_equal(a, f);
    if (!f)
      return 0;
    p += n;
  }
  return 1;
}

static const char *const names[] = {"get", "get_weather"};
static df_jg *args[2];
static const df_jg *cargs[2];

static int setup(void **st) {
  (void)st;
  char err[256];
  const char *s0 =
      "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}}}";
  const char *s1 =
      "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
      "\"unit\":{\"enum\":[\"c\",\"f\"]}}}";
  args[0] = df_jg_schema(s0, strlen(s0), err, sizeof err);
  args[1] = df_jg_schema(s1, strlen(s1), err, sizeof err);
  assert_non_null(args[0]);
  assert_non_null(args[1]);
  cargs[0] = args[0];
  cargs[1] = args[1];
  return 0;
}

static int teardown(void **st) {
  (void)st;
  df_jg_free(args[0]);
  df_jg_free(args[1]);
  return 0;
}

#define CALL_TAIL "<c>json<s><c>call<s><c>tools<s><c>message<s><e>"
#define FORCED_W                                                               \
  "<c>response<s><o>tools<s><o>call tool=\"get_weather\" "                     \
  "index=\"1\"<s><o>json type=\"object\"<s>"                                   \
  "{\"city\":\"Oslo\",\"unit\":\"c\"}" CALL_TAIL

static int forced_ok(int thinking, int one_call, const char *script) {
  df_tg *g = df_tg_new(0, 1, one_call, thinking, names, cargs, 2);
  int ok = 1;
  for (size_t piece = 1; piece <= 40; piece++) {
    df_tm m;
    df_tm_init(&m, g);
    int r = run(&m, script, piece);
    size_t len = strlen(script);
    if (r && len >= 3 && !strcmp(script + len - 3, "<e>") && !m.done)
      r = 0;
    if (piece == 1)
      ok = r;
    assert_int_equal(r, ok); /* the piece size never changes the verdict */
  }
  df_tg_free(g);
  return ok;
}

static void test_forced(void **st) {
  (void)st;
  assert_true(forced_ok(0, 1, FORCED_W));
  assert_true(forced_ok(0, 1,
                        "<c>response<s><o>tools<s><o>call tool=\"get\" "
                        "index=\"1\"<s><o>json type=\"object\"<s>"
                        "{\"id\":42}" CALL_TAIL));
  /* the other tool's arguments are refused: each call follows its own schema */
  assert_false(forced_ok(0, 1,
                         "<c>response<s><o>tools<s><o>call tool=\"get\" "
                         "index=\"1\"<s><o>json type=\"object\"<s>"
                         "{\"city\":\"Oslo\"}" CALL_TAIL));
  /* a tool that was not offered, text before the call, a schema violation, an
   * early end */
  assert_false(forced_ok(
      0, 1, "<c>response<s><o>tools<s><o>call tool=\"rm\" index=\"1\"<s>"));
  assert_false(forced_ok(0, 1, "Sure!<c>response<s>"));
  assert_false(
      forced_ok(0, 1,
                "<c>response<s><o>tools<s><o>call tool=\"get_weather\" "
                "index=\"1\"<s><o>json type=\"object\"<s>"
                "{\"city\":\"Oslo\",\"unit\":\"k\"}" CALL_TAIL));
  assert_false(forced_ok(0, 1, "<e>"));
  assert_false(
      forced_ok(0, 1,
                "<c>response<s><o>tools<s><o>call tool=\"get_weather\" "
                "index=\"1\"<s><o>json type=\"object\"<s>"
                "{\"city\":\"Oslo\"<c>"));
  /* with thinking the model reasons first; only <|close|> ends it */
  assert_false(
      forced_ok(1, 1, "let me think <o> no<c>think<s><o>response<s>" FORCED_W));
  assert_true(
      forced_ok(1, 1, "let me think<c>think<s><o>response<s>" FORCED_W));
  assert_false(forced_ok(1, 1, "let me think<e>"));
  assert_false(
      forced_ok(1, 1, "hm<c>think<s><o>response<s>text first<c>response<s>"));
  /* one call: a second is refused; parallel calls allowed: the model goes on
   * freely */
  const char *two =
      "<c>response<s><o>tools<s><o>call tool=\"get\" index=\"1\"<s><o>json "
      "type=\"object\"<s>"
      "{\"id\":1}<c>json<s><c>call<s><o>call tool=\"get\" index=\"2\"<s>";
  assert_false(forced_ok(0, 1, two));
  assert_true(forced_ok(0, 0, two));
  const char *after = "<c>response<s><o>tools<s><o>call tool=\"get\" "
                      "index=\"1\"<s><o>json type=\"object\"<s>"
                      "{\"id\":1}<c>json<s><c>call<s>";
  char buf[1024];
  snprintf(buf, sizeof buf, "%s<c>tools<s><c>message<s><e>", after);
  assert_true(forced_ok(0, 0, buf)); /* one call and the end */
  snprintf(buf, sizeof buf, "%sand then", after);
  assert_false(forced_ok(0, 0, buf)); /* no text after a forced call */
  snprintf(buf, sizeof buf, "%s<o>call tool=\"get\" index=\"\"<s>", after);
  assert_false(forced_ok(0, 0, buf)); /* an index is a number */
  snprintf(buf, sizeof buf,
           "%s<o>call tool=\"get_weather\" index=\"12\"<s><o>json "
           "type=\"object\"<s>{\"id\":1}",
           after);
  assert_false(
      forced_ok(0, 0, buf)); /* the second call follows its own tool's schema */
}

static void test_none(void **st) {
  (void)st;
  df_tg *g = df_tg_new(1, 0, 0, 1, NULL, NULL, 0);
  assert_non_null(g);
  static const struct {
    const char *s;
    int ok;
  } cases[] = {
      {"thinking <c>think<s><o>response<s>Hello.<c>response<s><c>message<s><e>",
       1},
      {"a<o>think<s>b", 1},
      {"<o>tools<s>", 0},
      {"<o>to", 0},
      {"<o>call tool=\"x\"", 0},
      {"<o>res<s>", 0},
      {"<o>response <s>", 0},
      {"<o>thinker<s>", 0},
      {"<o><e>", 0},
      {"plain text <e>", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (size_t piece = 1; piece <= 8; piece++) {
      df_tm m;
      df_tm_init(&m, g);
      if (run(&m, cases[i].s, piece) != cases[i].ok)
        fail_msg("case %zu piece %zu", i, piece);
    }
  df_tg_free(g);
}

static void test_one_call(void **st) {
  (void)st;
  df_tg *g = df_tg_new(0, 0, 1, 1, NULL, NULL, 0);
  const char *first = "hm<c>think<s><o>response<s>ok<c>response<s><o>tools<s>"
                      "<o>call tool=\"a\" index=\"1\"<s><o>argument key=\"k\" "
                      "type=\"string\"<s>v"
                      "<c>argument<s><c>call<s>";
  df_tm m;
  df_tm_init(&m, g);
  assert_true(run(&m, first, 3));
  assert_int_equal(m.ncalls, 1);
  df_tm c = m;
  assert_false(run(&c, "<o>call", 3)); /* no second call */
  c = m;
  assert_true(run(&c, "<c>tools<s><c>message<s><e>", 3));
  assert_true(c.done);
  df_tg_free(g);
  /* nothing constrained: no matcher */
  assert_null(df_tg_new(0, 0, 0, 1, NULL, NULL, 0));
  assert_null(df_tg_new(0, 1, 0, 1, NULL, NULL, 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_forced),
      cmocka_unit_test(test_none),
      cmocka_unit_test(test_one_call),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

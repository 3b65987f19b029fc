/* The structured-output matcher (serve/jsongram.h): documents that must be
 * accepted whole (every prefix too), documents that must be refused, and
 * the schema subset, against hand-written JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "serve/jsongram.h"

static int whole(const df_jg *g, const char *doc) {
  df_jm m;
  df_jm_init(&m, g);
  size_t n = strlen(doc);
  /* byte by byte and in odd-sized pieces must agree */
  for (size_t i = 0; i < n; i++)
    if (!df_jm_feed(&m, (const uint8_t *)doc + i, 1)) return 0;
  df_jm m2;
  df_jm_init(&m2, g);
  for (size_t i = 0; i < n; i += 3) {
    size_t k = n - i < 3 ? n - i : 3;
    if (!df_jm_accepts(&m2, (const uint8_t *)doc + i, k)) return -1;
    df_jm_feed(&m2, (const uint8_t *)doc + i, k);
  }
  return m.done && m2.done ? 1 : 2; /* 2: a valid prefix, not complete */
}

static void test_object(void **st) {
  (void)st;
  df_jg *g = df_jg_object();
  assert_int_equal(whole(g, "{}"), 1);
  assert_int_equal(whole(g, "{\"a\":[1,2.5e-3,{\"b\":null}],\"c\":\"x\\\"y\xc3\xa9\\n\",\"d\":true,\"e\":-0}"), 1);
  assert_int_equal(whole(g, "{\"c\":\"\\u00e9\"}"), 0);     /* no \u escapes */
  assert_int_equal(whole(g, "{\"\xe1\":1}"), 0);             /* a cut UTF-8 character */
  assert_int_equal(whole(g, "{\"\xed\xa0\x80\":1}"), 0);     /* a surrogate */
  assert_int_equal(whole(g, "{\"\xc0\xaf\":1}"), 0);         /* overlong */
  assert_int_equal(whole(g, "{\"\xf0\x9f\x98\x80\":1}"), 1); /* an emoji */
  assert_int_equal(whole(g, "{\"a\":[]}"), 1);
  assert_int_equal(whole(g, "{\"a\":1"), 2);
  assert_int_equal(whole(g, "{\"a\":10"), 2);
  assert_int_equal(whole(g, "{\"a\":01}"), 0);
  assert_int_equal(whole(g, "{\"a\" :1}"), 0); /* compact: no white space */
  assert_int_equal(whole(g, "[1]"), 0);
  assert_int_equal(whole(g, "{\"a\":1}x"), 0);
  assert_int_equal(whole(g, "{\"a\":1}}"), 0);
  assert_int_equal(whole(g, "{\"a\":tru}"), 0);
  assert_int_equal(whole(g, "{\"a\":1.}"), 0);
  assert_int_equal(whole(g, "{\"a\":\"\x01\"}"), 0);
  assert_int_equal(whole(g, "{a:1}"), 0);
  assert_int_equal(whole(g, "{\"a\":1,}"), 0);
  df_jg_free(g);
}

static void test_schema(void **st) {
  (void)st;
  const char *s =
      "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
      "\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]}},\"ok\":{"
      "\"type\":\"boolean\"},\"x\":{\"type\":[\"number\",\"null\"]},\"k\":{\"const\":7},"
      "\"in\":{\"type\":\"object\",\"properties\":{}}},\"required\":[\"name\"],"
      "\"additionalProperties\":false}";
  char err[256];
  df_jg *g = df_jg_schema(s, strlen(s), err, sizeof err);
  assert_non_null(g);
  assert_int_equal(whole(g, "{\"name\":\"Al\",\"age\":3,\"tags\":[\"a\",\"b\"],\"ok\":true,\"x\":null,\"k\":7,\"in\":{}}"), 1);
  assert_int_equal(whole(g, "{\"name\":\"Al\",\"age\":-30,\"tags\":[],\"ok\":false,\"x\":1.5e3,\"k\":7,\"in\":{}}"), 1);
  assert_int_equal(whole(g, "{\"age\":3}"), 0);                    /* order and presence */
  assert_int_equal(whole(g, "{\"name\":\"Al\",\"age\":3.5"), 0);    /* integer */
  assert_int_equal(whole(g, "{\"name\":\"Al\",\"age\":3,\"tags\":[\"c\"]"), 0); /* enum */
  assert_int_equal(whole(g, "{\"name\":\"Al\",\"age\":3,\"tags\":[],\"ok\":1"), 0);
  assert_int_equal(whole(g, "{\"name\":\"Al\",\"age\":3,\"tags\":[],\"ok\":true,\"x\":\"s\""), 0);
  assert_int_equal(whole(g, "{\"name\":\"Al\",\"age\":3,\"tags\":[],\"ok\":true,\"x\":null,\"k\":8"), 0);
  assert_int_equal(whole(g, "{\"name\":\"Al\",\"age\":3,\"tags\":[],\"ok\":true,\"x\":null,\"k\":7,\"in\":{\"z\":1}}"), 0);
  df_jg_free(g);
  /* enum values that prefix one another end at the next byte */
  const char *e = "{\"type\":\"object\",\"properties\":{\"n\":{\"enum\":[1,10,\"x\"]}}}";
  g = df_jg_schema(e, strlen(e), err, sizeof err);
  assert_non_null(g);
  assert_int_equal(whole(g, "{\"n\":1}"), 1);
  assert_int_equal(whole(g, "{\"n\":10}"), 1);
  assert_int_equal(whole(g, "{\"n\":\"x\"}"), 1);
  assert_int_equal(whole(g, "{\"n\":100}"), 0);
  df_jg_free(g);
  /* what the subset lacks is named */
  const char *bad[] = {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/x\"}}}",
                       "{\"type\":\"string\"}", "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"date\"}}}",
                       "not json"};
  for (size_t i = 0; i < 4; i++) {
    err[0] = 0;
    assert_null(df_jg_schema(bad[i], strlen(bad[i]), err, sizeof err));
    assert_true(strlen(err) > 0);
  }
  assert_non_null(strstr((df_jg_schema(bad[0], strlen(bad[0]), err, sizeof err), err), "properties.a"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_object),
      cmocka_unit_test(test_schema),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

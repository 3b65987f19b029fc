/* The structured-output matcher (serve/jsongram.h): documents that must be
 * accepted whole (every prefix too), documents that must be refused, and
 * the schema subset, against hand-written JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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

static df_jg *schema(const char *props) {
  char buf[4096], err[256];
  snprintf(buf, sizeof buf, "{\"type\":\"object\",\"properties\":{%s}}", props);
  df_jg *g = df_jg_schema(buf, strlen(buf), err, sizeof err);
  if (!g) fail_msg("%s: %s", props, err);
  return g;
}

/* One property "n" per schema; each document is {"n":VALUE}. */
static void check(const char *prop, const char *const *ok, const char *const *no) {
  df_jg *g = schema(prop);
  char doc[512];
  for (; *ok; ok++) {
    snprintf(doc, sizeof doc, "{\"n\":%s}", *ok);
    if (whole(g, doc) != 1) fail_msg("%s: %s should be accepted", prop, doc);
  }
  for (; *no; no++) {
    snprintf(doc, sizeof doc, "{\"n\":%s}", *no);
    if (whole(g, doc) == 1) fail_msg("%s: %s should be refused", prop, doc);
  }
  df_jg_free(g);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_keywords(void **st) {
  (void)st;
  check("\"n\":{\"type\":\"integer\",\"minimum\":3,\"maximum\":42}", L("3", "42", "17", "9"),
        L("2", "43", "100", "-1", "0", "420", "3.0"));
  /* zod's .int(): the safe-integer range */
  check("\"n\":{\"type\":\"integer\",\"minimum\":-9007199254740991,\"maximum\":9007199254740991}",
        L("9007199254740991", "-9007199254740991", "0"), L("9007199254740992", "-9007199254740992", "10000000000000000"));
  check("\"n\":{\"type\":\"integer\",\"exclusiveMinimum\":-2,\"exclusiveMaximum\":2}", L("-1", "0", "1"),
        L("-2", "2", "-10"));
  check("\"n\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}", L("0.5", "1", "0.001", "1.0"),
        L("0", "-0.1", "1.5", "1e0", "0.0", "10"));
  check("\"n\":{\"type\":\"number\",\"maximum\":0.3}", L("0.3", "0.29", "-5", "0"), L("0.31", "0.30001", "1"));
  check("\"n\":{\"type\":\"number\",\"minimum\":-1.5}", L("-1.5", "-1", "1000000000", "12345"), L("-1.6", "-2", "-15", "1e9")); /* bounded: no exponent */
  check("\"n\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
        L("\"ab\"", "\"abc\"", "\"\xc3\xa9\xe6\x97\xa5\"", "\"a\\n\"", "\"\\\\\\\"\""), L("\"a\"", "\"abcd\"", "\"\"", "\"\xc3\xa9\xe6\x97\xa5xy\""));
  /* past U+FFFF: one character, two UTF-16 units (zod's count) */
  check("\"n\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":2}", L("\"ab\"", "\"\xc3\xa9\xe6\x97\xa5\""),
        L("\"\xf0\x9f\x98\x80\"", "\"a\xf0\x9f\x98\x80\"", "\"a\"")); /* one character; three units */
  check("\"n\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}", L("[1]", "[1,2]"),
        L("[]", "[1,2,3]"));
  check("\"n\":{\"type\":\"array\",\"maxItems\":0}", L("[]"), L("[1]"));
  /* nullable: anyOf with null, and a type list with a string keyword */
  check("\"n\":{\"anyOf\":[{\"type\":\"string\",\"maxLength\":1},{\"type\":\"null\"}]}", L("null", "\"x\""),
        L("\"xy\"", "1"));
  check("\"n\":{\"type\":[\"string\",\"null\"],\"maxLength\":1}", L("null", "\"x\""), L("\"xy\""));
  /* OpenAPI's nullable, as zod writes it for a nullable number */
  check("\"n\":{\"type\":\"number\",\"nullable\":true,\"maximum\":2}", L("null", "1.5"), L("3", "\"x\""));
  check("\"n\":{\"type\":\"number\",\"nullable\":false}", L("1"), L("null"));
  /* local references, recursion included; allOf of one; annotations */
  char err[256];
  const char *rec = "{\"$defs\":{\"node\":{\"type\":\"object\",\"title\":\"Node\",\"properties\":{\"v\":{\"type\":"
                    "\"integer\",\"minimum\":0},\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}],"
                    "\"default\":null}},\"required\":[\"v\"]}},\"type\":\"object\",\"properties\":{\"head\":"
                    "{\"$ref\":\"#/$defs/node\"},\"c\":{\"allOf\":[{\"$ref\":\"#/definitions/c\"}],\"description\":\"d\"}},"
                    "\"definitions\":{\"c\":{\"enum\":[\"r\",\"g\"],\"type\":\"string\"}}}";
  df_jg *g = df_jg_schema(rec, strlen(rec), err, sizeof err);
  if (!g) fail_msg("%s", err);
  assert_int_equal(whole(g, "{\"head\":{\"v\":1,\"next\":{\"v\":2,\"next\":null}},\"c\":\"g\"}"), 1);
  assert_int_equal(whole(g, "{\"head\":{\"v\":1,\"next\":{\"v\":-2"), 0);
  assert_int_equal(whole(g, "{\"head\":{\"v\":1,\"next\":null},\"c\":\"b\"}"), 0);
  df_jg_free(g);
  const char *top = "{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"type\":\"object\",\"properties\":{\"x\":{\"const\":1}}}}}";
  g = df_jg_schema(top, strlen(top), err, sizeof err);
  if (!g) fail_msg("%s", err);
  assert_int_equal(whole(g, "{\"x\":1}"), 1);
  df_jg_free(g);
  /* every other constraint is refused, by name */
  static const char *const refused[][2] = {
      {"\"n\":{\"type\":\"string\",\"pattern\":\"^a\"}", "pattern"},
      {"\"n\":{\"type\":\"string\",\"format\":\"email\"}", "format"},
      {"\"n\":{\"type\":\"integer\",\"multipleOf\":2}", "multipleOf"},
      {"\"n\":{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems"},
      {"\"n\":{\"type\":\"array\",\"items\":[{\"type\":\"integer\"}]}", "tuple"},
      {"\"n\":{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"}]}", "prefixItems"},
      {"\"n\":{\"oneOf\":[{\"type\":\"integer\"}]}", "oneOf"},
      {"\"n\":{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":1}]}", "allOf"},
      {"\"n\":{\"type\":\"object\",\"minProperties\":1}", "minProperties"},
      {"\"n\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "additionalProperties"},
      {"\"n\":{\"$ref\":\"http://example.com/s.json\"}", "$ref"},
      {"\"n\":{\"$ref\":\"#/$defs/missing\"}", "missing"},
      {"\"n\":{\"not\":{\"type\":\"integer\"}}", "not"},
      {"\"n\":{\"maxLength\":3}", "maxLength"},
      {"\"n\":{\"type\":\"integer\",\"maxLength\":3}", "maxLength"},
      {"\"n\":{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "minimum"},
      {"\"n\":{\"type\":\"object\",\"properties\":{},\"required\":[\"z\"]}", "required"},
      {"\"n\":{\"anyOf\":[{\"type\":\"integer\"}],\"minimum\":1}", "minimum"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char buf[1024];
    snprintf(buf, sizeof buf, "{\"type\":\"object\",\"properties\":{%s}}", refused[i][0]);
    err[0] = 0;
    df_jg *r = df_jg_schema(buf, strlen(buf), err, sizeof err);
    if (r) fail_msg("%s was accepted", refused[i][0]);
    if (!strstr(err, refused[i][1])) fail_msg("%s: the error '%s' does not name %s", refused[i][0], err, refused[i][1]);
    if (!strstr(err, "properties.n")) fail_msg("%s: the error '%s' has no path", refused[i][0], err);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_object),
      cmocka_unit_test(test_schema),
      cmocka_unit_test(test_keywords),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

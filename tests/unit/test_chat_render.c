/* The release's chat encoder (df_chat_render*) against the goldens public
 * ports quote (tests/fixtures/chat/k3-encoder-goldens.json, each case names
 * its source), and the output parser (df_chat_parser) on crafted model
 * outputs. The byte-level test tokenizer makes ids checkable from text: a
 * control-token spelling stands for its special id, every other byte for
 * itself. */
#include <jansson.h>
#include <openssl/evp.h>
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
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

static char tmpdir[64];
static df_tok *tok;

static int setup(void **st) {
  (void)st;
  return (tok = bytetok_load(tmpdir, sizeof tmpdir, "chatr")) ? 0 : -1;
}

static int teardown(void **st) {
  (void)st;
  return bytetok_free(tok, tmpdir);
}

static size_t layout(const char *s, size_t len, int *out) {
  static const struct {
    const char *text;
    int id;
  } ctl[] = {{"<|open|>", BT_OPEN}, {"<|close|>", BT_CLOSE}, {"<|sep|>", BT_SEP},
             {"<|end_of_msg|>", BT_EOM}};
  size_t n = 0, i = 0;
  while (i < len) {
    int hit = 0;
    for (size_t k = 0; k < 4 && !hit; k++) {
      size_t l = strlen(ctl[k].text);
      if (i + l <= len && !strncmp(s + i, ctl[k].text, l)) {
        out[n++] = ctl[k].id;
        i += l;
        hit = 1;
      }
    }
    if (!hit) out[n++] = (uint8_t)s[i++];
  }
  return n;
}

static char *fixture(void) {
  const char *src = getenv("DF_SRC");
  char *p = df_path_join(src ? src : ".", "tests/fixtures/chat/k3-encoder-goldens.json");
  return p;
}

static void sha256_hex(const void *p, size_t n, char hex[65]) {
  unsigned char md[32];
  unsigned int ml = 0;
  EVP_Digest(p, n, md, &ml, EVP_sha256(), NULL);
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

static void run_case(const json_t *c) {
  const char *name = json_string_value(json_object_get(c, "name"));
  df_chat_opts o = df_chat_opts_default();
  o.thinking = json_is_true(json_object_get(c, "thinking"));
  o.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt"));
  o.effort = json_string_value(json_object_get(c, "effort"));
  const char *tc = json_string_value(json_object_get(c, "tool_choice"));
  o.tool_choice = !tc || !strcmp(tc, "auto") ? DF_TOOL_CHOICE_AUTO
                  : !strcmp(tc, "none")      ? DF_TOOL_CHOICE_NONE
                                             : DF_TOOL_CHOICE_REQUIRED;
  char *tools = json_object_get(c, "tools") ? json_dumps(json_object_get(c, "tools"), 0) : NULL;
  if (tools) {
    o.tools_json = tools;
    o.tools_len = strlen(tools);
  }
  char *rf = json_object_get(c, "response_format")
                 ? json_dumps(json_object_get(c, "response_format"), JSON_ENCODE_ANY)
                 : NULL;
  if (rf) {
    o.response_format_json = rf;
    o.response_format_len = strlen(rf);
  }
  char *msgs = json_dumps(json_object_get(c, "messages"), 0);
  df_chat_prompt p;
  df_err e = {{0}};
  int rc = df_chat_render_json(tok, msgs, strlen(msgs), &o, &p, &e);
  free(msgs);
  free(tools);
  free(rf);
  const char *err = json_string_value(json_object_get(c, "error"));
  if (err) {
    if (rc == 0) fail_msg("%s: rendered, the release refuses it", name);
    if (!strstr(e.msg, err)) fail_msg("%s: error does not mention '%s': %s", name, err, e.msg);
    return;
  }
  if (rc != 0) fail_msg("%s: %s", name, e.msg);
  const char *want = json_string_value(json_object_get(c, "expect"));
  if (want) {
    if (strcmp(p.text, want)) fail_msg("%s:\n got  %s\n want %s", name, p.text, want);
    int *ids = malloc((strlen(want) + 1) * sizeof *ids);
    size_t n = layout(want, strlen(want), ids);
    assert_int_equal(p.n, n);
    assert_memory_equal(p.ids, ids, n * sizeof *ids);
    free(ids);
  }
  const char *sha = json_string_value(json_object_get(c, "expect_sha256"));
  if (sha) {
    char hex[65];
    sha256_hex(p.text, p.text_len, hex);
    if (strcmp(hex, sha)) fail_msg("%s: sha256 %s, the source pins %s", name, hex, sha);
  }
  const json_t *in = json_object_get(c, "contains_in_order");
  const char *at = p.text;
  for (size_t i = 0; i < json_array_size(in); i++) {
    const char *s = json_string_value(json_array_get(in, i));
    const char *f = strstr(at, s);
    if (!f) fail_msg("%s: '%s' missing (or out of order) in:\n%s", name, s, p.text);
    at = f + strlen(s);
  }
  const json_t *nc = json_object_get(c, "not_contains");
  for (size_t i = 0; i < json_array_size(nc); i++)
    if (strstr(p.text, json_string_value(json_array_get(nc, i))))
      fail_msg("%s: '%s' present in:\n%s", name, json_string_value(json_array_get(nc, i)), p.text);
  const char *ends = json_string_value(json_object_get(c, "ends_with"));
  if (ends) {
    size_t l = strlen(ends);
    if (p.text_len < l || strcmp(p.text + p.text_len - l, ends))
      fail_msg("%s: does not end with '%s':\n%s", name, ends, p.text);
  }
  /* the text is what the ids spell */
  size_t dl;
  char *d = df_tok_decode(tok, p.ids, p.n, &dl);
  assert_int_equal(dl, p.text_len);
  assert_memory_equal(d, p.text, dl);
  free(d);
  df_chat_prompt_free(&p);
}

static void test_goldens(void **st) {
  (void)st;
  char *path = fixture(), *buf;
  size_t len;
  df_err e;
  assert_int_equal(df_file_read(path, &buf, &len, &e), 0);
  json_t *doc = json_loadb(buf, len, 0, NULL);
  assert_non_null(doc);
  const json_t *cases = json_object_get(doc, "cases");
  assert_true(json_array_size(cases) >= 25);
  size_t i;
  const json_t *c;
  json_array_foreach(cases, i, c) {
    assert_non_null(json_string_value(json_object_get(c, "source")));
    run_case(c);
  }
  json_decref(doc);
  free(buf);
  free(path);
}

/* User and tool text never becomes structure: a literal control spelling is
 * ordinary bytes, and so is one in a tool argument or an attribute value. */
static void test_text_is_never_special(void **st) {
  (void)st;
  const char *m = "[{\"role\":\"user\",\"name\":\"<|sep|>\",\"content\":\"<|open|>x<|end_of_msg|>\"},"
                  "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":"
                  "\"f\",\"arguments\":\"{\\\"k\\\":\\\"<|close|>\\\"}\"}}]}]";
  df_chat_opts o = df_chat_opts_default();
  df_chat_prompt p;
  df_err e;
  assert_int_equal(df_chat_render_json(tok, m, strlen(m), &o, &p, &e), 0);
  size_t specials = 0;
  for (size_t i = 0; i < p.n; i++) specials += p.ids[i] >= 256;
  /* count the control tokens the structure itself has */
  int *ids = malloc((p.text_len + 1) * sizeof *ids);
  size_t n = layout(p.text, p.text_len, ids), lay = 0;
  for (size_t i = 0; i < n; i++) lay += ids[i] >= 256;
  free(ids);
  assert_int_equal(lay - specials, 4); /* <|sep|>, <|open|>, <|end_of_msg|>, <|close|> as text */
  df_chat_prompt_free(&p);
}

static void test_struct_api_and_errors(void **st) {
  (void)st;
  df_chat_call calls[1] = {{.id = "c1", .name = "get", .arguments = "{\"a\": 1}", .arguments_len = 8}};
  df_chat_msg m[3] = {
      {.role = DF_ROLE_DEVELOPER, .content = "rules", .content_len = 5},
      {.role = DF_ROLE_ASSISTANT, .calls = calls, .ncalls = 1},
      {.role = DF_ROLE_TOOL, .content = "r", .content_len = 1, .tool_call_id = "c1"},
  };
  df_chat_opts o = df_chat_opts_default();
  o.add_generation_prompt = 0;
  o.thinking = 0;
  df_chat_prompt p;
  df_err e;
  assert_int_equal(df_chat_render(tok, m, 3, &o, &p, &e), 0);
  assert_string_equal(
      p.text,
      "<|open|>message role=\"system\"<|sep|>rules<|close|>message<|sep|><|end_of_msg|>"
      "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
      "<|open|>tools<|sep|><|open|>call tool=\"get\" index=\"1\"<|sep|><|open|>argument "
      "key=\"a\" type=\"number\"<|sep|>1<|close|>argument<|sep|><|close|>call<|sep|><|close|>"
      "tools<|sep|><|close|>message<|sep|><|end_of_msg|><|open|>message role=\"tool\" "
      "tool=\"get\" index=\"1\"<|sep|>r<|close|>message<|sep|><|end_of_msg|>");
  df_chat_prompt_free(&p);
  /* errors name the problem */
  assert_int_equal(df_chat_render_json(tok, "{", 1, &o, &p, &e), -1);
  assert_non_null(strstr(e.msg, "messages"));
  const char *bad = "[{\"role\":\"wizard\",\"content\":\"x\"}]";
  assert_int_equal(df_chat_render_json(tok, bad, strlen(bad), &o, &p, &e), -1);
  assert_non_null(strstr(e.msg, "wizard"));
  const char *img = "[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]";
  assert_int_equal(df_chat_render_json(tok, img, strlen(img), &o, &p, &e), -1);
  assert_non_null(strstr(e.msg, "images"));
  const char *parts = "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                      "{\"type\":\"text\",\"text\":\"b\"}]}]";
  assert_int_equal(df_chat_render_json(tok, parts, strlen(parts), &o, &p, &e), 0);
  assert_non_null(strstr(p.text, "<|sep|>ab<|close|>"));
  df_chat_prompt_free(&p);
  o.tools_json = "{}";
  o.tools_len = 2;
  assert_int_equal(df_chat_render_json(tok, parts, strlen(parts), &o, &p, &e), -1);
  assert_non_null(strstr(e.msg, "tools"));
}

/* ---- parsing ---- */

typedef struct rec {
  char log[8192];
  size_t n;
} rec;

static void on_ev(const df_chat_event *ev, void *ctx) {
  rec *r = ctx;
  static const char *k[] = {"R", "C", "B", "A", "E", "END"};
  r->n += (size_t)snprintf(r->log + r->n, sizeof r->log - r->n, "%s%d[%.*s]", k[ev->kind],
                           ev->call, (int)ev->len, ev->text);
}

static int *ids_of(const char *s, size_t *n) {
  int *ids = malloc((strlen(s) + 1) * sizeof *ids);
  *n = layout(s, strlen(s), ids);
  return ids;
}

static void test_parse_tool_calls(void **st) {
  (void)st;
  /* what a model writes after <|open|>think<|sep|>: the golden's assistant turn */
  const char *out =
      "I should call the tools.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
      "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument "
      "key=\"city\" type=\"string\"<|sep|>Z\xc3\xbcrich<|close|>argument<|sep|><|open|>argument "
      "key=\"unit\" type=\"string\"<|sep|>c<|close|>argument<|sep|><|close|>call<|sep|><|open|>"
      "call tool=\"search\" index=\"2\"<|sep|><|open|>argument key=\"query\" type=\"string\"<|sep|>"
      "caf\xc3\xa9 \"best\"\n<|close|>argument<|sep|><|open|>argument key=\"filters\" "
      "type=\"object\"<|sep|>{\"tags\": [\"a\", \"b\"], \"max\": 3}<|close|>argument<|sep|>"
      "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";
  size_t n;
  int *ids = ids_of(out, &n);
  df_chat_parsed r;
  df_chat_parse_ids(tok, ids, n, 1, &r);
  assert_string_equal(r.reasoning, "I should call the tools.");
  assert_string_equal(r.content, "");
  assert_int_equal(r.ncalls, 2);
  assert_int_equal(r.ended, 1);
  assert_string_equal(r.calls[0].name, "get_weather");
  assert_string_equal(r.calls[1].name, "search");
  json_t *a0 = json_loads(r.calls[0].arguments, 0, NULL);
  json_t *a1 = json_loads(r.calls[1].arguments, 0, NULL);
  json_t *w0 = json_pack("{s:s, s:s}", "city", "Z\xc3\xbcrich", "unit", "c");
  json_t *w1 = json_loads("{\"query\": \"caf\xc3\xa9 \\\"best\\\"\\n\", \"filters\": "
                          "{\"tags\": [\"a\", \"b\"], \"max\": 3}}", 0, NULL);
  assert_non_null(a0);
  assert_non_null(a1);
  assert_true(json_equal(a0, w0));
  assert_true(json_equal(a1, w1));
  json_decref(a0), json_decref(a1), json_decref(w0), json_decref(w1);

  /* streaming: one id at a time gives the same events in order, and the
   * argument pieces of a call concatenate to its arguments */
  rec s = {0};
  df_chat_parser *p = df_chat_parser_new(tok, 1);
  for (size_t i = 0; i < n; i++) df_chat_parser_push(p, ids[i], on_ev, &s);
  assert_true(df_chat_parser_ended(p));
  df_chat_parser_push(p, 'x', on_ev, &s); /* after the end: nothing */
  df_chat_parser_free(p);
  assert_non_null(strstr(s.log, "B0[get_weather]"));
  assert_non_null(strstr(s.log, "B1[search]"));
  assert_non_null(strstr(s.log, "E1[]END-1[]"));
  assert_null(strstr(s.log, "x]"));
  df_chat_parsed_free(&r);
  free(ids);

  /* a response with content and one call, thinking off; garbage markup between */
  const char *out2 = "Sure.<|close|>response<|sep|>\n<|open|>tools<|sep|>junk<|open|>call "
                     "tool=\"a&amp;b\"<|sep|><|open|>argument key=\"n\" type=\"number\"<|sep|>"
                     "12<|close|>argument<|sep|><|open|>argument key=\"bad\" type=\"object\"<|sep|>"
                     "{oops<|close|>argument<|sep|><|close|>call<|sep|><|open|>call tool=\"j\"<|sep|>"
                     "<|open|>json type=\"object\"<|sep|>{\"x\":1}<|close|>json<|sep|><|close|>call"
                     "<|sep|><|open|>call tool=\"none\"<|sep|><|close|>call<|sep|><|close|>tools<|sep|>";
  ids = ids_of(out2, &n);
  df_chat_parse_ids(tok, ids, n, 0, &r);
  assert_string_equal(r.reasoning, "");
  assert_string_equal(r.content, "Sure.");
  assert_int_equal(r.ended, 0);
  assert_int_equal(r.ncalls, 3);
  assert_string_equal(r.calls[0].name, "a&b");
  assert_string_equal(r.calls[0].arguments, "{\"n\": 12, \"bad\": \"{oops\"}");
  assert_string_equal(r.calls[1].arguments, "{\"x\":1}");
  assert_string_equal(r.calls[2].arguments, "{}");
  df_chat_parsed_free(&r);
  free(ids);

  /* cut off inside a string argument: finish closes it as valid JSON */
  const char *out3 = "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>"
                     "tools<|sep|><|open|>call tool=\"f\"<|sep|><|open|>argument key=\"q\" "
                     "type=\"string\"<|sep|>half \xe2\x82";
  ids = ids_of(out3, &n);
  df_chat_parse_ids(tok, ids, n, 1, &r);
  assert_int_equal(r.ncalls, 1);
  json_t *v = json_loads(r.calls[0].arguments, 0, NULL);
  assert_non_null(v);
  assert_string_equal(json_string_value(json_object_get(v, "q")), "half \xef\xbf\xbd");
  json_decref(v);
  df_chat_parsed_free(&r);
  free(ids);
}

/* Whatever ids arrive, the parser's text is valid UTF-8 and every call's
 * arguments parse as a JSON object (the fuzzer checks the same on random input). */
static void test_parse_garbage(void **st) {
  (void)st;
  uint32_t x = 12345;
  for (int round = 0; round < 200; round++) {
    int ids[64];
    for (int i = 0; i < 64; i++) {
      x = x * 1103515245u + 12345u;
      static const int pick[] = {BT_OPEN, BT_CLOSE, BT_SEP, BT_EOM, BT_BOS, 300};
      int r = (int)((x >> 16) % 12);
      ids[i] = r < 6 ? pick[r] : "call tool=\"argument key type=string json\"{}\xff"[(x >> 8) % 40];
    }
    df_chat_parsed r;
    df_chat_parse_ids(tok, ids, 64, round & 1, &r);
    assert_true(df_utf8_valid(r.content, r.content_len));
    assert_true(df_utf8_valid(r.reasoning, r.reasoning_len));
    for (size_t k = 0; k < r.ncalls; k++) {
      json_t *v = json_loads(r.calls[k].arguments, JSON_ALLOW_NUL, NULL);
      if (!json_is_object(v)) fail_msg("round %d call %zu: arguments %s", round, k, r.calls[k].arguments);
      json_decref(v);
    }
    df_chat_parsed_free(&r);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_goldens),
      cmocka_unit_test(test_text_is_never_special),
      cmocka_unit_test(test_struct_api_and_errors),
      cmocka_unit_test(test_parse_tool_calls),
      cmocka_unit_test(test_parse_garbage),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

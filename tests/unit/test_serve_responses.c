/* The Responses API layer (serve/responses.h): requests become the Chat
 * Completions bodies they mean, previous_response_id splices the kept
 * history in, and chat SSE frames become Responses events whatever the
 * pieces they arrive in. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/util.h"
#include "serve/responses.h"

static char *lookup(void *ud, const char *id) {
  (void)ud;
  if (strcmp(id, "resp_old")) return NULL;
  return df_xstrdup("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"}]");
}

static json_t *parse_ok(const char *body, df_resp_req *q) {
  df_serve_err e;
  if (df_serve_responses_parse(body, strlen(body), lookup, NULL, q, &e))
    fail_msg("%s: %d %s (%s)", body, e.status, e.msg, e.param);
  json_t *c = json_loads(q->chat, 0, NULL);
  assert_non_null(c);
  return c;
}

static void test_translate(void **st) {
  (void)st;
  df_resp_req q;
  json_t *c = parse_ok("{\"model\":\"m\",\"input\":\"hi\",\"instructions\":\"be brief\",\"max_output_tokens\":5,"
                       "\"previous_response_id\":\"resp_old\",\"reasoning\":{\"effort\":\"low\"}}",
                       &q);
  char *msgs = json_dumps(json_object_get(c, "messages"), JSON_COMPACT);
  /* instructions first, then the kept history, then the new input */
  assert_string_equal(msgs, "[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"a\"},"
                            "{\"role\":\"assistant\",\"content\":\"b\"},{\"role\":\"user\",\"content\":\"hi\"}]");
  free(msgs);
  assert_int_equal(json_integer_value(json_object_get(c, "max_completion_tokens")), 5);
  assert_string_equal(json_string_value(json_object_get(c, "reasoning_effort")), "low");
  /* the kept history leaves the instructions out */
  assert_int_equal(json_array_size(q.history), 3);
  json_decref(c);
  df_resp_req_free(&q);

  c = parse_ok("{\"model\":\"m\",\"stream\":true,\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":"
               "{\"type\":\"object\"},\"strict\":true}],\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},"
               "\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"w\"}]},"
               "{\"type\":\"reasoning\",\"content\":[{\"type\":\"reasoning_text\",\"text\":\"think\"}]},"
               "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
               "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"ok\"}],"
               "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"s\",\"schema\":{\"type\":\"object\"}}}}",
               &q);
  assert_true(q.stream);
  msgs = json_dumps(json_object_get(c, "messages"), JSON_COMPACT);
  assert_string_equal(msgs, "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"w\"}]},{\"role\":\"assistant\","
                            "\"content\":null,\"reasoning_content\":\"think\",\"tool_calls\":[{\"id\":\"c1\",\"type\":"
                            "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\","
                            "\"tool_call_id\":\"c1\",\"content\":\"ok\"}]");
  free(msgs);
  char *tools = json_dumps(json_object_get(c, "tools"), JSON_COMPACT);
  assert_string_equal(tools, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]");
  free(tools);
  assert_true(json_is_true(json_object_get(json_object_get(c, "stream_options"), "include_usage")));
  assert_string_equal(json_string_value(json_object_get(json_object_get(c, "response_format"), "type")), "json_schema");
  json_decref(c);
  df_resp_req_free(&q);

  static const char *const bad[][2] = {
      {"{\"model\":\"m\"}", "input"},
      {"{\"model\":\"m\",\"input\":\"x\",\"previous_response_id\":\"resp_gone\"}", "previous_response_id"},
      {"{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"file_search\"}]}", "tools[0].type"},
      {"{\"model\":\"m\",\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "input[0].type"},
      {"{\"model\":\"m\",\"input\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "input[0].role"},
      {"{\"model\":\"m\",\"input\":\"x\",\"reasoning\":{\"summary\":\"auto\"}}", "reasoning.summary"},
      {"{\"model\":\"m\",\"input\":\"x\",\"background\":true}", "background"},
      {"{\"model\":\"m\",\"input\":\"x\",\"truncation\":\"auto\"}", "truncation"},
      {"[1]", ""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    df_serve_err e;
    assert_int_equal(df_serve_responses_parse(bad[i][0], strlen(bad[i][0]), lookup, NULL, &q, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, bad[i][1]);
  }
}

/* The events of a converted stream, in order: "type|text" lines. */
static char *events(const char *chat, size_t piece) {
  df_resp_req q;
  json_decref(parse_ok("{\"model\":\"m\",\"input\":\"hi\",\"stream\":true}", &q));
  df_resp_stream *s = df_resp_stream_new("resp_x", 1, "m", &q);
  df_sbuf out = {0};
  size_t n = strlen(chat);
  for (size_t i = 0; i < n; i += piece) df_resp_stream_feed(s, chat + i, n - i < piece ? n - i : piece, &out);
  df_sbuf_add(&out, "", 0);
  df_resp_result res;
  df_serve_call calls[DF_RESP_MAX_CALLS];
  assert_true(df_resp_stream_result(s, &res, calls));
  assert_int_equal(res.ncalls, 1);
  assert_memory_equal(res.calls[0].args, "{\"a\":1}", 7);
  df_sbuf types = {0};
  long seq = -1;
  for (char *p = out.p; (p = strstr(p, "data: "));) {
    char *e = strstr(p, "\n\n");
    json_t *o = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
    assert_non_null(o);
    assert_true(json_integer_value(json_object_get(o, "sequence_number")) == seq + 1);
    seq++;
    df_sbuf_addstr(&types, json_string_value(json_object_get(o, "type")));
    const char *d = json_string_value(json_object_get(o, "delta"));
    if (d) df_sbuf_addstr(&types, "="), df_sbuf_addstr(&types, d);
    df_sbuf_addstr(&types, "\n");
    json_decref(o);
    p = e;
  }
  df_sbuf_add(&types, "", 0);
  df_sbuf_free(&out);
  df_resp_stream_free(s);
  df_resp_req_free(&q);
  return types.p;
}

static void test_stream(void **st) {
  (void)st;
  const char *chat =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n"
      ":\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\","
      "\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":1}\"}}]}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\n"
      "data: [DONE]\n\n";
  const char *want = "response.created\nresponse.in_progress\n"
                     "response.output_item.added\nresponse.content_part.added\nresponse.reasoning_text.delta=hm\n"
                     "response.reasoning_text.done\nresponse.content_part.done\nresponse.output_item.done\n"
                     "response.output_item.added\nresponse.content_part.added\nresponse.output_text.delta=Hi\n"
                     "response.output_text.done\nresponse.content_part.done\nresponse.output_item.done\n"
                     "response.output_item.added\nresponse.function_call_arguments.delta={\"a\":1}\n"
                     "response.function_call_arguments.done\nresponse.output_item.done\nresponse.completed\n";
  for (size_t piece = 1; piece < 64; piece += 7) {
    char *got = events(chat, piece);
    assert_string_equal(got, want);
    free(got);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_translate),
      cmocka_unit_test(test_stream),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Request validation for `deltafin serve`: every refusal names its field
 * (OpenAI's `param`), everything accepted is carried into the request. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "serve/request.h"

static const df_serve_limits lim = {.model_id = "k3-tiny", .vocab = 1000};

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define CHAT(extra) "{\"model\":\"k3-tiny\"," MSG extra "}"
#define COMPL(extra) "{\"model\":\"k3-tiny\",\"prompt\":\"Once\"" extra "}"

typedef struct bad_case {
  df_serve_kind kind;
  const char *body;
  const char *param; /* NULL: param must be null */
  const char *code;  /* NULL: not checked */
} bad_case;

static const bad_case bad[] = {
    /* body shape */
    {DF_SERVE_CHAT, "", NULL, NULL},
    {DF_SERVE_CHAT, "{", NULL, NULL},
    {DF_SERVE_CHAT, "[1,2]", NULL, NULL},
    {DF_SERVE_CHAT, "\"x\"", NULL, NULL},
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"model\":\"k3-tiny\"," MSG "}", NULL, NULL},
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
     NULL, NULL},
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}",
     NULL, NULL},
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}",
     NULL, NULL},
    /* required fields */
    {DF_SERVE_CHAT, "{" MSG "}", "model", NULL},
    {DF_SERVE_CHAT, "{\"model\":null," MSG "}", "model", NULL},
    {DF_SERVE_CHAT, "{\"model\":7," MSG "}", "model", NULL},
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\"}", "messages", NULL},
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"messages\":[]}", "messages", NULL},
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"messages\":\"hi\"}", "messages", NULL},
    {DF_SERVE_COMPLETION, "{\"model\":\"k3-tiny\"}", "prompt", NULL},
    {DF_SERVE_COMPLETION, "{\"model\":\"k3-tiny\",\"prompt\":\"\"}", "prompt", NULL},
    {DF_SERVE_COMPLETION, "{\"model\":\"k3-tiny\",\"prompt\":[\"a\",\"b\"]}", "prompt", NULL},
    {DF_SERVE_COMPLETION, "{\"model\":\"k3-tiny\",\"prompt\":[1,1000]}", "prompt", NULL},
    {DF_SERVE_COMPLETION, "{\"model\":\"k3-tiny\",\"prompt\":[1,-1]}", "prompt", NULL},
    {DF_SERVE_COMPLETION, "{\"model\":\"k3-tiny\",\"prompt\":[1,\"a\"]}", "prompt", NULL},
    {DF_SERVE_COMPLETION, "{\"model\":\"k3-tiny\",\"prompt\":{}}", "prompt", NULL},
    /* unknown fields, including ones that belong to the other endpoint */
    {DF_SERVE_CHAT, CHAT(",\"frobnicate\":1"), "frobnicate", NULL},
    {DF_SERVE_CHAT, CHAT(",\"frobnicate\":null"), "frobnicate", NULL},
    {DF_SERVE_CHAT, CHAT(",\"prompt\":\"x\""), "prompt", NULL},
    {DF_SERVE_CHAT, CHAT(",\"echo\":false"), "echo", NULL},
    {DF_SERVE_COMPLETION, COMPL(",\"messages\":[]"), "messages", NULL},
    {DF_SERVE_COMPLETION, COMPL(",\"reasoning_effort\":\"low\""), "reasoning_effort", NULL},
    {DF_SERVE_COMPLETION, COMPL(",\"max_completion_tokens\":5"), "max_completion_tokens", NULL},
    /* wrong types and ranges */
    {DF_SERVE_CHAT, CHAT(",\"max_tokens\":0"), "max_tokens", NULL},
    {DF_SERVE_CHAT, CHAT(",\"max_tokens\":-3"), "max_tokens", NULL},
    {DF_SERVE_CHAT, CHAT(",\"max_tokens\":2.5"), "max_tokens", NULL},
    {DF_SERVE_CHAT, CHAT(",\"max_tokens\":\"10\""), "max_tokens", NULL},
    {DF_SERVE_CHAT, CHAT(",\"max_tokens\":99999999999"), "max_tokens", NULL},
    {DF_SERVE_CHAT, CHAT(",\"max_completion_tokens\":0"), "max_completion_tokens", NULL},
    {DF_SERVE_CHAT, CHAT(",\"max_tokens\":5,\"max_completion_tokens\":6"), "max_completion_tokens",
     NULL},
    {DF_SERVE_CHAT, CHAT(",\"stream\":\"yes\""), "stream", NULL},
    {DF_SERVE_CHAT, CHAT(",\"stream\":1"), "stream", NULL},
    {DF_SERVE_CHAT, CHAT(",\"stream_options\":{\"include_usage\":true}"), "stream_options", NULL},
    {DF_SERVE_CHAT, CHAT(",\"stream\":true,\"stream_options\":[]"), "stream_options", NULL},
    {DF_SERVE_CHAT, CHAT(",\"stream\":true,\"stream_options\":{\"include_usage\":1}"),
     "stream_options.include_usage", NULL},
    {DF_SERVE_CHAT, CHAT(",\"stream\":true,\"stream_options\":{\"x\":true}"), "stream_options.x",
     NULL},
    {DF_SERVE_CHAT, CHAT(",\"temperature\":2.5"), "temperature", NULL},
    {DF_SERVE_CHAT, CHAT(",\"temperature\":-0.1"), "temperature", NULL},
    {DF_SERVE_CHAT, CHAT(",\"temperature\":\"hot\""), "temperature", NULL},
    {DF_SERVE_CHAT, CHAT(",\"top_p\":1.5"), "top_p", NULL},
    {DF_SERVE_CHAT, CHAT(",\"top_p\":-1"), "top_p", NULL},
    {DF_SERVE_CHAT, CHAT(",\"seed\":1.5"), "seed", NULL},
    {DF_SERVE_CHAT, CHAT(",\"seed\":\"1\""), "seed", NULL},
    {DF_SERVE_CHAT, CHAT(",\"reasoning_effort\":\"extreme\""), "reasoning_effort", NULL},
    {DF_SERVE_CHAT, CHAT(",\"reasoning_effort\":3"), "reasoning_effort", NULL},
    {DF_SERVE_CHAT, CHAT(",\"user\":5"), "user", NULL},
    {DF_SERVE_CHAT, CHAT(",\"metadata\":\"x\""), "metadata", NULL},
    {DF_SERVE_CHAT, CHAT(",\"metadata\":{\"k\":1}"), "metadata.k", NULL},
    /* stop */
    {DF_SERVE_CHAT, CHAT(",\"stop\":\"\""), "stop", NULL},
    {DF_SERVE_CHAT, CHAT(",\"stop\":5"), "stop", NULL},
    {DF_SERVE_CHAT, CHAT(",\"stop\":[\"a\",5]"), "stop", NULL},
    {DF_SERVE_CHAT,
     CHAT(",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\","
          "\"n\",\"o\",\"p\",\"q\"]"),
     "stop", NULL},
    /* features the engine cannot honour */
    {DF_SERVE_CHAT, CHAT(",\"n\":17"), "n", NULL},
    {DF_SERVE_CHAT, CHAT(",\"n\":0"), "n", NULL},
    {DF_SERVE_COMPLETION, COMPL(",\"n\":1.5"), "n", NULL},
    {DF_SERVE_COMPLETION, COMPL(",\"best_of\":2"), "best_of", NULL},
    {DF_SERVE_CHAT, CHAT(",\"logprobs\":1"), "logprobs", NULL},
    {DF_SERVE_CHAT, CHAT(",\"top_logprobs\":2"), "top_logprobs", NULL}, /* without logprobs */
    {DF_SERVE_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":21"), "top_logprobs", NULL},
    {DF_SERVE_COMPLETION, COMPL(",\"logprobs\":21"), "logprobs", NULL},
    {DF_SERVE_COMPLETION, COMPL(",\"logprobs\":true"), "logprobs", NULL},
    {DF_SERVE_COMPLETION, COMPL(",\"top_logprobs\":2"), "top_logprobs", NULL},
    {DF_SERVE_COMPLETION, COMPL(",\"echo\":true"), "echo", NULL},
    {DF_SERVE_COMPLETION, COMPL(",\"suffix\":\"end\""), "suffix", NULL},
    {DF_SERVE_CHAT, CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"parameters\":{}}}]"),
     "tools[0]", NULL},
    {DF_SERVE_CHAT, CHAT(",\"tools\":[{\"type\":\"retrieval\"}]"), "tools[0]", NULL},
    {DF_SERVE_CHAT, CHAT(",\"tools\":{}"), "tools", NULL},
    {DF_SERVE_CHAT, CHAT(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"),
     "tool_choice", NULL},
    {DF_SERVE_CHAT,
     CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"stop\":[\"x\"]"),
     "stop", NULL},
    {DF_SERVE_CHAT, CHAT(",\"functions\":[{\"name\":\"f\"}]"), "functions", NULL},
    {DF_SERVE_CHAT, CHAT(",\"response_format\":{\"type\":\"yaml\"}"), "response_format.type", NULL},
    {DF_SERVE_CHAT,
     CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":"
          "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/x\"}}}}}"),
     "response_format.json_schema.schema", NULL},
    {DF_SERVE_CHAT, CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}"),
     "response_format.json_schema.schema", NULL},
    {DF_SERVE_CHAT, CHAT(",\"response_format\":{\"type\":\"json_object\"},\"stop\":[\"x\"]"),
     "response_format", NULL},
    {DF_SERVE_CHAT, CHAT(",\"presence_penalty\":2.5"), "presence_penalty", NULL},
    {DF_SERVE_CHAT, CHAT(",\"frequency_penalty\":-3"), "frequency_penalty", NULL},
    {DF_SERVE_CHAT, CHAT(",\"logit_bias\":{\"x\":10}"), "logit_bias.x", NULL},
    {DF_SERVE_CHAT, CHAT(",\"logit_bias\":{\"5\":101}"), "logit_bias.5", NULL},
    {DF_SERVE_CHAT, CHAT(",\"logit_bias\":{\"100000\":1}"), "logit_bias.100000", NULL},
    {DF_SERVE_CHAT, CHAT(",\"logit_bias\":[]"), "logit_bias", NULL},
    {DF_SERVE_CHAT, CHAT(",\"top_k\":1.5"), "top_k", NULL},
    {DF_SERVE_CHAT, CHAT(",\"min_p\":1.5"), "min_p", NULL},
    {DF_SERVE_CHAT, CHAT(",\"repeat_penalty\":-1"), "repeat_penalty", NULL},
    {DF_SERVE_CHAT, CHAT(",\"modalities\":[\"text\",\"audio\"]"), "modalities", NULL},
    {DF_SERVE_CHAT, CHAT(",\"audio\":{\"voice\":\"alloy\",\"format\":\"wav\"}"), "audio", NULL},
    {DF_SERVE_CHAT, CHAT(",\"store\":true"), "store", NULL},
    {DF_SERVE_CHAT, CHAT(",\"prediction\":{\"type\":\"content\",\"content\":\"x\"}"), "prediction",
     NULL},
    {DF_SERVE_CHAT, CHAT(",\"stream\":true,\"stream_options\":{\"include_obfuscation\":true}"),
     "stream_options.include_obfuscation", NULL},
    /* messages */
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"messages\":[\"hi\"]}", "messages[0]", NULL},
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"messages\":[{\"content\":\"hi\"}]}",
     "messages[0].role", NULL},
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"wizard\",\"content\":\"hi\"}]}",
     "messages[0].role", NULL},
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":5,\"content\":\"hi\"}]}",
     "messages[0].role", NULL},
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\"}]}",
     "messages[0].content", NULL},
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":null}]}",
     "messages[0].content", NULL},
    {DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":5}]}",
     "messages[0].content", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
     "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"},"
     "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,AAAA\"}}]}]}",
     "messages[1].content[1].type", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":"
     "[{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"AAAA\",\"format\":\"wav\"}}]}]}",
     "messages[0].content[0].type", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}",
     "messages[0].content[0].type", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
     "messages[0].content[0].text", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":"
     "[{\"type\":\"text\",\"text\":7}]}]}",
     "messages[0].content[0].text", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":"
     "[{\"type\":\"text\",\"text\":\"a\",\"cache\":1}]}]}",
     "messages[0].content[0].cache", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":[5]}]}",
     "messages[0].content[0]", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"name\":5}]}",
     "messages[0].name", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"parsed\":{}}]}",
     "messages[0].parsed", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"assistant\",\"content\":\"a\","
     "\"annotations\":5}]}",
     "messages[0].annotations", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"colour\":1}]}",
     "messages[0].colour", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"tool\",\"content\":\"42\"}]}",
     "messages[0].tool_call_id", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"a\","
     "\"tool_call_id\":\"c1\"}]}",
     "messages[0].tool_call_id", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"assistant\",\"content\":null,"
     "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{"
     "\"arguments\":\"{}\"}}]}]}",
     "messages[0].tool_calls[0].function", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"a\","
     "\"reasoning_content\":\"x\"}]}",
     "messages[0].reasoning_content", NULL},
    {DF_SERVE_CHAT,
     "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"assistant\",\"content\":\"a\","
     "\"reasoning_content\":5}]}",
     "messages[0].reasoning_content", NULL},
};

static void test_bad_requests(void **st) {
  (void)st;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const bad_case *c = &bad[i];
    df_serve_req r;
    df_serve_err e;
    memset(&e, 0x55, sizeof e);
    int rc = df_serve_parse(c->kind, c->body, strlen(c->body), &lim, &r, &e);
    if (rc != -1) fail_msg("case %zu accepted: %s", i, c->body);
    if (e.status != 400) fail_msg("case %zu: status %d", i, e.status);
    if (strcmp(e.param, c->param ? c->param : ""))
      fail_msg("case %zu: param '%s', want '%s' (%s)", i, e.param, c->param ? c->param : "",
               c->body);
    if (c->code && (!e.code || strcmp(e.code, c->code)))
      fail_msg("case %zu: code %s, want %s", i, e.code ? e.code : "null", c->code);
    assert_string_equal(e.type, "invalid_request_error");
    assert_true(strlen(e.msg) > 0);
  }
}

static void test_unknown_model_404(void **st) {
  (void)st;
  const char *body = "{\"model\":\"gpt-4o\"," MSG "}";
  df_serve_req r;
  df_serve_err e;
  assert_int_equal(df_serve_parse(DF_SERVE_CHAT, body, strlen(body), &lim, &r, &e), -1);
  assert_int_equal(e.status, 404);
  assert_string_equal(e.code, "model_not_found");
  assert_string_equal(e.param, "model");
}

static df_serve_req ok(df_serve_kind kind, const char *body) {
  df_serve_req r;
  df_serve_err e;
  if (df_serve_parse(kind, body, strlen(body), &lim, &r, &e))
    fail_msg("refused (%s: %s): %s", e.param, e.msg, body);
  return r;
}

static void test_chat_defaults(void **st) {
  (void)st;
  df_serve_req r = ok(DF_SERVE_CHAT, CHAT(""));
  assert_int_equal(r.kind, DF_SERVE_CHAT);
  assert_string_equal(r.model, "k3-tiny");
  assert_int_equal(r.nmsgs, 1);
  assert_int_equal(r.msgs[0].role, DF_ROLE_USER);
  assert_int_equal(r.msgs[0].content_len, 2);
  assert_memory_equal(r.msgs[0].content, "hi", 2);
  assert_int_equal(r.max_tokens, -1);
  assert_int_equal(r.stream, 0);
  assert_int_equal(r.include_usage, 0);
  assert_int_equal(r.effort, DF_EFFORT_MAX);
  assert_true(r.temperature == 0.0);
  assert_true(r.top_p == 1.0);
  assert_int_equal(r.has_seed, 0);
  assert_int_equal(r.nstop, 0);
  df_serve_req_free(&r);
}

static void test_chat_everything(void **st) {
  (void)st;
  const char *body =
      "{\"model\":\"k3-tiny\",\"messages\":["
      "{\"role\":\"system\",\"content\":\"be brief\"},"
      "{\"role\":\"developer\",\"content\":\"dev\"},"
      "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"ab\"},{\"type\":\"text\","
      "\"text\":\"c\\u00e9\"}]},"
      "{\"role\":\"assistant\",\"content\":\"ok\",\"reasoning_content\":\"hmm\",\"tool_calls\":[],"
      "\"refusal\":null},"
      "{\"role\":\"tool\",\"content\":\"1\",\"tool_call_id\":\"call_1\"},"
      "{\"role\":\"tool\",\"content\":\"2\",\"tool_call_id\":\"call_2\",\"name\":\"calc\"},"
      "{\"role\":\"user\",\"content\":\"go\"}],"
      "\"max_completion_tokens\":17,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
      "\"reasoning_effort\":\"low\",\"temperature\":0.7,\"top_p\":0.9,\"seed\":-5,"
      "\"stop\":[\"END\",\"\\n\\n\"],\"user\":\"u1\",\"metadata\":{\"a\":\"b\"},\"n\":1,"
      "\"logprobs\":false,\"tools\":[],\"tool_choice\":\"none\",\"parallel_tool_calls\":true,"
      "\"response_format\":{\"type\":\"text\"},\"presence_penalty\":0,\"frequency_penalty\":0.0,"
      "\"logit_bias\":{},\"store\":false,\"modalities\":[\"text\"],\"service_tier\":\"auto\","
      "\"top_logprobs\":null,\"audio\":null,\"prediction\":null,\"max_tokens\":null}";
  df_serve_req r = ok(DF_SERVE_CHAT, body);
  assert_int_equal(r.nmsgs, 7);
  assert_int_equal(r.msgs[0].role, DF_ROLE_SYSTEM);
  assert_int_equal(r.msgs[1].role, DF_ROLE_SYSTEM);
  assert_int_equal(r.msgs[2].role, DF_ROLE_USER);
  assert_int_equal(r.msgs[2].content_len, 5);
  assert_memory_equal(r.msgs[2].content, "abc\xc3\xa9", 5);
  assert_int_equal(r.msgs[3].role, DF_ROLE_ASSISTANT);
  assert_int_equal(r.msgs[3].reasoning_len, 3);
  assert_memory_equal(r.msgs[3].reasoning, "hmm", 3);
  assert_int_equal(r.msgs[4].role, DF_ROLE_TOOL);
  assert_string_equal(r.msgs[4].tool_name, "call_1");
  assert_string_equal(r.msgs[5].tool_name, "calc");
  assert_int_equal(r.msgs[6].role, DF_ROLE_USER);
  assert_int_equal(r.max_tokens, 17);
  assert_string_equal(r.max_tokens_param, "max_completion_tokens");
  assert_int_equal(r.stream, 1);
  assert_int_equal(r.include_usage, 1);
  assert_int_equal(r.effort, DF_EFFORT_LOW);
  assert_true(r.temperature == 0.7);
  assert_true(r.top_p == 0.9);
  assert_int_equal(r.has_seed, 1);
  assert_true(r.seed == (uint64_t)-5);
  assert_int_equal(r.nstop, 2);
  assert_string_equal(r.stop[0], "END");
  assert_int_equal(r.stop_len[1], 2);
  assert_string_equal(r.stop[1], "\n\n");
  df_serve_req_free(&r);
}

static void test_chat_content_utf8_length(void **st) {
  (void)st;
  /* the length is in bytes, not characters */
  df_serve_req r = ok(DF_SERVE_CHAT,
                      "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":"
                      "\"\xe6\x97\xa5\xe6\x9c\xac \\ud83d\\ude00\"}]}");
  assert_int_equal(r.msgs[0].content_len, 3 + 3 + 1 + 4);
  assert_memory_equal(r.msgs[0].content, "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", 11);
  df_serve_req_free(&r);
  /* assistant content may be null (an empty turn) */
  r = ok(DF_SERVE_CHAT,
         "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
         "{\"role\":\"assistant\",\"content\":null},{\"role\":\"user\",\"content\":[]}]}");
  assert_int_equal(r.msgs[1].content_len, 0);
  assert_int_equal(r.msgs[2].content_len, 0);
  df_serve_req_free(&r);
}

static void test_effort_values(void **st) {
  (void)st;
  static const char *const names[] = {"low", "medium", "high", "max"};
  static const df_effort want[] = {DF_EFFORT_LOW, DF_EFFORT_MEDIUM, DF_EFFORT_HIGH, DF_EFFORT_MAX};
  for (int i = 0; i < 4; i++) {
    char body[256];
    snprintf(body, sizeof body, CHAT(",\"reasoning_effort\":\"%s\""), names[i]);
    df_serve_req r = ok(DF_SERVE_CHAT, body);
    assert_int_equal(r.effort, want[i]);
    df_serve_req_free(&r);
  }
}

static void test_completion_prompts(void **st) {
  (void)st;
  df_serve_req r = ok(DF_SERVE_COMPLETION, COMPL(",\"max_tokens\":9,\"stop\":\"x\",\"echo\":false,"
                                                 "\"suffix\":null,\"best_of\":1,\"logprobs\":null"));
  assert_int_equal(r.kind, DF_SERVE_COMPLETION);
  assert_int_equal(r.prompt_len, 4);
  assert_string_equal(r.prompt, "Once");
  assert_int_equal(r.prompt_is_ids, 0);
  assert_int_equal(r.max_tokens, 9);
  assert_string_equal(r.max_tokens_param, "max_tokens");
  assert_int_equal(r.nstop, 1);
  df_serve_req_free(&r);

  r = ok(DF_SERVE_COMPLETION, "{\"model\":\"k3-tiny\",\"prompt\":[\"only\"]}");
  assert_string_equal(r.prompt, "only");
  df_serve_req_free(&r);

  r = ok(DF_SERVE_COMPLETION, "{\"model\":\"k3-tiny\",\"prompt\":[3,0,999]}");
  assert_int_equal(r.prompt_is_ids, 1);
  assert_int_equal(r.nprompt_ids, 3);
  assert_int_equal(r.prompt_ids[0], 3);
  assert_int_equal(r.prompt_ids[2], 999);
  df_serve_req_free(&r);

  r = ok(DF_SERVE_COMPLETION, "{\"model\":\"k3-tiny\",\"prompt\":[[7,8]]}");
  assert_int_equal(r.nprompt_ids, 2);
  assert_int_equal(r.prompt_ids[1], 8);
  df_serve_req_free(&r);
}

static void test_model_check_optional(void **st) {
  (void)st;
  df_serve_limits any = {.model_id = NULL, .vocab = 10};
  df_serve_req r;
  df_serve_err e;
  const char *b = "{\"model\":\"whatever\",\"prompt\":\"x\"}";
  assert_int_equal(df_serve_parse(DF_SERVE_COMPLETION, b, strlen(b), &any, &r, &e), 0);
  df_serve_req_free(&r);
}

static void test_context_limit(void **st) {
  (void)st;
  df_serve_req r = ok(DF_SERVE_CHAT, CHAT(""));
  df_serve_err e;
  assert_int_equal(df_serve_check_context(&r, 100, 128, &e), 0);
  assert_int_equal(df_serve_check_context(&r, 128, 128, &e), -1);
  assert_int_equal(e.status, 400);
  assert_string_equal(e.param, "messages");
  assert_string_equal(e.code, "context_length_exceeded");
  assert_non_null(strstr(e.msg, "128"));
  df_serve_req_free(&r);

  r = ok(DF_SERVE_COMPLETION, COMPL(",\"max_tokens\":30"));
  assert_int_equal(df_serve_check_context(&r, 98, 128, &e), 0);
  assert_int_equal(df_serve_check_context(&r, 99, 128, &e), -1);
  assert_string_equal(e.param, "max_tokens");
  assert_non_null(strstr(e.msg, "128"));
  assert_int_equal(df_serve_check_context(&r, 200, 128, &e), -1);
  assert_string_equal(e.param, "prompt");
  df_serve_req_free(&r);
}

/* Lengths without max_tokens: completions 16 (OpenAI), chat the rest of the
 * context; --max-tokens-default caps both; nothing passes the context. */
static void test_max_new_defaults(void **st) {
  (void)st;
  df_serve_req r = ok(DF_SERVE_COMPLETION, COMPL(""));
  assert_int_equal(df_serve_max_new(&r, 10, 128, 0), 16);
  assert_int_equal(df_serve_max_new(&r, 120, 128, 0), 8); /* only 8 positions left */
  assert_int_equal(df_serve_max_new(&r, 10, 128, 5), 5);
  assert_int_equal(df_serve_max_new(&r, 10, 128, 100), 16);
  df_serve_req_free(&r);
  r = ok(DF_SERVE_COMPLETION, COMPL(",\"max_tokens\":40"));
  assert_int_equal(df_serve_max_new(&r, 10, 128, 5), 40);
  df_serve_req_free(&r);
  r = ok(DF_SERVE_CHAT, CHAT(""));
  assert_int_equal(df_serve_max_new(&r, 28, 128, 0), 100);
  assert_int_equal(df_serve_max_new(&r, 28, 128, 7), 7);
  assert_int_equal(df_serve_max_new(&r, 28, 128, 1000), 100);
  df_serve_req_free(&r);
  r = ok(DF_SERVE_CHAT, CHAT(",\"max_completion_tokens\":3"));
  assert_int_equal(df_serve_max_new(&r, 28, 128, 7), 3);
  df_serve_req_free(&r);
}

/* Thinking off: reasoning_effort "none" and chat_template_kwargs; the
 * template's other switches by name, unknown ones refused by name. */
static void test_thinking_off(void **st) {
  (void)st;
  df_serve_req r = ok(DF_SERVE_CHAT, CHAT(""));
  assert_int_equal(r.thinking, 1);
  df_serve_req_free(&r);
  static const char *const off[] = {
      CHAT(",\"reasoning_effort\":\"none\""),
      CHAT(",\"chat_template_kwargs\":{\"thinking\":false}"),
      CHAT(",\"chat_template_kwargs\":{\"enable_thinking\":false}"),
      CHAT(",\"reasoning_effort\":\"none\",\"chat_template_kwargs\":{\"thinking\":false}"),
  };
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
    r = ok(DF_SERVE_CHAT, off[i]);
    assert_int_equal(r.thinking, 0);
    df_serve_req_free(&r);
  }
  r = ok(DF_SERVE_CHAT, CHAT(",\"chat_template_kwargs\":{\"thinking\":true,\"thinking_effort\":\"low\"}"));
  assert_int_equal(r.thinking, 1);
  assert_int_equal(r.effort, DF_EFFORT_LOW);
  df_serve_req_free(&r);
  static const char *const badk[][2] = {
      {CHAT(",\"chat_template_kwargs\":{\"thinking\":\"no\"}"), "chat_template_kwargs.thinking"},
      {CHAT(",\"chat_template_kwargs\":{\"foo\":1}"), "chat_template_kwargs.foo"},
      {CHAT(",\"chat_template_kwargs\":[1]"), "chat_template_kwargs"},
      {CHAT(",\"chat_template_kwargs\":{\"thinking_effort\":\"medium\"}"),
       "chat_template_kwargs.thinking_effort"},
      {CHAT(",\"reasoning_effort\":\"none\",\"chat_template_kwargs\":{\"thinking\":true}"),
       "reasoning_effort"},
      {CHAT(",\"reasoning_effort\":\"low\",\"chat_template_kwargs\":{\"thinking\":false}"),
       "reasoning_effort"},
  };
  for (size_t i = 0; i < sizeof badk / sizeof badk[0]; i++) {
    df_serve_err e;
    assert_int_equal(df_serve_parse(DF_SERVE_CHAT, badk[i][0], strlen(badk[i][0]), &lim, &r, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, badk[i][1]);
  }
  /* history may carry the reasoning under either name */
  r = ok(DF_SERVE_CHAT, "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                        "{\"role\":\"assistant\",\"content\":\"b\",\"reasoning\":\"why\"},"
                        "{\"role\":\"assistant\",\"content\":\"c\",\"reasoning\":\"x\","
                        "\"reasoning_content\":\"because\"},{\"role\":\"user\",\"content\":\"d\"}]}");
  assert_int_equal(r.msgs[1].reasoning_len, 3);
  assert_memory_equal(r.msgs[1].reasoning, "why", 3);
  assert_int_equal(r.msgs[2].reasoning_len, 7); /* reasoning_content wins, as in the release */
  assert_memory_equal(r.msgs[2].reasoning, "because", 7);
  df_serve_req_free(&r);
}

/* Bodies are byte strings, not C strings: an embedded NUL is invalid JSON. */
static void test_embedded_nul(void **st) {
  (void)st;
  const char body[] = "{\"model\":\"k3-tiny\",\"prompt\":\"a\"}\0garbage";
  df_serve_req r;
  df_serve_err e;
  assert_int_equal(df_serve_parse(DF_SERVE_COMPLETION, body, sizeof body - 1, &lim, &r, &e), -1);
  assert_int_equal(e.status, 400);
  assert_int_equal(df_serve_parse(DF_SERVE_COMPLETION, body, strlen(body), &lim, &r, &e), 0);
  df_serve_req_free(&r);
}

/* What the SDKs and llama.cpp / Ollama clients send, honoured. */
static void test_client_extensions(void **st) {
  (void)st;
  const char *body =
      "{\"model\":\"k3-tiny\",\"messages\":["
      "{\"role\":\"system\",\"content\":\"s\",\"name\":\"boss\"},"
      "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"q\","
      "\"cache_control\":{\"type\":\"ephemeral\"}}],\"name\":\"ann\"},"
      "{\"role\":\"assistant\",\"content\":\"a\",\"parsed\":null,\"annotations\":[],"
      "\"refusal\":null,\"audio\":null,\"function_call\":null,\"tool_calls\":null},"
      "{\"role\":\"user\",\"content\":\"again\"}],"
      "\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\"],\"reasoning_effort\":\"minimal\","
      "\"top_k\":40,\"min_p\":0.05,\"repeat_penalty\":1.1,\"presence_penalty\":0.5,"
      "\"frequency_penalty\":-1,\"logit_bias\":{\"5\":10,\"7\":-100},\"n\":3,"
      "\"logprobs\":true,\"top_logprobs\":4}";
  df_serve_req r = ok(DF_SERVE_CHAT, body);
  assert_int_equal(r.nmsgs, 4);
  assert_int_equal(r.msgs[1].content_len, 1);
  assert_int_equal(r.nstop, 6);
  assert_int_equal(r.effort, DF_EFFORT_LOW);
  assert_int_equal(r.top_k, 40);
  assert_true(r.min_p == 0.05);
  assert_true(r.repeat_penalty == 1.1);
  assert_true(r.presence_penalty == 0.5 && r.frequency_penalty == -1);
  assert_int_equal(r.nbias, 2);
  int seen5 = 0, seen7 = 0;
  for (int i = 0; i < r.nbias; i++) {
    if (r.bias[i].id == 5 && r.bias[i].bias == 10.0f) seen5 = 1;
    if (r.bias[i].id == 7 && r.bias[i].bias == -100.0f) seen7 = 1;
  }
  assert_true(seen5 && seen7);
  assert_int_equal(r.n, 3);
  assert_int_equal(r.logprobs, 1);
  assert_int_equal(r.top_logprobs, 4);
  df_serve_req_free(&r);
  /* efforts the SDK types allow */
  static const char *const names[] = {"minimal", "low", "medium", "high", "xhigh", "max"};
  static const df_effort want[] = {DF_EFFORT_LOW,  DF_EFFORT_LOW, DF_EFFORT_MEDIUM,
                                   DF_EFFORT_HIGH, DF_EFFORT_MAX, DF_EFFORT_MAX};
  for (int i = 0; i < 6; i++) {
    df_effort e;
    assert_int_equal(df_serve_effort(names[i], &e), 0);
    assert_int_equal(e, want[i]);
  }
  df_effort none_effort;
  assert_int_equal(df_serve_effort("none", &none_effort), -1); /* not an effort: thinking off */
  /* completions: logprobs is the number of alternatives; top_k -1 is off */
  r = ok(DF_SERVE_COMPLETION, COMPL(",\"logprobs\":3,\"top_k\":-1"));
  assert_int_equal(r.logprobs, 1);
  assert_int_equal(r.top_logprobs, 3);
  assert_int_equal(r.top_k, 0);
  df_serve_req_free(&r);
  r = ok(DF_SERVE_COMPLETION, COMPL(",\"logprobs\":0"));
  assert_int_equal(r.logprobs, 1);
  assert_int_equal(r.top_logprobs, 0);
  df_serve_req_free(&r);
}

static void test_tools(void **st) {
  (void)st;
  const char *body =
      "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},"
      "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":"
      "\"function\",\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]},"
      "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"}],"
      "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\",\"parameters\":"
      "{\"type\":\"object\"}}}],\"tool_choice\":\"required\",\"parallel_tool_calls\":false}";
  df_serve_req r = ok(DF_SERVE_CHAT, body);
  assert_non_null(r.tools_json);
  assert_non_null(strstr(r.tools_json, "\"name\":\"get\""));
  assert_int_equal(r.tool_choice, DF_TOOL_CHOICE_REQUIRED);
  assert_int_equal(r.msgs[1].ncalls, 1);
  assert_string_equal(r.msgs[1].calls[0].name, "get");
  assert_string_equal(r.msgs[1].calls[0].id, "c1");
  assert_string_equal(r.msgs[1].calls[0].arguments, "{\"city\":\"Oslo\"}");
  assert_string_equal(r.msgs[2].tool_call_id, "c1");
  assert_int_equal(r.parallel_tool_calls, 0);
  assert_non_null(r.toolgram); /* required, one call */
  df_serve_req_free(&r);
  /* a named function, in the Chat Completions and the Responses shapes */
#define TOOLS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\"}}]"
  static const char *const named[] = {
      CHAT(TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get\"}}"),
      CHAT(TOOLS ",\"tool_choice\":{\"type\":\"function\",\"name\":\"get\"}"),
  };
  for (size_t i = 0; i < 2; i++) {
    r = ok(DF_SERVE_CHAT, named[i]);
    assert_string_equal(r.tool_choice_name, "get");
    assert_int_equal(r.tool_choice, DF_TOOL_CHOICE_REQUIRED);
    assert_non_null(r.toolgram);
    df_serve_req_free(&r);
  }
  r = ok(DF_SERVE_CHAT, CHAT(TOOLS));
  assert_null(r.toolgram); /* auto with parallel calls: nothing to enforce */
  df_serve_req_free(&r);
  r = ok(DF_SERVE_CHAT, CHAT(TOOLS ",\"tool_choice\":\"none\""));
  assert_non_null(r.toolgram);
  df_serve_req_free(&r);
  static const char *const badtc[][2] = {
      {CHAT(TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"other\"}}"),
       "tool_choice.function.name"},
      {CHAT(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get\"}}"), "tool_choice"},
      {CHAT(",\"tool_choice\":\"required\""), "tool_choice"},
      {CHAT(TOOLS ",\"tool_choice\":{\"type\":\"custom\"}"), "tool_choice"},
      {CHAT(TOOLS ",\"parallel_tool_calls\":1"), "parallel_tool_calls"},
  };
  for (size_t i = 0; i < sizeof badtc / sizeof badtc[0]; i++) {
    df_serve_err e;
    assert_int_equal(df_serve_parse(DF_SERVE_CHAT, badtc[i][0], strlen(badtc[i][0]), &lim, &r, &e), -1);
    assert_string_equal(e.param, badtc[i][1]);
  }
#undef TOOLS
  r = ok(DF_SERVE_CHAT, CHAT(",\"response_format\":{\"type\":\"json_object\"}"));
  assert_non_null(r.grammar);
  df_serve_req_free(&r);
  r = ok(DF_SERVE_CHAT, CHAT(",\"tools\":[]"));
  df_serve_req_free(&r);
}

static void test_tokenize_bodies(void **st) {
  (void)st;
  char *text;
  size_t n;
  int pieces, special, *ids;
  df_serve_err e;
  const char *b1 = "{\"content\":\"a\\u00e9\",\"with_pieces\":true,\"parse_special\":true}";
  assert_int_equal(df_serve_parse_tokenize(b1, strlen(b1), &text, &n, &pieces, &special, &e), 0);
  assert_int_equal(n, 3);
  assert_memory_equal(text, "a\xc3\xa9", 3);
  assert_true(pieces && special);
  free(text);
  static const char *const bad_tok[][2] = {{"{}", "content"},
                                           {"{\"content\":5}", "content"},
                                           {"{\"content\":\"x\",\"add_special\":1}", "add_special"},
                                           {"{\"content\":\"x\",\"model\":5}", "model"},
                                           {"{\"content\":\"x\",\"zz\":1}", "zz"},
                                           {"[1]", ""}};
  for (size_t i = 0; i < sizeof bad_tok / sizeof bad_tok[0]; i++) {
    assert_int_equal(
        df_serve_parse_tokenize(bad_tok[i][0], strlen(bad_tok[i][0]), &text, &n, &pieces, &special, &e),
        -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, bad_tok[i][1]);
  }
  /* llama-server clients send model and add_special */
  const char *b3 = "{\"content\":\"ab\",\"model\":\"any\",\"add_special\":true,\"with_pieces\":false}";
  assert_int_equal(df_serve_parse_tokenize(b3, strlen(b3), &text, &n, &pieces, &special, &e), 0);
  assert_int_equal(n, 2);
  assert_false(pieces || special);
  free(text);
  const char *b4 = "{\"tokens\":[5],\"model\":\"any\"}";
  assert_int_equal(df_serve_parse_detokenize(b4, strlen(b4), 1000, &ids, &n, &e), 0);
  free(ids);
  const char *b2 = "{\"tokens\":[1,2,999]}";
  assert_int_equal(df_serve_parse_detokenize(b2, strlen(b2), 1000, &ids, &n, &e), 0);
  assert_int_equal(n, 3);
  assert_int_equal(ids[2], 999);
  free(ids);
  static const char *const bad_det[] = {"{\"tokens\":[1000]}", "{\"tokens\":[-1]}",
                                        "{\"tokens\":[\"1\"]}", "{\"tokens\":1}", "{}"};
  for (size_t i = 0; i < sizeof bad_det / sizeof bad_det[0]; i++) {
    assert_int_equal(df_serve_parse_detokenize(bad_det[i], strlen(bad_det[i]), 1000, &ids, &n, &e), -1);
    assert_string_equal(e.param, "tokens");
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_requests),       cmocka_unit_test(test_chat_defaults),
      cmocka_unit_test(test_chat_everything),    cmocka_unit_test(test_chat_content_utf8_length),
      cmocka_unit_test(test_effort_values),      cmocka_unit_test(test_completion_prompts),
      cmocka_unit_test(test_model_check_optional), cmocka_unit_test(test_context_limit),
      cmocka_unit_test(test_embedded_nul),
      cmocka_unit_test(test_unknown_model_404),  cmocka_unit_test(test_client_extensions),
      cmocka_unit_test(test_tokenize_bodies),    cmocka_unit_test(test_tools),
      cmocka_unit_test(test_max_new_defaults),   cmocka_unit_test(test_thinking_off),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Response shapes of `deltafin serve`, read back with a JSON parser: errors,
 * chat and text completions, SSE chunks, model list and health. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/util.h"
#include "serve/response.h"

static json_t *parse(const char *s) {
  json_error_t je;
  json_t *v = json_loads(s, JSON_REJECT_DUPLICATES, &je);
  if (!v) fail_msg("not JSON (%s): %s", je.text, s);
  return v;
}

static const char *str(json_t *o, const char *path) {
  json_t *v = o;
  char key[64];
  while (*path) {
    size_t n = strcspn(path, ".");
    memcpy(key, path, n);
    key[n] = 0;
    v = json_is_array(v) ? json_array_get(v, (size_t)atoi(key)) : json_object_get(v, key);
    if (!v) fail_msg("missing %s", key);
    path += n + (path[n] == '.');
  }
  return json_is_string(v) ? json_string_value(v) : json_is_null(v) ? "(null)" : "(other)";
}

static json_t *at(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!v) fail_msg("missing %s", k);
  return v;
}

static void test_error_shape(void **st) {
  (void)st;
  df_serve_err e;
  df_serve_err_set(&e, 400, "invalid_request_error", NULL, "messages[0].role", "bad \"role\" %d", 3);
  char *s = df_serve_error_json(&e);
  json_t *v = parse(s);
  assert_int_equal(json_object_size(v), 1);
  json_t *er = at(v, "error");
  assert_int_equal(json_object_size(er), 4);
  assert_string_equal(str(er, "message"), "bad \"role\" 3");
  assert_string_equal(str(er, "type"), "invalid_request_error");
  assert_string_equal(str(er, "param"), "messages[0].role");
  assert_true(json_is_null(at(er, "code")));
  json_decref(v);
  free(s);

  df_serve_err_set(&e, 429, "requests", "rate_limit_exceeded", NULL, "busy");
  s = df_serve_error_json(&e);
  v = parse(s);
  assert_true(json_is_null(at(at(v, "error"), "param")));
  assert_string_equal(str(v, "error.code"), "rate_limit_exceeded");
  json_decref(v);
  free(s);
}

static void test_ids(void **st) {
  (void)st;
  df_serve_meta a, b;
  df_serve_meta_init(&a, DF_SERVE_CHAT, "m", 5);
  df_serve_meta_init(&b, DF_SERVE_CHAT, "m", 5);
  assert_int_equal(strncmp(a.id, "chatcmpl-", 9), 0);
  assert_true(strlen(a.id) > 20);
  assert_string_not_equal(a.id, b.id);
  df_serve_meta_init(&a, DF_SERVE_COMPLETION, "m", 5);
  assert_int_equal(strncmp(a.id, "cmpl-", 5), 0);
}

static void test_chat_response(void **st) {
  (void)st;
  df_serve_meta m;
  df_serve_meta_init(&m, DF_SERVE_CHAT, "k3-tiny", 1700000000);
  df_serve_usage u = {12, 30, 20, 7, 9, 5, NULL};
  char *s = df_serve_response_json(&m, "think\xc3\xa9", 7, "answer", 6, "length", &u);
  json_t *v = parse(s);
  assert_string_equal(str(v, "id"), m.id);
  assert_string_equal(str(v, "object"), "chat.completion");
  assert_int_equal(json_integer_value(at(v, "created")), 1700000000);
  assert_string_equal(str(v, "model"), "k3-tiny");
  json_t *ch = at(v, "choices");
  assert_int_equal(json_array_size(ch), 1);
  assert_int_equal(json_integer_value(at(json_array_get(ch, 0), "index")), 0);
  assert_string_equal(str(v, "choices.0.message.role"), "assistant");
  assert_string_equal(str(v, "choices.0.message.content"), "answer");
  assert_string_equal(str(v, "choices.0.message.reasoning_content"), "think\xc3\xa9");
  assert_string_equal(str(v, "choices.0.finish_reason"), "length");
  json_t *us = at(v, "usage");
  assert_int_equal(json_integer_value(at(us, "prompt_tokens")), 12);
  assert_int_equal(json_integer_value(at(us, "completion_tokens")), 30);
  assert_int_equal(json_integer_value(at(us, "total_tokens")), 42);
  assert_int_equal(json_integer_value(at(at(us, "prompt_tokens_details"), "cached_tokens")), 7);
  assert_int_equal(json_integer_value(at(at(us, "completion_tokens_details"), "reasoning_tokens")),
                   20);
  /* speculation: 9 drafts, 5 kept, under OpenAI's predicted-output fields */
  json_t *cd = at(us, "completion_tokens_details");
  assert_int_equal(json_integer_value(at(cd, "accepted_prediction_tokens")), 5);
  assert_int_equal(json_integer_value(at(cd, "rejected_prediction_tokens")), 4);
  json_decref(v);
  free(s);
}

static void test_text_response(void **st) {
  (void)st;
  df_serve_meta m;
  df_serve_meta_init(&m, DF_SERVE_COMPLETION, "k3-tiny", 1);
  df_serve_usage u = {3, 4, 0, 0, 0, 0, NULL};
  char *s = df_serve_response_json(&m, NULL, 0, " upon a time", 12, "stop", &u);
  json_t *v = parse(s);
  assert_string_equal(str(v, "object"), "text_completion");
  assert_string_equal(str(v, "choices.0.text"), " upon a time");
  assert_string_equal(str(v, "choices.0.finish_reason"), "stop");
  assert_null(json_object_get(json_array_get(at(v, "choices"), 0), "message"));
  assert_int_equal(json_integer_value(at(at(v, "usage"), "total_tokens")), 7);
  json_decref(v);
  free(s);
}

/* Splits an SSE body into frames, checking the framing as it goes. */
static int frames(const char *body, size_t n, json_t **out, int max, int *done) {
  int k = 0;
  *done = 0;
  const char *p = body, *end = body + n;
  while (p < end) {
    assert_int_equal(strncmp(p, "data: ", 6), 0);
    const char *e = strstr(p, "\n\n");
    assert_non_null(e);
    size_t len = (size_t)(e - p - 6);
    char *s = strndup(p + 6, len);
    assert_null(strchr(s, '\n')); /* one line per frame */
    if (!strcmp(s, "[DONE]")) {
      (*done)++;
      free(s);
    } else {
      assert_true(k < max);
      assert_int_equal(*done, 0);
      out[k++] = parse(s);
      free(s);
    }
    p = e + 2;
  }
  return k;
}

static void test_chat_stream(void **st) {
  (void)st;
  df_serve_meta m;
  df_serve_meta_init(&m, DF_SERVE_CHAT, "k3-tiny", 9);
  m.include_usage = 1;
  df_sbuf b = {0};
  df_serve_sse_delta(&b, &m, "assistant", "content", "", 0, NULL);
  df_serve_sse_delta(&b, &m, NULL, "reasoning_content", "hm\nm", 4, NULL);
  df_serve_sse_delta(&b, &m, NULL, "content", "hi", 2, NULL);
  df_serve_sse_delta(&b, &m, NULL, NULL, NULL, 0, "stop");
  df_serve_usage u = {5, 3, 1, 0, 0, 0, NULL};
  df_serve_sse_usage(&b, &m, &u);
  df_serve_sse_done(&b);
  json_t *f[8];
  int done, k = frames(b.p, b.n, f, 8, &done);
  assert_int_equal(k, 5);
  assert_int_equal(done, 1);
  for (int i = 0; i < k; i++) {
    assert_string_equal(str(f[i], "id"), m.id);
    assert_string_equal(str(f[i], "object"), "chat.completion.chunk");
    assert_string_equal(str(f[i], "model"), "k3-tiny");
  }
  assert_string_equal(str(f[0], "choices.0.delta.role"), "assistant");
  assert_string_equal(str(f[0], "choices.0.delta.content"), "");
  assert_true(json_is_null(at(f[0], "usage")));
  assert_string_equal(str(f[0], "choices.0.finish_reason"), "(null)");
  assert_string_equal(str(f[1], "choices.0.delta.reasoning_content"), "hm\nm");
  assert_null(json_object_get(at(json_array_get(at(f[1], "choices"), 0), "delta"), "role"));
  assert_string_equal(str(f[2], "choices.0.delta.content"), "hi");
  assert_int_equal(json_object_size(at(json_array_get(at(f[3], "choices"), 0), "delta")), 0);
  assert_string_equal(str(f[3], "choices.0.finish_reason"), "stop");
  assert_int_equal(json_array_size(at(f[4], "choices")), 0);
  assert_int_equal(json_integer_value(at(at(f[4], "usage"), "total_tokens")), 8);
  for (int i = 0; i < k; i++) json_decref(f[i]);
  df_sbuf_free(&b);

  /* without include_usage the chunks carry no usage key at all */
  m.include_usage = 0;
  df_serve_sse_delta(&b, &m, NULL, "content", "x", 1, NULL);
  k = frames(b.p, b.n, f, 8, &done);
  assert_int_equal(k, 1);
  assert_null(json_object_get(f[0], "usage"));
  json_decref(f[0]);
  df_sbuf_free(&b);
}

static void test_text_stream_and_error_frame(void **st) {
  (void)st;
  df_serve_meta m;
  df_serve_meta_init(&m, DF_SERVE_COMPLETION, "k3-tiny", 9);
  df_sbuf b = {0};
  df_serve_sse_delta(&b, &m, NULL, NULL, " once", 5, NULL);
  df_serve_sse_delta(&b, &m, NULL, NULL, NULL, 0, "length");
  df_serve_err e;
  df_serve_err_set(&e, 503, "server_error", "shutting_down", NULL, "bye");
  df_serve_sse_error(&b, &e);
  df_serve_sse_done(&b);
  json_t *f[8];
  int done, k = frames(b.p, b.n, f, 8, &done);
  assert_int_equal(k, 3);
  assert_string_equal(str(f[0], "object"), "text_completion");
  assert_string_equal(str(f[0], "choices.0.text"), " once");
  assert_string_equal(str(f[1], "choices.0.text"), "");
  assert_string_equal(str(f[1], "choices.0.finish_reason"), "length");
  assert_string_equal(str(f[2], "error.code"), "shutting_down");
  for (int i = 0; i < k; i++) json_decref(f[i]);
  df_sbuf_free(&b);
}

static void test_invalid_utf8_is_repaired(void **st) {
  (void)st;
  size_t n;
  char *s = df_serve_utf8_sanitize("a\xff" "b\xe2\x82", 5, &n);
  assert_int_equal(n, 1 + 3 + 1 + 3 + 3);
  assert_memory_equal(s, "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd", n);
  assert_true(df_utf8_valid(s, n));
  free(s);
  s = df_serve_utf8_sanitize("\xed\xa0\x80ok\xf0\x9f\x98\x80", 9, &n); /* a surrogate */
  assert_true(df_utf8_valid(s, n));
  assert_memory_equal(s + n - 6, "ok\xf0\x9f\x98\x80", 6);
  free(s);
  /* a response never fails for a bad byte in the text */
  df_serve_meta m;
  df_serve_meta_init(&m, DF_SERVE_COMPLETION, "k3-tiny", 1);
  df_serve_usage u = {1, 1, 0, 0, 0, 0, NULL};
  char *j = df_serve_response_json(&m, NULL, 0, "x\x80y", 3, "stop", &u);
  json_t *v = parse(j);
  assert_string_equal(str(v, "choices.0.text"), "x\xef\xbf\xbdy");
  json_decref(v);
  free(j);
}

static void test_models_and_health(void **st) {
  (void)st;
  char *s = df_serve_models_json("k3-tiny", 77);
  json_t *v = parse(s);
  assert_string_equal(str(v, "object"), "list");
  assert_int_equal(json_array_size(at(v, "data")), 1);
  assert_string_equal(str(v, "data.0.id"), "k3-tiny");
  assert_string_equal(str(v, "data.0.object"), "model");
  assert_string_equal(str(v, "data.0.owned_by"), "deltafin");
  assert_int_equal(json_integer_value(at(json_array_get(at(v, "data"), 0), "created")), 77);
  json_decref(v);
  free(s);
  s = df_serve_health_json("a\"b", 1, 2, 3);
  v = parse(s);
  assert_string_equal(str(v, "status"), "ok");
  assert_string_equal(str(v, "model"), "a\"b");
  assert_true(json_is_true(at(v, "busy")));
  assert_int_equal(json_integer_value(at(v, "queue")), 2);
  assert_int_equal(json_integer_value(at(v, "queue_max")), 3);
  json_decref(v);
  free(s);
}

/* Histogram buckets: an observation on a bound falls in that bound's bucket;
 * the text's buckets are cumulative and end with +Inf equal to _count. */
static void test_metrics_histograms(void **st) {
  (void)st;
  df_serve_metrics m;
  memset(&m, 0, sizeof m);
  df_serve_hist_add(&m.latency, 0.05);  /* le 0.05 */
  df_serve_hist_add(&m.latency, 0.051); /* le 0.1 */
  df_serve_hist_add(&m.latency, 7);     /* le 10 */
  df_serve_hist_add(&m.latency, 1e6);   /* +Inf only */
  m.rejected_429 = 3;
  char *t = df_serve_metrics_text(&m, NULL);
  assert_non_null(strstr(t, "# TYPE deltafin_request_duration_seconds histogram\n"));
  assert_non_null(strstr(t, "deltafin_request_duration_seconds_bucket{le=\"0.05\"} 1\n"));
  assert_non_null(strstr(t, "deltafin_request_duration_seconds_bucket{le=\"0.1\"} 2\n"));
  assert_non_null(strstr(t, "deltafin_request_duration_seconds_bucket{le=\"5\"} 2\n"));
  assert_non_null(strstr(t, "deltafin_request_duration_seconds_bucket{le=\"10\"} 3\n"));
  assert_non_null(strstr(t, "deltafin_request_duration_seconds_bucket{le=\"300\"} 3\n"));
  assert_non_null(strstr(t, "deltafin_request_duration_seconds_bucket{le=\"+Inf\"} 4\n"));
  assert_non_null(strstr(t, "deltafin_request_duration_seconds_count 4\n"));
  assert_non_null(strstr(t, "deltafin_request_duration_seconds_sum 1000007.101"));
  assert_non_null(strstr(t, "deltafin_time_to_first_token_seconds_count 0\n"));
  assert_non_null(strstr(t, "deltafin_requests_rejected_total{code=\"429\"} 3\n"));
  free(t);
}

/* --device cuda: the engine's "device" counters become deltafin_gpu_*
 * series; on the CPU (device null) there are none. */
static void test_metrics_gpu(void **st) {
  (void)st;
  df_serve_metrics m;
  memset(&m, 0, sizeof m);
  const char *js = "{\"expert_bytes_read\":5,\"store\":{},\"device\":{\"products\":1234,"
                   "\"fallbacks\":0,\"tier_hits\":77,\"tier_misses\":3,\"tier_bytes\":4096,"
                   "\"tier_evictions\":5,\"tier_refused\":11,\"buffer_trims\":2,"
                   "\"h2d_bytes\":9000,\"weight_h2d_s\":0.5,\"compute_s\":1.25,"
                   "\"mem_free\":1000000,\"seq_calls\":69,\"attn_calls\":24,\"pre_calls\":185,"
                   "\"seq_bytes\":441000000,\"seq_pulls\":7,\"seq_copies\":130}}";
  char *t = df_serve_metrics_text(&m, js);
  assert_non_null(strstr(t, "# TYPE deltafin_gpu_products_total counter\n"));
  assert_non_null(strstr(t, "deltafin_gpu_products_total 1234\n"));
  assert_non_null(strstr(t, "deltafin_gpu_fallbacks_total 0\n"));
  assert_non_null(strstr(t, "deltafin_gpu_tier_hits_total 77\n"));
  assert_non_null(strstr(t, "deltafin_gpu_tier_misses_total 3\n"));
  assert_non_null(strstr(t, "deltafin_gpu_tier_evictions_total 5\n"));
  assert_non_null(strstr(t, "deltafin_gpu_tier_refused_total 11\n"));
  assert_non_null(strstr(t, "deltafin_gpu_buffer_trims_total 2\n"));
  assert_non_null(strstr(t, "# TYPE deltafin_gpu_tier_bytes gauge\n"));
  assert_non_null(strstr(t, "deltafin_gpu_tier_bytes 4096\n"));
  assert_non_null(strstr(t, "deltafin_gpu_compute_seconds_total 1.25"));
  assert_non_null(strstr(t, "deltafin_gpu_memory_free_bytes 1000000\n"));
  assert_non_null(strstr(t, "deltafin_gpu_kda_layers_total 69\n"));
  assert_non_null(strstr(t, "deltafin_gpu_mla_attentions_total 24\n"));
  assert_non_null(strstr(t, "deltafin_gpu_layer_inputs_total 185\n"));
  assert_non_null(strstr(t, "# TYPE deltafin_gpu_state_bytes gauge\n"));
  assert_non_null(strstr(t, "deltafin_gpu_state_bytes 441000000\n"));
  assert_non_null(strstr(t, "deltafin_gpu_state_pulls_total 7\n"));
  assert_non_null(strstr(t, "deltafin_gpu_state_copies_total 130\n"));
  assert_non_null(strstr(t, "deltafin_expert_bytes_read_total 5\n"));
  free(t);
  t = df_serve_metrics_text(&m, "{\"store\":{},\"device\":null}");
  assert_null(strstr(t, "deltafin_gpu_"));
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_error_shape),       cmocka_unit_test(test_ids),
      cmocka_unit_test(test_chat_response),     cmocka_unit_test(test_text_response),
      cmocka_unit_test(test_chat_stream),       cmocka_unit_test(test_text_stream_and_error_frame),
      cmocka_unit_test(test_invalid_utf8_is_repaired), cmocka_unit_test(test_models_and_health),
      cmocka_unit_test(test_metrics_histograms), cmocka_unit_test(test_metrics_gpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

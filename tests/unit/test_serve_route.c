/* Routing, API-key check and the admission queue of `deltafin serve`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/fifo.h"
#include "serve/route.h"

static void test_routes(void **st) {
  (void)st;
  static const struct {
    const char *method, *path;
    df_route want;
    const char *allow, *arg;
  } cases[] = {
      {"GET", "/v1/models", DF_ROUTE_MODELS, "GET, HEAD", NULL},
      {"POST", "/tokenize", DF_ROUTE_TOKENIZE, "POST", NULL},
      {"POST", "/v1/detokenize", DF_ROUTE_DETOKENIZE, "POST", NULL},
      {"GET", "/tokenize", DF_ROUTE_BAD_METHOD, "POST", NULL},
      {"GET", "/metrics", DF_ROUTE_METRICS, "GET, HEAD", NULL},
      {"POST", "/metrics", DF_ROUTE_BAD_METHOD, "GET, HEAD", NULL},
      {"GET", "/v1/metrics", DF_ROUTE_NOT_FOUND, NULL, NULL},
      {"GET", "/models", DF_ROUTE_MODELS, "GET, HEAD", NULL},
      {"HEAD", "/v1/models", DF_ROUTE_MODELS, "GET, HEAD", NULL},
      {"GET", "/v1/models/k3-tiny", DF_ROUTE_MODEL, "GET, HEAD", "k3-tiny"},
      {"GET", "/models/x", DF_ROUTE_MODEL, "GET, HEAD", "x"},
      {"GET", "/v1/models/", DF_ROUTE_NOT_FOUND, NULL, NULL},
      {"POST", "/v1/chat/completions", DF_ROUTE_CHAT, "POST", NULL},
      {"POST", "/chat/completions", DF_ROUTE_CHAT, "POST", NULL},
      {"POST", "/v1/completions", DF_ROUTE_COMPLETIONS, "POST", NULL},
      {"POST", "/completions", DF_ROUTE_COMPLETIONS, "POST", NULL},
      {"GET", "/health", DF_ROUTE_HEALTH, "GET, HEAD", NULL},
      {"GET", "/v1/chat/completions", DF_ROUTE_BAD_METHOD, "POST", NULL},
      {"PUT", "/v1/completions", DF_ROUTE_BAD_METHOD, "POST", NULL},
      {"DELETE", "/v1/models", DF_ROUTE_BAD_METHOD, "GET, HEAD", NULL},
      {"POST", "/health", DF_ROUTE_BAD_METHOD, "GET, HEAD", NULL},
      {"PATCH", "/v1/models/k3-tiny", DF_ROUTE_BAD_METHOD, "GET, HEAD", NULL},
      {"POST", "/v1/embeddings", DF_ROUTE_NOT_FOUND, NULL, NULL},
      {"GET", "/", DF_ROUTE_NOT_FOUND, NULL, NULL},
      {"GET", "/v1/health", DF_ROUTE_NOT_FOUND, NULL, NULL},
      {"POST", "/v1/chat/completions/", DF_ROUTE_NOT_FOUND, NULL, NULL},
      {"POST", "/v2/chat/completions", DF_ROUTE_NOT_FOUND, NULL, NULL},
      {"POST", "/v1/v1/completions", DF_ROUTE_NOT_FOUND, NULL, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *allow = "x", *arg = "x";
    df_route r = df_serve_route(cases[i].method, cases[i].path, &allow, &arg);
    if (r != cases[i].want) fail_msg("%s %s: route %d", cases[i].method, cases[i].path, r);
    if (cases[i].allow) assert_string_equal(allow, cases[i].allow);
    else assert_null(allow);
    if (cases[i].arg) assert_string_equal(arg, cases[i].arg);
    else assert_null(arg);
  }
}

static void test_auth(void **st) {
  (void)st;
  assert_true(df_serve_auth_ok("Bearer sekrit", "sekrit"));
  assert_true(df_serve_auth_ok("bearer sekrit", "sekrit"));
  assert_true(df_serve_auth_ok("Bearer  sekrit ", "sekrit"));
  assert_false(df_serve_auth_ok("Bearer sekri", "sekrit"));
  assert_false(df_serve_auth_ok("Bearer sekritt", "sekrit"));
  assert_false(df_serve_auth_ok("Bearer Sekrit", "sekrit"));
  assert_false(df_serve_auth_ok("Basic sekrit", "sekrit"));
  assert_false(df_serve_auth_ok("sekrit", "sekrit"));
  assert_false(df_serve_auth_ok("Bearer ", "sekrit"));
  assert_false(df_serve_auth_ok(NULL, "sekrit"));
}

static void test_admit(void **st) {
  (void)st;
  /* no queue: one at a time */
  assert_true(df_serve_admit(0, 0));
  assert_false(df_serve_admit(1, 0));
  /* a queue of 2: one running + 2 waiting */
  assert_true(df_serve_admit(1, 2));
  assert_true(df_serve_admit(2, 2));
  assert_false(df_serve_admit(3, 2));
}

/* A burst at an idle server: every admitted job is pushed before the
 * generation thread pops the first, so the FIFO must hold all of them. */
static void test_admit_burst_fits_fifo(void **st) {
  (void)st;
  for (int q = 0; q <= 5; q++) {
    df_fifo f;
    df_fifo_init(&f, df_serve_fifo_cap(q));
    int x[8], inflight = 0;
    while (df_serve_admit(inflight, q)) {
      assert_int_equal(df_fifo_push(&f, &x[inflight]), 0);
      inflight++;
    }
    assert_int_equal(inflight, q + 1);
    assert_int_equal(f.n, q + 1);
    df_fifo_free(&f);
  }
}

static void test_fifo(void **st) {
  (void)st;
  int a, b, c, d;
  df_fifo f;
  df_fifo_init(&f, 3);
  assert_null(df_fifo_pop(&f));
  assert_int_equal(df_fifo_push(&f, &a), 0);
  assert_int_equal(df_fifo_push(&f, &b), 0);
  assert_int_equal(df_fifo_push(&f, &c), 0);
  assert_int_equal(df_fifo_push(&f, &d), -1);
  assert_ptr_equal(df_fifo_pop(&f), &a);
  assert_int_equal(df_fifo_push(&f, &d), 0); /* wraps around */
  assert_int_equal(df_fifo_remove(&f, &c), 1);
  assert_int_equal(df_fifo_remove(&f, &c), 0);
  assert_int_equal(f.n, 2);
  assert_ptr_equal(df_fifo_pop(&f), &b);
  assert_ptr_equal(df_fifo_pop(&f), &d);
  assert_null(df_fifo_pop(&f));
  /* removal from the middle keeps order */
  int x[5];
  df_fifo g;
  df_fifo_init(&g, 5);
  for (int i = 0; i < 5; i++) df_fifo_push(&g, &x[i]);
  df_fifo_pop(&g);
  df_fifo_pop(&g);
  df_fifo_push(&g, &x[0]);
  df_fifo_push(&g, &x[1]);
  assert_int_equal(df_fifo_remove(&g, &x[3]), 1);
  int *want[] = {&x[2], &x[4], &x[0], &x[1]};
  for (int i = 0; i < 4; i++) assert_ptr_equal(df_fifo_pop(&g), want[i]);
  df_fifo_free(&f);
  df_fifo_free(&g);
}

static void test_log_escape(void **st) {
  (void)st;
  char b[64];
  assert_string_equal(df_serve_log_escape(b, sizeof b, "/v1/models"), "/v1/models");
  assert_string_equal(df_serve_log_escape(b, sizeof b, "/x\nGET / 200\x1b[2J"),
                      "/x\\x0aGET / 200\\x1b[2J");
  assert_string_equal(df_serve_log_escape(b, sizeof b, "a\"b\\c\x7f\xc3\xa9"),
                      "a\\x22b\\x5cc\\x7f\\xc3\\xa9");
  /* truncation never splits an escape */
  char t[6];
  assert_string_equal(df_serve_log_escape(t, sizeof t, "ab\ncd"), "ab");
}

static void test_host(void **st) {
  (void)st;
  const char *none[1] = {NULL};
  assert_true(df_serve_host_ok(NULL, "127.0.0.1", none, 0));
  assert_true(df_serve_host_ok("127.0.0.1:8000", "127.0.0.1", none, 0));
  assert_true(df_serve_host_ok("10.1.2.3", "0.0.0.0", none, 0));
  assert_true(df_serve_host_ok("[::1]:8000", "::1", none, 0));
  assert_true(df_serve_host_ok("LocalHost:8000", "127.0.0.1", none, 0));
  assert_true(df_serve_host_ok("localhost.", "127.0.0.1", none, 0));
  assert_false(df_serve_host_ok("evil.example:8000", "127.0.0.1", none, 0));
  assert_false(df_serve_host_ok("localhost.evil.example", "127.0.0.1", none, 0));
  assert_false(df_serve_host_ok("127.0.0.1.evil.example", "127.0.0.1", none, 0));
  assert_false(df_serve_host_ok("[evil]:80", "127.0.0.1", none, 0));
  assert_false(df_serve_host_ok("127.0.0.1:80x", "127.0.0.1", none, 0));
  assert_false(df_serve_host_ok("", "127.0.0.1", none, 0));
  assert_true(df_serve_host_ok("box.lan:8000", "box.lan", none, 0));
  const char *allow[] = {"gpu.example", "*"};
  assert_true(df_serve_host_ok("GPU.example:8000", "127.0.0.1", allow, 1));
  assert_false(df_serve_host_ok("cpu.example:8000", "127.0.0.1", allow, 1));
  assert_true(df_serve_host_ok("cpu.example:8000", "127.0.0.1", allow, 2));
}

static void test_ctype_cors(void **st) {
  (void)st;
  assert_true(df_serve_ctype_json("application/json"));
  assert_true(df_serve_ctype_json("Application/JSON; charset=utf-8"));
  assert_false(df_serve_ctype_json(NULL));
  assert_false(df_serve_ctype_json("text/plain"));
  assert_false(df_serve_ctype_json("application/x-www-form-urlencoded"));
  assert_false(df_serve_ctype_json("application/jsonp"));
  assert_false(df_serve_ctype_json("multipart/form-data; boundary=x"));
  const char *o[] = {"http://app.example:3000"};
  assert_true(df_serve_cors_ok("http://app.example:3000", o, 1));
  assert_false(df_serve_cors_ok("http://evil.example", o, 1));
  assert_false(df_serve_cors_ok(NULL, o, 1));
  assert_false(df_serve_cors_ok("http://app.example:3000", o, 0));
  const char *any[] = {"*"};
  assert_true(df_serve_cors_ok("http://evil.example", any, 1));
  /* preflight: the requested header names come back; anything else gets the fixed list */
  char ah[256];
  assert_string_equal(df_serve_cors_allow_headers(NULL, ah, sizeof ah), "Authorization, Content-Type");
  assert_string_equal(
      df_serve_cors_allow_headers("authorization,content-type,x-stainless-os,x-stainless-retry-count",
                                  ah, sizeof ah),
      "authorization,content-type,x-stainless-os,x-stainless-retry-count");
  assert_string_equal(df_serve_cors_allow_headers(" x-a , x-b ", ah, sizeof ah), " x-a , x-b ");
  static const char *const refused[] = {"", "x-a,,x-b", "x-a;x-b", "x a", "x-a,", "x-a\r\nSet-Cookie: 1",
                                        "x-\xc3\xa9"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
    assert_string_equal(df_serve_cors_allow_headers(refused[i], ah, sizeof ah),
                        "Authorization, Content-Type");
  char small[8];
  assert_string_equal(df_serve_cors_allow_headers("x-longer-than-eight", small, sizeof small), "Authori");
}

static void test_framing(void **st) {
  (void)st;
  const char *why;
  const char *one[] = {"48"}, *same[] = {"48", " 48"}, *diff[] = {"48", "49"},
             *list[] = {"48, 48"}, *neg[] = {"-1"};
  assert_int_equal(df_serve_framing(one, 0, NULL, &why), 0);
  assert_int_equal(df_serve_framing(one, 1, NULL, &why), 0);
  assert_int_equal(df_serve_framing(same, 2, NULL, &why), 0);
  assert_int_equal(df_serve_framing(diff, 2, NULL, &why), 400);
  assert_non_null(why);
  assert_int_equal(df_serve_framing(list, 1, NULL, &why), 400);
  assert_int_equal(df_serve_framing(neg, 1, NULL, &why), 400);
  assert_int_equal(df_serve_framing(one, 1, "chunked", &why), 400);
  assert_int_equal(df_serve_framing(one, 0, "Chunked ", &why), 0);
  assert_int_equal(df_serve_framing(one, 0, "gzip", &why), 501);
  assert_int_equal(df_serve_framing(one, 0, "gzip, chunked", &why), 501);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_routes),
      cmocka_unit_test(test_auth),
      cmocka_unit_test(test_admit),
      cmocka_unit_test(test_admit_burst_fits_fifo),
      cmocka_unit_test(test_fifo),
      cmocka_unit_test(test_log_escape),
      cmocka_unit_test(test_host),
      cmocka_unit_test(test_ctype_cors),
      cmocka_unit_test(test_framing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

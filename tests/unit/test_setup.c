/* setup's parsers and bookkeeping against independent references:
 * Content-Range parsing, the model-info document (shapes the hub returns
 * with ?blobs=true), the present-ranges journal (torn tails after a kill,
 * damage elsewhere, gaps), hub URLs and cache paths, and the two checksums
 * the hub records (sha256 of LFS files, git blob sha1 of plain files; the
 * expected values come from sha256sum / `git hash-object`, computed once
 * outside deltafin), and the table of remembered redirect targets (origins
 * compared as curl does for its own redirects: scheme, host, port); the
 * waits rate-limit answers ask for (the HTTP date's epoch from Python's
 * calendar.timegm), the hub's environment as huggingface_hub documents it,
 * the model info rebuilt from the tree API, and the size units. */
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
#include "remote/http.h"
#include "remote/hub.h"
#include "remote/ranges.h"
#include "remote/redir.h"
#include "setup/install.h"

static void content_range(void **st) {
  (void)st;
  uint64_t a, b, t;
  const char *ok = "bytes 0-99/1000";
  assert_int_equal(df_http_parse_content_range(ok, strlen(ok), &a, &b, &t), 0);
  assert_true(a == 0 && b == 99 && t == 1000);
  const char *ws = "  bytes 17547264-35094527/1560936091448\r\n";
  assert_int_equal(df_http_parse_content_range(ws, strlen(ws), &a, &b, &t), 0);
  assert_true(a == 17547264 && b == 35094527 && t == 1560936091448ull);
  const char *bad[] = {"bytes 5-4/10",  "bytes 0-10/10", "bytes */10",  "bytes 0-9/*", "bytes 0-9",
                       "byte 0-9/10",   "bytes -9/10",   "bytes 0-9/1x", "bytes 0- 9/10",
                       "bytes 99999999999999999999-1/2", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(df_http_parse_content_range(bad[i], strlen(bad[i]), &a, &b, &t), -1);
}

static const char *INFO =
    "{\"_id\":\"x\",\"id\":\"o/n\",\"sha\":\"0123456789abcdef0123456789abcdef01234567\","
    "\"siblings\":[{\"rfilename\":\"config.json\",\"size\":12,"
    "\"blobId\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"},"
    "{\"rfilename\":\"model-00001-of-00002.safetensors\",\"size\":4966706312,"
    "\"blobId\":\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\",\"lfs\":{\"sha256\":"
    "\"0d4887bdb6270107862a94f0873819fb69bcc61a8b1fac69e2a095861971219f\",\"size\":4966706312,"
    "\"pointerSize\":135}}]}";

static void model_info(void **st) {
  (void)st;
  df_hub_info i;
  df_err e;
  assert_int_equal(df_hub_info_parse(INFO, strlen(INFO), "info", &i, &e), 0);
  assert_string_equal(i.commit, "0123456789abcdef0123456789abcdef01234567");
  assert_int_equal(i.nfiles, 2);
  const df_hub_file *f = df_hub_info_find(&i, "model-00001-of-00002.safetensors");
  assert_non_null(f);
  assert_true(f->lfs && f->size == 4966706312ull);
  assert_string_equal(f->sha256, "0d4887bdb6270107862a94f0873819fb69bcc61a8b1fac69e2a095861971219f");
  assert_false(df_hub_info_find(&i, "config.json")->lfs);
  df_hub_info_free(&i);
  struct {
    const char *json, *needle;
  } bad[] = {
      {"{\"sha\":\"xyz\",\"siblings\":[]}", "'sha'"},
      {"{\"sha\":\"0123456789abcdef0123456789abcdef01234567\"}", "siblings"},
      {"{\"sha\":\"0123456789abcdef0123456789abcdef01234567\",\"siblings\":[{\"rfilename\":\"a\"}]}",
       "blobs=true"},
      {"{\"sha\":\"0123456789abcdef0123456789abcdef01234567\",\"siblings\":[{\"rfilename\":\"../etc/x\","
       "\"size\":1,\"blobId\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}]}",
       "safe relative path"},
      {"{\"sha\":\"0123456789abcdef0123456789abcdef01234567\",\"siblings\":[{\"rfilename\":\"a\","
       "\"size\":1,\"lfs\":{\"sha256\":\"00\",\"size\":1}}]}",
       "64 hex"},
      {"{\"sha\":\"0123456789abcdef0123456789abcdef01234567\",\"siblings\":[{\"rfilename\":\"a\","
       "\"size\":2,\"lfs\":{\"sha256\":"
       "\"0d4887bdb6270107862a94f0873819fb69bcc61a8b1fac69e2a095861971219f\",\"size\":1}}]}",
       "differs"},
      {"{\"sha\":\"0123456789abcdef0123456789abcdef01234567\",\"siblings\":[{\"rfilename\":\"a\","
       "\"size\":2}]}",
       "cannot verify"},
      {"{\"sha\":\"0123456789abcdef0123456789abcdef01234567\",\"siblings\":[{\"rfilename\":\"a\","
       "\"size\":1,\"blobId\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"},{\"rfilename\":\"a\","
       "\"size\":1,\"blobId\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}]}",
       "twice"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    assert_int_equal(df_hub_info_parse(bad[k].json, strlen(bad[k].json), "info", &i, &e), -1);
    if (!strstr(e.msg, bad[k].needle)) fail_msg("case %zu: '%s' lacks '%s'", k, e.msg, bad[k].needle);
  }
}

static void names_and_urls(void **st) {
  (void)st;
  assert_true(df_hub_repo_valid("moonshotai/Kimi-K3"));
  assert_false(df_hub_repo_valid("moonshotai"));
  assert_false(df_hub_repo_valid("a/b/c"));
  assert_false(df_hub_repo_valid("../b"));
  assert_true(df_hub_name_valid("model-00001-of-000096.safetensors"));
  assert_true(df_hub_name_valid("sub/dir/file.json"));
  assert_false(df_hub_name_valid("/etc/passwd"));
  assert_false(df_hub_name_valid("a/../b"));
  assert_false(df_hub_name_valid("a//b"));
  assert_false(df_hub_name_valid("."));
  char *u = df_hub_info_url("https://huggingface.co", "moonshotai/Kimi-K3", "refs/pr/1");
  assert_string_equal(u, "https://huggingface.co/api/models/moonshotai/Kimi-K3/revision/refs%2Fpr%2F1?blobs=true");
  free(u);
  u = df_hub_file_url("http://127.0.0.1:8", "o/n", "0123456789abcdef0123456789abcdef01234567", "a b/c.json");
  assert_string_equal(u, "http://127.0.0.1:8/o/n/resolve/0123456789abcdef0123456789abcdef01234567/a%20b/c.json");
  free(u);
  setenv("HF_ENDPOINT", "https://mirror.example/", 1);
  u = df_hub_endpoint(NULL);
  assert_string_equal(u, "https://mirror.example");
  free(u);
  u = df_hub_endpoint("http://x");
  assert_string_equal(u, "http://x");
  free(u);
  unsetenv("HF_HUB_CACHE");
  setenv("HF_HOME", "/data/hf", 1);
  u = df_hub_cache_snapshot("moonshotai/Kimi-K3", "0123456789abcdef0123456789abcdef01234567");
  assert_string_equal(u, "/data/hf/hub/models--moonshotai--Kimi-K3/snapshots/0123456789abcdef0123456789abcdef01234567");
  free(u);
  setenv("HF_HUB_CACHE", "/c", 1);
  u = df_hub_cache_snapshot("o/n", "0123456789abcdef0123456789abcdef01234567");
  assert_string_equal(u, "/c/models--o--n/snapshots/0123456789abcdef0123456789abcdef01234567");
  free(u);
}

static void checksums(void **st) {
  (void)st;
  char path[] = "/tmp/df_test_setup_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "hello world\n", 12), 12);
  close(fd);
  char h[65], g[41];
  df_err e;
  assert_int_equal(df_hub_sha256_file(path, h, &e), 0);
  /* printf 'hello world\n' | sha256sum */
  assert_string_equal(h, "a948904f2f0f479b8f8197694b30184b0d2ed1c1cd2a1ec0fb85d299a192a447");
  assert_int_equal(df_hub_git_blob_id_file(path, g, &e), 0);
  /* printf 'hello world\n' | git hash-object --stdin */
  assert_string_equal(g, "3b18e512dba79e4c8300dd08aeb37f8e728b8dad");
  df_hub_file f = {.name = "x", .size = 12};
  memcpy(f.blob_id, g, 41);
  assert_int_equal(df_hub_verify_file(path, &f, &e), 0);
  f.blob_id[0] = f.blob_id[0] == 'a' ? 'b' : 'a';
  assert_int_equal(df_hub_verify_file(path, &f, &e), -1);
  assert_non_null(strstr(e.msg, "blob id"));
  f.size = 13;
  assert_int_equal(df_hub_verify_file(path, &f, &e), -1);
  assert_non_null(strstr(e.msg, "13"));
  unlink(path);
}

static void gap_collect(void *ud, uint64_t b, uint64_t e) {
  uint64_t *v = ud;
  v[1 + 2 * v[0]] = b;
  v[2 + 2 * v[0]] = e;
  v[0]++;
}

static void ranges_journal(void **st) {
  (void)st;
  char dir[] = "/tmp/df_test_ranges_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char *p = df_path_join(dir, "x.ranges");
  df_ranges *r;
  df_err e;
  assert_int_equal(df_ranges_open(&r, p, &e), 0);
  assert_int_equal(df_ranges_add(r, 100, 200, 0x1111, &e), 0);
  assert_int_equal(df_ranges_add(r, 0, 50, 0x2222, &e), 0);
  assert_int_equal(df_ranges_add(r, 200, 300, 0x3333, &e), 0);
  assert_true(df_ranges_covered(r, 100, 300));
  assert_false(df_ranges_covered(r, 40, 120));
  assert_true(df_ranges_bytes(r) == 250);
  uint64_t h = 0;
  assert_int_equal(df_ranges_lookup(r, 200, 300, &h), 0);
  assert_true(h == 0x3333);
  assert_int_equal(df_ranges_lookup(r, 200, 299, &h), -1);
  uint64_t g[16] = {0};
  df_ranges_gaps(r, 0, 400, gap_collect, g);
  assert_true(g[0] == 2 && g[1] == 50 && g[2] == 100 && g[3] == 300 && g[4] == 400);
  df_ranges_close(r);
  /* a kill during an append leaves a torn last line: dropped and truncated */
  FILE *f = fopen(p, "a");
  fputs("R 000000000000012c 00000", f);
  fclose(f);
  assert_int_equal(df_ranges_open(&r, p, &e), 0);
  assert_int_equal(df_ranges_count(r), 3);
  assert_int_equal(df_ranges_add(r, 300, 310, 0x4444, &e), 0);
  df_ranges_close(r);
  assert_int_equal(df_ranges_open(&r, p, &e), 0);
  assert_int_equal(df_ranges_count(r), 4);
  df_ranges_close(r);
  /* damage in an earlier line is an error, never silently skipped */
  char *buf;
  size_t len;
  assert_int_equal(df_file_read(p, &buf, &len, &e), 0);
  buf[10] ^= 1;
  df_range *v;
  int n;
  size_t good;
  assert_int_equal(df_ranges_parse(buf, len, "j", &v, &n, &good, &e), -1);
  assert_non_null(strstr(e.msg, "line 1"));
  buf[10] ^= 1;
  assert_int_equal(df_ranges_parse(buf, len, "j", &v, &n, &good, &e), 0);
  assert_int_equal(n, 4);
  assert_true(good == len);
  free(v);
  /* one line's text, formatted independently */
  df_range x = {0x10, 0x20, 0xabcdef};
  char line[80];
  int ll = df_ranges_format(line, &x);
  assert_int_equal(ll, 62);
  assert_memory_equal(line, "R 0000000000000010 0000000000000020 0000000000abcdef ", 53);
  assert_int_equal(df_ranges_parse(line, (size_t)ll, "j", &v, &n, &good, &e), 0);
  assert_true(n == 1 && v[0].begin == 0x10 && v[0].end == 0x20 && v[0].hash == 0xabcdef);
  free(v);
  free(buf);
  unlink(p);
  free(p);
  rmdir(dir);
}

static void redirect_origins(void **st) {
  (void)st;
  const char *res = "https://huggingface.co/o/n/resolve/0123/model-00001.safetensors";
  /* same scheme, host and port, the default port spelled out or not, host case */
  assert_int_equal(df_redir_same_origin(res, "https://huggingface.co/cdn/x?sig=1"), 1);
  assert_int_equal(df_redir_same_origin(res, "https://HuggingFace.CO:443/cdn/x"), 1);
  assert_int_equal(df_redir_same_origin("http://127.0.0.1:80/a", "http://127.0.0.1/b"), 1);
  /* another host, port or scheme: no credentials there */
  assert_int_equal(df_redir_same_origin(res, "https://cdn-lfs.huggingface.co/repos/x?X-Amz=1"), 0);
  assert_int_equal(df_redir_same_origin(res, "https://huggingface.co:8443/cdn/x"), 0);
  assert_int_equal(df_redir_same_origin(res, "http://huggingface.co/cdn/x"), 0);
  assert_int_equal(df_redir_same_origin("http://127.0.0.1:8080/a", "http://127.0.0.1:8081/a"), 0);
  assert_int_equal(df_redir_same_origin("http://127.0.0.1:8080/a", "http://localhost:8080/a"), 0);
  /* a host that only starts like the other's */
  assert_int_equal(df_redir_same_origin("https://hf.co/a", "https://hf.co.evil.example/a"), 0);
  /* unparsable or not http(s) */
  assert_int_equal(df_redir_same_origin(res, "ftp://huggingface.co/x"), 0);
  assert_int_equal(df_redir_same_origin(res, ""), 0);
}

static void redirect_table(void **st) {
  (void)st;
  df_redir *t = df_redir_new(3);
  int same = -1;
  assert_null(df_redir_lookup(t, "http://h:1/a", &same));
  assert_int_equal(df_redir_put(t, "http://h:1/a", "http://cdn:2/a?sig=1"), 0);
  assert_int_equal(df_redir_put(t, "http://h:1/b", "http://h:1/cdn/b"), 0);
  assert_string_equal(df_redir_lookup(t, "http://h:1/a", &same), "http://cdn:2/a?sig=1");
  assert_int_equal(same, 0);
  assert_string_equal(df_redir_lookup(t, "http://h:1/b", &same), "http://h:1/cdn/b");
  assert_int_equal(same, 1);
  /* a newer target replaces the older one, no second entry */
  assert_int_equal(df_redir_put(t, "http://h:1/a", "http://cdn:2/a?sig=2"), 0);
  assert_int_equal(df_redir_count(t), 2);
  assert_string_equal(df_redir_lookup(t, "http://h:1/a", NULL), "http://cdn:2/a?sig=2");
  /* exact keys: another URL of the same file is another entry */
  assert_null(df_redir_lookup(t, "http://h:1/a?x", NULL));
  /* not kept: targets that are not http(s) URLs */
  assert_int_equal(df_redir_put(t, "http://h:1/c", "file:///etc/passwd"), -1);
  assert_int_equal(df_redir_count(t), 2);
  /* bounded: the oldest entry goes when full */
  assert_int_equal(df_redir_put(t, "http://h:1/c", "http://cdn:2/c"), 0);
  assert_int_equal(df_redir_put(t, "http://h:1/d", "http://cdn:2/d"), 0);
  assert_int_equal(df_redir_count(t), 3);
  assert_null(df_redir_lookup(t, "http://h:1/a", NULL));
  assert_non_null(df_redir_lookup(t, "http://h:1/b", NULL));
  assert_non_null(df_redir_lookup(t, "http://h:1/d", NULL));
  /* forgetting (an expired target) */
  assert_int_equal(df_redir_forget(t, "http://h:1/b"), 1);
  assert_int_equal(df_redir_forget(t, "http://h:1/b"), 0);
  assert_null(df_redir_lookup(t, "http://h:1/b", NULL));
  assert_string_equal(df_redir_lookup(t, "http://h:1/c", NULL), "http://cdn:2/c");
  assert_string_equal(df_redir_lookup(t, "http://h:1/d", NULL), "http://cdn:2/d");
  assert_int_equal(df_redir_put(t, "http://h:1/e", "http://cdn:2/e"), 0);
  assert_int_equal(df_redir_count(t), 3);
  df_redir_free(t);
  /* the default capacity holds one entry per shard of a large checkpoint */
  t = df_redir_new(0);
  char from[64], to[64];
  for (int i = 0; i < DF_REDIR_MAX; i++) {
    snprintf(from, sizeof from, "http://h/r/model-%05d.safetensors", i);
    snprintf(to, sizeof to, "http://c/%d", i);
    assert_int_equal(df_redir_put(t, from, to), 0);
  }
  assert_int_equal(df_redir_count(t), DF_REDIR_MAX);
  assert_string_equal(df_redir_lookup(t, "http://h/r/model-00000.safetensors", NULL), "http://c/0");
  df_redir_free(t);
}

static void rate_limit_hints(void **st) {
  (void)st;
  assert_true(df_http_retry_after("120", NULL, 0) == 120);
  /* Wed, 21 Oct 2015 07:28:00 GMT is 1445412480 */
  assert_true(df_http_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", NULL, 1445412480.0 - 30) == 30);
  assert_true(df_http_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", NULL, 1445412480.0 + 5) == 0);
  assert_true(df_http_retry_after(NULL, "\"api\";r=0;t=55", 0) == 55);
  assert_true(df_http_retry_after("", "\"resolvers\";r=12;t=7", 0) == 7);
  assert_true(df_http_retry_after("10", "\"api\";r=0;t=55", 0) == 10); /* Retry-After wins */
  assert_true(df_http_retry_after("soon", NULL, 0) == -1);
  assert_true(df_http_retry_after(NULL, "\"api\";r=0", 0) == -1);
  assert_true(df_http_retry_after(NULL, "\"api\";rt=5", 0) == -1); /* not t= */
  assert_true(df_http_retry_after(NULL, NULL, 0) == -1);
}

static void hub_environment(void **st) {
  (void)st;
  const char *yes[] = {"1", "ON", "on", "Yes", "TRUE", "true"}, *no[] = {"0", "", "no", "2", "off", "y"};
  for (size_t i = 0; i < 6; i++) {
    setenv("DF_T_BOOL", yes[i], 1);
    assert_int_equal(df_hub_env_bool("DF_T_BOOL"), 1);
    setenv("DF_T_BOOL", no[i], 1);
    assert_int_equal(df_hub_env_bool("DF_T_BOOL"), 0);
  }
  unsetenv("DF_T_BOOL");
  assert_int_equal(df_hub_env_bool("DF_T_BOOL"), 0);
  const char *vars[] = {"HF_HOME", "XDG_CACHE_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"};
  for (int i = 0; i < 4; i++) unsetenv(vars[i]);
  setenv("HOME", "/h", 1);
  char *p = df_hub_home();
  assert_string_equal(p, "/h/.cache/huggingface");
  free(p);
  setenv("XDG_CACHE_HOME", "/x", 1);
  p = df_hub_home();
  assert_string_equal(p, "/x/huggingface");
  free(p);
  p = df_hub_cache_dir();
  assert_string_equal(p, "/x/huggingface/hub");
  free(p);
  setenv("HF_HOME", "/hf", 1); /* HF_HOME over XDG_CACHE_HOME */
  p = df_hub_cache_dir();
  assert_string_equal(p, "/hf/hub");
  free(p);
  setenv("HUGGINGFACE_HUB_CACHE", "/legacy", 1);
  p = df_hub_cache_dir();
  assert_string_equal(p, "/legacy");
  free(p);
  setenv("HF_HUB_CACHE", "/c", 1); /* over the legacy name */
  p = df_hub_cache_dir();
  assert_string_equal(p, "/c");
  free(p);
  df_hub_file lfs = {.name = "m.safetensors", .size = 1, .lfs = 1}, git = {.name = "config.json", .size = 1};
  memset(lfs.sha256, 'a', 64);
  memset(git.blob_id, 'b', 40);
  p = df_hub_cache_blob("o/n", &lfs);
  assert_string_equal(p, "/c/models--o--n/blobs/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
  free(p);
  p = df_hub_cache_blob("o/n", &git);
  assert_string_equal(p, "/c/models--o--n/blobs/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
  free(p);
  p = df_hub_cache_ref("o/n", "main");
  assert_string_equal(p, "/c/models--o--n/refs/main");
  free(p);
  assert_null(df_hub_cache_ref("o/n", "../main"));
  for (int i = 0; i < 4; i++) unsetenv(vars[i]);
}

static void info_from_tree(void **st) {
  (void)st;
  const char *info = "{\"sha\":\"0123456789abcdef0123456789abcdef01234567\",\"siblings\":"
                     "[{\"rfilename\":\"config.json\"},{\"rfilename\":\"m.safetensors\"}]}";
  const char *tree =
      "[{\"type\":\"directory\",\"path\":\"docs\",\"oid\":\"1111111111111111111111111111111111111111\"},"
      "{\"type\":\"file\",\"path\":\"config.json\",\"size\":12,"
      "\"oid\":\"2222222222222222222222222222222222222222\"},"
      "{\"type\":\"file\",\"path\":\"m.safetensors\",\"size\":99,"
      "\"oid\":\"3333333333333333333333333333333333333333\",\"lfs\":{\"oid\":"
      "\"4444444444444444444444444444444444444444444444444444444444444444\",\"size\":99,\"pointerSize\":130}}]";
  assert_int_equal(df_hub_info_has_sizes(info, strlen(info)), 0);
  char *out;
  size_t n;
  df_err e;
  assert_int_equal(df_hub_info_from_tree(info, strlen(info), tree, strlen(tree), "t", &out, &n, &e), 0);
  assert_int_equal(df_hub_info_has_sizes(out, n), 1);
  df_hub_info hi;
  assert_int_equal(df_hub_info_parse(out, n, "t", &hi, &e), 0);
  assert_int_equal(hi.nfiles, 2);
  const df_hub_file *c = df_hub_info_find(&hi, "config.json"), *m = df_hub_info_find(&hi, "m.safetensors");
  assert_true(c && m && c->size == 12 && !c->lfs && m->size == 99 && m->lfs);
  assert_string_equal(c->blob_id, "2222222222222222222222222222222222222222");
  assert_string_equal(m->sha256, "4444444444444444444444444444444444444444444444444444444444444444");
  assert_string_equal(m->blob_id, ""); /* the pointer's oid is not the content's */
  assert_string_equal(hi.commit, "0123456789abcdef0123456789abcdef01234567");
  df_hub_info_free(&hi);
  free(out);
  const char *bad = "[{\"type\":\"file\",\"path\":\"x\"}]";
  assert_int_equal(df_hub_info_from_tree(info, strlen(info), bad, strlen(bad), "t", &out, &n, &e), -1);
}

static void size_units(void **st) {
  (void)st;
  char z[24];
  assert_string_equal(df_setup_fmt_size(0, z), "0 B");
  assert_string_equal(df_setup_fmt_size(999, z), "999 B");
  assert_string_equal(df_setup_fmt_size(1000, z), "1.0 KB");
  assert_string_equal(df_setup_fmt_size(7550, z), "7.5 KB");
  assert_string_equal(df_setup_fmt_size(2300000, z), "2.3 MB");
  assert_string_equal(df_setup_fmt_size(1500000000ull, z), "1.50 GB");
  assert_string_equal(df_setup_fmt_size(1560936091448ull, z), "1.56 TB");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(content_range), cmocka_unit_test(model_info),
      cmocka_unit_test(names_and_urls), cmocka_unit_test(checksums),
      cmocka_unit_test(ranges_journal), cmocka_unit_test(redirect_origins),
      cmocka_unit_test(redirect_table), cmocka_unit_test(rate_limit_hints),
      cmocka_unit_test(hub_environment), cmocka_unit_test(info_from_tree),
      cmocka_unit_test(size_units),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

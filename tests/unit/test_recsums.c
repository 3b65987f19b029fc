/* The record-sums document (remote/recsums.h; the layout check: setup/recsums.h): the strict parser, lookups, the
 * sha256 check of a record's bytes (expected digests are the published
 * test vectors: sha256("abc"), sha256("")), the check against the hub's model
 * info, and, on a generated checkpoint, the document df_recsums_build writes
 * against the checkpoint's own layout (and one with a record cut short). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"
#include "base/util.h"
#include "format/config.h"
#include "remote/hub.h"
#include "setup/recsums.h"
#include "synth/synth.h"

#define SHA_ABC "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define SHA_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static const char *DOC =
    "{\"format\":\"deltafin-record-sums/1\",\"repo\":\"o/n\","
    "\"shards\":[{\"name\":\"a.safetensors\",\"size\":100,\"sha256\":\"" SHA_EMPTY "\"},"
    "{\"name\":\"b.safetensors\",\"size\":50,\"sha256\":\"" SHA_ABC "\"}],"
    "\"records\":[{\"layer\":1,\"expert\":1,\"shard\":0,\"offset\":40,\"length\":3,\"sha256\":\"" SHA_ABC "\"},"
    "{\"layer\":1,\"expert\":0,\"shard\":0,\"offset\":10,\"length\":3,\"sha256\":\"" SHA_ABC "\"},"
    "{\"layer\":2,\"expert\":0,\"shard\":1,\"offset\":47,\"length\":3,\"sha256\":\"" SHA_EMPTY "\"}]}";

static void parse_and_lookup(void **st) {
  (void)st;
  df_recsums *r;
  df_err e;
  assert_int_equal(df_recsums_parse(DOC, strlen(DOC), "doc", &r, &e), 0);
  assert_int_equal(df_recsums_nshards(r), 2);
  assert_int_equal(df_recsums_nrecords(r), 3);
  assert_string_equal(df_recsums_shard(r, 1)->name, "b.safetensors");
  assert_int_equal(df_recsums_find_shard(r, "b.safetensors"), 1);
  assert_int_equal(df_recsums_find_shard(r, "c.safetensors"), -1);
  const df_recsum *q = df_recsums_lookup(r, 0, 10);
  assert_non_null(q);
  assert_true(q->layer == 1 && q->expert == 0 && q->len == 3);
  assert_int_equal(df_recsums_verify(q, "abc"), 0);
  assert_int_equal(df_recsums_verify(q, "abd"), -1);
  q = df_recsums_lookup(r, 0, 40);
  assert_true(q && q->expert == 1);
  assert_null(df_recsums_lookup(r, 0, 11)); /* only a record's own start */
  assert_null(df_recsums_lookup(r, 1, 10));
  q = df_recsums_lookup(r, 1, 47);
  assert_true(q && q->layer == 2);
  assert_int_equal(df_recsums_verify(q, "abc"), -1); /* its sum is sha256("") */
  df_recsums_free(r);
}

static char *with(const char *from, const char *to) {
  const char *p = strstr(DOC, from);
  assert_non_null(p);
  size_t n = strlen(DOC) - strlen(from) + strlen(to) + 1;
  char *s = malloc(n);
  snprintf(s, n, "%.*s%s%s", (int)(p - DOC), DOC, to, p + strlen(from));
  return s;
}

static void rejects(void **st) {
  (void)st;
  struct {
    const char *from, *to, *needle;
  } bad[] = {
      {"deltafin-record-sums/1", "deltafin-record-sums/2", "'format'"},
      {"\"a.safetensors\",\"size\":100", "\"../a\",\"size\":100", "not a file name"},
      {"\"a.safetensors\",\"size\":100", "\"d/a\",\"size\":100", "not a file name"},
      {"\"b.safetensors\"", "\"a.safetensors\"", "listed twice"},
      {"\"size\":100", "\"size\":-1", "'size'"},
      {"\"size\":50,\"sha256\":\"ba", "\"size\":50,\"sha256\":\"BA", "64 lowercase hex"},
      {"\"offset\":40", "\"offset\":98", "not inside"},
      {"\"offset\":40,\"length\":3", "\"offset\":40,\"length\":0", "not inside"},
      {"\"offset\":40", "\"offset\":12", "overlap"},
      {"\"layer\":1,\"expert\":1", "\"layer\":1,\"expert\":0", "listed twice"},
      {"\"shard\":1", "\"shard\":2", "out of range"},
      {"\"shard\":1", "\"shard\":\"b\"", "needs layer"},
      {"\"repo\":\"o/n\"", "\"repo\":\"o/n\",\"repo\":\"x\"", "not JSON"},
      {"\"records\":[", "\"records\":{\"x\":[", "not JSON"},
      {"\"size\":50,", "\"size\":50,\"spans\":[{\"name\":\"header\",\"offset\":0,\"length\":8,"
       "\"sha256\":\"" SHA_ABC "\"},{\"name\":\"t\",\"offset\":7,\"length\":2,\"sha256\":\"" SHA_ABC "\"}],",
       "overlap"},
      {"\"size\":50,", "\"size\":50,\"spans\":[{\"name\":\"t\",\"offset\":49,\"length\":2,"
       "\"sha256\":\"" SHA_ABC "\"}],", "not inside"},
      {"\"size\":50,", "\"size\":50,\"spans\":[{\"name\":\"t\",\"offset\":1}],", "spans[0] needs"},
      {"\"size\":50,", "\"size\":50,\"spans\":7,", "'spans' must be an array"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *s = with(bad[i].from, bad[i].to);
    df_recsums *r = (df_recsums *)1;
    df_err e;
    assert_int_equal(df_recsums_parse(s, strlen(s), "doc", &r, &e), -1);
    assert_null(r);
    if (!strstr(e.msg, bad[i].needle)) fail_msg("case %zu: '%s' lacks '%s'", i, e.msg, bad[i].needle);
    free(s);
  }
  const char *empty = "{\"format\":\"deltafin-record-sums/1\",\"shards\":[],\"records\":[]}";
  df_recsums *r;
  df_err e;
  assert_int_equal(df_recsums_parse(empty, strlen(empty), "doc", &r, &e), -1);
  assert_non_null(strstr(e.msg, "non-empty"));
}

static const char *INFO_FMT =
    "{\"sha\":\"0123456789abcdef0123456789abcdef01234567\",\"siblings\":["
    "{\"rfilename\":\"a.safetensors\",\"size\":%d,\"blobId\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
    "\"lfs\":{\"sha256\":\"" SHA_EMPTY "\",\"size\":%d,\"pointerSize\":134}},"
    "{\"rfilename\":\"b.safetensors\",\"size\":50,\"blobId\":\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\","
    "\"lfs\":{\"sha256\":\"%s\",\"size\":50,\"pointerSize\":134}}]}";

static int check_with(int size_a, const char *sha_b, df_err *e) {
  char info[2048];
  snprintf(info, sizeof info, INFO_FMT, size_a, size_a, sha_b);
  df_hub_info hi;
  assert_int_equal(df_hub_info_parse(info, strlen(info), "info", &hi, e), 0);
  df_recsums *r;
  assert_int_equal(df_recsums_parse(DOC, strlen(DOC), "doc", &r, e), 0);
  int rc = df_recsums_check_info(r, &hi, "doc", e);
  df_recsums_free(r);
  df_hub_info_free(&hi);
  return rc;
}

static void against_info(void **st) {
  (void)st;
  df_err e;
  assert_int_equal(check_with(100, SHA_ABC, &e), 0);
  assert_int_equal(check_with(100, SHA_EMPTY, &e), -1);
  assert_non_null(strstr(e.msg, "record sums are for another revision/repo"));
  assert_non_null(strstr(e.msg, "b.safetensors"));
  assert_int_equal(check_with(101, SHA_ABC, &e), -1);
  assert_non_null(strstr(e.msg, "another size"));
}

/* df_recsums_build on a generated checkpoint: the document parses, matches
 * the checkpoint's layout, and each record's sum is its bytes' sha256; a
 * document with a record one byte short does not match the layout. */
static void build_and_layout(void **st) {
  (void)st;
  df_log_verbose = 0;
  char root[] = "/tmp/df_test_recsums_XXXXXX";
  assert_non_null(mkdtemp(root));
  char *model = df_path_join(root, "m"), *out = df_path_join(root, "sums.json");
  df_synth_opts o = {.preset = "tiny", .seed = 3, .out_dir = model, .force = 1};
  df_err e;
  assert_int_equal(df_synth_make_model(&o, &e), 0);
  df_recsums_report rep;
  if (df_recsums_build(model, out, 2, &rep, &e)) fail_msg("%s", e.msg);
  char *buf;
  size_t len;
  assert_int_equal(df_file_read(out, &buf, &len, &e), 0);
  df_recsums *r;
  assert_int_equal(df_recsums_parse(buf, len, out, &r, &e), 0);
  assert_int_equal(df_recsums_nrecords(r), rep.records);
  df_config c;
  char *cp = df_path_join(model, "config.json");
  assert_int_equal(df_config_load(&c, cp, &e), 0);
  assert_int_equal(rep.records, (c.n_layers - c.first_k_dense) * c.n_experts);
  df_st_set set;
  assert_int_equal(df_st_set_open(&set, model, &e), 0);
  if (df_recsums_check_set(r, &set, &c, "sums", &e)) fail_msg("%s", e.msg);
  /* every record's sum is its bytes' sha256 */
  for (int i = 0; i < df_recsums_nrecords(r); i++) {
    const df_recsum *q = df_recsums_record(r, i);
    char *sp = df_path_join(model, df_recsums_shard(r, q->shard)->name), *sb;
    size_t sl;
    assert_int_equal(df_file_read(sp, &sb, &sl, &e), 0);
    assert_true(q->off + q->len <= sl);
    assert_int_equal(df_recsums_verify(q, sb + q->off), 0);
    sb[q->off + q->len / 2] ^= 1;
    assert_int_equal(df_recsums_verify(q, sb + q->off), -1);
    free(sb);
    free(sp);
  }
  /* every span (header, spine tensors) is its bytes' sha256, and the
   * first is the header: [0, 8 + the little-endian length in bytes 0-7) */
  int nspans = 0;
  for (int i = 0; i < df_recsums_nshards(r); i++) {
    const df_recsum_shard *sh = df_recsums_shard(r, i);
    char *sp = df_path_join(model, sh->name), *sb;
    size_t sl;
    assert_int_equal(df_file_read(sp, &sb, &sl, &e), 0);
    assert_true(sh->nspans > 0);
    uint64_t hl = 0;
    for (int k = 7; k >= 0; k--) hl = hl << 8 | (uint8_t)sb[k];
    assert_string_equal(sh->spans[0].name, "header");
    assert_true(sh->spans[0].off == 0 && sh->spans[0].len == 8 + hl);
    for (int k = 0; k < sh->nspans; k++) {
      const df_recsum_span *x = &sh->spans[k];
      assert_true(x->off + x->len <= sl);
      assert_int_equal(df_recsums_check_bytes(x->sha256, sb + x->off, x->len), 0);
      assert_null(strstr(x->name, ".experts."));
      nspans++;
    }
    free(sb);
    free(sp);
  }
  assert_true(nspans > df_recsums_nshards(r));
  df_recsums_free(r);
  /* the first record one byte shorter: the layout check names it */
  char *p = strstr(buf, "\"records\":");
  assert_non_null(p);
  p = strstr(p, "\"length\":");
  assert_non_null(p);
  p += strlen("\"length\":");
  char *end;
  unsigned long long l = strtoull(p, &end, 10);
  size_t n2 = len + 32;
  char *b2 = malloc(n2);
  int k = snprintf(b2, n2, "%.*s%llu%s", (int)(p - buf), buf, l - 1, end);
  free(buf);
  buf = b2;
  len = (size_t)k;
  assert_int_equal(df_recsums_parse(buf, len, out, &r, &e), 0);
  assert_int_equal(df_recsums_check_set(r, &set, &c, "sums", &e), -1);
  assert_non_null(strstr(e.msg, "have no entry for layer"));
  df_recsums_free(r);
  df_st_set_close(&set);
  free(buf);
  free(cp);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
  free(model);
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(parse_and_lookup),
      cmocka_unit_test(rejects),
      cmocka_unit_test(against_info),
      cmocka_unit_test(build_and_layout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* safetensors: writer -> reader round trips, sharded sets, and every
 * rejection the reader promises, each with a message naming what is wrong. */
#include <dirent.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
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
#include "format/safetensors.h"

static char dir[64];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static int setup(void **st) {
  (void)st;
  strcpy(dir, "/tmp/df_test_st_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **st) {
  (void)st;
  return nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static char *path_in(const char *name) { return df_path_join(dir, name); }

/* Number of directory entries whose name contains `needle`. */
static int count_entries(const char *needle) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strstr(de->d_name, needle)) n++;
  closedir(d);
  return n;
}

static uint8_t pattern(const char *name, uint64_t i) {
  uint32_t h = 2166136261u;
  for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
  return (uint8_t)((h >> 8) + i * 131 + (i >> 8));
}

typedef struct spec {
  const char *name;
  df_dtype dt;
  int ndim;
  int64_t shape[4];
} spec;

static const spec every_dtype[] = {
    {"a.bf16", DF_DT_BF16, 2, {3, 5}},   {"b.f16", DF_DT_F16, 1, {7}},
    {"c.f32", DF_DT_F32, 3, {2, 3, 4}},  {"d.f64", DF_DT_F64, 2, {3, 1}},
    {"e.u8", DF_DT_U8, 2, {5, 3}},       {"f.i8", DF_DT_I8, 1, {9}},
    {"g.i32", DF_DT_I32, 2, {1, 3}},     {"h.i64", DF_DT_I64, 1, {2}},
    {"i.scalar", DF_DT_F32, 0, {0}},     {"j.empty", DF_DT_BF16, 2, {0, 4}},
    {"k.last", DF_DT_U8, 1, {1}},
};
#define N_EVERY (int)(sizeof every_dtype / sizeof *every_dtype)

static uint64_t spec_bytes(const spec *s) {
  uint64_t n = df_dtype_size(s->dt);
  for (int i = 0; i < s->ndim; i++) n *= (uint64_t)s->shape[i];
  return n;
}

/* Writes specs[] to path with data from pattern(), in chunks of `chunk`
 * bytes that cross tensor boundaries (0 = one write per tensor). */
static void write_file(const char *path, const spec *specs, int n, uint64_t align, size_t chunk) {
  df_err e = {{0}};
  df_st_writer *w = df_st_writer_new(path);
  if (align) df_st_writer_set_align(w, align);
  df_st_writer_set_metadata(w, "format", "pt");
  df_st_writer_set_metadata(w, "note", "unit test");
  for (int i = 0; i < n; i++)
    assert_int_equal(df_st_writer_declare(w, specs[i].name, specs[i].dt, specs[i].ndim,
                                          specs[i].shape, &e), 0);
  assert_int_equal(df_st_writer_begin(w, &e), 0);
  uint64_t total = 0;
  for (int i = 0; i < n; i++) total += spec_bytes(&specs[i]);
  uint8_t *all = df_xmalloc(total + 1);
  uint64_t k = 0;
  for (int i = 0; i < n; i++)
    for (uint64_t j = 0; j < spec_bytes(&specs[i]); j++) all[k++] = pattern(specs[i].name, j);
  if (chunk == 0) {
    k = 0;
    for (int i = 0; i < n; i++) {
      assert_int_equal(df_st_writer_write(w, all + k, spec_bytes(&specs[i]), &e), 0);
      k += spec_bytes(&specs[i]);
    }
  } else {
    for (k = 0; k < total; k += chunk) {
      size_t c = total - k < chunk ? (size_t)(total - k) : chunk;
      assert_int_equal(df_st_writer_write(w, all + k, c, &e), 0);
    }
  }
  free(all);
  if (df_st_writer_finish(w, &e) != 0) fail_msg("finish: %s", e.msg);
  df_st_writer_free(w);
}

static void check_file(const df_st_file *f, const spec *specs, int n, uint64_t align) {
  assert_int_equal(f->ntensors, n);
  for (int i = 1; i < f->ntensors; i++)
    assert_true(strcmp(f->tensors[i - 1].name, f->tensors[i].name) < 0);
  for (int i = 0; i < n; i++) {
    const df_tensor *t = df_st_file_find(f, specs[i].name);
    assert_non_null(t);
    assert_int_equal(t->dtype, specs[i].dt);
    assert_int_equal(t->ndim, specs[i].ndim);
    for (int d = 0; d < t->ndim; d++) assert_int_equal(t->shape[d], specs[i].shape[d]);
    assert_int_equal(t->nbytes, spec_bytes(&specs[i]));
    assert_non_null(t->data);
    assert_ptr_equal(t->data, f->map + t->offset);
    if (align > 1 && t->nbytes) assert_int_equal(t->offset % align, 0);
    const uint8_t *p = t->data;
    for (uint64_t j = 0; j < t->nbytes; j++) assert_int_equal(p[j], pattern(specs[i].name, j));
  }
  /* header padded so data starts 8-aligned (or align-aligned) */
  uint64_t n_hdr = 0;
  for (int i = 7; i >= 0; i--) n_hdr = (n_hdr << 8) | f->map[i];
  assert_int_equal((8 + n_hdr) % (align > 8 ? align : 8), 0);
  assert_non_null(f->metadata_json);
  assert_non_null(strstr(f->metadata_json, "\"format\":\"pt\""));
  assert_non_null(strstr(f->metadata_json, "\"note\":\"unit test\""));
}

static void test_roundtrip_every_dtype(void **st) {
  (void)st;
  const uint64_t aligns[] = {0, 1, 8, 64, 4096};
  const size_t chunks[] = {0, 1, 7, 1000};
  for (size_t a = 0; a < sizeof aligns / sizeof *aligns; a++)
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
      char *p = path_in("rt.safetensors");
      write_file(p, every_dtype, N_EVERY, aligns[a], chunks[c]);
      df_st_file f;
      df_err e = {{0}};
      if (df_st_open(&f, p, &e) != 0) fail_msg("open: %s", e.msg);
      assert_true(f.fd >= 0);
      check_file(&f, every_dtype, N_EVERY, aligns[a]);
      assert_null(df_st_file_find(&f, "nope"));
      assert_null(df_st_file_find(&f, ""));
      df_st_close(&f);
      assert_int_equal(count_entries(".tmp."), 0);
      unlink(p);
      free(p);
    }
}

static void test_find_many(void **st) {
  (void)st;
  enum { N = 300 };
  spec s[N];
  char names[N][32];
  for (int i = 0; i < N; i++) {
    /* declared in an order unrelated to the sorted order */
    snprintf(names[i], sizeof names[i], "t.%d.w", (i * 7919) % N);
    s[i] = (spec){names[i], DF_DT_U8, 1, {i % 5 + 1}};
  }
  char *p = path_in("many.safetensors");
  write_file(p, s, N, 0, 0);
  df_st_file f;
  df_err e = {{0}};
  assert_int_equal(df_st_open(&f, p, &e), 0);
  check_file(&f, s, N, 0);
  assert_null(df_st_file_find(&f, "t.300.w"));
  assert_null(df_st_file_find(&f, "t.1"));
  df_st_close(&f);
  free(p);
}

/* ---- writer failures never leave a file behind ---- */

static void test_writer_failures_leave_nothing(void **st) {
  (void)st;
  char *p = path_in("w.safetensors");
  df_err e = {{0}};
  int64_t sh[2] = {4, 4};

  /* incomplete: finish names the short tensor */
  df_st_writer *w = df_st_writer_new(p);
  assert_int_equal(df_st_writer_declare(w, "x.weight", DF_DT_F32, 2, sh, &e), 0);
  assert_int_equal(df_st_writer_declare(w, "y.weight", DF_DT_F32, 2, sh, &e), 0);
  assert_int_equal(df_st_writer_begin(w, &e), 0);
  assert_int_equal(count_entries(".tmp."), 1);
  uint8_t buf[80] = {0};
  assert_int_equal(df_st_writer_write(w, buf, 64 + 10, &e), 0);
  assert_int_equal(df_st_writer_finish(w, &e), -1);
  assert_non_null(strstr(e.msg, "y.weight"));
  assert_non_null(strstr(e.msg, "w.safetensors"));
  df_st_writer_free(w);
  assert_int_equal(count_entries(".tmp."), 0);
  assert_false(df_file_exists(p));

  /* abandoned after begin */
  w = df_st_writer_new(p);
  assert_int_equal(df_st_writer_declare(w, "x.weight", DF_DT_F32, 2, sh, &e), 0);
  assert_int_equal(df_st_writer_begin(w, &e), 0);
  assert_int_equal(df_st_writer_write(w, buf, 8, &e), 0);
  df_st_writer_free(w);
  assert_int_equal(count_entries(".tmp."), 0);
  assert_false(df_file_exists(p));

  /* too many bytes */
  w = df_st_writer_new(p);
  assert_int_equal(df_st_writer_declare(w, "x.weight", DF_DT_U8, 1, sh, &e), 0);
  assert_int_equal(df_st_writer_begin(w, &e), 0);
  assert_int_equal(df_st_writer_write(w, buf, 5, &e), -1);
  assert_int_equal(df_st_writer_finish(w, &e), -1);
  df_st_writer_free(w);
  assert_int_equal(count_entries(".tmp."), 0);
  assert_false(df_file_exists(p));

  /* declaration errors */
  w = df_st_writer_new(p);
  assert_int_equal(df_st_writer_declare(w, "x.weight", DF_DT_U8, 1, sh, &e), 0);
  assert_int_equal(df_st_writer_declare(w, "x.weight", DF_DT_U8, 1, sh, &e), -1);
  assert_non_null(strstr(e.msg, "x.weight"));
  assert_int_equal(df_st_writer_declare(w, "__metadata__", DF_DT_U8, 1, sh, &e), -1);
  int64_t neg[1] = {-1};
  assert_int_equal(df_st_writer_declare(w, "neg", DF_DT_U8, 1, neg, &e), -1);
  assert_non_null(strstr(e.msg, "neg"));
  int64_t big[3] = {INT64_MAX / 2, 4, 1};
  assert_int_equal(df_st_writer_declare(w, "big", DF_DT_U8, 3, big, &e), -1);
  assert_int_equal(df_st_writer_declare(w, "nine", DF_DT_U8, 9, sh, &e), -1);
  df_st_writer_set_align(w, 12); /* not a multiple of 8 */
  assert_int_equal(df_st_writer_begin(w, &e), -1);
  df_st_writer_free(w);
  assert_int_equal(count_entries(".tmp."), 0);
  assert_false(df_file_exists(p));

  /* a finished file is complete and the tmp is gone */
  w = df_st_writer_new(p);
  assert_int_equal(df_st_writer_declare(w, "x.weight", DF_DT_U8, 1, sh, &e), 0);
  assert_int_equal(df_st_writer_begin(w, &e), 0);
  assert_int_equal(df_st_writer_write(w, buf, 4, &e), 0);
  assert_int_equal(df_st_writer_finish(w, &e), 0);
  df_st_writer_free(w);
  assert_int_equal(count_entries(".tmp."), 0);
  assert_true(df_file_exists(p));
  unlink(p);
  free(p);
}

/* ---- positional writes (make-model's parallel generator) ---- */

typedef struct pw_arg {
  df_st_writer *w;
  const spec *s;
  int tensor, part, parts;
} pw_arg;

/* One thread writes part `part` of `parts` of a tensor, last part first. */
static void *pw_thread(void *arg) {
  const pw_arg *a = arg;
  uint64_t n = spec_bytes(a->s), b = n * (uint64_t)a->part / (uint64_t)a->parts,
           end = n * (uint64_t)(a->part + 1) / (uint64_t)a->parts;
  uint8_t *buf = df_xmalloc(end - b + 1);
  for (uint64_t i = b; i < end; i++) buf[i - b] = pattern(a->s->name, i);
  df_err e = {{0}};
  int rc = df_st_writer_pwrite(a->w, a->tensor, b, buf, (size_t)(end - b), &e);
  free(buf);
  return rc ? (void *)1 : NULL;
}

static const spec pw_specs[] = {
    {"a.w", DF_DT_BF16, 2, {300, 70}}, {"b.hole", DF_DT_BF16, 2, {4096, 8}},
    {"c.f32", DF_DT_F32, 1, {1000}},  {"d.empty", DF_DT_U8, 1, {0}},
    {"e.tail_hole", DF_DT_U8, 1, {20000}},
};

/* Declares pw_specs, begins, and returns the writer. */
static df_st_writer *pw_begin(const char *p, uint64_t align) {
  df_err e = {{0}};
  df_st_writer *w = df_st_writer_new(p);
  df_st_writer_set_align(w, align);
  for (int i = 0; i < 5; i++)
    assert_int_equal(df_st_writer_declare(w, pw_specs[i].name, pw_specs[i].dt, pw_specs[i].ndim,
                                          pw_specs[i].shape, &e), 0);
  assert_int_equal(df_st_writer_begin(w, &e), 0);
  return w;
}

static void test_writer_positional(void **st) {
  (void)st;
  char *p = path_in("pw.safetensors");
  df_err e = {{0}};
  for (uint64_t align = 1; align <= 64; align *= 64) {
    df_st_writer *w = pw_begin(p, align);
    /* a.w in 7 parts and c.f32 in 3, all at once from 10 threads */
    pthread_t th[10];
    pw_arg args[10];
    for (int i = 0; i < 10; i++) {
      int a = i < 7;
      args[i] = (pw_arg){w, &pw_specs[a ? 0 : 2], a ? 0 : 2, a ? 6 - i : 9 - i, a ? 7 : 3};
      assert_int_equal(pthread_create(&th[i], NULL, pw_thread, &args[i]), 0);
    }
    for (int i = 0; i < 10; i++) {
      void *r;
      pthread_join(th[i], &r);
      assert_null(r);
    }
    assert_int_equal(df_st_writer_hole(w, 1, &e), 0);
    assert_int_equal(df_st_writer_hole(w, 3, &e), 0);
    assert_int_equal(df_st_writer_hole(w, 4, &e), 0);
    uint8_t x = 0;
    assert_int_equal(df_st_writer_write(w, &x, 1, &e), -1); /* never both ways */
    uint64_t size = df_st_writer_file_size(w);
    assert_int_equal(df_st_writer_finish(w, &e), 0);
    df_st_writer_free(w);
    assert_int_equal(count_entries(".tmp."), 0);

    df_st_file f;
    assert_int_equal(df_st_open(&f, p, &e), 0);
    assert_int_equal(f.size, size); /* the trailing hole is part of the file */
    for (int i = 0; i < 5; i++) {
      const df_tensor *t = df_st_file_find(&f, pw_specs[i].name);
      assert_non_null(t);
      assert_int_equal(t->nbytes, spec_bytes(&pw_specs[i]));
      const uint8_t *d = t->data;
      int hole = i == 1 || i == 4;
      for (uint64_t j = 0; j < t->nbytes; j++)
        assert_int_equal(d[j], hole ? 0 : pattern(pw_specs[i].name, j));
    }
    df_st_close(&f);
    unlink(p);
  }

  /* half of a.w never written: finish says how many bytes are in, no file is left */
  df_st_writer *w = pw_begin(p, 1);
  pw_arg half = {w, &pw_specs[0], 0, 0, 2};
  assert_null(pw_thread(&half));
  pw_arg c = {w, &pw_specs[2], 2, 0, 1};
  assert_null(pw_thread(&c));
  static const int holes[] = {1, 3, 4};
  for (int i = 0; i < 3; i++) assert_int_equal(df_st_writer_hole(w, holes[i], &e), 0);
  assert_int_equal(df_st_writer_finish(w, &e), -1);
  assert_non_null(strstr(e.msg, "declared bytes"));
  df_st_writer_free(w);
  assert_int_equal(count_entries(".tmp."), 0);
  assert_false(df_file_exists(p));

  /* ranges outside a tensor, tensors never declared: refused, and the file fails */
  w = pw_begin(p, 1);
  uint8_t buf[64] = {0};
  assert_int_equal(df_st_writer_pwrite(w, 2, 3990, buf, 11, &e), -1); /* past c.f32's end */
  assert_non_null(strstr(e.msg, "c.f32"));
  assert_int_equal(df_st_writer_pwrite(w, 5, 0, buf, 1, &e), -1);
  assert_non_null(strstr(e.msg, "#5"));
  assert_int_equal(df_st_writer_hole(w, -1, &e), -1);
  assert_int_equal(df_st_writer_finish(w, &e), -1);
  df_st_writer_free(w);
  assert_int_equal(count_entries(".tmp."), 0);
  assert_false(df_file_exists(p));
  free(p);
}

/* ---- parser rejections, on in-memory files ---- */

/* Builds 8-byte length + json + `data` zero bytes. */
static uint8_t *raw(const char *json, size_t data, size_t *len) {
  size_t n = strlen(json);
  *len = 8 + n + data;
  uint8_t *b = df_xcalloc(1, *len);
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)n >> (8 * i));
  memcpy(b + 8, json, n);
  return b;
}

/* Parses json+data; expects failure with every needle in the message. */
static void expect_reject(const char *json, size_t data, const char *n1, const char *n2) {
  size_t len;
  uint8_t *b = raw(json, data, &len);
  df_st_file f;
  df_err e = {{0}};
  int rc = df_st_parse(&f, b, len, len, "bad.safetensors", &e);
  if (rc == 0) fail_msg("accepted: %s", json);
  if (!strstr(e.msg, "bad.safetensors")) fail_msg("message lacks the label: %s", e.msg);
  if (n1 && !strstr(e.msg, n1)) fail_msg("message lacks '%s': %s", n1, e.msg);
  if (n2 && !strstr(e.msg, n2)) fail_msg("message lacks '%s': %s", n2, e.msg);
  assert_null(f.tensors);
  assert_null(f.metadata_json);
  df_st_close(&f); /* safe on a failed parse */
  free(b);
}

static void expect_accept(const char *json, size_t data, int ntensors) {
  size_t len;
  uint8_t *b = raw(json, data, &len);
  df_st_file f;
  df_err e = {{0}};
  if (df_st_parse(&f, b, len, len, "ok.safetensors", &e) != 0) fail_msg("%s: %s", json, e.msg);
  assert_int_equal(f.ntensors, ntensors);
  df_st_close(&f);
  free(b);
}

static void test_reject_lengths(void **st) {
  (void)st;
  df_st_file f;
  df_err e = {{0}};
  uint8_t small[5] = {1, 0, 0, 0, 0};
  assert_int_equal(df_st_parse(&f, small, 5, 5, "short.st", &e), -1);
  assert_non_null(strstr(e.msg, "short.st"));

  uint8_t b[16] = {0};
  uint64_t n = DF_ST_MAX_HEADER + 1ull;
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
  assert_int_equal(df_st_parse(&f, b, 16, 1ull << 40, "huge.st", &e), -1);
  assert_non_null(strstr(e.msg, "huge.st"));
  assert_non_null(strstr(e.msg, "limit"));

  n = 9; /* 8 + 9 > 16 */
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
  assert_int_equal(df_st_parse(&f, b, 16, 16, "past.st", &e), -1);
  assert_non_null(strstr(e.msg, "past.st"));
  n = UINT64_MAX; /* must not wrap around */
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
  assert_int_equal(df_st_parse(&f, b, 16, 16, "wrap.st", &e), -1);

  /* the buffer shorter than the header the file claims */
  size_t len;
  uint8_t *r = raw("{}", 0, &len);
  assert_int_equal(df_st_parse(&f, r, len - 1, len, "buf.st", &e), -1);
  free(r);
}

static void test_reject_json(void **st) {
  (void)st;
  expect_reject("{\"a\":", 0, "JSON", NULL);
  expect_reject("[1,2]", 0, "object", NULL);
  expect_reject("{} x", 0, NULL, NULL);
  expect_reject("\"str\"", 0, NULL, NULL);
  /* not UTF-8: a raw 0xff byte inside a name */
  expect_reject("{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                "UTF-8", NULL);
  /* overlong encoding of '/' */
  expect_reject("{\"a\xc0\xaf\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                "UTF-8", NULL);
}

static void test_reject_entries(void **st) {
  (void)st;
#define T(x) "{\"layers.0.w\":" x "}"
  expect_reject(T("{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}"), 2,
                "layers.0.w", "F8_E4M3");
  expect_reject(T("{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}"), 8, "layers.0.w",
                "12");
  expect_reject(T("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"), 4, "layers.0.w",
                "beyond");
  expect_reject(T("{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}"), 8, "layers.0.w",
                "shape");
  expect_reject(T("{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}"), 8,
                "layers.0.w", "shape");
  expect_reject(T("{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}"), 1,
                "layers.0.w", "dimensions");
  expect_reject(T("{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,0]}"), 2, "layers.0.w",
                "begin");
  expect_reject(T("{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0]}"), 2, "layers.0.w",
                "data_offsets");
  expect_reject(T("{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,-2]}"), 2, "layers.0.w",
                "data_offsets");
  expect_reject(T("{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,\"2\"]}"), 2,
                "layers.0.w", "data_offsets");
  expect_reject(T("{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,2]}"), 2, "layers.0.w",
                "dtype");
  expect_reject(T("{\"shape\":[2],\"data_offsets\":[0,2]}"), 2, "layers.0.w", "dtype");
  expect_reject(T("{\"dtype\":\"U8\",\"data_offsets\":[0,2]}"), 2, "layers.0.w", "shape");
  expect_reject(T("{\"dtype\":\"U8\",\"shape\":[2]}"), 2, "layers.0.w", "data_offsets");
  expect_reject(T("{\"dtype\":\"U8\",\"shape\":2,\"data_offsets\":[0,2]}"), 2, "layers.0.w",
                "shape");
  expect_reject(T("[1]"), 2, "layers.0.w", NULL);
  /* product overflows 64 bits */
  expect_reject(T("{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                  "\"data_offsets\":[0,0]}"),
                0, "layers.0.w", "overflow");
  expect_reject(T("{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
                  "\"data_offsets\":[0,0]}"),
                0, "layers.0.w", "overflow");
  /* end offset near 2^63: beyond the file, no wrap-around */
  expect_reject(T("{\"dtype\":\"U8\",\"shape\":[2],"
                  "\"data_offsets\":[9223372036854775805,9223372036854775807]}"),
                2, "layers.0.w", "beyond");
#undef T
  expect_reject("{\"__metadata__\":{\"a\":1}}", 0, "__metadata__", NULL);
  expect_reject("{\"__metadata__\":[]}", 0, "__metadata__", NULL);
}

static void test_reject_overlap_and_duplicates(void **st) {
  (void)st;
  expect_reject("{\"one\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"two\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[3,7]}}",
                8, "one", "two");
  /* contained inside a bigger one, listed first */
  expect_reject("{\"inner\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
                "\"outer\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]}}",
                16, "inner", "outer");
  /* the same range twice */
  expect_reject("{\"p\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"q\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                4, "overlaps", NULL);
  /* a name twice (jansson alone would keep the last silently) */
  expect_reject("{\"layers.7.dup\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]},"
                "\"layers.7.dup\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
                12, "layers.7.dup", "twice");
  /* the same name written with an escape */
  expect_reject("{\"ab\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"a\\u0062\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
                8, "'ab'", "twice");
  /* a key twice inside one entry */
  expect_reject("{\"first\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"layers.9.w\":{\"dtype\":\"U8\",\"dtype\":\"F32\",\"shape\":[4],"
                "\"data_offsets\":[4,8]}}",
                8, "layers.9.w", "duplicate");
}

static void test_accept_edge_cases(void **st) {
  (void)st;
  expect_accept("{}", 0, 0);
  expect_accept("{}   ", 0, 0);
  expect_accept("{\"__metadata__\":{\"format\":\"pt\"}}", 0, 0);
  /* gaps between tensors, trailing bytes, empty tensors at shared offsets */
  expect_accept("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[9,9]},"
                "\"c\":{\"dtype\":\"U8\",\"shape\":[0,3],\"data_offsets\":[9,9]},"
                "\"d\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,2]}}",
                32, 4);
  /* the parser also works on a header-only prefix: data pointers NULL */
  const char *j = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
  size_t len;
  uint8_t *b = raw(j, 4, &len);
  df_st_file f;
  df_err e = {{0}};
  assert_int_equal(df_st_parse(&f, b, len - 4, len, "prefix", &e), 0);
  assert_int_equal(f.ntensors, 1);
  assert_null(f.tensors[0].data);
  assert_int_equal(f.tensors[0].offset, 8 + strlen(j));
  df_st_close(&f);
  free(b);
}

static void test_open_errors(void **st) {
  (void)st;
  df_st_file f;
  df_err e = {{0}};
  char *p = path_in("missing.safetensors");
  assert_int_equal(df_st_open(&f, p, &e), -1);
  assert_non_null(strstr(e.msg, "missing.safetensors"));
  free(p);
  p = path_in("tiny.safetensors");
  assert_int_equal(df_file_write_atomic(p, "abc", 3, &e), 0);
  assert_int_equal(df_st_open(&f, p, &e), -1);
  assert_non_null(strstr(e.msg, "tiny.safetensors"));
  unlink(p);
  free(p);
  /* a file cut short: the tensor's data runs past the end */
  p = path_in("cut.safetensors");
  size_t len;
  uint8_t *b = raw("{\"w.cut\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
                   &len);
  assert_int_equal(df_file_write_atomic(p, b, len - 1, &e), 0);
  assert_int_equal(df_st_open(&f, p, &e), -1);
  assert_non_null(strstr(e.msg, "cut.safetensors"));
  assert_non_null(strstr(e.msg, "w.cut"));
  unlink(p);
  free(p);
  free(b);
}

/* ---- sharded sets ---- */

static const spec shard_a[] = {{"m.layers.0.a", DF_DT_BF16, 2, {4, 8}},
                               {"m.layers.0.b", DF_DT_F32, 1, {3}}};
static const spec shard_b[] = {{"m.layers.1.a", DF_DT_BF16, 2, {4, 8}},
                               {"m.embed", DF_DT_BF16, 2, {10, 8}},
                               {"m.layers.1.experts.0.w1", DF_DT_U8, 2, {4, 2}}};
static const spec shard_c[] = {{"m.norm", DF_DT_F32, 1, {8}}};

static void write_index(const char *json) {
  char *p = path_in("model.safetensors.index.json");
  df_err e = {{0}};
  assert_int_equal(df_file_write_atomic(p, json, strlen(json), &e), 0);
  free(p);
}

static void write_shards(void) {
  char *p = path_in("s-1.safetensors");
  write_file(p, shard_a, 2, 0, 0);
  free(p);
  p = path_in("s-2.safetensors");
  write_file(p, shard_b, 3, 0, 0);
  free(p);
  p = path_in("s-3.safetensors");
  write_file(p, shard_c, 1, 0, 0);
  free(p);
}

static const char *good_index =
    "{\"metadata\":{\"total_size\":1},\"weight_map\":{"
    "\"m.layers.0.a\":\"s-1.safetensors\",\"m.layers.0.b\":\"s-1.safetensors\","
    "\"m.layers.1.a\":\"s-2.safetensors\",\"m.embed\":\"s-2.safetensors\","
    "\"m.layers.1.experts.0.w1\":\"s-2.safetensors\",\"m.norm\":\"s-3.safetensors\"}}";

static void set_reject(const char *needle1, const char *needle2) {
  df_st_set s;
  df_err e = {{0}};
  assert_int_equal(df_st_set_open(&s, dir, &e), -1);
  if (needle1 && !strstr(e.msg, needle1)) fail_msg("no '%s' in: %s", needle1, e.msg);
  if (needle2 && !strstr(e.msg, needle2)) fail_msg("no '%s' in: %s", needle2, e.msg);
}

static void test_set_sharded(void **st) {
  (void)st;
  write_shards();
  write_index(good_index);
  df_st_set s;
  df_err e = {{0}};
  if (df_st_set_open(&s, dir, &e) != 0) fail_msg("%s", e.msg);
  assert_int_equal(s.nfiles, 3);
  assert_int_equal(s.ntensors, 6);
  for (int i = 1; i < s.ntensors; i++) assert_true(strcmp(s.all[i - 1]->name, s.all[i]->name) < 0);
  const struct {
    const spec *sp;
    int n;
    const char *file;
  } groups[3] = {{shard_a, 2, "s-1.safetensors"}, {shard_b, 3, "s-2.safetensors"},
                 {shard_c, 1, "s-3.safetensors"}};
  for (int g = 0; g < 3; g++)
    for (int i = 0; i < groups[g].n; i++) {
      const spec *sp = &groups[g].sp[i];
      const df_tensor *t = df_st_set_find(&s, sp->name);
      assert_non_null(t);
      assert_int_equal(t->dtype, sp->dt);
      assert_int_equal(t->nbytes, spec_bytes(sp));
      const char *fp = df_st_set_file_path(&s, t->file);
      assert_non_null(fp);
      assert_non_null(strstr(fp, groups[g].file));
      for (uint64_t j = 0; j < t->nbytes; j++)
        assert_int_equal(((const uint8_t *)t->data)[j], pattern(sp->name, j));
    }
  assert_null(df_st_set_find(&s, "m.absent"));
  assert_null(df_st_set_file_path(&s, 3));
  df_st_set_close(&s);

  /* the index puts a tensor in the wrong shard */
  char bad[1024];
  snprintf(bad, sizeof bad, "%s", good_index);
  char *w = strstr(bad, "\"m.norm\":\"s-3");
  w[strlen("\"m.norm\":\"s-")] = '1';
  write_index(bad); /* s-3 is no longer indexed either, but m.norm is checked first */
  set_reject("m.norm", "s-1.safetensors");

  /* a shard tensor missing from the index */
  write_index("{\"weight_map\":{"
              "\"m.layers.0.a\":\"s-1.safetensors\","
              "\"m.layers.1.a\":\"s-2.safetensors\",\"m.embed\":\"s-2.safetensors\","
              "\"m.layers.1.experts.0.w1\":\"s-2.safetensors\",\"m.norm\":\"s-3.safetensors\"}}");
  set_reject("m.layers.0.b", "index");

  /* an indexed shard that does not exist */
  write_index("{\"weight_map\":{\"m.x\":\"s-9.safetensors\"}}");
  set_reject("s-9.safetensors", NULL);

  /* shard names must stay inside the directory */
  write_index("{\"weight_map\":{\"m.x\":\"../s-1.safetensors\"}}");
  set_reject("m.x", "../s-1.safetensors");

  /* duplicate keys in the index */
  write_index("{\"weight_map\":{\"m.norm\":\"s-3.safetensors\",\"m.norm\":\"s-3.safetensors\"}}");
  set_reject("model.safetensors.index.json", NULL);

  /* a tensor in two shards */
  char *p = path_in("s-3.safetensors");
  const spec dup[2] = {{"m.norm", DF_DT_F32, 1, {8}}, {"m.embed", DF_DT_BF16, 1, {2}}};
  write_file(p, dup, 2, 0, 0);
  free(p);
  write_index(good_index);
  set_reject("m.embed", "s-3.safetensors");

  /* no index and no model.safetensors */
  p = path_in("model.safetensors.index.json");
  unlink(p);
  free(p);
  set_reject("model.safetensors", NULL);

  /* a single model.safetensors without an index */
  p = path_in("model.safetensors");
  write_file(p, shard_b, 3, 0, 0);
  free(p);
  assert_int_equal(df_st_set_open(&s, dir, &e), 0);
  assert_int_equal(s.nfiles, 1);
  assert_int_equal(s.ntensors, 3);
  assert_non_null(df_st_set_find(&s, "m.embed"));
  assert_int_equal(df_st_set_find(&s, "m.embed")->file, 0);
  df_st_set_close(&s);
}

/* The release keeps vision_tower.* / mm_projector.* in shards of their own; a
 * download without them must open, one without a text shard must not. */
static void test_set_vision_optional(void **st) {
  (void)st;
  static const spec vis[] = {{"vision_tower.blocks.0.w", DF_DT_BF16, 2, {4, 8}},
                             {"mm_projector.proj.0.weight", DF_DT_BF16, 1, {8}}};
  char *p = path_in("s-1.safetensors");
  write_file(p, shard_a, 2, 0, 0);
  free(p);
  char *pv = path_in("s-2.safetensors");
  write_file(pv, vis, 2, 0, 0);
  const char *idx =
      "{\"weight_map\":{\"m.layers.0.a\":\"s-1.safetensors\",\"m.layers.0.b\":\"s-1.safetensors\","
      "\"vision_tower.blocks.0.w\":\"s-2.safetensors\",\"mm_projector.proj.0.weight\":"
      "\"s-2.safetensors\"}}";
  write_index(idx);
  df_st_set s;
  df_err e = {{0}};
  if (df_st_set_open(&s, dir, &e) != 0) fail_msg("%s", e.msg);
  assert_int_equal(s.nfiles, 2);
  assert_int_equal(s.ntensors, 4);
  assert_int_equal(s.nskipped, 0);
  df_st_set_close(&s);
  unlink(pv);
  if (df_st_set_open(&s, dir, &e) != 0) fail_msg("vision shard absent: %s", e.msg);
  assert_int_equal(s.nfiles, 1);
  assert_int_equal(s.ntensors, 2);
  assert_int_equal(s.nskipped, 1);
  assert_string_equal(s.skipped[0], "s-2.safetensors");
  assert_non_null(df_st_set_find(&s, "m.layers.0.b"));
  assert_null(df_st_set_find(&s, "vision_tower.blocks.0.w"));
  df_st_set_close(&s);
  /* a missing shard that also holds a text tensor is an error naming both */
  write_index(
      "{\"weight_map\":{\"m.layers.0.a\":\"s-1.safetensors\",\"m.layers.0.b\":\"s-1.safetensors\","
      "\"vision_tower.blocks.0.w\":\"s-2.safetensors\",\"m.norm\":\"s-2.safetensors\"}}");
  set_reject("s-2.safetensors", "m.norm");
  /* and a text shard alone missing, too */
  p = path_in("s-1.safetensors");
  unlink(p);
  free(p);
  write_index(idx);
  set_reject("s-1.safetensors", "m.layers.0.");
  free(pv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_set_vision_optional, setup, teardown),
      cmocka_unit_test_setup_teardown(test_roundtrip_every_dtype, setup, teardown),
      cmocka_unit_test_setup_teardown(test_find_many, setup, teardown),
      cmocka_unit_test_setup_teardown(test_writer_failures_leave_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_writer_positional, setup, teardown),
      cmocka_unit_test(test_reject_lengths),
      cmocka_unit_test(test_reject_json),
      cmocka_unit_test(test_reject_entries),
      cmocka_unit_test(test_reject_overlap_and_duplicates),
      cmocka_unit_test(test_accept_edge_cases),
      cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_set_sharded, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

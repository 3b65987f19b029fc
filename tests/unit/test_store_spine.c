/* The store's spine stream (store/spine.h) on its own: a unit's buffer must
 * hold the file's bytes at each extent's boff (read back with pread, the
 * reference), for io_uring and pread, real and emulated drives, and for
 * every queue depth; a pass counts once, the stats add up to the requests
 * the extents make, --queue-depth reaches the spine (its reads in flight
 * follow rank.h's rule), and a missing file or a file cut short after it
 * was opened fails with a message naming it. */
#include <fcntl.h>
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
#include "format/safetensors.h"
#include "store/spine.h"
#include "store/store.h"
#include "synth/synth.h"

#define FILE_BYTES (9u << 20) /* more than one DF_SPINE_CHUNK request for one extent */

static char root[256], model[300], data[300];
static df_config cfg;
static df_st_set set;

static int setup(void **st) {
  (void)st;
  df_log_verbose = 0;
  snprintf(root, sizeof root, "/tmp/df_test_spine_XXXXXX");
  if (!mkdtemp(root)) return -1;
  snprintf(model, sizeof model, "%s/model", root);
  df_synth_opts o = {.preset = "tiny", .seed = 3, .out_dir = model, .force = 1};
  df_err e;
  if (df_synth_make_model(&o, &e)) return fprintf(stderr, "%s\n", e.msg), -1;
  char *cp = df_path_join(model, "config.json");
  int rc = df_config_load(&cfg, cp, &e);
  free(cp);
  if (rc || df_st_set_open(&set, model, &e)) return fprintf(stderr, "%s\n", e.msg), -1;
  /* a data file of pseudo-random bytes, its size not a multiple of 4 KiB */
  snprintf(data, sizeof data, "%s/spine.bin", root);
  FILE *f = fopen(data, "wb");
  if (!f) return -1;
  uint64_t x = 0x243F6A8885A308D3ull;
  for (uint32_t i = 0; i < FILE_BYTES + 1234; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    fputc((int)(x >> 56), f);
  }
  return fclose(f) ? -1 : 0;
}

static int teardown(void **st) {
  (void)st;
  df_st_set_close(&set);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  return system(cmd) == 0 ? 0 : -1;
}

/* Units: 0 (two extents, the second longer than one request), 1 resident,
 * 2 "the head" (an extent running into the end of the file: the read stops
 * there, the rest of the buffer is not the file's). */
static const df_spine_extent ex0[] = {{0, 0, 64u << 10, 0}, {0, 1u << 20, 8u << 20 | 12288u, 64u << 10}};
static const df_spine_extent ex2[] = {{0, FILE_BYTES - 8192, 8192 + 4096, 0}};
static const df_spine_extent ex1[] = {{0, 4096, 4096, 0}};

static void desc_of(df_spine_desc *d, df_spine_unit *u, const char **paths) {
  u[0] = (df_spine_unit){.streamed = 1, .bytes = 1000, .read = (64u << 10) + (8u << 20 | 12288u),
                         .ex = ex0, .nex = 2};
  u[1] = (df_spine_unit){.streamed = 0, .bytes = 7, .read = 4096, .ex = ex1, .nex = 1};
  u[2] = (df_spine_unit){.streamed = 1, .bytes = 500, .read = 12288, .ex = ex2, .nex = 1};
  *d = (df_spine_desc){.nunits = 3, .n_layers = 2, .units = u, .nfiles = 1, .paths = paths,
                       .kind = "bf16", .layout_id = 1, .source = "shards"};
}

/* The unit's extents in its buffer against pread of the file. */
static void check_bytes(const uint8_t *buf, const df_spine_extent *ex, int nex) {
  int fd = open(data, O_RDONLY);
  assert_true(fd >= 0);
  for (int i = 0; i < nex; i++) {
    uint8_t *want = df_xmalloc(ex[i].len);
    ssize_t n = pread(fd, want, ex[i].len, (off_t)ex[i].off);
    assert_true(n > 0);
    assert_memory_equal(buf + ex[i].boff, want, (size_t)n);
    free(want);
  }
  close(fd);
}

static int count_reads(const df_spine_extent *ex, int nex) {
  int n = 0;
  for (int i = 0; i < nex; i++) n += (int)((ex[i].len + DF_SPINE_CHUNK - 1) / DF_SPINE_CHUNK);
  return n;
}

static int nreplayed;
static void on_read(void *ud, const char *path, int drive, uint64_t off, uint32_t len) {
  (void)ud, (void)off, (void)drive;
  assert_string_equal(path, data);
  assert_true(len > 0 && len <= DF_SPINE_CHUNK);
  nreplayed++;
}

static void run_one(df_store_io io, const char *emu, int qd) {
  df_store_opts o = {.model_dir = model, .no_pack = 1, .cache_mb = 0, .heat_path = "", .io = io,
                     .emulate_drives = emu, .queue_depth = qd};
  df_store *st;
  df_err e;
  if (df_store_open(&st, &set, &cfg, &o, &e)) fail_msg("store: %s", e.msg);
  df_spine_desc d;
  df_spine_unit u[3];
  const char *paths[1] = {data};
  desc_of(&d, u, paths);
  df_spine *sp;
  if (df_store_spine_open(st, &d, &sp, &e)) fail_msg("spine: %s", e.msg);
  assert_non_null(sp);
  const int passes = 3;
  for (int p = 0; p < passes; p++) {
    const uint8_t *b = df_spine_acquire(sp, 0, 2, &e);
    if (!b) fail_msg("unit 0: %s", e.msg);
    check_bytes(b, ex0, 2);
    df_spine_release(sp, 0);
    b = df_spine_acquire(sp, 2, 0, &e);
    if (!b) fail_msg("unit 2: %s", e.msg);
    check_bytes(b, ex2, 1);
    df_spine_release(sp, 2);
  }
  /* a resident unit is not the stream's */
  assert_null(df_spine_acquire(sp, 1, -1, &e));
  df_spine_settle(sp);
  df_spine_stats s;
  df_spine_stats_get(sp, &s);
  int per_pass = count_reads(ex0, 2) + count_reads(ex2, 1);
  assert_int_equal(s.units, 2);
  assert_int_equal(s.passes, passes);
  assert_int_equal(s.weight_bytes, (uint64_t)passes * (1000 + 500));
  /* the last release named unit 0 as next: its reads of a 4th pass landed too */
  assert_int_equal(s.reads, (uint64_t)passes * per_pass + count_reads(ex0, 2));
  assert_int_equal(s.wasted, 0);
  assert_string_equal(s.source, "shards");
  assert_int_equal(s.drives, 1);
  nreplayed = 0;
  int depth = df_spine_reads(sp, on_read, NULL);
  assert_int_equal(nreplayed, per_pass);
  /* through the store's drive: rank.h's rule, one slot below the depth */
  int want_qd = qd > 0 ? qd : 8;
  assert_int_equal(depth, want_qd > 1 ? want_qd - 1 : 1);
  df_spine_close(sp);
  df_store_close(st);
}

static void test_bytes_and_stats(void **state) {
  (void)state;
  run_one(DF_STORE_IO_URING, NULL, 0);
  run_one(DF_STORE_IO_PREAD, NULL, 1);
  run_one(DF_STORE_IO_URING, "4GB/s,0.05ms", 3);
  run_one(DF_STORE_IO_PREAD, "4GB/s", 16);
}

static void test_errors(void **state) {
  (void)state;
  df_store_opts o = {.model_dir = model, .no_pack = 1, .cache_mb = 0, .heat_path = ""};
  df_store *st;
  df_err e;
  assert_int_equal(df_store_open(&st, &set, &cfg, &o, &e), 0);
  df_spine_desc d;
  df_spine_unit u[3];
  char missing[320];
  snprintf(missing, sizeof missing, "%s/no-such-shard", root);
  const char *paths[1] = {missing};
  desc_of(&d, u, paths);
  df_spine *sp = (df_spine *)1;
  assert_int_equal(df_store_spine_open(st, &d, &sp, &e), -1);
  assert_null(sp);
  assert_non_null(strstr(e.msg, "spine stream"));
  assert_non_null(strstr(e.msg, missing));
  /* a file cut short after the stream opened it: the read ends before the
   * extent's bytes do */
  char cut[320];
  snprintf(cut, sizeof cut, "%s/cut.bin", root);
  int fd = open(cut, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(fd >= 0);
  static uint8_t zeros[16384];
  assert_int_equal(write(fd, zeros, sizeof zeros), (ssize_t)sizeof zeros);
  static const df_spine_extent whole[] = {{0, 0, sizeof zeros, 0}};
  const char *p2[1] = {cut};
  desc_of(&d, u, p2);
  u[0] = (df_spine_unit){.streamed = 1, .bytes = 1, .read = sizeof zeros, .ex = whole, .nex = 1};
  u[2].streamed = 0;
  assert_int_equal(df_store_spine_open(st, &d, &sp, &e), 0);
  assert_int_equal(ftruncate(fd, 4096), 0);
  close(fd);
  assert_null(df_spine_acquire(sp, 0, -1, &e));
  assert_non_null(strstr(e.msg, "short read"));
  assert_non_null(strstr(e.msg, cut));
  assert_non_null(strstr(e.msg, "layer 0"));
  df_spine_close(sp);
  /* nothing streams: no stream */
  u[0].streamed = 0;
  assert_int_equal(df_store_spine_open(st, &d, &sp, &e), 0);
  assert_null(sp);
  df_spine_stats s;
  df_spine_stats_get(NULL, &s);
  assert_int_equal(s.units, 0);
  df_store_close(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bytes_and_stats),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

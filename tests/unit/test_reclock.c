/* One fetch per record across processes (remote/reclock.h): OFD byte-range
 * claims on a sparse shard and the re-read of its journal. Two processes
 * are two open file descriptions of the shard and two journal handles (OFD
 * locks conflict between descriptions, even inside one process); a killed
 * holder is a forked child killed with SIGKILL. The journal lines a second
 * handle must see are written by the first through ranges.h, and one torn
 * line by hand in the documented format. */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "base/util.h"
#include "remote/ranges.h"
#include "remote/reclock.h"

typedef struct fixture {
  char dir[64], data[96], jpath[112];
} fixture;

static int setup(void **st) {
  fixture *x = calloc(1, sizeof *x);
  snprintf(x->dir, sizeof x->dir, "/tmp/df_unit_reclock.XXXXXX");
  assert_non_null(mkdtemp(x->dir));
  snprintf(x->data, sizeof x->data, "%s/shard", x->dir);
  snprintf(x->jpath, sizeof x->jpath, "%s/shard.ranges", x->dir);
  int fd = open(x->data, O_RDWR | O_CREAT | O_TRUNC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 1 << 20), 0); /* sparse, as a stream shard */
  close(fd);
  *st = x;
  return 0;
}

static int teardown(void **st) {
  fixture *x = *st;
  unlink(x->data);
  unlink(x->jpath);
  rmdir(x->dir);
  free(x);
  return 0;
}

/* What the fetcher does once it holds a claim: bytes, sync, journal. */
static uint64_t write_record(int fd, df_ranges *rj, uint64_t off, uint64_t len, uint8_t fill) {
  uint8_t *b = malloc(len);
  memset(b, fill, len);
  assert_int_equal(pwrite(fd, b, len, (off_t)off), (ssize_t)len);
  assert_int_equal(fdatasync(fd), 0);
  uint64_t h = XXH3_64bits(b, len);
  free(b);
  df_err e;
  assert_int_equal(df_ranges_add(rj, off, off + len, h, &e), 0);
  return h;
}

static void refresh_sees_other_handles(void **st) {
  fixture *x = *st;
  df_err e;
  df_ranges *a, *b;
  assert_int_equal(df_ranges_open(&a, x->jpath, &e), 0);
  assert_int_equal(df_ranges_open(&b, x->jpath, &e), 0);
  int fd = open(x->data, O_RDWR);
  uint64_t h = write_record(fd, a, 4096, 1000, 7), got = 0;
  assert_int_equal(df_ranges_lookup(b, 4096, 5096, &got), -1); /* b's memory: not yet */
  assert_int_equal(df_ranges_refresh(b, &e), 0);
  assert_int_equal(df_ranges_lookup(b, 4096, 5096, &got), 0);
  assert_true(got == h);
  /* b appends after a did: a's refresh adds b's line, and re-reading its
   * own does not duplicate it */
  uint64_t h2 = write_record(fd, b, 8192, 500, 9);
  write_record(fd, a, 16384, 100, 3);
  assert_int_equal(df_ranges_refresh(a, &e), 0);
  assert_int_equal(df_ranges_lookup(a, 8192, 8692, &got), 0);
  assert_true(got == h2);
  assert_int_equal(df_ranges_count(a), 3);
  assert_int_equal(df_ranges_refresh(b, &e), 0);
  assert_int_equal(df_ranges_count(b), 3);
  /* a line still being appended (torn) is left for a later refresh */
  df_range r = {32768, 33768, 0x1234};
  char line[80];
  int n = df_ranges_format(line, &r);
  int jfd = open(x->jpath, O_WRONLY | O_APPEND);
  assert_int_equal(write(jfd, line, 20), 20);
  assert_int_equal(df_ranges_refresh(b, &e), 0);
  assert_int_equal(df_ranges_lookup(b, 32768, 33768, &got), -1);
  assert_int_equal(write(jfd, line + 20, (size_t)n - 20), n - 20);
  assert_int_equal(df_ranges_refresh(b, &e), 0);
  assert_int_equal(df_ranges_lookup(b, 32768, 33768, &got), 0);
  assert_true(got == 0x1234);
  /* damage before the last line is an error, not a guess */
  assert_int_equal(write(jfd, "R garbage that is not a range line, sixty-two bytes long.....\n", 62), 62);
  assert_int_equal(write(jfd, line, (size_t)n), n);
  assert_int_equal(df_ranges_refresh(b, &e), -1);
  assert_non_null(strstr(e.msg, "damaged"));
  close(jfd);
  close(fd);
  df_ranges_close(a);
  df_ranges_close(b);
}

typedef struct waiter {
  int fd;
  df_ranges *rj;
  uint64_t off, len;
  volatile int done;
  int state;
} waiter;

static void *wait_claim(void *arg) {
  waiter *w = arg;
  df_err e;
  w->state = df_reclock_claim(w->fd, w->rj, w->off, w->len, 1, &e);
  __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

static void claim_then_local(void **st) {
  fixture *x = *st;
  df_err e;
  df_ranges *a, *b;
  assert_int_equal(df_ranges_open(&a, x->jpath, &e), 0);
  assert_int_equal(df_ranges_open(&b, x->jpath, &e), 0);
  int fa = open(x->data, O_RDWR), fb = open(x->data, O_RDWR);
  /* "process" A claims the record; B cannot, without waiting */
  assert_int_equal(df_reclock_claim(fa, a, 65536, 4096, 0, &e), DF_RECLOCK_MINE);
  assert_int_equal(df_reclock_claim(fb, b, 65536, 4096, 0, &e), DF_RECLOCK_BUSY);
  /* an overlapping range is busy too; a disjoint one is free */
  assert_int_equal(df_reclock_claim(fb, b, 65536 + 4000, 4096, 0, &e), DF_RECLOCK_BUSY);
  assert_int_equal(df_reclock_claim(fb, b, 65536 + 4096, 4096, 0, &e), DF_RECLOCK_MINE);
  df_reclock_release(fb, 65536 + 4096, 4096);
  /* B waits; A fetches, journals, releases: B finds it local (no fetch) */
  waiter w = {fb, b, 65536, 4096, 0, -9};
  pthread_t th;
  pthread_create(&th, NULL, wait_claim, &w);
  usleep(100000);
  assert_int_equal(__atomic_load_n(&w.done, __ATOMIC_SEQ_CST), 0); /* still blocked on A's claim */
  uint64_t h = write_record(fa, a, 65536, 4096, 0x5a), got = 0;
  df_reclock_release(fa, 65536, 4096);
  pthread_join(th, NULL);
  assert_int_equal(w.state, DF_RECLOCK_LOCAL);
  assert_int_equal(df_ranges_lookup(b, 65536, 65536 + 4096, &got), 0);
  assert_true(got == h);
  /* a holder that gives up without journalling: the waiter gets the claim */
  assert_int_equal(df_reclock_claim(fa, a, 131072, 4096, 0, &e), DF_RECLOCK_MINE);
  waiter w2 = {fb, b, 131072, 4096, 0, -9};
  pthread_create(&th, NULL, wait_claim, &w2);
  usleep(50000);
  assert_int_equal(__atomic_load_n(&w2.done, __ATOMIC_SEQ_CST), 0);
  df_reclock_release(fa, 131072, 4096);
  pthread_join(th, NULL);
  assert_int_equal(w2.state, DF_RECLOCK_MINE);
  df_reclock_release(fb, 131072, 4096);
  /* the same description claims again: threads of one process never
   * conflict (the fetcher's flights keep them apart) */
  assert_int_equal(df_reclock_claim(fa, a, 200000, 10, 0, &e), DF_RECLOCK_MINE);
  assert_int_equal(df_reclock_claim(fa, a, 200000, 10, 0, &e), DF_RECLOCK_MINE);
  df_reclock_release(fa, 200000, 10);
  close(fa);
  close(fb);
  df_ranges_close(a);
  df_ranges_close(b);
}

static void killed_holder_releases(void **st) {
  fixture *x = *st;
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = fork();
  if (pid == 0) {
    /* the child: its own descriptions, claims, writes bytes it never
     * journals, then hangs until killed mid-fetch */
    df_err e;
    df_ranges *c;
    int fd = open(x->data, O_RDWR);
    if (df_ranges_open(&c, x->jpath, &e) || df_reclock_claim(fd, c, 300000, 8192, 0, &e) != DF_RECLOCK_MINE)
      _exit(2);
    uint8_t junk[8192];
    memset(junk, 0xee, sizeof junk);
    if (pwrite(fd, junk, sizeof junk, 300000) != (ssize_t)sizeof junk) _exit(3);
    if (write(p[1], "k", 1) != 1) _exit(4);
    for (;;) pause();
  }
  close(p[1]);
  char c;
  assert_int_equal(read(p[0], &c, 1), 1);
  close(p[0]);
  df_err e;
  df_ranges *a;
  assert_int_equal(df_ranges_open(&a, x->jpath, &e), 0);
  int fa = open(x->data, O_RDWR);
  assert_int_equal(df_reclock_claim(fa, a, 300000, 8192, 0, &e), DF_RECLOCK_BUSY);
  kill(pid, SIGKILL);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  /* its lock went with it, and its unjournalled bytes are not local */
  assert_int_equal(df_reclock_claim(fa, a, 300000, 8192, 1, &e), DF_RECLOCK_MINE);
  uint64_t got;
  assert_int_equal(df_ranges_lookup(a, 300000, 308192, &got), -1);
  df_reclock_release(fa, 300000, 8192);
  close(fa);
  df_ranges_close(a);
}

int main(void) {
  const struct CMUnitTest t[] = {
      cmocka_unit_test_setup_teardown(refresh_sees_other_handles, setup, teardown),
      cmocka_unit_test_setup_teardown(claim_then_local, setup, teardown),
      cmocka_unit_test_setup_teardown(killed_holder_releases, setup, teardown),
  };
  return cmocka_run_group_tests(t, NULL, NULL);
}

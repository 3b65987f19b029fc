#include "store/io.h"

#include <errno.h>
#include <liburing.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

#define MAX_FIXED 1024
#define EVT_TAG ((uint64_t)1)

typedef struct drive {
  struct df_io *io;
  int idx;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t seq; /* bumped by kick */
  int evfd;
  struct io_uring ring;
  int ring_ok;
  double emu_next; /* emulated drive is busy until then (drives beyond EMU_DRIVES) */
  int nthreads;
  pthread_t *th;
} drive;

struct df_io {
  df_io_kind kind;
  int ndrives, qd;
  df_io_emu emu;
  df_io_ops ops;
  drive *d;
  atomic_int stop; /* set by df_io_close, read by the drive threads */
  int nfixed, fixed_ok;
  pthread_mutex_t reg_mu;
};

static void sleep_until(double t) {
  for (;;) {
    double dt = t - df_now();
    if (dt <= 0) return;
    struct timespec ts = {(time_t)dt, (long)((dt - floor(dt)) * 1e9)};
    nanosleep(&ts, NULL);
  }
}

/* Emulated drives are process-wide: drive i of every open I/O engine is the
 * same emulated drive (one timeline), so two engines reading one drive (the
 * expert store and the spine stream, whose shards are on drive 0) share its
 * bandwidth instead of each getting all of it. Reads are served in the
 * order they are submitted. */
#define EMU_DRIVES 256
static pthread_mutex_t emu_mu = PTHREAD_MUTEX_INITIALIZER;
static double emu_busy[EMU_DRIVES]; /* drive i is busy until then */

/* When an emulated drive finishes a read r of len bytes submitted now
 * (r's t_xfer0/t_xfer1: when the drive moves its bytes). */
static double emu_release(drive *d, df_io_req *r, uint32_t len) {
  df_io *io = d->io;
  r->t_xfer0 = r->t_xfer1 = 0;
  if (io->emu.bw <= 0) return 0;
  double *next = d->idx < EMU_DRIVES ? &emu_busy[d->idx] : &d->emu_next;
  pthread_mutex_lock(&emu_mu);
  double now = df_now();
  double start = *next > now ? *next : now;
  *next = start + (double)len / io->emu.bw;
  r->t_xfer0 = start;
  r->t_xfer1 = *next;
  double t = *next + io->emu.latency;
  pthread_mutex_unlock(&emu_mu);
  return t;
}

/* ---- pread threads ---- */

static void pread_one(df_io_req *r) {
  r->got = 0;
  r->err = 0;
  while ((uint64_t)r->got < r->len) {
    ssize_t n = pread(r->fd, r->buf + r->got, r->len - (size_t)r->got, (off_t)(r->off + (uint64_t)r->got));
    if (n < 0) {
      if (errno == EINTR) continue;
      r->err = errno;
      return;
    }
    if (n == 0) return; /* EOF */
    r->got += n;
  }
}

static df_io_req *wait_take(drive *d) {
  df_io *io = d->io;
  for (;;) {
    pthread_mutex_lock(&d->mu);
    uint64_t seq = d->seq;
    pthread_mutex_unlock(&d->mu);
    df_io_req *r = io->ops.take(io->ops.ctx, d->idx);
    if (r) return r;
    pthread_mutex_lock(&d->mu);
    while (d->seq == seq && !atomic_load(&io->stop)) pthread_cond_wait(&d->cv, &d->mu);
    int stop = atomic_load(&io->stop);
    pthread_mutex_unlock(&d->mu);
    if (stop) return io->ops.take(io->ops.ctx, d->idx);
  }
}

static void *pread_main(void *arg) {
  drive *d = arg;
  df_io *io = d->io;
  df_io_req *r;
  while ((r = wait_take(d))) {
    r->t_start = df_now();
    double rel = emu_release(d, r, r->len);
    pread_one(r);
    if (rel > 0) sleep_until(rel);
    r->t_done = df_now();
    io->ops.done(io->ops.ctx, d->idx, r);
  }
  return NULL;
}

/* ---- io_uring thread ---- */

typedef struct held {
  df_io_req *r;
  double t;
} held;

static void prep(drive *d, df_io_req *r) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
  uint8_t *buf = r->buf + r->done_part;
  unsigned len = r->len - r->done_part;
  uint64_t off = r->off + r->done_part;
  if (r->buf_index >= 0)
    io_uring_prep_read_fixed(sqe, r->fd, buf, len, off, r->buf_index);
  else
    io_uring_prep_read(sqe, r->fd, buf, len, off);
  io_uring_sqe_set_data(sqe, r);
}

static void arm_event(drive *d, uint64_t *evbuf) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
  io_uring_prep_read(sqe, d->evfd, evbuf, sizeof *evbuf, 0);
  io_uring_sqe_set_data64(sqe, EVT_TAG);
}

static void *uring_main(void *arg) {
  drive *d = arg;
  df_io *io = d->io;
  uint64_t evbuf = 0;
  int inflight = 0, nheld = 0;
  held *hq = df_xcalloc((size_t)io->qd, sizeof *hq);
  double *rel = df_xcalloc((size_t)io->qd, sizeof *rel);
  df_io_req **slot = df_xcalloc((size_t)io->qd, sizeof *slot);
  arm_event(d, &evbuf);
  io_uring_submit(&d->ring);
  for (;;) {
    /* Release emulated completions whose time has come (this frees depth, so
     * it comes before taking new reads). */
    double now = df_now(), next = 0;
    for (int i = 0; i < nheld;) {
      if (hq[i].t <= now) {
        df_io_req *r = hq[i].r;
        hq[i] = hq[--nheld];
        r->t_done = df_now();
        io->ops.done(io->ops.ctx, d->idx, r);
      } else {
        if (next == 0 || hq[i].t < next) next = hq[i].t;
        i++;
      }
    }
    while (inflight + nheld < io->qd) {
      df_io_req *r = io->ops.take(io->ops.ctx, d->idx);
      if (!r) break;
      r->t_start = df_now();
      r->done_part = 0;
      r->got = 0;
      r->err = 0;
      double t = emu_release(d, r, r->len);
      /* remember the release time next to the request */
      int k = 0;
      while (slot[k]) k++;
      slot[k] = r;
      rel[k] = t;
      prep(d, r);
      inflight++;
    }
    io_uring_submit(&d->ring);
    /* take() just returned NULL if nothing is in flight: done */
    if (atomic_load(&io->stop) && inflight == 0 && nheld == 0) break;
    struct io_uring_cqe *cqe = NULL;
    int rc;
    if (nheld) {
      double dt = next - df_now();
      if (dt < 0) dt = 0;
      struct __kernel_timespec ts = {(long long)dt, (long long)((dt - floor(dt)) * 1e9)};
      rc = io_uring_wait_cqe_timeout(&d->ring, &cqe, &ts);
    } else {
      rc = io_uring_wait_cqe(&d->ring, &cqe);
    }
    if (rc == -ETIME || rc == -EINTR) continue;
    if (rc < 0) {
      /* A broken ring: fail whatever is in flight, then fall back to pread. */
      for (int k = 0; k < io->qd; k++)
        if (slot[k]) {
          slot[k]->err = -rc;
          slot[k]->t_done = df_now();
          io->ops.done(io->ops.ctx, d->idx, slot[k]);
          slot[k] = NULL;
        }
      break;
    }
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&d->ring, head, cqe) {
      seen++;
      uint64_t ud = io_uring_cqe_get_data64(cqe);
      if (ud == EVT_TAG) {
        arm_event(d, &evbuf);
        continue;
      }
      df_io_req *r = (df_io_req *)(uintptr_t)ud;
      int k = 0;
      while (slot[k] != r) k++;
      int fin = 1;
      if (cqe->res < 0) {
        r->err = -cqe->res;
      } else if (cqe->res > 0) {
        r->done_part += (uint32_t)cqe->res;
        r->got = r->done_part;
        if (r->done_part < r->len) {
          prep(d, r); /* short read before EOF: read the rest */
          fin = 0;
        }
      }
      if (!fin) continue;
      slot[k] = NULL;
      inflight--;
      if (rel[k] > df_now()) {
        hq[nheld++] = (held){r, rel[k]};
      } else {
        r->t_done = df_now();
        io->ops.done(io->ops.ctx, d->idx, r);
      }
    }
    io_uring_cq_advance(&d->ring, seen);
  }
  free(hq);
  free(rel);
  free(slot);
  if (atomic_load(&io->stop)) return NULL;
  /* Ring failure: serve the rest of this drive with blocking reads. */
  return pread_main(d);
}

/* ---- setup ---- */

int df_io_open(df_io **out, df_io_kind kind, int ndrives, int qd, const df_io_emu *emu,
               const df_io_ops *ops, df_err *e) {
  df_io *io = df_xcalloc(1, sizeof *io);
  io->kind = kind;
  io->ndrives = ndrives;
  io->qd = qd < 1 ? 1 : qd;
  if (emu) io->emu = *emu;
  io->ops = *ops;
  io->fixed_ok = kind == DF_IO_URING;
  pthread_mutex_init(&io->reg_mu, NULL);
  io->d = df_xcalloc((size_t)ndrives, sizeof *io->d);
  for (int i = 0; i < ndrives; i++) {
    drive *d = &io->d[i];
    d->io = io;
    d->idx = i;
    d->evfd = -1;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (kind == DF_IO_URING) {
      int rc = io_uring_queue_init((unsigned)io->qd * 2 + 2, &d->ring, 0);
      if (rc < 0) {
        io->ndrives = i;
        df_io_close(io);
        return df_err_set(e, "io_uring_queue_init: %s (use --io pread)", strerror(-rc));
      }
      d->ring_ok = 1;
      d->evfd = eventfd(0, EFD_CLOEXEC);
      if (d->evfd < 0 || io_uring_register_buffers_sparse(&d->ring, MAX_FIXED) < 0)
        io->fixed_ok = 0;
    }
  }
  for (int i = 0; i < ndrives; i++) {
    drive *d = &io->d[i];
    d->nthreads = kind == DF_IO_URING ? 1 : io->qd;
    d->th = df_xcalloc((size_t)d->nthreads, sizeof *d->th);
    for (int t = 0; t < d->nthreads; t++)
      pthread_create(&d->th[t], NULL, kind == DF_IO_URING ? uring_main : pread_main, d);
  }
  *out = io;
  return 0;
}

void df_io_kick(df_io *io, int drive) {
  for (int i = 0; i < io->ndrives; i++) {
    if (drive >= 0 && i != drive) continue;
    struct drive *d = &io->d[i];
    pthread_mutex_lock(&d->mu);
    d->seq++;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    if (d->evfd >= 0) {
      uint64_t one = 1;
      ssize_t w = write(d->evfd, &one, sizeof one);
      (void)w;
    }
  }
}

int df_io_register(df_io *io, void *base, size_t len) {
  if (io->kind != DF_IO_URING || len > (1u << 30)) return -1;
  pthread_mutex_lock(&io->reg_mu);
  int idx = -1;
  if (io->fixed_ok && io->nfixed < MAX_FIXED) {
    idx = io->nfixed;
    struct iovec iov = {base, len};
    __u64 tag = 0;
    for (int i = 0; i < io->ndrives; i++)
      if (io_uring_register_buffers_update_tag(&io->d[i].ring, (unsigned)idx, &iov, &tag, 1) < 0) {
        /* e.g. RLIMIT_MEMLOCK: stay with plain reads everywhere */
        io->fixed_ok = 0;
        idx = -1;
        break;
      }
    if (idx >= 0) io->nfixed++;
  }
  pthread_mutex_unlock(&io->reg_mu);
  return idx;
}

int df_io_registered(const df_io *io) { return io->kind == DF_IO_URING && io->fixed_ok; }

void df_io_close(df_io *io) {
  if (!io) return;
  atomic_store(&io->stop, 1);
  df_io_kick(io, -1);
  for (int i = 0; i < io->ndrives; i++) {
    drive *d = &io->d[i];
    for (int t = 0; t < d->nthreads; t++) pthread_join(d->th[t], NULL);
    free(d->th);
    if (d->ring_ok) io_uring_queue_exit(&d->ring);
    if (d->evfd >= 0) close(d->evfd);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
  }
  pthread_mutex_destroy(&io->reg_mu);
  free(io->d);
  free(io);
}

/* ---- option parsing ---- */

int df_io_parse_rate(const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || !(v > 0) || !isfinite(v)) return -1;
  static const struct {
    const char *u;
    double m;
  } units[] = {{"GiB/s", 1073741824.0}, {"MiB/s", 1048576.0}, {"KiB/s", 1024.0},
               {"GB/s", 1e9},           {"MB/s", 1e6},        {"KB/s", 1e3},
               {"kB/s", 1e3}, /* the SI spelling */
               {"B/s", 1},              {"G", 1e9},           {"M", 1e6},
               {"K", 1e3},              {"k", 1e3},           {"", 1}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcmp(end, units[i].u)) {
      *out = v * units[i].m;
      return 0;
    }
  return -1;
}

int df_io_parse_emu(const char *s, df_io_emu *out, df_err *e) {
  memset(out, 0, sizeof *out);
  char buf[128];
  if (strlen(s) >= sizeof buf)
    return df_err_set(e, "--emulate-drives: '%s' is too long", s);
  strcpy(buf, s);
  char *comma = strchr(buf, ',');
  if (comma) *comma = 0;
  if (df_io_parse_rate(buf, &out->bw))
    return df_err_set(e, "--emulate-drives: bandwidth '%s' is not like 800MB/s", buf);
  if (comma) {
    char *end;
    double v = strtod(comma + 1, &end);
    double m = !strcmp(end, "ms") ? 1e-3 : !strcmp(end, "us") ? 1e-6 : !strcmp(end, "s") ? 1 : -1;
    if (end == comma + 1 || m < 0 || !(v >= 0) || !isfinite(v))
      return df_err_set(e, "--emulate-drives: latency '%s' is not like 0.2ms", comma + 1);
    out->latency = v * m;
  }
  return 0;
}

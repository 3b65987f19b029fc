/* The storage ceiling: what the drives deliver to deltafin's own reader when
 * nothing else is going on. The expert reads a benchmark run made (from the
 * store's trace: layer, expert, and the drive each came from) are replayed
 * through the store's I/O engine (store/io.h: io_uring or pread threads,
 * O_DIRECT, the same queue depth per drive, registered buffers when the
 * store had them, the same drive emulation), each read covering the record
 * with the store's 4 KiB alignment. No checksum, no compute: the difference
 * between this and the decode read rate is what the engine loses. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "bench/bench_int.h"
#include "store/io.h"
#include "store/store.h"


void df_bench_reads_free(df_bench_reads *rd) {
  for (int i = 0; i < rd->nfiles; i++) free(rd->files[i]);
  free(rd->files);
  free(rd->drive);
  free(rd->r);
  memset(rd, 0, sizeof *rd);
}

int df_bench_reads_from_store(df_bench_reads *rd, const df_store *s, const df_store_read *log,
                              size_t n, df_err *e) {
  memset(rd, 0, sizeof *rd);
  rd->r = df_xmalloc((n ? n : 1) * sizeof *rd->r);
  for (size_t i = 0; i < n; i++) {
    df_store_loc l;
    if (df_store_locate(s, log[i].layer, log[i].expert, log[i].copy, &l, e)) {
      df_bench_reads_free(rd);
      return -1;
    }
    if (l.file >= rd->nfiles) {
      int nf = l.file + 1;
      rd->files = df_xrealloc(rd->files, (size_t)nf * sizeof *rd->files);
      rd->drive = df_xrealloc(rd->drive, (size_t)nf * sizeof *rd->drive);
      for (int f = rd->nfiles; f < nf; f++) rd->files[f] = NULL, rd->drive[f] = 0;
      rd->nfiles = nf;
    }
    if (!rd->files[l.file]) rd->files[l.file] = df_xstrdup(l.path);
    rd->drive[l.file] = l.drive;
    if (l.drive + 1 > rd->ndrives) rd->ndrives = l.drive + 1;
    rd->len = l.bytes;
    rd->r[rd->n++] = (df_bench_read){l.file, l.read_off, l.read_len, (uint32_t)l.bytes};
  }
  if (rd->n == 0) return df_err_set(e, "the store logged no successful expert reads to replay");
  return 0;
}

/* ---- replay through the store's I/O engine ---- */

typedef struct cslot {
  df_io_req req;
  int drive;
} cslot;

typedef struct cdrive {
  int *seq; /* read indices, in order */
  int n, pos;
  cslot *slots;
  int *freel, nfree;
  uint8_t *mem;
} cdrive;

typedef struct cctx {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  const df_bench_reads *rd;
  int *fds;
  cdrive *d;
  int go, total, ndone, errs;
  uint64_t slot_bytes;
  char err[256];
} cctx;

static df_io_req *c_take(void *ctx, int drive) {
  cctx *c = ctx;
  df_io_req *out = NULL;
  pthread_mutex_lock(&c->mu);
  cdrive *d = &c->d[drive];
  if (c->go && d->pos < d->n && d->nfree > 0) {
    cslot *s = &d->slots[d->freel[--d->nfree]];
    const df_bench_read *r = &c->rd->r[d->seq[d->pos++]];
    s->req.fd = c->fds[r->file];
    s->req.off = r->read_off; /* the span the store itself reads (df_store_locate) */
    s->req.len = r->read_len;
    out = &s->req;
  }
  pthread_mutex_unlock(&c->mu);
  return out;
}

static void c_done(void *ctx, int drive, df_io_req *req) {
  cctx *c = ctx;
  cslot *s = (cslot *)req;
  pthread_mutex_lock(&c->mu);
  cdrive *d = &c->d[drive];
  /* a read may stop at EOF past the record's end: only an error or a read
   * that ends before the record does is a failure */
  if (req->err || req->got <= 0) {
    c->errs++;
    if (!c->err[0])
      snprintf(c->err, sizeof c->err, "read of %u bytes at %llu on drive %d: %s", req->len,
               (unsigned long long)req->off, drive, req->err ? strerror(req->err) : "nothing read");
  }
  d->freel[d->nfree++] = (int)(s - d->slots);
  c->ndone++;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

int df_bench_ceiling(const df_bench_reads *rd, const df_bench_ceiling_opts *o,
                     df_bench_ceiling_res *out, df_err *e) {
  memset(out, 0, sizeof *out);
  df_io_kind kind = o->io && !strcmp(o->io, "pread") ? DF_IO_PREAD : DF_IO_URING;
  int qd = o->qd > 0 ? o->qd : 8;
  df_io_emu emu = o->emu;
  cctx c = {.rd = rd};
  pthread_mutex_init(&c.mu, NULL);
  pthread_cond_init(&c.cv, NULL);
  c.fds = df_xmalloc((size_t)rd->nfiles * sizeof *c.fds);
  int rc = -1;
  for (int i = 0; i < rd->nfiles; i++) c.fds[i] = -1;
  for (int i = 0; i < rd->nfiles; i++) {
    if (!rd->files[i]) continue; /* a file none of the replayed reads is in */
    c.fds[i] = df_open_direct(rd->files[i], 0, NULL);
    if (c.fds[i] < 0) {
      df_err_errno(e, "%s", rd->files[i]);
      goto done_fds;
    }
  }
  /* replay the recorded reads in order, cycling, up to max_bytes */
  long total = rd->n;
  double pass_bytes = 0;
  uint32_t max_span = 0;
  for (int i = 0; i < rd->n; i++) {
    pass_bytes += rd->r[i].bytes;
    if (rd->r[i].read_len > max_span) max_span = rd->r[i].read_len;
  }
  if (o->max_bytes > 0 && pass_bytes > 0) {
    long want = (long)(o->max_bytes / (pass_bytes / rd->n) + 0.5);
    if (want > total) total = want;
  }
  c.total = (int)total;
  c.d = df_xcalloc((size_t)rd->ndrives, sizeof *c.d);
  for (long i = 0; i < total; i++) {
    int ri = (int)(i % rd->n);
    cdrive *d = &c.d[rd->drive[rd->r[ri].file]];
    d->seq = df_xrealloc(d->seq, (size_t)(d->n + 1) * sizeof *d->seq);
    d->seq[d->n++] = ri;
  }
  c.slot_bytes = DF_IO_ROUND_UP(rd->len) + DF_IO_ALIGN;
  if (c.slot_bytes < DF_IO_ROUND_UP(max_span)) c.slot_bytes = DF_IO_ROUND_UP(max_span);
  df_io_ops ops = {c_take, c_done, &c};
  df_io *io = NULL;
  if (df_io_open(&io, kind, rd->ndrives, qd, emu.bw > 0 ? &emu : NULL, &ops, e)) goto done_d;
  out->registered = 1;
  for (int i = 0; i < rd->ndrives; i++) {
    cdrive *d = &c.d[i];
    size_t bytes = (size_t)qd * c.slot_bytes;
    d->mem = df_xaligned(DF_IO_ALIGN, bytes);
    memset(d->mem, 0, bytes); /* fault the pages in before timing */
    int bidx = df_io_register(io, d->mem, bytes);
    if (bidx < 0) out->registered = 0;
    d->slots = df_xcalloc((size_t)qd, sizeof *d->slots);
    d->freel = df_xmalloc((size_t)qd * sizeof *d->freel);
    for (int k = 0; k < qd; k++) {
      d->slots[k].req.buf = d->mem + (size_t)k * c.slot_bytes;
      d->slots[k].req.buf_index = bidx;
      d->slots[k].drive = i;
      d->freel[d->nfree++] = qd - 1 - k;
    }
  }
  pthread_mutex_lock(&c.mu);
  c.go = 1;
  pthread_mutex_unlock(&c.mu);
  double t0 = df_now();
  df_io_kick(io, -1);
  pthread_mutex_lock(&c.mu);
  while (c.ndone < c.total) pthread_cond_wait(&c.cv, &c.mu);
  pthread_mutex_unlock(&c.mu);
  double t1 = df_now();
  df_io_close(io);
  if (c.errs) {
    df_err_set(e, "%d of %d replayed reads failed (first: %s)", c.errs, c.total, c.err);
  } else {
    out->reads = c.total;
    out->bytes = 0;
    for (long i = 0; i < total; i++) out->bytes += rd->r[i % rd->n].bytes;
    out->seconds = t1 - t0;
    out->gbps = out->bytes / out->seconds / 1e9;
    rc = 0;
  }
  if (kind != DF_IO_URING) out->registered = 0;
done_d:
  for (int i = 0; i < rd->ndrives; i++) {
    free(c.d[i].seq);
    free(c.d[i].slots);
    free(c.d[i].freel);
    free(c.d[i].mem);
  }
  free(c.d);
done_fds:
  for (int i = 0; i < rd->nfiles; i++)
    if (c.fds[i] >= 0) close(c.fds[i]);
  free(c.fds);
  pthread_mutex_destroy(&c.mu);
  pthread_cond_destroy(&c.cv);
  return rc;
}

/* ---- fio, for comparison ---- */

void df_bench_fio(const df_bench_reads *rd, int qd, double max_bytes, int emulated,
                  df_bench_fio_res *out) {
  memset(out, 0, sizeof *out);
  if (system("command -v fio >/dev/null 2>&1") != 0) {
    snprintf(out->why, sizeof out->why, "not installed (no comparison)");
    return;
  }
  if (rd->n < 1) return;
  const char *file = rd->files[rd->r[0].file];
  if (strchr(file, '\'')) {
    snprintf(out->why, sizeof out->why, "skipped: the path contains a quote");
    return;
  }
  struct stat st;
  if (stat(file, &st) != 0) return;
  unsigned bs = (unsigned)DF_IO_ROUND_UP(rd->len);
  uint64_t size = (uint64_t)st.st_size;
  if (max_bytes > 0 && (double)size > max_bytes) size = (uint64_t)max_bytes;
  size = size / bs * bs;
  if (size < bs) {
    snprintf(out->why, sizeof out->why, "skipped: %s is smaller than one record", file);
    return;
  }
  char cmd[1400];
  snprintf(cmd, sizeof cmd,
           "fio --name=deltafin-ceiling --filename='%s' --readonly --rw=read --bs=%u --direct=1 "
           "--ioengine=io_uring --iodepth=%d --size=%llu --output-format=json 2>/dev/null",
           file, bs, qd > 0 ? qd : 8, (unsigned long long)size);
  FILE *p = popen(cmd, "r");
  if (!p) return;
  json_error_t je;
  json_t *j = json_loadf(p, JSON_DISABLE_EOF_CHECK, &je);
  int st2 = pclose(p);
  json_t *jobs = j ? json_object_get(j, "jobs") : NULL;
  json_t *rdj = jobs ? json_object_get(json_array_get(jobs, 0), "read") : NULL;
  double bw = rdj ? json_number_value(json_object_get(rdj, "bw_bytes")) : 0;
  if (st2 != 0 || bw <= 0) {
    snprintf(out->why, sizeof out->why, "fio failed on %s (exit %d)", file, st2);
    json_decref(j);
    return;
  }
  json_decref(j);
  out->ran = 1;
  out->gbps = bw / 1e9;
  out->bs = bs;
  out->iodepth = qd > 0 ? qd : 8;
  snprintf(out->engine, sizeof out->engine, "io_uring");
  snprintf(out->file, sizeof out->file, "%s", file);
  snprintf(out->pattern, sizeof out->pattern, "%s", emulated ? "sequential, raw disk: NOT emulated" : "sequential");
}

/* The spine stream (spine.h): the store reads a model's streamed spine units
 * into ring buffers. A unit's extents are split into DF_SPINE_CHUNK-byte
 * requests (or, from a pack's spine section, one request per chunk, each on
 * its own drive) and queued on the store's drives (sched.c ranks them after
 * the experts' demand reads and before any speculative read). A store
 * without drives lends the stream its I/O engine kind, queue depth and
 * emulation for an engine of one drive (the only other instance of io.c). */
#include "store/spine.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/log.h"
#include "base/util.h"
#include "plan/plan.h"
#include "store/store_int.h"
#include "store/trace.h"

#define ALIGN 4096u

typedef struct sreq {
  df_store_spine_req sr; /* first, so a df_io_req maps back */
  struct df_spine *s;
  int slot;
  uint64_t need; /* bytes the read must return (less than len only at EOF) */
  int drive;     /* the drive it is queued on */
  int chunk;     /* pack: its chunk in the spine section; -1 = a shard read */
  struct sreq *next; /* own engine: its queue */
} sreq;

typedef struct sslot {
  uint8_t *buf;
  int bidx;
  int unit;    /* unit loaded or loading; -1 = empty */
  int pending; /* requests not yet done */
  int inuse;
  int err;
  char errmsg[1024];
  sreq *reqs;
} sslot;

/* About 40 fields in four groups (what streams, where it is read, the
 * ring, the counters): one lock guards them all, so they stay one struct. */
struct df_spine {
  /* ---- where the reads go ---- */
  df_store *store;
  int via_store;   /* reads go through the store's scheduler (else own engine, io) */
  int drive;       /* the store's drive for shard reads */
  /* ---- what streams (copied from the desc) ---- */
  int nunits, n_layers, first; /* first: the first streamed unit (a pass starts there) */
  df_spine_unit *units;
  df_spine_extent *ex;
  int nfiles;
  char **paths;
  char *kind, *source;
  uint64_t layout_id;
  /* the pack's spine section the units stream from; NULL = the files */
  const df_mf_spine *sec;
  int *sec_unit;   /* per unit: its index in sec->units, -1 = none */
  int ndrives;     /* drives the reads go to */
  df_io *io;       /* own engine */
  df_io_kind kind_io;
  int *fds;
  uint64_t *fsize;
  int direct;
  uint64_t slot_bytes;
  int maxreq, qd;
  /* ---- the ring ---- */
  sslot slot[DF_PLAN_RING_SLOTS];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  sreq *qh, *qt;   /* own engine's queue */
  /* ---- the counters (df_spine_stats) and the trace ---- */
  int units_streamed;
  uint64_t bytes, weight_bytes, reads, wasted, passes;
  double wait_s;
  df_trace *tr;    /* TRACE.spine.jsonl, the store's format and clock */
  int queued, inflight;
};

static const char *unit_name(const df_spine *s, int u, char *buf, size_t n) {
  if (u < s->n_layers) snprintf(buf, n, "layer %d", u);
  else snprintf(buf, n, "the head");
  return buf;
}

/* ------------------------------------------------------------ I/O callbacks */

static df_io_req *take_cb(void *ctx, int drive) {
  (void)drive;
  df_spine *s = ctx;
  pthread_mutex_lock(&s->mu);
  sreq *r = s->qh;
  if (r) {
    s->qh = r->next;
    if (!s->qh) s->qt = NULL;
    s->queued--;
    s->inflight++;
    r->sr.t_take = df_now();
  }
  pthread_mutex_unlock(&s->mu);
  return r ? &r->sr.req : NULL;
}

/* A failed or corrupt chunk of the pack's spine section, for the message. */
static void chunk_fault(const df_spine *s, const sreq *r, const char *why, char *out, size_t n) {
  const df_mf_chunk *ch = &s->sec->chunks[r->chunk];
  const char *path = NULL;
  df_store_pack_file(s->store, ch->drive, &path, NULL);
  int u = s->slot[r->slot].unit;
  const df_mf_spine_unit *su = u >= 0 && s->sec_unit[u] >= 0 ? &s->sec->units[s->sec_unit[u]] : NULL;
  snprintf(out, n, "%s in chunk %d of %d (drive %d file %s, offset %" PRIu64 ", %" PRIu64 " bytes)",
           why, su ? r->chunk - su->first + 1 : 0, su ? su->nchunks : 0, ch->drive,
           path ? path : "?", ch->offset, ch->len);
}

static void read_done(df_spine *s, sreq *r) {
  df_io_req *req = &r->sr.req;
  /* a chunk of the pack's section is checked before anyone can use it (the
   * slot's pending count still holds it), outside the lock */
  int bad = s->sec && r->chunk >= 0 && !req->err && (uint64_t)req->got >= r->need &&
            XXH3_64bits(req->buf, (size_t)r->need) != s->sec->chunks[r->chunk].xxh3;
  pthread_mutex_lock(&s->mu);
  sslot *sl = &s->slot[r->slot];
  if (!sl->err && (req->err || (uint64_t)req->got < r->need || bad)) {
    sl->err = req->err ? req->err : bad ? EBADMSG : EIO;
    const char *why = req->err ? strerror(req->err) : bad ? "checksum mismatch" : "short read (file truncated?)";
    if (s->sec && r->chunk >= 0) chunk_fault(s, r, why, sl->errmsg, sizeof sl->errmsg);
    else snprintf(sl->errmsg, sizeof sl->errmsg, "%s", why);
  }
  if (req->got > 0) s->bytes += (uint64_t)req->got;
  s->reads++;
  s->inflight--;
  if (s->tr) {
    int ok = !req->err && (uint64_t)req->got >= r->need;
    /* times on the store's clock, so the two traces line up (the SVG draws
     * both; tests compare their order) */
    double base = df_now() - df_store_clock(s->store);
    uint64_t got = req->got > 0 ? (uint64_t)req->got : 0;
    df_trace_when w = {1, r->sr.t_enq - base, r->sr.t_take - base,
                       req->t_xfer1 > 0 ? req->t_xfer0 - base : 0,
                       req->t_xfer1 > 0 ? req->t_xfer1 - base : 0, got};
    df_trace_read(s->tr, req->t_done - base, sl->unit, -1, s->sec ? r->drive : 0, got, 1,
                  req->t_start - r->sr.t_enq, req->t_done - req->t_start, &w, ok);
    df_trace_sample(s->tr, df_now() - base, 0, s->bytes, s->reads, s->inflight, s->queued);
  }
  sl->pending--;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static void done_cb(void *ctx, int drive, df_io_req *req) {
  (void)drive;
  read_done(ctx, (sreq *)req);
}

/* A read through the store finished (called without the store's lock). */
static void store_done(void *ud, df_store_spine_req *q) {
  (void)ud;
  sreq *r = (sreq *)q;
  read_done(r->s, r);
}

static void req_init(df_spine *s, sreq *r, int k, int fd, uint64_t off, uint64_t len, uint8_t *buf,
                     uint64_t need, int drive, int chunk) {
  memset(r, 0, sizeof *r);
  r->sr.req.fd = fd;
  r->sr.req.off = off;
  r->sr.req.len = (uint32_t)len;
  r->sr.req.buf = buf;
  r->sr.req.buf_index = s->slot[k].bidx;
  r->sr.done = store_done;
  r->sr.t_enq = df_now();
  r->s = s;
  r->slot = k;
  r->need = need;
  r->drive = drive;
  r->chunk = chunk;
}

/* Queues every read of unit u into slot k. Called with the lock held. */
static void issue(df_spine *s, int k, int u) {
  const df_spine_unit *un = &s->units[u];
  sslot *sl = &s->slot[k];
  sl->unit = u;
  sl->err = 0;
  sl->errmsg[0] = 0;
  int n = 0;
  if (s->sec) {
    const df_mf_spine_unit *su = &s->sec->units[s->sec_unit[u]];
    uint64_t boff = 0;
    for (int c = su->first; c < su->first + su->nchunks; c++) {
      const df_mf_chunk *ch = &s->sec->chunks[c];
      /* the file's size was checked at open */
      req_init(s, &sl->reqs[n++], k, df_store_pack_file(s->store, ch->drive, NULL, NULL),
               ch->offset, ch->len, sl->buf + boff, ch->len, ch->drive, c);
      boff += ch->len;
    }
  }
  for (int i = 0; !s->sec && i < un->nex; i++) {
    const df_spine_extent *x = &un->ex[i];
    for (uint64_t o = 0; o < x->len; o += DF_SPINE_CHUNK) {
      uint64_t len = x->len - o < DF_SPINE_CHUNK ? x->len - o : DF_SPINE_CHUNK;
      uint64_t off = x->off + o, fs = s->fsize[x->file];
      req_init(s, &sl->reqs[n++], k, s->fds[x->file], off, len, sl->buf + x->boff + o,
               off >= fs ? 0 : (fs - off < len ? fs - off : len), s->drive, -1);
    }
  }
  sl->pending = n;
  for (int i = 0; i < n; i++) {
    sreq *r = &sl->reqs[i];
    if (s->via_store) {
      /* the store's queue keeps the order: a layer's reads in file order;
       * queued there or in flight, they count as in flight here */
      s->inflight++;
      if (df_store_spine_submit(s->store, r->drive, &r->sr)) {
        /* the store is closing (the model is being freed): no read */
        s->inflight--;
        sl->pending--;
        if (!sl->err) {
          sl->err = ECANCELED;
          snprintf(sl->errmsg, sizeof sl->errmsg, "the expert store was closed");
        }
      }
      continue;
    }
    s->queued++;
    if (s->qt) s->qt->next = r;
    else s->qh = r;
    s->qt = r;
  }
  if (!s->via_store) df_io_kick(s->io, 0);
}

/* ------------------------------------------------------------ open/close */

/* Waits until no ring slot has a read in flight. */
void df_spine_settle(df_spine *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    int busy = 0;
    for (int k = 0; k < DF_PLAN_RING_SLOTS; k++) busy |= s->slot[k].pending > 0;
    if (!busy) break;
    pthread_cond_wait(&s->cv, &s->mu);
  }
  pthread_mutex_unlock(&s->mu);
}

void df_spine_close(df_spine *s) {
  if (!s) return;
  df_spine_settle(s);
  if (s->io) df_io_close(s->io);
  if (s->tr) df_trace_close(s->tr);
  for (int f = 0; s->fds && f < s->nfiles; f++)
    if (s->fds[f] >= 0) close(s->fds[f]);
  for (int f = 0; s->paths && f < s->nfiles; f++) free(s->paths[f]);
  free(s->paths);
  free(s->fds);
  free(s->fsize);
  free(s->sec_unit);
  free(s->units);
  free(s->ex);
  free(s->kind);
  free(s->source);
  for (int k = 0; k < DF_PLAN_RING_SLOTS; k++) {
    free(s->slot[k].buf);
    free(s->slot[k].reqs);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

static int open_file(df_spine *s, int f, df_err *e) {
  if (s->fds[f] >= 0) return 0;
  const char *path = s->paths[f];
  int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0 && errno == EINVAL) {
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && s->direct) {
      df_log_warn("%s: O_DIRECT is not supported here: spine reads go through the page cache",
                  path);
      s->direct = 0;
    }
  }
  if (fd < 0) return df_err_errno(e, "spine stream: %s", path);
  struct stat st;
  if (fstat(fd, &st)) {
    close(fd);
    return df_err_errno(e, "spine stream: %s", path);
  }
  s->fds[f] = fd;
  s->fsize[f] = (uint64_t)st.st_size;
  return 0;
}

/* 1 when the streamed units read from the pack's spine section (checked:
 * every streamed unit in it, every chunk inside its drive's file), 0 when
 * the section is of another kind or layout (the files then), -1 on error. */
static int use_section(df_spine *s, const df_mf_spine *sec, df_err *e) {
  if (strcmp(sec->kind, s->kind)) {
    df_log_info("the pack's spine section is %s and this run reads the %s spine: it streams from "
                "the shards", sec->kind, s->kind);
    return 0;
  }
  if (sec->layout != s->layout_id) {
    df_log_warn("the pack's spine section does not match this model's %s spine (packed from other "
                "files?): the spine streams from the shards; re-run deltafin pack --spine %s",
                s->kind, s->kind);
    return 0;
  }
  int *map = df_xmalloc((size_t)s->nunits * sizeof *map);
  for (int u = 0; u < s->nunits; u++) map[u] = -1;
  for (int i = 0; i < sec->nunits; i++)
    if (sec->units[i].unit < s->nunits) map[sec->units[i].unit] = i;
  int maxreq = 0;
  uint8_t used[DF_MF_MAX_DRIVES] = {0};
  char un_s[32];
  for (int u = 0; u < s->nunits; u++) {
    const df_spine_unit *un = &s->units[u];
    if (!un->streamed) continue;
    if (map[u] < 0 || sec->units[map[u]].bytes != un->read) {
      free(map);
      return df_err_set(e, "spine stream: the pack's spine section has no %s of %" PRIu64
                           " bytes though its layout matches (damaged manifest?); re-run deltafin "
                           "pack --spine %s, or run with --no-pack",
                        unit_name(s, u, un_s, sizeof un_s), un->read, s->kind);
    }
    const df_mf_spine_unit *su = &sec->units[map[u]];
    if (su->nchunks > maxreq) maxreq = su->nchunks;
    for (int c = su->first; c < su->first + su->nchunks; c++) used[sec->chunks[c].drive] = 1;
  }
  /* the whole section, streamed units or not: a drive file cut short is an
   * error whatever this run's plan (another limit would stream that unit) */
  for (int i = 0; i < sec->nunits; i++) {
    const df_mf_spine_unit *su = &sec->units[i];
    for (int c = su->first; c < su->first + su->nchunks; c++) {
      const df_mf_chunk *ch = &sec->chunks[c];
      const char *path = NULL;
      uint64_t size = 0;
      int fd = df_store_pack_file(s->store, ch->drive, &path, &size);
      if (fd < 0 || ch->offset + ch->len > size) {
        df_err_set(e, "spine stream: %s, chunk %d of %d: drive %d file %s %s (offset %" PRIu64
                      ", %" PRIu64 " bytes, the file has %" PRIu64 "): the pack's spine section "
                      "is incomplete; re-run deltafin pack --spine %s, or run with --no-pack",
                   su->unit < s->nunits ? unit_name(s, su->unit, un_s, sizeof un_s) : "unit ?",
                   c - su->first + 1, su->nchunks, ch->drive, path ? path : "?",
                   fd < 0 ? "cannot be read" : "is cut short (truncated?)", ch->offset, ch->len,
                   size, s->kind);
        free(map);
        return -1;
      }
    }
  }
  if (maxreq > s->maxreq) s->maxreq = maxreq;
  s->ndrives = 0;
  for (int d = 0; d < DF_MF_MAX_DRIVES; d++) s->ndrives += used[d];
  s->sec = sec;
  s->sec_unit = map;
  return 1;
}

/* The spine's trace names the drives its reads go to: the pack's drive
 * files when they come from its spine section (a read's "drive" is then the
 * store's drive index, as in the experts' trace), else one "spine stream". */
static int open_trace(df_spine *s, const char *store_trace, df_err *e) {
  char *names[DF_MF_MAX_DRIVES] = {"spine stream"};
  int n = 1;
  if (s->sec) {
    n = 0;
    for (int c = 0; c < s->sec->nchunks; c++)
      if (s->sec->chunks[c].drive + 1 > n) n = s->sec->chunks[c].drive + 1;
    for (int d = 0; d < n; d++) {
      const char *p = NULL;
      df_store_pack_file(s->store, d, &p, NULL);
      names[d] = (char *)(p ? p : "?");
    }
  }
  size_t len = strlen(store_trace) + 16;
  char *path = df_xmalloc(len);
  snprintf(path, len, "%s.spine.jsonl", store_trace);
  const df_store_iocfg *c = df_store_iocfg_of(s->store);
  s->tr = df_trace_open(path, n, names, c->emu_spec, df_store_io_name(c->io), e);
  free(path);
  return s->tr ? 0 : -1;
}

/* Copies what streams out of the desc: the stream outlives the caller's
 * arrays. */
static void take_desc(df_spine *s, const df_spine_desc *d) {
  s->nunits = d->nunits;
  s->n_layers = d->n_layers;
  s->first = -1;
  s->units = df_xcalloc((size_t)d->nunits, sizeof *s->units);
  int nex = 0;
  for (int u = 0; u < d->nunits; u++) nex += d->units[u].streamed ? d->units[u].nex : 0;
  s->ex = df_xcalloc((size_t)(nex ? nex : 1), sizeof *s->ex);
  nex = 0;
  for (int u = 0; u < d->nunits; u++) {
    s->units[u] = d->units[u];
    s->units[u].ex = NULL;
    if (!d->units[u].streamed) {
      s->units[u].nex = 0;
      continue;
    }
    if (s->first < 0) s->first = u;
    memcpy(s->ex + nex, d->units[u].ex, (size_t)d->units[u].nex * sizeof *s->ex);
    s->units[u].ex = s->ex + nex;
    nex += d->units[u].nex;
  }
  s->nfiles = d->nfiles;
  s->paths = df_xcalloc((size_t)(d->nfiles ? d->nfiles : 1), sizeof *s->paths);
  for (int f = 0; f < d->nfiles; f++) s->paths[f] = df_xstrdup(d->paths[f]);
  s->kind = df_xstrdup(d->kind);
  s->source = df_xstrdup(d->source);
  s->layout_id = d->layout_id;
}

/* The drives and engine the reads go to: the store's scheduler when it has
 * drives, else an engine of one drive with the store's options. */
static int start_io(df_spine *s, df_err *e) {
  df_store *st = s->store;
  const df_store_iocfg *c = df_store_iocfg_of(st);
  int drive = -1;
  for (int f = 0; f < s->nfiles && drive < 0; f++)
    if (s->fds[f] >= 0) drive = df_store_spine_drive(st, s->fds[f]);
  if (s->sec) drive = 0; /* each chunk names its own drive */
  if (drive >= 0) {
    s->via_store = 1;
    s->drive = drive;
    s->qd = df_store_spine_depth(st); /* what a drive keeps in flight (rank.h) */
    if (!s->sec) s->ndrives = 1;
    s->kind_io = st->sch.io_kind;
    for (int k = 0; k < DF_PLAN_RING_SLOTS; k++)
      s->slot[k].bidx = df_store_spine_register(st, s->slot[k].buf, s->slot_bytes);
    return 0;
  }
  /* no store drives (no routed experts): nothing to rank against */
  s->qd = c->queue_depth;
  s->kind_io = c->io == DF_STORE_IO_PREAD ? DF_IO_PREAD : DF_IO_URING;
  df_io_ops ops = {take_cb, done_cb, s};
  if (df_io_open(&s->io, s->kind_io, 1, s->qd, &c->emu, &ops, e)) {
    if (s->kind_io != DF_IO_URING) return -1;
    df_log_warn("%s; the spine stream falls back to --io pread", e->msg);
    s->kind_io = DF_IO_PREAD;
    if (df_io_open(&s->io, s->kind_io, 1, s->qd, &c->emu, &ops, e)) return -1;
  }
  for (int k = 0; k < DF_PLAN_RING_SLOTS; k++)
    s->slot[k].bidx = df_io_register(s->io, s->slot[k].buf, s->slot_bytes);
  s->ndrives = 1;
  return 0;
}

int df_store_spine_open(df_store *st, const df_spine_desc *d, df_spine **out, df_err *e) {
  *out = NULL;
  int nstream = 0;
  for (int u = 0; u < d->nunits; u++) nstream += d->units[u].streamed != 0;
  if (!nstream) return 0;
  df_spine *s = df_xcalloc(1, sizeof *s);
  s->store = st;
  s->direct = 1;
  s->units_streamed = nstream;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  take_desc(s, d);
  s->fds = df_xmalloc(sizeof(int) * (size_t)(s->nfiles ? s->nfiles : 1));
  s->fsize = df_xcalloc((size_t)(s->nfiles ? s->nfiles : 1), sizeof *s->fsize);
  for (int f = 0; f < s->nfiles; f++) s->fds[f] = -1;
  for (int u = 0; u < s->nunits; u++) {
    const df_spine_unit *un = &s->units[u];
    if (!un->streamed) continue;
    if (un->read > s->slot_bytes) s->slot_bytes = un->read;
    int nreq = 0;
    for (int i = 0; i < un->nex; i++) {
      nreq += (int)((un->ex[i].len + DF_SPINE_CHUNK - 1) / DF_SPINE_CHUNK);
      if (open_file(s, un->ex[i].file, e)) goto fail;
    }
    if (nreq > s->maxreq) s->maxreq = nreq;
  }
  const df_mf_spine *sec = df_store_spine_section(st);
  if (sec && use_section(s, sec, e) < 0) goto fail;
  for (int k = 0; k < DF_PLAN_RING_SLOTS; k++) {
    sslot *sl = &s->slot[k];
    sl->buf = df_xaligned(ALIGN, s->slot_bytes);
    sl->bidx = -1;
    sl->unit = -1;
    sl->reqs = df_xcalloc((size_t)(s->maxreq ? s->maxreq : 1), sizeof *sl->reqs);
  }
  if (start_io(s, e)) goto fail;
  const char *tp = df_store_iocfg_of(st)->trace_path;
  if (tp && open_trace(s, tp, e)) goto fail;
  *out = s;
  return 0;
fail:
  df_spine_close(s);
  return -1;
}

/* ------------------------------------------------------------ acquire/release */

static int find_slot(const df_spine *s, int unit, int not) {
  for (int k = 0; k < DF_PLAN_RING_SLOTS; k++)
    if (k != not && s->slot[k].unit == unit && !s->slot[k].inuse) return k;
  return -1;
}

/* A slot that is not in use, preferring one with no reads in flight. */
static int free_slot(const df_spine *s, int not) {
  int any = -1;
  for (int k = 0; k < DF_PLAN_RING_SLOTS; k++) {
    if (k == not || s->slot[k].inuse) continue;
    if (!s->slot[k].pending) return k;
    if (any < 0) any = k;
  }
  return any;
}

const uint8_t *df_spine_acquire(df_spine *s, int unit, int next, df_err *e) {
  if (unit < 0 || unit >= s->nunits || !s->units[unit].streamed) {
    df_err_set(e, "spine stream: unit %d does not stream (internal error)", unit);
    return NULL;
  }
  pthread_mutex_lock(&s->mu);
  int k = find_slot(s, unit, -1);
  double t0 = df_now();
  if (k < 0) {
    k = free_slot(s, -1);
    if (k < 0) {
      pthread_mutex_unlock(&s->mu);
      df_err_set(e, "spine stream: no free buffer for unit %d (internal error)", unit);
      return NULL;
    }
    while (s->slot[k].pending) pthread_cond_wait(&s->cv, &s->mu);
    if (s->slot[k].unit >= 0) s->wasted += s->units[s->slot[k].unit].read;
    issue(s, k, unit);
  }
  sslot *sl = &s->slot[k];
  while (sl->pending) pthread_cond_wait(&s->cv, &s->mu);
  s->wait_s += df_now() - t0;
  if (s->tr) df_trace_batch(s->tr, df_store_clock(s->store), unit, 1, df_now() - t0);
  if (sl->err) {
    char msg[sizeof sl->errmsg];
    snprintf(msg, sizeof msg, "%s", sl->errmsg);
    sl->unit = -1;
    pthread_mutex_unlock(&s->mu);
    const df_spine_unit *un = &s->units[unit];
    char un_s[32];
    if (s->sec)
      df_err_set(e, "spine stream: %s from the pack's spine section: %s; nothing computed from "
                    "it (check with deltafin doctor; re-run deltafin pack --spine %s, or run with "
                    "--no-pack)", unit_name(s, unit, un_s, sizeof un_s), msg, s->sec->kind);
    else
      df_err_set(e, "spine stream: %s %d: reading %s: %s", unit < s->n_layers ? "layer" : "head",
                 unit, un->nex ? s->paths[un->ex[0].file] : "?", msg);
    return NULL;
  }
  sl->inuse = 1;
  s->weight_bytes += s->units[unit].bytes;
  if (unit == s->first) s->passes++;
  if (next >= 0 && next < s->nunits && s->units[next].streamed && find_slot(s, next, k) < 0) {
    int j = free_slot(s, k);
    if (j >= 0 && !s->slot[j].pending) {
      if (s->slot[j].unit >= 0) s->wasted += s->units[s->slot[j].unit].read;
      issue(s, j, next);
    }
  }
  pthread_mutex_unlock(&s->mu);
  return sl->buf;
}

void df_spine_release(df_spine *s, int unit) {
  pthread_mutex_lock(&s->mu);
  for (int k = 0; k < DF_PLAN_RING_SLOTS; k++)
    if (s->slot[k].inuse && s->slot[k].unit == unit) {
      s->slot[k].inuse = 0;
      s->slot[k].unit = -1; /* used once: the next pass reads it again */
      break;
    }
  pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------ stats */

void df_spine_stats_get(df_spine *s, df_spine_stats *st) {
  memset(st, 0, sizeof *st);
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  st->units = s->units_streamed;
  st->bytes = s->bytes;
  st->weight_bytes = s->weight_bytes;
  st->reads = s->reads;
  st->wasted = s->wasted;
  st->passes = s->passes;
  st->wait_s = s->wait_s;
  st->direct = s->sec ? df_store_o_direct(s->store) : s->direct;
  st->registered = s->slot[0].bidx >= 0;
  st->io = s->kind_io == DF_IO_URING ? "uring" : "pread";
  st->source = s->sec ? "pack" : s->source;
  st->drives = s->ndrives;
  pthread_mutex_unlock(&s->mu);
}

int df_spine_reads(const df_spine *s, df_spine_read_fn fn, void *ud) {
  if (!s) return 0;
  for (int u = 0; u < s->nunits; u++) {
    const df_spine_unit *un = &s->units[u];
    if (!un->streamed) continue;
    if (s->sec) {
      const df_mf_spine_unit *su = &s->sec->units[s->sec_unit[u]];
      for (int c = su->first; c < su->first + su->nchunks; c++) {
        const df_mf_chunk *ch = &s->sec->chunks[c];
        const char *path = NULL;
        df_store_pack_file(s->store, ch->drive, &path, NULL);
        fn(ud, path, ch->drive, ch->offset, (uint32_t)ch->len);
      }
      continue;
    }
    for (int i = 0; i < un->nex; i++)
      for (uint64_t o = 0; o < un->ex[i].len; o += DF_SPINE_CHUNK) {
        uint64_t len = un->ex[i].len - o < DF_SPINE_CHUNK ? un->ex[i].len - o : DF_SPINE_CHUNK;
        fn(ud, s->paths[un->ex[i].file], s->via_store ? s->drive : 0, un->ex[i].off + o,
           (uint32_t)len);
      }
  }
  return s->qd;
}

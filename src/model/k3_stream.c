/* The spine stream: units the plan leaves out of memory are read every pass
 * from the shards (or from the pack's spine section, below) with O_DIRECT
 * into DF_PLAN_RING_SLOTS aligned buffers,
 * through the expert store's scheduler and drives (df_store_spine_*), which
 * ranks them after the experts' demand reads and before any speculative
 * read (store/rank.h); only a store without drives (no routed experts)
 * leaves the stream its own I/O engine (store/io.h). When the forward
 * pass takes unit U it names the unit it will take next, whose reads start
 * at once into the other buffer, so unit U+1's weights arrive while U
 * computes. A unit's tensors are coalesced into few large aligned extents
 * (gaps up to GAP_MAX are read along), split into CHUNK-byte requests.
 *
 * A buffer's content is used once: after release it counts as empty, so
 * every pass reads every streamed unit (the bytes the plan says) even when
 * only one unit streams. A wrong guess of the next unit (a prefill chunk
 * that skips the head) costs the bytes already read for it, counted as
 * wasted. Resident units are the mmapped tensors and never pass through
 * here. The bytes in a buffer are the shard's bytes, so results do not
 * depend on which units stream.
 *
 * A pack's spine section (store/pack.h) holds each unit's buffer image
 * (its extents back to back) cut into chunks over the pack's drives: with
 * one, a unit's requests are its chunks, each queued on its own drive, so a
 * unit's read uses every drive; each chunk's xxh3 is checked when it lands
 * (in the drive thread, before the unit can be taken). The buffer holds the
 * same bytes as from the shards (the pieces' offsets are the same), so ids
 * do not depend on where the spine streams from. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/log.h"
#include "base/util.h"
#include "model/k3_int.h"
#include "store/io.h"
#include "store/store.h"
#include "store/trace.h"

#define ALIGN 4096u
#define GAP_MAX (256u << 10) /* read a gap this small rather than issue another read */
#define CHUNK DF_K3_STREAM_CHUNK /* bytes per request */
#define DEFAULT_QD 4

typedef struct sreq {
  df_store_spine_req sr; /* first, so a df_io_req maps back */
  struct df_k3_stream *s;
  int slot;
  uint64_t need; /* bytes the read must return (less than len only at EOF) */
  int drive;     /* the store drive it is queued on */
  int chunk;     /* pack: its chunk in the spine section; -1 = a shard read */
  double t_enq;
  struct sreq *next;
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
  union {
    df_k3_layer layer;
    df_wmat head;
  } view;
} sslot;

struct df_k3_stream {
  df_k3 *m;
  df_store *store; /* reads go through its scheduler; NULL = own engine (io) */
  int drive;       /* the store's drive for the spine's reads (shards) */
  const df_mf_spine *sec; /* the pack's spine section the units stream from; NULL = shards */
  int *sec_unit;   /* per model unit: its index in sec->units, -1 = none */
  int ndrives;     /* drives the reads go to */
  df_io *io;
  df_io_kind kind;
  df_io_emu emu;   /* for the own engine */
  int started;
  int *fds;
  uint64_t *fsize;
  int direct;
  uint64_t slot_bytes;
  int maxreq, qd;
  sslot slot[DF_PLAN_RING_SLOTS];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  sreq *qh, *qt;
  int units;
  uint64_t bytes;        /* read from the drive */
  uint64_t weight_bytes; /* tensor bytes of the units the forward pass took */
  uint64_t reads, wasted, passes;
  double wait_s;
  df_trace *tr; /* spine reads in the store's trace format (own file), NULL = none */
  char *trace_path, *trace_emu, *trace_io; /* opened at start, when the drives are known */
  double t0;
  int queued, inflight;
};

/* ------------------------------------------------------------ extents */

static int piece_cmp(const void *a, const void *b) {
  const df_k3_piece *x = a, *y = b;
  if (x->file != y->file) return x->file < y->file ? -1 : 1;
  return x->off < y->off ? -1 : x->off > y->off;
}

void df_k3_units_finish(df_k3 *m) {
  m->pl_bytes = df_xcalloc((size_t)m->nunits, sizeof *m->pl_bytes);
  m->pl_read = df_xcalloc((size_t)m->nunits, sizeof *m->pl_read);
  m->pl_must = df_xcalloc((size_t)m->nunits, 1);
  for (int u = 0; u < m->nunits; u++) {
    df_k3_unit *un = &m->units[u];
    qsort(un->pc, (size_t)un->npc, sizeof *un->pc, piece_cmp);
    un->ex = df_xcalloc((size_t)(un->npc ? un->npc : 1), sizeof *un->ex);
    un->nex = 0;
    uint64_t boff = 0;
    for (int i = 0; i < un->npc;) {
      df_k3_piece *p = &un->pc[i];
      uint64_t start = p->off / ALIGN * ALIGN, end = p->off + p->len;
      int j = i + 1;
      while (j < un->npc && un->pc[j].file == p->file && un->pc[j].off <= end + GAP_MAX) {
        uint64_t e2 = un->pc[j].off + un->pc[j].len;
        if (e2 > end) end = e2;
        j++;
      }
      end = (end + ALIGN - 1) / ALIGN * ALIGN;
      df_k3_extent *x = &un->ex[un->nex++];
      x->file = p->file;
      x->off = start;
      x->len = end - start;
      x->boff = boff;
      for (int k = i; k < j; k++) un->pc[k].boff = boff + (un->pc[k].off - start);
      boff += x->len;
      i = j;
    }
    un->read = boff;
    m->pl_bytes[u] = un->bytes;
    m->pl_read[u] = un->read;
    m->pl_must[u] = (uint8_t)un->misaligned;
    un->resident = 1;
  }
}

/* ------------------------------------------------------------ I/O callbacks */

static df_io_req *take_cb(void *ctx, int drive) {
  (void)drive;
  df_k3_stream *s = ctx;
  pthread_mutex_lock(&s->mu);
  sreq *r = s->qh;
  if (r) {
    s->qh = r->next;
    if (!s->qh) s->qt = NULL;
    s->queued--;
    s->inflight++;
  }
  pthread_mutex_unlock(&s->mu);
  return r ? &r->sr.req : NULL;
}

/* A failed or corrupt chunk of the pack's spine section, for the message. */
static void chunk_fault(const df_k3_stream *s, const sreq *r, const char *why, char *out, size_t n) {
  const df_mf_chunk *ch = &s->sec->chunks[r->chunk];
  const char *path = NULL;
  df_store_pack_file(s->store, ch->drive, &path, NULL);
  int u = s->slot[r->slot].unit;
  const df_mf_spine_unit *su = u >= 0 && s->sec_unit[u] >= 0 ? &s->sec->units[s->sec_unit[u]] : NULL;
  snprintf(out, n, "%s in chunk %d of %d (drive %d file %s, offset %" PRIu64 ", %" PRIu64 " bytes)",
           why, su ? r->chunk - su->first + 1 : 0, su ? su->nchunks : 0, ch->drive,
           path ? path : "?", ch->offset, ch->len);
}

static void read_done(df_k3_stream *s, sreq *r) {
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
    int unit = sl->unit;
    /* times on the store's clock when reads go through it, so the two
     * traces line up (the SVG draws both; tests compare their order) */
    double base = s->store ? df_now() - df_store_clock(s->store) : s->t0;
    df_trace_when w = {1, (s->store ? r->sr.t_enq : r->t_enq) - base,
                       (s->store ? r->sr.t_take : req->t_start) - base,
                       req->t_xfer1 > 0 ? req->t_xfer0 - base : 0,
                       req->t_xfer1 > 0 ? req->t_xfer1 - base : 0,
                       req->got > 0 ? (uint64_t)req->got : 0};
    df_trace_read(s->tr, req->t_done - base, unit, -1, s->sec ? r->drive : 0,
                  req->got > 0 ? (uint64_t)req->got : 0, 1, req->t_start - r->t_enq,
                  req->t_done - req->t_start, &w, ok);
    df_trace_sample(s->tr, df_now() - base, 0, s->bytes, s->reads, s->inflight,
                    s->queued);
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
  sreq *r = (sreq *)q;
  (void)ud;
  read_done(r->s, r);
}

/* Queues every read of unit u into slot k. Called with the lock held. */
static void issue(df_k3_stream *s, int k, int u) {
  const df_k3_unit *un = &s->m->units[u];
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
      sreq *r = &sl->reqs[n++];
      memset(r, 0, sizeof *r);
      r->sr.req.fd = df_store_pack_file(s->store, ch->drive, NULL, NULL);
      r->sr.req.off = ch->offset;
      r->sr.req.len = (uint32_t)ch->len;
      r->sr.req.buf = sl->buf + boff;
      r->sr.req.buf_index = sl->bidx;
      r->sr.done = store_done;
      r->s = s;
      r->slot = k;
      r->need = ch->len; /* the file's size was checked at start */
      r->drive = ch->drive;
      r->chunk = c;
      r->t_enq = df_now();
      boff += ch->len;
    }
  }
  for (int i = 0; !s->sec && i < un->nex; i++) {
    const df_k3_extent *x = &un->ex[i];
    for (uint64_t o = 0; o < x->len; o += CHUNK) {
      sreq *r = &sl->reqs[n++];
      uint64_t len = x->len - o < CHUNK ? x->len - o : CHUNK;
      uint64_t off = x->off + o, fs = s->fsize[x->file];
      memset(r, 0, sizeof *r);
      r->sr.req.fd = s->fds[x->file];
      r->sr.req.off = off;
      r->sr.req.len = (uint32_t)len;
      r->sr.req.buf = sl->buf + x->boff + o;
      r->sr.req.buf_index = sl->bidx;
      r->sr.done = store_done;
      r->s = s;
      r->slot = k;
      r->need = off >= fs ? 0 : (fs - off < len ? fs - off : len);
      r->drive = s->drive;
      r->chunk = -1;
      r->t_enq = df_now();
    }
  }
  sl->pending = n;
  for (int i = 0; i < n; i++) {
    sreq *r = &sl->reqs[i];
    if (s->store) {
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
  if (!s->store) df_io_kick(s->io, 0);
}

/* ------------------------------------------------------------ open/close */

/* Waits until no ring slot has a read in flight (a read issued ahead for the
 * next pass included). */
static void stream_wait_idle(df_k3_stream *s) {
  pthread_mutex_lock(&s->mu);
  for (;;) {
    int busy = 0;
    for (int k = 0; k < DF_PLAN_RING_SLOTS; k++) busy |= s->slot[k].pending > 0;
    if (!busy) break;
    pthread_cond_wait(&s->cv, &s->mu);
  }
  pthread_mutex_unlock(&s->mu);
}

void df_k3_stream_close(df_k3_stream *s) {
  if (!s) return;
  stream_wait_idle(s);
  if (s->io) df_io_close(s->io);
  if (s->tr) df_trace_close(s->tr);
  free(s->trace_path);
  free(s->trace_emu);
  free(s->trace_io);
  for (int f = 0; s->fds && f < s->m->nfiles; f++)
    if (s->fds[f] >= 0) close(s->fds[f]);
  free(s->fds);
  free(s->fsize);
  free(s->sec_unit);
  for (int k = 0; k < DF_PLAN_RING_SLOTS; k++) {
    free(s->slot[k].buf);
    free(s->slot[k].reqs);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

static int open_file(df_k3_stream *s, int f, df_err *e) {
  if (s->fds[f] >= 0) return 0;
  const char *path = df_k3_file_path(s->m, f);
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

/* Resident units are used in place from the shards' mappings: ask the
 * kernel to read them in now (asynchronously), so the first token does not
 * fault them in page by page; the plan budgeted the memory they stay in. */
static void read_ahead(const df_k3 *m, const df_k3_unit *un) {
  long pg = sysconf(_SC_PAGESIZE);
  for (int i = 0; i < un->npc; i++) {
    const df_st_file *f = df_k3_file(m, un->pc[i].file);
    if (!f->map || un->pc[i].off + un->pc[i].len > f->size) continue;
    uintptr_t a = (uintptr_t)(f->map + un->pc[i].off), b = a + un->pc[i].len;
    a -= a % (uintptr_t)pg;
    (void)madvise((void *)a, (size_t)(b - a), MADV_WILLNEED); /* a hint: failure costs nothing */
  }
}

int df_k3_apply_plan(df_k3 *m, const df_plan *p, const df_k3_stream_opts *o, df_err *e) {
  if (p->nunits != m->nunits) return df_err_set(e, "memory plan: %d units, model has %d", p->nunits, m->nunits);
  m->ctx_limit = p->ctx;
  int nstream = 0;
  for (int u = 0; u < m->nunits; u++) {
    m->units[u].resident = p->resident[u] || m->units[u].npc == 0;
    nstream += !m->units[u].resident;
    if (m->units[u].resident) read_ahead(m, &m->units[u]);
  }
  if (!nstream) return 0;
  df_k3_stream *s = df_xcalloc(1, sizeof *s);
  s->m = m;
  s->direct = 1;
  s->units = nstream;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->fds = df_xmalloc(sizeof(int) * (size_t)m->nfiles);
  s->fsize = df_xcalloc((size_t)m->nfiles, sizeof *s->fsize);
  for (int f = 0; f < m->nfiles; f++) s->fds[f] = -1;
  for (int u = 0; u < m->nunits; u++) {
    const df_k3_unit *un = &m->units[u];
    if (un->resident) continue;
    if (un->read > s->slot_bytes) s->slot_bytes = un->read;
    int nreq = 0;
    for (int i = 0; i < un->nex; i++) {
      nreq += (int)((un->ex[i].len + CHUNK - 1) / CHUNK);
      if (open_file(s, un->ex[i].file, e)) goto fail;
    }
    if (nreq > s->maxreq) s->maxreq = nreq;
  }
  s->kind = o && o->io && !strcmp(o->io, "pread") ? DF_IO_PREAD : DF_IO_URING;
  if (o && o->io && strcmp(o->io, "pread") && strcmp(o->io, "uring")) {
    df_err_set(e, "--io: '%s' is not uring or pread", o->io);
    goto fail;
  }
  if (o && o->emulate_drives && *o->emulate_drives &&
      df_io_parse_emu(o->emulate_drives, &s->emu, e))
    goto fail;
  s->t0 = df_now();
  if (o && o->trace_path && *o->trace_path) {
    size_t n = strlen(o->trace_path) + 16;
    s->trace_path = df_xmalloc(n);
    snprintf(s->trace_path, n, "%s.spine.jsonl", o->trace_path);
    s->trace_emu = o->emulate_drives ? df_xstrdup(o->emulate_drives) : NULL;
    s->trace_io = df_xstrdup(o->io ? o->io : "uring");
  }
  s->qd = o && o->queue_depth > 0 ? o->queue_depth : DEFAULT_QD;
  for (int k = 0; k < DF_PLAN_RING_SLOTS; k++) {
    sslot *sl = &s->slot[k];
    sl->buf = df_xaligned(ALIGN, s->slot_bytes);
    sl->bidx = -1;
    sl->unit = -1;
    sl->reqs = df_xcalloc((size_t)s->maxreq, sizeof *sl->reqs);
  }
  /* streamed routers would be read while the previous layer computes
   * (gate-ahead): they are copied out of the mapping once, here */
  for (int l = 0; l < m->cfg->n_layers; l++) {
    df_k3_layer *y = &m->layers[l];
    if (m->units[l].resident || !y->moe) continue;
    size_t nb = (size_t)y->router.rows * (size_t)y->router.cols * 2;
    void *c = df_xaligned(64, nb);
    memcpy(c, y->router.w, nb);
    if (m->nowned == m->capowned) {
      m->capowned = m->capowned ? 2 * m->capowned : 64;
      m->owned = df_xrealloc(m->owned, sizeof *m->owned * (size_t)m->capowned);
    }
    m->owned[m->nowned++] = c;
    y->router.w = c;
  }
  m->stream = s;
  return 0;
fail:
  df_k3_stream_close(s);
  return -1;
}

static const char *unit_name(const df_k3 *m, int u, char *buf, size_t n) {
  if (u < m->cfg->n_layers) snprintf(buf, n, "layer %d", u);
  else snprintf(buf, n, "the head");
  return buf;
}

/* 1 when the streamed units read from the pack's spine section (checked:
 * every streamed unit in it, every chunk inside its drive's file), 0 when
 * the section is of another kind or layout (the shards then), -1 on error. */
static int use_section(df_k3_stream *s, df_store *st, const df_mf_spine *sec, df_err *e) {
  const df_k3 *m = s->m;
  const char *kind = m->int8 ? "int8" : "bf16";
  if (strcmp(sec->kind, kind)) {
    df_log_info("the pack's spine section is %s and this run reads the %s spine: it streams from "
                "the shards", sec->kind, kind);
    return 0;
  }
  if (sec->layout != df_k3_spine_layout_id(m)) {
    df_log_warn("the pack's spine section does not match this model's %s spine (packed from other "
                "files?): the spine streams from the shards; re-run deltafin pack --spine %s",
                kind, kind);
    return 0;
  }
  int *map = df_xmalloc((size_t)m->nunits * sizeof *map);
  for (int u = 0; u < m->nunits; u++) map[u] = -1;
  for (int i = 0; i < sec->nunits; i++)
    if (sec->units[i].unit < m->nunits) map[sec->units[i].unit] = i;
  int maxreq = 0;
  uint8_t used[DF_MF_MAX_DRIVES] = {0};
  char un_s[32];
  for (int u = 0; u < m->nunits; u++) {
    const df_k3_unit *un = &m->units[u];
    if (un->resident) continue;
    if (map[u] < 0 || sec->units[map[u]].bytes != un->read) {
      free(map);
      return df_err_set(e, "spine stream: the pack's spine section has no %s of %" PRIu64
                           " bytes though its layout matches (damaged manifest?); re-run deltafin "
                           "pack --spine %s, or run with --no-pack",
                        unit_name(m, u, un_s, sizeof un_s), un->read, kind);
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
      int fd = df_store_pack_file(st, ch->drive, &path, &size);
      if (fd < 0 || ch->offset + ch->len > size) {
        df_err_set(e, "spine stream: %s, chunk %d of %d: drive %d file %s %s (offset %" PRIu64
                      ", %" PRIu64 " bytes, the file has %" PRIu64 "): the pack's spine section "
                      "is incomplete; re-run deltafin pack --spine %s, or run with --no-pack",
                   su->unit < m->nunits ? unit_name(m, su->unit, un_s, sizeof un_s) : "unit ?",
                   c - su->first + 1, su->nchunks, ch->drive, path ? path : "?",
                   fd < 0 ? "cannot be read" : "is cut short (truncated?)", ch->offset, ch->len,
                   size, kind);
        free(map);
        return -1;
      }
    }
  }
  for (int k = 0; k < DF_PLAN_RING_SLOTS; k++)
    if (maxreq > s->maxreq) {
      free(s->slot[k].reqs);
      s->slot[k].reqs = df_xcalloc((size_t)maxreq, sizeof *s->slot[k].reqs);
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
static int open_trace(df_k3_stream *s, df_store *st, df_err *e) {
  char *names[DF_MF_MAX_DRIVES] = {"spine stream"};
  int n = 1;
  if (s->sec) {
    n = 0;
    for (int c = 0; c < s->sec->nchunks; c++)
      if (s->sec->chunks[c].drive + 1 > n) n = s->sec->chunks[c].drive + 1;
    for (int d = 0; d < n; d++) {
      const char *p = NULL;
      df_store_pack_file(st, d, &p, NULL);
      names[d] = (char *)(p ? p : "?");
    }
  }
  s->tr = df_trace_open(s->trace_path, n, names, s->trace_emu, s->trace_io, e);
  return s->tr ? 0 : -1;
}

int df_k3_stream_start(df_k3 *m, df_store *st, df_err *e) {
  df_k3_stream *s = m->stream;
  if (!s || s->started) return 0;
  const df_mf_spine *sec = st ? df_store_spine_section(st) : NULL;
  if (sec) {
    s->store = st; /* use_section reads the store's pack files */
    int r = use_section(s, st, sec, e);
    s->store = NULL;
    if (r < 0) return -1;
  }
  int drive = -1;
  for (int f = 0; st && f < m->nfiles && drive < 0; f++)
    if (s->fds[f] >= 0) drive = df_store_spine_drive(st, s->fds[f]);
  if (s->sec) drive = 0; /* each chunk names its own drive */
  if (drive >= 0) {
    s->store = st;
    s->drive = drive;
    s->qd = df_store_spine_depth(st); /* what a drive keeps in flight (rank.h) */
    if (!s->sec) s->ndrives = 1;
    s->kind = !strcmp(df_store_io_used(st), "pread") ? DF_IO_PREAD : DF_IO_URING;
    for (int k = 0; k < DF_PLAN_RING_SLOTS; k++)
      s->slot[k].bidx = df_store_spine_register(st, s->slot[k].buf, s->slot_bytes);
  } else {
    /* no store drives (no routed experts): nothing to rank against */
    df_io_ops ops = {take_cb, done_cb, s};
    if (df_io_open(&s->io, s->kind, 1, s->qd, &s->emu, &ops, e)) {
      if (s->kind != DF_IO_URING) return -1;
      df_log_warn("%s; the spine stream falls back to --io pread", e->msg);
      s->kind = DF_IO_PREAD;
      if (df_io_open(&s->io, s->kind, 1, s->qd, &s->emu, &ops, e)) return -1;
    }
    for (int k = 0; k < DF_PLAN_RING_SLOTS; k++)
      s->slot[k].bidx = df_io_register(s->io, s->slot[k].buf, s->slot_bytes);
    s->ndrives = 1;
  }
  if (s->trace_path && !s->tr && open_trace(s, st, e)) return -1;
  s->started = 1;
  return 0;
}

/* ------------------------------------------------------------ acquire/release */

static int find_slot(const df_k3_stream *s, int unit, int not) {
  for (int k = 0; k < DF_PLAN_RING_SLOTS; k++)
    if (k != not && s->slot[k].unit == unit && !s->slot[k].inuse) return k;
  return -1;
}

/* A slot that is not in use, preferring one with no reads in flight. */
static int free_slot(const df_k3_stream *s, int not) {
  int any = -1;
  for (int k = 0; k < DF_PLAN_RING_SLOTS; k++) {
    if (k == not || s->slot[k].inuse) continue;
    if (!s->slot[k].pending) return k;
    if (any < 0) any = k;
  }
  return any;
}

static void *acquire(const df_k3 *m, int unit, int next, df_err *e) {
  df_k3_stream *s = m->stream;
  if (!s->started) {
    df_err_set(e, "spine stream: unit %d taken before df_k3_stream_start (internal error)", unit);
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
    if (s->slot[k].unit >= 0) s->wasted += m->units[s->slot[k].unit].read;
    issue(s, k, unit);
  }
  sslot *sl = &s->slot[k];
  while (sl->pending) pthread_cond_wait(&s->cv, &s->mu);
  s->wait_s += df_now() - t0;
  if (s->tr) df_trace_batch(s->tr, df_now() - s->t0, unit, 1, df_now() - t0);
  if (sl->err) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s", sl->errmsg);
    sl->unit = -1;
    pthread_mutex_unlock(&s->mu);
    const df_k3_unit *un = &m->units[unit];
    char un_s[32];
    if (s->sec)
      df_err_set(e, "spine stream: %s from the pack's spine section: %s; nothing computed from "
                    "it (check with deltafin doctor; re-run deltafin pack --spine %s, or run with "
                    "--no-pack)", unit_name(m, unit, un_s, sizeof un_s), msg, s->sec->kind);
    else
      df_err_set(e, "spine stream: %s %d: reading %s: %s", unit < m->cfg->n_layers ? "layer" : "head",
                 unit, un->nex ? df_k3_file_path(m, un->ex[0].file) : "?", msg);
    return NULL;
  }
  sl->inuse = 1;
  s->weight_bytes += m->units[unit].bytes;
  if (unit == df_k3_next_streamed(m, -1, 1)) s->passes++;
  if (next >= 0 && find_slot(s, next, k) < 0) {
    int j = free_slot(s, k);
    if (j >= 0 && !s->slot[j].pending) {
      if (s->slot[j].unit >= 0) s->wasted += m->units[s->slot[j].unit].read;
      issue(s, j, next);
    }
  }
  pthread_mutex_unlock(&s->mu);
  /* the view: the loaded struct with its streamed pointers into the buffer */
  const df_k3_unit *un = &m->units[unit];
  char *v = (char *)&sl->view;
  if (unit < m->cfg->n_layers) memcpy(v, &m->layers[unit], sizeof(df_k3_layer));
  else memcpy(v, &m->lm_head, sizeof(df_wmat));
  for (int i = 0; i < un->npc; i++) {
    const void *ptr = sl->buf + un->pc[i].boff;
    memcpy(v + un->pc[i].field, &ptr, sizeof ptr);
  }
  return v;
}

const df_k3_layer *df_k3_acquire_layer(const df_k3 *m, int l, int next, df_err *e) {
  if (m->units[l].resident) return &m->layers[l];
  return acquire(m, l, next, e);
}

const df_wmat *df_k3_acquire_head(const df_k3 *m, int next, df_err *e) {
  int u = m->cfg->n_layers;
  if (m->units[u].resident) return &m->lm_head;
  return acquire(m, u, next, e);
}

void df_k3_release(const df_k3 *m, int unit) {
  if (m->units[unit].resident) return;
  df_k3_stream *s = m->stream;
  pthread_mutex_lock(&s->mu);
  for (int k = 0; k < DF_PLAN_RING_SLOTS; k++)
    if (s->slot[k].inuse && s->slot[k].unit == unit) {
      s->slot[k].inuse = 0;
      s->slot[k].unit = -1; /* used once: the next pass reads it again */
      break;
    }
  pthread_mutex_unlock(&s->mu);
}

int df_k3_next_streamed(const df_k3 *m, int unit, int with_head) {
  if (!m->stream) return -1;
  int nl = m->cfg->n_layers;
  for (int u = unit + 1; u < nl; u++)
    if (!m->units[u].resident) return u;
  if (with_head && unit < nl && !m->units[nl].resident) return nl;
  /* the next pass: its first streamed layer (whether it computes the head
   * is not known yet) */
  for (int u = 0; u < nl; u++)
    if (!m->units[u].resident) return u;
  return m->units[nl].resident ? -1 : nl;
}

/* ------------------------------------------------------------ embedding */

int df_k3_embed_rows(const df_k3 *m, const int *ids, int T, float *out, df_err *e) {
  size_t H = (size_t)m->cfg->hidden;
  int i8 = m->embed.kind == DF_W_I8;
  for (int t = 0; t < T; t++) {
    uint64_t off = m->emb_off + (uint64_t)ids[t] * m->emb_row_bytes;
    ssize_t n = pread(m->emb_fd, m->emb_buf, m->emb_row_bytes, (off_t)off);
    float sc = 0;
    if (n == (ssize_t)m->emb_row_bytes && i8)
      n = pread(m->emb_fd, &sc, 4, (off_t)(m->emb_scale_off + (uint64_t)ids[t] * 4)) == 4 ? n : -1;
    if (n != (ssize_t)m->emb_row_bytes)
      return df_err_set(e, "embedding row %d: read failed (%s)", ids[t],
                        n < 0 ? strerror(errno) : "short read");
    df_wmat w = {.kind = m->embed.kind, .rows = 1, .cols = m->embed.cols, .w = m->emb_buf,
                 .scale = &sc};
    df_wmat_row(&w, 0, out + (size_t)t * H);
  }
  return 0;
}

/* ------------------------------------------------------------ stats */

void df_k3_stream_settle(const df_k3 *m) {
  df_k3_stream *s = m->stream;
  if (!s) return;
  stream_wait_idle(s);
}

void df_k3_stream_stats_get(const df_k3 *m, df_k3_stream_stats *st) {
  memset(st, 0, sizeof *st);
  df_k3_stream *s = m->stream;
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  st->units = s->units;
  st->bytes = s->bytes;
  st->weight_bytes = s->weight_bytes;
  st->reads = s->reads;
  st->wasted = s->wasted;
  st->passes = s->passes;
  st->wait_s = s->wait_s;
  st->direct = s->sec ? df_store_o_direct(s->store) : s->direct;
  st->registered = s->slot[0].bidx >= 0;
  st->io = s->kind == DF_IO_URING ? "uring" : "pread";
  st->source = s->sec ? "pack" : m->int8 ? "shards+int8" : "shards";
  st->drives = s->ndrives;
  pthread_mutex_unlock(&s->mu);
}

int df_k3_stream_reads(const df_k3 *m, df_k3_read_fn fn, void *ud) {
  const df_k3_stream *s = m->stream;
  if (!s) return 0;
  for (int u = 0; u < m->nunits; u++) {
    const df_k3_unit *un = &m->units[u];
    if (un->resident) continue;
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
      for (uint64_t o = 0; o < un->ex[i].len; o += CHUNK) {
        uint64_t len = un->ex[i].len - o < CHUNK ? un->ex[i].len - o : CHUNK;
        fn(ud, df_k3_file_path(m, un->ex[i].file), s->store ? s->drive : 0, un->ex[i].off + o,
           (uint32_t)len);
      }
  }
  return s->qd;
}

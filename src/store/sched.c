/* The read scheduler: per-drive demand and prefetch queues, the choice of
 * copy (earliest expected completion), split reads over two copies, the
 * drive threads' take/done callbacks, verification of every record and
 * re-reads from another copy. Called with the store's lock held, except the
 * callbacks, which take it. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "base/log.h"
#include "store/rank.h"
#include "store/source.h"
#include "store/store_int.h"

static void q_push(dq *q, part *p) {
  p->q_next = NULL;
  p->q_prev = q->t;
  if (q->t) q->t->q_next = p;
  else q->h = p;
  q->t = p;
  q->n++;
}

static void q_remove(dq *q, part *p) {
  if (p->q_prev) p->q_prev->q_next = p->q_next;
  else q->h = p->q_next;
  if (p->q_next) p->q_next->q_prev = p->q_prev;
  else q->t = p->q_prev;
  p->q_next = p->q_prev = NULL;
  q->n--;
}

static int part_drive(const df_store *s, const part *p) {
  return s->loc.recs[p->e->key].c[p->copy].drive;
}

/* Expected seconds until a read of `bytes` queued now on drive d completes. */
static double eta_of(const df_store *s, const dstate *d, uint64_t bytes) {
  return (double)(d->inflight_bytes + d->queued_bytes + bytes) / d->rate + s->sch.ioc.emu.latency;
}

static void part_queue(df_store *s, entry *e, int i, int copy, uint64_t off, uint32_t len,
                       uint8_t *buf, uint32_t need, uint64_t rbytes, int demand) {
  part *p = &e->parts[i];
  const copyloc *cp = &s->loc.recs[e->key].c[copy];
  dstate *d = &s->sch.drive[cp->drive];
  p->e = e;
  p->copy = copy;
  p->need = need;
  p->rbytes = rbytes;
  p->fault = DF_FAULT_NONE;
  p->err = 0;
  p->req.fd = cp->fd;
  p->req.off = off;
  p->req.len = len;
  p->req.buf = buf;
  p->req.buf_index = e->slot.bidx;
  p->req.tag = TAG_PART;
  p->queue = demand ? Q_DEMAND : Q_PREFETCH;
  p->t_enq = p->t_class = df_now();
  q_push(&d->q[demand ? 0 : 1], p);
  d->queued_bytes += rbytes;
  df_io_kick(s->sch.io, cp->drive);
}

/* Queues a read of e on the copy with the earliest expected completion
 * among those not yet tried; a large record whose second-best copy would
 * finish about as early is split between the two (the first part from one,
 * the rest from the other), so one read's bytes land on two drives at once.
 * -1 when no copy is left. */
int df_sched_enqueue(df_store *s, entry *e, int demand) {
  if (s->sch.closing) return -1;
  rec *r = &s->loc.recs[e->key];
  int best = -1, second = -1;
  double beta = 0, seta = 0;
  for (int c = 0; c < r->ncopies; c++) {
    if ((r->bad >> c & 1) || (e->tried >> c & 1)) continue;
    dstate *d = &s->sch.drive[r->c[c].drive];
    if (!d->alive) continue;
    double eta = eta_of(s, d, s->rec_bytes);
    if (best < 0 || eta < beta) {
      second = best, seta = beta;
      best = c, beta = eta;
    } else if (second < 0 || eta < seta) {
      second = c, seta = eta;
    }
  }
  if (best < 0) return -1;
  copyloc *ca = &r->c[best];
  uint64_t xxh;
  /* a stream install's record that was not fetched: the shard holds a hole
   * there, never read it (demand reads fetch first; prefetches are skipped) */
  if (s->net.src && !df_src_remote_local(s->net.src, ca->file, ca->off, s->rec_bytes, &xxh))
    return -1;
  /* local since the store opened without a demand for it yet (fetched
   * ahead, or by another process): its checksum before its first read */
  if (s->net.src && !ca->xxh) ca->xxh = xxh;
  e->tried |= (uint8_t)(1u << best);
  /* split point m (record bytes from the best copy), 0 = no split */
  uint64_t m = 0, g = DF_IO_ALIGN;
  if (second >= 0 && s->loc.from_pack && !e->no_split && s->sch.split != DF_SPLIT_OFF &&
      (s->sch.split == DF_SPLIT_ALWAYS || s->rec_bytes >= DF_STORE_SPLIT_MIN_BYTES) && ca->off % DF_IO_ALIGN == 0 &&
      r->c[second].off % DF_IO_ALIGN == 0) {
    const dstate *da = &s->sch.drive[ca->drive], *db = &s->sch.drive[r->c[second].drive];
    g = da->dio_align > db->dio_align ? da->dio_align : db->dio_align;
    /* both parts finish together: (qa + m)/ra = (qb + len - m)/rb */
    double qa = (double)(da->inflight_bytes + da->queued_bytes);
    double qb = (double)(db->inflight_bytes + db->queued_bytes);
    double f = ((qb + (double)s->rec_bytes) * da->rate - qa * db->rate) / (da->rate + db->rate);
    double len = (double)s->rec_bytes;
    if (s->sch.split == DF_SPLIT_ALWAYS) {
      /* forced (tests): always split, at the balance point clamped inside */
      if (f < (double)g) f = (double)g;
      if (f > len - 1) f = len - 1;
      m = (uint64_t)f / g * g;
    } else if (f >= len / 4 && f <= len * 3 / 4) {
      /* only when the second copy's drive would take at least a quarter:
       * both drives are about equally free */
      m = (uint64_t)f / g * g;
    }
    if (m < g || m >= s->rec_bytes) m = 0;
  }
  e->head_pad = (uint32_t)(ca->off % DF_IO_ALIGN);
  if (!m) {
    uint64_t start = ca->off - e->head_pad;
    uint32_t len = (uint32_t)DF_IO_ROUND_UP(e->head_pad + s->rec_bytes);
    e->nparts = e->pending = 1;
    part_queue(s, e, 0, best, start, len, e->slot.buf, (uint32_t)(e->head_pad + s->rec_bytes), s->rec_bytes, demand);
    return 0;
  }
  const copyloc *cb = &r->c[second];
  e->tried |= (uint8_t)(1u << second);
  e->nparts = e->pending = 2;
  s->ct.split_reads++;
  part_queue(s, e, 0, best, ca->off, (uint32_t)m, e->slot.buf, (uint32_t)m, m, demand);
  uint32_t rest = (uint32_t)((s->rec_bytes - m + g - 1) / g * g);
  part_queue(s, e, 1, second, cb->off + m, rest, e->slot.buf + m, (uint32_t)(s->rec_bytes - m), s->rec_bytes - m,
             demand);
  return 0;
}

void df_sched_promote(df_store *s, entry *e) {
  for (int i = 0; i < e->nparts && e->pending; i++) {
    part *p = &e->parts[i];
    if (p->queue != Q_PREFETCH) continue;
    int dr = part_drive(s, p);
    q_remove(&s->sch.drive[dr].q[1], p);
    q_push(&s->sch.drive[dr].q[0], p);
    p->queue = Q_DEMAND;
    p->t_class = df_now();
    df_io_kick(s->sch.io, dr);
  }
}

void df_sched_fail(df_store *s, entry *e, const char *why) {
  char msg[768];
  snprintf(msg, sizeof msg,
           "expert (layer %d, expert %d): no good copy left (%s); %s",
           df_store_key_layer(s, e->key), df_store_key_expert(s, e->key), why,
           s->net.src ? "its local copy in this stream install is damaged: run deltafin setup "
                       "--full to repair the shard (it is verified and fetched again)"
                     : "run deltafin doctor, re-run deltafin pack, or use --no-pack");
  e->state = E_FAILED;
  free(e->err);
  e->err = df_xstrdup(msg);
}

/* A queued prefetch whose layer has begun (or passed) is no longer useful. */
int df_sched_stale(const df_store *s, const entry *e) {
  return e->refs == 0 && e->speculative &&
         (e->spec_pass < s->pass ||
          (e->spec_pass == s->pass && e->spec_layer <= s->layer));
}

/* Drops a stale prefetch none of whose parts has started; 1 if dropped. */
int df_sched_drop_stale(df_store *s, entry *e) {
  if (!df_sched_stale(s, e)) return 0;
  for (int i = 0; i < e->nparts; i++)
    if (e->parts[i].queue != Q_PREFETCH) return 0;
  for (int i = 0; i < e->nparts; i++) {
    part *p = &e->parts[i];
    dstate *d = &s->sch.drive[part_drive(s, p)];
    q_remove(&d->q[1], p);
    d->queued_bytes -= p->rbytes;
    p->queue = Q_NONE;
  }
  e->pending = 0;
  s->ct.pf_dropped++;
  df_cache_entry_free(s, e);
  return 1;
}

/* ---- drive callbacks ---- */

static df_io_req *take_cb(void *ctx, int drive) {
  df_store *s = ctx;
  pthread_mutex_lock(&s->mu);
  dstate *d = &s->sch.drive[drive];
  /* stale prefetches at the head are dropped before the ranking sees them */
  while (d->q[1].h && df_sched_drop_stale(s, d->q[1].h->e)) {
  }
  /* the ranking (rank.h): demand, then spine, then a prefetch only on an
   * idle drive with no demand or spine read waiting, so a demand read that
   * arrives later waits behind at most one speculative read (measured on
   * the emulated ladder, 4 drives: allowing qd-1 prefetches in flight
   * wasted 4x the bytes and cost 13% decode speed; one at a time costs
   * nothing) */
  df_rank_drive rd = {.qd = s->sch.ioc.queue_depth, .inflight = d->inflight, .spine_inflight = d->spine_inflight,
                      .waiting = {d->q[0].n, d->sq_n, d->q[1].n}, .pf_max = DF_STORE_PF_PER_DRIVE};
  df_rank_class c = df_rank_next(&rd);
  df_io_req *r = NULL;
  if (c == DF_RANK_SPINE) {
    df_store_spine_req *q = d->sq_h;
    d->sq_h = q->next;
    if (!d->sq_h) d->sq_t = NULL;
    d->sq_n--;
    d->spine_inflight++;
    q->t_take = df_now();
    d->queued_bytes -= q->req.len;
    if (d->inflight++ == 0) d->busy_since = df_now();
    d->inflight_bytes += q->req.len;
    s->sch.total_inflight++;
    r = &q->req;
  } else if (c == DF_RANK_DEMAND || c == DF_RANK_PREFETCH) {
    part *p = d->q[c == DF_RANK_DEMAND ? 0 : 1].h;
    q_remove(&d->q[c == DF_RANK_DEMAND ? 0 : 1], p);
    p->queue = Q_FLIGHT;
    p->taken_cls = c;
    p->t_take = df_now();
    d->queued_bytes -= p->rbytes;
    if (d->inflight++ == 0) d->busy_since = df_now();
    d->inflight_bytes += p->rbytes;
    s->sch.total_inflight++;
    r = &p->req;
  }
  pthread_mutex_unlock(&s->mu);
  return r;
}

/* Every part of e has landed: verify the whole record, then hand it to the
 * batch or read it again from another copy. Called with the lock held; drops
 * it while hashing (e is LOADING with pending > 0, so nothing else touches it). */
static void finish_entry(df_store *s, entry *e) {
  df_store_fault fault = DF_FAULT_NONE;
  int err = 0, bad_part = -1;
  for (int i = 0; i < e->nparts; i++)
    if (e->parts[i].fault && !fault) fault = e->parts[i].fault, err = e->parts[i].err, bad_part = i;
  if (!fault && !s->sch.closing) {
    pthread_mutex_unlock(&s->mu);
    const uint8_t *b = e->slot.buf + e->head_pad;
    uint64_t want = s->loc.recs[e->key].c[e->parts[0].copy].xxh;
    /* pack records always carry a checksum; shard records of a stream
     * install carry the one recorded when they were fetched */
    if ((s->loc.from_pack || want) && XXH3_64bits(b, s->rec_bytes) != want)
      fault = DF_FAULT_CHECKSUM;
    else if (!s->loc.from_pack && df_src_check_scales(&s->lay, b))
      fault = DF_FAULT_SCALE_NAN;
    pthread_mutex_lock(&s->mu);
  }
  double tr = df_store_now_rel(s);
  for (int i = 0; i < e->nparts; i++) {
    part *p = &e->parts[i];
    int dr = part_drive(s, p);
    if (s->trace) {
      df_trace_when w = {p->taken_cls, p->t_class - s->t_open, p->t_take - s->t_open,
                         p->req.t_xfer1 > 0 ? p->req.t_xfer0 - s->t_open : 0,
                         p->req.t_xfer1 > 0 ? p->req.t_xfer1 - s->t_open : 0,
                         p->req.got > 0 ? (uint64_t)p->req.got : 0};
      df_trace_read(s->trace, tr, df_store_key_layer(s, e->key), df_store_key_expert(s, e->key), dr, p->rbytes,
                    e->demand && !e->speculative, p->req.t_start - p->t_enq,
                    p->req.t_done - p->req.t_start, &w, fault == DF_FAULT_NONE);
    }
    if (!fault) {
      s->sch.drive[dr].bytes += p->rbytes;
      s->sch.drive[dr].reads++;
    }
  }
  e->pending = 0;
  s->sch.total_inflight--;
  if (s->sch.closing) {
    e->state = E_FAILED;
    return;
  }
  if (!fault) {
    s->ct.bytes_read += s->rec_bytes;
    if (e->demand && !e->speculative) s->ct.bytes_demand += s->rec_bytes;
    else s->ct.bytes_prefetch += s->rec_bytes;
    if (e->prefill) s->ct.prefill_read += s->rec_bytes;
    s->ct.all_read += s->rec_bytes;
    e->state = E_READY;
    e->data = e->slot.buf + e->head_pad;
    if (s->log_on) {
      if (s->log_n == s->log_cap) {
        s->log_cap = s->log_cap ? 2 * s->log_cap : 1024;
        s->log = df_xrealloc(s->log, s->log_cap * sizeof *s->log);
      }
      s->log[s->log_n++] = (df_store_read){df_store_key_layer(s, e->key),
                                           df_store_key_expert(s, e->key), e->parts[0].copy};
    }
    return;
  }
  const char *why = df_store_fault_name(fault, err);
  if (fault == DF_FAULT_CHECKSUM) s->ct.checksum_errors++;
  else s->ct.read_errors++;
  rec *r = &s->loc.recs[e->key];
  const part *bp = &e->parts[bad_part >= 0 ? bad_part : 0];
  dstate *d = &s->sch.drive[part_drive(s, bp)];
  d->errors++;
  if (e->nparts == 2 && bad_part < 0) {
    /* a split read that does not verify: which copy is corrupt is unknown,
     * so read the whole record from one copy at a time */
    df_log_debug("expert (layer %d, expert %d): split read does not verify; reading whole copies",
                 df_store_key_layer(s, e->key), df_store_key_expert(s, e->key));
    e->no_split = 1;
    e->tried = 0;
  } else {
    const copyloc *cp = &r->c[bp->copy];
    if (!(r->bad >> bp->copy & 1))
      df_log_warn("expert (layer %d, expert %d): copy on %s at offset %" PRIu64 ": %s%s",
                  df_store_key_layer(s, e->key), df_store_key_expert(s, e->key), d->path, cp->off, why,
                  r->ncopies > 1 ? "; reading another copy" : "");
    r->bad |= (uint8_t)(1u << bp->copy);
    if (e->nparts == 2) e->tried = 0; /* the other part's copy was not judged */
  }
  int demand = e->refs > 0 || !e->speculative;
  if (df_sched_enqueue(s, e, demand) == 0) {
    s->ct.retries++;
  } else if (demand || e->pinned) {
    char w[300];
    snprintf(w, sizeof w, "%s on %s", why, d->path);
    df_sched_fail(s, e, w);
  } else {
    df_cache_entry_free(s, e);
  }
}

/* Bookkeeping of a finished read on drive d, any class (lock held). */
static void drive_done(dstate *d, uint64_t bytes, int ok) {
  d->inflight--;
  d->inflight_bytes -= bytes;
  double tnow = df_now();
  if (d->inflight == 0) {
    d->busy_s += tnow - d->busy_since;
    d->win_busy += tnow - d->busy_since;
  }
  if (ok) {
    d->win_bytes += (double)bytes;
    if (d->inflight == 0 && d->win_busy > 0.02) {
      /* Measured rate: bytes over busy time, smoothed. */
      double r = d->win_bytes / d->win_busy;
      d->rate = 0.7 * d->rate + 0.3 * r;
      d->win_bytes = d->win_busy = 0;
    }
  }
}

/* A spine read finished: its callback runs without the store's lock (the
 * spine stream takes its own lock, and submits under it). */
static void spine_done(df_store *s, int drive, df_store_spine_req *q) {
  pthread_mutex_lock(&s->mu);
  dstate *d = &s->sch.drive[drive];
  d->spine_inflight--;
  drive_done(d, q->req.len, !q->req.err && q->req.got == (int64_t)q->req.len);
  pthread_mutex_unlock(&s->mu);
  q->done(q->ud, q);
  pthread_mutex_lock(&s->mu);
  s->sch.total_inflight--; /* after the callback: close waits until it returned */
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  df_io_kick(s->sch.io, drive);
}

static void done_cb(void *ctx, int drive, df_io_req *req) {
  df_store *s = ctx;
  if (req->tag == TAG_SPINE) {
    spine_done(s, drive, (df_store_spine_req *)req);
    return;
  }
  part *p = (part *)req;
  entry *e = p->e;
  p->fault = DF_FAULT_NONE;
  p->err = req->err;
  if (req->err) p->fault = DF_FAULT_IO;
  else if ((uint64_t)req->got < p->need) p->fault = DF_FAULT_SHORT;
  pthread_mutex_lock(&s->mu);
  dstate *d = &s->sch.drive[drive];
  drive_done(d, p->rbytes, !p->fault);
  p->queue = Q_NONE;
  if (e->pending > 1) {
    e->pending--;
    s->sch.total_inflight--;
  } else {
    finish_entry(s, e);
  }
  pthread_cond_broadcast(&s->cv);
  if (d->q[1].n || d->sq_n) df_io_kick(s->sch.io, drive);
  pthread_mutex_unlock(&s->mu);
}


const char *df_store_fault_name(df_store_fault f, int err) {
  switch (f) {
  case DF_FAULT_NONE: return "ok";
  case DF_FAULT_IO: return strerror(err);
  case DF_FAULT_SHORT: return "short read (file truncated?)";
  case DF_FAULT_CHECKSUM: return "checksum mismatch";
  case DF_FAULT_SCALE_NAN: return "E8M0 scale 255 (NaN) in an expert";
  }
  return "unknown fault";
}

/* Drops every queued prefetch whose layer has begun. */
void df_sched_drop_all_stale(df_store *s) {
  for (int d = 0; d < s->sch.ndrives; d++) {
    part *p = s->sch.drive[d].q[1].h;
    while (p) {
      part *nx = p->q_next; /* a dropped split read's other part is on another drive */
      df_sched_drop_stale(s, p->e);
      p = nx;
    }
  }
}

/* Close: every queued part fails; the drive threads finish what is in flight. */
void df_sched_cancel_queued(df_store *s) {
  for (int i = 0; i < s->sch.ndrives; i++)
    for (int q = 0; q < 2; q++)
      while (s->sch.drive[i].q[q].h) {
        part *p = s->sch.drive[i].q[q].h;
        q_remove(&s->sch.drive[i].q[q], p);
        p->queue = Q_NONE;
        p->e->pending--;
        p->e->state = E_FAILED;
      }
}

df_io_ops df_sched_ops(df_store *s) { return (df_io_ops){take_cb, done_cb, s}; }

df_store_spine_req *df_sched_take_spine_queued(df_store *s) {
  df_store_spine_req *all = NULL;
  for (int i = 0; i < s->sch.ndrives; i++) {
    dstate *d = &s->sch.drive[i];
    while (d->sq_h) {
      df_store_spine_req *q = d->sq_h;
      d->sq_h = q->next;
      d->queued_bytes -= q->req.len;
      q->next = all;
      all = q;
    }
    d->sq_t = NULL;
    d->sq_n = 0;
  }
  return all;
}

/* ---- the spine's reads (store.h) ---- */

int df_store_spine_drive(df_store *s, int fd) {
  if (!s || !s->sch.io || s->sch.ndrives < 1) return -1;
  struct stat fs, ds;
  if (fstat(fd, &fs)) return 0;
  for (int i = 0; i < s->sch.ndrives; i++)
    if (s->sch.drive[i].path && !stat(s->sch.drive[i].path, &ds) && ds.st_dev == fs.st_dev) return i;
  return 0;
}

int df_store_spine_depth(const df_store *s) { return df_rank_spine_max(s->sch.ioc.queue_depth); }

int df_store_spine_register(df_store *s, void *base, size_t len) {
  return s->sch.io ? df_io_register(s->sch.io, base, len) : -1;
}

int df_store_spine_submit(df_store *s, int drive, df_store_spine_req *r) {
  r->req.tag = TAG_SPINE;
  r->next = NULL;
  pthread_mutex_lock(&s->mu);
  r->t_enq = df_now(); /* under the lock, as the experts' queue times */
  if (s->sch.closing) {
    pthread_mutex_unlock(&s->mu);
    return -1;
  }
  dstate *d = &s->sch.drive[drive];
  if (d->sq_t) d->sq_t->next = r;
  else d->sq_h = r;
  d->sq_t = r;
  d->sq_n++;
  d->queued_bytes += r->req.len;
  pthread_mutex_unlock(&s->mu);
  df_io_kick(s->sch.io, drive);
  return 0;
}

const char *df_store_io_used(const df_store *s) { return s->sch.io_kind == DF_IO_URING ? "uring" : "pread"; }

double df_store_clock(const df_store *s) { return df_store_now_rel(s); }

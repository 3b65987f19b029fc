/* The expert store: sources (pack copies or checkpoint shards), the read
 * scheduler, the RAM cache, predictors and statistics.
 *
 * One mutex guards all of it; drive threads (io.c) take reads and report
 * completions through take_cb/done_cb. Every entry lives in idx[] from the
 * moment its read is queued until it is evicted; an entry referenced by the
 * current batch (refs > 0) is never evicted, so the bytes handed out stay
 * valid until df_store_end. */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/log.h"
#include "base/util.h"
#include "store/heat.h"
#include "store/io.h"
#include "store/manifest.h"
#include "store/source.h"
#include "store/trace.h"

#define ALIGN 4096u
#define DEFAULT_QD 8
#define HALF_LIFE 32.0     /* forward passes for the decayed frequency to halve */
#define AUTO_MIN_SAMPLES 8 /* recall samples before `auto` may switch a predictor off */
#define AUTO_RECALL 0.35   /* below this a predictor moves more waste than it saves */
#define SAMPLE_PERIOD 0.010
#define PF_PER_DRIVE 1 /* speculative reads in flight per drive */
#define SPLIT_MIN_BYTES (1u << 20) /* records below this are never split in the default mode */

enum { E_LOADING = 1, E_READY, E_FAILED };
enum { Q_NONE = 0, Q_DEMAND, Q_PREFETCH, Q_FLIGHT };
enum { P_GATE = 0, P_PREV = 1, NPRED = 2 };
static const char *pred_name[NPRED] = {"gate", "prev"};

typedef struct copyloc {
  int drive, fd;
  uint64_t off, xxh;
} copyloc;

typedef struct rec {
  uint8_t ncopies, bad; /* bad: copies found unreadable or corrupt (bit per copy) */
  copyloc c[DF_MF_MAX_COPIES];
} rec;

typedef struct slot {
  uint8_t *buf;
  int bidx;
} slot;

struct entry;

/* One read of an entry: the whole record from one copy, or one of the two
 * halves of a split read (first part from one copy, the rest from another).
 * req comes first so a completed df_io_req maps back to its part. */
typedef struct part {
  df_io_req req;
  struct entry *e;
  int copy, queue;
  uint32_t need;   /* bytes the request must return (head + this part's record bytes) */
  uint64_t rbytes; /* record bytes this part carries */
  double t_enq;
  const char *why; /* I/O failure of this part, NULL = ok */
  struct part *qn, *qp; /* drive queue */
} part;

typedef struct entry {
  int key, state, refs, handed, spec, pinned, prot, hits, demand, prefill;
  uint8_t tried, nosplit;
  int nparts, pending; /* parts of the current read; parts queued, in flight or being verified */
  long spec_pass;
  int spec_layer;
  double score;
  long tick;
  slot sl;
  uint32_t head;
  const uint8_t *data;
  struct entry *rn, *rp;       /* resident list */
  part pt[2];
  char *err;
} entry;

typedef struct dq {
  part *h, *t;
  int n;
} dq;

typedef struct dstate {
  char *path;
  int alive;
  double rate; /* measured bytes/s (starts as declared) */
  uint64_t bytes, reads, errors;
  uint32_t dio_align; /* O_DIRECT offset/length granularity of this drive's file */
  double busy_s, busy_since;
  int inflight;
  uint64_t inflight_bytes, queued_bytes;
  double win_bytes, win_busy; /* rate window */
  dq q[2];                    /* 0 demand, 1 prefetch */
} dstate;

typedef struct pred {
  long pass;
  int n, prefill; /* made from a prefill chunk: a union over rows, not a per-token guess */
  int *ex;
} pred;

struct df_store {
  const df_config *cfg;
  df_expert_layout lay;
  int first, nl, ne;
  size_t nkeys;
  uint64_t len, slot_bytes;
  int pack;
  char *source; /* manifest path or the model dir */
  int nfds, *fds;
  int direct; /* O_DIRECT in use */
  int ndrives;
  dstate *d;
  rec *recs;

  df_io *io;
  df_io_kind kind;
  int qd;
  df_io_emu emu;
  char *emu_str;

  pthread_mutex_t mu;
  pthread_cond_t cv;
  entry **idx;
  entry *res_head; /* resident list */

  slot *freel;
  int nfree, capfree, per_chunk, nchunks;
  uint8_t **chunks;

  long resident, unref, nprot;
  long cap_slots; /* cache budget in records; < 0 unlimited */
  long pf_allow;
  long cache_mb;

  /* current batch */
  int layer;
  long pass;
  int n, batch_cap, batch_prefill;
  double batch_wait; /* time the model waited in df_store_next for this batch */
  entry **batch;

  /* split reads: -1 never, 0 large records when both copies are idle-ish,
   * 1 whenever two readable copies exist (tests) */
  int split_mode;
  uint64_t split_reads;

  /* predictors */
  unsigned pf_mask;
  int pf_auto;
  char *pf_str;
  pred *pr[NPRED];
  double *rc_ewma[NPRED], *rc_hits[NPRED], *rc_total[NPRED];
  long *rc_n[NPRED];
  uint64_t pf_issued_by[NPRED];
  int **last_set, *last_n;

  /* heat */
  df_heat heat;
  float *seed;
  char *heat_path;

  /* stats */
  uint64_t bytes_read, bytes_demand, bytes_prefetch, pf_used, pf_wasted, pf_dropped, pf_issued;
  uint64_t requests, hits, pf_inflight_hits, evictions, retries, csum_err, read_err;
  uint64_t pre_need, pre_read, all_need, all_read, bytes_out;
  double *wait_layer, wait_total;
  long pinned;

  df_trace *tr;
  double t0;
  pthread_t sampler;
  int sampler_on, stop, closing, total_inflight;
};

static double now_rel(const df_store *s) { return df_now() - s->t0; }

/* ---- slots (O_DIRECT buffers, registered with the rings in chunks) ---- */

static slot slot_get(df_store *s) {
  if (!s->nfree) {
    size_t bytes = (size_t)s->per_chunk * s->slot_bytes;
    uint8_t *base = df_xaligned(ALIGN, bytes);
    int bidx = s->io ? df_io_register(s->io, base, bytes) : -1;
    s->chunks = df_xrealloc(s->chunks, (size_t)(s->nchunks + 1) * sizeof *s->chunks);
    s->chunks[s->nchunks++] = base;
    if (s->capfree < s->nfree + s->per_chunk) {
      s->capfree = s->nfree + s->per_chunk + s->capfree;
      s->freel = df_xrealloc(s->freel, (size_t)s->capfree * sizeof *s->freel);
    }
    for (int i = s->per_chunk - 1; i >= 0; i--)
      s->freel[s->nfree++] = (slot){base + (size_t)i * s->slot_bytes, bidx};
  }
  return s->freel[--s->nfree];
}

static void slot_put(df_store *s, slot sl) {
  if (s->nfree == s->capfree) {
    s->capfree = s->capfree ? s->capfree * 2 : 64;
    s->freel = df_xrealloc(s->freel, (size_t)s->capfree * sizeof *s->freel);
  }
  s->freel[s->nfree++] = sl;
}

/* ---- entries ---- */

static int key_layer(const df_store *s, int key) { return s->first + key / s->ne; }
static int key_expert(const df_store *s, int key) { return key % s->ne; }

static double score_now(const df_store *s, const entry *e) {
  return e->score * exp2(-(double)(s->pass - e->tick) / HALF_LIFE);
}

static entry *entry_new(df_store *s, int key) {
  entry *e = df_xcalloc(1, sizeof *e);
  e->key = key;
  e->state = E_LOADING;
  e->sl = slot_get(s);
  e->score = s->seed ? s->seed[key] : 0;
  e->tick = s->pass;
  e->pt[0].e = e->pt[1].e = e;
  e->rn = s->res_head;
  if (s->res_head) s->res_head->rp = e;
  s->res_head = e;
  s->idx[key] = e;
  s->resident++;
  s->unref++;
  return e;
}

static void entry_free(df_store *s, entry *e) {
  if (e->refs == 0) s->unref--;
  if (e->prot) s->nprot--;
  s->resident--;
  if (e->rp) e->rp->rn = e->rn;
  else s->res_head = e->rn;
  if (e->rn) e->rn->rp = e->rp;
  s->idx[e->key] = NULL;
  slot_put(s, e->sl);
  free(e->err);
  free(e);
}

static void q_push(dq *q, part *p) {
  p->qn = NULL;
  p->qp = q->t;
  if (q->t) q->t->qn = p;
  else q->h = p;
  q->t = p;
  q->n++;
}

static void q_remove(dq *q, part *p) {
  if (p->qp) p->qp->qn = p->qn;
  else q->h = p->qn;
  if (p->qn) p->qn->qp = p->qp;
  else q->t = p->qp;
  p->qn = p->qp = NULL;
  q->n--;
}

static int part_drive(const df_store *s, const part *p) {
  return s->recs[p->e->key].c[p->copy].drive;
}

/* Expected seconds until a read of `bytes` queued now on drive d completes. */
static double eta_of(const df_store *s, const dstate *d, uint64_t bytes) {
  return (double)(d->inflight_bytes + d->queued_bytes + bytes) / d->rate + s->emu.latency;
}

static void part_queue(df_store *s, entry *e, int i, int copy, uint64_t off, uint32_t len,
                       uint8_t *buf, uint32_t need, uint64_t rbytes, int demand) {
  part *p = &e->pt[i];
  const copyloc *cp = &s->recs[e->key].c[copy];
  dstate *d = &s->d[cp->drive];
  p->e = e;
  p->copy = copy;
  p->need = need;
  p->rbytes = rbytes;
  p->why = NULL;
  p->req.fd = cp->fd;
  p->req.off = off;
  p->req.len = len;
  p->req.buf = buf;
  p->req.buf_index = e->sl.bidx;
  p->queue = demand ? Q_DEMAND : Q_PREFETCH;
  p->t_enq = df_now();
  q_push(&d->q[demand ? 0 : 1], p);
  d->queued_bytes += rbytes;
  df_io_kick(s->io, cp->drive);
}

/* Queues a read of e on the copy with the earliest expected completion
 * among those not yet tried; a large record whose second-best copy would
 * finish about as early is split between the two (the first part from one,
 * the rest from the other), so one read's bytes land on two drives at once.
 * -1 when no copy is left. */
static int enqueue(df_store *s, entry *e, int demand) {
  if (s->closing) return -1;
  rec *r = &s->recs[e->key];
  int best = -1, second = -1;
  double beta = 0, seta = 0;
  for (int c = 0; c < r->ncopies; c++) {
    if ((r->bad >> c & 1) || (e->tried >> c & 1)) continue;
    dstate *d = &s->d[r->c[c].drive];
    if (!d->alive) continue;
    double eta = eta_of(s, d, s->len);
    if (best < 0 || eta < beta) {
      second = best, seta = beta;
      best = c, beta = eta;
    } else if (second < 0 || eta < seta) {
      second = c, seta = eta;
    }
  }
  if (best < 0) return -1;
  const copyloc *ca = &r->c[best];
  e->tried |= (uint8_t)(1u << best);
  /* split point m (record bytes from the best copy), 0 = no split */
  uint64_t m = 0, g = ALIGN;
  if (second >= 0 && s->pack && !e->nosplit && s->split_mode >= 0 &&
      (s->split_mode > 0 || s->len >= SPLIT_MIN_BYTES) && ca->off % ALIGN == 0 &&
      r->c[second].off % ALIGN == 0) {
    const dstate *da = &s->d[ca->drive], *db = &s->d[r->c[second].drive];
    g = da->dio_align > db->dio_align ? da->dio_align : db->dio_align;
    /* both parts finish together: (qa + m)/ra = (qb + len - m)/rb */
    double qa = (double)(da->inflight_bytes + da->queued_bytes);
    double qb = (double)(db->inflight_bytes + db->queued_bytes);
    double f = ((qb + (double)s->len) * da->rate - qa * db->rate) / (da->rate + db->rate);
    double len = (double)s->len;
    if (s->split_mode > 0) {
      /* forced (tests): always split, at the balance point clamped inside */
      if (f < (double)g) f = (double)g;
      if (f > len - 1) f = len - 1;
      m = (uint64_t)f / g * g;
    } else if (f >= len / 4 && f <= len * 3 / 4) {
      /* only when the second copy's drive would take at least a quarter:
       * both drives are about equally free */
      m = (uint64_t)f / g * g;
    }
    if (m < g || m >= s->len) m = 0;
  }
  e->head = (uint32_t)(ca->off % ALIGN);
  if (!m) {
    uint64_t start = ca->off - e->head;
    uint32_t len = (uint32_t)((e->head + s->len + ALIGN - 1) / ALIGN * ALIGN);
    e->nparts = e->pending = 1;
    part_queue(s, e, 0, best, start, len, e->sl.buf, (uint32_t)(e->head + s->len), s->len, demand);
    return 0;
  }
  const copyloc *cb = &r->c[second];
  e->tried |= (uint8_t)(1u << second);
  e->nparts = e->pending = 2;
  s->split_reads++;
  part_queue(s, e, 0, best, ca->off, (uint32_t)m, e->sl.buf, (uint32_t)m, m, demand);
  uint32_t rest = (uint32_t)((s->len - m + g - 1) / g * g);
  part_queue(s, e, 1, second, cb->off + m, rest, e->sl.buf + m, (uint32_t)(s->len - m), s->len - m,
             demand);
  return 0;
}

static int busy(const entry *e) { return e->pending > 0; }

static void promote(df_store *s, entry *e) {
  for (int i = 0; i < e->nparts && e->pending; i++) {
    part *p = &e->pt[i];
    if (p->queue != Q_PREFETCH) continue;
    int dr = part_drive(s, p);
    q_remove(&s->d[dr].q[1], p);
    q_push(&s->d[dr].q[0], p);
    p->queue = Q_DEMAND;
    df_io_kick(s->io, dr);
  }
}

static void fail_entry(df_store *s, entry *e, const char *why) {
  char msg[768];
  snprintf(msg, sizeof msg,
           "expert (layer %d, expert %d): no good copy left (%s); run deltafin doctor, re-run "
           "deltafin pack, or use --no-pack",
           key_layer(s, e->key), key_expert(s, e->key), why);
  e->state = E_FAILED;
  free(e->err);
  e->err = df_xstrdup(msg);
}

/* A queued prefetch whose layer has begun (or passed) is no longer useful. */
static int stale(const df_store *s, const entry *e) {
  return e->refs == 0 && e->spec &&
         (e->spec_pass < s->pass ||
          (e->spec_pass == s->pass && e->spec_layer <= s->layer));
}

/* Drops a stale prefetch none of whose parts has started; 1 if dropped. */
static int drop_stale(df_store *s, entry *e) {
  if (!stale(s, e)) return 0;
  for (int i = 0; i < e->nparts; i++)
    if (e->pt[i].queue != Q_PREFETCH) return 0;
  for (int i = 0; i < e->nparts; i++) {
    part *p = &e->pt[i];
    dstate *d = &s->d[part_drive(s, p)];
    q_remove(&d->q[1], p);
    d->queued_bytes -= p->rbytes;
    p->queue = Q_NONE;
  }
  e->pending = 0;
  s->pf_dropped++;
  entry_free(s, e);
  return 1;
}

/* ---- drive callbacks ---- */

static df_io_req *take_cb(void *ctx, int drive) {
  df_store *s = ctx;
  pthread_mutex_lock(&s->mu);
  dstate *d = &s->d[drive];
  part *p = NULL;
  if (d->q[0].h) {
    p = d->q[0].h;
    q_remove(&d->q[0], p);
  } else {
    /* a prefetch starts only on an idle drive: a demand read that arrives
     * later then waits behind at most one speculative read (measured on the
     * emulated ladder, 4 drives: allowing qd-1 prefetches in flight wasted
     * 4x the bytes and cost 13% decode speed; one at a time costs nothing) */
    int spare = PF_PER_DRIVE;
    for (part *f = d->q[1].h; f;) {
      if (drop_stale(s, f->e)) {
        f = d->q[1].h; /* everything before f was dropped too */
        continue;
      }
      if (d->inflight < spare) {
        p = f;
        q_remove(&d->q[1], p);
      }
      break;
    }
  }
  if (p) {
    p->queue = Q_FLIGHT;
    d->queued_bytes -= p->rbytes;
    if (d->inflight++ == 0) d->busy_since = df_now();
    d->inflight_bytes += p->rbytes;
    s->total_inflight++;
  }
  pthread_mutex_unlock(&s->mu);
  return p ? &p->req : NULL;
}

/* Every part of e has landed: verify the whole record, then hand it to the
 * batch or read it again from another copy. Called with the lock held; drops
 * it while hashing (e is LOADING with pending > 0, so nothing else touches it). */
static void finish_entry(df_store *s, entry *e) {
  const char *why = NULL;
  int bad_part = -1;
  for (int i = 0; i < e->nparts; i++)
    if (e->pt[i].why && !why) why = e->pt[i].why, bad_part = i;
  if (!why && !s->closing) {
    pthread_mutex_unlock(&s->mu);
    const uint8_t *b = e->sl.buf + e->head;
    if (s->pack && XXH3_64bits(b, s->len) != s->recs[e->key].c[e->pt[0].copy].xxh)
      why = "checksum mismatch";
    else if (!s->pack && df_src_check_scales(&s->lay, b))
      why = "E8M0 scale 255 (NaN) in an expert";
    pthread_mutex_lock(&s->mu);
  }
  double tr = now_rel(s);
  for (int i = 0; i < e->nparts; i++) {
    part *p = &e->pt[i];
    int dr = part_drive(s, p);
    if (s->tr)
      df_trace_read(s->tr, tr, key_layer(s, e->key), key_expert(s, e->key), dr, p->rbytes,
                    e->demand && !e->spec, p->req.t_start - p->t_enq,
                    p->req.t_done - p->req.t_start, why == NULL);
    if (!why) {
      s->d[dr].bytes += p->rbytes;
      s->d[dr].reads++;
    }
  }
  e->pending = 0;
  s->total_inflight--;
  if (s->closing) {
    e->state = E_FAILED;
    return;
  }
  if (!why) {
    s->bytes_read += s->len;
    if (e->demand && !e->spec) s->bytes_demand += s->len;
    else s->bytes_prefetch += s->len;
    if (e->prefill) s->pre_read += s->len;
    s->all_read += s->len;
    e->state = E_READY;
    e->data = e->sl.buf + e->head;
    return;
  }
  if (!strcmp(why, "checksum mismatch")) s->csum_err++;
  else s->read_err++;
  rec *r = &s->recs[e->key];
  const part *bp = &e->pt[bad_part >= 0 ? bad_part : 0];
  dstate *d = &s->d[part_drive(s, bp)];
  d->errors++;
  if (e->nparts == 2 && bad_part < 0) {
    /* a split read that does not verify: which copy is corrupt is unknown,
     * so read the whole record from one copy at a time */
    df_log_debug("expert (layer %d, expert %d): split read does not verify; reading whole copies",
                 key_layer(s, e->key), key_expert(s, e->key));
    e->nosplit = 1;
    e->tried = 0;
  } else {
    const copyloc *cp = &r->c[bp->copy];
    if (!(r->bad >> bp->copy & 1))
      df_log_warn("expert (layer %d, expert %d): copy on %s at offset %" PRIu64 ": %s%s",
                  key_layer(s, e->key), key_expert(s, e->key), d->path, cp->off, why,
                  r->ncopies > 1 ? "; reading another copy" : "");
    r->bad |= (uint8_t)(1u << bp->copy);
    if (e->nparts == 2) e->tried = 0; /* the other part's copy was not judged */
  }
  int demand = e->refs > 0 || !e->spec;
  if (enqueue(s, e, demand) == 0) {
    s->retries++;
  } else if (demand || e->pinned) {
    char w[300];
    snprintf(w, sizeof w, "%s on %s", why, d->path);
    fail_entry(s, e, w);
  } else {
    entry_free(s, e);
  }
}

static void done_cb(void *ctx, int drive, df_io_req *req) {
  df_store *s = ctx;
  part *p = (part *)req;
  entry *e = p->e;
  p->why = NULL;
  if (req->err) p->why = strerror(req->err);
  else if ((uint64_t)req->got < p->need) p->why = "short read (file truncated?)";
  pthread_mutex_lock(&s->mu);
  dstate *d = &s->d[drive];
  d->inflight--;
  d->inflight_bytes -= p->rbytes;
  double tnow = df_now();
  if (d->inflight == 0) {
    d->busy_s += tnow - d->busy_since;
    d->win_busy += tnow - d->busy_since;
  }
  p->queue = Q_NONE;
  if (!p->why) {
    d->win_bytes += (double)p->rbytes;
    if (d->inflight == 0 && d->win_busy > 0.02) {
      /* Measured rate: bytes over busy time, smoothed. */
      double r = d->win_bytes / d->win_busy;
      d->rate = 0.7 * d->rate + 0.3 * r;
      d->win_bytes = d->win_busy = 0;
    }
  }
  if (e->pending > 1) {
    e->pending--;
    s->total_inflight--;
  } else {
    finish_entry(s, e);
  }
  pthread_cond_broadcast(&s->cv);
  if (d->q[1].n) df_io_kick(s->io, drive);
  pthread_mutex_unlock(&s->mu);
}

/* ---- sampler ---- */

static void *sampler_main(void *arg) {
  df_store *s = arg;
  pthread_mutex_lock(&s->mu);
  double next = df_now();
  while (!s->stop) {
    if (df_now() >= next) {
      double t = now_rel(s);
      for (int i = 0; i < s->ndrives; i++)
        df_trace_sample(s->tr, t, i, s->d[i].bytes, s->d[i].reads, s->d[i].inflight,
                        s->d[i].q[0].n + s->d[i].q[1].n);
      next += SAMPLE_PERIOD;
      if (next < df_now()) next = df_now() + SAMPLE_PERIOD;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double dt = next - df_now();
    if (dt < 0) dt = 0;
    ts.tv_nsec += (long)(dt * 1e9);
    while (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---- open ---- */

static int open_direct(const char *path, int *direct) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0 && errno == EINVAL) {
    /* e.g. tmpfs: correct, but the page cache is not bypassed */
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) *direct = 0;
  }
#ifdef F_NOCACHE
  if (fd >= 0) fcntl(fd, F_NOCACHE, 1);
#endif
  return fd;
}

/* The O_DIRECT offset/length granularity of an open file (statx DIOALIGN
 * where the kernel reports it, else the page size the pack aligns to). */
static uint32_t dio_align_of(int fd) {
  int fl = fcntl(fd, F_GETFL);
  int direct = fl >= 0 && (fl & O_DIRECT);
  uint32_t g = direct ? ALIGN : 512;
#ifdef STATX_DIOALIGN
  struct statx sx;
  if (direct && statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
      (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align > 0) {
    g = sx.stx_dio_offset_align;
    if (sx.stx_dio_mem_align > g) g = sx.stx_dio_mem_align;
  }
#endif
  if (g < 512) g = 512;
  if (g > ALIGN || ALIGN % g) g = ALIGN;
  return g;
}

static int open_pack(df_store *s, const df_st_set *set, const char *mpath, df_err *e) {
  df_manifest m;
  if (df_manifest_load(&m, mpath, e)) return -1;
  const df_config *c = s->cfg;
  if (m.first_layer != s->first || m.n_layers != c->n_layers || m.n_experts != c->n_experts ||
      m.record_bytes != s->len) {
    df_manifest_free(&m);
    return df_err_set(e,
                      "pack %s does not match this model's expert layout (re-run deltafin pack, "
                      "or use --no-pack)",
                      mpath);
  }
  uint64_t fp;
  if (df_src_fingerprint(set, &fp, e)) {
    df_manifest_free(&m);
    return -1;
  }
  if (fp != m.fingerprint) {
    df_manifest_free(&m);
    return df_err_set(e,
                      "pack %s was made from other checkpoint files than %s (re-run deltafin "
                      "pack, or use --no-pack)",
                      mpath, set->dir);
  }
  s->ndrives = m.ndrives;
  s->d = df_xcalloc((size_t)m.ndrives, sizeof *s->d);
  s->nfds = m.ndrives;
  s->fds = df_xmalloc((size_t)m.ndrives * sizeof *s->fds);
  uint64_t *size = df_xcalloc((size_t)m.ndrives, sizeof *size);
  char **why = df_xcalloc((size_t)m.ndrives, sizeof *why);
  for (int i = 0; i < m.ndrives; i++) {
    char *p = df_manifest_file_path(&m, i);
    s->d[i].path = df_xstrdup(m.drives[i].path);
    s->d[i].rate = m.drives[i].bandwidth > 0 ? m.drives[i].bandwidth : 2e9;
    s->fds[i] = open_direct(p, &s->direct);
    struct stat st;
    if (s->fds[i] < 0) {
      why[i] = df_xstrdup(strerror(errno));
      df_log_warn("pack drive %s: %s: %s", m.drives[i].path, p, why[i]);
    } else if (fstat(s->fds[i], &st) == 0) {
      size[i] = (uint64_t)st.st_size;
      if (size[i] < m.drives[i].bytes) {
        why[i] = df_xstrdup("pack file truncated");
        df_log_warn("pack drive %s: %s is %" PRIu64 " bytes, the manifest says %" PRIu64
                    " (truncated): records past the end are read from other copies",
                    m.drives[i].path, p, size[i], m.drives[i].bytes);
      }
    }
    s->d[i].alive = s->fds[i] >= 0;
    s->d[i].dio_align = s->fds[i] >= 0 ? dio_align_of(s->fds[i]) : ALIGN;
    free(p);
  }
  int rc = 0;
  uint64_t padded = (s->len + ALIGN - 1) / ALIGN * ALIGN;
  for (int k = 0; k < m.nrecs && !rc; k++) {
    const df_mf_record *mr = &m.recs[k];
    rec *r = &s->recs[k];
    r->ncopies = (uint8_t)mr->ncopies;
    int good = 0;
    for (int c = 0; c < mr->ncopies; c++) {
      int dr = mr->copies[c].drive;
      r->c[c] = (copyloc){dr, s->fds[dr], mr->copies[c].offset, mr->copies[c].xxh3};
      if (s->fds[dr] < 0 || mr->copies[c].offset + padded > size[dr]) r->bad |= (uint8_t)(1u << c);
      else good++;
    }
    if (!good) {
      int dr = mr->copies[0].drive;
      rc = df_err_set(e,
                      "pack %s: expert (layer %d, expert %d) has no readable copy (drive %s: %s); "
                      "re-run deltafin pack or use --no-pack",
                      mpath, mr->layer, mr->expert, m.drives[dr].path,
                      why[dr] ? why[dr] : "record past the end of the file");
    }
  }
  for (int i = 0; i < m.ndrives; i++) free(why[i]);
  free(why);
  free(size);
  df_manifest_free(&m);
  return rc;
}

static int open_shards(df_store *s, const df_st_set *set, df_err *e) {
  df_src_loc *loc = df_xmalloc(s->nkeys * sizeof *loc);
  if (df_src_locate(set, s->cfg, loc, e)) {
    free(loc);
    return -1;
  }
  s->ndrives = 1;
  s->d = df_xcalloc(1, sizeof *s->d);
  s->d[0].path = df_xstrdup(set->dir);
  s->d[0].rate = 2e9;
  s->d[0].alive = 1;
  s->nfds = set->nfiles;
  s->fds = df_xmalloc((size_t)set->nfiles * sizeof *s->fds);
  for (int i = 0; i < set->nfiles; i++) s->fds[i] = -1;
  for (int i = 0; i < set->nfiles; i++) {
    const char *p = df_st_set_file_path(set, i);
    s->fds[i] = open_direct(p, &s->direct);
    if (s->fds[i] < 0) {
      free(loc);
      return df_err_errno(e, "%s", p);
    }
  }
  for (size_t k = 0; k < s->nkeys; k++) {
    s->recs[k].ncopies = 1;
    s->recs[k].c[0] = (copyloc){0, s->fds[loc[k].file], loc[k].off, 0};
  }
  free(loc);
  return 0;
}

static long default_cache_mb(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || psz <= 0) return 4096;
  return (long)((double)pages * (double)psz / 4 / 1048576.0);
}

static int pin_hottest(df_store *s, const float *heat, long pin_mb, df_err *e) {
  uint64_t want = (uint64_t)pin_mb << 20;
  size_t n = s->nkeys, cnt = 0;
  int *order = df_xmalloc(n * sizeof *order);
  for (size_t k = 0; k < n; k++)
    if (heat[k] > 0) order[cnt++] = (int)k;
  /* hottest first; ties by key so the choice is reproducible */
  for (size_t i = 1; i < cnt; i++) {
    int v = order[i];
    size_t j = i;
    while (j > 0 && (heat[order[j - 1]] < heat[v] ||
                     (heat[order[j - 1]] == heat[v] && order[j - 1] > v))) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = v;
  }
  size_t take = (size_t)(want / s->len);
  if (take > cnt) take = cnt;
  if (!cnt) df_log_warn("--pin-mb: no heat recorded yet (%s); nothing pinned", s->heat_path ? s->heat_path : "no heat file");
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < take; i++) {
    entry *x = entry_new(s, order[i]);
    x->pinned = 1;
    x->refs = 1;
    s->unref--;
    x->demand = 1;
    if (enqueue(s, x, 1)) fail_entry(s, x, "no readable copy");
  }
  int rc = 0;
  for (size_t i = 0; i < take && !rc; i++) {
    entry *x = s->idx[order[i]];
    while (x->state == E_LOADING) pthread_cond_wait(&s->cv, &s->mu);
    if (x->state == E_FAILED) rc = df_err_set(e, "--pin-mb: %s", x->err);
  }
  s->pinned = (long)take;
  pthread_mutex_unlock(&s->mu);
  free(order);
  return rc;
}

int df_store_open(df_store **out, const df_st_set *set, const df_config *c,
                  const df_store_opts *o, df_err *e) {
  df_store_opts dflt = {0};
  if (!o) {
    dflt.cache_mb = -1;
    o = &dflt;
  }
  df_store *s = df_xcalloc(1, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->t0 = df_now();
  s->cfg = c;
  df_expert_layout_of(c, &s->lay);
  s->first = c->first_k_dense;
  s->nl = c->n_layers - c->first_k_dense;
  s->ne = c->n_experts;
  s->layer = 1 << 30;
  s->direct = 1;
  if (s->nl < 1 || s->ne < 1) {
    *out = s; /* no routed experts: nothing to store */
    return 0;
  }
  s->nkeys = (size_t)s->nl * (size_t)s->ne;
  s->len = s->lay.total;
  s->recs = df_xcalloc(s->nkeys, sizeof *s->recs);
  s->idx = df_xcalloc(s->nkeys, sizeof *s->idx);
  const char *model_dir = o->model_dir ? o->model_dir : set->dir;

  char *mpath = NULL;
  if (o->manifest && o->no_pack) {
    df_store_close(s);
    return df_err_set(e, "--store and --no-pack contradict each other; pass one");
  }
  if (o->manifest) mpath = df_xstrdup(o->manifest);
  else if (!o->no_pack) {
    mpath = df_path_join(model_dir, DF_PACK_MANIFEST_NAME);
    if (!df_file_exists(mpath)) {
      free(mpath);
      mpath = NULL;
    }
  }
  int rc;
  if (mpath) {
    s->pack = 1;
    s->source = mpath;
    rc = open_pack(s, set, mpath, e);
  } else {
    s->source = df_xstrdup(set->dir);
    rc = open_shards(s, set, e);
  }
  if (rc) goto fail;
  s->slot_bytes = (s->len + ALIGN - 1) / ALIGN * ALIGN + (s->pack ? 0 : ALIGN);

  if (!df_store_io_name(o->io) || !df_store_prefetch_name(o->prefetch) ||
      !df_store_split_name(o->split_reads)) {
    rc = df_err_set(e, "store options out of range (--io %d, --prefetch %d, --split-reads %d)",
                    (int)o->io, (int)o->prefetch, (int)o->split_reads);
    goto fail;
  }
  s->kind = o->io == DF_STORE_IO_PREAD ? DF_IO_PREAD : DF_IO_URING;
  s->qd = o->queue_depth > 0 ? o->queue_depth : DEFAULT_QD;
  s->split_mode = o->split_reads == DF_SPLIT_OFF ? -1 : o->split_reads == DF_SPLIT_ALWAYS ? 1 : 0;
  if (o->emulate_drives && *o->emulate_drives) {
    if ((rc = df_io_parse_emu(o->emulate_drives, &s->emu, e))) goto fail;
    s->emu_str = df_xstrdup(o->emulate_drives);
    for (int i = 0; i < s->ndrives; i++) s->d[i].rate = s->emu.bw;
  }
  s->cache_mb = o->cache_mb < 0 ? default_cache_mb() : o->cache_mb;
  s->cap_slots = (long)(((uint64_t)s->cache_mb << 20) / s->slot_bytes);
  s->pf_allow = (long)s->qd * s->ndrives;
  if (s->pf_allow < 2L * c->top_k) s->pf_allow = 2L * c->top_k;
  s->per_chunk = (int)((1u << 30) / s->slot_bytes);
  if (s->per_chunk > 16) s->per_chunk = 16;
  if (s->per_chunk < 1) s->per_chunk = 1;

  switch (o->prefetch) {
  case DF_PREFETCH_OFF: s->pf_mask = 0; break;
  case DF_PREFETCH_GATE: s->pf_mask = 1u << P_GATE; break;
  case DF_PREFETCH_PREV: s->pf_mask = 1u << P_PREV; break;
  default: s->pf_mask = 3, s->pf_auto = 1; break;
  }
  s->pf_str = df_xstrdup(df_store_prefetch_name(o->prefetch));
  for (int p = 0; p < NPRED; p++) {
    s->pr[p] = df_xcalloc((size_t)s->nl, sizeof *s->pr[p]);
    for (int l = 0; l < s->nl; l++) {
      s->pr[p][l].ex = df_xmalloc((size_t)s->ne * sizeof(int));
      s->pr[p][l].pass = -1;
    }
    s->rc_ewma[p] = df_xcalloc((size_t)s->nl, sizeof(double));
    s->rc_hits[p] = df_xcalloc((size_t)s->nl, sizeof(double));
    s->rc_total[p] = df_xcalloc((size_t)s->nl, sizeof(double));
    s->rc_n[p] = df_xcalloc((size_t)s->nl, sizeof(long));
  }
  s->last_set = df_xcalloc((size_t)s->nl, sizeof *s->last_set);
  s->last_n = df_xcalloc((size_t)s->nl, sizeof *s->last_n);
  for (int l = 0; l < s->nl; l++) s->last_set[l] = df_xmalloc((size_t)s->ne * sizeof(int));
  s->wait_layer = df_xcalloc((size_t)s->nl, sizeof(double));

  /* heat: the prior (from the file) seeds cache scores and pinning; this
   * run's counts are merged into the file at close */
  /* the default heat file lives in the model folder when that is writable
   * (a read-only checkpoint just runs without one) */
  if (!o->heat_path) {
    if (access(model_dir, W_OK) == 0) s->heat_path = df_path_join(model_dir, "deltafin.heat");
    else df_log_debug("%s is not writable: no heat file", model_dir);
  }
  else if (*o->heat_path) s->heat_path = df_xstrdup(o->heat_path);
  int found = 0;
  df_heat prior = {0};
  df_err he;
  if (s->heat_path &&
      df_heat_load(&prior, s->heat_path, s->first, c->n_layers, s->ne, &found, &he)) {
    df_log_warn("%s (ignored)", he.msg);
    found = 0;
  }
  if (!found) {
    df_heat_free(&prior);
    prior.count = df_xcalloc(s->nkeys, sizeof(float));
  }
  if (found) {
    double sum = 0;
    for (size_t k = 0; k < s->nkeys; k++) sum += prior.count[k];
    s->seed = df_xcalloc(s->nkeys, sizeof *s->seed);
    for (size_t k = 0; k < s->nkeys && sum > 0; k++) {
      double v = prior.count[k] / (sum / (double)s->nkeys);
      s->seed[k] = (float)(v > 8 ? 8 : v);
    }
  }
  s->heat.first_layer = s->first;
  s->heat.n_layers = c->n_layers;
  s->heat.n_experts = s->ne;
  s->heat.count = df_xcalloc(s->nkeys, sizeof(float));

  if (o->trace_path && *o->trace_path) {
    char **paths = df_xmalloc((size_t)s->ndrives * sizeof *paths);
    for (int i = 0; i < s->ndrives; i++) paths[i] = s->d[i].path;
    s->tr = df_trace_open(o->trace_path, s->ndrives, paths, s->emu_str,
                          s->kind == DF_IO_URING ? "uring" : "pread", e);
    free(paths);
    if (!s->tr) {
      df_heat_free(&prior);
      rc = -1;
      goto fail;
    }
  }
  df_io_ops ops = {take_cb, done_cb, s};
  if (df_io_open(&s->io, s->kind, s->ndrives, s->qd, &s->emu, &ops, e)) {
    if (s->kind != DF_IO_URING) {
      df_heat_free(&prior);
      rc = -1;
      goto fail;
    }
    df_log_warn("%s; falling back to --io pread", e->msg);
    s->kind = DF_IO_PREAD;
    if (df_io_open(&s->io, s->kind, s->ndrives, s->qd, &s->emu, &ops, e)) {
      df_heat_free(&prior);
      rc = -1;
      goto fail;
    }
  }
  if (!s->direct) df_log_warn("O_DIRECT is not supported for %s: expert reads go through the page cache", s->source);
  if (s->tr && pthread_create(&s->sampler, NULL, sampler_main, s) == 0) s->sampler_on = 1;
  if (o->pin_mb > 0) rc = pin_hottest(s, prior.count, o->pin_mb, e);
  df_heat_free(&prior);
  if (rc) goto fail;
  *out = s;
  return 0;
fail:
  df_store_close(s);
  return -1;
}

/* ---- close ---- */

void df_store_close(df_store *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->closing = 1;
  for (int i = 0; i < s->ndrives; i++)
    for (int q = 0; q < 2; q++)
      while (s->d[i].q[q].h) {
        part *p = s->d[i].q[q].h;
        q_remove(&s->d[i].q[q], p);
        p->queue = Q_NONE;
        p->e->pending--;
        p->e->state = E_FAILED;
      }
  while (s->total_inflight > 0) pthread_cond_wait(&s->cv, &s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (s->sampler_on) pthread_join(s->sampler, NULL);
  if (s->io) df_io_close(s->io);
  if (s->heat_path && s->heat.count && s->requests) {
    df_err e;
    if (df_heat_merge_save(&s->heat, s->heat_path, &e))
      df_log_warn("heat file not saved: %s", e.msg);
  }
  df_trace_close(s->tr);
  while (s->res_head) {
    s->res_head->refs = 0;
    s->unref++;
    entry_free(s, s->res_head);
  }
  for (int i = 0; i < s->nchunks; i++) free(s->chunks[i]);
  free(s->chunks);
  free(s->freel);
  for (int i = 0; i < s->nfds; i++)
    if (s->fds[i] >= 0) close(s->fds[i]);
  free(s->fds);
  for (int i = 0; i < s->ndrives; i++) free(s->d[i].path);
  free(s->d);
  free(s->recs);
  free(s->idx);
  free(s->batch);
  for (int p = 0; p < NPRED; p++) {
    if (s->pr[p])
      for (int l = 0; l < s->nl; l++) free(s->pr[p][l].ex);
    free(s->pr[p]);
    free(s->rc_ewma[p]);
    free(s->rc_hits[p]);
    free(s->rc_total[p]);
    free(s->rc_n[p]);
  }
  if (s->last_set)
    for (int l = 0; l < s->nl; l++) free(s->last_set[l]);
  free(s->last_set);
  free(s->last_n);
  free(s->wait_layer);
  df_heat_free(&s->heat);
  free(s->seed);
  free(s->heat_path);
  free(s->source);
  free(s->emu_str);
  free(s->pf_str);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

/* ---- prefetch ---- */

static int pred_on(const df_store *s, int p, int li) {
  if (!(s->pf_mask >> p & 1)) return 0;
  if (!s->pf_auto) return 1;
  return s->rc_n[p][li] < AUTO_MIN_SAMPLES || s->rc_ewma[p][li] >= AUTO_RECALL;
}

static void prefetch_one(df_store *s, int p, long pass, int layer, int expert) {
  int key = (layer - s->first) * s->ne + expert;
  if (s->idx[key]) return;
  /* only spare budget: a speculative load never evicts anything, and never
   * takes the last free slot of the in-flight allowance */
  if (s->unref + 1 >= s->cap_slots + s->pf_allow) return;
  entry *x = entry_new(s, key);
  x->spec = 1;
  x->spec_pass = pass;
  x->spec_layer = layer;
  x->prefill = s->batch_prefill;
  if (enqueue(s, x, 0)) {
    entry_free(s, x);
    return;
  }
  s->pf_issued++;
  s->pf_issued_by[p]++;
}

static void predict(df_store *s, int p, long pass, int layer, const int *ex, int n) {
  int li = layer - s->first;
  pred *pp = &s->pr[p][li];
  pp->pass = pass;
  pp->n = n;
  pp->prefill = s->batch_prefill;
  memcpy(pp->ex, ex, (size_t)n * sizeof *ex);
  /* auto reads nothing speculative for a prefill chunk: the chunk's own
   * union keeps the drives busy, and a chunk must read each needed expert
   * once (amplification 1.00); an explicit --prefetch gate still does */
  if (s->pf_auto && s->batch_prefill) return;
  if (pred_on(s, p, li))
    for (int i = 0; i < n; i++) prefetch_one(s, p, pass, layer, ex[i]);
}

void df_store_hint(df_store *s, int layer, const int *experts, int n) {
  if (!s || !s->nkeys || layer < s->first || layer >= s->first + s->nl || n <= 0 || n > s->ne)
    return;
  for (int i = 0; i < n; i++)
    if (experts[i] < 0 || experts[i] >= s->ne) return;
  pthread_mutex_lock(&s->mu);
  long pass = layer > s->layer ? s->pass : s->pass + 1;
  if (s->layer == 1 << 30) pass = 1;
  predict(s, P_GATE, pass, layer, experts, n);
  pthread_mutex_unlock(&s->mu);
}

int df_store_wants_hint(const df_store *s) {
  return s && s->nkeys && (s->pf_mask >> P_GATE & 1);
}

/* ---- batches ---- */

static void touch(df_store *s, entry *x) {
  x->score = score_now(s, x) + 1.0;
  x->tick = s->pass;
}

int df_store_begin(df_store *s, int layer, const int *experts, int n, int rows, df_err *e) {
  if (!s->nkeys || layer < s->first || layer >= s->cfg->n_layers)
    return df_err_set(e, "store: layer %d has no routed experts", layer);
  if (n < 1) return df_err_set(e, "store: layer %d: empty expert list", layer);
  for (int i = 0; i < n; i++)
    if (experts[i] < 0 || experts[i] >= s->ne || (i && experts[i] <= experts[i - 1]))
      return df_err_set(e, "store: layer %d: expert list not sorted/unique/in range", layer);
  pthread_mutex_lock(&s->mu);
  if (s->n) {
    pthread_mutex_unlock(&s->mu);
    return df_err_set(e, "store: layer %d: df_store_begin before df_store_end", layer);
  }
  if (layer <= s->layer) s->pass++;
  if (s->layer == 1 << 30) s->pass = 1;
  s->layer = layer;
  int li = layer - s->first;
  /* recall of what each predictor said about this layer */
  for (int p = 0; p < NPRED; p++) {
    pred *pp = &s->pr[p][li];
    if (pp->pass != s->pass) continue;
    int hit = 0;
    for (int i = 0, j = 0; i < pp->n; i++) {
      int v = pp->ex[i];
      /* experts[] is sorted; predictions may not be */
      int lo = 0, hi = n - 1;
      (void)j;
      while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (experts[mid] == v) {
          hit++;
          break;
        }
        if (experts[mid] < v) lo = mid + 1;
        else hi = mid - 1;
      }
    }
    double r = (double)hit / n;
    s->rc_hits[p][li] += hit;
    s->rc_total[p][li] += n;
    /* auto decides on per-token predictions only (a prefill union's recall
     * says little about decode) */
    if (!pp->prefill) {
      s->rc_ewma[p][li] = s->rc_n[p][li] ? 0.8 * s->rc_ewma[p][li] + 0.2 * r : r;
      s->rc_n[p][li]++;
    }
    pp->pass = -1;
  }
  if (s->batch_cap < n) {
    s->batch_cap = n;
    s->batch = df_xrealloc(s->batch, (size_t)n * sizeof *s->batch);
  }
  s->n = n;
  s->batch_wait = 0;
  int prefill = rows > 1;
  s->batch_prefill = prefill;
  for (int i = 0; i < n; i++) {
    int key = li * s->ne + experts[i];
    entry *x = s->idx[key];
    s->requests++;
    s->all_need += s->len;
    if (prefill) s->pre_need += s->len;
    s->heat.count[key] += 1;
    if (x && x->state == E_FAILED && x->refs == 0 && !busy(x)) {
      entry_free(s, x);
      x = NULL;
    }
    if (x) {
      if (x->state == E_READY) {
        s->hits++;
        if (++x->hits >= 2 && !x->prot && s->nprot < s->cap_slots * 4 / 5) {
          x->prot = 1;
          s->nprot++;
        }
      } else {
        s->pf_inflight_hits++;
        promote(s, x);
      }
      if (x->spec) {
        s->pf_used += s->len;
        x->spec = 0;
      }
      x->demand = 1;
    } else {
      x = entry_new(s, key);
      x->demand = 1;
      x->prefill = prefill;
      if (enqueue(s, x, 1)) fail_entry(s, x, "every copy is unreadable or corrupt");
    }
    touch(s, x);
    if (x->refs++ == 0) s->unref--;
    x->handed = 0;
    s->batch[i] = x;
  }
  /* queued prefetches for layers that have begun are dropped */
  for (int d = 0; d < s->ndrives; d++) {
    part *p = s->d[d].q[1].h;
    while (p) {
      part *nx = p->qn; /* a dropped split read's other part is on another drive */
      drop_stale(s, p->e);
      p = nx;
    }
  }
  /* previous-token predictor: the next layer will want what it wanted last time */
  memcpy(s->last_set[li], experts, (size_t)n * sizeof *experts);
  s->last_n[li] = n;
  int nli = li + 1 < s->nl ? li + 1 : 0;
  long npass = li + 1 < s->nl ? s->pass : s->pass + 1;
  /* only from decode-sized batches: a prefill chunk's union says little
   * about the next pass and would mostly be wasted reads */
  if (s->last_n[nli] && s->last_n[nli] <= s->cfg->top_k && n <= s->cfg->top_k)
    predict(s, P_PREV, npass, s->first + nli, s->last_set[nli], s->last_n[nli]);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

int df_store_next(df_store *s, int *idx, const uint8_t **bytes, df_err *e) {
  pthread_mutex_lock(&s->mu);
  double t0 = 0;
  int li = s->layer - s->first;
  for (;;) {
    int left = 0;
    for (int i = 0; i < s->n; i++) {
      entry *x = s->batch[i];
      if (x->handed) continue;
      left = 1;
      if (x->state == E_READY) {
        x->handed = 1;
        *idx = i;
        *bytes = x->data;
        s->bytes_out += s->len;
        if (t0 > 0) {
          double w = df_now() - t0;
          s->wait_layer[li] += w;
          s->wait_total += w;
          s->batch_wait += w;
        }
        pthread_mutex_unlock(&s->mu);
        return 1;
      }
      if (x->state == E_FAILED) {
        df_err_set(e, "%s", x->err ? x->err : "expert read failed");
        pthread_mutex_unlock(&s->mu);
        return -1;
      }
    }
    if (!left) {
      pthread_mutex_unlock(&s->mu);
      return 0;
    }
    if (t0 == 0) t0 = df_now();
    pthread_cond_wait(&s->cv, &s->mu);
  }
}

typedef struct cand {
  int prot;
  double score;
  entry *e;
} cand;

static int cmp_cand(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->prot != y->prot) return x->prot - y->prot;
  if (x->score != y->score) return x->score < y->score ? -1 : 1;
  return x->e->key - y->e->key;
}

/* Evicts unreferenced entries down to the budget: coldest unprotected first.
 * Entries still loading and prefetches for layers not yet begun stay. */
static void evict(df_store *s) {
  long over = s->unref - s->cap_slots;
  if (over <= 0) return;
  cand *c = df_xmalloc((size_t)s->unref * sizeof *c);
  long nc = 0;
  for (entry *x = s->res_head; x; x = x->rn) {
    if (x->refs || x->pinned || x->state == E_LOADING || busy(x)) continue;
    if (x->spec && !stale(s, x)) continue;
    if (nc < s->unref) c[nc++] = (cand){x->prot, score_now(s, x), x};
  }
  qsort(c, (size_t)nc, sizeof *c, cmp_cand);
  for (long i = 0; i < nc && i < over; i++) {
    if (c[i].e->spec) s->pf_wasted += s->len;
    s->evictions++;
    entry_free(s, c[i].e);
  }
  free(c);
}

void df_store_end(df_store *s) {
  if (!s || !s->nkeys) return;
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < s->n; i++) {
    entry *x = s->batch[i];
    if (--x->refs == 0) s->unref++;
  }
  if (s->tr) df_trace_batch(s->tr, now_rel(s), s->layer, s->n, s->batch_wait);
  s->n = 0;
  evict(s);
  pthread_mutex_unlock(&s->mu);
}

/* ---- stats ---- */

uint64_t df_store_bytes_read(const df_store *s) { return s ? s->bytes_read : 0; }

static double amp(const df_store *s) {
  if (s->pre_need) return (double)s->pre_read / (double)s->pre_need;
  return s->all_need ? (double)s->all_read / (double)s->all_need : 0.0;
}

char *df_store_describe(const df_store *s) {
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "experts from %s %s (%d drive%s), io %s qd %d%s, cache %ld MB, prefetch %s",
                   s->pack ? "pack" : "shards", s->source ? s->source : "-", s->ndrives,
                   s->ndrives == 1 ? "" : "s", s->kind == DF_IO_URING ? "io_uring" : "pread", s->qd,
                   s->io && df_io_registered(s->io) ? " registered buffers" : "", s->cache_mb,
                   s->pf_str ? s->pf_str : "off");
  if (s->emu_str && n > 0 && (size_t)n < sizeof buf)
    snprintf(buf + n, sizeof buf - (size_t)n, ", EMULATED drives %s", s->emu_str);
  return df_xstrdup(buf);
}

char *df_store_stats_json(const df_store *s) {
  df_store *m = (df_store *)s;
  pthread_mutex_lock(&m->mu);
  json_t *o = json_object();
  json_object_set_new(o, "source", json_string(s->pack ? "pack" : "shards"));
  json_object_set_new(o, "location", s->source ? json_string(s->source) : json_null());
  json_object_set_new(o, "io", json_string(s->kind == DF_IO_URING ? "uring" : "pread"));
  json_object_set_new(o, "o_direct", json_boolean(s->direct));
  json_object_set_new(o, "registered_buffers", json_boolean(s->io && df_io_registered(s->io)));
  json_object_set_new(o, "queue_depth", json_integer(s->qd));
  json_object_set_new(o, "emulated", s->emu_str ? json_string(s->emu_str) : json_null());
  json_object_set_new(o, "record_bytes", json_integer((json_int_t)s->len));
  json_object_set_new(o, "expert_bytes_read", json_integer((json_int_t)s->bytes_read));
  json_object_set_new(o, "expert_bytes_demand", json_integer((json_int_t)s->bytes_demand));
  json_object_set_new(o, "expert_bytes_prefetch", json_integer((json_int_t)s->bytes_prefetch));
  json_object_set_new(o, "prefetch_used_bytes", json_integer((json_int_t)s->pf_used));
  json_object_set_new(o, "prefetch_wasted_bytes", json_integer((json_int_t)s->pf_wasted));
  json_object_set_new(o, "prefetch_issued", json_integer((json_int_t)s->pf_issued));
  json_object_set_new(o, "prefetch_dropped", json_integer((json_int_t)s->pf_dropped));
  json_object_set_new(o, "expert_bytes_handed", json_integer((json_int_t)s->bytes_out));
  json_object_set_new(o, "expert_requests", json_integer((json_int_t)s->requests));
  json_object_set_new(o, "cache_hits", json_integer((json_int_t)s->hits));
  json_object_set_new(o, "prefetch_inflight_hits", json_integer((json_int_t)s->pf_inflight_hits));
  json_object_set_new(o, "cache_hit_rate",
                      json_real(s->requests ? (double)s->hits / (double)s->requests : 0.0));
  json_object_set_new(o, "prefill_read_amplification", json_real(amp(s)));
  json_object_set_new(o, "read_amplification",
                      json_real(s->all_need ? (double)s->all_read / (double)s->all_need : 0.0));
  json_t *c = json_object();
  json_object_set_new(c, "budget_mb", json_integer(s->cache_mb));
  json_object_set_new(c, "resident_bytes", json_integer((json_int_t)((uint64_t)s->resident * s->len)));
  json_object_set_new(c, "pinned_bytes", json_integer((json_int_t)((uint64_t)s->pinned * s->len)));
  json_object_set_new(c, "protected", json_integer(s->nprot));
  json_object_set_new(c, "evictions", json_integer((json_int_t)s->evictions));
  json_object_set_new(o, "cache", c);
  json_object_set_new(o, "wait_seconds", json_real(s->wait_total));
  json_t *wl = json_array();
  for (int l = 0; l < s->nl; l++) json_array_append_new(wl, json_real(s->wait_layer ? s->wait_layer[l] : 0));
  json_object_set_new(o, "wait_seconds_per_layer", wl);
  json_t *pr = json_object();
  for (int p = 0; p < NPRED && s->rc_n[p]; p++) {
    json_t *po = json_object(), *pl = json_array();
    double h = 0, t = 0;
    long nsm = 0;
    for (int l = 0; l < s->nl; l++) {
      h += s->rc_hits[p][l];
      t += s->rc_total[p][l];
      nsm += s->rc_n[p][l];
      json_array_append_new(pl, s->rc_total[p][l] > 0 ? json_real(s->rc_hits[p][l] / s->rc_total[p][l])
                                                      : json_null());
    }
    json_t *on = json_array();
    for (int l = 0; l < s->nl; l++) json_array_append_new(on, json_boolean(pred_on(s, p, l)));
    json_object_set_new(po, "enabled", json_boolean(s->pf_mask >> p & 1));
    json_object_set_new(po, "on_per_layer", on);
    json_object_set_new(po, "recall", t > 0 ? json_real(h / t) : json_null());
    json_object_set_new(po, "samples", json_integer(nsm));
    json_object_set_new(po, "issued", json_integer((json_int_t)s->pf_issued_by[p]));
    json_object_set_new(po, "recall_per_layer", pl);
    json_object_set_new(pr, pred_name[p], po);
  }
  json_object_set_new(o, "predictors", pr);
  json_t *dr = json_array();
  for (int i = 0; i < s->ndrives; i++) {
    const dstate *d = &s->d[i];
    double busy = d->busy_s + (d->inflight ? df_now() - d->busy_since : 0);
    json_t *x = json_object();
    json_object_set_new(x, "path", json_string(d->path));
    json_object_set_new(x, "bytes", json_integer((json_int_t)d->bytes));
    json_object_set_new(x, "reads", json_integer((json_int_t)d->reads));
    json_object_set_new(x, "seconds_busy", json_real(busy));
    json_object_set_new(x, "mb_per_s_busy", json_real(busy > 0 ? (double)d->bytes / 1e6 / busy : 0.0));
    json_object_set_new(x, "rate_estimate", json_real(d->rate));
    json_object_set_new(x, "errors", json_integer((json_int_t)d->errors));
    json_object_set_new(x, "alive", json_boolean(d->alive));
    json_array_append_new(dr, x);
  }
  json_object_set_new(o, "drives", dr);
  json_object_set_new(o, "split_reads", json_integer((json_int_t)s->split_reads));
  uint32_t g = 0;
  for (int i = 0; i < s->ndrives && s->pack; i++)
    if (s->d[i].dio_align > g) g = s->d[i].dio_align;
  json_object_set_new(o, "split_granularity", json_integer(g));
  json_object_set_new(o, "retries", json_integer((json_int_t)s->retries));
  json_object_set_new(o, "checksum_errors", json_integer((json_int_t)s->csum_err));
  json_object_set_new(o, "read_errors", json_integer((json_int_t)s->read_err));
  pthread_mutex_unlock(&m->mu);
  char *j = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  char *r = df_xstrdup(j);
  free(j);
  return r;
}

char *df_store_stats_text(const df_store *s) {
  df_store *m = (df_store *)s;
  char *desc = df_store_describe(s);
  size_t cap = 4096 + (size_t)s->ndrives * 200 + (size_t)s->nl * 64, n = 0;
  char *b = df_xmalloc(cap);
  pthread_mutex_lock(&m->mu);
#define AP(...) n += (size_t)snprintf(b + n, n < cap ? cap - n : 0, __VA_ARGS__)
  AP("%s\n", desc);
  if (s->emu_str)
    AP("NOTE: drives are EMULATED (%s each, throttled in the store): the drive figures below are "
       "the emulation's, not the disks'\n",
       s->emu_str);
  AP("expert reads: %.1f MB (demand %.1f MB, prefetch used %.1f MB, prefetch wasted %.1f MB); "
     "cache hit rate %.1f%% (%llu of %llu); waited %.3f s on experts\n",
     (double)s->bytes_read / 1e6, (double)s->bytes_demand / 1e6, (double)s->pf_used / 1e6,
     (double)s->pf_wasted / 1e6, s->requests ? 100.0 * (double)s->hits / (double)s->requests : 0.0,
     (unsigned long long)s->hits, (unsigned long long)s->requests, s->wait_total);
  AP("prefill read amplification %.2f; %llu reads split over two copies\n", amp(s),
     (unsigned long long)s->split_reads);
  for (int i = 0; i < s->ndrives; i++) {
    const dstate *d = &s->d[i];
    AP("drive %d%s %s: %.1f MB in %llu reads, busy %.3f s, %.1f MB/s%s%s\n", i,
       s->emu_str ? " (emulated)" : "", d->path,
       (double)d->bytes / 1e6, (unsigned long long)d->reads, d->busy_s,
       d->busy_s > 0 ? (double)d->bytes / 1e6 / d->busy_s : 0.0, d->errors ? ", errors" : "",
       d->alive ? "" : " (missing)");
  }
  for (int p = 0; p < NPRED; p++) {
    double h = 0, t = 0;
    for (int l = 0; l < s->nl; l++) h += s->rc_hits[p][l], t += s->rc_total[p][l];
    if (!(t > 0)) continue;
    AP("predictor %s: recall %.2f%s; per layer (* = switched off by auto):", pred_name[p], h / t,
       s->pf_mask >> p & 1 ? "" : " (measured only)");
    for (int l = 0; l < s->nl && n < cap - 32; l++) {
      if (s->rc_total[p][l] > 0)
        AP(" %d:%.2f%s", s->first + l, s->rc_hits[p][l] / s->rc_total[p][l],
           (s->pf_mask >> p & 1) && !pred_on(s, p, l) ? "*" : "");
      else
        AP(" %d:-", s->first + l);
    }
    AP("\n");
  }
  if (s->nl) {
    AP("wait per layer (ms):");
    for (int l = 0; l < s->nl && n < cap - 32; l++) AP(" %.1f", s->wait_layer[l] * 1e3);
    AP("\n");
  }
#undef AP
  pthread_mutex_unlock(&m->mu);
  free(desc);
  return b;
}

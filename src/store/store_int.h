/* Internal to the expert store: its state and the functions its files share.
 *
 * The store's files, one concern each:
 *   store.c    open/close and the batch API (begin/next/end), the read log
 *   records.c  where each record lives: the pack's files or the shards,
 *              O_DIRECT, and df_store_locate
 *   sched.c    the read scheduler: per-drive queues (the spine's too), copy choice, split
 *              reads, the drive threads' take/done callbacks, verification
 *   cache.c    slots, entries, the resident list, eviction, pinning, heat
 *   evict.c    the eviction order alone (a pure policy, unit-tested)
 *   rank.c     which read a drive takes next: demand, spine, prefetch (a
 *              pure policy, unit-tested)
 *   predict.c  the prefetch predictors (gate-ahead, previous token), recall
 *   stats.c    statistics: JSON, text, the one-line description
 *   sampler.c  the trace's periodic per-drive samples
 *
 * One mutex (mu) guards all of it; drive threads (io.c) take reads and
 * report completions through the scheduler's callbacks. Every entry lives in
 * by_key[] from the moment its read is queued until it is evicted; an entry
 * referenced by the current batch (refs > 0) is never evicted, so the bytes
 * handed out stay valid until df_store_end. */
#ifndef DF_STORE_STORE_INT_H
#define DF_STORE_STORE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "base/util.h"
#include "store/heat.h"
#include "store/io.h"
#include "store/manifest.h"
#include "store/store.h"
#include "store/trace.h"

#define DF_STORE_HALF_LIFE 32.0 /* forward passes for the decayed frequency to halve */
#define DF_STORE_PF_PER_DRIVE 1 /* speculative reads in flight per drive */
#define DF_STORE_SPLIT_MIN_BYTES (1u << 20) /* smaller records never split in the default mode */

enum { E_LOADING = 1, E_READY, E_FAILED };            /* entry.state */
enum { TAG_PART = 0, TAG_SPINE = 1 };                 /* df_io_req.tag */
enum { Q_NONE = 0, Q_DEMAND, Q_PREFETCH, Q_FLIGHT };  /* part.queue: where a part waits */
enum { P_GATE = 0, P_PREV = 1, NPRED = 2 };           /* the predictors */

/* Why a read did not give a good record (counted by category in the stats). */
typedef enum {
  DF_FAULT_NONE = 0,
  DF_FAULT_IO,        /* the read failed (errno in the part) */
  DF_FAULT_SHORT,     /* fewer bytes than the record (file truncated?) */
  DF_FAULT_CHECKSUM,  /* the pack's xxh3 of the record does not match */
  DF_FAULT_SCALE_NAN, /* a shard record holds an E8M0 scale of 255 */
} df_store_fault;

/* ---- the spine's reads (spine.c) ----
 * The streamed spine units (spine.h) read through the
 * store's drives and I/O engine, so one scheduler ranks every read of a
 * drive (store/rank.h): the experts' demand reads first, then spine reads
 * (demand reads known in advance), then speculative expert reads, which
 * never start while a demand or spine read waits on that drive. */
typedef struct df_store_spine_req {
  df_io_req req; /* the caller fills fd, off, len, buf, buf_index; results as in io.h */
  /* Called once the read finished (or was cancelled by df_store_close:
   * req.err = ECANCELED), from a drive thread, without the store's lock. */
  void (*done)(void *ud, struct df_store_spine_req *r);
  void *ud;
  double t_enq, t_take; /* set by the store: when queued, when a drive took it (its lock held) */
  struct df_store_spine_req *next; /* the store's queue */
} df_store_spine_req;
/* The store drive that spine reads of the open file fd go to (the first
 * drive on the same device, else drive 0), or -1 when the store has no
 * drives (a model without routed experts): the caller reads on its own. */
int df_store_spine_drive(df_store *s, int fd);
/* Registers a spine buffer with the store's engine: its index, or -1. */
int df_store_spine_register(df_store *s, void *base, size_t len);
/* Queues one read on drive (from df_store_spine_drive); -1 (nothing
 * queued, done is not called) once df_store_close has begun. May be called
 * under the caller's lock: done never runs inside submit. */
int df_store_spine_submit(df_store *s, int drive, df_store_spine_req *r);
/* How many spine reads a drive keeps in flight at most (the ranking's
 * rule, rank.h: one slot below the queue depth, at least one). */
int df_store_spine_depth(const df_store *s);
/* The pack's spine section (pack --spine), or NULL (shards, or a pack
 * without one). Its chunks' drives are the store's drives. */
const df_mf_spine *df_store_spine_section(const df_store *s);
/* A pack drive's file: its fd (-1 = unreadable, or not a pack), path and
 * size when the store opened it. */
int df_store_pack_file(const df_store *s, int drive, const char **path, uint64_t *size);
/* 1 when every file of the store (the pack's drive files) was opened with
 * O_DIRECT. */
int df_store_o_direct(const df_store *s);
/* One readable copy of a record. */
typedef struct copyloc {
  int drive;     /* index into df_store.drive */
  int file;      /* index into df_store.fds / file_paths */
  int fd;        /* fds[file], kept here so a read needs no lookup */
  uint64_t off;  /* the record's first byte in that file (pack copies are 4 KiB aligned) */
  uint64_t xxh;  /* xxh3-64 of the record (pack only; 0 for shards) */
} copyloc;

/* Where one record (layer, expert) can be read from. */
typedef struct rec {
  uint8_t ncopies;
  uint8_t bad; /* copies found unreadable or corrupt, one bit per copy: never tried again */
  copyloc c[DF_MF_MAX_COPIES];
} rec;

/* An O_DIRECT buffer of slot_bytes. */
typedef struct slot {
  uint8_t *buf;
  int bidx; /* registered-buffer index of its chunk, -1 = plain */
} slot;

struct entry;

/* One read of an entry: the whole record from one copy, or one of the two
 * halves of a split read (first part from one copy, the rest from another).
 * req comes first so a completed df_io_req maps back to its part. */
typedef struct part {
  df_io_req req;
  struct entry *e;  /* the entry this part reads for */
  int copy;         /* index into the record's copies */
  int queue;        /* Q_*: which queue holds it, or in flight */
  uint32_t need;    /* bytes the request must return (head pad + this part's record bytes) */
  uint64_t rbytes;  /* record bytes this part carries */
  double t_enq;     /* when it was queued (the trace's wait) */
  double t_class;   /* when it joined the queue it waits in (promotion resets it) */
  int taken_cls;    /* the rank class the drive took it in (the trace) */
  double t_take;    /* when the drive took it (lock held: the trace orders reads by it) */
  df_store_fault fault; /* why this part failed, DF_FAULT_NONE = ok */
  int err;          /* errno of a DF_FAULT_IO */
  struct part *q_next, *q_prev; /* the drive queue it waits in */
} part;

/* A record in RAM, or on its way. */
typedef struct entry {
  int key;           /* (layer - first_layer) * n_experts + expert */
  int state;         /* E_LOADING, E_READY, E_FAILED */
  int refs;          /* batches holding it (0 or 1; pinned entries hold 1 forever) */
  int handed;        /* already handed out by df_store_next in this batch */
  int speculative;   /* read for a prediction, not yet asked for by a batch */
  int pinned;        /* --pin-mb: never evicted */
  int is_protected;  /* hit at least twice: evicted only after every unprotected entry */
  int hits;          /* cache hits so far (promotes to protected at 2) */
  int demand;        /* a batch asked for it (its bytes count as demand reads) */
  int prefill;       /* read for a prefill chunk (prefill amplification) */
  uint8_t tried;     /* copies tried for the current read, one bit per copy */
  uint8_t no_split;  /* a split read of it did not verify: read whole copies only */
  int nparts;        /* parts of the current read (1, or 2 when split) */
  int pending;       /* parts queued, in flight or being verified */
  long spec_pass;    /* the forward pass and layer a speculative read is for: */
  int spec_layer;    /*   it is stale once that layer has begun */
  double score;      /* decayed access frequency at pass `tick` (eviction order) */
  long tick;
  slot slot;         /* its buffer */
  uint32_t head_pad; /* bytes before the record in the buffer (its offset's misalignment) */
  const uint8_t *data; /* the record, once READY */
  struct entry *res_next, *res_prev; /* the resident list (every entry in by_key[]) */
  part parts[2];
  char *err;         /* why it FAILED, for the batch that asks for it */
} entry;

/* A drive's queue of parts, FIFO. */
typedef struct dq {
  part *h, *t;
  int n;
} dq;

/* One drive: its rate estimate, its queues and its counters. */
typedef struct dstate {
  char *path;           /* the drive's folder (pack) or the checkpoint folder (shards) */
  int alive;            /* its file opened */
  double rate;          /* measured bytes/s (starts as declared in the manifest, or emulated) */
  uint64_t bytes, reads, errors;
  uint32_t dio_align;   /* O_DIRECT offset/length granularity of this drive's file */
  double busy_s, busy_since; /* time with >= 1 read in flight; since when busy now */
  int inflight;
  uint64_t inflight_bytes, queued_bytes; /* record bytes in flight / waiting (ETA) */
  double win_bytes, win_busy; /* the current rate-measurement window */
  dq q[2];                    /* 0 demand, 1 prefetch */
  /* the spine's reads on this drive (df_store_spine_submit), FIFO */
  df_store_spine_req *sq_h, *sq_t;
  int sq_n, spine_inflight;
} dstate;

/* One predictor's last prediction for one layer. */
typedef struct pred {
  long pass;    /* the forward pass it is for; -1 = none pending */
  int n;
  int prefill;  /* made from a prefill chunk: a union over rows, not a per-token guess */
  int *ex;      /* the predicted experts (n_experts capacity) */
} pred;

struct df_store {
  /* ---- the model's expert layout ---- */
  const df_config *cfg;
  df_expert_layout lay;
  int first_layer;      /* first MoE layer (first_k_dense) */
  int n_layers;         /* MoE layers */
  int n_experts;        /* routed experts per layer */
  size_t nkeys;         /* n_layers * n_experts; 0 = no routed experts */
  uint64_t rec_bytes;   /* one record */
  uint64_t slot_bytes;  /* one buffer: the record padded to the alignment (+ a page for shards) */

  /* ---- where records live (records.c) ---- */
  int from_pack;        /* records come from a pack (else from the shards) */
  char *source;         /* the manifest path or the checkpoint folder */
  int n_fds, *fds;      /* open files: one per pack drive, or one per shard */
  char **file_paths;    /* their paths (df_store_locate) */
  int o_direct;         /* every file opened with O_DIRECT */
  int ndrives;
  dstate *drive;
  rec *recs;            /* by key */
  int has_spine;        /* the pack has a spine section (pack --spine) */
  df_mf_spine spine;    /* it, taken from the manifest */
  uint64_t *pack_size;  /* per pack drive: its file's size at open (0 = unreadable) */
  struct df_src_remote *remote; /* stream install: records fetched on demand (source.h); NULL = all local */
  int stream_verify;            /* --stream-verify override (df_stream_verify), for the remote */
  double net_wait;      /* time df_store_begin waited on network fetches */
  int fetch_ahead;      /* --fetch-ahead on: predictions of records not local go to the network */

  /* ---- I/O (sched.c) ---- */
  df_io *io;
  df_io_kind io_kind;
  df_store_iocfg ioc;   /* the I/O options, resolved (its strings owned) */
  df_store_split split; /* when a read may be split over two copies */
  uint64_t split_reads; /* reads that were split */
  int total_inflight;   /* parts taken by drive threads and not yet finished */
  int closing;          /* close has begun: nothing new is queued */

  pthread_mutex_t mu;
  pthread_cond_t cv;    /* a read finished (or the store closes) */

  /* ---- the cache (cache.c) ---- */
  entry **by_key;
  entry *resident_head; /* every entry, newest first */
  slot *free_slots;
  int n_free, cap_free;
  int slots_per_chunk;  /* slots allocated (and registered) together */
  int n_chunks;
  uint8_t **slot_chunks;
  long n_resident;      /* entries in by_key[] */
  long n_unref;         /* of which no batch holds (eviction candidates) */
  long n_protected;
  long cache_slots;     /* the cache budget in records */
  long prefetch_allowance; /* unreferenced entries allowed above the budget for speculative reads */
  long cache_mb;        /* the budget as given (or the default) */
  long pinned;          /* entries pinned at open */
  df_heat heat;         /* this run's access counts (merged into the heat file at close) */
  float *heat_seed;     /* initial scores from the heat file, by key; NULL = none */
  char *heat_path;      /* NULL = no heat file */

  /* ---- the current batch (store.c) ---- */
  int layer;            /* its layer; 1 << 30 before the first batch */
  long pass;            /* forward passes begun (a layer <= the last one starts a new pass) */
  int batch_n;          /* experts in the batch; 0 = none open */
  int batch_capacity;
  int batch_prefill;    /* the batch belongs to a prefill chunk (rows > 1) */
  double batch_wait;    /* time the model waited in df_store_next for this batch */
  entry **batch;

  /* ---- predictors (predict.c) ---- */
  unsigned pred_mask;   /* bit per predictor that may issue reads */
  int pred_auto;        /* `auto`: switch a predictor off per layer when its recall is low */
  char *prefetch_name;  /* the mode's name, for messages */
  pred *pred[NPRED];    /* [predictor][layer] */
  double *recall_ewma[NPRED];  /* per layer: smoothed recall of decode predictions (auto) */
  double *recall_hits[NPRED], *recall_total[NPRED]; /* per layer: predicted and needed, summed */
  long *recall_samples[NPRED]; /* per layer: decode predictions measured */
  uint64_t pf_issued_by_pred[NPRED];
  int **prev_set, *prev_n;     /* per layer: the experts its last batch needed */

  /* ---- the read log (df_store_log_reads) ---- */
  int log_on;
  df_store_read *log;
  size_t log_n, log_cap;

  /* ---- counters (stats.c) ---- */
  uint64_t bytes_read, bytes_demand, bytes_prefetch, pf_used, pf_wasted, pf_dropped, pf_issued;
  uint64_t requests, hits, pf_inflight_hits, evictions, retries, checksum_errors, read_errors;
  uint64_t prefill_need, prefill_read; /* record bytes prefill batches needed / were read */
  uint64_t all_need, all_read;         /* the same over every batch */
  uint64_t bytes_handed;
  double *wait_layer, wait_total;      /* time the model waited on experts */

  /* ---- the trace (sampler.c) ---- */
  df_trace *trace;
  double t_open;
  pthread_t sampler;
  int sampler_on, stop;
};

static inline double df_store_now_rel(const df_store *s) { return df_now() - s->t_open; }
static inline int df_store_key_layer(const df_store *s, int key) {
  return s->first_layer + key / s->n_experts;
}
static inline int df_store_key_expert(const df_store *s, int key) { return key % s->n_experts; }

/* store.c: a stream install's records that are not local, fetched (source.h) */
int df_store_fetch_remote(df_store *s, const int *keys, int n, df_err *e);

/* records.c */
int df_store_open_pack(df_store *s, const df_st_set *set, const char *mpath, df_err *e);
int df_store_open_shards(df_store *s, const df_st_set *set, df_err *e);
void df_store_close_files(df_store *s);

/* sched.c (with the lock held) */
int df_sched_enqueue(df_store *s, entry *e, int demand); /* -1: no copy left */
void df_sched_promote(df_store *s, entry *e);            /* a prefetch became demand */
void df_sched_fail(df_store *s, entry *e, const char *why);
int df_sched_stale(const df_store *s, const entry *e);
int df_sched_drop_stale(df_store *s, entry *e);          /* 1 if dropped (and freed) */
void df_sched_drop_all_stale(df_store *s);
void df_sched_cancel_queued(df_store *s);                /* close: fail everything queued */
/* close: takes every queued spine read off its queue (the caller calls
 * their done callbacks without the lock) */
df_store_spine_req *df_sched_take_spine_queued(df_store *s);
df_io_ops df_sched_ops(df_store *s);
const char *df_store_fault_name(df_store_fault f, int err);

/* cache.c (with the lock held, except pin) */
void df_cache_init(df_store *s);
entry *df_cache_entry_new(df_store *s, int key);
void df_cache_entry_free(df_store *s, entry *e);
void df_cache_touch(df_store *s, entry *e);
void df_cache_hit(df_store *s, entry *e);
void df_cache_evict(df_store *s);
void df_cache_heat_open(df_store *s, const char *model_dir, const char *heat_path, df_heat *prior);
int df_cache_pin_hottest(df_store *s, const float *heat, long pin_mb, df_err *e);
void df_cache_free_all(df_store *s);

/* predict.c */
void df_pred_init(df_store *s, df_store_prefetch mode);
void df_pred_free(df_store *s);
int df_pred_on(const df_store *s, int p, int li);
void df_pred_measure(df_store *s, int li, const int *experts, int n); /* at begin */
void df_pred_after_begin(df_store *s, int li, const int *experts, int n);

/* sampler.c */
void df_sampler_start(df_store *s);
void df_sampler_stop(df_store *s);

#endif

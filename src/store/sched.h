/* Internal to the store: the read scheduler's part of df_store (sched.c):
 * the drives, their queues (the experts' demand and prefetch parts, the
 * spine's reads), the I/O engine and the options it runs with. The ranking
 * of one drive's next read is rank.h's; this part holds the state it ranks.
 * Guarded by the store's mutex (store_int.h). */
#ifndef DF_STORE_SCHED_H
#define DF_STORE_SCHED_H

#include <stdint.h>

#include "store/io.h"
#include "store/opts.h"

typedef struct df_store df_store;

#define DF_STORE_PF_PER_DRIVE 1 /* speculative reads in flight per drive */
#define DF_STORE_SPLIT_MIN_BYTES (1u << 20) /* smaller records never split in the default mode */

enum { TAG_PART = 0, TAG_SPINE = 1 };                 /* df_io_req.tag */
enum { Q_NONE = 0, Q_DEMAND, Q_PREFETCH, Q_FLIGHT };  /* part.queue: where a part waits */

/* Why a read did not give a good record (counted by category in the stats). */
typedef enum {
  DF_FAULT_NONE = 0,
  DF_FAULT_IO,        /* the read failed (errno in the part) */
  DF_FAULT_SHORT,     /* fewer bytes than the record (file truncated?) */
  DF_FAULT_CHECKSUM,  /* the pack's xxh3 of the record does not match */
  DF_FAULT_SCALE_NAN, /* a shard record holds an E8M0 scale of 255 */
} df_store_fault;

/* ---- the spine's reads (spine.c) ----
 * The streamed spine units (spine.h) read through the store's drives and
 * I/O engine, so one scheduler ranks every read of a drive (rank.h): the
 * experts' demand reads first, then spine reads (demand reads known in
 * advance), then speculative expert reads, which never start while a demand
 * or spine read waits on that drive. */
typedef struct df_store_spine_req {
  df_io_req req; /* the caller fills fd, off, len, buf, buf_index; results as in io.h */
  /* Called once the read finished (or was cancelled by df_store_close:
   * req.err = ECANCELED), from a drive thread, without the store's lock. */
  void (*done)(void *ud, struct df_store_spine_req *r);
  void *ud;
  double t_enq, t_take; /* set by the store: when queued, when a drive took it (its lock held) */
  struct df_store_spine_req *next; /* the store's queue */
} df_store_spine_req;

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

typedef struct df_store_sched {
  df_store_iocfg ioc;   /* the I/O options, resolved at open (its strings owned) */
  df_io *io;
  df_io_kind io_kind;   /* the engine running (uring may have fallen back to pread) */
  int ndrives;
  dstate *drive;
  df_store_split split; /* when a read may be split over two copies */
  int total_inflight;   /* parts taken by drive threads and not yet finished */
  int closing;          /* close has begun: nothing new is queued */
} df_store_sched;

/* sched.c (with the lock held) */
struct entry;
int df_sched_enqueue(df_store *s, struct entry *e, int demand); /* -1: no copy left */
void df_sched_promote(df_store *s, struct entry *e);            /* a prefetch became demand */
void df_sched_fail(df_store *s, struct entry *e, const char *why);
int df_sched_stale(const df_store *s, const struct entry *e);
int df_sched_drop_stale(df_store *s, struct entry *e);          /* 1 if dropped (and freed) */
void df_sched_drop_all_stale(df_store *s);
void df_sched_cancel_queued(df_store *s);                /* close: fail everything queued */
/* close: takes every queued spine read off its queue (the caller calls
 * their done callbacks without the lock) */
df_store_spine_req *df_sched_take_spine_queued(df_store *s);
df_io_ops df_sched_ops(df_store *s);
const char *df_store_fault_name(df_store_fault f, int err);

/* The spine's reads (without the lock). The store drive that spine reads
 * of the open file fd go to (the first drive on the same device, else drive
 * 0), or -1 when the store has no drives (a model without routed experts):
 * the spine then runs an engine of its own (spine.c). */
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

#endif

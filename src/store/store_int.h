/* Internal to the weight store: df_store, made of owned parts, each
 * declared with its functions in its own header:
 *   records.h   where records live (records.c)
 *   remote.h    the remote source of a stream install (store.c, source.h)
 *   sched.h     the drives, queues and I/O engine (sched.c), the spine's reads
 *   cache.h     entries, buffers, budget, pinning, heat (cache.c)
 *   predict.h   the prefetch predictors (predict.c)
 *   counters.h  the counters the stats report (stats.c)
 * and what is left here: the expert layout, the current batch, the read
 * log and the trace, each a few fields used across the parts.
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
 *   spine.c    the spine stream (spine.h): the model's streamed units, read
 *              on the same drives and scheduler
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
#include "store/cache.h"
#include "store/counters.h"
#include "store/io.h"
#include "store/manifest.h"
#include "store/predict.h"
#include "store/records.h"
#include "store/remote.h"
#include "store/sched.h"
#include "store/store.h"
#include "store/trace.h"

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

  /* ---- the parts ---- */
  df_store_records loc; /* records.h */
  df_store_remote net;  /* remote.h */
  df_store_sched sch;   /* sched.h */
  df_store_cache cache; /* cache.h */
  df_store_pred pr;     /* predict.h */
  df_store_counters ct; /* counters.h */

  pthread_mutex_t mu;   /* guards every part */
  pthread_cond_t cv;    /* a read finished (or the store closes) */

  /* ---- the current batch (store.c) ---- */
  int layer;            /* its layer; 1 << 30 before the first batch */
  long pass;            /* forward passes begun (a layer <= the last one starts a new pass) */
  int batch_n;          /* experts in the batch; 0 = none open */
  int batch_capacity;
  int batch_prefill;    /* the batch belongs to a prefill chunk (rows > 1) */
  double batch_wait;    /* time the model waited in df_store_next for this batch */
  entry **batch;

  /* ---- the read log (df_store_log_reads) ---- */
  int log_on;
  df_store_read *log;
  size_t log_n, log_cap;

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

/* sampler.c */
void df_sampler_start(df_store *s);
void df_sampler_stop(df_store *s);

#endif

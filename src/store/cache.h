/* Internal to the store: the expert cache's part of df_store (cache.c,
 * evict.c): the entries (records in RAM or on their way), their buffers,
 * the resident list, the budget, pinning and heat. Guarded by the store's
 * mutex (store_int.h). */
#ifndef DF_STORE_CACHE_H
#define DF_STORE_CACHE_H

#include <stdint.h>

#include "base/err.h"
#include "store/heat.h"
#include "store/sched.h"

typedef struct df_store df_store;

#define DF_STORE_HALF_LIFE 32.0 /* forward passes for the decayed frequency to halve */

enum { E_LOADING = 1, E_READY, E_FAILED }; /* entry.state */

/* An O_DIRECT buffer of slot_bytes. */
typedef struct slot {
  uint8_t *buf;
  int bidx; /* registered-buffer index of its chunk, -1 = plain */
} slot;

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
  long born;         /* the pass it was first used in (read ahead: the pass it was read in
                      * until then); new in that pass (evict.h's admission) */
  slot slot;         /* its buffer */
  uint32_t head_pad; /* bytes before the record in the buffer (its offset's misalignment) */
  const uint8_t *data; /* the record, once READY */
  struct entry *res_next, *res_prev; /* the resident list (every entry in by_key[]) */
  part parts[2];
  char *err;         /* why it FAILED, for the batch that asks for it */
} entry;

typedef struct df_store_cache {
  entry **by_key;       /* every entry from the moment its read is queued until evicted */
  entry *resident_head; /* every entry, newest first */
  slot *free_slots;
  int n_free, cap_free;
  int slots_per_chunk;  /* slots allocated (and registered) together */
  int n_chunks;
  uint8_t **slot_chunks;
  /* df_store_on_buffers: told of each chunk after it is allocated and
   * before it is freed (--device cuda page-locks them) */
  void (*buf_fn)(void *ud, void *p, size_t n), (*buf_unfn)(void *ud, void *p, size_t n);
  void *buf_ud;
  long n_resident;      /* entries in by_key[] */
  long n_unref;         /* of which no batch holds (eviction candidates) */
  long n_protected;
  long slots;           /* the budget in records */
  long prefetch_allowance; /* unreferenced entries allowed above the budget for speculative reads */
  long mb;              /* the budget as given (or the default) */
  long pinned;          /* entries pinned at open */
  df_heat heat;         /* this run's access counts (merged into the heat file at close) */
  float *heat_seed;     /* initial scores from the heat file, by key; NULL = none */
  /* every key's decayed access frequency at pass ktick[key] (eviction order),
   * held or not, seeded from heat_seed */
  double *kscore;
  long *ktick;
  char *heat_path;      /* NULL = no heat file */
} df_store_cache;

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

#endif

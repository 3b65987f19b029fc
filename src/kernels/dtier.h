/* A device's weight tier: copies of weight matrices in device memory, keyed
 * by the matrix's identity (df_wmat.id, or an expert's key), within a byte
 * budget.
 *
 * Plain C over an allocator given by the caller, so the policy is tested on
 * the CPU (tests/unit/test_dtier.c) and used on the GPU (kgpu.c) unchanged.
 *
 * Two classes, because a decode pass touches its matrices in the same cycle
 * every token: the spine's (all of them, every token) and the routed
 * experts' (a few of many). Under a plain LRU a cycle larger than the budget
 * evicts each matrix just before it is needed again and nothing ever hits;
 * so the spine's are KEEP entries, never evicted: once they fill the budget
 * the rest of the spine is used without being kept, and the kept part hits
 * every token. The experts' are LRU entries, evicted least recent first, but
 * only for an expert used more often lately: a trunk whose every expert is
 * routed every token is the same cycle (run 24, an 80 GB card: 25.9 GB of
 * experts for about 24.6 GB of room; once the tier was full the drive was
 * read without pause until the run's time ran out), and the
 * experts K3 routes most stay in the tier while a rarely routed one cannot
 * push them out.
 *
 * Policy (pinned by its test): every get counts a use of its key, held or
 * not; every DF_DTIER_AGE_USES gets per key counted (at least
 * DF_DTIER_AGE_MIN) every count is halved, rounding down. A hit makes the
 * entry the most recent of its class. A new entry is refused (the caller
 * uses the bytes without keeping them) when it is larger than what the
 * KEEP entries leave of the budget. A new KEEP entry evicts LRU entries,
 * least recent first, until it fits, and is refused when the KEEP entries
 * would pass their cap (df_dtier_keep_cap; none by default), which leaves
 * the LRU class the rest of the budget. A new LRU entry that does not fit
 * evicts LRU entries the same way, but only when each of those has at least
 * DF_DTIER_ADMIT_MARGIN uses fewer than the new key; else it is refused and
 * nothing is evicted. (A margin of 1 is not enough: in a cycle, the held
 * entries not yet reached this pass have one use fewer than those already
 * reached, and an entry that evicts the next one along makes that one miss
 * in turn, to the end of the pass.) An allocation that fails means the
 * device holds no more than the entries now: the budget becomes what they
 * hold, and the entry is tried again under it as above (so a KEEP entry
 * evicts LRU ones, and an LRU entry needs the margin over those it would
 * evict); it is refused when no LRU entry is left. */
#ifndef DF_KERNELS_DTIER_H
#define DF_KERNELS_DTIER_H

#include <stddef.h>
#include <stdint.h>

typedef struct df_dtier df_dtier;

#define DF_DTIER_ADMIT_MARGIN 2
#define DF_DTIER_AGE_USES 16
#define DF_DTIER_AGE_MIN 4096

typedef enum { DF_DTIER_KEEP = 0, DF_DTIER_LRU = 1 } df_dtier_class;

typedef struct df_dtier_mem {
  void *(*alloc)(void *ud, size_t bytes); /* NULL when out of memory */
  void (*free)(void *ud, void *p);
  void *ud;
} df_dtier_mem;

typedef struct df_dtier_stats {
  uint64_t hits, misses, evictions, refused;
  uint64_t bytes, cap, keep_bytes;
  uint64_t keep_cap; /* UINT64_MAX: no cap */
  int entries;
} df_dtier_stats;

df_dtier *df_dtier_new(uint64_t cap_bytes, df_dtier_mem mem);
/* Frees every entry through the allocator. */
void df_dtier_free(df_dtier *t);
/* The entry's memory (a hit: now the most recent of its class), or NULL (a
 * miss). */
void *df_dtier_get(df_dtier *t, uint64_t key);
/* 1 when key has an entry; neither a hit nor a miss, and the order is left
 * as it is (a look ahead, e.g. to skip reading what the tier holds). */
int df_dtier_has(const df_dtier *t, uint64_t key);
/* A new entry of `bytes` for key (which must not be present); its memory,
 * for the caller to fill, or NULL (refused: see the policy above). */
void *df_dtier_put(df_dtier *t, uint64_t key, size_t bytes, df_dtier_class cls);
/* Gives bytes of device memory back (wanted elsewhere: the per-use
 * buffers): the budget becomes what the entries hold now less bytes, and
 * LRU entries, then KEEP ones, least recent first, are evicted to fit it. */
void df_dtier_shrink(df_dtier *t, uint64_t bytes);
/* Takes bytes of device memory back (the per-use buffers freed, kgpu.c's
 * trim): the budget rises by bytes, never above the one the tier was made
 * with. Nothing is evicted or allocated; new entries fill the room. */
void df_dtier_grow(df_dtier *t, uint64_t bytes);
/* The most the KEEP entries may hold together (the memory plan's spine on
 * the GPU, plan.h's df_plan_gpu), so the routed experts keep the share the
 * plan gave them instead of a spine larger than the budget taking it all.
 * Entries already kept stay. */
void df_dtier_keep_cap(df_dtier *t, uint64_t bytes);
/* key's use count as admission reads it (0 when never used or aged out). */
uint32_t df_dtier_uses(const df_dtier *t, uint64_t key);
void df_dtier_stats_get(const df_dtier *t, df_dtier_stats *st);

#endif

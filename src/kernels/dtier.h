/* A device's weight tier: copies of weight matrices in device memory, keyed
 * by the matrix's identity (df_wmat.id, or an expert's key), within a byte
 * budget, least recently used first out.
 *
 * Plain C over an allocator given by the caller, so the policy is tested on
 * the CPU (tests/unit/test_dtier.c) and used on the GPU (kgpu.c) unchanged.
 *
 * Policy (pinned by its test): a hit makes the entry the most recent; a new
 * entry evicts the least recent ones until it fits the budget; an entry
 * larger than the whole budget is refused (the caller then uses the bytes
 * without keeping them); an allocation that fails while entries remain
 * evicts the least recent one and is tried again. */
#ifndef DF_KERNELS_DTIER_H
#define DF_KERNELS_DTIER_H

#include <stddef.h>
#include <stdint.h>

typedef struct df_dtier df_dtier;

typedef struct df_dtier_mem {
  void *(*alloc)(void *ud, size_t bytes); /* NULL when out of memory */
  void (*free)(void *ud, void *p);
  void *ud;
} df_dtier_mem;

typedef struct df_dtier_stats {
  uint64_t hits, misses, evictions, refused;
  uint64_t bytes, cap;
  int entries;
} df_dtier_stats;

df_dtier *df_dtier_new(uint64_t cap_bytes, df_dtier_mem mem);
/* Frees every entry through the allocator. */
void df_dtier_free(df_dtier *t);
/* The entry's memory (a hit: now the most recent), or NULL (a miss). */
void *df_dtier_get(df_dtier *t, uint64_t key);
/* A new entry of `bytes` for key (which must not be present); its memory,
 * for the caller to fill, or NULL (larger than the budget, or no memory). */
void *df_dtier_put(df_dtier *t, uint64_t key, size_t bytes);
void df_dtier_stats_get(const df_dtier *t, df_dtier_stats *st);

#endif

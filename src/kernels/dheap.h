/* The weight tier's device memory as one heap: blocks placed end to end in
 * a reserved range of addresses, the device's physical memory mapped under
 * them a granule at a time (the driver's virtual memory management: 2 MiB
 * granules on the H100 and H200) and given back when no block is left in a
 * granule.
 *
 * Why: a device allocation takes whole granules, so each matrix allocated
 * on its own lost the rest of its last granule. The spine's int8 matrices
 * are whole MiB with their row scales after them (12288 x 7168 + 48 KB) and
 * lost nearly 2 MiB each, an expert's MXFP4 matrix with its scales (5.58
 * MiB) 0.42: on the 80 GB H100 about 3.4 GB of the full-depth trunk's tier
 * (run 26), the experts' room the decode then read from the drive every
 * token. Here blocks share granules, so only the range's last granule is
 * partly empty; and, unlike one large allocation cut up by hand, memory
 * freed in the middle goes back to the device (the per-use buffers' room:
 * kgpu.c's room_for shrinks the tier, trims the heap and allocates from
 * the device).
 *
 * Plain C over a mapper given by the caller, so the placement is tested on
 * the CPU (tests/unit/test_dheap.c) and used on the GPU (kgpu.c).
 *
 * Policy (pinned by its test): sizes are rounded up to `align`; a block goes
 * at the start of the lowest free extent it fits where every granule under
 * it is mapped already, else at the start of the lowest free extent it fits
 * (mapping the granules it needs, in runs of consecutive unmapped ones); a
 * failed mapping undoes this block's mappings and fails the allocation.
 * Freed extents merge with their neighbours. A granule whose last block is
 * freed stays mapped (empty) for the blocks after it: a decode that evicts
 * an expert for another of the same size puts it in the same place without
 * a call to the driver (each mapping and unmapping is one, and an unmapping
 * waits for the device). df_dheap_trim gives the empty granules back; an
 * allocation whose mapping fails does so and tries once more. */
#ifndef DF_KERNELS_DHEAP_H
#define DF_KERNELS_DHEAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct df_dheap df_dheap;

#define DF_DHEAP_NONE UINT64_MAX

typedef struct df_dheap_mem {
  /* Maps n granules of new memory at offset off of the range, one handle
   * each into h[0..n); 0, or -1 when the memory is not there (nothing is
   * left mapped then). */
  int (*map)(void *ud, uint64_t off, int n, uint64_t *h);
  /* Unmaps the granule at off and gives its memory back. */
  void (*unmap)(void *ud, uint64_t off, uint64_t h);
  void *ud;
} df_dheap_mem;

typedef struct df_dheap_stats {
  uint64_t used;    /* bytes in blocks (rounded to align) */
  uint64_t mapped;  /* bytes of granules mapped */
  uint64_t empty;   /* of those, bytes of granules with no block over them */
  uint64_t maps, unmaps, failed;
  int blocks, extents;
} df_dheap_stats;

/* A heap over `range` bytes of addresses (rounded down to granules) with
 * granules of `granule` bytes and blocks aligned to `align` (a power of
 * two dividing granule). */
df_dheap *df_dheap_new(uint64_t range, size_t granule, size_t align, df_dheap_mem mem);
/* Unmaps every granule still mapped. */
void df_dheap_free(df_dheap *h);
/* The offset of a new block of n bytes, or DF_DHEAP_NONE (no room in the
 * range, or the memory could not be mapped). */
uint64_t df_dheap_alloc(df_dheap *h, size_t n);
/* Frees the block at off (an offset df_dheap_alloc gave). */
void df_dheap_release(df_dheap *h, uint64_t off);
/* Unmaps every empty granule (memory the device is wanted for elsewhere);
 * the bytes given back. */
uint64_t df_dheap_trim(df_dheap *h);
void df_dheap_stats_get(const df_dheap *h, df_dheap_stats *st);

#endif

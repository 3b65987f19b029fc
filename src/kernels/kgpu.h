/* --device cuda: the matrix products of the fp32 drivers (df_mm*, kernels.h)
 * on a CUDA device, with the weights kept in device memory between passes
 * (the weight tier, dtier.h: spine matrices by df_wmat.id, kept; routed
 * experts by their key, least recent out: an expert tier above the RAM
 * cache).
 *
 * Exactness: the GPU kernels compute the scalar reference's bits
 * (kcuda.h), so a product gives the same floats on either side, and a
 * product the GPU cannot take (no memory, a CUDA error) is computed by the
 * CPU instead with the same result; the count of those is in the stats so a
 * test can tell "ran on the GPU" from "fell back".
 *
 * Compiled in every build: without -DDF_CUDA=ON df_kgpu_open fails, saying
 * so, and the products are never called. Calls are serialised by a mutex
 * (one engine runs one pass at a time; the lock only guards the tier). */
#ifndef DF_KERNELS_KGPU_H
#define DF_KERNELS_KGPU_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

typedef struct df_kgpu df_kgpu;

typedef struct df_kgpu_stats {
  char device[160];         /* "NVIDIA H200 (sm_90, 139.8 GiB)" */
  uint64_t mem_total, mem_free; /* the device's, when last read */
  uint64_t tier_cap, tier_bytes, tier_keep_bytes; /* keep: the spine's, never evicted (dtier.h) */
  int tier_entries;
  uint64_t hits, misses, evictions, refused; /* the weight tier's */
  uint64_t products;        /* matrix products run on the GPU */
  uint64_t fallbacks;       /* products the GPU could not take (run on the CPU) */
  uint64_t h2d_bytes, d2h_bytes, weight_h2d_bytes;
  uint64_t pinned_bytes, pin_failures; /* host memory page-locked by df_kgpu_pin, ranges that failed */
  double weight_h2d_s;      /* weight copies into the tier (or the per-use buffer) */
  double compute_s;         /* activations in, kernels, results out */
  char last_error[256];     /* the last CUDA error behind a fallback, "" if none */
} df_kgpu_stats;

/* Opens CUDA device dev with a weight tier of tier_bytes (0: the device's
 * free memory less 2 GiB for activations and per-use buffers, at least
 * 256 MiB). NULL with the reason in err. */
df_kgpu *df_kgpu_open(int dev, uint64_t tier_bytes, char *err, size_t errlen);
void df_kgpu_close(df_kgpu *g);

/* Y[t][r - r0] = W X[t] for rows [r0, r1) on the device. 0 when done there;
 * -1 when not (the caller computes it). */
int df_kgpu_mm(df_kgpu *g, const df_wmat *W, int r0, int r1, const float *X, int T, size_t ldx,
               float *Y, size_t ldy);
/* The MXFP4 product of kernels.h's df_mm_mxfp4; id keys the tier (0: none). */
int df_kgpu_mm_mxfp4(df_kgpu *g, uint64_t id, const uint8_t *packed, const uint8_t *scales,
                     int rows, int cols, const float *X, int T, size_t ldx, float *Y, size_t ldy);

/* A MoE layer batch's routed experts, queued as the store hands them out so
 * the GPU computes the ones that are there while the rest arrive; one wait
 * at the end. The order the experts arrive in changes where their rows sit
 * in the batch, never a value: each expert's rows are computed alone, and
 * the caller sums them in its fixed order afterwards.
 *   begin: the batch's record layout and the rows it will queue at most;
 *   expert_in: where to put the next expert's n input rows (latent each);
 *   expert: queues the expert (record rec of key) on those rows; *row0 is
 *     the batch row of its first output;
 *   end: waits; the outputs, row r at [r * latent], or NULL after an error
 *     (df_kgpu_error says which; the store may have released the records,
 *     so the caller reads them again to compute the batch on the CPU).
 * begin/expert return -1 when the GPU cannot take them (nothing queued by
 * that call; the caller computes that expert on the CPU). expert with rec
 * NULL queues the expert from the tier and returns 1, nothing queued and
 * nothing counted, when the tier no longer holds it (the caller reads it).
 * has_expert says whether the tier holds key now, without touching it: the
 * caller leaves out of its reads what the GPU already has, so a tier that
 * holds a layer's experts reads nothing from the drives for it. */
typedef struct df_kgpu_xshape {
  int inter, latent;
  uint64_t w1p, w1s, w3p, w3s, w2p, w2s, bytes; /* offsets in a record, its size */
  float beta, linear_beta;                      /* SiTU's */
} df_kgpu_xshape;
int df_kgpu_experts_begin(df_kgpu *g, const df_kgpu_xshape *sh, int max_rows);
float *df_kgpu_expert_in(df_kgpu *g, int n);
int df_kgpu_expert(df_kgpu *g, uint64_t key, const uint8_t *rec, int n, int *row0);
const float *df_kgpu_experts_end(df_kgpu *g);
int df_kgpu_has_expert(df_kgpu *g, uint64_t key);
/* The last CUDA error ("" if none). */
const char *df_kgpu_error(df_kgpu *g);

/* Page-locks host memory the weights are copied from (the store's record
 * buffers: store.h's df_store_on_buffers), and undoes it before that memory
 * is freed. A range that cannot be locked stays pageable (slower, counted). */
void df_kgpu_pin(void *g, void *p, size_t n);
void df_kgpu_unpin(void *g, void *p, size_t n);

void df_kgpu_stats_get(df_kgpu *g, df_kgpu_stats *st);

#endif

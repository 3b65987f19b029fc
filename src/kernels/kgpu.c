/* --device cuda's matrix products (kgpu.h). Each product: the weights from
 * the tier (copied in on a miss), the activations copied in, the GPU's GEMM,
 * the results copied out; all on one stream, so the copy out is the only
 * wait. The product's floats are the CPU's (kcuda.h), so where the
 * result is computed never shows in the output. */
#include "kernels/kgpu.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "kernels/dheap.h"
#include "kernels/dtier.h"

#ifdef DF_HAVE_CUDA
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_host.h"
#include "kernels/cuda/kcuda_seq.h"

#define ALIGN 256 /* a matrix's second part (scales) starts aligned, as the kernels' vector loads want */

struct df_kgpu {
  df_cuda *c;
  int dev;
  pthread_mutex_t mu;
  df_dtier *tier;
  int broken; /* a CUDA error the context may not survive: every later product falls back */
  void *wbuf, *xbuf, *ybuf; /* device: per-use weights, activations in, results out */
  size_t wcap, xcap, ycap;
  float *hx, *hy; /* page-locked staging of the activations in and the results out */
  size_t hxcap, hycap;
  /* a MoE layer batch's experts (df_kgpu_experts_*) */
  df_kgpu_xshape xs;
  int xrows, xcap_rows; /* rows queued in this batch, rows the buffers hold */
  void *dh1, *dh3;      /* device: the gate and up outputs, row r at [r * inter] */
  /* experts from the tier on one row each (a decode step's), not yet
   * launched: they go as one grouped launch of their products
   * (flush_experts), rows [pend[0].r0, xrows) of the batch */
  struct pend {
    const uint8_t *d;
    int r0;
  } pend[DF_CUDA_GROUP_MAX / 2];
  int npend;
  void *fb1, *fb3; /* device: a gated FFN's gate and up outputs (df_kgpu_ffn) */
  size_t f1cap, f3cap;
  void *tb;  /* device: a MoE layer's end (df_kgpu_experts_end_tail) */
  size_t tbcap;
  float *ht; /* page-locked: its output */
  size_t htcap;
  size_t h1cap, h3cap;
  double xt0;
  struct pin {
    const uint8_t *p;
    size_t n;
  } *pins; /* ranges df_kgpu_pin locked, to undo only those */
  int npins, cappins;
  /* sequence state kept on the device (df_kgpu_seq_*) */
  struct sent {
    uint64_t key;
    float *d;
    size_t bytes;
    int rows;     /* MLA: cache rows held, equal to the host's */
    uint32_t gen; /* MLA: the state's gen those rows belong to */
  } *sents;
  int nsents, capsents;
  int no_keep; /* --gpu-state copy */
  /* df_kgpu_pre: the pass's snapshots (slot i at [i * snap_rows * H]),
   * the stream when it is not kept, the xn made for a MoE tail, staging */
  void *snap, *px, *pxn, *pwork, *pa;
  /* the layer input's staging, two used in turn: a KDA call that defers
   * its output returns before its copy from one has run, and the router's
   * call after it stages into the other (every other call waits) */
  float *hpb[2];
  size_t snapcap, pxcap, pxncap, pworkcap, pacap, hpcap[2];
  int hpi;
  /* a KDA call's deferred output (df_kgpu_kda_args.defer): pa_ok while pa
   * holds it, pa_T rows of pa_H */
  int pa_ok, pa_T;
  size_t pa_H;
  uint64_t snap_pass, pxn_tok, pxn_seq;
  /* what the open left free beyond the tier, up to the reserve: the
   * driver's, which our own buffers do not take (room_for) */
  uint64_t drv_floor;
  int snap_n, snap_rows, pxn_T;
  /* the pass a call last came with (df_kgpu_pre.pass), the most rows of a
   * pass since the last trim (trim_at_pass), the least worth a trim */
  uint64_t trim_pass, trim_least;
  int grown_rows;
  /* the tier's memory as one heap (dheap.h), over heap_range bytes of
   * addresses at heap_va in granules of heap_gran; NULL: each matrix
   * allocated on its own (no virtual memory management, or not asked
   * for: heap_open) */
  df_dheap *heap;
  uint8_t *heap_va;
  uint64_t heap_range, heap_gran;
  df_kgpu_stats st;
};

static void note_error(df_kgpu *g, const char *why);

/* What the default tier leaves free of a device of `total` bytes: a
 * sixteenth, at least 2 GiB. Our own buffers take their room from the tier
 * (room_for below), but what the driver allocates on its own after the
 * open (a module's code at its first launch, local memory grown for a
 * kernel that needs more) nothing can give back: with 2 GiB on an 80 GB
 * H100 whose tier filled, launches failed with "unknown error" and every
 * product went to the CPU (run 23); and with the reserve but the per-use
 * buffers of a 512-token prefill taken from it, a launch failed with "out
 * of memory" at 18 MiB free (run 24; docs/PERFORMANCE.md). */
static uint64_t tier_reserve(uint64_t total) {
  uint64_t r = total / 16;
  return r > (2ull << 30) ? r : 2ull << 30;
}

/* How far n more bytes would take the device's free memory below the
 * floor (0: not below it, or no floor). */
static uint64_t below_floor(df_kgpu *g, size_t n) {
  size_t fr = 0, tot = 0;
  if (!g->drv_floor || df_cuda_mem_info(g->dev, &fr, &tot) || fr >= n + g->drv_floor) return 0;
  return n + g->drv_floor - fr;
}

/* Not below the floor (room_for): the tier then evicts or refuses, as
 * for a device out of memory. In the heap, only the granules a block
 * needs mapped count (the rest of a granule mapped already is free). */
static void *tier_alloc(void *ud, size_t n) {
  df_kgpu *g = ud;
  if (g->heap) {
    uint64_t off = df_dheap_alloc(g->heap, n);
    return off == DF_DHEAP_NONE ? NULL : g->heap_va + off;
  }
  return below_floor(g, n) ? NULL : df_cuda_alloc(g->c, n);
}
/* An evicted entry may still be read by queued work (an expert batch):
 * the stream is drained before its memory goes. */
static void tier_free(void *ud, void *p) {
  df_kgpu *g = ud;
  df_cuda_sync(g->c);
  if (g->heap) df_dheap_release(g->heap, (uint64_t)((uint8_t *)p - g->heap_va));
  else df_cuda_free(g->c, p);
}
static int heap_map(void *ud, uint64_t off, int n, uint64_t *h) {
  df_kgpu *g = ud;
  if (below_floor(g, (size_t)n * g->heap_gran)) return -1;
  return df_cuda_vm_map(g->dev, g->heap_va + off, g->heap_gran, n, h);
}
static void heap_unmap(void *ud, uint64_t off, uint64_t h) {
  df_kgpu *g = ud;
  df_cuda_vm_unmap(g->heap_va + off, g->heap_gran, h);
}

/* The heap over addresses for twice the device's memory (the tier never
 * holds more than the device, and the holes its frees leave may push the
 * blocks further along: addresses cost nothing), where the driver has
 * virtual memory management and DF_CUDA_TIER_VMM is not 0 (the default:
 * TIER_VMM_DEFAULT); else none, and the tier allocates each matrix on its
 * own. On an 80 GB H100 the full-depth trunk's tier held 78.3 GB with it
 * against 75.0 without, and its decode read 3.4 GB a token instead of 6.5
 * (run 29, docs/PERFORMANCE.md). */
#define TIER_VMM_DEFAULT 1
static void heap_open(df_kgpu *g, uint64_t total) {
  const char *e = getenv("DF_CUDA_TIER_VMM");
  if (e && *e ? strcmp(e, "0") == 0 : !TIER_VMM_DEFAULT) return;
  uint64_t gr = df_cuda_vm_granule(g->dev);
  if (!gr || gr % ALIGN) return;
  uint64_t range = (2 * total + gr - 1) / gr * gr;
  void *va = df_cuda_vm_reserve(range, gr);
  if (!va) return;
  if ((uintptr_t)va % gr) {
    df_cuda_vm_unreserve(va, range);
    return;
  }
  g->heap_va = va, g->heap_range = range, g->heap_gran = gr;
  g->heap = df_dheap_new(range, gr, ALIGN, (df_dheap_mem){heap_map, heap_unmap, g});
}

/* The per-use device buffers: the one list of them, freed at the close
 * and by a trim (trim_at_pass). pxn and pa are not among them: a later
 * call reads what they hold (see there). */
typedef struct {
  void **buf;
  size_t *cap;
} per_use_buf;
#define PER_USE_MAX 11
static int per_use_buffers(df_kgpu *g, per_use_buf b[PER_USE_MAX]) {
  per_use_buf all[PER_USE_MAX] = {
      {&g->xbuf, &g->xcap}, {&g->ybuf, &g->ycap},   {&g->dh1, &g->h1cap},
      {&g->dh3, &g->h3cap}, {&g->fb1, &g->f1cap},   {&g->fb3, &g->f3cap},
      {&g->tb, &g->tbcap},  {&g->wbuf, &g->wcap},   {&g->snap, &g->snapcap},
      {&g->px, &g->pxcap},  {&g->pwork, &g->pworkcap}};
  memcpy(b, all, sizeof all);
  return PER_USE_MAX;
}

/* The least a trim frees (trim_at_pass): 8 MiB, or a 64th of a smaller
 * tier (the stand-in's). */
static uint64_t trim_least(uint64_t tier_bytes) {
  uint64_t m = 8ull << 20;
  return tier_bytes / 64 < m ? tier_bytes / 64 : m;
}

df_kgpu *df_kgpu_open(int dev, uint64_t tier_bytes, df_kgpu_plan_fn plan, void *plan_ud,
                      char *err, size_t errlen) {
  df_cuda *c = df_cuda_open(dev, err, errlen);
  if (!c) return NULL;
  df_kgpu *g = df_xcalloc(1, sizeof *g);
  g->c = c;
  g->dev = dev;
  pthread_mutex_init(&g->mu, NULL);
  size_t fr = 0, tot = 0;
  if (df_cuda_mem_info(dev, &fr, &tot)) {
    snprintf(err, errlen, "cuda:%d: cannot read the device's free memory", dev);
    df_cuda_close(c);
    free(g);
    return NULL;
  }
  if (!tier_bytes) {
    uint64_t keep = tier_reserve(tot);
    tier_bytes = fr > keep + (256ull << 20) ? fr - keep : 256ull << 20;
  }
  if (tier_bytes > fr) {
    snprintf(err, errlen, "--gpu-mem: %.2f GiB asked, cuda:%d has %.2f GiB free",
             tier_bytes / 1073741824.0, dev, fr / 1073741824.0);
    df_cuda_close(c);
    free(g);
    return NULL;
  }
  heap_open(g, tot);
  g->tier = df_dtier_new(tier_bytes, (df_dtier_mem){tier_alloc, tier_free, g});
  g->trim_least = trim_least(tier_bytes);
  g->drv_floor = fr > tier_bytes ? fr - tier_bytes : 0;
  if (g->drv_floor > tier_reserve(tot)) g->drv_floor = tier_reserve(tot);
  if (plan) df_dtier_keep_cap(g->tier, plan(plan_ud, tier_bytes, fr));
  snprintf(g->st.device, sizeof g->st.device, "%s", df_cuda_describe(c));
  g->st.mem_total = tot;
  g->st.mem_free = fr;
  return g;
}

void df_kgpu_close(df_kgpu *g) {
  if (!g) return;
  df_cuda_use(g->dev);
  df_cuda_sync(g->c);
  df_dtier_free(g->tier);
  df_dheap_free(g->heap);
  if (g->heap_va) df_cuda_vm_unreserve(g->heap_va, g->heap_range);
  for (int i = 0; i < g->nsents; i++) df_cuda_free(g->c, g->sents[i].d);
  free(g->sents);
  per_use_buf b[PER_USE_MAX];
  for (int i = 0, nb = per_use_buffers(g, b); i < nb; i++) df_cuda_free(g->c, *b[i].buf);
  df_cuda_free(g->c, g->pxn);
  df_cuda_free(g->c, g->pa);
  df_cuda_host_free(g->hpb[0]);
  df_cuda_host_free(g->hpb[1]);
  df_cuda_host_free(g->ht);
  df_cuda_host_free(g->hx);
  df_cuda_host_free(g->hy);
  df_cuda_close(g->c);
  pthread_mutex_destroy(&g->mu);
  free(g->pins);
  free(g);
}

/* The tier's budget lowered by bytes (dtier.h's shrink), and the heap's
 * granules the evictions left empty given back to the device, which is
 * where the room is wanted. */
static void give_back(df_kgpu *g, uint64_t bytes) {
  df_dtier_shrink(g->tier, bytes);
  if (g->heap) df_dheap_trim(g->heap);
}

/* Device memory for n bytes outside the tier, from the tier's budget when
 * the device's free memory would drop below the floor (dtier.h's shrink):
 * a per-use buffer or the sequence state is needed every pass, a kept
 * matrix only saves a copy, and the floor is what the driver allocates
 * from on its own. */
static void room_for(df_kgpu *g, size_t n) {
  uint64_t short_by = below_floor(g, n);
  if (short_by && g->heap && df_dheap_trim(g->heap)) short_by = below_floor(g, n);
  if (short_by) give_back(g, short_by);
}

/* A per-use device buffer of at least n bytes (grown, never shrunk). When
 * the device has no room for it, even below the floor, the weight tier
 * gives its budget up for it, once. */
static void *scratch(df_kgpu *g, void **buf, size_t *cap, size_t n) {
  if (*cap >= n) return *buf;
  df_cuda_sync(g->c); /* queued work may still read the old one */
  df_cuda_free(g->c, *buf);
  size_t want = n + n / 4;
  room_for(g, want);
  *buf = df_cuda_alloc(g->c, want);
  if (!*buf) {
    give_back(g, want);
    *buf = df_cuda_alloc(g->c, want);
  }
  *cap = *buf ? want : 0;
  return *buf;
}

/* A pass of a small fraction of the rows the per-use buffers were grown
 * for (decode after a long prompt taken in one chunk) frees those that
 * hold nothing from one pass to the next, and the tier's budget rises by
 * what they held, up to the budget it was made with: grown and never
 * shrunk, a 512-token prefill's (about 1 GB on an H100) stayed out of the
 * tier and every later decode token read that much more of experts from
 * the drives (run 26). They grow again at the pass's own sizes. What they
 * held, not what room_for's shrinks took: most of the budget they cost is
 * lost when the tier's own allocations stop at the floor after they grew
 * (a failed allocation lowers the budget to what the tier holds), and a
 * budget the device cannot give is lowered again by that same stop. snap
 * goes too (its snapshots are the last pass's: a new pass never reads
 * them), pxn and pa stay (a later call reads them under pxn_tok, pa_ok:
 * small, T rows, and a call that finds them gone gives up the context or
 * the pass). */
#define TRIM_ROWS 8
static void trim_at_pass(df_kgpu *g, const df_kgpu_pre *p) {
  if (!p || !p->pass || p->pass == g->trim_pass) return;
  g->trim_pass = p->pass;
  per_use_buf b[PER_USE_MAX];
  int nb = per_use_buffers(g, b);
  uint64_t held = 0;
  for (int i = 0; i < nb; i++) held += *b[i].cap;
  if ((uint64_t)p->rows * TRIM_ROWS > (uint64_t)g->grown_rows || held < g->trim_least) {
    if (p->rows > g->grown_rows) g->grown_rows = p->rows;
    return;
  }
  if (df_cuda_sync(g->c)) return; /* queued work may still read them */
  for (int i = 0; i < nb; i++) {
    df_cuda_free(g->c, *b[i].buf);
    *b[i].buf = NULL, *b[i].cap = 0;
  }
  g->xcap_rows = 0;                /* an expert batch's rows went with xbuf */
  g->snap_pass = 0, g->snap_n = 0; /* and the snapshots with snap */
  df_dtier_grow(g->tier, held);
  g->grown_rows = p->rows;
  g->st.buffer_trims++;
}

/* The same for the page-locked staging. */
static float *staging(df_kgpu *g, float **buf, size_t *cap, size_t n) {
  if (*cap >= n) return *buf;
  df_cuda_sync(g->c);
  df_cuda_host_free(*buf);
  size_t want = n + n / 4;
  *buf = df_cuda_host_alloc(want);
  *cap = *buf ? want : 0;
  if (!*buf) {
    char why[96];
    snprintf(why, sizeof why, "no page-locked memory for %zu bytes", want);
    note_error(g, why);
  }
  return *buf;
}

static size_t up_align(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }
static size_t up64(size_t n) { return (n + 63) / 64 * 64; } /* floats: 256-byte parts */

/* 1 when a is in a range df_kgpu_pin locked. */
static int is_pinned(const df_kgpu *g, const void *a) {
  const uint8_t *x = a;
  for (int i = 0; i < g->npins; i++)
    if (x >= g->pins[i].p && x < g->pins[i].p + g->pins[i].n) return 1;
  return 0;
}

/* A matrix copied into the tier for the first time mostly comes from a
 * file mapping nothing has read yet (the spine's shards): one call maps its
 * pages ahead instead of a page fault per 4 KiB inside the copy (run 8's
 * cold start copied at 2.8 GB/s from a tmpfs mapping). A hint, not yet
 * measured on the GPU host; a kernel before 5.14 refuses it and nothing
 * changes. */
static void prefault(const void *p, size_t n) {
#ifdef MADV_POPULATE_READ
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095, b = (uintptr_t)p + n;
  if (n >= (1u << 20)) (void)madvise((void *)a, b - a, MADV_POPULATE_READ);
#else
  (void)p, (void)n;
#endif
}

/* The device copy of a matrix of two parts (weights, then scales or
 * nothing): from the tier, else copied into it (as cls: the spine's KEEP,
 * the experts' LRU, dtier.h), else into the per-use buffer. NULL on a CUDA
 * error (the context is then not used again, so a tier entry left
 * half-filled is never read). */
static uint8_t *weights(df_kgpu *g, uint64_t id, df_dtier_class cls, const void *a, size_t na,
                        const void *b, size_t nb) {
  size_t n = up_align(na) + nb;
  uint8_t *d = id ? df_dtier_get(g->tier, id) : NULL;
  if (d) return d;
  d = id ? df_dtier_put(g->tier, id, n, cls) : NULL;
  int kept = d != NULL;
  if (!d) d = scratch(g, &g->wbuf, &g->wcap, n);
  if (!d) return NULL;
  double t0 = df_now(); /* the prefault is part of the copy's time */
  if (kept && !is_pinned(g, a)) prefault(a, na); /* copied once, so mapped ahead once */
  if (df_cuda_put(g->c, d, a, na) || (nb && df_cuda_put(g->c, d + up_align(na), b, nb)))
    return NULL;
  /* from page-locked memory the copy is a DMA that runs later, and the
   * store may hand that buffer to the next read as soon as it is given
   * back: wait for it here (a pageable copy was staged before returning) */
  if (is_pinned(g, a) && df_cuda_sync(g->c)) return NULL;
  g->st.weight_h2d_s += df_now() - t0;
  g->st.weight_h2d_bytes += na + nb;
  g->st.h2d_bytes += na + nb;
  return d;
}

/* The GPU's GEMM over the four weight formats (kcuda.h): T vectors per
 * weight pass, each (row, vector) exactly the GEMV's, so exactly the CPU's. */
typedef int (*gemm_fn)(df_cuda *c, const void *w, const void *s, int rows, int cols,
                       const float *X, int T, size_t ldx, float *Y, size_t ldy);

static int gm_bf16(df_cuda *c, const void *w, const void *s, int rows, int cols, const float *X,
                   int T, size_t ldx, float *Y, size_t ldy) {
  (void)s;
  return df_cuda_gemm_bf16(c, w, rows, cols, X, T, ldx, Y, ldy);
}
static int gm_i8(df_cuda *c, const void *w, const void *s, int rows, int cols, const float *X,
                 int T, size_t ldx, float *Y, size_t ldy) {
  return df_cuda_gemm_i8(c, w, s, rows, cols, X, T, ldx, Y, ldy);
}
static int gm_f32(df_cuda *c, const void *w, const void *s, int rows, int cols, const float *X,
                  int T, size_t ldx, float *Y, size_t ldy) {
  (void)s;
  return df_cuda_gemm_f32(c, w, rows, cols, X, T, ldx, Y, ldy);
}
static int gm_mxfp4(df_cuda *c, const void *w, const void *s, int rows, int cols, const float *X,
                    int T, size_t ldx, float *Y, size_t ldy) {
  return df_cuda_gemm_mxfp4(c, w, s, rows, cols, X, T, ldx, Y, ldy);
}

/* T products of rows [0, rows) of (dw, ds) with the device vectors dx (stride
 * ldx) into dy (stride rows). */
static int products(df_kgpu *g, gemm_fn fn, const void *dw, const void *ds, int rows, int cols,
                    const float *dx, int T, size_t ldx, float *dy) {
  if (fn(g->c, dw, ds, rows, cols, dx, T, ldx, dy, (size_t)rows)) return -1;
  g->st.products++;
  return 0;
}

/* The buffers a product of T vectors (cols in, rows out) goes through,
 * allocated before its weights are taken from the tier: growing one may
 * make the tier give memory back, which must not be the entry about to be
 * used. */
static int buffers(df_kgpu *g, int rows, int cols, int T, size_t ldx, size_t *nx, size_t *ny) {
  *nx = ((size_t)(T - 1) * ldx + (size_t)cols) * sizeof(float);
  *ny = (size_t)T * (size_t)rows * sizeof(float);
  return scratch(g, &g->xbuf, &g->xcap, *nx) && scratch(g, &g->ybuf, &g->ycap, *ny) &&
                 staging(g, &g->hx, &g->hxcap, *nx) && staging(g, &g->hy, &g->hycap, *ny)
             ? 0
             : -1;
}

/* X in through the staging (nx bytes into xbuf). */
static int x_in(df_kgpu *g, const float *X, size_t nx) {
  memcpy(g->hx, X, nx);
  if (df_cuda_put(g->c, g->xbuf, g->hx, nx)) return -1;
  g->st.h2d_bytes += nx;
  return 0;
}

/* T rows of n floats from X (stride ldx) packed through the staging at h
 * into the device at d: a fused layer call's input. */
static int rows_in(df_kgpu *g, float *d, float *h, const float *X, size_t T, size_t n, size_t ldx) {
  for (size_t t = 0; t < T; t++) memcpy(h + t * n, X + t * ldx, n * sizeof(float));
  if (df_cuda_put(g->c, d, h, T * n * sizeof(float))) return -1;
  g->st.h2d_bytes += T * n * sizeof(float);
  return 0;
}

/* T rows of `rows` results, packed in the staging at hy, to Y with stride ldy. */
static void y_out(const float *hy, int rows, int T, float *Y, size_t ldy) {
  for (int t = 0; t < T; t++)
    memcpy(Y + (size_t)t * ldy, hy + (size_t)t * rows, (size_t)rows * sizeof(float));
}

/* X in, the products, Y out with stride ldy; the buffers() of these sizes
 * are there. */
static int run(df_kgpu *g, gemm_fn fn, const void *dw, const void *ds, int rows, int cols,
               const float *X, int T, size_t ldx, float *Y, size_t ldy, size_t nx, size_t ny) {
  double t0 = df_now();
  if (x_in(g, X, nx) || products(g, fn, dw, ds, rows, cols, g->xbuf, T, ldx, g->ybuf) ||
      df_cuda_get(g->c, g->hy, g->ybuf, ny))
    return -1;
  y_out(g->hy, rows, T, Y, ldy);
  g->st.d2h_bytes += ny;
  g->st.compute_s += df_now() - t0;
  return 0;
}

/* Counts a product the GPU did not take; after a CUDA error the context is
 * not trusted again (a sticky error fails every later call anyway). */
static void note_error(df_kgpu *g, const char *why) {
  if (g->broken) return;
  snprintf(g->st.last_error, sizeof g->st.last_error, "%s", why ? why : df_cuda_error(g->c));
  /* a device with under half the default reserve free: the driver's own
   * allocations may be what failed (CUDA names that "unknown error") */
  char full[200] = "";
  size_t fr, tot;
  if (!df_cuda_mem_info(g->dev, &fr, &tot) && fr < tier_reserve(tot) / 2)
    snprintf(full, sizeof full,
             " (its memory is full: %.0f of %.0f MiB free; a smaller --gpu-mem leaves the "
             "driver room)",
             fr / 1048576.0, tot / 1048576.0);
  df_log_warn("cuda:%d: %s%s; the layers' products run on the CPU from here on (same results)",
              g->dev, g->st.last_error, full);
  g->broken = 1;
}
static int fell_back(df_kgpu *g) {
  g->st.fallbacks++;
  note_error(g, NULL);
  pthread_mutex_unlock(&g->mu);
  return -1;
}

static int flush_experts(df_kgpu *g);

/* Takes the lock; -1 (unlocked, counted) when the context is not usable.
 * Experts waiting for their grouped launch go first: what follows may
 * overwrite the staging their rows are in, or free a buffer they read. */
static int enter(df_kgpu *g) {
  pthread_mutex_lock(&g->mu);
  if (!g->broken && df_cuda_use(g->dev))
    note_error(g, "cannot make the device current on this thread");
  if (!g->broken && g->npend && flush_experts(g)) note_error(g, NULL);
  if (!g->broken) return 0;
  g->st.fallbacks++;
  pthread_mutex_unlock(&g->mu);
  return -1;
}

/* A spine matrix's rows [r0, r1) on the device (from the tier, or copied
 * in): its weights *w, its int8 scales *s (NULL otherwise) and its GEMM. */
static int spine_rows(df_kgpu *g, const df_wmat *W, int r0, const uint8_t **w, const void **s,
                      gemm_fn *fn) {
  size_t rc = (size_t)W->rows * (size_t)W->cols, off, soff = 0;
  const uint8_t *dw;
  switch (W->kind) {
  case DF_W_BF16:
    dw = weights(g, W->id, DF_DTIER_KEEP, W->w, rc * 2, NULL, 0);
    *fn = gm_bf16, off = (size_t)r0 * W->cols * 2;
    break;
  case DF_W_I8:
    dw = weights(g, W->id, DF_DTIER_KEEP, W->w, rc, W->scale, (size_t)W->rows * sizeof(float));
    *fn = gm_i8, off = (size_t)r0 * W->cols, soff = up_align(rc) + (size_t)r0 * sizeof(float);
    break;
  default:
    dw = weights(g, W->id, DF_DTIER_KEEP, W->w, rc * 4, NULL, 0);
    *fn = gm_f32, off = (size_t)r0 * W->cols * 4;
    break;
  }
  if (!dw) return -1;
  *w = dw + off;
  *s = W->kind == DF_W_I8 ? dw + soff : NULL;
  return 0;
}

int df_kgpu_mm(df_kgpu *g, const df_wmat *W, int r0, int r1, const float *X, int T, size_t ldx,
               float *Y, size_t ldy) {
  if (r1 <= r0 || T <= 0) return 0;
  if (enter(g)) return -1;
  size_t nx, ny;
  if (buffers(g, r1 - r0, W->cols, T, ldx, &nx, &ny)) return fell_back(g);
  const uint8_t *dw;
  const void *ds;
  gemm_fn fn;
  if (spine_rows(g, W, r0, &dw, &ds, &fn)) return fell_back(g);
  if (run(g, fn, dw, ds, r1 - r0, W->cols, X, T, ldx, Y, ldy, nx, ny)) return fell_back(g);
  pthread_mutex_unlock(&g->mu);
  return 0;
}

/* The products of n spine matrices of the device input dx (T vectors,
 * stride ldx), matrix i's into dy[i] (T x its rows), in turn on the one
 * stream, so a weight that goes through the per-use buffer is not
 * overwritten before its product has read it. For one vector the tier's
 * bf16 or int8 matrices go as one grouped launch per format run (a KDA
 * layer's six projections: one launch, not six each too small to fill the
 * GPU); a matrix in the per-use buffer goes alone, as the next one's copy
 * overwrites that buffer. */
static int products_of(df_kgpu *g, int n, const df_wmat *const *W, const float *dx, int T,
                       size_t ldx, float *const *dys) {
  df_cuda_gemv_one grp[DF_CUDA_GROUP_MAX];
  int ng = 0, gfmt = -1;
  for (int i = 0; i <= n; i++) {
    const uint8_t *dw = NULL;
    const void *ds = NULL;
    gemm_fn fn = NULL;
    int fmt = -1;
    if (i < n) {
      if (spine_rows(g, W[i], 0, &dw, &ds, &fn)) return -1;
      if (T == 1 && dw != g->wbuf) fmt = fn == gm_bf16 ? 0 : fn == gm_i8 ? 1 : -1;
    }
    if (ng && (fmt != gfmt || ng == DF_CUDA_GROUP_MAX)) {
      if (df_cuda_gemv_group(g->c, gfmt, ng, grp)) return -1;
      g->st.products += (uint64_t)ng;
      ng = 0;
    }
    if (i == n) break;
    if (fmt >= 0) {
      grp[ng++] = (df_cuda_gemv_one){dw, ds, W[i]->rows, W[i]->cols, dx, dys[i]};
      gfmt = fmt;
    } else if (products(g, fn, dw, ds, W[i]->rows, W[i]->cols, dx, T, ldx, dys[i])) {
      return -1;
    }
  }
  return 0;
}

/* A device block of `bytes` for a layer's small weights under key (0:
 * none): the tier's (*fill 0: already filled), else made there, else the
 * per-use buffer when it refuses (used before the next); *fill 1 then.
 * NULL: no memory. */
static float *small_block(df_kgpu *g, uint64_t key, size_t bytes, int *fill) {
  float *d = key ? df_dtier_get(g->tier, key) : NULL;
  *fill = d == NULL;
  if (d) return d;
  d = key ? df_dtier_put(g->tier, key, bytes, DF_DTIER_KEEP) : NULL;
  return d ? d : scratch(g, &g->wbuf, &g->wcap, bytes);
}

/* ---- AttnRes and the norm on the device (kgpu.h's df_kgpu_pre) ---- */

#define PRE_KEY_BIT (1ull << 60) /* apart from NORM_KEY_BIT, KDA_KEY_BIT, ids and expert keys */

/* 1 when pre reads only snapshots kept from its pass (and, keeping x,
 * takes the next slot), for T rows of H. */
static int pre_fits(const df_kgpu *g, const df_kgpu_pre *p, int T, size_t H) {
  if (p->nS < 0 || p->nS >= p->slots + !p->keep || p->t0 < 0 || p->t0 + T > p->rows || !p->pass ||
      (size_t)p->nS + 1 > H || T > 65535) /* df_cuda_attn_res's bounds */
    return 0;
  if (p->keep && (p->t0 || T != p->rows || p->add)) return 0;
  if (!p->nS) return 1;
  return g->snap_pass == p->pass && g->snap_rows == p->rows && g->snap && H &&
         (p->keep ? g->snap_n == p->nS : g->snap_n >= p->nS);
}

/* enter, then for a pass whose stream begins on the device (pre), the
 * last pass's buffers trimmed and pre's snapshots checked: -1, unlocked,
 * where they do not serve, and the caller computes on the host. */
static int enter_pass(df_kgpu *g, const df_kgpu_pre *pre, int T, size_t H) {
  if (enter(g)) return -1;
  trim_at_pass(g, pre);
  if (pre && !pre_fits(g, pre, T, H)) {
    pthread_mutex_unlock(&g->mu);
    return -1;
  }
  return 0;
}

/* AR's norm and projection and the norm as one device block (H floats a
 * part, 256-byte aligned): from the tier, else copied in. */
static const float *pre_weights(df_kgpu *g, const df_kgpu_pre *p, size_t H) {
  size_t part = up64(H), bytes = 3 * part * sizeof(float);
  int fill;
  float *d = small_block(g, p->id ? PRE_KEY_BIT | p->id : 0, bytes, &fill);
  if (!d || !fill) return d;
  const float *src[3] = {p->nS ? p->res_norm : NULL, p->nS ? p->res_proj : NULL, p->norm};
  for (int i = 0; i < 3; i++)
    if (src[i] && df_cuda_put(g->c, d + i * part, src[i], H * sizeof(float))) return NULL;
  g->st.weight_h2d_bytes += bytes;
  g->st.h2d_bytes += bytes;
  return d;
}

/* T rows of the stream X (stride ldx) in, xn made into dxn; the lock held,
 * pre_fits checked. -1 on a CUDA error: the pass's snapshots are then
 * not read again. */
static int prologue(df_kgpu *g, const df_kgpu_pre *p, const float *X, int T, size_t H,
                    size_t ldx, float *dxn) {
  size_t n = (size_t)T * H;
  float *dx;
  if (p->keep) {
    g->snap_pass = 0; /* until this call has kept x */
    if (!p->nS && !scratch(g, &g->snap, &g->snapcap, (size_t)p->slots * n * sizeof(float)))
      return -1;
    dx = (float *)g->snap + (size_t)p->nS * n;
  } else {
    if (!scratch(g, &g->px, &g->pxcap, n * sizeof(float))) return -1;
    dx = g->px;
  }
  if (p->nS && !scratch(g, &g->pwork, &g->pworkcap, n * sizeof(float))) return -1;
  g->hpi ^= 1;
  float *hp = staging(g, &g->hpb[g->hpi], &g->hpcap[g->hpi], n * sizeof(float));
  const float *dw = hp ? pre_weights(g, p, H) : NULL;
  size_t part = up64(H), ss = (size_t)p->rows * H;
  /* the stream: x, or with add x + the deferred output (it alone when x
   * is NULL), as the host adds them */
  int in = X ? rows_in(g, dx, hp, X, (size_t)T, H, ldx) : 0;
  if (!in && p->add)
    in = X ? df_cuda_add(g->c, dx, dx, g->pa, n) : df_cuda_copy(g->c, dx, g->pa, n * sizeof(float));
  if (!dw || in ||
      df_cuda_attn_res(g->c, dxn, g->pwork, p->nS ? (float *)g->snap + (size_t)p->t0 * H : NULL, ss,
                       p->nS, dx, T, (int)H, dw, dw + part, dw + 2 * part, p->eps))
    return -1;
  if (p->keep) g->snap_pass = p->pass, g->snap_n = p->nS + 1, g->snap_rows = p->rows;
  g->st.pre_calls++;
  return 0;
}

/* The products of one input: X in once (or, with pre, xn made of it into
 * pxn), each matrix's product into its block of ybuf, one copy out, the
 * blocks handed to their Y. */
static int many(df_kgpu *g, const df_kgpu_pre *pre, int n, const df_wmat *const *W,
                const float *X, int T, size_t ldx, float *const *Y, const size_t *ldy,
                uint64_t *xtok) {
  if (n <= 0 || T <= 0) return 0;
  if (n > DF_KGPU_MANY_MAX) return -1;
  int rows = 0;
  size_t H = (size_t)W[0]->cols;
  for (int i = 0; i < n; i++) {
    if ((size_t)W[i]->cols != H) return -1;
    rows += W[i]->rows;
  }
  if (enter_pass(g, pre, T, H)) return -1;
  if (pre && pre->add && (!g->pa_ok || g->pa_T != T || g->pa_H != H || !pre->sum)) {
    pthread_mutex_unlock(&g->mu);
    return -1;
  }
  double t0 = df_now();
  size_t nx, ny;
  const float *dx = g->xbuf;
  size_t ldx0 = ldx;
  if (buffers(g, rows, (int)H, T, pre ? H : ldx, &nx, &ny)) return fell_back(g);
  if (pre) {
    g->pxn_tok = 0; /* until this call has made it */
    if (!scratch(g, &g->pxn, &g->pxncap, (size_t)T * H * sizeof(float)) ||
        prologue(g, pre, X, T, H, ldx, g->pxn))
      return fell_back(g);
    dx = g->pxn, ldx = H;
  } else if (x_in(g, X, nx)) {
    return fell_back(g);
  }
  float *dys[DF_KGPU_MANY_MAX], *dy = g->ybuf;
  for (int i = 0; i < n; i++) {
    dys[i] = dy;
    dy += (size_t)T * (size_t)W[i]->rows;
  }
  if (products_of(g, n, W, dx, T, ldx, dys)) return fell_back(g);
  if (df_cuda_get(g->c, g->hy, g->ybuf, ny)) return fell_back(g);
  const float *hy = g->hy;
  for (int i = 0; i < n; i++) {
    y_out(hy, W[i]->rows, T, Y[i], ldy[i]);
    hy += (size_t)T * (size_t)W[i]->rows;
  }
  if (pre && pre->add) { /* the stream back to the host: the deferred output is in it */
    float *hp = g->hpb[g->hpi]; /* the prologue's, sized for these rows */
    if (df_cuda_get(g->c, hp, g->px, (size_t)T * H * sizeof(float))) return fell_back(g);
    y_out(hp, (int)H, T, pre->sum, ldx0);
    g->st.d2h_bytes += (size_t)T * H * sizeof(float);
    g->pa_ok = 0;
  }
  if (pre) {
    g->pxn_tok = ++g->pxn_seq, g->pxn_T = T;
    if (xtok) *xtok = g->pxn_tok;
  }
  g->st.d2h_bytes += ny;
  g->st.compute_s += df_now() - t0;
  pthread_mutex_unlock(&g->mu);
  return 0;
}

/* Tried on a context a failure has marked broken too: a failed product
 * leaves the memory readable more often than not, and without the output
 * the pass is lost. */
int df_kgpu_take(df_kgpu *g, float *out, int T, size_t H, size_t ldo) {
  pthread_mutex_lock(&g->mu);
  size_t n = (size_t)T * H * sizeof(float);
  float *hp = g->pa_ok && g->pa_T == T && g->pa_H == H && !df_cuda_use(g->dev)
                  ? staging(g, &g->hpb[g->hpi], &g->hpcap[g->hpi], n)
                  : NULL;
  int rc = hp && !df_cuda_get(g->c, hp, g->pa, n) ? 0 : -1;
  if (!rc) {
    y_out(hp, (int)H, T, out, ldo);
    g->st.d2h_bytes += n;
  }
  g->pa_ok = 0;
  pthread_mutex_unlock(&g->mu);
  return rc;
}

int df_kgpu_mm_many(df_kgpu *g, int n, const df_wmat *const *W, const float *X, int T,
                    size_t ldx, float *const *Y, const size_t *ldy) {
  return many(g, NULL, n, W, X, T, ldx, Y, ldy, NULL);
}

int df_kgpu_mm_pre(df_kgpu *g, const df_kgpu_pre *pre, int n, const df_wmat *const *W,
                   const float *X, int T, size_t ldx, float *const *Y, const size_t *ldy,
                   uint64_t *xtok) {
  return many(g, pre, n, W, X, T, ldx, Y, ldy, xtok);
}

/* A gated FFN whole: X in once, gate and up, SiTU, down, the output out
 * once; the activations between them stay on the device. */
int df_kgpu_ffn(df_kgpu *g, const df_wmat *gate, const df_wmat *up, const df_wmat *down,
                const float *X, int T, size_t ldx, float bg, float bu, float *Y, size_t ldy) {
  if (T <= 0) return 0;
  if (gate->rows != up->rows || gate->cols != up->cols || down->cols != gate->rows) return -1;
  if (enter(g)) return -1;
  double t0 = df_now();
  size_t I = (size_t)gate->rows, nh = (size_t)T * I * sizeof(float), nx, ny;
  if (buffers(g, down->rows, gate->cols, T, ldx, &nx, &ny) ||
      !scratch(g, &g->fb1, &g->f1cap, nh) || !scratch(g, &g->fb3, &g->f3cap, nh))
    return fell_back(g);
  float *h1 = g->fb1, *h3 = g->fb3, *out = g->ybuf;
  if (x_in(g, X, nx) ||
      products_of(g, 2, (const df_wmat *const[]){gate, up}, g->xbuf, T, ldx,
                  (float *const[]){h1, h3}) ||
      df_cuda_situ(g->c, h1, h1, h3, (int)((size_t)T * I), bg, bu) ||
      products_of(g, 1, &down, h1, T, I, &out) || df_cuda_get(g->c, g->hy, g->ybuf, ny))
    return fell_back(g);
  y_out(g->hy, down->rows, T, Y, ldy);
  g->st.d2h_bytes += ny;
  g->st.compute_s += df_now() - t0;
  pthread_mutex_unlock(&g->mu);
  return 0;
}

int df_kgpu_mm_mxfp4(df_kgpu *g, uint64_t id, const uint8_t *packed, const uint8_t *scales,
                     int rows, int cols, const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  if (rows <= 0 || T <= 0) return 0;
  if (enter(g)) return -1;
  size_t np = (size_t)rows * (size_t)(cols / 2), ns = (size_t)rows * (size_t)(cols / 32), nx, ny;
  if (buffers(g, rows, cols, T, ldx, &nx, &ny)) return fell_back(g);
  const uint8_t *dw = weights(g, id, DF_DTIER_LRU, packed, np, scales, ns);
  if (!dw) return fell_back(g);
  if (run(g, gm_mxfp4, dw, dw + up_align(np), rows, cols, X, T, ldx, Y, ldy, nx, ny))
    return fell_back(g);
  pthread_mutex_unlock(&g->mu);
  return 0;
}

/* ---- a MoE layer batch's experts ----
 * Row r of the batch (rows are numbered in the order experts are queued) has
 * its input at hx[r * latent] and its output at hy[r * latent]; dx/dy mirror
 * them on the device, dh1/dh3 hold its gate and up outputs. Each expert: its
 * rows in, gate and up products, SiTU, down product, its rows out, all
 * queued; the one wait is in _end. The experts the tier holds that have one
 * row each (a decode step's) wait instead and go together: their gate and
 * up products in one grouped launch, one SiTU, their down products in a
 * second launch (16 experts' 48 launches, each too small to fill the GPU,
 * become 3); each row's floats are those of its own products. */

static int flush_experts(df_kgpu *g) {
  int n = g->npend;
  if (!n) return 0;
  g->npend = 0;
  const df_kgpu_xshape *x = &g->xs;
  size_t Lt = (size_t)x->latent, Mi = (size_t)x->inter, r0 = (size_t)g->pend[0].r0;
  float *dx = (float *)g->xbuf + r0 * Lt, *dy = (float *)g->ybuf + r0 * Lt;
  float *h1 = (float *)g->dh1 + r0 * Mi, *h3 = (float *)g->dh3 + r0 * Mi;
  size_t nb = (size_t)n * Lt * sizeof(float);
  df_cuda_gemv_one m[DF_CUDA_GROUP_MAX];
  for (int i = 0; i < n; i++) {
    const uint8_t *d = g->pend[i].d;
    m[2 * i] = (df_cuda_gemv_one){d + x->w1p, d + x->w1s, (int)Mi, (int)Lt, dx + i * Lt,
                                  h1 + i * Mi};
    m[2 * i + 1] = (df_cuda_gemv_one){d + x->w3p, d + x->w3s, (int)Mi, (int)Lt, dx + i * Lt,
                                      h3 + i * Mi};
  }
  if (df_cuda_put(g->c, dx, g->hx + r0 * Lt, nb) || df_cuda_gemv_group(g->c, 3, 2 * n, m) ||
      df_cuda_situ(g->c, h1, h1, h3, (int)(Mi * (size_t)n), x->beta, x->linear_beta))
    return -1;
  for (int i = 0; i < n; i++) {
    const uint8_t *d = g->pend[i].d;
    m[i] = (df_cuda_gemv_one){d + x->w2p, d + x->w2s, (int)Lt, (int)Mi, h1 + i * Mi, dy + i * Lt};
  }
  if (df_cuda_gemv_group(g->c, 3, n, m) || df_cuda_get_async(g->c, g->hy + r0 * Lt, dy, nb))
    return -1;
  g->st.products += 3 * (uint64_t)n;
  g->st.h2d_bytes += nb;
  g->st.d2h_bytes += nb;
  return 0;
}

int df_kgpu_experts_begin(df_kgpu *g, const df_kgpu_xshape *sh, int max_rows) {
  if (enter(g)) return -1;
  g->xs = *sh;
  g->xrows = 0;
  g->npend = 0;
  size_t n = (size_t)max_rows * (size_t)sh->latent * sizeof(float);
  size_t nh = (size_t)max_rows * (size_t)sh->inter * sizeof(float);
  if (!scratch(g, &g->xbuf, &g->xcap, n) || !scratch(g, &g->ybuf, &g->ycap, n) ||
      !staging(g, &g->hx, &g->hxcap, n) || !staging(g, &g->hy, &g->hycap, n))
    return fell_back(g);
  if (!scratch(g, &g->dh1, &g->h1cap, nh) || !scratch(g, &g->dh3, &g->h3cap, nh))
    return fell_back(g);
  g->xcap_rows = max_rows;
  g->xt0 = df_now();
  pthread_mutex_unlock(&g->mu);
  return 0;
}

float *df_kgpu_expert_in(df_kgpu *g, int n) {
  if (g->broken) return NULL;
  if (g->xrows + n > g->xcap_rows) {
    /* the staging is the batch's: a CPU fallback's own products must not
     * reuse it, so the context is given up rather than left half-used */
    char why[128];
    snprintf(why, sizeof why, "expert batch: %d rows past the %d planned (internal error)",
             g->xrows + n, g->xcap_rows);
    pthread_mutex_lock(&g->mu);
    note_error(g, why);
    pthread_mutex_unlock(&g->mu);
    return NULL;
  }
  return g->hx + (size_t)g->xrows * (size_t)g->xs.latent;
}

int df_kgpu_expert(df_kgpu *g, uint64_t key, const uint8_t *rec, int n, int *row0) {
  /* not enter(): the experts waiting stay waiting for this one to join */
  pthread_mutex_lock(&g->mu);
  if (!g->broken && df_cuda_use(g->dev))
    note_error(g, "cannot make the device current on this thread");
  if (g->broken) {
    g->st.fallbacks++;
    pthread_mutex_unlock(&g->mu);
    return -1;
  }
  const df_kgpu_xshape *x = &g->xs;
  size_t Lt = (size_t)x->latent, Mi = (size_t)x->inter;
  /* the record as one entry; refused by the tier, it goes through the
   * per-use buffer, which the stream's order keeps from being overwritten
   * before the experts queued on it have read it. A copy may evict a
   * waiting expert's entry: those are launched first. */
  const uint8_t *d;
  if (rec) {
    if (flush_experts(g)) return fell_back(g);
    d = weights(g, key, DF_DTIER_LRU, rec, x->bytes, NULL, 0);
  } else if (!(d = df_dtier_get(g->tier, key))) {
    pthread_mutex_unlock(&g->mu);
    return 1;
  }
  if (!d) return fell_back(g);
  size_t r0 = (size_t)g->xrows;
  if (!rec && n == 1) {
    g->pend[g->npend++] = (struct pend){d, (int)r0};
    *row0 = g->xrows;
    g->xrows += n;
    if (g->npend == DF_CUDA_GROUP_MAX / 2 && flush_experts(g)) return fell_back(g);
    pthread_mutex_unlock(&g->mu);
    return 0;
  }
  if (flush_experts(g)) return fell_back(g);
  float *dx = (float *)g->xbuf + r0 * Lt, *dy = (float *)g->ybuf + r0 * Lt;
  float *h1 = (float *)g->dh1 + r0 * Mi, *h3 = (float *)g->dh3 + r0 * Mi;
  size_t nb = (size_t)n * Lt * sizeof(float);
  if (df_cuda_put(g->c, dx, g->hx + r0 * Lt, nb) ||
      products(g, gm_mxfp4, d + x->w1p, d + x->w1s, (int)Mi, (int)Lt, dx, n, Lt, h1) ||
      products(g, gm_mxfp4, d + x->w3p, d + x->w3s, (int)Mi, (int)Lt, dx, n, Lt, h3) ||
      df_cuda_situ(g->c, h1, h1, h3, (int)(Mi * (size_t)n), x->beta, x->linear_beta) ||
      products(g, gm_mxfp4, d + x->w2p, d + x->w2s, (int)Lt, (int)Mi, h1, n, Mi, dy) ||
      df_cuda_get_async(g->c, g->hy + r0 * Lt, dy, nb))
    return fell_back(g);
  g->st.h2d_bytes += nb;
  g->st.d2h_bytes += nb;
  *row0 = g->xrows;
  g->xrows += n;
  pthread_mutex_unlock(&g->mu);
  return 0;
}

const float *df_kgpu_experts_end(df_kgpu *g) {
  pthread_mutex_lock(&g->mu);
  const float *out = NULL;
  if (!g->broken) {
    if (flush_experts(g) || df_cuda_sync(g->c)) note_error(g, NULL);
    else out = g->hy;
  }
  g->st.compute_s += df_now() - g->xt0;
  pthread_mutex_unlock(&g->mu);
  return out;
}

#define NORM_KEY_BIT (1ull << 61) /* apart from KDA_KEY_BIT, df_wmat ids and expert keys */

/* A norm's weights on the device, kept in the tier beside the matrix id
 * they belong to (or through the per-use buffer: used before the next). */
static const float *norm_weights(df_kgpu *g, uint64_t id, const float *w, size_t n) {
  return (const float *)weights(g, id ? NORM_KEY_BIT | id : 0, DF_DTIER_KEEP, w, n * sizeof(float),
                                NULL, 0);
}

/* The tail's work on the stream, the lock held; -1 on a CUDA error or a
 * shape it cannot take. Every buffer is sized before the first copy:
 * growing one drains the stream and frees the old one. */
static int moe_tail(df_kgpu *g, const df_kgpu_moe_tail *a) {
  size_t T = (size_t)a->T, K = (size_t)a->K, Lt = (size_t)g->xs.latent;
  size_t H = (size_t)a->up->rows, I = a->sh_gate ? (size_t)a->sh_gate->rows : 0;
  const df_wmat *sh[2] = {a->sh_gate, a->sh_up};
  if ((size_t)a->up->cols != Lt ||
      (a->sh_gate && (a->sh_up->rows != a->sh_gate->rows || (size_t)a->sh_gate->cols != H ||
                      a->sh_up->cols != a->sh_gate->cols || (size_t)a->sh_down->cols != I ||
                      (size_t)a->sh_down->rows != H))) {
    note_error(g, "moe tail: the shapes do not fit (internal error)");
    return -1;
  }
  size_t o_w = up_align(T * K * sizeof(int)), o_rr = o_w + up_align(T * K * sizeof(float));
  size_t o_up = o_rr + up_align(T * Lt * sizeof(float)), o_x = o_up + up_align(T * H * sizeof(float));
  size_t o_sh = o_x + up_align(T * H * sizeof(float)), nb = o_sh + T * H * sizeof(float);
  size_t nh = (I ? T * I : 1) * sizeof(float), ny = T * H * sizeof(float);
  if (!scratch(g, &g->tb, &g->tbcap, nb) || !staging(g, &g->ht, &g->htcap, ny) ||
      (I && (!scratch(g, &g->fb1, &g->f1cap, nh) || !scratch(g, &g->fb3, &g->f3cap, nh))))
    return -1;
  uint8_t *tb = g->tb;
  int *rows = (int *)tb;
  float *w = (float *)(tb + o_w), *rr = (float *)(tb + o_rr), *routed = (float *)(tb + o_up);
  float *dx = (float *)(tb + o_x), *shared = (float *)(tb + o_sh);
  if (a->xtok && (a->xtok != g->pxn_tok || (size_t)g->pxn_T != T)) {
    note_error(g, "moe tail: the shared expert's input is no longer on the device (internal error)");
    return -1;
  }
  if (flush_experts(g) || df_cuda_put(g->c, rows, a->slot_row, T * K * sizeof(int)) ||
      df_cuda_put(g->c, w, a->slot_w, T * K * sizeof(float)) ||
      df_cuda_moe_combine(g->c, rr, g->ybuf, rows, w, a->T, a->K, (int)Lt))
    return -1;
  g->st.h2d_bytes += T * K * 8;
  if (a->norm) {
    const float *dn = norm_weights(g, a->norm_id, a->norm, Lt);
    if (!dn || df_cuda_rmsnorm_rows(g->c, rr, rr, dn, (int)Lt, a->T, Lt, a->eps))
      return -1;
  }
  if (products_of(g, 1, &a->up, rr, a->T, Lt, &routed)) return -1;
  float *dout = routed;
  if (I && a->xtok) {
    dx = g->pxn;
  } else if (I) {
    for (size_t t = 0; t < (a->ldx == H ? 1 : T); t++)
      if (df_cuda_put(g->c, dx + t * H, a->x + t * a->ldx, (a->ldx == H ? T : 1) * H * sizeof(float)))
        return -1;
    g->st.h2d_bytes += ny;
  }
  if (I) {
    float *h1 = g->fb1, *h3 = g->fb3;
    if (products_of(g, 2, sh, dx, a->T, H, (float *const[]){h1, h3}) ||
        df_cuda_situ(g->c, h1, h1, h3, (int)(T * I), a->bg, a->bu) ||
        products_of(g, 1, &a->sh_down, h1, a->T, I, &shared) ||
        df_cuda_add(g->c, shared, routed, shared, T * H))
      return -1;
    dout = shared;
  }
  if (df_cuda_get(g->c, g->ht, dout, ny)) return -1;
  y_out(g->ht, (int)H, a->T, a->out, a->ldo);
  g->st.d2h_bytes += ny;
  return 0;
}

int df_kgpu_experts_end_tail(df_kgpu *g, const df_kgpu_moe_tail *a) {
  pthread_mutex_lock(&g->mu);
  int rc = -1;
  if (!g->broken) {
    if (a->T <= 0 || !moe_tail(g, a)) rc = 0;
    else note_error(g, NULL);
  }
  g->st.compute_s += df_now() - g->xt0;
  pthread_mutex_unlock(&g->mu);
  return rc;
}

int df_kgpu_has_expert(df_kgpu *g, uint64_t key) {
  pthread_mutex_lock(&g->mu);
  int has = !g->broken && df_dtier_has(g->tier, key);
  pthread_mutex_unlock(&g->mu);
  return has;
}

const char *df_kgpu_error(df_kgpu *g) { return g->st.last_error; }

/* Called by the store with its lock held, from whichever thread grows its
 * buffers: the device is made current here, and the lock order is always
 * store, then this context's. */
void df_kgpu_pin(void *ud, void *p, size_t n) {
  df_kgpu *g = ud;
  pthread_mutex_lock(&g->mu);
  if (!df_cuda_use(g->dev) && !df_cuda_host_register(p, n)) {
    if (g->npins == g->cappins) {
      g->cappins = g->cappins ? 2 * g->cappins : 16;
      g->pins = df_xrealloc(g->pins, sizeof *g->pins * (size_t)g->cappins);
    }
    g->pins[g->npins++] = (struct pin){p, n};
    g->st.pinned_bytes += n;
  } else {
    g->st.pin_failures++;
  }
  pthread_mutex_unlock(&g->mu);
}

void df_kgpu_unpin(void *ud, void *p, size_t n) {
  df_kgpu *g = ud;
  pthread_mutex_lock(&g->mu);
  for (int i = 0; i < g->npins; i++)
    if (g->pins[i].p == p) {
      df_cuda_use(g->dev);
      df_cuda_sync(g->c); /* a queued copy may still read it */
      df_cuda_host_unregister(p);
      g->pins[i] = g->pins[--g->npins];
      g->st.pinned_bytes -= n;
      break;
    }
  pthread_mutex_unlock(&g->mu);
}

/* ---- sequence state kept on the device ---- */


static struct sent *sent_find(df_kgpu *g, uint64_t key) {
  for (int i = 0; i < g->nsents; i++)
    if (g->sents[i].key == key) return &g->sents[i];
  return NULL;
}

static void sent_free(df_kgpu *g, struct sent *e) {
  df_cuda_sync(g->c); /* queued work may still read it */
  df_cuda_free(g->c, e->d);
  g->st.seq_bytes -= e->bytes;
  *e = g->sents[--g->nsents];
  g->st.seq_entries = g->nsents;
}

/* Device memory for sequence state: the tier gives its budget up when the
 * device is full (dtier.h's shrink), as for the per-use buffers, since the
 * state is needed every pass. */
static float *sent_alloc(df_kgpu *g, size_t bytes) {
  room_for(g, bytes);
  float *d = df_cuda_alloc(g->c, bytes);
  if (!d) {
    give_back(g, bytes);
    d = df_cuda_alloc(g->c, bytes);
  }
  return d;
}

/* Makes d (bytes of device memory) the entry of key, which is not present. */
static struct sent *sent_add(df_kgpu *g, uint64_t key, float *d, size_t bytes) {
  if (g->nsents == g->capsents) {
    g->capsents = g->capsents ? 2 * g->capsents : 64;
    g->sents = df_xrealloc(g->sents, (size_t)g->capsents * sizeof *g->sents);
  }
  struct sent *e = &g->sents[g->nsents++];
  *e = (struct sent){.key = key, .d = d, .bytes = bytes};
  g->st.seq_bytes += bytes;
  g->st.seq_entries = g->nsents;
  return e;
}

/* The entry of key, bytes long: the one there (dropped and made again
 * when its size differs), else a new one; NULL when there is no room.
 * Entries may move: pointers taken before do not survive this. */
static struct sent *sent_get(df_kgpu *g, uint64_t key, size_t bytes) {
  struct sent *e = sent_find(g, key);
  if (e && e->bytes == bytes) return e;
  if (e) sent_free(g, e);
  float *d = sent_alloc(g, bytes);
  return d ? sent_add(g, key, d, bytes) : NULL;
}

void df_kgpu_keep_state(df_kgpu *g, int on) { g->no_keep = !on; }

void df_kgpu_seq_drop(df_kgpu *g, uint64_t id) {
  if (!g) return;
  pthread_mutex_lock(&g->mu);
  df_cuda_use(g->dev);
  for (int i = g->nsents - 1; i >= 0; i--)
    if (g->sents[i].key >> 12 == id) sent_free(g, &g->sents[i]);
  pthread_mutex_unlock(&g->mu);
}

/* Tried even when the context is marked broken (enter() would refuse):
 * after an injected or a kernel's failure the copies still work, and the
 * state is worth the attempt. */
int df_kgpu_seq_pull(df_kgpu *g, uint64_t key, float *S, size_t nS, float *conv, size_t nconv) {
  pthread_mutex_lock(&g->mu);
  struct sent *e = sent_find(g, key);
  size_t coff = up64(nS); /* df_kgpu_kda's layout: S, then the conv windows */
  int rc = !e || (coff + nconv) * sizeof(float) > e->bytes || df_cuda_use(g->dev) ||
                   df_cuda_get(g->c, S, e->d, nS * sizeof(float)) ||
                   df_cuda_get(g->c, conv, e->d + coff, nconv * sizeof(float))
               ? -1
               : 0;
  if (!rc) {
    g->st.seq_pulls++;
    g->st.d2h_bytes += (nS + nconv) * sizeof(float);
  }
  pthread_mutex_unlock(&g->mu);
  return rc;
}

/* A failed copy may have written half of dst: it goes, so nothing reads
 * it as a state again. Not on a broken context (enter()'s refusal): the
 * state then leaves the device, through the caller's pull of src. */
int df_kgpu_seq_copy(df_kgpu *g, uint64_t dst, uint64_t src) {
  if (!g || g->no_keep || dst == src) return -1;
  pthread_mutex_lock(&g->mu);
  struct sent *e = sent_find(g, src);
  int rc = -1;
  /* a broken context: the state leaves the device (the caller pulls src) */
  if (e && !g->broken && !df_cuda_use(g->dev)) {
    size_t bytes = e->bytes;
    struct sent *d = sent_get(g, dst, bytes);
    e = sent_find(g, src); /* sent_get may have moved it */
    if (d && e && !df_cuda_copy(g->c, d->d, e->d, bytes)) {
      rc = 0;
      g->st.seq_copies++;
    } else if (d) {
      sent_free(g, d);
    }
  }
  pthread_mutex_unlock(&g->mu);
  return rc;
}

/* ---- a KDA layer's sequence part ----
 * One device region (xbuf) and its page-locked mirror (hx), in the order
 * S, conv state, o, q, k, v, g, f, b: one copy in of all of it, the
 * kernels, one copy out of the first three. The caller's buffers are
 * written only after that copy out succeeded, so a failure leaves them for
 * the CPU as they were. */

#define KDA_KEY_BIT (1ull << 62) /* apart from df_wmat ids (< 2^40) and expert keys (bit 63) */

/* The layer's conv weights, A_log, dt_bias and o_norm as one device block
 * (offsets in floats in off[0..3]): from the tier, else copied in (kept
 * there, or into the per-use buffer when it refuses). */
static float *kda_weights(df_kgpu *g, const df_kgpu_kda_args *a, size_t off[4]) {
  size_t P = (size_t)a->heads * (size_t)a->D, nc = P * (size_t)a->K;
  off[0] = 0;
  off[1] = up64(3 * nc);
  off[2] = off[1] + up64((size_t)a->heads);
  off[3] = off[2] + up64(P);
  size_t bytes = (off[3] + (size_t)a->D) * sizeof(float);
  int fill;
  float *d = small_block(g, a->id ? KDA_KEY_BIT | a->id : 0, bytes, &fill);
  if (!d || !fill) return d;
  double t0 = df_now();
  for (int i = 0; i < 3; i++)
    if (df_cuda_put(g->c, d + (size_t)i * nc, a->conv_w[i], nc * sizeof(float))) return NULL;
  if (df_cuda_put(g->c, d + off[1], a->A_log, (size_t)a->heads * sizeof(float)) ||
      df_cuda_put(g->c, d + off[2], a->dt_bias, P * sizeof(float)) ||
      df_cuda_put(g->c, d + off[3], a->o_norm, (size_t)a->D * sizeof(float)))
    return NULL;
  g->st.weight_h2d_s += df_now() - t0;
  g->st.weight_h2d_bytes += bytes;
  g->st.h2d_bytes += bytes;
  return d;
}

static int seq_failed(df_kgpu *g) {
  g->st.fallbacks++;
  note_error(g, df_cuda_kda_error()[0] ? df_cuda_kda_error() : NULL);
  pthread_mutex_unlock(&g->mu);
  return -1;
}

/* The entry a call keeps its state in: the one under skey, made when the
 * host's state is the current one; NULL when there is none to use. */
static struct sent *kda_entry(df_kgpu *g, const df_kgpu_kda_args *a, size_t bytes) {
  if (!a->skey || g->no_keep) return NULL;
  struct sent *e = sent_find(g, a->skey);
  if (e || !a->s_host) return e;
  float *d = sent_alloc(g, bytes); /* no room: the state goes in and out this call */
  return d ? sent_add(g, a->skey, d, bytes) : NULL;
}

/* A fused call's input: x staged and copied to dx, or with pre its xn made
 * there. */
static int fused_in(df_kgpu *g, const df_kgpu_pre *pre, const float *x, size_t ldx, int T,
                    size_t H, float *dx, float *hx) {
  return pre ? prologue(g, pre, x, T, H, ldx, dx) : rows_in(g, dx, hx, x, (size_t)T, H, ldx);
}

/* The fused call's projections in (kgpu.h: df_kgpu_kda_args.x): x in to
 * d + off[9], q..b and fa made there, f from fa. */
static int kda_projections(df_kgpu *g, const df_kgpu_kda_args *a, float *d, float *h,
                           const size_t *off) {
  size_t H = (size_t)a->W[0]->cols;
  if (fused_in(g, a->pre, a->x, a->ldx, a->T, H, d + off[9], h + off[9])) return -1;
  float *dys[6] = {d + off[3], d + off[4], d + off[5], d + off[6], d + off[10], d + off[8]};
  float *df = d + off[7];
  return products_of(g, 6, a->W, d + off[9], a->T, H, dys) ||
                 products_of(g, 1, &a->W[6], d + off[10], a->T, (size_t)a->D, &df)
             ? -1
             : 0;
}

/* Shapes the fused call needs: every projection of x, fb of fa, o_proj of o. */
static int kda_fused_fits(const df_kgpu_kda_args *a) {
  size_t P = (size_t)a->heads * (size_t)a->D;
  int H = a->W[0]->cols;
  size_t rows[6] = {P, P, P, P, (size_t)a->D, (size_t)a->heads};
  for (int i = 0; i < 6; i++)
    if (a->W[i]->cols != H || (size_t)a->W[i]->rows != rows[i]) return 0;
  return a->W[6]->cols == a->D && (size_t)a->W[6]->rows == P && (size_t)a->W[7]->cols == P &&
         a->W[7]->rows == H && a->out;
}

/* The row marks' entries (df_kgpu_kda_args.rkey), made before the state's
 * own (kda_entry's pointer must be the last one taken); -1 when one cannot
 * be had. */
static int kda_row_entries(df_kgpu *g, const df_kgpu_kda_args *a, int nrow, size_t bytes) {
  for (int t = 0; t < nrow; t++)
    if (!sent_get(g, a->rkey[t], bytes)) return -1;
  return 0;
}

/* The row states the kernels left at rows (a block of rstride floats a
 * row, in an entry's layout) into their entries: one copy each. */
static int kda_rows_out(df_kgpu *g, const df_kgpu_kda_args *a, int nrow, const float *rows,
                        size_t rstride, size_t bytes) {
  for (int t = 0; t < nrow; t++) {
    struct sent *m = sent_find(g, a->rkey[t]);
    if (!m || df_cuda_copy(g->c, m->d, rows + (size_t)t * rstride, bytes)) return -1;
    g->st.seq_copies++;
  }
  return 0;
}

int df_kgpu_kda(df_kgpu *g, df_kgpu_kda_args *a) {
  a->kept = 0;
  if (a->T <= 0 || a->heads <= 0 || a->D <= 0) return 0;
  if (a->K < 1) return -1;
  int nrow = a->nrow < a->T ? a->nrow : a->T;
  if (nrow > 0 && (!a->skey || !a->rkey || g->no_keep)) return -1;
  int fused = a->x != NULL;
  if (fused && !kda_fused_fits(a)) return -1;
  size_t H = fused ? (size_t)a->W[0]->cols : 0;
  if (enter_pass(g, fused ? a->pre : NULL, a->T, H)) return -1;
  double t0 = df_now();
  size_t P = (size_t)a->heads * (size_t)a->D, T = (size_t)a->T;
  /* S, conv, o, q, k, v, g, f, b; fused: x, fa, out; the row states */
  size_t n[13] = {P * (size_t)a->D, 3 * (size_t)(a->K - 1) * P, T * P, T * P, T * P,
                  T * P, T * P, T * P, T * (size_t)a->heads, T * H, fused ? T * (size_t)a->D : 0,
                  T * H, 0};
  const float *src[9] = {a->S, a->conv_st, NULL, a->q, a->k, a->v, a->g, a->f, a->b};
  size_t off[14] = {0};
  for (int i = 0; i < 12; i++) off[i + 1] = off[i] + up64(n[i]);
  n[12] = (size_t)nrow * off[2]; /* a row's block: S and the conv windows, as an entry holds them */
  off[13] = off[12] + n[12];
  /* copied in: the state and (unfused) the products; fused, x goes alone */
  int nsrc = fused ? 2 : 9;
  size_t nin = off[nsrc] * sizeof(float), nst = off[2] * sizeof(float), nout = off[3] * sizeof(float);
  size_t nall = off[13] * sizeof(float);
  size_t woff[4];
  /* the output left on the device for the next call: not with
   * --gpu-state copy, where the host keeps everything the pass needs */
  int defer = fused && a->defer && !g->no_keep;
  g->pa_ok = 0; /* an output left there before is not read after this call */
  if (!scratch(g, &g->xbuf, &g->xcap, nall) || !staging(g, &g->hx, &g->hxcap, nall) ||
      (defer && !scratch(g, &g->pa, &g->pacap, T * H * sizeof(float))))
    return fell_back(g);
  if (nrow > 0 && kda_row_entries(g, a, nrow, nst)) { /* a full device, not an error: */
    pthread_mutex_unlock(&g->mu);                      /* the CPU's loops write the marks */
    return -1;
  }
  struct sent *e = kda_entry(g, a, nst); /* after scratch(): its shrink may not take this */
  if (a->skey && !a->s_host && !e) { /* the caller's bookkeeping is wrong: never guess */
    pthread_mutex_unlock(&g->mu);
    return -1;
  }
  float *d = g->xbuf, *h = g->hx;
  /* before kda_weights: a projection through the per-use buffer would
   * overwrite the small weights if they went there */
  if (fused && kda_projections(g, a, d, h, off)) return fell_back(g);
  float *dw = kda_weights(g, a, woff);
  if (!dw) return fell_back(g);
  /* the state in: from the host, or from the entry (the kernels then work
   * on the copy, so a failure leaves the entry as it was) */
  int from_entry = e && !a->s_host;
  size_t in0 = from_entry ? off[3] : 0;
  for (int i = 0; i < nsrc; i++)
    if (src[i] && off[i] >= in0) memcpy(h + off[i], src[i], n[i] * sizeof(float));
  df_cuda_kda_args k = {.T = a->T, .heads = a->heads, .D = a->D, .K = a->K, .lb = a->lb,
                        .eps = a->eps, .S = d + off[0], .conv_st = d + off[1], .o = d + off[2],
                        .q = d + off[3], .k = d + off[4], .v = d + off[5], .g = d + off[6],
                        .f = d + off[7], .b = d + off[8], .conv_w = dw + woff[0],
                        .A_log = dw + woff[1], .dt_bias = dw + woff[2], .o_norm = dw + woff[3],
                        .nrow = nrow, .rows = d + off[12], .rstride = off[2], .rconv = off[1]};
  if (nin > in0 * sizeof(float) && df_cuda_put(g->c, d + in0, h + in0, nin - in0 * sizeof(float)))
    return fell_back(g);
  if (from_entry && df_cuda_copy(g->c, d, e->d, nst)) return fell_back(g);
  if (df_cuda_kda(g->c, &k)) return seq_failed(g);
  /* before anything the caller reads is written: a failure here leaves
   * the state's entry and the caller's buffers as they were */
  if (nrow > 0 && kda_rows_out(g, a, nrow, d + off[12], off[2], nst)) return fell_back(g);
  /* what comes back besides the state: o, or (fused) o_proj's output;
   * deferred, o_proj's output stays in pa and nothing comes back */
  float *dres = d + off[2], *hres = h + off[2];
  size_t nres = n[2];
  if (fused) {
    dres = defer ? g->pa : d + off[11], hres = h + off[11], nres = defer ? 0 : n[11];
    if (products_of(g, 1, &a->W[7], d + off[2], a->T, P, &dres)) return fell_back(g);
  }
  /* kept: the state stays in the entry and only the output comes back */
  int had = e != NULL;
  int kept = had && !df_cuda_copy(g->c, e->d, d, nst) &&
             (!nres || !df_cuda_get(g->c, hres, dres, nres * sizeof(float)));
  if (had && !kept) {
    /* the entry may be half written: nothing reads it again; the state
     * after the call is still in xbuf, so it goes to the host instead */
    sent_free(g, e);
    note_error(g, NULL);
    g->st.fallbacks++;
  }
  if (!kept && (df_cuda_get(g->c, h, d, fused ? nst : nout) ||
                (fused && nres && df_cuda_get(g->c, hres, dres, nres * sizeof(float))))) {
    if (!had) return fell_back(g);
    pthread_mutex_unlock(&g->mu);
    return from_entry ? -2 : -1; /* else the host still has the state before the call */
  }
  if (!kept) {
    memcpy(a->S, h + off[0], n[0] * sizeof(float));
    memcpy(a->conv_st, h + off[1], n[1] * sizeof(float));
  }
  if (defer) g->pa_T = a->T, g->pa_H = H, g->pa_ok = 1;
  else if (fused) y_out(hres, (int)H, a->T, a->out, a->ldo);
  else memcpy(a->o, hres, n[2] * sizeof(float));
  a->kept = kept, a->deferred = defer;
  g->st.d2h_bytes += (kept ? 0 : nst) + nres * sizeof(float);
  g->st.seq_calls++;
  g->st.h2d_bytes += nin - in0 * sizeof(float);
  g->st.compute_s += df_now() - t0;
  pthread_mutex_unlock(&g->mu);
  return 0;
}

/* ---- an MLA layer's attention ----
 * xbuf: o, g, q, cache (only the rows the entry lacks, when it is kept),
 * olat, scores; the copy in from g to the cache's end, the attention
 * kernel, kv_b's value rows per head (the GEMM over the T rows' olat of
 * that head), the gate, the copy out of o. */

/* The entry holding the layer's cache rows, with room for ntot of them;
 * *valid: its rows still equal to the host's (those before n0 of the same
 * gen). NULL when the cache is not kept (no key, or no room). */
static struct sent *mla_entry(df_kgpu *g, const df_kgpu_mla_args *a, size_t w, size_t ntot,
                              size_t *valid) {
  *valid = 0;
  if (!a->skey || g->no_keep) return NULL;
  struct sent *e = sent_find(g, a->skey);
  if (e && e->gen != a->gen) e->rows = 0;
  size_t keep = e ? ((size_t)e->rows < (size_t)a->n0 ? (size_t)e->rows : (size_t)a->n0) : 0;
  size_t need = ntot * w * sizeof(float);
  if (!e || e->bytes < need) {
    size_t grow = e ? 2 * e->bytes : 0, bytes = need > grow ? need : grow;
    float *d = sent_alloc(g, bytes);
    if (!d) {
      if (e) sent_free(g, e);
      return NULL;
    }
    if (keep && df_cuda_copy(g->c, d, e->d, keep * w * sizeof(float))) keep = 0;
    if (e) sent_free(g, e);
    e = sent_add(g, a->skey, d, bytes);
  }
  e->gen = a->gen;
  e->rows = (int)keep;
  *valid = keep;
  return e;
}

/* Shapes the fused call needs: q_a, kv_a and the gate of x, q_b of q_a's
 * output, o_proj of the heads' outputs. */
static int mla_fused_fits(const df_kgpu_mla_args *a) {
  const df_wmat *const *W = a->W;
  if (!W[0] || !W[1] || !W[2] || !W[4] || !a->out || !a->new_rows || !a->qa_norm || !a->kva_norm)
    return 0;
  int H = W[0]->cols, Hm = a->heads;
  return W[1]->cols == H && W[1]->rows == a->kr + a->dr && W[2]->cols == W[0]->rows &&
         W[2]->rows == Hm * (a->dn + a->dr) &&
         (!W[3] || (W[3]->cols == H && W[3]->rows == Hm * a->dv)) && W[4]->cols == Hm * a->dv &&
         W[4]->rows == H;
}

/* The fused call's projections (kgpu.h: df_kgpu_mla_args.x), x at dx: q_a,
 * kv_a (into the cache's new rows dnew) and the gate (into dg), q_a's norm,
 * q_b into dq, the new rows' latent norm. */
static int mla_projections(df_kgpu *g, const df_kgpu_mla_args *a, const float *dx, float *dqa,
                           float *dnew, float *dg, float *dq) {
  int nw = a->W[3] ? 3 : 2, qr = a->W[0]->rows;
  size_t H = (size_t)a->W[0]->cols, w = (size_t)(a->kr + a->dr);
  if (products_of(g, nw, (const df_wmat *const[]){a->W[0], a->W[1], a->W[3]}, dx, a->T, H,
                  (float *const[]){dqa, dnew, dg}))
    return -1;
  const float *n1 = norm_weights(g, a->W[0]->id, a->qa_norm, (size_t)qr);
  if (!n1 || df_cuda_rmsnorm_rows(g->c, dqa, dqa, n1, qr, a->T, (size_t)qr, a->eps) ||
      products_of(g, 1, &a->W[2], dqa, a->T, (size_t)qr, &dq))
    return -1;
  const float *n2 = norm_weights(g, a->W[1]->id, a->kva_norm, (size_t)a->kr);
  return !n2 || df_cuda_rmsnorm_rows(g->c, dnew, dnew, n2, a->kr, a->T, w, a->eps) ? -1 : 0;
}

/* Each head's output: kv_b's value rows of the head times its olat (T
 * rows); one GEMV a head is as many launches as heads, each too small to
 * fill the GPU, so for one row they go in grouped launches (the same
 * floats, kcuda.h) where the format has them. */
static int mla_values(df_kgpu *g, const df_kgpu_mla_args *a, gemm_fn fn, const uint8_t *dw,
                      const float *ds, const float *olat, float *o) {
  int fmt = fn == gm_bf16 ? 0 : fn == gm_i8 ? 1 : -1; /* df_cuda_gemv_group's; -1 none (f32) */
  size_t Hm = (size_t)a->heads, kr = (size_t)a->kr, esz = fn == gm_bf16 ? 2 : fn == gm_i8 ? 1 : 4;
  size_t ldx = Hm * kr, ldy = Hm * (size_t)a->dv;
  df_cuda_gemv_one grp[DF_CUDA_GROUP_MAX];
  int ng = 0;
  for (size_t hd = 0; hd < Hm; hd++) {
    size_t r = hd * (size_t)(a->dn + a->dv) + (size_t)a->dn; /* the head's first value row */
    const void *wr = dw + r * kr * esz;
    const float *X = olat + hd * kr;
    float *Y = o + hd * (size_t)a->dv;
    const float *sr = ds ? ds + r : NULL; /* int8's row scales */
    if (a->T == 1 && fmt >= 0) {
      grp[ng++] = (df_cuda_gemv_one){wr, sr, a->dv, a->kr, X, Y};
      if (ng < DF_CUDA_GROUP_MAX && hd + 1 < Hm) continue;
      if (df_cuda_gemv_group(g->c, fmt, ng, grp)) return -1;
      g->st.products += (uint64_t)ng;
      ng = 0;
      continue;
    }
    if (fn(g->c, wr, sr, a->dv, a->kr, X, a->T, ldx, Y, ldy)) return -1;
  }
  return 0;
}

int df_kgpu_mla(df_kgpu *g, const df_kgpu_mla_args *a) {
  if (a->T <= 0 || a->heads <= 0) return 0;
  const df_wmat *W = a->kvb;
  if (W->cols != a->kr || W->rows != a->heads * (a->dn + a->dv)) return -1;
  int fused = a->x != NULL;
  if (fused && !mla_fused_fits(a)) return -1;
  size_t H = fused ? (size_t)a->W[0]->cols : 0;
  if (enter_pass(g, fused ? a->pre : NULL, a->T, H)) return -1;
  double t0 = df_now();
  size_t T = (size_t)a->T, Hm = (size_t)a->heads, ntot = (size_t)a->n0 + T;
  size_t no = T * Hm * (size_t)a->dv, kr = (size_t)a->kr, w = kr + (size_t)a->dr, valid;
  size_t qr = fused ? (size_t)a->W[0]->rows : 0;
  int gate = fused ? a->W[3] != NULL : a->g != NULL;
  struct sent *e = mla_entry(g, a, w, ntot, &valid);
  /* o, g, q, the cache's rows (only those the entry lacks, when it is kept:
   * staged where the cache would have been; fused, the new ones made
   * there), out, olat, scores, x, q_a's output; out right after the rows,
   * so that the fused call's results come back in one copy */
  size_t nhost = (size_t)a->n0 - valid; /* the cache's rows that come from the host */
  size_t n[9] = {no,         gate ? no : 0,     T * Hm * (size_t)(a->dn + a->dr), (ntot - valid) * w,
                 T * H,      T * Hm * kr,       T * Hm * ntot,                    T * H,
                 T * qr};
  size_t off[10] = {0};
  for (int i = 0; i < 9; i++) off[i + 1] = off[i] + up64(n[i]);
  size_t nall = off[9] * sizeof(float), nin = off[4] * sizeof(float);
  if (!scratch(g, &g->xbuf, &g->xcap, nall) ||
      !staging(g, &g->hx, &g->hxcap, fused ? nall : nin))
    return fell_back(g);
  float *d = g->xbuf, *h = g->hx, *dnew = d + off[3] + nhost * w;
  if (fused) {
    if ((nhost && rows_in(g, d + off[3], h + off[3], a->cache + valid * w, 1, nhost * w, 0)) ||
        fused_in(g, a->pre, a->x, a->ldx, a->T, H, d + off[7], h + off[7]) ||
        mla_projections(g, a, d + off[7], d + off[8], dnew, d + off[1], d + off[2]))
      return fell_back(g);
  } else {
    const float *src[4] = {NULL, a->g, a->q, a->cache + valid * w};
    for (int i = 1; i < 4; i++)
      if (src[i]) memcpy(h + off[i], src[i], n[i] * sizeof(float));
    if (df_cuda_put(g->c, d + off[1], h + off[1], nin - off[1] * sizeof(float)))
      return fell_back(g);
    g->st.h2d_bytes += nin - off[1] * sizeof(float);
  }
  const uint8_t *dw;
  const void *ds;
  gemm_fn fn;
  if (spine_rows(g, W, 0, &dw, &ds, &fn)) return fell_back(g);
  int kind = fn == gm_bf16 ? 0 : fn == gm_i8 ? 1 : 2; /* df_cuda_mla_args.wkind's */
  df_cuda_mla_args m = {.T = a->T, .heads = a->heads, .n0 = a->n0, .dn = a->dn, .dr = a->dr,
                        .dv = a->dv, .kr = a->kr, .wkind = kind, .w = dw, .wscale = ds,
                        .q = d + off[2], .cache = e ? e->d : d + off[3], .olat = d + off[5],
                        .sc = d + off[6]};
  /* the new rows join the kept ones (a failure here leaves those as they were) */
  if (e && df_cuda_copy(g->c, e->d + valid * w, d + off[3], n[3] * sizeof(float)))
    return fell_back(g);
  if (df_cuda_mla_attn(g->c, &m)) return seq_failed(g);
  if (mla_values(g, a, fn, dw, ds, m.olat, d + off[0])) return fell_back(g);
  if (gate && df_cuda_mla_gate(g->c, d + off[0], d + off[1], no)) return seq_failed(g);
  size_t d2h;
  if (fused) {
    float *dout = d + off[4];
    size_t from = (size_t)(dnew - d), nget = (off[4] + n[4] - from) * sizeof(float);
    if (products_of(g, 1, &a->W[4], d + off[0], a->T, Hm * (size_t)a->dv, &dout) ||
        df_cuda_get(g->c, h + from, dnew, nget))
      return fell_back(g);
    memcpy(a->new_rows, h + from, T * w * sizeof(float));
    y_out(h + off[4], (int)H, a->T, a->out, a->ldo);
    d2h = nget;
  } else {
    if (df_cuda_get(g->c, h, d + off[0], no * sizeof(float))) return fell_back(g);
    memcpy(a->o, h, no * sizeof(float));
    d2h = no * sizeof(float);
  }
  if (e) e->rows = (int)ntot;
  g->st.attn_calls++;
  g->st.d2h_bytes += d2h;
  g->st.compute_s += df_now() - t0;
  pthread_mutex_unlock(&g->mu);
  return 0;
}

void df_kgpu_stats_get(df_kgpu *g, df_kgpu_stats *st) {
  pthread_mutex_lock(&g->mu);
  df_dtier_stats ts;
  df_dtier_stats_get(g->tier, &ts);
  g->st.tier_cap = ts.cap;
  g->st.tier_bytes = ts.bytes;
  g->st.tier_keep_bytes = ts.keep_bytes;
  g->st.tier_entries = ts.entries;
  g->st.hits = ts.hits;
  g->st.misses = ts.misses;
  g->st.evictions = ts.evictions;
  g->st.refused = ts.refused;
  if (g->heap) {
    df_dheap_stats hs;
    df_dheap_stats_get(g->heap, &hs);
    g->st.tier_mapped = hs.mapped;
    g->st.tier_granule = g->heap_gran;
  }
  size_t fr, tot;
  if (!g->broken && !df_cuda_mem_info(g->dev, &fr, &tot)) g->st.mem_free = fr, g->st.mem_total = tot;
  *st = g->st;
  pthread_mutex_unlock(&g->mu);
}

#else /* no CUDA in this build */

df_kgpu *df_kgpu_open(int dev, uint64_t tier_bytes, df_kgpu_plan_fn plan, void *plan_ud,
                      char *err, size_t errlen) {
  (void)dev, (void)tier_bytes, (void)plan, (void)plan_ud;
  snprintf(err, errlen, "this deltafin was built without CUDA (configure with -DDF_CUDA=ON)");
  return NULL;
}
void df_kgpu_close(df_kgpu *g) { (void)g; }
int df_kgpu_mm(df_kgpu *g, const df_wmat *W, int r0, int r1, const float *X, int T, size_t ldx,
               float *Y, size_t ldy) {
  (void)g, (void)W, (void)r0, (void)r1, (void)X, (void)T, (void)ldx, (void)Y, (void)ldy;
  return -1;
}
int df_kgpu_mm_many(df_kgpu *g, int n, const df_wmat *const *W, const float *X, int T,
                    size_t ldx, float *const *Y, const size_t *ldy) {
  (void)g, (void)n, (void)W, (void)X, (void)T, (void)ldx, (void)Y, (void)ldy;
  return -1;
}
int df_kgpu_mm_pre(df_kgpu *g, const df_kgpu_pre *pre, int n, const df_wmat *const *W,
                   const float *X, int T, size_t ldx, float *const *Y, const size_t *ldy,
                   uint64_t *xtok) {
  (void)g, (void)pre, (void)n, (void)W, (void)X, (void)T, (void)ldx, (void)Y, (void)ldy, (void)xtok;
  return -1;
}
int df_kgpu_ffn(df_kgpu *g, const df_wmat *gate, const df_wmat *up, const df_wmat *down,
                const float *X, int T, size_t ldx, float bg, float bu, float *Y, size_t ldy) {
  (void)g, (void)gate, (void)up, (void)down, (void)X, (void)T, (void)ldx, (void)bg, (void)bu;
  (void)Y, (void)ldy;
  return -1;
}
int df_kgpu_mm_mxfp4(df_kgpu *g, uint64_t id, const uint8_t *packed, const uint8_t *scales,
                     int rows, int cols, const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  (void)g, (void)id, (void)packed, (void)scales, (void)rows, (void)cols, (void)X, (void)T;
  (void)ldx, (void)Y, (void)ldy;
  return -1;
}
int df_kgpu_experts_begin(df_kgpu *g, const df_kgpu_xshape *sh, int max_rows) {
  (void)g, (void)sh, (void)max_rows;
  return -1;
}
float *df_kgpu_expert_in(df_kgpu *g, int n) {
  (void)g, (void)n;
  return NULL;
}
int df_kgpu_expert(df_kgpu *g, uint64_t key, const uint8_t *rec, int n, int *row0) {
  (void)g, (void)key, (void)rec, (void)n, (void)row0;
  return -1;
}
const float *df_kgpu_experts_end(df_kgpu *g) {
  (void)g;
  return NULL;
}
int df_kgpu_has_expert(df_kgpu *g, uint64_t key) {
  (void)g, (void)key;
  return 0;
}
int df_kgpu_experts_end_tail(df_kgpu *g, const df_kgpu_moe_tail *a) {
  (void)g, (void)a;
  return -1;
}
const char *df_kgpu_error(df_kgpu *g) {
  (void)g;
  return "";
}
void df_kgpu_pin(void *g, void *p, size_t n) { (void)g, (void)p, (void)n; }
void df_kgpu_unpin(void *g, void *p, size_t n) { (void)g, (void)p, (void)n; }
int df_kgpu_kda(df_kgpu *g, df_kgpu_kda_args *a) {
  (void)g, (void)a;
  return -1;
}
int df_kgpu_seq_pull(df_kgpu *g, uint64_t key, float *S, size_t nS, float *conv, size_t nconv) {
  (void)g, (void)key, (void)S, (void)nS, (void)conv, (void)nconv;
  return -1;
}
int df_kgpu_seq_copy(df_kgpu *g, uint64_t dst, uint64_t src) {
  (void)g, (void)dst, (void)src;
  return -1;
}
int df_kgpu_take(df_kgpu *g, float *out, int T, size_t H, size_t ldo) {
  (void)g, (void)out, (void)T, (void)H, (void)ldo;
  return -1;
}
void df_kgpu_seq_drop(df_kgpu *g, uint64_t id) { (void)g, (void)id; }
void df_kgpu_keep_state(df_kgpu *g, int on) { (void)g, (void)on; }
int df_kgpu_mla(df_kgpu *g, const df_kgpu_mla_args *a) {
  (void)g, (void)a;
  return -1;
}
void df_kgpu_stats_get(df_kgpu *g, df_kgpu_stats *st) {
  (void)g;
  memset(st, 0, sizeof *st);
}

#endif

/* The CUDA kernels behind kcuda.h. Compiled with -fmad=false -ftz=false
 * -prec-div=true -prec-sqrt=true (CMakeLists.txt): every product is rounded
 * before it is added, subnormals are kept, division and square root are
 * IEEE, as in the scalar reference.
 *
 * GEMV layout: two threads per output row, each owning 8 of the 16 lanes of
 * the lane-16 order (thread h holds lanes 8h..8h+7), so one step of 16
 * columns is one contiguous load per thread (16 bytes of bf16, 8 of int8, 4
 * of MXFP4) and a row's 16 chains still each run in ascending column order.
 * The 8-4-2-1 tree then starts with the partner's 8 lanes (one shuffle per
 * lane). Loads of F::unroll steps (about 128 bytes) are issued before their
 * products so each thread keeps that much in flight; the chains' order is
 * unchanged. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "kernels/cuda/kcuda.h"
}
#include "kernels/cuda/kmath.h"
#include "kernels/cuda/kcuda_fmt.cuh"
#include "kernels/cuda/kcuda_gemv.cuh"
#include "kernels/cuda/kcuda_gemm.cuh"
#include "kernels/cuda/kcuda_norm.cuh"
#include "kernels/cuda/kcuda_elem.cuh"
#include "kernels/cuda/kcuda_launch.cuh"


struct df_cuda {
  int dev;
  cudaStream_t s;
  cudaEvent_t ev[2];
  int prefetch;
  int lpt[4]; /* GEMV lanes per thread: bf16, int8, f32, mxfp4 */
  int tiled[4]; /* GEMV kernel: 0 lanes layout, 1 row tiles (variant by shape), 2 .. 1 + TILE_VARIANTS forced */
  unsigned tile_pf[4]; /* the row tiles' L2 prefetch window, bytes (0: none) */
  int gemm_tiles; /* T > 1: 0 the lanes layout, 1 the register tiles, 2 a lane a thread, -1 by T */
  int pdl;      /* dependent launches (df_cuda_set_pdl): 0 none, 1 every kernel, 2 the GEMVs */
  int in_tiles; /* a row-tile GEMV's launch is being made (df_cuda_launch_dependent's mode 2) */
  int pdl_cap;  /* the device has them (sm_90 and later) */
  int shared_x; /* the wide tiles picked by shape in their four-warp form (tile variants 8, 9) */
  int mxfp4_fma; /* the MXFP4 row tiles' fused form (TILE_FMA) where x and the scales allow */
  int after_kernel; /* the stream's last work is one of the context's kernels (df_cuda_launched) */
  int sms;      /* multiprocessors */
  int occ[4][TILE_VARIANTS]; /* resident tile blocks per SM by format and variant (0: not yet asked) */
  char base[300]; /* the device's name, its architecture and memory */
  char desc[400]; /* base, whether the launches are dependent, MXFP4 unfused or its variant forced */
  char err[256];
};

static int fail(df_cuda *c, const char *what, cudaError_t e) {
  snprintf(c->err, sizeof c->err, "%s: %s", what, cudaGetErrorString(e));
  return -1;
}
#define CK(c, what, call)                               \
  do {                                                  \
    cudaError_t e_ = (call);                            \
    if (e_ != cudaSuccess) return fail(c, what, e_);    \
  } while (0)
#define LAUNCHED(c, what)                 \
  do {                                    \
    CK(c, what, cudaGetLastError());      \
    df_cuda_launched(c, false);           \
  } while (0)

extern "C" int df_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); /* no driver: not an error to remember */
    return 0;
  }
  return n;
}

/* what --stats and stats.device.name show: a run's dependent launches too */
static void describe(df_cuda *c) {
  char mt[48] = "";
  if (c->tiled[3] >= 2) snprintf(mt, sizeof mt, ", MXFP4 tile variant %d", c->tiled[3] - 2);
  snprintf(c->desc, sizeof c->desc, "%s%s%s%s)", c->base,
           !c->pdl || !c->pdl_cap ? ""
           : c->pdl == 2      ? ", dependent launches of the GEMVs"
                              : ", dependent launches",
           c->mxfp4_fma ? "" : ", MXFP4 unfused", mt);
}

extern "C" df_cuda *df_cuda_open(int dev, char *err, size_t errlen) {
  int n = df_cuda_device_count();
  if (dev < 0 || dev >= n) {
    snprintf(err, errlen, "no CUDA device %d (%d found)", dev, n);
    return NULL;
  }
  df_cuda *c = (df_cuda *)calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  c->dev = dev;
  c->prefetch = 0; /* measured slower on the large shapes (docs/PERFORMANCE.md) */
  for (int i = 0; i < 4; i++) c->lpt[i] = 8, c->tiled[i] = i != 2;
  /* off: exact on the H200, slower there than the lanes layout (run 14) */
  const char *gt = getenv("DF_CUDA_GEMM_TILES");
  c->gemm_tiles = gt && gt[0] >= '0' && gt[0] <= '2' ? gt[0] - '0' : -1;
  const char *pd = getenv("DF_CUDA_PDL");
  /* the row tiles only by default: run 28 (kcuda.h); 1 every kernel, 0 none */
  c->pdl = !pd || !*pd ? 2 : pd[0] == '1' ? 1 : pd[0] == '2' || !strcmp(pd, "gemv") ? 2 : 0;
  const char *sx = getenv("DF_CUDA_SHARED_X");
  c->shared_x = sx && sx[0] == '1'; /* off: no clear gain in run 23 (H100) */
  const char *mf = getenv("DF_CUDA_MXFP4_FMA"); /* 0: off, to measure against */
  c->mxfp4_fma = !(mf && mf[0] == '0');
  /* MXFP4's row-tile variant forced (0 .. TILE_VARIANTS - 1), to measure
   * the engine's own launches against the pick by shape */
  const char *mt = getenv("DF_CUDA_MXFP4_TILE");
  if (mt && *mt) {
    char *end;
    long v = strtol(mt, &end, 10);
    if (!*end && v >= 0 && v < TILE_VARIANTS) c->tiled[3] = (int)v + 2;
  }
  cudaDeviceProp p;
  cudaError_t e = cudaSetDevice(dev);
  if (e == cudaSuccess) e = cudaGetDeviceProperties(&p, dev);
  if (e == cudaSuccess) c->sms = p.multiProcessorCount > 0 ? p.multiProcessorCount : 1;
  if (e == cudaSuccess) c->pdl_cap = p.major >= 9;
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreate(&c->ev[0]);
  if (e == cudaSuccess) e = cudaEventCreate(&c->ev[1]);
  if (e != cudaSuccess) {
    snprintf(err, errlen, "CUDA device %d: %s", dev, cudaGetErrorString(e));
    free(c);
    return NULL;
  }
  snprintf(c->base, sizeof c->base, "%s (sm_%d%d, %.1f GiB", p.name, p.major, p.minor,
           (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
  describe(c);
  return c;
}

extern "C" void df_cuda_close(df_cuda *c) {
  if (!c) return;
  cudaStreamSynchronize(c->s);
  cudaEventDestroy(c->ev[0]);
  cudaEventDestroy(c->ev[1]);
  cudaStreamDestroy(c->s);
  free(c);
}

extern "C" void df_cuda_set_prefetch(df_cuda *c, int on) { c->prefetch = on != 0; }
extern "C" void df_cuda_set_mxfp4_fused(df_cuda *c, int on) {
  c->mxfp4_fma = on != 0;
  describe(c);
}
extern "C" void df_cuda_set_pdl(df_cuda *c, int mode) {
  c->pdl = mode == 1 || mode == 2 ? mode : 0;
  describe(c);
}

extern "C" const char *df_cuda_describe(const df_cuda *c) { return c->desc; }
extern "C" const char *df_cuda_error(const df_cuda *c) { return c->err; }

extern "C" void *df_cuda_alloc(df_cuda *c, size_t bytes) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    fail(c, "cudaMalloc", e);
    return NULL;
  }
  return p;
}
extern "C" void df_cuda_free(df_cuda *c, void *p) {
  (void)c;
  if (p) cudaFree(p);
}
extern "C" int df_cuda_put(df_cuda *c, void *dst, const void *src, size_t n) {
  c->after_kernel = 0;
  CK(c, "copy to device", cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->s));
  return 0;
}
extern "C" int df_cuda_get(df_cuda *c, void *dst, const void *src, size_t n) {
  c->after_kernel = 0;
  CK(c, "copy to host", cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->s));
  CK(c, "copy to host", cudaStreamSynchronize(c->s));
  return 0;
}
extern "C" int df_cuda_get_async(df_cuda *c, void *dst, const void *src, size_t n) {
  c->after_kernel = 0;
  CK(c, "copy to host", cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->s));
  return 0;
}
extern "C" int df_cuda_copy(df_cuda *c, void *dst, const void *src, size_t n) {
  c->after_kernel = 0;
  CK(c, "device copy", cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c->s));
  return 0;
}
extern "C" int df_cuda_sync(df_cuda *c) {
  CK(c, "synchronize", cudaStreamSynchronize(c->s));
  return 0;
}
extern "C" int df_cuda_mark(df_cuda *c, int which) {
  c->after_kernel = 0; /* a dependent launch's predecessor is a kernel, never an event */
  CK(c, "event", cudaEventRecord(c->ev[which ? 1 : 0], c->s));
  return 0;
}
extern "C" double df_cuda_elapsed(df_cuda *c) {
  float ms = 0;
  if (cudaEventSynchronize(c->ev[1]) != cudaSuccess ||
      cudaEventElapsedTime(&ms, c->ev[0], c->ev[1]) != cudaSuccess)
    return -1;
  return ms / 1000.0;
}

/* Whether the next kernel may go as a dependent launch (kcuda_pdl.cuh):
 * asked for, the device has it and the stream's last work is one of the
 * context's kernels, so the early start only ever overlaps a kernel (which
 * writes no weights), never a copy. */
bool df_cuda_launch_dependent(df_cuda *c) {
  return c->pdl_cap && c->after_kernel && (c->pdl == 1 || (c->pdl == 2 && c->in_tiles));
}
/* after each kernel's launch; refused: the dependent form was, so plain
 * launches from now on */
void df_cuda_launched(df_cuda *c, bool refused) {
  c->after_kernel = 1;
  if (refused && c->pdl_cap) c->pdl_cap = 0, describe(c);
}

/* a kernel of this file on the context's stream */
template <class... P, class... A>
static void go(df_cuda *c, void (*k)(P...), dim3 grid, dim3 block, size_t smem, A... args) {
  bool dep = df_cuda_launch_dependent(c);
  if (!df_launch(c->s, dep, k, grid, block, smem, args...)) df_cuda_launched(c, true);
}

template <template <int> class F, int LPT, class A>
static void gemv_go(df_cuda *c, const A &args, int rows, int cols, const float *x, float *y,
                    const float *rowscale, bool vec) {
  F<LPT> f = args.template as<F<LPT>>();
  long threads = (long)(LANES / LPT) * rows;
  int blocks = (int)((threads + GEMV_BLOCK - 1) / GEMV_BLOCK);
  if (vec)
    go(c, gemv_k<F<LPT>, LPT, true>, blocks, GEMV_BLOCK, 0, f, rows, cols, x, y, rowscale,
       c->prefetch);
  else
    go(c, gemv_k<F<LPT>, LPT, false>, blocks, GEMV_BLOCK, 0, f, rows, cols, x, y, rowscale, 0);
}

struct wargs {
  const void *a, *b;
  template <class T> __host__ T as() const {
    T t;
    memcpy((void *)&t, (const void *)this, sizeof(T) < sizeof *this ? sizeof(T) : sizeof *this);
    return t;
  }
};

/* Once per format and variant, before its first launch: shared memory
 * preferred over L1 for the tile kernels, single and grouped (only the
 * element-by-element staging reads through L1), then how many blocks of
 * the variant an SM holds. */
template <class V> static int tile_occ1(void) {
  typedef typename V::F TF;
  constexpr int NS = V::NS, G = V::G, NW = V::NW;
  int n = 0;
  if (cudaFuncSetAttribute(tile_k<TF, NS, G, NW>, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared) != cudaSuccess)
    cudaGetLastError(); /* a hint: the default split still runs */
  if (cudaFuncSetAttribute(tile_group_k<TF, NS, G, NW>,
                           cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared) != cudaSuccess)
    cudaGetLastError();
  if (V::smem()) { /* over 48 KB, which a launch may only ask for once allowed */
    if (cudaFuncSetAttribute(tile_k<TF, NS, G, NW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)V::smem()) != cudaSuccess ||
        cudaFuncSetAttribute(tile_group_k<TF, NS, G, NW>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)V::smem()) != cudaSuccess)
      cudaGetLastError(); /* its launches then fail, and say so */
  }
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, tile_k<TF, NS, G, NW>, V::threads,
                                                    V::smem()) != cudaSuccess)
    cudaGetLastError();
  return n > 0 ? n : 1;
}
/* the variants: kcuda_gemv.cuh's tile_variant */
template <class TF> static int tile_occ(df_cuda *c, int v) {
  int *o = c->occ[TF::fmt];
  if (!o[v])
    tile_variant<TF>(v, [&](auto t) {
      typedef decltype(t) V;
      o[v] = tile_occ1<V>();
    });
  return o[v];
}

/* The variant for `blocks` 32-row blocks (tile_pick_rows's policy, on
 * this device's occupancies). MXFP4: tile_pick_mxfp4 (kcuda_gemv.cuh). */
template <class TF> static int tile_pick(df_cuda *c, long blocks) {
  if constexpr (TF::scaled) {
    return tile_pick_mxfp4();
  } else {
    int occ[TILE_VARIANTS];
    for (int v = 0; v < TILE_VARIANTS; v++) occ[v] = tile_occ<TF>(c, v);
    return tile_pick_rows(occ, c->sms, blocks, TF::RB, c->shared_x);
  }
}

/* while a row-tile GEMV is launched: dependent under DF_CUDA_PDL=gemv */
struct tiles_scope {
  df_cuda *c;
  explicit tiles_scope(df_cuda *c_) : c(c_) { c->in_tiles = 1; }
  ~tiles_scope() { c->in_tiles = 0; }
};

/* a row-tile matrix's flags as its launch will run it: the loads its
 * operands allow, a dependent launch as go() will decide it, MXFP4's fused
 * form where the context asks for it */
template <class TF>
static int tile_launch_flags(df_cuda *c, const void *W, const void *S, int cols, const float *x) {
  int flags = tile_flags<TF>(W, S, cols, x, c->tile_pf[TF::fmt]);
  if (df_cuda_launch_dependent(c)) flags |= TILE_DEP;
  if (TF::fmt == 3 && c->mxfp4_fma) flags |= TILE_FMA;
  return flags;
}

template <class TF>
static int tile_launch(df_cuda *c, const char *what, const void *W, const void *S, int rows,
                       int cols, const float *x, float *y, const float *rowscale) {
  tiles_scope scope(c);
  int flags = tile_launch_flags<TF>(c, W, S, cols, x);
  long blocks = ((long)rows + TROWS - 1) / TROWS;
  int v = c->tiled[TF::fmt] >= 2 ? c->tiled[TF::fmt] - 2 : tile_pick<TF>(c, blocks);
  tile_occ<TF>(c, v); /* its shared-memory carveout set, forced or picked */
  const uint8_t *w8 = (const uint8_t *)W, *s8 = (const uint8_t *)S;
  tile_variant<TF>(v, [&](auto t) {
    typedef decltype(t) V;
    unsigned nb = (unsigned)(((long)rows + V::rows - 1) / V::rows);
    go(c, tile_k<typename V::F, V::NS, V::G, V::NW>, nb, V::threads, V::smem(), w8, s8, rows,
       cols, x, y, rowscale, flags);
  });
  LAUNCHED(c, what);
  return 0;
}

/* The grouped launch: the variant chosen for all the blocks together (as
 * one matrix of their rows), each matrix's blocks counted for it (32 / G
 * rows a block with G threads a row). */
template <class TF>
static int tile_group_launch(df_cuda *c, const char *what, int n, const df_cuda_gemv_one *m) {
  tiles_scope scope(c);
  tile_set q;
  memset(&q, 0, sizeof q);
  long rows = 0;
  for (int i = 0; i < n; i++) rows += m[i].rows > 0 ? m[i].rows : 0;
  int v = c->tiled[TF::fmt] >= 2 ? c->tiled[TF::fmt] - 2
                                 : tile_pick<TF>(c, (rows + TROWS - 1) / TROWS);
  tile_occ<TF>(c, v);
  long tr = TROWS, b = 0;
  tile_variant<TF>(v, [&](auto t) { tr = decltype(t)::rows; });
  for (int i = 0; i < n; i++) {
    if (m[i].rows <= 0) continue;
    tile_one *o = &q.m[q.n++];
    o->W = (const uint8_t *)m[i].W;
    o->S = TF::scaled ? (const uint8_t *)m[i].S : NULL;
    o->rs = TF::fmt == 1 ? (const float *)m[i].S : NULL;
    o->x = m[i].x, o->y = m[i].y, o->rows = m[i].rows, o->cols = m[i].cols;
    o->flags = tile_launch_flags<TF>(c, m[i].W, o->S, m[i].cols, m[i].x);
    o->b0 = (int)b;
    b += (m[i].rows + tr - 1) / tr;
  }
  if (!q.n) return 0;
  if (b > 0x7fffffffL) {
    snprintf(c->err, sizeof c->err, "%s: %ld row blocks is too many", what, b);
    return -1;
  }
  tile_variant<TF>(v, [&](auto t) {
    typedef decltype(t) V;
    go(c, tile_group_k<typename V::F, V::NS, V::G, V::NW>, (unsigned)b, V::threads, V::smem(), q);
  });
  LAUNCHED(c, what);
  return 0;
}

extern "C" int df_cuda_gemv_group(df_cuda *c, int fmt, int n, const df_cuda_gemv_one *m) {
  if (n < 0 || n > DF_CUDA_GROUP_MAX || (fmt != 0 && fmt != 1 && fmt != 3)) {
    snprintf(c->err, sizeof c->err, "gemv group: %d matrices of format %d (at most %d; bf16, int8 "
             "or MXFP4)", n, fmt, DF_CUDA_GROUP_MAX);
    return -1;
  }
  for (int i = 0; i < n; i++)
    if (fmt == 3 && m[i].cols % 32) {
      snprintf(c->err, sizeof c->err, "gemv group: mxfp4 cols %d is not a multiple of 32",
               m[i].cols);
      return -1;
    }
  if (fmt == 0) return tile_group_launch<tf_bf16>(c, "gemv group bf16", n, m);
  if (fmt == 1) return tile_group_launch<tf_i8>(c, "gemv group int8", n, m);
  return tile_group_launch<tf_mxfp4>(c, "gemv group mxfp4", n, m);
}

/* which tile format serves a lanes-layout format (void: none, f32) */
template <template <int> class F> struct tile_of {
  typedef void type;
};
template <> struct tile_of<fmt_bf16> {
  typedef tf_bf16 type;
};
template <> struct tile_of<fmt_i8> {
  typedef tf_i8 type;
};
template <> struct tile_of<fmt_mxfp4> {
  typedef tf_mxfp4 type;
};
template <class TF>
static int tile_try(df_cuda *c, const char *what, const wargs &a, int rows, int cols,
                    const float *x, float *y, const float *rowscale) {
  if (!c->tiled[TF::fmt]) return 1;
  return tile_launch<TF>(c, what, a.a, a.b, rows, cols, x, y, rowscale);
}
template <>
int tile_try<void>(df_cuda *, const char *, const wargs &, int, int, const float *, float *,
                   const float *) {
  return 1;
}

template <template <int> class F>
static int gemv_launch(df_cuda *c, const char *what, wargs a, int rows, int cols, const float *x,
                       float *y, const float *rowscale, bool vec_ok, int lpt) {
  if (rows <= 0) return 0;
  int rc = tile_try<typename tile_of<F>::type>(c, what, a, rows, cols, x, y, rowscale);
  if (rc <= 0) return rc;
  bool vec = vec_ok && cols % LANES == 0 && ((uintptr_t)x & 15) == 0;
  if (lpt == 2) gemv_go<F, 2>(c, a, rows, cols, x, y, rowscale, vec);
  else if (lpt == 4) gemv_go<F, 4>(c, a, rows, cols, x, y, rowscale, vec);
  else gemv_go<F, 8>(c, a, rows, cols, x, y, rowscale, vec);
  LAUNCHED(c, what);
  return 0;
}

cudaStream_t df_cuda_stream(df_cuda *c) { return c->s; }

extern "C" void df_cuda_set_gemv_lanes(df_cuda *c, int fmt, int lanes) {
  if (fmt >= 0 && fmt < 4 && (lanes == 2 || lanes == 4 || lanes == 8)) c->lpt[fmt] = lanes;
}
extern "C" void df_cuda_set_gemv_tiled(df_cuda *c, int fmt, int how) {
  if (fmt >= 0 && fmt < 4 && fmt != 2 && how >= 0 && how <= 1 + TILE_VARIANTS) c->tiled[fmt] = how;
  describe(c); /* the name says MXFP4's forced variant however it was forced */
}
extern "C" int df_cuda_sm_count(const df_cuda *c) { return c->sms; }
extern "C" int df_cuda_tile_occupancy(df_cuda *c, int fmt, int v) {
  if (v < 0 || v >= TILE_VARIANTS) return 0;
  if (fmt == 0) return tile_occ<tf_bf16>(c, v);
  if (fmt == 1) return tile_occ<tf_i8>(c, v);
  if (fmt == 3) return tile_occ<tf_mxfp4>(c, v);
  return 0;
}
extern "C" void df_cuda_set_gemv_tile_prefetch(df_cuda *c, int fmt, unsigned bytes) {
  if (fmt >= 0 && fmt < 4 && bytes / TILE_PF_UNIT < (1u << (31 - TILE_PF_SHIFT)))
    c->tile_pf[fmt] = bytes / TILE_PF_UNIT * TILE_PF_UNIT;
}

extern "C" int df_cuda_gemv_bf16(df_cuda *c, const uint16_t *W, int rows, int cols, const float *x,
                                 float *y) {
  wargs a = {W, NULL};
  return gemv_launch<fmt_bf16>(c, "gemv bf16", a, rows, cols, x, y, NULL,
                               ((uintptr_t)W & 15) == 0, c->lpt[0]);
}
extern "C" int df_cuda_gemv_i8(df_cuda *c, const int8_t *W, const float *scale, int rows, int cols,
                               const float *x, float *y) {
  wargs a = {W, NULL};
  return gemv_launch<fmt_i8>(c, "gemv int8", a, rows, cols, x, y, scale, ((uintptr_t)W & 15) == 0,
                             c->lpt[1]);
}
extern "C" int df_cuda_gemv_f32(df_cuda *c, const float *W, int rows, int cols, const float *x,
                                float *y) {
  wargs a = {W, NULL};
  return gemv_launch<fmt_f32>(c, "gemv f32", a, rows, cols, x, y, NULL, ((uintptr_t)W & 15) == 0,
                              c->lpt[2]);
}
extern "C" int df_cuda_gemv_mxfp4(df_cuda *c, const uint8_t *packed, const uint8_t *scales,
                                  int rows, int cols, const float *x, float *y) {
  if (cols % 32) {
    snprintf(c->err, sizeof c->err, "gemv mxfp4: cols %d is not a multiple of 32", cols);
    return -1;
  }
  wargs a = {packed, scales};
  return gemv_launch<fmt_mxfp4>(c, "gemv mxfp4", a, rows, cols, x, y, NULL,
                                ((uintptr_t)packed & 15) == 0, c->lpt[3]);
}

template <template <int> class F, int LPT, int TB>
static void gemm_go(df_cuda *c, const wargs &a, int rows, int cols, const float *X, int T,
                    size_t ldx, float *Y, size_t ldy, const float *rowscale, bool vec,
                    long rblocks) {
  F<LPT> f = a.template as<F<LPT>>();
  int nvb = (T + TB - 1) / TB;
  unsigned blocks = (unsigned)(rblocks * nvb);
  if (vec)
    go(c, gemm_k<F<LPT>, LPT, true, TB>, blocks, GEMV_BLOCK, 0, f, rows, cols, X, T, ldx, Y, ldy,
       rowscale, nvb);
  else
    go(c, gemm_k<F<LPT>, LPT, false, TB>, blocks, GEMV_BLOCK, 0, f, rows, cols, X, T, ldx, Y, ldy,
       rowscale, nvb);
}

/* The vector block: 32 accumulators a thread at most (8 x 8 spilled). */
static constexpr int gemm_tb_max(int lpt) { return lpt >= 8 ? 4 : 8; }

template <template <int> class F, int LPT>
static void gemm_tb(df_cuda *c, const wargs &a, int rows, int cols, const float *X, int T,
                    size_t ldx, float *Y, size_t ldy, const float *rowscale, bool vec,
                    long rblocks) {
  if (T <= 2) gemm_go<F, LPT, 2>(c, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec, rblocks);
  else if (T <= 4) gemm_go<F, LPT, 4>(c, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec, rblocks);
  else gemm_go<F, LPT, gemm_tb_max(LPT)>(c, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec,
                                         rblocks);
}

template <template <int> class F>
static int gemm_tile_launch(df_cuda *c, const char *what, const wargs &a, int rows, int cols,
                            const float *X, int T, size_t ldx, float *Y, size_t ldy,
                            const float *rowscale) {
  long rb = ((long)rows + GT_R - 1) / GT_R, vb = ((long)T + GT_V - 1) / GT_V;
  if (rb > 0x7fffffffL || vb > 65535) {
    snprintf(c->err, sizeof c->err, "%s: %d rows x %d vectors is too many blocks", what, rows, T);
    return -1;
  }
  F<8> f = a.template as<F<8>>();
  go(c, gemm_tile_k<F<8>>, dim3((unsigned)rb, (unsigned)vb), GT_THREADS, 0, f, rows, cols, X, T,
     ldx, Y, ldy, rowscale);
  LAUNCHED(c, what);
  return 0;
}

template <template <int> class F>
static int gemm_lane_launch(df_cuda *c, const char *what, const wargs &a, int rows, int cols,
                            const float *X, int T, size_t ldx, float *Y, size_t ldy,
                            const float *rowscale, bool vec) {
  long rb = ((long)rows + GL_R - 1) / GL_R, vb = ((long)T + GL_V - 1) / GL_V;
  if (rb > 0x7fffffffL || vb > 65535) {
    snprintf(c->err, sizeof c->err, "%s: %d rows x %d vectors is too many blocks", what, rows, T);
    return -1;
  }
  F<8> f = a.template as<F<8>>();
  dim3 grid((unsigned)rb, (unsigned)vb);
  if (vec)
    go(c, gemm_lane_k<F<8>, true>, grid, GL_THREADS, 0, f, rows, cols, X, T, ldx, Y, ldy,
       rowscale);
  else
    go(c, gemm_lane_k<F<8>, false>, grid, GL_THREADS, 0, f, rows, cols, X, T, ldx, Y, ldy,
       rowscale);
  LAUNCHED(c, what);
  return 0;
}

extern "C" void df_cuda_set_gemm_tiles(df_cuda *c, int how) {
  c->gemm_tiles = how >= 0 && how <= 2 ? how : -1;
}

/* T == 1 is the GEMV itself. The vector loads of x need every vector
 * 16-byte aligned, hence ldx % 4 == 0 besides the GEMV's conditions. */
template <template <int> class F>
static int gemm_launch(df_cuda *c, const char *what, wargs a, int rows, int cols, const float *X,
                       int T, size_t ldx, float *Y, size_t ldy, const float *rowscale,
                       bool vec_ok, int lpt) {
  if (T < 0 || (T > 1 && ldy < (size_t)(rows > 0 ? rows : 0))) {
    snprintf(c->err, sizeof c->err, "%s: T %d with ldy %zu for %d rows", what, T, ldy, rows);
    return -1;
  }
  if (rows <= 0 || T == 0) return 0;
  if (T == 1) return gemv_launch<F>(c, what, a, rows, cols, X, Y, rowscale, vec_ok, lpt);
  /* by T: a lane a thread where its blocks' 32 vectors are full (on the
   * H200 about twice the lanes layout's speed at T 64 and 512,
   * docs/PERFORMANCE.md, 2026-12-05), the lanes layout below */
  int how = c->gemm_tiles >= 0 ? c->gemm_tiles : T >= DF_CUDA_LANE_GEMM_T ? 2 : 0;
  if (how == 1)
    return gemm_tile_launch<F>(c, what, a, rows, cols, X, T, ldx, Y, ldy, rowscale);
  bool vec = vec_ok && cols % LANES == 0 && ((uintptr_t)X & 15) == 0 && ldx % 4 == 0;
  if (how == 2)
    return gemm_lane_launch<F>(c, what, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec);
  long rblocks = ((long)(LANES / lpt) * rows + GEMV_BLOCK - 1) / GEMV_BLOCK;
  int tb = T <= 2 ? 2 : T <= 4 ? 4 : gemm_tb_max(lpt);
  if (rblocks * ((T + tb - 1) / tb) > 0x7fffffffL) {
    snprintf(c->err, sizeof c->err, "%s: %d rows x %d vectors is too many blocks", what, rows, T);
    return -1;
  }
  if (lpt == 2) gemm_tb<F, 2>(c, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec, rblocks);
  else if (lpt == 4) gemm_tb<F, 4>(c, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec, rblocks);
  else gemm_tb<F, 8>(c, a, rows, cols, X, T, ldx, Y, ldy, rowscale, vec, rblocks);
  LAUNCHED(c, what);
  return 0;
}

extern "C" int df_cuda_gemm_bf16(df_cuda *c, const uint16_t *W, int rows, int cols,
                                 const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  wargs a = {W, NULL};
  return gemm_launch<fmt_bf16>(c, "gemm bf16", a, rows, cols, X, T, ldx, Y, ldy, NULL,
                               ((uintptr_t)W & 15) == 0, c->lpt[0]);
}
extern "C" int df_cuda_gemm_i8(df_cuda *c, const int8_t *W, const float *scale, int rows, int cols,
                               const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  wargs a = {W, NULL};
  return gemm_launch<fmt_i8>(c, "gemm int8", a, rows, cols, X, T, ldx, Y, ldy, scale,
                             ((uintptr_t)W & 15) == 0, c->lpt[1]);
}
extern "C" int df_cuda_gemm_f32(df_cuda *c, const float *W, int rows, int cols, const float *X,
                                int T, size_t ldx, float *Y, size_t ldy) {
  wargs a = {W, NULL};
  return gemm_launch<fmt_f32>(c, "gemm f32", a, rows, cols, X, T, ldx, Y, ldy, NULL,
                              ((uintptr_t)W & 15) == 0, c->lpt[2]);
}
extern "C" int df_cuda_gemm_mxfp4(df_cuda *c, const uint8_t *packed, const uint8_t *scales,
                                  int rows, int cols, const float *X, int T, size_t ldx, float *Y,
                                  size_t ldy) {
  if (cols % 32) {
    snprintf(c->err, sizeof c->err, "gemm mxfp4: cols %d is not a multiple of 32", cols);
    return -1;
  }
  wargs a = {packed, scales};
  return gemm_launch<fmt_mxfp4>(c, "gemm mxfp4", a, rows, cols, X, T, ldx, Y, ldy, NULL,
                                ((uintptr_t)packed & 15) == 0, c->lpt[3]);
}

/* ---- vector functions: one block; the reductions as the scalar loops ---- */


static int grid_for(long n) {
  long b = (n + VBLOCK - 1) / VBLOCK;
  return (int)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

extern "C" int df_cuda_rmsnorm(df_cuda *c, float *y, const float *x, const float *w, int n,
                               float eps) {
  go(c, rmsnorm_k, 1, VBLOCK, 0, y, x, w, n, (size_t)n, eps);
  LAUNCHED(c, "rmsnorm");
  return 0;
}
extern "C" int df_cuda_rmsnorm_rows(df_cuda *c, float *y, const float *x, const float *w, int n,
                                    int rows, size_t ld, float eps) {
  if (rows <= 0) return 0;
  if (ld < (size_t)n) return -1;
  go(c, rmsnorm_k, rows, VBLOCK, 0, y, x, w, n, ld, eps);
  LAUNCHED(c, "rmsnorm rows");
  return 0;
}

extern "C" int df_cuda_attn_res(df_cuda *c, float *xn, float *work, const float *snaps,
                                size_t ss, int nS, const float *last, int T, int H,
                                const float *res_norm, const float *res_proj, const float *norm,
                                float eps) {
  if (T <= 0) return 0;
  if (nS < 0 || H <= 0 || (nS > 0 && (!res_norm || !res_proj || !work || nS + 1 > H)) || !norm ||
      T > 65535) {
    snprintf(c->err, sizeof c->err, "attn res: %d snapshots, %d rows of %d", nS, T, H);
    return -1;
  }
  const float *x = last;
  if (nS > 0) {
    go(c, attn_scores_k, dim3(nS + 1, T), VBLOCK, 0, work, snaps, ss, nS, last, H, res_norm,
       res_proj, eps);
    LAUNCHED(c, "attn res scores");
    go(c, attn_combine_k, dim3((H + VBLOCK - 1) / VBLOCK, T), VBLOCK,
       sizeof(float) * (size_t)(nS + 1), xn, work, snaps, ss, nS, last, H);
    LAUNCHED(c, "attn res sum");
    x = xn;
  }
  go(c, rmsnorm_k, T, VBLOCK, 0, xn, x, norm, H, (size_t)H, eps); /* in place after the sum */
  LAUNCHED(c, "attn res norm");
  return 0;
}

extern "C" int df_cuda_moe_combine(df_cuda *c, float *out, const float *Y, const int *rows,
                                   const float *w, int T, int K, int n) {
  if (T <= 0 || n <= 0) return 0;
  go(c, moe_combine_k, grid_for((long)T * n), VBLOCK, 0, out, Y, rows, w, T, K, n);
  LAUNCHED(c, "moe combine");
  return 0;
}

extern "C" int df_cuda_add(df_cuda *c, float *y, const float *a, const float *b, size_t n) {
  if (!n) return 0;
  go(c, add_k, grid_for((long)(n < (1u << 30) ? n : (1u << 30))), VBLOCK, 0, y, a, b, n);
  LAUNCHED(c, "add");
  return 0;
}

extern "C" int df_cuda_softmax(df_cuda *c, float *x, int n) {
  if (n <= 0) return 0;
  go(c, softmax_k, 1, VBLOCK, 0, x, n);
  LAUNCHED(c, "softmax");
  return 0;
}
extern "C" int df_cuda_sigmoid(df_cuda *c, float *x, int n) {
  go(c, sigmoid_k, grid_for(n), VBLOCK, 0, x, n, 0);
  LAUNCHED(c, "sigmoid");
  return 0;
}
extern "C" int df_cuda_silu(df_cuda *c, float *x, int n) {
  go(c, sigmoid_k, grid_for(n), VBLOCK, 0, x, n, 1);
  LAUNCHED(c, "silu");
  return 0;
}
extern "C" int df_cuda_situ(df_cuda *c, float *out, const float *g, const float *u, int n,
                            float bg, float bu) {
  go(c, situ_k, grid_for(n), VBLOCK, 0, out, g, u, n, bg, bu);
  LAUNCHED(c, "situ");
  return 0;
}
extern "C" int df_cuda_elementary(df_cuda *c, int which, const float *x, float *y, size_t n) {
  go(c, elementary_k, grid_for((long)(n < (1u << 30) ? n : (1u << 30))), VBLOCK, 0, which, x,
     y, n);
  LAUNCHED(c, "elementary");
  return 0;
}

/* ---- the KDA step and the router's top-k ---- */

extern "C" int df_cuda_kda_step(df_cuda *c, float *S, const float *q, const float *k,
                                const float *v, const float *alpha, const float *beta, float *o,
                                int heads, int D) {
  if (heads <= 0 || D <= 0) return 0;
  go(c, kda_step_k, heads, D < 256 ? D : 256, 0, S, q, k, v, alpha, beta, o, D);
  LAUNCHED(c, "kda step");
  return 0;
}

extern "C" int df_cuda_router_topk(df_cuda *c, const float *sc, const float *bias, int n_experts,
                                   int top_k, int norm_topk_prob, float routed_scale, int rows,
                                   int *ids, float *w) {
  if (top_k < 1 || top_k > ROUTER_MAX_K || top_k > n_experts) {
    snprintf(c->err, sizeof c->err, "router: top_k %d is not in 1..min(%d, %d)", top_k,
             ROUTER_MAX_K, n_experts);
    return -1;
  }
  if (rows <= 0) return 0;
  go(c, router_k, (rows + 63) / 64, 64, 0, sc, bias, n_experts, top_k, norm_topk_prob,
     routed_scale, rows, ids, w);
  LAUNCHED(c, "router");
  return 0;
}

/* --device cuda's matrix products (kgpu.h). Each product: the weights from
 * the tier (copied in on a miss), the activations copied in, the GPU's GEMV
 * per vector, the results copied out; all on one stream, so the copy out is
 * the only wait. The product's floats are the CPU's (kcuda.h), so where the
 * result is computed never shows in the output. */
#include "kernels/kgpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "kernels/dtier.h"

#ifdef DF_HAVE_CUDA
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_info.h"

#define ALIGN 256 /* a matrix's second part (scales) starts aligned, as the kernels' vector loads want */

struct df_kgpu {
  df_cuda *c;
  int dev;
  pthread_mutex_t mu;
  df_dtier *tier;
  int broken; /* a CUDA error the context may not survive: every later product falls back */
  void *wbuf, *xbuf, *ybuf; /* per-use weights, activations in, results out */
  size_t wcap, xcap, ycap;
  float *hy; size_t hycap; /* results gathered here before their strided placement */
  df_kgpu_stats st;
};

static void *tier_alloc(void *ud, size_t n) { return df_cuda_alloc(((df_kgpu *)ud)->c, n); }
static void tier_free(void *ud, void *p) { df_cuda_free(((df_kgpu *)ud)->c, p); }

df_kgpu *df_kgpu_open(int dev, uint64_t tier_bytes, char *err, size_t errlen) {
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
    uint64_t keep = 2ull << 30;
    tier_bytes = fr > keep + (256ull << 20) ? fr - keep : 256ull << 20;
  }
  if (tier_bytes > fr) {
    snprintf(err, errlen, "--gpu-mem: %.2f GiB asked, cuda:%d has %.2f GiB free", tier_bytes / 1073741824.0,
             dev, fr / 1073741824.0);
    df_cuda_close(c);
    free(g);
    return NULL;
  }
  g->tier = df_dtier_new(tier_bytes, (df_dtier_mem){tier_alloc, tier_free, g});
  snprintf(g->st.device, sizeof g->st.device, "%s", df_cuda_describe(c));
  g->st.mem_total = tot;
  g->st.mem_free = fr;
  return g;
}

void df_kgpu_close(df_kgpu *g) {
  if (!g) return;
  df_dtier_free(g->tier);
  df_cuda_free(g->c, g->wbuf);
  df_cuda_free(g->c, g->xbuf);
  df_cuda_free(g->c, g->ybuf);
  df_cuda_close(g->c);
  pthread_mutex_destroy(&g->mu);
  free(g->hy);
  free(g);
}

/* A per-use device buffer of at least n bytes (grown, never shrunk). */
static void *scratch(df_kgpu *g, void **buf, size_t *cap, size_t n) {
  if (*cap >= n) return *buf;
  df_cuda_free(g->c, *buf);
  size_t want = n + n / 4;
  *buf = df_cuda_alloc(g->c, want);
  *cap = *buf ? want : 0;
  return *buf;
}

static size_t up_align(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* The device copy of a matrix of two parts (weights, then scales or
 * nothing): from the tier, else copied into it, else into the per-use
 * buffer. NULL on a CUDA error. */
static uint8_t *weights(df_kgpu *g, uint64_t id, const void *a, size_t na, const void *b,
                        size_t nb) {
  size_t n = up_align(na) + nb;
  uint8_t *d = id ? df_dtier_get(g->tier, id) : NULL;
  if (d) return d;
  d = id ? df_dtier_put(g->tier, id, n) : NULL;
  if (!d) d = scratch(g, &g->wbuf, &g->wcap, n);
  if (!d) return NULL;
  double t0 = df_now();
  if (df_cuda_put(g->c, d, a, na) || (nb && df_cuda_put(g->c, d + up_align(na), b, nb)))
    return NULL;
  g->st.weight_h2d_s += df_now() - t0;
  g->st.weight_h2d_bytes += na + nb;
  g->st.h2d_bytes += na + nb;
  return d;
}

typedef int (*gemv_fn)(df_cuda *c, const void *w, const void *s, int rows, int cols,
                       const float *x, float *y);

static int gv_bf16(df_cuda *c, const void *w, const void *s, int rows, int cols, const float *x,
                   float *y) {
  (void)s;
  return df_cuda_gemv_bf16(c, w, rows, cols, x, y);
}
static int gv_i8(df_cuda *c, const void *w, const void *s, int rows, int cols, const float *x,
                 float *y) {
  return df_cuda_gemv_i8(c, w, s, rows, cols, x, y);
}
static int gv_f32(df_cuda *c, const void *w, const void *s, int rows, int cols, const float *x,
                  float *y) {
  (void)s;
  return df_cuda_gemv_f32(c, w, rows, cols, x, y);
}
static int gv_mxfp4(df_cuda *c, const void *w, const void *s, int rows, int cols, const float *x,
                    float *y) {
  return df_cuda_gemv_mxfp4(c, w, s, rows, cols, x, y);
}

/* X in, T products of rows [0, rows) of (dw, ds), Y out with stride ldy. */
static int run(df_kgpu *g, gemv_fn fn, const void *dw, const void *ds, int rows, int cols,
               const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  double t0 = df_now();
  size_t nx = ((size_t)(T - 1) * ldx + (size_t)cols) * sizeof(float);
  size_t ny = (size_t)T * (size_t)rows * sizeof(float);
  float *dx = scratch(g, &g->xbuf, &g->xcap, nx), *dy = scratch(g, &g->ybuf, &g->ycap, ny);
  if (!dx || !dy || df_cuda_put(g->c, dx, X, nx)) return -1;
  for (int t = 0; t < T; t++)
    if (fn(g->c, dw, ds, rows, cols, dx + (size_t)t * ldx, dy + (size_t)t * rows)) return -1;
  float *out = Y;
  if (ldy != (size_t)rows && T > 1) {
    if (g->hycap < ny) {
      free(g->hy);
      g->hy = df_xmalloc(ny);
      g->hycap = ny;
    }
    out = g->hy;
  }
  if (df_cuda_get(g->c, out, dy, T > 1 ? ny : (size_t)rows * sizeof(float))) return -1;
  if (out != Y)
    for (int t = 0; t < T; t++)
      memcpy(Y + (size_t)t * ldy, out + (size_t)t * rows, (size_t)rows * sizeof(float));
  g->st.h2d_bytes += nx;
  g->st.d2h_bytes += ny;
  g->st.products++;
  g->st.compute_s += df_now() - t0;
  return 0;
}

/* Counts a product the GPU did not take; after a CUDA error the context is
 * not trusted again (a sticky error fails every later call anyway). */
static int fell_back(df_kgpu *g) {
  g->st.fallbacks++;
  if (!g->broken) {
    snprintf(g->st.last_error, sizeof g->st.last_error, "%s", df_cuda_error(g->c));
    df_log_warn("cuda:%d: %s; the layers' products run on the CPU from here on (same results)",
                g->dev, g->st.last_error);
    g->broken = 1;
  }
  pthread_mutex_unlock(&g->mu);
  return -1;
}

int df_kgpu_mm(df_kgpu *g, const df_wmat *W, int r0, int r1, const float *X, int T, size_t ldx,
               float *Y, size_t ldy) {
  if (r1 <= r0 || T <= 0) return 0;
  pthread_mutex_lock(&g->mu);
  if (g->broken) {
    g->st.fallbacks++;
    pthread_mutex_unlock(&g->mu);
    return -1;
  }
  size_t rc = (size_t)W->rows * (size_t)W->cols;
  const uint8_t *dw;
  const void *ds = NULL;
  gemv_fn fn;
  size_t off, soff = 0;
  switch (W->kind) {
  case DF_W_BF16:
    dw = weights(g, W->id, W->w, rc * 2, NULL, 0);
    fn = gv_bf16, off = (size_t)r0 * W->cols * 2;
    break;
  case DF_W_I8:
    dw = weights(g, W->id, W->w, rc, W->scale, (size_t)W->rows * sizeof(float));
    fn = gv_i8, off = (size_t)r0 * W->cols, soff = up_align(rc) + (size_t)r0 * sizeof(float);
    break;
  default:
    dw = weights(g, W->id, W->w, rc * 4, NULL, 0);
    fn = gv_f32, off = (size_t)r0 * W->cols * 4;
    break;
  }
  if (!dw) return fell_back(g);
  if (W->kind == DF_W_I8) ds = dw + soff;
  if (run(g, fn, dw + off, ds, r1 - r0, W->cols, X, T, ldx, Y, ldy)) return fell_back(g);
  pthread_mutex_unlock(&g->mu);
  return 0;
}

int df_kgpu_mm_mxfp4(df_kgpu *g, uint64_t id, const uint8_t *packed, const uint8_t *scales,
                     int rows, int cols, const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  if (rows <= 0 || T <= 0) return 0;
  pthread_mutex_lock(&g->mu);
  if (g->broken) {
    g->st.fallbacks++;
    pthread_mutex_unlock(&g->mu);
    return -1;
  }
  size_t np = (size_t)rows * (size_t)(cols / 2), ns = (size_t)rows * (size_t)(cols / 32);
  const uint8_t *dw = weights(g, id, packed, np, scales, ns);
  if (!dw) return fell_back(g);
  if (run(g, gv_mxfp4, dw, dw + up_align(np), rows, cols, X, T, ldx, Y, ldy)) return fell_back(g);
  pthread_mutex_unlock(&g->mu);
  return 0;
}

void df_kgpu_stats_get(df_kgpu *g, df_kgpu_stats *st) {
  pthread_mutex_lock(&g->mu);
  df_dtier_stats ts;
  df_dtier_stats_get(g->tier, &ts);
  g->st.tier_cap = ts.cap;
  g->st.tier_bytes = ts.bytes;
  g->st.tier_entries = ts.entries;
  g->st.hits = ts.hits;
  g->st.misses = ts.misses;
  g->st.evictions = ts.evictions;
  g->st.refused = ts.refused;
  size_t fr, tot;
  if (!g->broken && !df_cuda_mem_info(g->dev, &fr, &tot)) g->st.mem_free = fr, g->st.mem_total = tot;
  *st = g->st;
  pthread_mutex_unlock(&g->mu);
}

#else /* no CUDA in this build */

df_kgpu *df_kgpu_open(int dev, uint64_t tier_bytes, char *err, size_t errlen) {
  (void)dev, (void)tier_bytes;
  snprintf(err, errlen, "this deltafin was built without CUDA (configure with -DDF_CUDA=ON)");
  return NULL;
}
void df_kgpu_close(df_kgpu *g) { (void)g; }
int df_kgpu_mm(df_kgpu *g, const df_wmat *W, int r0, int r1, const float *X, int T, size_t ldx,
               float *Y, size_t ldy) {
  (void)g, (void)W, (void)r0, (void)r1, (void)X, (void)T, (void)ldx, (void)Y, (void)ldy;
  return -1;
}
int df_kgpu_mm_mxfp4(df_kgpu *g, uint64_t id, const uint8_t *packed, const uint8_t *scales,
                     int rows, int cols, const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  (void)g, (void)id, (void)packed, (void)scales, (void)rows, (void)cols, (void)X, (void)T;
  (void)ldx, (void)Y, (void)ldy;
  return -1;
}
void df_kgpu_stats_get(df_kgpu *g, df_kgpu_stats *st) {
  (void)g;
  memset(st, 0, sizeof *st);
}

#endif

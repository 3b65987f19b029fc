/* The CUDA kernels against the scalar reference table, bit for bit (memcmp):
 * random inputs at K3's shapes and at odd ones (columns that leave lanes
 * empty, one row, rows that end mid-block), the GEMMs for T vectors with
 * padded, unaligned and shifted x and y (T = 1: the GEMVs, row tiles in
 * each variant and every lanes layout, and as dependent launches in a
 * chain), the vector functions, and the
 * elementary functions over a strided sweep of all 2^32 float bit patterns.
 * Exit 77 (ctest: skipped) where no CUDA device is found. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/config.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_seq_ref.h"
#include "base/pool.h"
#include "kernels/kernels.h"
#include "model/router.h"

#define RAND_BITS_SEED 0x9e3779b97f4a7c15ull
#include "rand_bits.h"

static df_cuda *G;
static int failures;

static void *dput(const void *h, size_t n) {
  void *d = df_cuda_alloc(G, n);
  if (!d || df_cuda_put(G, d, h, n)) {
    fprintf(stderr, "device: %s\n", df_cuda_error(G));
    exit(1);
  }
  return d;
}
static void dget(void *h, const void *d, size_t n) {
  if (df_cuda_get(G, h, d, n)) {
    fprintf(stderr, "device: %s\n", df_cuda_error(G));
    exit(1);
  }
}
static void ok_or_die(int rc) {
  if (rc) {
    fprintf(stderr, "device: %s\n", df_cuda_error(G));
    exit(1);
  }
}

/* memcmp of n floats; NaN equals NaN only when nan_ok (the elementary sweep:
 * payloads of NaN inputs are the inputs', not a computed result). */
static void same(const char *what, const float *cpu, const float *gpu, size_t n, int nan_ok) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++) {
    if (!memcmp(&cpu[i], &gpu[i], sizeof(float))) continue;
    if (nan_ok && isnan(cpu[i]) && isnan(gpu[i])) continue;
    if (!bad) first = i;
    bad++;
  }
  if (bad) {
    failures++;
    printf("FAIL %s: %zu of %zu differ, first [%zu] cpu %a gpu %a\n", what, bad, n, first,
           (double)cpu[first], (double)gpu[first]);
  } else
    printf("ok   %s (%zu values)\n", what, n);
}

static float *rnd_vec(int n, int lo, int hi) {
  float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
  for (int i = 0; i < n; i++) x[i] = rndf(lo, hi);
  return x;
}

enum { F_BF16, F_I8, F_F32, F_MXFP4 };
static const char *fname[] = {"bf16", "int8", "f32", "mxfp4"};

/* Random weights of format fmt, rows x cols, and their scales (int8: one a
 * row; MXFP4: one per 32 columns). */
static void mkweights(int fmt, int rows, int cols, void **W, size_t *wbytes, void **S,
                      size_t *sbytes) {
  size_t n = (size_t)rows * cols;
  *S = NULL, *sbytes = 0;
  if (fmt == F_BF16) {
    uint16_t *w = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
      float f = rndf(-10, 1);
      uint32_t u;
      memcpy(&u, &f, 4);
      w[i] = (uint16_t)(u >> 16);
    }
    *W = w, *wbytes = n * 2;
  } else if (fmt == F_I8) {
    int8_t *w = malloc(n);
    float *sc = malloc((size_t)rows * 4);
    for (size_t i = 0; i < n; i++) w[i] = (int8_t)rnd();
    for (int r = 0; r < rows; r++) sc[r] = fabsf(rndf(-12, -4));
    *W = w, *wbytes = n, *S = sc, *sbytes = (size_t)rows * 4;
  } else if (fmt == F_F32) {
    *W = rnd_vec((int)n, -10, 1), *wbytes = n * 4;
  } else {
    uint8_t *p = malloc(n / 2), *sc = malloc(n / 32 ? n / 32 : 1);
    for (size_t i = 0; i < n / 2; i++) p[i] = (uint8_t)rnd();
    /* scales 2^-127 (subnormal weights) .. 2^13; 255 is rejected before use and
     * 2^127 x 6 overflows, neither is a kernel input */
    for (size_t i = 0; i < n / 32; i++) {
      uint32_t v = rnd() % 64;
      sc[i] = (uint8_t)(v == 0 ? 0 : v == 1 ? 1 : v == 2 ? 2 : 100 + v % 40);
    }
    *W = p, *wbytes = n / 2, *S = sc, *sbytes = n / 32;
  }
}

/* The scalar reference for rows [r0, r1): Y[t * ldy + (r - r0)]. */
static void cpu_gemm(int fmt, const void *W, const void *S, int cols, int r0, int r1,
                     const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  const df_kern *k = df_kern_scalar();
  if (fmt == F_BF16) k->gemm_bf16(W, cols, r0, r1, X, T, ldx, Y, ldy);
  else if (fmt == F_I8) k->gemm_i8(W, S, cols, r0, r1, X, T, ldx, Y, ldy);
  else if (fmt == F_F32) k->gemm_f32(W, cols, r0, r1, X, T, ldx, Y, ldy);
  else k->gemm_mxfp4(W, S, cols, r0, r1, X, T, ldx, Y, ldy);
}

static int gemv_fmt(int fmt, const void *W, const void *S, int rows, int cols, const float *x,
                    float *y) {
  return fmt == F_BF16  ? df_cuda_gemv_bf16(G, W, rows, cols, x, y)
         : fmt == F_I8  ? df_cuda_gemv_i8(G, W, S, rows, cols, x, y)
         : fmt == F_F32 ? df_cuda_gemv_f32(G, W, rows, cols, x, y)
                        : df_cuda_gemv_mxfp4(G, W, S, rows, cols, x, y);
}

/* One GEMV y = W x: random inputs on both sides and the reference's y;
 * gemv_fix_check runs it on the device as G is set now and compares. */
typedef struct {
  int fmt, rows, cols;
  void *W, *S, *dW, *dS;
  float *x, *ycpu, *ygpu, *dx, *dy;
} gemv_fix;
static void gemv_fix_make(gemv_fix *f, int fmt, int rows, int cols) {
  size_t wbytes, sbytes;
  f->fmt = fmt, f->rows = rows, f->cols = cols;
  f->x = rnd_vec(cols, -6, 2), f->ycpu = malloc((size_t)rows * 4), f->ygpu = malloc((size_t)rows * 4);
  mkweights(fmt, rows, cols, &f->W, &wbytes, &f->S, &sbytes);
  cpu_gemm(fmt, f->W, f->S, cols, 0, rows, f->x, 1, (size_t)cols, f->ycpu, (size_t)rows);
  f->dW = dput(f->W, wbytes), f->dS = f->S ? dput(f->S, sbytes) : NULL;
  f->dx = dput(f->x, (size_t)cols * 4), f->dy = df_cuda_alloc(G, (size_t)rows * 4);
}
static void gemv_fix_check(gemv_fix *f, const char *what) {
  memset(f->ygpu, 0xff, (size_t)f->rows * 4);
  ok_or_die(df_cuda_put(G, f->dy, f->ygpu, (size_t)f->rows * 4));
  ok_or_die(gemv_fmt(f->fmt, f->dW, f->dS, f->rows, f->cols, f->dx, f->dy));
  dget(f->ygpu, f->dy, (size_t)f->rows * 4);
  same(what, f->ycpu, f->ygpu, (size_t)f->rows, 0);
}
static void gemv_fix_free(gemv_fix *f) {
  df_cuda_free(G, f->dW), df_cuda_free(G, f->dS), df_cuda_free(G, f->dx), df_cuda_free(G, f->dy);
  free(f->W), free(f->S), free(f->x), free(f->ycpu), free(f->ygpu);
}

/* a check that is not a comparison of floats */
static void expect(int ok, const char *what) {
  if (!ok) failures++;
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
}

static void gemv_case(int fmt, int rows, int cols) {
  gemv_fix f;
  gemv_fix_make(&f, fmt, rows, cols);
  /* the row-tile kernel (not for f32) with its variant chosen by the shape
   * (the default), then forced to 2, 3 and deep stages and deep with two and
   * four threads a row; then every lanes layout
   * (lanes per thread) with the L2 prefetch on and off: they change which
   * thread holds a lane and when bytes arrive, never a result */
  static const int lanes[] = {8, 4, 2};
  enum { NV = 1 + DF_CUDA_TILE_VARIANTS }; /* by shape, then each variant forced */
  /* the row tiles each with the L2 prefetch off and in 1 KB windows */
  /* MXFP4's row tiles once more with the fused form off (df_cuda_set_mxfp4_fused) */
  int nvu = fmt == F_MXFP4 ? 2 * NV : 0;
  for (int vu = fmt == F_F32 ? 2 * NV + nvu : 0; vu < 2 * NV + 6 + nvu; vu++) {
    int unfused = vu < nvu, v = unfused ? vu : vu - nvu;
    df_cuda_set_mxfp4_fused(G, !unfused);
    int li = v >= 2 * NV ? (v - 2 * NV) / 2 : 0, pf = v >= 2 * NV ? (v - 2 * NV) % 2 : v % 2;
    df_cuda_set_gemv_tiled(G, fmt, v < 2 * NV ? v / 2 + 1 : 0);
    df_cuda_set_gemv_tile_prefetch(G, fmt, v < 2 * NV && pf ? 1024 : 0);
    df_cuda_set_gemv_lanes(G, fmt, lanes[li]);
    df_cuda_set_prefetch(G, v >= 2 * NV && pf);
    char what[160];
    if (v < 2 * NV)
      snprintf(what, sizeof what, "gemv %s %d x %d, row tiles, %s%s%s", fname[fmt], rows, cols,
               df_cuda_tile_name(v / 2 - 1),
               pf ? ", L2 prefetch 1 KB" : "", unfused ? ", unfused" : "");
    else
      snprintf(what, sizeof what, "gemv %s %d x %d, %d lanes/thread, prefetch %s", fname[fmt],
               rows, cols, lanes[li], pf ? "on" : "off");
    gemv_fix_check(&f, what);
  }
  df_cuda_set_gemv_tiled(G, fmt, 1);
  df_cuda_set_mxfp4_fused(G, 1);
  df_cuda_set_gemv_tile_prefetch(G, fmt, 0);
  df_cuda_set_prefetch(G, 0);
  df_cuda_set_gemv_lanes(G, fmt, 8);
  gemv_fix_free(&f);
}

/* The row tiles as dependent launches (df_cuda_set_pdl), in a chain whose
 * every kernel reads what the one before it wrote: add_k writes x over NaN,
 * GEMV 1 reads it into y1, GEMV 2 (a grouped launch of one on odd rounds)
 * reads y1 and writes its result over x, which GEMV 1 reads, so a GEMV that
 * read its x before its predecessor ended, or wrote before its own wait,
 * would change a result. Each round must give the reference's y1 and y2, in
 * the variant chosen by the shape and in each one forced, with every kernel
 * dependent and with the row tiles only (the default). On a GPU without
 * dependent launches (before sm_90) these are plain launches. */
static void pdl_case(int fmt, int r1, int c1, int rounds) {
  int r2 = c1, c2 = r1;
  void *W1, *S1, *W2, *S2;
  size_t wb1, sb1, wb2, sb2;
  mkweights(fmt, r1, c1, &W1, &wb1, &S1, &sb1);
  mkweights(fmt, r2, c2, &W2, &wb2, &S2, &sb2);
  float *x = rnd_vec(c1, -6, 2), *zero = calloc((size_t)c1, 4), *nan = malloc((size_t)c1 * 4);
  float *y1c = malloc((size_t)r1 * 4), *y2c = malloc((size_t)r2 * 4);
  float *y1g = malloc((size_t)r1 * 4), *y2g = malloc((size_t)r2 * 4);
  for (int i = 0; i < c1; i++) x[i] += 0.0f; /* what add_k gives */
  memset(nan, 0xff, (size_t)c1 * 4);
  cpu_gemm(fmt, W1, S1, c1, 0, r1, x, 1, (size_t)c1, y1c, (size_t)r1);
  cpu_gemm(fmt, W2, S2, c2, 0, r2, y1c, 1, (size_t)c2, y2c, (size_t)r2);
  void *dW1 = dput(W1, wb1), *dS1 = S1 ? dput(S1, sb1) : NULL;
  void *dW2 = dput(W2, wb2), *dS2 = S2 ? dput(S2, sb2) : NULL;
  float *dxa = dput(x, (size_t)c1 * 4), *dz = dput(zero, (size_t)c1 * 4);
  float *dx = df_cuda_alloc(G, (size_t)c1 * 4), *dy1 = df_cuda_alloc(G, (size_t)r1 * 4);
  /* every kernel dependent (1), and the row tiles only (2, the default) */
  for (int mode = 1; mode <= 2; mode++) {
    df_cuda_set_pdl(G, mode);
    for (int v = 0; v <= DF_CUDA_TILE_VARIANTS; v++) {
      df_cuda_set_gemv_tiled(G, fmt, v ? v + 1 : 1);
      int bad = 0;
      for (int k = 0; k < rounds && !bad; k++) {
        ok_or_die(df_cuda_put(G, dx, nan, (size_t)c1 * 4));
        ok_or_die(df_cuda_put(G, dy1, nan, (size_t)r1 * 4));
        ok_or_die(df_cuda_add(G, dx, dxa, dz, (size_t)c1));
        ok_or_die(gemv_fmt(fmt, dW1, dS1, r1, c1, dx, dy1));
        if (k & 1) {
          df_cuda_gemv_one m = {dW2, dS2, r2, c2, dy1, dx};
          ok_or_die(df_cuda_gemv_group(G, fmt, 1, &m));
        } else
          ok_or_die(gemv_fmt(fmt, dW2, dS2, r2, c2, dy1, dx));
        dget(y1g, dy1, (size_t)r1 * 4);
        dget(y2g, dx, (size_t)r2 * 4);
        if (memcmp(y1c, y1g, (size_t)r1 * 4) || memcmp(y2c, y2g, (size_t)r2 * 4)) {
          char what[160];
          snprintf(what, sizeof what,
                   "gemv %s dependent launches (mode %d), %d x %d then %d x %d, %s, round %d",
                   fname[fmt], mode, r1, c1, r2, c2, df_cuda_tile_name(v - 1), k);
          same(what, y1c, y1g, (size_t)r1, 0);
          same(what, y2c, y2g, (size_t)r2, 0);
          bad = 1;
        }
      }
      if (!bad)
        printf("ok   gemv %s dependent launches (mode %d), %d x %d then %d x %d, %s, %d rounds\n",
               fname[fmt], mode, r1, c1, r2, c2, df_cuda_tile_name(v - 1), rounds);
    }
  }
  df_cuda_set_pdl(G, 2); /* the default again for the cases after this one */
  df_cuda_set_gemv_tiled(G, fmt, 1);
  df_cuda_free(G, dW1), df_cuda_free(G, dS1), df_cuda_free(G, dW2), df_cuda_free(G, dS2);
  df_cuda_free(G, dxa), df_cuda_free(G, dz), df_cuda_free(G, dx), df_cuda_free(G, dy1);
  free(W1), free(S1), free(W2), free(S2), free(x), free(zero), free(nan);
  free(y1c), free(y2c), free(y1g), free(y2g);
}

/* The reference GEMM split over the CPUs by rows (K3's shapes at T = 64 are
 * billions of scalar products). Each task writes its own rows. */
typedef struct {
  int fmt, cols, r0, r1, per, T;
  const void *W, *S;
  const float *X;
  size_t ldx, ldy;
  float *Y;
} ref_job;

static void ref_task(void *ctx, int task, int thread) {
  (void)thread;
  const ref_job *j = ctx;
  int a = j->r0 + task * j->per, b = a + j->per < j->r1 ? a + j->per : j->r1;
  if (a < b) cpu_gemm(j->fmt, j->W, j->S, j->cols, a, b, j->X, j->T, j->ldx, j->Y + (a - j->r0), j->ldy);
}

static df_pool *P;

/* GEMM of T vectors against the reference for rows [r0, rows) of a rows x
 * cols matrix: the device gets the weights from row r0 on (a row range, as a
 * caller computing part of a matrix passes it; unaligned when r0's offset
 * is), x padded to ldx = cols + xpad (xpad % 4 != 0: vectors that are not
 * 16-byte aligned, read element by element), x shifted by xoff floats, and
 * y to ldy = (rows - r0) + ypad. The whole of Y is compared, so a write
 * into the padding (left at a NaN pattern on both sides) fails too. */
static void gemm_case(int fmt, int rows, int cols, int T, int xpad, int ypad, int r0, int xoff) {
  int n = rows - r0;
  size_t ldx = (size_t)cols + xpad, ldy = (size_t)n + ypad, nx = (size_t)T * ldx + xoff;
  size_t ny = (size_t)T * ldy;
  float *X = rnd_vec((int)nx, -6, 2), *ycpu = malloc(ny * 4 + 4), *ygpu = malloc(ny * 4 + 4);
  void *W, *S;
  size_t wbytes, sbytes;
  mkweights(fmt, rows, cols, &W, &wbytes, &S, &sbytes);
  memset(ycpu, 0xff, ny * 4);
  ref_job j = {fmt, cols, r0, rows, 0, T, W, S, X + xoff, ldx, ldy, ycpu};
  int ntasks = df_pool_size(P) * 4;
  j.per = (n + ntasks - 1) / ntasks;
  if (j.per < 1) j.per = 1;
  df_pool_run(P, (n + j.per - 1) / j.per, ref_task, &j);
  size_t woff = fmt == F_BF16 ? (size_t)r0 * cols * 2
                : fmt == F_I8 ? (size_t)r0 * cols
                : fmt == F_F32 ? (size_t)r0 * cols * 4
                               : (size_t)r0 * cols / 2;
  size_t soff = fmt == F_I8 ? (size_t)r0 * 4 : fmt == F_MXFP4 ? (size_t)r0 * cols / 32 : 0;
  unsigned char *dW = dput(W, wbytes), *dS = S ? dput(S, sbytes) : NULL;
  float *dX = dput(X, nx * 4), *dY = df_cuda_alloc(G, ny * 4 + 4);
  const void *w = dW + woff, *sc = dS ? dS + soff : NULL;
  const float *x = dX + xoff;
  static const int lanes[] = {8, 4, 2};
  /* T == 1 is the GEMV: the row tiles (not for f32), by shape and each
   * variant forced, as layouts 3 to 3 + DF_CUDA_TILE_VARIANTS; T > 1: the register tiles as
   * layout 3, one lane a thread as layout 4 */
  int nlay = T == 1 ? (fmt != F_F32 ? 4 + DF_CUDA_TILE_VARIANTS : 3) : 5;
  for (int li = 0; li < nlay; li++) {
    df_cuda_set_gemv_tiled(G, fmt, li >= 3 && T == 1 ? li - 2 : 0);
    df_cuda_set_gemv_lanes(G, fmt, lanes[li % 3]);
    df_cuda_set_gemm_tiles(G, T > 1 && li >= 3 ? li - 2 : 0);
    memset(ygpu, 0xff, ny * 4);
    ok_or_die(df_cuda_put(G, dY, ygpu, ny * 4));
    int rc = fmt == F_BF16  ? df_cuda_gemm_bf16(G, w, n, cols, x, T, ldx, dY, ldy)
             : fmt == F_I8  ? df_cuda_gemm_i8(G, w, sc, n, cols, x, T, ldx, dY, ldy)
             : fmt == F_F32 ? df_cuda_gemm_f32(G, w, n, cols, x, T, ldx, dY, ldy)
                            : df_cuda_gemm_mxfp4(G, w, sc, n, cols, x, T, ldx, dY, ldy);
    ok_or_die(rc);
    dget(ygpu, dY, ny * 4);
    char what[224];
    char lay[48];
    if (li < 3) snprintf(lay, sizeof lay, "%d lanes/thread", lanes[li]);
    else if (T > 1) snprintf(lay, sizeof lay, li == 3 ? "register tiles" : "a lane a thread");
    else snprintf(lay, sizeof lay, "row tiles, %s", df_cuda_tile_name(li - 4));
    snprintf(what, sizeof what, "gemm %s %d x %d rows from %d, T %d, ldx %zu%s, ldy %zu, %s",
             fname[fmt], rows, cols, r0, T, ldx, xoff ? " shifted" : "", ldy, lay);
    same(what, ycpu, ygpu, ny, 0);
  }
  df_cuda_set_gemv_tiled(G, fmt, 1);
  df_cuda_set_gemv_lanes(G, fmt, 8);
  df_cuda_set_gemm_tiles(G, -1);
  df_cuda_free(G, dW), df_cuda_free(G, dS), df_cuda_free(G, dX), df_cuda_free(G, dY);
  free(W), free(S), free(X), free(ycpu), free(ygpu);
}

/* A grouped launch (df_cuda_gemv_group) of n matrices of format fmt, matrix
 * i shape[i] = {rows, cols}, each with its own x and y; where shift is set,
 * odd matrices get x one float off 16-byte alignment and their weights a
 * byte (bf16: two) past it, so one launch mixes vector and element-by-
 * element staging. Each y must be the reference GEMV's, in the variant
 * chosen by the shapes and in each one forced, and the bytes around each
 * y untouched. */
static void group_case(int fmt, int n, const int (*shape)[2], int shift) {
  df_cuda_gemv_one m[DF_CUDA_GROUP_MAX];
  void *W[DF_CUDA_GROUP_MAX], *S[DF_CUDA_GROUP_MAX], *dW[DF_CUDA_GROUP_MAX], *dS[DF_CUDA_GROUP_MAX];
  float *x[DF_CUDA_GROUP_MAX], *dx[DF_CUDA_GROUP_MAX], *dy[DF_CUDA_GROUP_MAX], *yc[DF_CUDA_GROUP_MAX];
  for (int i = 0; i < n; i++) {
    int rows = shape[i][0], cols = shape[i][1], off = shift && (i & 1);
    size_t wb, sb;
    mkweights(fmt, rows, cols, &W[i], &wb, &S[i], &sb);
    x[i] = rnd_vec(cols + 1, -6, 2);
    yc[i] = malloc((size_t)rows * 4);
    cpu_gemm(fmt, W[i], S[i], cols, 0, rows, x[i] + off, 1, (size_t)cols, yc[i], (size_t)rows);
    uint8_t *wpad = malloc(wb + 2);
    memcpy(wpad + (off ? (fmt == F_BF16 ? 2 : 1) : 0), W[i], wb);
    dW[i] = dput(wpad, wb + 2);
    free(wpad);
    dS[i] = S[i] ? dput(S[i], sb) : NULL;
    dx[i] = dput(x[i], (size_t)(cols + 1) * 4);
    dy[i] = df_cuda_alloc(G, (size_t)(rows + 2) * 4);
    m[i] = (df_cuda_gemv_one){(uint8_t *)dW[i] + (off ? (fmt == F_BF16 ? 2 : 1) : 0), dS[i], rows,
                              cols, dx[i] + off, dy[i] + 1};
  }
  for (int v = 0; v <= DF_CUDA_TILE_VARIANTS; v++) {
    df_cuda_set_gemv_tiled(G, fmt, v ? v + 1 : 1);
    /* the last with the L2 prefetch */
    df_cuda_set_gemv_tile_prefetch(G, fmt, v == DF_CUDA_TILE_VARIANTS ? 2048 : 0);
    for (int i = 0; i < n; i++) {
      float *nanpat = malloc((size_t)(shape[i][0] + 2) * 4);
      memset(nanpat, 0xff, (size_t)(shape[i][0] + 2) * 4);
      ok_or_die(df_cuda_put(G, dy[i], nanpat, (size_t)(shape[i][0] + 2) * 4));
      free(nanpat);
    }
    ok_or_die(df_cuda_gemv_group(G, fmt, n, m));
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) {
      int rows = shape[i][0];
      float *yg = malloc((size_t)(rows + 2) * 4);
      dget(yg, dy[i], (size_t)(rows + 2) * 4);
      uint32_t lo, hi;
      memcpy(&lo, &yg[0], 4), memcpy(&hi, &yg[rows + 1], 4);
      if (memcmp(yc[i], yg + 1, (size_t)rows * 4) || lo != 0xffffffffu || hi != 0xffffffffu) {
        char what[128];
        snprintf(what, sizeof what, "gemv group %s, matrix %d of %d (%d x %d%s), %s", fname[fmt], i,
                 n, rows, shape[i][1], shift && (i & 1) ? ", unaligned" : "", df_cuda_tile_name(v - 1));
        same(what, yc[i], yg + 1, (size_t)rows, 0);
        if (lo != 0xffffffffu || hi != 0xffffffffu) {
          failures++;
          printf("FAIL %s: wrote outside its y\n", what);
        }
        bad = 1;
      }
      free(yg);
    }
    if (!bad)
      printf("ok   gemv group %s, %d matrices%s, %s\n", fname[fmt], n, shift ? ", mixed alignment" : "",
             df_cuda_tile_name(v - 1));
  }
  df_cuda_set_gemv_tiled(G, fmt, 1);
  df_cuda_set_gemv_tile_prefetch(G, fmt, 0);
  for (int i = 0; i < n; i++) {
    df_cuda_free(G, dW[i]), df_cuda_free(G, dS[i]), df_cuda_free(G, dx[i]), df_cuda_free(G, dy[i]);
    free(W[i]), free(S[i]), free(x[i]), free(yc[i]);
  }
}

static void group_errors(void) {
  df_cuda_gemv_one m[DF_CUDA_GROUP_MAX + 1];
  memset(m, 0, sizeof m);
  int bad = 0;
  bad |= df_cuda_gemv_group(G, F_MXFP4, DF_CUDA_GROUP_MAX + 1, m) != -1;
  bad |= df_cuda_gemv_group(G, F_F32, 1, m) != -1;
  m[0].rows = 4, m[0].cols = 48;
  bad |= df_cuda_gemv_group(G, F_MXFP4, 1, m) != -1;
  bad |= !strstr(df_cuda_error(G), "multiple of 32");
  bad |= df_cuda_gemv_group(G, F_I8, 0, m) != 0;
  if (bad) failures++;
  printf("%s gemv group errors\n", bad ? "FAIL" : "ok  ");
}

/* A bad shape is an error with a message, not a launch. */
static void gemm_errors(void) {
  float *d = df_cuda_alloc(G, 4096);
  int bad = 0;
  bad |= df_cuda_gemm_mxfp4(G, (const uint8_t *)d, (const uint8_t *)d, 2, 48, d, 2, 48, d, 2) != -1;
  bad |= !strstr(df_cuda_error(G), "multiple of 32");
  bad |= df_cuda_gemm_f32(G, d, 4, 4, d, 2, 4, d + 64, 3) != -1; /* ldy < rows: overlapping */
  bad |= df_cuda_gemm_f32(G, d, 4, 4, d, -1, 4, d + 64, 4) != -1;
  bad |= df_cuda_gemm_f32(G, d, 4, 4, d, 0, 4, d + 64, 4) != 0;
  if (bad) failures++;
  printf("%s gemm shape errors\n", bad ? "FAIL" : "ok  ");
  df_cuda_free(G, d);
}

static void rmsnorm_case(int n, int with_w) {
  float *x = rnd_vec(n, -8, 3), *w = rnd_vec(n, -2, 1), *yc = malloc((size_t)n * 4 + 4),
        *yg = malloc((size_t)n * 4 + 4);
  df_kern_scalar()->rmsnorm(yc, x, with_w ? w : NULL, n, 1e-6f);
  float *dx = dput(x, (size_t)n * 4), *dw = dput(w, (size_t)n * 4), *dy = df_cuda_alloc(G, (size_t)n * 4);
  ok_or_die(df_cuda_rmsnorm(G, dy, dx, with_w ? dw : NULL, n, 1e-6f));
  dget(yg, dy, (size_t)n * 4);
  char what[64];
  snprintf(what, sizeof what, "rmsnorm n %d%s", n, with_w ? " weighted" : "");
  same(what, yc, yg, (size_t)n, 0);
  df_cuda_free(G, dx), df_cuda_free(G, dw), df_cuda_free(G, dy);
  free(x), free(w), free(yc), free(yg);
}

/* rows rows of ld floats, the first n of each normed in place against the
 * scalar rmsnorm, the rest left as they were (an MLA kv_a row's rope part) */
static void rmsnorm_rows_case(int n, int rows, int ld) {
  size_t m = (size_t)ld * rows;
  float *x = rnd_vec((int)m, -8, 3), *w = rnd_vec(n, -2, 1), *yc = malloc(m * 4), *yg = malloc(m * 4);
  memcpy(yc, x, m * 4);
  for (int r = 0; r < rows; r++)
    df_kern_scalar()->rmsnorm(yc + (size_t)r * ld, x + (size_t)r * ld, w, n, 1e-6f);
  float *dx = dput(x, m * 4), *dw = dput(w, (size_t)n * 4);
  ok_or_die(df_cuda_rmsnorm_rows(G, dx, dx, dw, n, rows, (size_t)ld, 1e-6f));
  dget(yg, dx, m * 4);
  char what[64];
  snprintf(what, sizeof what, "rmsnorm rows %d x %d of %d in place", rows, n, ld);
  same(what, yc, yg, m, 0);
  df_cuda_free(G, dx), df_cuda_free(G, dw);
  free(x), free(w), free(yc), free(yg);
}

/* A layer's input: AttnRes over nS snapshots (slots of `rows` rows, the
 * T read from row t0 on) and the stream, then the norm, against the
 * forward's loops (kcuda_seq_ref.h). */
static void attn_res_case(int nS, int rows, int t0, int T, int H) {
  size_t ss = (size_t)rows * H, n = (size_t)T * H;
  float *snaps = rnd_vec((int)(nS ? nS * ss : 1), -6, 3), *last = rnd_vec((int)n, -5, 4);
  float *rn = rnd_vec(H, -2, 1), *rp = rnd_vec(H, -6, 0), *nw = rnd_vec(H, -2, 1);
  float *yc = malloc(n * 4), *yg = malloc(n * 4), *tmp = malloc(sizeof(float) * (size_t)(H + nS + 1));
  df_attn_res_ref(yc, snaps + (size_t)t0 * H, ss, nS, last, T, H, rn, rp, nw, 1e-6f, tmp);
  float *ds = dput(snaps, (nS ? nS * ss : 1) * 4), *dl = dput(last, n * 4), *drn = dput(rn, (size_t)H * 4);
  float *drp = dput(rp, (size_t)H * 4), *dnw = dput(nw, (size_t)H * 4), *dy = df_cuda_alloc(G, n * 4);
  float *dwk = df_cuda_alloc(G, n * 4);
  ok_or_die(df_cuda_attn_res(G, dy, dwk, ds + (size_t)t0 * H, ss, nS, dl, T, H, drn, drp, dnw, 1e-6f));
  dget(yg, dy, n * 4);
  char what[96];
  snprintf(what, sizeof what, "attn res %d snapshots, rows %d..%d of %d, H %d", nS, t0, t0 + T, rows, H);
  same(what, yc, yg, n, 0);
  df_cuda_free(G, ds), df_cuda_free(G, dl), df_cuda_free(G, drn), df_cuda_free(G, drp);
  df_cuda_free(G, dnw), df_cuda_free(G, dy), df_cuda_free(G, dwk);
  free(snaps), free(last), free(rn), free(rp), free(nw), free(yc), free(yg), free(tmp);
}

/* A MoE layer's routed sum (T rows, K slots each, from nY rows of n) and
 * the add after it, against their loops in model/k3_forward_t.h's order. */
static void moe_combine_case(int T, int K, int n, int nY) {
  size_t m = (size_t)T * n;
  float *Y = rnd_vec(nY * n, -10, 4), *w = rnd_vec(T * K, -4, 0), *b = rnd_vec((int)m, -10, 4);
  float *yc = malloc(m * 4), *yg = malloc(m * 4), *sc = malloc(m * 4);
  int *rows = malloc(sizeof(int) * (size_t)T * K);
  uint64_t z = 0x9e3779b97f4a7c15ull * (uint64_t)(T + 7 * K + 13 * n);
  for (int i = 0; i < T * K; i++) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    rows[i] = (int)((z >> 33) % (uint64_t)nY);
  }
  df_moe_combine_ref(yc, Y, rows, w, T, K, n);
  for (size_t i = 0; i < m; i++) sc[i] = yc[i] + b[i];
  float *dY = dput(Y, (size_t)nY * n * 4), *dw = dput(w, (size_t)T * K * 4);
  float *db = dput(b, m * 4), *dout = df_cuda_alloc(G, m * 4);
  int *dr = dput(rows, sizeof(int) * (size_t)T * K);
  ok_or_die(df_cuda_moe_combine(G, dout, dY, dr, dw, T, K, n));
  dget(yg, dout, m * 4);
  char what[80];
  snprintf(what, sizeof what, "moe combine T %d K %d n %d", T, K, n);
  same(what, yc, yg, m, 0);
  ok_or_die(df_cuda_add(G, db, dout, db, m));
  dget(yg, db, m * 4);
  snprintf(what, sizeof what, "add n %zu", m);
  same(what, sc, yg, m, 0);
  df_cuda_free(G, dY), df_cuda_free(G, dw), df_cuda_free(G, db), df_cuda_free(G, dout);
  df_cuda_free(G, dr);
  free(Y), free(w), free(b), free(yc), free(yg), free(sc), free(rows);
}

/* which: 0 softmax, 1 sigmoid, 2 silu, 3 situ */
static void vec_case(int which, int n) {
  const df_kern *k = df_kern_scalar();
  float *g = rnd_vec(n, -10, 6), *u = rnd_vec(n, -10, 6), *c = malloc((size_t)n * 4 + 4),
        *r = malloc((size_t)n * 4 + 4);
  for (int i = 0; i < n; i++) g[i] = fmaxf(fminf(g[i], 80.0f), -80.0f);
  memcpy(c, g, (size_t)n * 4);
  float *dg = dput(g, (size_t)n * 4), *du = dput(u, (size_t)n * 4), *dout = df_cuda_alloc(G, (size_t)n * 4);
  const char *nm[] = {"softmax", "sigmoid", "silu", "situ"};
  if (which == 0) k->softmax(c, n), ok_or_die(df_cuda_softmax(G, dg, n));
  if (which == 1) k->sigmoid(c, n), ok_or_die(df_cuda_sigmoid(G, dg, n));
  if (which == 2) k->silu(c, n), ok_or_die(df_cuda_silu(G, dg, n));
  if (which == 3) k->situ(c, g, u, n, 7.0f, 3.5f), ok_or_die(df_cuda_situ(G, dout, dg, du, n, 7.0f, 3.5f));
  dget(r, which == 3 ? dout : dg, (size_t)n * 4);
  char what[64];
  snprintf(what, sizeof what, "%s n %d", nm[which], n);
  same(what, c, r, (size_t)n, 0);
  df_cuda_free(G, dg), df_cuda_free(G, du), df_cuda_free(G, dout);
  free(g), free(u), free(c), free(r);
}

/* Every step-th float bit pattern (step odd, so every exponent and many
 * mantissas are met), through libm and through the GPU's kmath.h. */
static void elementary_sweep(int which, uint32_t step) {
  size_t n = (size_t)(((1ull << 32) + step - 1) / step);
  float *x = malloc(n * 4), *c = malloc(n * 4), *r = malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    uint32_t b = (uint32_t)(i * step);
    memcpy(&x[i], &b, 4);
    c[i] = which == 0 ? expf(x[i]) : which == 1 ? tanhf(x[i]) : 1.0f / sqrtf(x[i]);
  }
  float *dx = dput(x, n * 4), *dy = df_cuda_alloc(G, n * 4);
  if (!dy) ok_or_die(-1);
  ok_or_die(df_cuda_elementary(G, which, dx, dy, n));
  dget(r, dy, n * 4);
  const char *nm[] = {"expf", "tanhf", "1/sqrtf"};
  char what[64];
  snprintf(what, sizeof what, "%s, every %u-th bit pattern", nm[which], step);
  same(what, c, r, n, 1);
  df_cuda_free(G, dx), df_cuda_free(G, dy);
  free(x), free(c), free(r);
}

/* K3's KDA: 96 heads of 128; the state after the step and the output. */
static void kda_case(int H, int D) {
  size_t hd = (size_t)H * D, n = hd * D;
  float *S = rnd_vec((int)n, -6, 0), *q = rnd_vec((int)hd, -4, 0), *k = rnd_vec((int)hd, -4, 0),
        *v = rnd_vec((int)hd, -3, 1), *a = malloc(hd * 4), *b = malloc((size_t)H * 4),
        *o = malloc(hd * 4), *Sg = malloc(n * 4), *og = malloc(hd * 4), *scr = malloc((size_t)D * 4);
  for (size_t i = 0; i < hd; i++) a[i] = (float)(rnd() % 1000000) / 1000000.0f;
  for (int h = 0; h < H; h++) b[h] = (float)(rnd() % 1000000) / 1000000.0f;
  float *dS = dput(S, n * 4), *dq = dput(q, hd * 4), *dk = dput(k, hd * 4), *dv = dput(v, hd * 4),
        *da = dput(a, hd * 4), *db = dput(b, (size_t)H * 4), *dout = df_cuda_alloc(G, hd * 4);
  for (int h = 0; h < H; h++)
    df_kern_scalar()->kda_step(S + (size_t)h * D * D, q + (size_t)h * D, k + (size_t)h * D,
                               v + (size_t)h * D, a + (size_t)h * D, b[h], o + (size_t)h * D, scr, D);
  ok_or_die(df_cuda_kda_step(G, dS, dq, dk, dv, da, db, dout, H, D));
  dget(Sg, dS, n * 4);
  dget(og, dout, hd * 4);
  char what[64];
  snprintf(what, sizeof what, "kda_step %d heads x %d: state", H, D);
  same(what, S, Sg, n, 0);
  snprintf(what, sizeof what, "kda_step %d heads x %d: output", H, D);
  same(what, o, og, hd, 0);
  df_cuda_free(G, dS), df_cuda_free(G, dq), df_cuda_free(G, dk), df_cuda_free(G, dv);
  df_cuda_free(G, da), df_cuda_free(G, db), df_cuda_free(G, dout);
  free(S), free(q), free(k), free(v), free(a), free(b), free(o), free(Sg), free(og), free(scr);
}

/* The router's top-k over rows of sigmoid scores; coarse scores (ties) when
 * ties is set, so the lower-id rule is exercised. */
static void router_case(int E, int K, int norm, int rows, int ties) {
  df_config c;
  memset(&c, 0, sizeof c);
  c.n_experts = E, c.top_k = K, c.norm_topk_prob = norm, c.routed_scale = 2.5f;
  size_t n = (size_t)rows * E, nk = (size_t)rows * K;
  float *sc = malloc(n * 4), *bias = malloc((size_t)E * 4), *w = malloc(nk * 4), *wg = malloc(nk * 4);
  int *ids = malloc(nk * sizeof(int)), *idg = malloc(nk * sizeof(int));
  for (size_t i = 0; i < n; i++)
    sc[i] = ties ? (float)(rnd() % 8) / 8.0f : (float)(rnd() % 16777216) / 16777216.0f;
  for (int e = 0; e < E; e++) bias[e] = ties ? 0.0f : rndf(-12, -6);
  for (int r = 0; r < rows; r++)
    df_router_select(&c, sc + (size_t)r * E, bias, ids + (size_t)r * K, w + (size_t)r * K);
  float *dsc = dput(sc, n * 4), *db = dput(bias, (size_t)E * 4), *dw = df_cuda_alloc(G, nk * 4);
  int *did = df_cuda_alloc(G, nk * sizeof(int));
  ok_or_die(df_cuda_router_topk(G, dsc, db, E, K, norm, 2.5f, rows, did, dw));
  dget(idg, did, nk * sizeof(int));
  dget(wg, dw, nk * 4);
  char what[80];
  int idsame = !memcmp(ids, idg, nk * sizeof(int));
  if (!idsame) failures++;
  printf("%s router %d experts top-%d%s%s rows %d: ids\n", idsame ? "ok  " : "FAIL", E, K,
         norm ? " normalised" : "", ties ? " ties" : "", rows);
  snprintf(what, sizeof what, "router %d experts top-%d%s%s: weights", E, K,
           norm ? " normalised" : "", ties ? " ties" : "");
  same(what, w, wg, nk, 0);
  df_cuda_free(G, dsc), df_cuda_free(G, db), df_cuda_free(G, dw), df_cuda_free(G, did);
  free(sc), free(bias), free(w), free(wg), free(ids), free(idg);
}

/* DF_CUDA_MXFP4_TILE=v, read when a context opens, forces MXFP4's row-tile
 * variant v (to measure the engine's own launches against the pick); the
 * device's name says so, its GEMVs stay the reference's, and "by shape"
 * (df_cuda_set_gemv_tiled) takes the name back. A value out of range or
 * not wholly a number is ignored. */
static void env_tile_case(void) {
  char in[3][16], bad[5][16];
  snprintf(in[0], sizeof in[0], "%d", DF_CUDA_TILE_VARIANTS - 1);
  snprintf(in[1], sizeof in[1], "0");
  snprintf(in[2], sizeof in[2], "%d", DF_CUDA_TILE_VARIANTS / 2);
  snprintf(bad[0], sizeof bad[0], "%d", DF_CUDA_TILE_VARIANTS);
  snprintf(bad[1], sizeof bad[1], "-1");
  snprintf(bad[2], sizeof bad[2], "x");
  snprintf(bad[3], sizeof bad[3], "1x");
  snprintf(bad[4], sizeof bad[4], "%s", "");
  df_cuda *keep = G;
  for (int i = 0; i < 8; i++) {
    const char *val = i < 3 ? in[i] : bad[i - 3];
    char err[256], want[64], what[160];
    setenv("DF_CUDA_MXFP4_TILE", val, 1);
    G = df_cuda_open(0, err, sizeof err);
    unsetenv("DF_CUDA_MXFP4_TILE");
    if (!G) {
      fprintf(stderr, "device: %s\n", err);
      exit(1);
    }
    const char *d = df_cuda_describe(G);
    snprintf(want, sizeof want, ", MXFP4 tile variant %s)", val);
    snprintf(what, sizeof what, "DF_CUDA_MXFP4_TILE=\"%s\": device \"%s\"", val, d);
    expect(i < 3 ? strstr(d, want) != NULL : strstr(d, "MXFP4 tile variant") == NULL, what);
    if (i < 3) { /* one expert's down, in the variant forced (0 and 6 are not the pick) */
      gemv_fix f;
      gemv_fix_make(&f, F_MXFP4, 3584, 3072);
      snprintf(what, sizeof what, "gemv mxfp4 3584 x 3072, variant %s from the environment", val);
      gemv_fix_check(&f, what);
      df_cuda_set_gemv_tiled(G, F_MXFP4, 1);
      d = df_cuda_describe(G);
      snprintf(what, sizeof what, "by shape after DF_CUDA_MXFP4_TILE=\"%s\": device \"%s\"", val, d);
      expect(strstr(d, "MXFP4 tile variant") == NULL, what);
      gemv_fix_free(&f);
    }
    df_cuda_close(G);
  }
  G = keep;
}

int main(void) {
  if (df_cuda_device_count() == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  char err[256];
  G = df_cuda_open(0, err, sizeof err);
  if (!G) {
    printf("%s: skipped\n", err);
    return 77;
  }
  printf("device: %s\n", df_cuda_describe(G));
  env_tile_case();
  for (int w = 0; w < 3; w++) elementary_sweep(w, 13);
  /* K3: experts' gate/up and down (latent 3584, moe_inter 3072), the KDA
   * projections (hidden 7168, 96 heads x 128) and the vocabulary-sized head
   * slice; then odd shapes. */
  static const int k3[][2] = {{3072, 3584}, {3584, 3072}, {12288, 7168}, {7168, 12288}};
  for (int f = 0; f < 4; f++)
    for (size_t s = 0; s < sizeof k3 / sizeof k3[0]; s++) gemv_case(f, k3[s][0], k3[s][1]);
  /* the shapes a layer issues at once, where the row tiles must reach the
   * bandwidth: 16 experts' gate+up and down stacked, the KDA q+k+v fused */
  gemv_case(F_MXFP4, 32 * 3072, 3584);
  gemv_case(F_MXFP4, 16 * 3584, 3072);
  gemv_case(F_I8, 36864, 7168);
  gemv_case(F_BF16, 36864, 7168);
  /* dependent launches: K3's KDA projections' sizes, and a small pair where
   * the whole chain fits the GPU at once */
  for (int f = 0; f < 4; f++)
    if (f != F_F32) pdl_case(f, 3072, 7168, 8), pdl_case(f, 96, 256, 8);
  /* odd shapes: rows that leave the last 32-row tile short (33, 257, 1000),
   * columns that leave a last partial step (7, 17, 100, 200, 12345), a
   * short last chunk with whole 16-byte rows (4000, 7184; MXFP4 288: its
   * scale rows not a multiple of 8 bytes), and rows that are not a
   * multiple of 16 bytes (staged element by element) */
  static const int odd[][2] = {{1, 32},   {3, 96},    {33, 160},   {257, 7168}, {1, 1},
                               {5, 7},    {17, 17},   {31, 100},   {130, 1000}, {3, 12345},
                               {45, 200}, {33, 288},  {100, 4000}, {65, 7184},  {1000, 3584},
                               {2, 16},   {40, 7180}, {31, 256}};
  for (int f = 0; f < 4; f++)
    for (size_t s = 0; s < sizeof odd / sizeof odd[0]; s++)
      if (f != F_MXFP4 || odd[s][1] % 32 == 0) gemv_case(f, odd[s][0], odd[s][1]);
  /* GEMM: K3's shapes, every T; then odd shapes, each T with a different
   * layout of x and y (padded, unaligned, shifted, a row range). */
  P = df_pool_create(0);
  static const int Ts[] = {1, 2, 3, 4, 5, 8, 17, 64};
  size_t nT = sizeof Ts / sizeof Ts[0];
  static const struct {
    int fmt, rows, cols;
  } k3g[] = {{F_MXFP4, 3072, 3584}, {F_I8, 12288, 7168}, {F_BF16, 12288, 7168}, {F_F32, 3584, 3072}};
  for (size_t s = 0; s < sizeof k3g / sizeof k3g[0]; s++)
    for (size_t t = 0; t < nT; t++)
      gemm_case(k3g[s].fmt, k3g[s].rows, k3g[s].cols, Ts[t], t == 6 ? 4 : 0, t == 6 ? 3 : 0, 0, 0);
  gemm_case(F_MXFP4, 3072, 3584, 17, 3, 1, 0, 0);
  gemm_case(F_I8, 12288, 7168, 5, 0, 0, 0, 1);
  /* a prefill chunk's rows on one expert: four 32-vector blocks, the last short */
  gemm_case(F_MXFP4, 3072, 3584, 100, 0, 0, 0, 0);
  gemm_case(F_BF16, 1000, 7168, 33, 4, 1, 3, 1);
  static const int oddg[][2] = {{1, 32}, {5, 64}, {17, 96}, {130, 1000}, {33, 160}, {3, 12345},
                                {1, 1}, {5, 7}, {31, 100}, {257, 7168}, {64, 4096}};
  static const int lay[][4] = {/* xpad, ypad, r0, xoff */
                               {0, 0, 0, 0}, {4, 5, 0, 0}, {3, 0, 0, 0}, {0, 2, 0, 1},
                               {8, 1, 1, 0}, {1, 7, 0, 0}, {0, 0, 2, 0}};
  size_t nl = sizeof lay / sizeof lay[0];
  for (int f = 0; f < 4; f++)
    for (size_t s = 0; s < sizeof oddg / sizeof oddg[0]; s++) {
      if (f == F_MXFP4 && oddg[s][1] % 32) continue;
      for (size_t t = 0; t < nT; t++) {
        const int *l = lay[(s + t) % nl];
        int r0 = l[2] < oddg[s][0] ? l[2] : 0;
        gemm_case(f, oddg[s][0], oddg[s][1], Ts[t], l[0], l[1], r0, l[3]);
      }
    }
  gemm_errors();
  df_pool_destroy(P);
  /* grouped GEMVs: a MoE layer's 16 experts on one token (gate and up, 32
   * matrices; down, 16), a KDA layer's six projections of one input, and
   * odd shapes mixed in one launch with mixed alignment */
  {
    int sh[DF_CUDA_GROUP_MAX][2];
    for (int i = 0; i < 32; i++) sh[i][0] = 3072, sh[i][1] = 3584;
    group_case(F_MXFP4, 32, (const int(*)[2])sh, 0);
    for (int i = 0; i < 16; i++) sh[i][0] = 3584, sh[i][1] = 3072;
    group_case(F_MXFP4, 16, (const int(*)[2])sh, 0);
    static const int kda6[][2] = {{12288, 7168}, {12288, 7168}, {12288, 7168},
                                  {96, 7168},    {128, 7168},   {96, 7168}};
    group_case(F_I8, 6, kda6, 0);
    group_case(F_BF16, 6, kda6, 0);
    static const int oddm[][2] = {{1, 32}, {33, 288}, {257, 3584}, {5, 64}, {100, 4000 / 32 * 32},
                                  {31, 256}, {0, 64}, {3, 96}};
    static const int oddb[][2] = {{1, 1}, {33, 17}, {257, 7168}, {5, 7}, {100, 4000},
                                  {31, 256}, {0, 64}, {3, 12345}};
    group_case(F_MXFP4, 8, oddm, 1);
    group_case(F_I8, 8, oddb, 1);
    group_case(F_BF16, 8, oddb, 1);
    group_case(F_MXFP4, 1, oddm + 2, 0);
  }
  group_errors();
  static const int vn[] = {7168, 3584, 1, 17, 12345};
  for (size_t i = 0; i < sizeof vn / sizeof vn[0]; i++) rmsnorm_case(vn[i], 1), rmsnorm_case(vn[i], 0);
  rmsnorm_rows_case(3072, 1, 3072), rmsnorm_rows_case(3072, 33, 3072), rmsnorm_rows_case(17, 5, 17);
  rmsnorm_rows_case(512, 7, 576), rmsnorm_rows_case(512, 1, 576);
  /* decode (one row; K3's 8 snapshots, none at layer 0), a prefill chunk,
   * the head's last row of a chunk, odd sizes, more snapshots than warps */
  attn_res_case(8, 1, 0, 1, 7168), attn_res_case(0, 1, 0, 1, 7168), attn_res_case(3, 64, 0, 64, 7168);
  attn_res_case(5, 41, 40, 1, 7168), attn_res_case(2, 5, 1, 3, 17), attn_res_case(20, 2, 0, 2, 100);
  attn_res_case(0, 1, 0, 1, 1), attn_res_case(1, 1, 0, 1, 2), attn_res_case(3, 2, 0, 2, 12345);
  /* a decode step (16 slots of one row), a prefill chunk, odd sizes */
  moe_combine_case(1, 16, 3072, 16), moe_combine_case(64, 16, 3072, 1024);
  moe_combine_case(5, 3, 17, 7), moe_combine_case(2, 1, 1, 2);
  static const int sn[] = {896, 16, 1, 33, 100000};
  for (int w = 0; w < 4; w++)
    for (size_t i = 0; i < sizeof sn / sizeof sn[0]; i++) vec_case(w, sn[i]);
  kda_case(96, 128);
  kda_case(3, 17);
  kda_case(1, 1);
  router_case(896, 16, 1, 64, 0);
  router_case(896, 16, 0, 64, 0);
  router_case(64, 8, 1, 257, 1);
  router_case(5, 5, 1, 3, 1);
  df_cuda_close(G);
  printf(failures ? "%d FAILED\n" : "all equal\n", failures);
  return failures ? 1 : 0;
}

/* deltafin-cuda-bench: the CUDA GEMV kernels' bandwidth at K3's shapes
 * against the GPU's own memory bandwidth, measured in the same run as a
 * device-to-device copy (bytes read + bytes written per second), for the
 * row-tile kernel (the default) and the lanes layout side by side
 * ("gemv_compare"), then the GEMMs' time for batches of vectors.
 *
 * Each case cycles through enough copies of its matrix to exceed the L2
 * cache several times over, so every launch reads its weights from HBM;
 * bytes counted = weights + scales + x + y. Timing: CUDA events around REPS
 * launches after a warm-up. First a MoE layer's experts on one token, launched
 * one by one against grouped (moe_layer_one_token). Prints one JSON object. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kcuda.h"

#define MIB (1024.0 * 1024.0)
static df_cuda *G;

static void die(const char *what) {
  fprintf(stderr, "deltafin-cuda-bench: %s: %s\n", what, df_cuda_error(G));
  exit(1);
}

static void *dfill(size_t n, uint64_t seed) {
  unsigned char *h = malloc(n);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    h[i] = (unsigned char)(seed >> 56);
  }
  void *d = df_cuda_alloc(G, n);
  if (!d || df_cuda_put(G, d, h, n) || df_cuda_sync(G)) die("upload");
  free(h);
  return d;
}

/* bytes read + written per second of a device-to-device copy of `bytes`. */
static double copy_bw(size_t bytes, int reps) {
  void *a = dfill(bytes, 1), *b = df_cuda_alloc(G, bytes);
  if (!b) die("alloc");
  for (int i = 0; i < 3; i++) df_cuda_copy(G, b, a, bytes);
  df_cuda_mark(G, 0);
  for (int i = 0; i < reps; i++) df_cuda_copy(G, i & 1 ? a : b, i & 1 ? b : a, bytes);
  df_cuda_mark(G, 1);
  double t = df_cuda_elapsed(G);
  df_cuda_free(G, a), df_cuda_free(G, b);
  return 2.0 * bytes * reps / t;
}

enum { F_BF16, F_I8, F_MXFP4 };
static const char *fname[] = {"bf16", "int8", "mxfp4"};

/* T == 0: the GEMV, bytes counted as above; T >= 1: the GEMM of T vectors,
 * the rate returned that of the weights and scales alone (what one pass over
 * them serving T vectors makes of the memory). */
/* name is one of list's comma-separated names */
static int listed(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p;) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == n && !strncmp(p, name, n)) return 1;
    p = e ? e + 1 : NULL;
  }
  return 0;
}

/* A shape's first copy of its weights and scales, made once and kept for
 * the run: every kind measures the same matrices, and filling a large one
 * on the host (the LM head's 1.2 GB) took longer than all its launches. */
static struct {
  int fmt, rows, cols;
  void *w, *s;
} kept[32];
static int nkept;
static void first_copy(int fmt, int rows, int cols, size_t wb, size_t sb, void **w0, void **s0) {
  for (int i = 0; i < nkept; i++)
    if (kept[i].fmt == fmt && kept[i].rows == rows && kept[i].cols == cols) {
      *w0 = kept[i].w, *s0 = kept[i].s;
      return;
    }
  *w0 = dfill(wb, 7), *s0 = sb ? dfill(sb, 9) : NULL;
  if (fmt == F_I8) { /* finite positive scales */
    float *h = malloc(sb);
    for (int r = 0; r < rows; r++) h[r] = 1.0f / 1024;
    df_cuda_put(G, *s0, h, sb), df_cuda_sync(G), free(h);
  }
  if (fmt == F_MXFP4) { /* no 255 (rejected before use) */
    uint8_t *h = malloc(sb);
    for (size_t i = 0; i < sb; i++) h[i] = (uint8_t)(120 + i % 8);
    df_cuda_put(G, *s0, h, sb), df_cuda_sync(G), free(h);
  }
  if (nkept == (int)(sizeof kept / sizeof kept[0])) die("too many shapes");
  kept[nkept].fmt = fmt, kept[nkept].rows = rows, kept[nkept].cols = cols;
  kept[nkept].w = *w0, kept[nkept++].s = *s0;
}

static double gemv_bw(int fmt, int rows, int cols, int T, int reps, double *us) {
  size_t n = (size_t)rows * cols;
  size_t wb = fmt == F_BF16 ? n * 2 : fmt == F_I8 ? n : n / 2;
  size_t sb = fmt == F_I8 ? (size_t)rows * 4 : fmt == F_MXFP4 ? n / 32 : 0;
  int copies = (int)((1024.0 * MIB) / (double)(wb + sb)) + 1;
  if (copies < 2) copies = 2;
  if (copies > 64) copies = 64;
  void **W = malloc(sizeof *W * copies), **S = malloc(sizeof *S * copies);
  void *w0, *s0;
  first_copy(fmt, rows, cols, wb, sb, &w0, &s0);
  for (int i = 0; i < copies; i++) {
    W[i] = i ? df_cuda_alloc(G, wb) : w0;
    S[i] = i && sb ? df_cuda_alloc(G, sb) : s0;
    if (!W[i] || (sb && !S[i])) die("alloc");
    if (i) df_cuda_copy(G, W[i], w0, wb), sb ? df_cuda_copy(G, S[i], s0, sb) : 0;
  }
  int nv = T > 0 ? T : 1;
  size_t nx = (size_t)nv * cols;
  float *hx = malloc(nx * 4);
  for (size_t c = 0; c < nx; c++) hx[c] = (float)((int)(c % 17) - 8) / 8.0f;
  float *x = df_cuda_alloc(G, nx * 4), *y = df_cuda_alloc(G, (size_t)nv * rows * 4);
  if (!x || !y || df_cuda_put(G, x, hx, nx * 4) || df_cuda_sync(G)) die("alloc");
  int rc = 0;
  for (int i = -copies; i < reps; i++) {
    if (i == 0) df_cuda_mark(G, 0);
    int k = (i + copies) % copies;
    size_t ld = (size_t)cols, ly = (size_t)rows;
    if (T > 0)
      rc |= fmt == F_BF16 ? df_cuda_gemm_bf16(G, W[k], rows, cols, x, T, ld, y, ly)
            : fmt == F_I8 ? df_cuda_gemm_i8(G, W[k], S[k], rows, cols, x, T, ld, y, ly)
                          : df_cuda_gemm_mxfp4(G, W[k], S[k], rows, cols, x, T, ld, y, ly);
    else
      rc |= fmt == F_BF16 ? df_cuda_gemv_bf16(G, W[k], rows, cols, x, y)
            : fmt == F_I8 ? df_cuda_gemv_i8(G, W[k], S[k], rows, cols, x, y)
                          : df_cuda_gemv_mxfp4(G, W[k], S[k], rows, cols, x, y);
  }
  df_cuda_mark(G, 1);
  if (rc) die(fname[fmt]);
  double t = df_cuda_elapsed(G);
  if (t <= 0 || df_cuda_sync(G)) die("timing");
  *us = t / reps * 1e6;
  for (int i = 1; i < copies; i++) df_cuda_free(G, W[i]), sb ? df_cuda_free(G, S[i]) : (void)0;
  df_cuda_free(G, x), df_cuda_free(G, y);
  free(W), free(S), free(hx);
  if (T > 0) return (double)(wb + sb) * reps / t;
  return (double)(wb + sb + (size_t)cols * 4 + (size_t)rows * 4) * reps / t;
}

/* A MoE layer's 16 experts on one token (a decode step): each expert's gate,
 * up and down GEMVs launched one by one (48 launches), against the grouped
 * launches (df_cuda_gemv_group: gate and up of all 16, then down of all
 * 16). The 16 experts' 280 MB exceed the L2 cache, so both read from HBM;
 * bytes counted = weights + scales. Prints one JSON member.
 * Two more chains of the same bytes tell where the grouped token loses to
 * its parts measured alone (docs/PERFORMANCE.md, runs 43-44): the same
 * grouped launches over row ranges of one allocation a kind (gate+up,
 * down) instead of 48 (one_alloc), and the shapes' own way, one launch of
 * all the gate+up rows and one of all the down rows, each with one x
 * (single). */
static void moe_token(int reps, double copy) {
  enum { NE = 16, MI = 3072, LT = 3584 };
  size_t wb = (size_t)MI * LT / 2, sb = (size_t)MI * LT / 32;
  void *P[NE][3], *S[NE][3];
  uint8_t *hs = malloc(sb);
  for (size_t i = 0; i < sb; i++) hs[i] = (uint8_t)(120 + i % 8);
  for (int e = 0; e < NE; e++)
    for (int k = 0; k < 3; k++) {
      P[e][k] = dfill(wb, 11 + (uint64_t)e * 3 + k);
      S[e][k] = df_cuda_alloc(G, sb);
      if (!S[e][k] || df_cuda_put(G, S[e][k], hs, sb)) die("alloc");
    }
  float *hx = malloc((size_t)NE * LT * 4);
  for (size_t c = 0; c < (size_t)NE * LT; c++) hx[c] = (float)((int)(c % 13) - 6) / 8.0f;
  float *x = df_cuda_alloc(G, (size_t)NE * LT * 4), *h = df_cuda_alloc(G, (size_t)NE * 2 * MI * 4),
        *y = df_cuda_alloc(G, (size_t)NE * LT * 4);
  if (!x || !h || !y || df_cuda_put(G, x, hx, (size_t)NE * LT * 4) || df_cuda_sync(G)) die("alloc");
  /* one allocation a kind: gate+up's 2 * NE * MI rows, down's NE * LT */
  size_t gub = (size_t)2 * NE * wb, gus = (size_t)2 * NE * sb, dnb = (size_t)NE * wb, dns = (size_t)NE * sb;
  void *BG = dfill(gub, 101), *BD = dfill(dnb, 102);
  void *SG = df_cuda_alloc(G, gus), *SD = df_cuda_alloc(G, dns);
  if (!SG || !SD) die("alloc");
  for (int i = 0; i < 2 * NE; i++)
    if (df_cuda_put(G, (uint8_t *)SG + (size_t)i * sb, hs, sb)) die("alloc");
  for (int i = 0; i < NE; i++)
    if (df_cuda_put(G, (uint8_t *)SD + (size_t)i * sb, hs, sb)) die("alloc");
  double us[4];
  for (int how = 0; how < 4; how++) {
    int rc = 0;
    for (int i = -2; i < reps; i++) {
      if (i == 0) df_cuda_mark(G, 0);
      if (how == 0) {
        for (int e = 0; e < NE; e++) {
          float *xe = x + (size_t)e * LT, *g = h + (size_t)e * 2 * MI;
          rc |= df_cuda_gemv_mxfp4(G, P[e][0], S[e][0], MI, LT, xe, g);
          rc |= df_cuda_gemv_mxfp4(G, P[e][1], S[e][1], MI, LT, xe, g + MI);
          rc |= df_cuda_gemv_mxfp4(G, P[e][2], S[e][2], LT, MI, g, y + (size_t)e * LT);
        }
      } else if (how == 3) {
        rc |= df_cuda_gemv_mxfp4(G, BG, SG, 2 * NE * MI, LT, x, h);
        rc |= df_cuda_gemv_mxfp4(G, BD, SD, NE * LT, MI, h, y);
      } else {
        df_cuda_gemv_one m[2 * NE];
        for (int e = 0; e < NE; e++) {
          float *xe = x + (size_t)e * LT, *g = h + (size_t)e * 2 * MI;
          for (int k = 0; k < 2; k++) {
            const uint8_t *pw = how == 1 ? P[e][k] : (const uint8_t *)BG + (size_t)(2 * e + k) * wb;
            const uint8_t *ps = how == 1 ? S[e][k] : (const uint8_t *)SG + (size_t)(2 * e + k) * sb;
            m[2 * e + k] = (df_cuda_gemv_one){pw, ps, MI, LT, xe, g + k * MI};
          }
        }
        rc |= df_cuda_gemv_group(G, 3, 2 * NE, m);
        for (int e = 0; e < NE; e++) {
          const uint8_t *pw = how == 1 ? P[e][2] : (const uint8_t *)BD + (size_t)e * wb;
          const uint8_t *ps = how == 1 ? S[e][2] : (const uint8_t *)SD + (size_t)e * sb;
          m[e] = (df_cuda_gemv_one){pw, ps, LT, MI, h + (size_t)e * 2 * MI, y + (size_t)e * LT};
        }
        rc |= df_cuda_gemv_group(G, 3, NE, m);
      }
    }
    df_cuda_mark(G, 1);
    if (rc) die("moe token");
    double t = df_cuda_elapsed(G);
    if (t <= 0 || df_cuda_sync(G)) die("timing");
    us[how] = t / reps * 1e6;
  }
  double bytes = (double)NE * 3 * (wb + sb);
  printf("  \"moe_layer_one_token\": {\"experts\": %d, \"MB\": %.1f, \"launch_each_us\": %.1f, "
         "\"launch_each_of_copy\": %.3f, \"grouped_us\": %.1f, \"grouped_of_copy\": %.3f, "
         "\"one_alloc_us\": %.1f, \"one_alloc_of_copy\": %.3f, \"single_us\": %.1f, "
         "\"single_of_copy\": %.3f},\n",
         NE, bytes / 1e6, us[0], bytes / (us[0] * 1e-6) / copy, us[1],
         bytes / (us[1] * 1e-6) / copy, us[2], bytes / (us[2] * 1e-6) / copy, us[3],
         bytes / (us[3] * 1e-6) / copy);
  fflush(stdout);
  for (int e = 0; e < NE; e++)
    for (int k = 0; k < 3; k++) df_cuda_free(G, P[e][k]), df_cuda_free(G, S[e][k]);
  df_cuda_free(G, BG), df_cuda_free(G, BD), df_cuda_free(G, SG), df_cuda_free(G, SD);
  df_cuda_free(G, x), df_cuda_free(G, h), df_cuda_free(G, y);
  free(hs), free(hx);
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 200;
  if (reps < 1) reps = 1;
  char err[256];
  if (df_cuda_device_count() == 0) return fprintf(stderr, "deltafin-cuda-bench: no CUDA device\n"), 1;
  G = df_cuda_open(0, err, sizeof err);
  if (!G) return fprintf(stderr, "deltafin-cuda-bench: %s\n", err), 1;
  double copy = copy_bw((size_t)(1024 * MIB), 20);
  printf("{\n  \"device\": \"%s\",\n  \"copy_GBps\": %.1f,\n", df_cuda_describe(G), copy / 1e9);
  /* what the pick by shape weighs (kcuda_gemv.cuh's tile_pick_rows): the
   * SMs and each variant's blocks an SM, per format */
  printf("  \"sms\": %d,\n  \"tile_occupancy\": {", df_cuda_sm_count(G));
  static const int ofmt[3] = {0, 1, 3};
  for (int f = 0; f < 3; f++) {
    printf("%s\"%s\": [", f ? ", " : "", fname[f]);
    for (int v = 0; v < DF_CUDA_TILE_VARIANTS; v++)
      printf("%s%d", v ? ", " : "", df_cuda_tile_occupancy(G, ofmt[f], v));
    printf("]");
  }
  printf("},\n");
  moe_token(reps, copy);
  printf("  \"gemv\": [\n");
  /* K3: one expert's gate (or up) and down, top-16 experts' gate+up rows
   * stacked (one launch over 32 x 3072 rows), the KDA q/k/v and output
   * projections, and the three q/k/v fused. */
  static const struct {
    int fmt, rows, cols;
    const char *what;
  } cs[] = {
      {F_MXFP4, 3072, 3584, "expert gate 3072x3584"},
      {F_MXFP4, 3584, 3072, "expert down 3584x3072"},
      {F_MXFP4, 32 * 3072, 3584, "16 experts gate+up 98304x3584"},
      {F_MXFP4, 16 * 3584, 3072, "16 experts down 57344x3072"},
      {F_I8, 12288, 7168, "kda q 12288x7168"},
      {F_I8, 7168, 12288, "kda o 7168x12288"},
      {F_I8, 36864, 7168, "kda qkv 36864x7168"},
      {F_BF16, 12288, 7168, "kda q 12288x7168"},
      {F_BF16, 7168, 12288, "kda o 7168x12288"},
      {F_BF16, 36864, 7168, "kda qkv 36864x7168"},
      {F_I8, 163840, 7168, "lm head 163840x7168"},
  };
  size_t nc = sizeof cs / sizeof cs[0];
  /* each kernel: the row tiles with the variant chosen by the shape (the
   * default), forced to each variant (df_cuda_set_gemv_tiled), some also
   * with the L2 prefetch in 2 KB windows, some as dependent launches (each
   * GEMV staging its first weights while the one before it ends:
   * df_cuda_set_pdl); then the lanes layout with 8, 4
   * or 2 of a row's 16 lanes per thread (the prefetch off, its default;
   * run 2 of 2026-12-01 measured it on and off) */
  static const struct {
    const char *name;
    int tiled, lanes;
    unsigned pf;
    int pdl;
  } ks[] = {
      {"tiled", 1, 16, 0, 0},
      {"tiled_2stages", 2, 16, 0, 0},
      {"tiled_3stages", 3, 16, 0, 0},
      {"tiled_deep", 4, 16, 0, 0},
      {"tiled_deep_2threads", 5, 8, 0, 0},
      {"tiled_deep_4threads", 6, 4, 0, 0},
      {"tiled_wide_2stages", 7, 16, 0, 0},
      {"tiled_wide_3stages_2threads", 8, 8, 0, 0},
      {"tiled_wide_5stages_4threads", 9, 4, 0, 0},
      {"tiled_wide_3stages_2threads_4warps", 10, 8, 0, 0},
      {"tiled_wide_5stages_4threads_4warps", 11, 4, 0, 0},
      {"tiled_3stages_2threads_4warps", 12, 8, 0, 0},
      {"tiled_mid_3stages_2threads_4warps", 13, 8, 0, 0},
      {"tiled_mid_2stages_2threads_4warps", 14, 8, 0, 0},
      {"tiled_pf2k", 1, 16, 2048, 0},
      {"tiled_3stages_pf2k", 3, 16, 2048, 0},
      {"tiled_deep_4threads_pf2k", 6, 4, 2048, 0},
      {"tiled_wide_5stages_4threads_pf2k", 9, 4, 2048, 0},
      {"tiled_pdl", 1, 16, 0, 1},
      {"tiled_2stages_pdl", 2, 16, 0, 1},
      {"tiled_3stages_pdl", 3, 16, 0, 1},
      {"tiled_deep_4threads_pdl", 6, 4, 0, 1},
      {"tiled_wide_3stages_2threads_pdl", 8, 8, 0, 1},
      {"tiled_wide_5stages_4threads_pdl", 9, 4, 0, 1},
      {"tiled_wide_5stages_4threads_4warps_pdl", 11, 4, 0, 1},
      {"tiled_3stages_2threads_4warps_pdl", 12, 8, 0, 1},
      {"tiled_mid_3stages_2threads_4warps_pdl", 13, 8, 0, 1},
      {"tiled_mid_2stages_2threads_4warps_pdl", 14, 8, 0, 1},
      {"lanes", 0, 8, 0, 0},
      {"lanes", 0, 4, 0, 0},
      {"lanes", 0, 2, 0, 0},
  };
  enum { NK = sizeof ks / sizeof ks[0], NT = NK - 3 }; /* NT tiled kinds first */
  double res_bw[NK][16] = {{0}}, res_us[NK][16] = {{0}}; /* 0: not measured */
  const char *only = getenv("DF_BENCH_GEMV_ONLY"); /* a shape's name: that one alone */
  const char *fonly = getenv("DF_BENCH_GEMV_FORMAT"); /* bf16, int8 or mxfp4: that one alone */
  const char *konly = getenv("DF_BENCH_GEMV_KINDS"); /* kinds' names, comma-separated: those alone */
  if (fonly && !*fonly) fonly = NULL; /* set empty (ab_gemv.sh's default): no filter */
  if (konly && !*konly) konly = NULL;
  for (int li = 0; li < NK; li++) {
    if (konly && !listed(konly, ks[li].name)) continue;
    df_cuda_set_pdl(G, ks[li].pdl);
    for (int f = 0; f < 4; f++) {
      df_cuda_set_gemv_tiled(G, f, ks[li].tiled);
      df_cuda_set_gemv_tile_prefetch(G, f, ks[li].pf);
      if (!ks[li].tiled) df_cuda_set_gemv_lanes(G, f, ks[li].lanes);
    }
    for (size_t i = 0; i < nc; i++) {
      res_bw[li][i] = res_us[li][i] = 0;
      if (only && !strstr(cs[i].what, only)) continue;
      if (fonly && strcmp(fname[cs[i].fmt], fonly)) continue;
      double us, bw = gemv_bw(cs[i].fmt, cs[i].rows, cs[i].cols, 0, reps, &us);
      res_bw[li][i] = bw, res_us[li][i] = us;
      printf("    {\"format\": \"%s\", \"shape\": \"%s\", \"kernel\": \"%s\", "
             "\"lanes_per_thread\": %d, \"l2_prefetch\": %u, \"dependent_launch\": %d, "
             "\"us\": %.2f, \"GBps\": %.1f, \"of_copy\": %.3f},\n",
             fname[cs[i].fmt], cs[i].what, ks[li].name, ks[li].lanes, ks[li].pf, ks[li].pdl, us,
             bw / 1e9, bw / copy);
      fflush(stdout);
    }
  }
  printf("    {}\n");
  df_cuda_set_pdl(G, 0);
  for (int f = 0; f < 4; f++)
    df_cuda_set_gemv_tiled(G, f, 1), df_cuda_set_gemv_lanes(G, f, 8),
        df_cuda_set_gemv_tile_prefetch(G, f, 0);
  /* per shape: the default (row tiles, variant by shape) against the best
   * forced tile variant and the best lanes layout */
  printf("  ],\n  \"gemv_compare\": [\n");
  int kp = 0; /* the default's choice as dependent launches */
  while (strcmp(ks[kp].name, "tiled_pdl")) kp++;
  for (size_t i = 0; i < nc; i++) {
    int bt = 1, bl = NT;
    for (int li = 2; li < NT; li++)
      if (res_bw[li][i] > res_bw[bt][i]) bt = li;
    for (int li = NT + 1; li < NK; li++)
      if (res_bw[li][i] > res_bw[bl][i]) bl = li;
    printf("    {\"format\": \"%s\", \"shape\": \"%s\", \"tiled_us\": %.2f, "
           "\"tiled_of_copy\": %.3f, \"tiled_pdl_of_copy\": %.3f, \"tiled_best_forced\": \"%s\", \"tiled_best_forced_of_copy\": "
           "%.3f, \"lanes_best_us\": %.2f, \"lanes_best_of_copy\": %.3f, "
           "\"lanes_best_lanes_per_thread\": %d, \"speedup\": %.2f}%s\n",
           fname[cs[i].fmt], cs[i].what, res_us[0][i], res_bw[0][i] / copy, res_bw[kp][i] / copy,
           ks[bt].name,
           res_bw[bt][i] / copy, res_us[bl][i], res_bw[bl][i] / copy, ks[bl].lanes,
           res_us[0][i] > 0 ? res_us[bl][i] / res_us[0][i] : 0.0, i + 1 < nc ? "," : "");
  }
  if (only || fonly || konly) {
    printf("  ]\n}\n");
    df_cuda_close(G);
    return 0;
  }
  static const int lanes[] = {8, 4, 2};
  /* GEMM: prefill-sized batches on the stacked experts and the KDA q
   * projection, each layout; weight_GBps is the weights' bytes over the time
   * (above copy_GBps means one pass over them served several vectors) */
  static const struct {
    int fmt, rows, cols;
    const char *what;
  } gs[] = {
      {F_MXFP4, 32 * 3072, 3584, "16 experts gate+up 98304x3584"},
      {F_I8, 12288, 7168, "kda q 12288x7168"},
  };
  static const int gT[] = {4, 16, 64};
  size_t ng = sizeof gs / sizeof gs[0], nt = sizeof gT / sizeof gT[0];
  printf("  ],\n  \"gemm\": [\n");
  df_cuda_set_gemm_tiles(G, 0); /* the lanes layout at every T (by T it is not, from 32) */
  for (int li = 0; li < 3; li++) {
    for (int f = 0; f < 4; f++) df_cuda_set_gemv_lanes(G, f, lanes[li]);
    for (size_t i = 0; i < ng; i++)
      for (size_t t = 0; t < nt; t++) {
        double us, bw = gemv_bw(gs[i].fmt, gs[i].rows, gs[i].cols, gT[t], reps, &us);
        printf("    {\"format\": \"%s\", \"shape\": \"%s\", \"T\": %d, "
               "\"lanes_per_thread\": %d, \"us\": %.2f, \"us_per_vector\": %.2f, "
               "\"weight_GBps\": %.1f}%s\n",
               fname[gs[i].fmt], gs[i].what, gT[t], lanes[li], us, us / gT[t], bw / 1e9,
               li < 2 || i + 1 < ng || t + 1 < nt ? "," : "");
        fflush(stdout);
      }
  }
  /* prefill batches on one expert and a KDA projection: the lanes layout
   * (8 lanes a thread) against the register tiles and one lane a thread
   * (df_cuda_set_gemm_tiles 1 and 2) */
  static const struct {
    int fmt, rows, cols;
    const char *what;
  } ps[] = {
      {F_MXFP4, 3072, 3584, "one expert's gate 3072x3584"},
      {F_MXFP4, 3584, 3072, "one expert's down 3584x3072"},
      {F_I8, 12288, 7168, "kda q 12288x7168"},
      {F_BF16, 12288, 7168, "kda q 12288x7168"},
  };
  static const int pT[] = {16, 32, 64, 512};
  size_t np = sizeof ps / sizeof ps[0], npt = sizeof pT / sizeof pT[0];
  printf("  ],\n  \"gemm_prefill\": [\n");
  for (int f = 0; f < 4; f++) df_cuda_set_gemv_lanes(G, f, 8);
  static const char *gname[] = {"lanes 8", "register tiles", "a lane a thread"};
  for (int tiles = 0; tiles < 3; tiles++) {
    df_cuda_set_gemm_tiles(G, tiles);
    for (size_t i = 0; i < np; i++)
      for (size_t t = 0; t < npt; t++) {
        int r = pT[t] >= 512 ? (reps + 9) / 10 : reps;
        double us, bw = gemv_bw(ps[i].fmt, ps[i].rows, ps[i].cols, pT[t], r, &us);
        double gmac = (double)ps[i].rows * ps[i].cols * pT[t] / (us * 1e3);
        printf("    {\"format\": \"%s\", \"shape\": \"%s\", \"T\": %d, \"kernel\": \"%s\", "
               "\"us\": %.2f, \"us_per_vector\": %.2f, \"weight_GBps\": %.1f, \"GMACps\": %.0f}%s\n",
               fname[ps[i].fmt], ps[i].what, pT[t], gname[tiles], us, us / pT[t], bw / 1e9, gmac,
               tiles < 2 || i + 1 < np || t + 1 < npt ? "," : "");
        fflush(stdout);
      }
  }
  df_cuda_set_gemm_tiles(G, -1);
  printf("  ]\n}\n");
  df_cuda_close(G);
  return 0;
}

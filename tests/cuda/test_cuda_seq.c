/* The sequence kernels of kcuda_seq.h against their reference. First the
 * KDA layer's sequence part on the GPU (df_cuda_kda: the
 * causal conv and the per-head recurrence) against its scalar reference
 * (kcuda_seq_ref.h, which the mock suites hold equal to the forward pass's
 * own loops), bit for bit: every buffer the call writes (o, the state S,
 * the conv state, and q, k, v, f, g as the loops leave them), at K3's shape
 * (96 heads x 128, conv 4) for T = 1, 7 and 64 rows, and at odd ones (a
 * head dimension below the 16 lanes, one above the block of 256 threads,
 * conv widths 1 and 2). Also: a prefill split in two calls ends in the
 * state of one call, and speculation's per-row states equal those of
 * a call a row. Then MLA attention's kernels (df_cuda_mla_attn, in
 * kv_b's three formats, df_cuda_mla_gate). Exit 77 (ctest: skipped) where
 * no CUDA device is found. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_seq.h"
#include "kernels/cuda/kcuda_seq_ref.h"

#define RAND_BITS_SEED 0x2545f4914f6cdd1dull
#include "rand_bits.h"

static df_cuda *G;
static int failures;
static float *rnd_vec(size_t n, int lo, int hi) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = rndf(lo, hi);
  return x;
}
static void die(void) {
  fprintf(stderr, "device: %s %s\n", df_cuda_error(G), df_cuda_kda_error());
  exit(1);
}
static float *dput(const float *h, size_t n) {
  float *d = df_cuda_alloc(G, (n ? n : 1) * sizeof(float));
  if (!d || df_cuda_put(G, d, h, n * sizeof(float))) die();
  return d;
}
static void dget(float *h, const float *d, size_t n) {
  if (df_cuda_get(G, h, d, n * sizeof(float))) die();
}

static void same(const char *what, const float *cpu, const float *gpu, size_t n) {
  size_t bad = 0, first = 0, inf = 0;
  for (size_t i = 0; i < n; i++) {
    if (memcmp(&cpu[i], &gpu[i], sizeof(float)) && !bad++) first = i;
    inf += !isfinite(cpu[i]);
  }
  if (inf) { /* the inputs are meant to stay in range: a NaN would compare equal to itself */
    failures++;
    printf("FAIL %s: %zu of %zu not finite in the reference\n", what, inf, n);
  } else if (bad) {
    failures++;
    printf("FAIL %s: %zu of %zu differ, first [%zu] cpu %a gpu %a\n", what, bad, n, first,
           (double)cpu[first], (double)gpu[first]);
  } else
    printf("ok   %s (%zu values)\n", what, n);
}

enum { B_Q, B_K, B_V, B_G, B_F, B_B, B_O, B_S, B_C, B_W, B_A, B_DT, B_ON, NB };
static const char *const bname[NB] = {"q", "k", "v", "g", "f", "b", "o", "S", "conv state",
                                      "conv w", "A_log", "dt_bias", "o_norm"};

typedef struct {
  float *h[NB], *d[NB];
  size_t n[NB];
} bufs;

/* The inputs of a layer's call: the products' rows in their usual ranges, a
 * state already carried (so the decay and the conv window matter). */
static void mk(bufs *b, int heads, int D, int K, int T) {
  size_t P = (size_t)heads * D, t = (size_t)T;
  size_t n[NB] = {t * P, t * P, t * P, t * P, t * P, t * heads, t * P, P * D,
                  3 * (size_t)(K - 1) * P, 3 * P * K, (size_t)heads, P, (size_t)D};
  static const int range[NB][2] = {{-4, 1}, {-4, 1}, {-4, 1}, {-3, 2}, {-3, 1}, {-3, 2}, {-1, 0},
                                   {-8, -1}, {-4, 1}, {-3, 0}, {-2, 1}, {-4, 0}, {-1, 0}};
  for (int i = 0; i < NB; i++) {
    b->n[i] = n[i];
    b->h[i] = rnd_vec(n[i], range[i][0], range[i][1]);
  }
  for (size_t i = 0; i < n[B_ON]; i++) b->h[B_ON][i] = 1.0f + b->h[B_ON][i] / 4; /* about 1 */
}
static void up(bufs *b) {
  for (int i = 0; i < NB; i++) b->d[i] = dput(b->h[i], b->n[i]);
}
static void drop(bufs *b) {
  for (int i = 0; i < NB; i++) free(b->h[i]), df_cuda_free(G, b->d[i]);
}
/* the args over b's host (dev 0) or device (dev 1) buffers, rows [t0, t0 + T) */
static df_cuda_kda_args args(bufs *b, int dev, int heads, int D, int K, int t0, int T) {
  float **p = dev ? b->d : b->h;
  size_t P = (size_t)heads * D, r = (size_t)t0 * P;
  return (df_cuda_kda_args){.T = T, .heads = heads, .D = D, .K = K, .lb = -5.0f, .eps = 1e-5f,
                            .q = p[B_Q] + r, .k = p[B_K] + r, .v = p[B_V] + r, .g = p[B_G] + r,
                            .f = p[B_F] + r, .b = p[B_B] + (size_t)t0 * heads, .o = p[B_O] + r,
                            .S = p[B_S], .conv_st = p[B_C], .conv_w = p[B_W], .A_log = p[B_A],
                            .dt_bias = p[B_DT], .o_norm = p[B_ON]};
}

/* One call of T rows (split > 0: two calls, split rows then the rest)
 * against one reference call over the T rows. */
static void seq_case(int heads, int D, int K, int T, int split) {
  bufs b;
  mk(&b, heads, D, K, T);
  up(&b);
  if (split > 0) {
    df_cuda_kda_args a0 = args(&b, 1, heads, D, K, 0, split), a1 = args(&b, 1, heads, D, K, split, T - split);
    if (df_cuda_kda(G, &a0) || df_cuda_kda(G, &a1)) die();
  } else {
    df_cuda_kda_args a = args(&b, 1, heads, D, K, 0, T);
    if (df_cuda_kda(G, &a)) die();
  }
  df_cuda_kda_args r = args(&b, 0, heads, D, K, 0, T);
  df_kda_ref(&r);
  for (int i = 0; i < NB; i++) {
    if (i == B_B || i >= B_W) continue; /* inputs only */
    float *g = malloc((b.n[i] ? b.n[i] : 1) * sizeof(float));
    dget(g, b.d[i], b.n[i]);
    char what[128];
    snprintf(what, sizeof what, "kda %d heads x %d, conv %d, T %d%s: %s", heads, D, K, T,
             split > 0 ? " in two calls" : "", bname[i]);
    same(what, b.h[i], g, b.n[i]);
    free(g);
  }
  drop(&b);
}

/* Speculation's per-row states (df_cuda_kda_args.nrow): one call of T rows
 * that writes the first nrow rows' states into padded blocks, against the
 * reference run a row at a time with the state copied after each row. */
static void seq_rows_case(int heads, int D, int K, int T, int nrow) {
  bufs b;
  mk(&b, heads, D, K, T);
  up(&b);
  size_t nS = b.n[B_S], nc = b.n[B_C], rconv = nS + 3, rstride = rconv + nc + 5;
  size_t nr = (size_t)nrow * rstride;
  float *want = malloc((nr ? nr : 1) * sizeof(float)), *got = malloc((nr ? nr : 1) * sizeof(float));
  for (size_t i = 0; i < nr; i++) want[i] = -7.25f;
  float *drows = dput(want, nr);
  df_cuda_kda_args a = args(&b, 1, heads, D, K, 0, T);
  a.nrow = nrow, a.rows = drows, a.rstride = rstride, a.rconv = rconv;
  if (df_cuda_kda(G, &a)) die();
  for (int t = 0; t < T; t++) {
    df_cuda_kda_args one = args(&b, 0, heads, D, K, t, 1);
    df_kda_ref(&one);
    if (t >= nrow) continue;
    memcpy(want + (size_t)t * rstride, b.h[B_S], nS * sizeof(float));
    memcpy(want + (size_t)t * rstride + rconv, b.h[B_C], nc * sizeof(float));
  }
  dget(got, drows, nr);
  char what[128];
  snprintf(what, sizeof what, "kda %d heads x %d, conv %d, T %d: %d row states", heads, D, K, T, nrow);
  same(what, want, got, nr);
  float *o = malloc((b.n[B_O] ? b.n[B_O] : 1) * sizeof(float));
  dget(o, b.d[B_O], b.n[B_O]);
  snprintf(what, sizeof what, "kda %d heads x %d, conv %d, T %d with %d row states: o", heads, D, K,
           T, nrow);
  same(what, b.h[B_O], o, b.n[B_O]);
  free(o), free(want), free(got);
  df_cuda_free(G, drows);
  drop(&b);
}

/* MLA attention between its projections (df_cuda_mla_attn: the query's
 * latent through kv_b's key rows in each of kv_b's formats, the scores, the
 * softmax, olat) and the output gate, against the reference. */
static void mla_case(int heads, int dn, int dr, int dv, int kr, int n0, int T, int wkind) {
  size_t rows = (size_t)heads * (dn + dv), nw = rows * kr, ntot = (size_t)n0 + T;
  size_t nq = (size_t)T * heads * (dn + dr), nc = ntot * (kr + dr), nl = (size_t)T * heads * kr;
  size_t ns = (size_t)T * heads * ntot, esz = wkind == 0 ? 2 : wkind == 1 ? 1 : 4;
  void *w = malloc(nw * esz);
  for (size_t i = 0; i < nw; i++) {
    if (wkind == 0) {
      float f = rndf(-8, -2);
      uint32_t u;
      memcpy(&u, &f, 4);
      ((uint16_t *)w)[i] = (uint16_t)(u >> 16);
    } else if (wkind == 1) {
      ((int8_t *)w)[i] = (int8_t)(rnd() & 0xff);
    } else {
      ((float *)w)[i] = rndf(-8, -2);
    }
  }
  float *scale = rnd_vec(rows, -10, -6), *q = rnd_vec(nq, -3, 1), *cache = rnd_vec(nc, -3, 1);
  float *olat = calloc(nl, sizeof(float)), *sc = calloc(ns, sizeof(float));
  float *og = malloc(nl * sizeof(float));
  uint8_t *dw = df_cuda_alloc(G, nw * esz);
  if (!dw || df_cuda_put(G, dw, w, nw * esz)) die();
  float *dscale = dput(scale, rows), *dq = dput(q, nq), *dc = dput(cache, nc);
  float *dl = dput(olat, nl), *dsc = dput(sc, ns);
  df_cuda_mla_args a = {.T = T, .heads = heads, .n0 = n0, .dn = dn, .dr = dr, .dv = dv, .kr = kr,
                        .wkind = wkind, .w = dw, .wscale = dscale, .q = dq, .cache = dc,
                        .olat = dl, .sc = dsc};
  if (df_cuda_mla_attn(G, &a)) die();
  dget(og, dl, nl);
  df_cuda_mla_args r = a;
  r.w = w, r.wscale = scale, r.q = q, r.cache = cache, r.olat = olat, r.sc = sc;
  df_mla_ref_attn(&r);
  static const char *const kn[] = {"bf16", "int8", "f32"};
  char what[160];
  snprintf(what, sizeof what, "mla %d heads, nope %d rope %d v %d latent %d, %d + %d positions, %s: olat",
           heads, dn, dr, dv, kr, n0, T, kn[wkind]);
  same(what, olat, og, nl);
  /* the gate over the rows' outputs */
  size_t no = (size_t)T * heads * dv;
  float *o = rnd_vec(no, -3, 1), *g = rnd_vec(no, -3, 2), *o2 = malloc(no * 4), *g2 = malloc(no * 4);
  float *dout = dput(o, no), *dg = dput(g, no);
  if (df_cuda_mla_gate(G, dout, dg, no)) die();
  dget(o2, dout, no);
  dget(g2, dg, no);
  df_mla_ref_gate(o, g, no);
  snprintf(what, sizeof what, "mla gate, %zu values: output", no);
  same(what, o, o2, no);
  snprintf(what, sizeof what, "mla gate, %zu values: sigmoid", no);
  same(what, g, g2, no);
  df_cuda_free(G, dw), df_cuda_free(G, dscale), df_cuda_free(G, dq), df_cuda_free(G, dc);
  df_cuda_free(G, dl), df_cuda_free(G, dsc), df_cuda_free(G, dout), df_cuda_free(G, dg);
  free(w), free(scale), free(q), free(cache), free(olat), free(sc), free(og);
  free(o), free(g), free(o2), free(g2);
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
  static const int Ts[] = {1, 7, 64};
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) seq_case(96, 128, 4, Ts[i], 0);
  seq_case(96, 128, 4, 9, 4);
  static const int odd[][4] = {/* heads, D, K, T */
                               {3, 17, 4, 5}, {1, 1, 1, 3}, {2, 16, 2, 7}, {4, 300, 3, 2},
                               {5, 8, 4, 1}, {1, 64, 1, 1}, {7, 33, 5, 11}};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
    seq_case(odd[i][0], odd[i][1], odd[i][2], odd[i][3], 0);
  seq_case(3, 17, 4, 6, 1);
  seq_rows_case(96, 128, 4, 5, 4); /* K3's shape, a verify pass of 4 drafts */
  seq_rows_case(2, 300, 2, 3, 3);
  /* MLA at K3's shape (64 heads; nope 128, rope 64, v 128, latent 512):
   * decode after 100 and 2000 positions, a chunk of 7, a prefill of 64;
   * then odd shapes (lanes left empty, one position) */
  for (int f = 0; f < 3; f++) {
    mla_case(64, 128, 64, 128, 512, 100, 1, f);
    mla_case(64, 128, 64, 128, 512, 41, 7, f);
  }
  mla_case(64, 128, 64, 128, 512, 2000, 1, 1);
  mla_case(64, 128, 64, 128, 512, 0, 64, 0);
  mla_case(3, 5, 3, 7, 17, 0, 1, 2);
  mla_case(2, 16, 8, 4, 40, 3, 5, 1);
  mla_case(1, 1, 1, 1, 1, 9, 3, 0);
  df_cuda_close(G);
  printf(failures ? "%d FAILED\n" : "all equal\n", failures);
  return failures ? 1 : 0;
}

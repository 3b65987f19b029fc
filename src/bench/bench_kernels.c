/* `deltafin bench kernels`: weights streamed (GB/s) and GFLOP/s per kernel,
 * kernel table and thread count, next to the streaming read bandwidth of
 * RAM measured the same way (same buffer, same thread counts).
 *
 * Weights are cycled through a pool much larger than the last-level cache,
 * so a GEMV reads its weights from RAM as decode does; the K3 shapes are an
 * expert's w1/w3 (3072 x 3584 MXFP4), spine-like bf16/int8 matrices and the
 * KDA state (96 heads x 128 x 128). Threads go through the engine's own
 * drivers (df_mm, df_mm_mxfp4: output rows split over the pool). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/pool.h"
#include "base/util.h"
#include "bench/bench.h"
#include "kernels/kernels.h"

/* ---- memory read bandwidth ---- */

typedef struct {
  const uint64_t *p;
  size_t n; /* words */
  int parts;
  uint64_t sink[64];
} bw_job;

static void bw_task(void *ctx, int task, int thread) {
  (void)thread;
  bw_job *j = ctx;
  size_t per = j->n / (size_t)j->parts, a = per * (size_t)task, b = a + per;
  const uint64_t *p = j->p;
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  for (size_t i = a; i + 8 <= b; i += 8) {
    s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
    s4 += p[i + 4], s5 += p[i + 5], s6 += p[i + 6], s7 += p[i + 7];
  }
  j->sink[task & 63] = s0 ^ s1 ^ s2 ^ s3 ^ s4 ^ s5 ^ s6 ^ s7;
}

static double membw_on(df_pool *pool, int threads, const void *buf, size_t bytes, double min_s) {
  bw_job j = {.p = buf, .n = bytes / 8, .parts = threads};
  df_pool_run(pool, threads, bw_task, &j); /* warm: page faults, TLB */
  double best = 0, t0 = df_now();
  int passes = 0;
  while (passes < 3 || df_now() - t0 < min_s) {
    double a = df_now();
    df_pool_run(pool, threads, bw_task, &j);
    double dt = df_now() - a;
    double r = (double)(j.n / (size_t)threads * (size_t)threads * 8) / dt;
    if (r > best) best = r;
    passes++;
  }
  return best;
}

double df_bench_membw(int threads, size_t bytes, double min_s) {
  void *buf = df_xaligned(4096, bytes);
  memset(buf, 1, bytes);
  df_pool *pool = df_pool_create(threads);
  double r = membw_on(pool, threads, buf, bytes, min_s);
  df_pool_destroy(pool);
  free(buf);
  return r;
}

/* ---- kernel cases ---- */

typedef enum { C_MXFP4, C_BF16, C_I8, C_F32, C_KDA } ckind;

typedef struct kcase {
  const char *name;
  ckind kind;
  int rows, cols, T; /* KDA: rows = heads, cols = D */
} kcase;

static const kcase CASES[] = {
    {"mxfp4 gemv (expert w1)", C_MXFP4, 3072, 3584, 1},
    {"mxfp4 gemv (expert w2)", C_MXFP4, 3584, 3072, 1},
    {"mxfp4 gemm T=8", C_MXFP4, 3072, 3584, 8},
    {"mxfp4 gemm T=64", C_MXFP4, 3072, 3584, 64},
    {"bf16 gemv", C_BF16, 2048, 7168, 1},
    {"bf16 gemm T=16", C_BF16, 2048, 7168, 16},
    {"int8 gemv", C_I8, 2048, 7168, 1},
    {"int8 gemm T=16", C_I8, 2048, 7168, 16},
    {"f32 gemv", C_F32, 1024, 4096, 1},
    {"kda step (96 heads, D=128)", C_KDA, 96, 128, 1},
};

/* Bytes of weights (or KDA state) one call streams. */
static size_t case_bytes(const kcase *c) {
  size_t rc = (size_t)c->rows * (size_t)c->cols;
  switch (c->kind) {
  case C_MXFP4: return rc / 2 + rc / 32;
  case C_BF16: return rc * 2;
  case C_I8: return rc + (size_t)c->rows * 4;
  case C_F32: return rc * 4;
  case C_KDA: return rc * (size_t)c->cols * 4;
  }
  return 0;
}
/* Floating-point operations of one call (multiply and add counted apart:
 * the kernels never fuse them). KDA: decay, u, delta, update, output. */
static double case_flops(const kcase *c) {
  double rc = (double)c->rows * c->cols;
  if (c->kind == C_KDA) return (double)c->rows * (7.0 * c->cols * c->cols + 2.0 * c->cols);
  return 2.0 * rc * c->T;
}

static uint64_t brng = 0x853C49E6748FEA9Bull;
static uint32_t rnd32(void) {
  brng = brng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(brng >> 33);
}
static float rndf(void) { return (float)rnd32() / 2147483648.0f - 1.0f; }

/* Fills the pool with matrices of case c: normal-range values only (no
 * subnormals, NaN or inf, which could take slow paths and flatter nothing). */
static void fill_pool(const kcase *c, uint8_t *pool, size_t stride, int nmat) {
  size_t rc = (size_t)c->rows * (size_t)c->cols;
  for (int m = 0; m < nmat; m++) {
    uint8_t *b = pool + (size_t)m * stride;
    switch (c->kind) {
    case C_MXFP4:
      for (size_t i = 0; i < rc / 2; i++) b[i] = (uint8_t)rnd32();
      for (size_t i = 0; i < rc / 32; i++) b[rc / 2 + i] = (uint8_t)(118 + rnd32() % 10);
      break;
    case C_BF16: {
      uint16_t *w = (uint16_t *)b;
      for (size_t i = 0; i < rc; i++) {
        float f = rndf() * 0.05f;
        uint32_t u;
        memcpy(&u, &f, 4);
        w[i] = (uint16_t)(u >> 16);
      }
      break;
    }
    case C_I8: {
      for (size_t i = 0; i < rc; i++) b[i] = (uint8_t)rnd32();
      float *sc = (float *)(b + ((rc + 63) & ~(size_t)63));
      for (int r = 0; r < c->rows; r++) sc[r] = 0.001f;
      break;
    }
    case C_F32:
    case C_KDA: {
      float *w = (float *)b;
      size_t n = c->kind == C_KDA ? rc * (size_t)c->cols : rc;
      for (size_t i = 0; i < n; i++) w[i] = rndf() * 0.05f;
      break;
    }
    }
  }
}

typedef struct {
  const df_kern *k;
  float *S;
  const float *q, *kk, *v, *al;
  float *o, *scr;
  int H, D;
} kda_job;

static void kda_task(void *ctx, int task, int thread) {
  kda_job *j = ctx;
  size_t D = (size_t)j->D;
  j->k->kda_step(j->S + (size_t)task * D * D, j->q + task * D, j->kk + task * D, j->v + task * D,
                 j->al + task * D, 0.5f, j->o + task * D, j->scr + (size_t)thread * D, j->D);
}

typedef struct {
  double s_per_call, gbps, gflops;
  long calls;
} kres;

static void run_case(const kcase *c, const df_kern *k, df_pool *pool, int nth, uint8_t *buf,
                     size_t stride, int nmat, const float *X, float *Y, float *aux,
                     double min_s, kres *r) {
  df_kctx kc = {.k = k, .pool = nth > 1 ? pool : NULL};
  size_t rc = (size_t)c->rows * (size_t)c->cols;
  long calls = 0;
  int m = 0;
  double t0 = 0;
  int warm = 1;
  for (;;) {
    uint8_t *b = buf + (size_t)m * stride;
    switch (c->kind) {
    case C_MXFP4:
      df_mm_mxfp4(&kc, 0, b, b + rc / 2, c->rows, c->cols, X, c->T, (size_t)c->cols, Y, (size_t)c->rows);
      break;
    case C_BF16:
    case C_I8:
    case C_F32: {
      df_wmat W = {.kind = c->kind == C_BF16 ? DF_W_BF16 : c->kind == C_I8 ? DF_W_I8 : DF_W_F32,
                   .rows = c->rows, .cols = c->cols, .w = b,
                   .scale = (const float *)(b + ((rc + 63) & ~(size_t)63))};
      df_mm(&kc, &W, X, c->T, (size_t)c->cols, Y, (size_t)c->rows);
      break;
    }
    case C_KDA: {
      size_t HD = (size_t)c->rows * (size_t)c->cols;
      kda_job j = {.k = k, .S = (float *)b, .q = X, .kk = X + HD, .v = X + 2 * HD, .al = aux,
                   .o = Y, .scr = Y + HD, .H = c->rows, .D = c->cols};
      df_pool_run(nth > 1 ? pool : NULL, c->rows, kda_task, &j);
      break;
    }
    }
    m = (m + 1) % nmat;
    if (warm) {
      warm = 0;
      t0 = df_now();
      continue;
    }
    calls++;
    double el = df_now() - t0;
    if (calls >= 2 && el >= min_s) {
      r->calls = calls;
      r->s_per_call = el / (double)calls;
      r->gbps = (double)case_bytes(c) / r->s_per_call / 1e9;
      r->gflops = case_flops(c) / r->s_per_call / 1e9;
      return;
    }
  }
}

static int parse_list(const char *s, int *out, int max) {
  int n = 0;
  while (s && *s && n < max) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > 1024) return -1;
    out[n++] = (int)v;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return n;
}

int df_bench_kernels(const df_bench_kopts *o, FILE *out, df_err *e) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1) cores = 1;
  int th[64], nth = 0;
  if (o->threads) {
    nth = parse_list(o->threads, th, 64);
    if (nth <= 0) return df_err_set(e, "--threads: '%s' is not a comma list of counts 1..1024", o->threads);
  } else {
    for (int i = 1; i <= cores && nth < 64; i++) th[nth++] = i;
  }
  const df_kern *tabs[8];
  int ntab = 0;
  if (o->tables) {
    char *dup = df_xstrdup(o->tables), *save = NULL;
    for (char *t = strtok_r(dup, ",", &save); t && ntab < 8; t = strtok_r(NULL, ",", &save)) {
      const df_kern *k = df_kern_by_name(t);
      if (!k) {
        df_err_set(e, "--tables: '%s' is not a kernel table this CPU runs (scalar, avx2, avx512, neon)", t);
        free(dup);
        return -1;
      }
      tabs[ntab++] = k;
    }
    free(dup);
  } else {
    tabs[ntab++] = df_kern_scalar();
    if (df_kern_avx2()) tabs[ntab++] = df_kern_avx2();
    if (df_kern_avx512()) tabs[ntab++] = df_kern_avx512();
    if (df_kern_neon()) tabs[ntab++] = df_kern_neon();
  }
  /* an --only that names no kernel would print an empty table and exit 0:
   * a typo must not look like a finished measurement */
  if (o->only) {
    int hits = 0;
    for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++) hits += strstr(CASES[ci].name, o->only) != NULL;
    if (!hits) {
      char names[1024] = "";
      size_t at = 0;
      for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES && at < sizeof names; ci++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", ci ? ", " : "", CASES[ci].name);
      return df_err_set(e, "--only: no kernel name contains '%s' (kernels: %s)", o->only, names);
    }
  }
  /* default: 256 MiB, or twice the last-level cache the CPU reports when
   * that is larger (a pool that fits in L3 measures L3, not RAM), at most
   * 1 GiB */
  size_t pool_bytes = (size_t)256 << 20;
  if (o->pool_mb > 0) {
    pool_bytes = (size_t)o->pool_mb << 20;
  } else {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0 && (size_t)l3 * 2 > pool_bytes) pool_bytes = (size_t)l3 * 2;
    if (pool_bytes > ((size_t)1 << 30)) pool_bytes = (size_t)1 << 30;
  }
  double min_s = o->min_s > 0 ? o->min_s : 0.3;

  uint8_t *buf = df_xaligned(4096, pool_bytes);
  memset(buf, 0, pool_bytes);
  int maxth = 1;
  for (int i = 0; i < nth; i++) maxth = th[i] > maxth ? th[i] : maxth;
  df_pool *pools[64] = {0};
  double bw[64];
  for (int i = 0; i < nth; i++) {
    pools[i] = df_pool_create(th[i]);
    bw[i] = membw_on(pools[i], th[i], buf, pool_bytes, min_s);
  }

  json_t *jres = json_array();
  if (!o->json) {
    fprintf(out, "memory read bandwidth (streaming read of %zu MiB):", pool_bytes >> 20);
    for (int i = 0; i < nth; i++) fprintf(out, " %d thread%s %.1f GB/s%s", th[i], th[i] == 1 ? "" : "s", bw[i] / 1e9, i + 1 < nth ? "," : "\n");
    fprintf(out, "%-28s %-7s %7s %10s %9s %9s %8s\n", "kernel", "table", "threads", "ms/call", "GB/s", "GFLOP/s", "of bw");
  }
  /* the largest X/Y any case needs */
  size_t xmax = 0, ymax = 0;
  for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++) {
    const kcase *c = &CASES[ci];
    size_t x = (size_t)c->T * (size_t)c->cols, y = (size_t)c->T * (size_t)c->rows;
    if (c->kind == C_KDA) x = 3 * (size_t)c->rows * c->cols, y = (size_t)c->rows * c->cols + (size_t)64 * c->cols;
    xmax = x > xmax ? x : xmax;
    ymax = y > ymax ? y : ymax;
  }
  float *X = df_xaligned(64, xmax * 4), *Y = df_xaligned(64, ymax * 4);
  float *aux = df_xaligned(64, 96 * 128 * 4);
  for (size_t i = 0; i < xmax; i++) X[i] = rndf();
  for (int i = 0; i < 96 * 128; i++) aux[i] = 0.9f + 0.1f * rndf();
  for (size_t i = 0; i < xmax && i < 96 * 128 * 3; i++) X[i] *= 0.1f; /* KDA q/k/v: modest */

  for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++) {
    const kcase *c = &CASES[ci];
    if (o->only && !strstr(c->name, o->only)) continue;
    size_t stride = (case_bytes(c) + (size_t)c->rows * 4 + 4095 + 64) & ~(size_t)4095;
    int nmat = (int)(pool_bytes / stride);
    if (nmat < 1) nmat = 1;
    fill_pool(c, buf, stride, nmat);
    for (int ti = 0; ti < ntab; ti++)
      for (int i = 0; i < nth; i++) {
        kres r;
        run_case(c, tabs[ti], pools[i], th[i], buf, stride, nmat, X, Y, aux, min_s, &r);
        double frac = r.gbps * 1e9 / bw[i];
        if (o->json) {
          json_t *x = json_object();
          json_object_set_new(x, "kernel", json_string(c->name));
          json_object_set_new(x, "table", json_string(tabs[ti]->name));
          json_object_set_new(x, "threads", json_integer(th[i]));
          json_object_set_new(x, "rows", json_integer(c->rows));
          json_object_set_new(x, "cols", json_integer(c->cols));
          json_object_set_new(x, "T", json_integer(c->T));
          json_object_set_new(x, "s_per_call", json_real(r.s_per_call));
          json_object_set_new(x, "gbps", json_real(r.gbps));
          json_object_set_new(x, "gflops", json_real(r.gflops));
          json_object_set_new(x, "fraction_of_membw", json_real(frac));
          json_array_append_new(jres, x);
        } else {
          fprintf(out, "%-28s %-7s %7d %10.3f %9.2f %9.2f %7.0f%%\n", c->name, tabs[ti]->name, th[i],
                  r.s_per_call * 1e3, r.gbps, r.gflops, 100 * frac);
          fflush(out);
        }
      }
  }
  if (o->json) {
    json_t *root = json_object(), *jb = json_array();
    for (int i = 0; i < nth; i++) {
      json_t *x = json_object();
      json_object_set_new(x, "threads", json_integer(th[i]));
      json_object_set_new(x, "gbps", json_real(bw[i] / 1e9));
      json_array_append_new(jb, x);
    }
    json_object_set_new(root, "membw", jb);
    json_object_set_new(root, "pool_mib", json_integer((json_int_t)(pool_bytes >> 20)));
    json_object_set_new(root, "kernels", jres);
    json_dumpf(root, out, JSON_COMPACT | JSON_PRESERVE_ORDER);
    fputc('\n', out);
    json_decref(root);
  } else {
    json_decref(jres);
    fprintf(out, "GB/s: weight (MXFP4 codes + scales, bf16, int8 + row scales, f32; KDA: state) bytes per call / time;\n"
                 "GFLOP/s: multiplies and adds counted apart; of bw: GB/s over the memory read bandwidth at the same thread count.\n");
  }
  for (int i = 0; i < nth; i++) df_pool_destroy(pools[i]);
  free(buf), free(X), free(Y), free(aux);
  (void)maxth;
  return 0;
}

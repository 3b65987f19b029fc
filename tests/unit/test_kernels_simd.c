/* Every SIMD kernel table (avx2, avx512, neon) against the scalar reference.
 *
 * The tables claim the pinned lane-16 order of kernels.h (separate multiply
 * and add, fixed combine tree), so the check is BIT-IDENTICAL output, not a
 * tolerance: GEMM/GEMV for bf16, row-int8, fp32 and MXFP4, the transposed
 * GEMVs, dot, rmsnorm, the elementwise functions and the KDA step, on random
 * shapes with ragged sizes (cols not a multiple of 8/16/32 where the format
 * allows, odd row counts and row sub-ranges, T = 1..9 vectors, strides wider
 * than the data), and through the threaded drivers. The scalar table itself
 * is checked against double-precision references in test_kernels.c.
 *
 * A table this CPU (or this architecture) cannot run is skipped, and the
 * test says so on stdout. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/pool.h"
#include "kernels/kernels.h"

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint64_t next_u64(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static float frand(void) { return (float)((double)(next_u64() >> 11) / 9007199254740992.0 * 2 - 1); }
static int irand(int n) { return (int)(next_u64() % (uint64_t)n); }

/* Random floats with the values that expose order and sign mistakes mixed
 * in: signed zeros, subnormals, exact cancellations, wide magnitudes. */
static float fspecial(void) {
  switch (irand(16)) {
  case 0: return 0.0f;
  case 1: return -0.0f;
  case 2: return ldexpf(frand(), -130); /* subnormal */
  case 3: return frand() * 1e6f;
  case 4: return frand() * 1e-6f;
  default: return frand();
  }
}
static uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

static const df_kern *table_or_skip(void **st) {
  const char *name = *st;
  const df_kern *k = df_kern_by_name(name);
  if (!k) {
    printf("[  SKIPPED ] %s kernels: not built for this architecture or not supported by this CPU\n", name);
    skip();
  }
  assert_string_equal(k->name, name);
  return k;
}

static void same_bits(const float *a, const float *b, size_t n, const char *what, int R, int C, int T) {
  for (size_t i = 0; i < n; i++)
    if (memcmp(a + i, b + i, 4))
      fail_msg("%s R=%d C=%d T=%d: element %zu is %a (simd) vs %a (scalar)", what, R, C, T, i, a[i], b[i]);
}

static const int ROWS[] = {1, 2, 3, 4, 5, 7, 9, 13};
static const int COLS[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 100, 257, 1000};

/* y for T vectors with row sub-range [r0, r1) and wide strides; untouched
 * output slots must stay untouched. */
static void test_dense(void **st) {
  const df_kern *k = table_or_skip(st), *s = df_kern_scalar();
  for (size_t a = 0; a < sizeof ROWS / sizeof *ROWS; a++)
    for (size_t b = 0; b < sizeof COLS / sizeof *COLS; b++)
      for (int T = 1; T <= 9; T++) {
        int R = ROWS[a], C = COLS[b];
        int r0 = R > 2 ? irand(2) : 0, r1 = R > 2 ? R - irand(2) : R;
        size_t ldx = (size_t)C + (size_t)irand(5), ldy = (size_t)(r1 - r0) + (size_t)irand(3);
        size_t nw = (size_t)R * C, ny = (size_t)T * ldy;
        uint16_t *Wb = malloc(nw * 2);
        int8_t *Wq = malloc(nw);
        float *Wf = malloc(nw * 4), *sc = malloc((size_t)R * 4);
        float *X = malloc((size_t)T * ldx * 4), *Y0 = malloc(ny * 4), *Y1 = malloc(ny * 4);
        for (size_t i = 0; i < nw; i++) {
          Wf[i] = fspecial();
          Wb[i] = bf16_of(fspecial());
          Wq[i] = (int8_t)(irand(256) - 128);
        }
        for (int r = 0; r < R; r++) sc[r] = (frand() + 1.5f) / 127;
        for (size_t i = 0; i < (size_t)T * ldx; i++) X[i] = fspecial();
        for (int kind = 0; kind < 3; kind++) {
          for (size_t i = 0; i < ny; i++) Y0[i] = Y1[i] = 12345.0f; /* sentinels */
          const char *what = kind == 0 ? "gemm_bf16" : kind == 1 ? "gemm_i8" : "gemm_f32";
          if (kind == 0) {
            s->gemm_bf16(Wb, C, r0, r1, X, T, ldx, Y0, ldy);
            k->gemm_bf16(Wb, C, r0, r1, X, T, ldx, Y1, ldy);
          } else if (kind == 1) {
            s->gemm_i8(Wq, sc, C, r0, r1, X, T, ldx, Y0, ldy);
            k->gemm_i8(Wq, sc, C, r0, r1, X, T, ldx, Y1, ldy);
          } else {
            s->gemm_f32(Wf, C, r0, r1, X, T, ldx, Y0, ldy);
            k->gemm_f32(Wf, C, r0, r1, X, T, ldx, Y1, ldy);
          }
          same_bits(Y1, Y0, ny, what, R, C, T);
        }
        free(Wb), free(Wq), free(Wf), free(sc), free(X), free(Y0), free(Y1);
      }
}

static void test_mxfp4(void **st) {
  const df_kern *k = table_or_skip(st), *s = df_kern_scalar();
  /* 3584: the real K3 width; 4128 (129 groups): wider than the rows the
   * avx512 GEMM path dequantises on its stack, so it takes the direct path */
  const int colsv[] = {32, 64, 96, 160, 352, 1056, 3584, 4128};
  for (size_t b = 0; b < sizeof colsv / sizeof *colsv; b++)
    for (size_t a = 0; a < sizeof ROWS / sizeof *ROWS; a++)
      for (int T = 1; T <= 9; T++) {
        int R = ROWS[a] + (colsv[b] >= 3584 ? 0 : 4), C = colsv[b], G = C / 32;
        if (C == 3584 && T > 5) continue; /* kept short */
        if (C == 4128 && (a > 4 || T == 6 || T == 8)) continue;
        int r0 = R > 2 ? irand(2) : 0, r1 = R > 2 ? R - irand(2) : R;
        size_t ldx = (size_t)C + (size_t)irand(3) * 8, ldy = (size_t)(r1 - r0) + (size_t)irand(3);
        size_t ny = (size_t)T * ldy;
        uint8_t *P = malloc((size_t)R * C / 2), *S = malloc((size_t)R * G);
        float *X = malloc((size_t)T * ldx * 4), *Y0 = malloc(ny * 4), *Y1 = malloc(ny * 4);
        for (int i = 0; i < R * C / 2; i++) P[i] = (uint8_t)irand(256);
        /* scales across the whole E8M0 range that cannot overflow: 0 is
         * 2^-127 (products go subnormal), 254 is 2^127 (with small x) */
        for (int i = 0; i < R * G; i++) {
          int v = irand(8);
          S[i] = (uint8_t)(v == 0 ? 0 : v == 1 ? 1 : v == 2 ? 200 : 100 + irand(50));
        }
        for (size_t i = 0; i < (size_t)T * ldx; i++) X[i] = fspecial() * 1e-3f;
        for (size_t i = 0; i < ny; i++) Y0[i] = Y1[i] = 12345.0f;
        s->gemm_mxfp4(P, S, C, r0, r1, X, T, ldx, Y0, ldy);
        k->gemm_mxfp4(P, S, C, r0, r1, X, T, ldx, Y1, ldy);
        same_bits(Y1, Y0, ny, "gemm_mxfp4", R, C, T);
        free(P), free(S), free(X), free(Y0), free(Y1);
      }
}

static void test_gemv_t(void **st) {
  const df_kern *k = table_or_skip(st), *s = df_kern_scalar();
  for (size_t a = 0; a < sizeof ROWS / sizeof *ROWS; a++)
    for (size_t b = 0; b < sizeof COLS / sizeof *COLS; b++) {
      int R = ROWS[a] + 3, C = COLS[b], r0 = irand(2), r1 = R - irand(3);
      uint16_t *Wb = malloc((size_t)R * C * 2);
      int8_t *Wq = malloc((size_t)R * C);
      float *sc = malloc((size_t)R * 4), *x = malloc((size_t)R * 4);
      float *y0 = malloc((size_t)C * 4), *y1 = malloc((size_t)C * 4);
      for (int i = 0; i < R * C; i++) Wb[i] = bf16_of(fspecial()), Wq[i] = (int8_t)(irand(256) - 128);
      for (int r = 0; r < R; r++) sc[r] = (frand() + 1.5f) / 127, x[r] = fspecial();
      s->gemv_t_bf16(Wb, C, r0, r1, x, y0);
      k->gemv_t_bf16(Wb, C, r0, r1, x, y1);
      same_bits(y1, y0, (size_t)C, "gemv_t_bf16", R, C, 1);
      s->gemv_t_i8(Wq, sc, C, r0, r1, x, y0);
      k->gemv_t_i8(Wq, sc, C, r0, r1, x, y1);
      same_bits(y1, y0, (size_t)C, "gemv_t_i8", R, C, 1);
      free(Wb), free(Wq), free(sc), free(x), free(y0), free(y1);
    }
}

static void test_vectors(void **st) {
  const df_kern *k = table_or_skip(st), *s = df_kern_scalar();
  enum { N = 1037 };
  float *x = malloc(N * 4), *w = malloc(N * 4), *g = malloc(N * 4), *u = malloc(N * 4);
  float *y0 = malloc(N * 4), *y1 = malloc(N * 4);
  for (int n = 1; n <= N; n += (n < 70 ? 1 : 97)) {
    for (int i = 0; i < n; i++)
      x[i] = fspecial() * 8, w[i] = fspecial(), g[i] = frand() * 30, u[i] = frand() * 80;
    float d0 = s->dot(x, w, n), d1 = k->dot(x, w, n);
    same_bits(&d1, &d0, 1, "dot", 1, n, 1);
    for (int wt = 0; wt < 2; wt++) {
      s->rmsnorm(y0, x, wt ? w : NULL, n, 1e-5f);
      k->rmsnorm(y1, x, wt ? w : NULL, n, 1e-5f);
      same_bits(y1, y0, (size_t)n, "rmsnorm", wt, n, 1);
    }
    memcpy(y0, x, (size_t)n * 4), memcpy(y1, x, (size_t)n * 4);
    s->rmsnorm(y0, y0, w, n, 1e-5f), k->rmsnorm(y1, y1, w, n, 1e-5f); /* in place */
    same_bits(y1, y0, (size_t)n, "rmsnorm in place", 1, n, 1);
    memcpy(y0, x, (size_t)n * 4), memcpy(y1, x, (size_t)n * 4);
    s->softmax(y0, n), k->softmax(y1, n);
    same_bits(y1, y0, (size_t)n, "softmax", 1, n, 1);
    memcpy(y0, x, (size_t)n * 4), memcpy(y1, x, (size_t)n * 4);
    s->sigmoid(y0, n), k->sigmoid(y1, n);
    same_bits(y1, y0, (size_t)n, "sigmoid", 1, n, 1);
    memcpy(y0, x, (size_t)n * 4), memcpy(y1, x, (size_t)n * 4);
    s->silu(y0, n), k->silu(y1, n);
    same_bits(y1, y0, (size_t)n, "silu", 1, n, 1);
    s->situ(y0, g, u, n, 4.0f, 25.0f), k->situ(y1, g, u, n, 4.0f, 25.0f);
    same_bits(y1, y0, (size_t)n, "situ", 1, n, 1);
  }
  free(x), free(w), free(g), free(u), free(y0), free(y1);
}

/* Several steps with the state carried over; the state and outputs must
 * stay bit-identical for every D, ragged ones included. */
static void test_kda(void **st) {
  const df_kern *k = table_or_skip(st), *s = df_kern_scalar();
  const int Ds[] = {1, 2, 5, 8, 13, 16, 17, 24, 31, 32, 33, 40, 48, 64, 65, 96, 128};
  for (size_t a = 0; a < sizeof Ds / sizeof *Ds; a++) {
    int D = Ds[a];
    size_t n = (size_t)D * D;
    float *S0 = calloc(n, 4), *S1 = calloc(n, 4);
    float q[128], kk[128], v[128], al[128], o0[128], o1[128], scr0[128], scr1[128];
    for (int step = 0; step < 7; step++) {
      for (int i = 0; i < D; i++)
        q[i] = frand(), kk[i] = frand() * 0.3f, v[i] = fspecial() * 2, al[i] = 0.5f + 0.5f * fabsf(frand());
      float beta = 0.5f + 0.4f * frand();
      s->kda_step(S0, q, kk, v, al, beta, o0, scr0, D);
      k->kda_step(S1, q, kk, v, al, beta, o1, scr1, D);
      same_bits(o1, o0, (size_t)D, "kda_step o", D, D, step);
      same_bits(S1, S0, n, "kda_step S", D, D, step);
    }
    free(S0), free(S1);
  }
}

/* Through the threaded drivers (1..3 threads) against the serial scalar
 * kernel: rows split, bits unchanged. */
static void test_threaded(void **st) {
  const df_kern *k = table_or_skip(st), *s = df_kern_scalar();
  int R = 301, C = 608, T = 7;
  uint16_t *W = malloc((size_t)R * C * 2);
  uint8_t *P = malloc((size_t)R * C / 2), *S = malloc((size_t)R * C / 32);
  float *X = malloc((size_t)T * C * 4), *Y = malloc((size_t)T * R * 4), *Yr = malloc((size_t)T * R * 4);
  for (int i = 0; i < R * C; i++) W[i] = bf16_of(frand());
  for (int i = 0; i < R * C / 2; i++) P[i] = (uint8_t)irand(256);
  for (int i = 0; i < R * C / 32; i++) S[i] = (uint8_t)(120 + irand(10));
  for (int i = 0; i < T * C; i++) X[i] = frand();
  df_wmat M = {.kind = DF_W_BF16, .rows = R, .cols = C, .w = W};
  for (int nth = 1; nth <= 3; nth++) {
    df_pool *pool = df_pool_create(nth);
    df_kctx kc = {.k = k, .pool = pool};
    for (int t = 1; t <= T; t += 3) {
      df_mm(&kc, &M, X, t, C, Y, R);
      s->gemm_bf16(W, C, 0, R, X, t, C, Yr, R);
      same_bits(Y, Yr, (size_t)t * R, "df_mm bf16", R, C, t);
      df_mm_mxfp4(&kc, 0, P, S, R, C, X, t, C, Y, R);
      s->gemm_mxfp4(P, S, C, 0, R, X, t, C, Yr, R);
      same_bits(Y, Yr, (size_t)t * R, "df_mm_mxfp4", R, C, t);
    }
    df_pool_destroy(pool);
  }
  free(W), free(P), free(S), free(X), free(Y), free(Yr);
}

/* Selection: forcing scalar gives the reference table; auto gives the
 * widest table this CPU supports. */
static void test_select(void **st) {
  (void)st;
  assert_ptr_equal(df_kern_select(1), df_kern_scalar());
  const df_kern *best = df_kern_by_name("auto");
  assert_non_null(best);
  if (df_kern_avx512()) assert_ptr_equal(best, df_kern_avx512());
  else if (df_kern_avx2()) assert_ptr_equal(best, df_kern_avx2());
  else if (df_kern_neon()) assert_ptr_equal(best, df_kern_neon());
  else assert_ptr_equal(best, df_kern_scalar());
  assert_null(df_kern_by_name("no-such-table"));
  printf("auto kernels on this CPU: %s (avx2 %s, avx512 %s, neon %s)\n", best->name,
         df_kern_avx2() ? "yes" : "no", df_kern_avx512() ? "yes" : "no", df_kern_neon() ? "yes" : "no");
}

#define ONE(fn, t) {#fn " [" t "]", fn, NULL, NULL, (void *)t}
#define FOR_TABLE(fn) ONE(fn, "avx2"), ONE(fn, "avx512"), ONE(fn, "neon")

int main(int argc, char **argv) {
  (void)argc;
  (void)argv; /* used only on x86 (the no-VBMI re-run) */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_select), FOR_TABLE(test_dense), FOR_TABLE(test_mxfp4),
      FOR_TABLE(test_gemv_t),        FOR_TABLE(test_vectors), FOR_TABLE(test_kda),
      FOR_TABLE(test_threaded),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  /* The avx512 table picks its MXFP4 code expansion once per process (VBMI
   * where the CPU has it, unless DF_AVX512_NO_VBMI is set); run the group
   * again in a child without VBMI so both variants are checked here. */
  __builtin_cpu_init();
  if (!getenv("DF_AVX512_NO_VBMI") && df_kern_avx512() && __builtin_cpu_supports("avx512vbmi")) {
    printf("again with DF_AVX512_NO_VBMI=1 (the avx512 table without VBMI)\n");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      setenv("DF_AVX512_NO_VBMI", "1", 1);
      execv("/proc/self/exe", argv);
      _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
      rc = rc ? rc : 1;
  }
#endif
  return rc;
}

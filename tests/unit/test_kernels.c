/* Kernels against naive double-precision references, plus the pinned
 * summation order (kernels.h) re-implemented here from its description, so a
 * SIMD table that claims the scalar order can be checked bit for bit.
 *
 * Tolerances (stated, derived, not tuned):
 *   dot products of n terms in fp32: |y - exact| <= (n/16 + 6) u sum|w_i x_i|
 *     with u = 2^-24 (each lane adds <= n/16 rounded terms, the tree 4 more,
 *     plus the product rounding; the standard gamma_k bound);
 *   row-int8 adds one rounding for the scale: (n/16 + 7) u sum|...|;
 *   elementwise functions (sigmoid, silu, SiTU, softmax, rmsnorm): 1e-6
 *     relative + 1e-7 absolute (libm expf/tanhf are within a few ulps);
 *   KDA over 6 steps with D = 16..40: 2e-5 relative to the largest |o|. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/pool.h"
#include "kernels/kernels.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static float frand(void) { return (float)((double)(next_u64() >> 11) / 9007199254740992.0 * 2 - 1); }
static int irand(int n) { return (int)(next_u64() % (uint64_t)n); }

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
static double bf16_d(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* E2M1 from its bit fields (sign, 2-bit exponent, 1-bit mantissa), not the table. */
static double e2m1_d(int code) {
  int s = code >> 3, e = (code >> 1) & 3, m = code & 1;
  double v = e == 0 ? m * 0.5 : ldexp(1.0 + m * 0.5, e - 1);
  return s ? -v : v;
}

/* The documented lane-16 order, written independently of the kernels. */
static float order_ref(const float *w, const float *x, int n) {
  float acc[16] = {0};
  for (int i = 0; i < n; i++) {
    volatile float p = w[i] * x[i];
    acc[i % 16] = acc[i % 16] + p;
  }
  for (int s = 8; s >= 1; s /= 2)
    for (int j = 0; j < s; j++) acc[j] = acc[j] + acc[j + s];
  return acc[0];
}

static const int ROWS[] = {1, 3, 17, 40};
static const int COLS[] = {1, 5, 16, 17, 31, 100, 257};
static const int TS[] = {1, 2, 5, 9};

static void check_bound(double got, double exact, double abssum, int n, int extra) {
  double bound = ((double)n / 16 + 6 + extra) * ldexp(1.0, -24) * abssum + 1e-30;
  if (fabs(got - exact) > bound) fail_msg("got %.9g exact %.12g |err| %.3g > bound %.3g (n=%d)", got, exact, fabs(got - exact), bound, n);
}

static void test_gemm_bf16(void **st) {
  (void)st;
  const df_kern *k = df_kern_scalar();
  for (size_t a = 0; a < sizeof ROWS / sizeof *ROWS; a++)
    for (size_t b = 0; b < sizeof COLS / sizeof *COLS; b++)
      for (size_t c = 0; c < sizeof TS / sizeof *TS; c++) {
        int R = ROWS[a], C = COLS[b], T = TS[c];
        size_t ldx = (size_t)C + 3, ldy = (size_t)R + 2;
        uint16_t *W = malloc(sizeof *W * R * C);
        float *X = malloc(sizeof *X * T * ldx), *Y = malloc(sizeof *Y * T * ldy);
        float *Y1 = malloc(sizeof *Y1 * R), *wf = malloc(sizeof *wf * C);
        for (int i = 0; i < R * C; i++) W[i] = to_bf16(frand() * 3);
        for (size_t i = 0; i < T * ldx; i++) X[i] = frand();
        k->gemm_bf16(W, C, 0, R, X, T, ldx, Y, ldy);
        for (int t = 0; t < T; t++) {
          k->gemm_bf16(W, C, 0, R, X + t * ldx, 1, ldx, Y1, 1); /* GEMV */
          for (int r = 0; r < R; r++) {
            double ex = 0, as = 0;
            for (int i = 0; i < C; i++) {
              wf[i] = (float)bf16_d(W[r * C + i]);
              ex += bf16_d(W[r * C + i]) * X[t * ldx + i];
              as += fabs(bf16_d(W[r * C + i]) * X[t * ldx + i]);
            }
            float y = Y[t * ldy + r];
            check_bound(y, ex, as, C, 0);
            assert_true(y == Y1[r]);                         /* batch == single vector */
            assert_true(y == order_ref(wf, X + t * ldx, C)); /* the pinned order */
          }
        }
        /* a row sub-range writes Y[t][r - r0] */
        if (R > 2) {
          k->gemm_bf16(W, C, 1, R - 1, X, 1, ldx, Y1, 1);
          assert_true(Y1[0] == Y[1]);
        }
        free(W), free(X), free(Y), free(Y1), free(wf);
      }
}

static void test_gemm_f32_i8(void **st) {
  (void)st;
  const df_kern *k = df_kern_scalar();
  for (size_t b = 0; b < sizeof COLS / sizeof *COLS; b++)
    for (size_t c = 0; c < sizeof TS / sizeof *TS; c++) {
      int R = 13, C = COLS[b], T = TS[c];
      float *Wf = malloc(sizeof *Wf * R * C), *sc = malloc(sizeof *sc * R);
      int8_t *Wq = malloc((size_t)R * C);
      float *X = malloc(sizeof *X * T * C), *Y = malloc(sizeof *Y * T * R),
            *Yq = malloc(sizeof *Yq * T * R), *wf = malloc(sizeof *wf * C);
      for (int i = 0; i < R * C; i++) Wf[i] = frand(), Wq[i] = (int8_t)(irand(255) - 127);
      for (int r = 0; r < R; r++) sc[r] = (frand() + 1.5f) / 127;
      for (int i = 0; i < T * C; i++) X[i] = frand();
      k->gemm_f32(Wf, C, 0, R, X, T, C, Y, R);
      k->gemm_i8(Wq, sc, C, 0, R, X, T, C, Yq, R);
      for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) {
          double ex = 0, as = 0, eq = 0, aq = 0;
          for (int i = 0; i < C; i++) {
            ex += (double)Wf[r * C + i] * X[t * C + i];
            as += fabs((double)Wf[r * C + i] * X[t * C + i]);
            eq += (double)Wq[r * C + i] * X[t * C + i];
            aq += fabs((double)Wq[r * C + i] * X[t * C + i]);
            wf[i] = Wq[r * C + i];
          }
          check_bound(Y[t * R + r], ex, as, C, 0);
          assert_true(Y[t * R + r] == order_ref(Wf + r * C, X + t * C, C));
          check_bound(Yq[t * R + r], eq * sc[r], aq * sc[r], C, 1);
          assert_true(Yq[t * R + r] == order_ref(wf, X + t * C, C) * sc[r]);
        }
      free(Wf), free(sc), free(Wq), free(X), free(Y), free(Yq), free(wf);
    }
}

static void test_gemm_mxfp4(void **st) {
  (void)st;
  const df_kern *k = df_kern_scalar();
  const int colsv[] = {32, 64, 96, 320};
  for (int e = 0; e < 16; e++) assert_true(df_kern_e2m1[e] == (float)e2m1_d(e));
  assert_true(df_ke8m0(127) == 1.0f && df_ke8m0(0) == (float)ldexp(1, -127) &&
              df_ke8m0(254) == (float)ldexp(1, 127));
  for (size_t b = 0; b < sizeof colsv / sizeof *colsv; b++)
    for (size_t c = 0; c < sizeof TS / sizeof *TS; c++) {
      int R = 11, C = colsv[b], T = TS[c], G = C / 32;
      uint8_t *P = malloc((size_t)R * C / 2), *S = malloc((size_t)R * G);
      float *Wd = malloc(sizeof *Wd * R * C), *X = malloc(sizeof *X * T * C);
      float *Y = malloc(sizeof *Y * T * R), *Yd = malloc(sizeof *Yd * T * R);
      for (int i = 0; i < R * C / 2; i++) P[i] = (uint8_t)irand(256);
      for (int i = 0; i < R * G; i++) S[i] = (uint8_t)(110 + irand(30));
      /* dequantise independently: low nibble = even column */
      for (int r = 0; r < R; r++)
        for (int i = 0; i < C; i++) {
          uint8_t by = P[r * C / 2 + i / 2];
          int code = (i & 1) ? by >> 4 : by & 15;
          Wd[r * C + i] = (float)(e2m1_d(code) * ldexp(1, S[r * G + i / 32] - 127));
        }
      for (int i = 0; i < T * C; i++) X[i] = frand();
      k->gemm_mxfp4(P, S, C, 0, R, X, T, C, Y, R);
      k->gemm_f32(Wd, C, 0, R, X, T, C, Yd, R);
      for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) {
          double ex = 0, as = 0;
          for (int i = 0; i < C; i++)
            ex += (double)Wd[r * C + i] * X[t * C + i], as += fabs((double)Wd[r * C + i] * X[t * C + i]);
          /* on codes == dequantise-then-multiply, bit for bit */
          assert_true(Y[t * R + r] == Yd[t * R + r]);
          check_bound(Y[t * R + r], ex, as, C, 0);
        }
      free(P), free(S), free(Wd), free(X), free(Y), free(Yd);
    }
}

static void test_gemv_t(void **st) {
  (void)st;
  const df_kern *k = df_kern_scalar();
  int R = 37, C = 45, r0 = 5, r1 = 30;
  uint16_t *Wb = malloc(sizeof *Wb * R * C);
  int8_t *Wq = malloc((size_t)R * C);
  float sc[37], x[37], y[45], yq[45];
  for (int i = 0; i < R * C; i++) Wb[i] = to_bf16(frand()), Wq[i] = (int8_t)(irand(255) - 127);
  for (int r = 0; r < R; r++) sc[r] = (frand() + 1.5f) / 127, x[r] = frand();
  k->gemv_t_bf16(Wb, C, r0, r1, x, y);
  k->gemv_t_i8(Wq, sc, C, r0, r1, x, yq);
  for (int c = 0; c < C; c++) {
    double ex = 0, as = 0, eq = 0, aq = 0;
    for (int r = r0; r < r1; r++) {
      ex += bf16_d(Wb[r * C + c]) * x[r - r0], as += fabs(bf16_d(Wb[r * C + c]) * x[r - r0]);
      eq += (double)Wq[r * C + c] * sc[r] * x[r - r0];
      aq += fabs((double)Wq[r * C + c] * sc[r] * x[r - r0]);
    }
    /* sequential sum of r1-r0 terms: gamma_(n+1) */
    double u = ldexp(1, -24);
    assert_true(fabs(y[c] - ex) <= (r1 - r0 + 2) * u * as);
    assert_true(fabs(yq[c] - eq) <= (r1 - r0 + 3) * u * aq);
  }
  free(Wb), free(Wq);
}

static void close_rel(double got, double ex) {
  if (fabs(got - ex) > 1e-6 * fabs(ex) + 1e-7) fail_msg("got %.9g expected %.12g", got, ex);
}

static double sigm_d(double x) { return 1 / (1 + exp(-x)); }

static void test_elementwise(void **st) {
  (void)st;
  const df_kern *k = df_kern_scalar();
  enum { N = 203 };
  float x[N], y[N], g[N], u[N], w[N];
  for (int i = 0; i < N; i++) x[i] = frand() * 12, g[i] = frand() * 30, u[i] = frand() * 80, w[i] = frand();
  x[0] = 100, x[1] = -100; /* saturation */
  memcpy(y, x, sizeof y);
  k->sigmoid(y, N);
  for (int i = 0; i < N; i++) close_rel(y[i], sigm_d(x[i]));
  memcpy(y, x, sizeof y);
  k->silu(y, N);
  for (int i = 0; i < N; i++) close_rel(y[i], x[i] * sigm_d(x[i]));
  k->situ(y, g, u, N, 4.0f, 25.0f);
  for (int i = 0; i < N; i++)
    close_rel(y[i], 4 * tanh(g[i] / 4.0) * sigm_d(g[i]) * 25 * tanh(u[i] / 25.0));
  for (int n = 1; n < N; n += 37) {
    memcpy(y, x, sizeof y);
    k->softmax(y, n);
    double m = x[0], s = 0;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    for (int i = 0; i < n; i++) s += exp(x[i] - m);
    for (int i = 0; i < n; i++) close_rel(y[i], exp(x[i] - m) / s);
    for (int wt = 0; wt < 2; wt++) {
      k->rmsnorm(y, x, wt ? w : NULL, n, 1e-5f);
      double ss = 0;
      for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
      double inv = 1 / sqrt(ss / n + 1e-5);
      for (int i = 0; i < n; i++) close_rel(y[i], x[i] * inv * (wt ? w[i] : 1.0));
    }
    /* in place */
    memcpy(y, x, sizeof y);
    k->rmsnorm(y, y, w, n, 1e-5f);
    float z[N];
    k->rmsnorm(z, x, w, n, 1e-5f);
    assert_memory_equal(y, z, sizeof(float) * n);
  }
  double ex = 0, as = 0;
  for (int i = 0; i < N; i++) ex += (double)x[i] * w[i], as += fabs((double)x[i] * w[i]);
  check_bound(k->dot(x, w, N), ex, as, N, 0);
  assert_true(k->dot(x, w, N) == order_ref(x, w, N));
}

static void test_kda_step(void **st) {
  (void)st;
  const df_kern *k = df_kern_scalar();
  for (int D = 16; D <= 40; D += 24) {
    float *S = calloc((size_t)D * D, sizeof *S);
    double *Sd = calloc((size_t)D * D, sizeof *Sd);
    float q[40], kk[40], v[40], al[40], o[40], scr[40];
    for (int step = 0; step < 6; step++) {
      for (int i = 0; i < D; i++) q[i] = frand(), kk[i] = frand() * 0.3f, v[i] = frand() * 2, al[i] = 0.5f + 0.5f * fabsf(frand());
      float beta = 0.5f + 0.4f * frand();
      k->kda_step(S, q, kk, v, al, beta, o, scr, D);
      double ud[40], od[40], om = 0;
      for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) Sd[i * D + j] *= al[i];
      for (int j = 0; j < D; j++) {
        ud[j] = 0;
        for (int i = 0; i < D; i++) ud[j] += Sd[i * D + j] * kk[i];
      }
      for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) Sd[i * D + j] += kk[i] * beta * (v[j] - ud[j]);
      for (int j = 0; j < D; j++) {
        od[j] = 0;
        for (int i = 0; i < D; i++) od[j] += Sd[i * D + j] * q[i];
        om = fmax(om, fabs(od[j]));
      }
      for (int j = 0; j < D; j++)
        if (fabs(o[j] - od[j]) > 2e-5 * om) fail_msg("kda D=%d step %d o[%d] %.9g vs %.9g", D, step, j, o[j], od[j]);
    }
    free(S), free(Sd);
  }
}

/* 1, 2 and 3 threads: bit-identical outputs (threads split rows only). */
static void test_threads(void **st) {
  (void)st;
  int R = 301, C = 608, T = 5;
  uint16_t *W = malloc(sizeof *W * R * C);
  uint8_t *P = malloc((size_t)R * C / 2), *S = malloc((size_t)R * C / 32);
  float *X = malloc(sizeof *X * T * C);
  float *Y[3], *Ym[3];
  for (int i = 0; i < R * C; i++) W[i] = to_bf16(frand());
  for (int i = 0; i < R * C / 2; i++) P[i] = (uint8_t)irand(256);
  for (int i = 0; i < R * C / 32; i++) S[i] = (uint8_t)(120 + irand(10));
  for (int i = 0; i < T * C; i++) X[i] = frand();
  df_wmat M = {.kind = DF_W_BF16, .rows = R, .cols = C, .w = W};
  for (int n = 1; n <= 3; n++) {
    df_pool *pool = df_pool_create(n);
    df_kctx kc = {.k = df_kern_select(1), .pool = pool};
    Y[n - 1] = malloc(sizeof(float) * T * R);
    Ym[n - 1] = malloc(sizeof(float) * T * R);
    df_mm(&kc, &M, X, T, C, Y[n - 1], R);
    df_mm_mxfp4(&kc, 0, P, S, R, C, X, T, C, Ym[n - 1], R);
    df_pool_destroy(pool);
  }
  for (int n = 1; n < 3; n++) {
    assert_memory_equal(Y[0], Y[n], sizeof(float) * T * R);
    assert_memory_equal(Ym[0], Ym[n], sizeof(float) * T * R);
  }
  /* and equal to the unthreaded kernel */
  float *Yk = malloc(sizeof(float) * T * R);
  df_kern_scalar()->gemm_bf16(W, C, 0, R, X, T, C, Yk, R);
  assert_memory_equal(Y[0], Yk, sizeof(float) * T * R);
  for (int n = 0; n < 3; n++) free(Y[n]), free(Ym[n]);
  free(Yk), free(W), free(P), free(S), free(X);
}

/* df_situ over 1-3 threads and df_ffn (the gated FFN the model runs) equal
 * the unthreaded steps bit for bit: SiTU's split over the pool (in chunks,
 * the last one short) changes no float. */
static void test_situ_ffn_threads(void **st) {
  (void)st;
  enum { H = 48, I = 40, T = 1100 }; /* T x I = 44000: two whole chunks and a short one */
  uint16_t *Wg = malloc(sizeof *Wg * I * H), *Wu = malloc(sizeof *Wu * I * H),
           *Wd = malloc(sizeof *Wd * H * I);
  for (int i = 0; i < I * H; i++) Wg[i] = to_bf16(frand()), Wu[i] = to_bf16(frand()), Wd[i] = to_bf16(frand());
  float *X = malloc(sizeof *X * T * H);
  for (int i = 0; i < T * H; i++) X[i] = 4 * frand();
  df_wmat G = {.kind = DF_W_BF16, .rows = I, .cols = H, .w = Wg};
  df_wmat U = {.kind = DF_W_BF16, .rows = I, .cols = H, .w = Wu};
  df_wmat D = {.kind = DF_W_BF16, .rows = H, .cols = I, .w = Wd};
  /* the reference: the kernel table's own steps, one thread */
  const df_kern *k = df_kern_select(1);
  float *g0 = malloc(sizeof(float) * T * I), *u0 = malloc(sizeof(float) * T * I),
        *y0 = malloc(sizeof(float) * T * H);
  k->gemm_bf16(Wg, H, 0, I, X, T, H, g0, I);
  k->gemm_bf16(Wu, H, 0, I, X, T, H, u0, I);
  k->situ(g0, g0, u0, T * I, 4.0f, 25.0f);
  k->gemm_bf16(Wd, I, 0, H, g0, T, I, y0, H);
  float *g = malloc(sizeof(float) * T * I), *u = malloc(sizeof(float) * T * I),
        *y = malloc(sizeof(float) * T * H), *s = malloc(sizeof(float) * T * I);
  for (int n = 1; n <= 3; n++) {
    df_pool *pool = df_pool_create(n);
    df_kctx kc = {.k = k, .pool = pool};
    memset(y, 0, sizeof(float) * T * H);
    df_ffn(&kc, &G, &U, &D, X, T, H, 4.0f, 25.0f, g, u, y, H);
    assert_memory_equal(y, y0, sizeof(float) * T * H);
    k->gemm_bf16(Wg, H, 0, I, X, T, H, g, I);
    df_situ(&kc, s, g, u0, (size_t)T * I, 4.0f, 25.0f);
    assert_memory_equal(s, g0, sizeof(float) * T * I);
    df_pool_destroy(pool);
  }
  free(Wg), free(Wu), free(Wd), free(X), free(g0), free(u0), free(y0), free(g), free(u), free(y), free(s);
}

/* The float64 table (--precision f64): the same loops on doubles, so the
 * same gamma_k bound with u = 2^-53 against long double sums; elementwise
 * functions within 1e-14; KDA against the double recurrence above within
 * 1e-12; df_mm64 over 1-3 threads bit-identical. Catches a float left in
 * the float64 loops (a float temporary is ~1e-7, far outside). */
static void check_bound64(double got, long double exact, long double abssum, int n) {
  long double bound = ((long double)n / 16 + 6) * ldexpl(1.0L, -53) * abssum + 1e-300L;
  if (fabsl((long double)got - exact) > bound)
    fail_msg("f64: got %.17g exact %.20Lg |err| %.3Lg > bound %.3Lg (n=%d)", got, exact,
             fabsl((long double)got - exact), bound, n);
}

static void test_scalar64(void **st) {
  (void)st;
  const df_kern64 *k = df_kern_scalar64();
  int R = 19, C = 96, T = 3, G = C / 32;
  uint16_t *W = malloc(sizeof *W * R * C);
  uint8_t *P = malloc((size_t)R * C / 2), *S = malloc((size_t)R * G);
  double *X = malloc(sizeof *X * T * C), *Y = malloc(sizeof *Y * T * R), *Ym = malloc(sizeof *Ym * T * R);
  for (int i = 0; i < R * C; i++) W[i] = to_bf16(frand() * 3);
  for (int i = 0; i < R * C / 2; i++) P[i] = (uint8_t)irand(256);
  for (int i = 0; i < R * G; i++) S[i] = (uint8_t)(110 + irand(30));
  for (int i = 0; i < T * C; i++) X[i] = (double)frand() + (double)frand() * 1e-9; /* not fp32 */
  k->gemm_bf16(W, C, 0, R, X, T, C, Y, R);
  k->gemm_mxfp4(P, S, C, 0, R, X, T, C, Ym, R);
  for (int t = 0; t < T; t++)
    for (int r = 0; r < R; r++) {
      long double ex = 0, as = 0, em = 0, am = 0;
      for (int i = 0; i < C; i++) {
        long double w = bf16_d(W[r * C + i]), x = X[t * C + i];
        uint8_t by = P[r * C / 2 + i / 2];
        long double wm = e2m1_d((i & 1) ? by >> 4 : by & 15) * ldexp(1, S[r * G + i / 32] - 127);
        ex += w * x, as += fabsl(w * x), em += wm * x, am += fabsl(wm * x);
      }
      check_bound64(Y[t * R + r], ex, as, C);
      check_bound64(Ym[t * R + r], em, am, C);
    }
  /* elementwise */
  double a[8], b[8], o[8];
  for (int i = 0; i < 8; i++) a[i] = 3 * frand(), b[i] = 30 * frand();
  memcpy(o, a, sizeof a);
  k->sigmoid(o, 8);
  for (int i = 0; i < 8; i++) assert_true(fabs(o[i] - 1 / (1 + exp(-a[i]))) < 1e-14);
  k->situ(o, a, b, 8, 4.0, 25.0);
  for (int i = 0; i < 8; i++) {
    double want = 4 * tanh(a[i] / 4) / (1 + exp(-a[i])) * 25 * tanh(b[i] / 25);
    assert_true(fabs(o[i] - want) < 1e-14 * (1 + fabs(want)));
  }
  float w1[8];
  for (int i = 0; i < 8; i++) w1[i] = 1.0f + 0.25f * (float)i;
  k->rmsnorm(o, a, w1, 8, 1e-5);
  double ms = 0;
  for (int i = 0; i < 8; i++) ms += a[i] * a[i] / 8;
  for (int i = 0; i < 8; i++) assert_true(fabs(o[i] - a[i] / sqrt(ms + 1e-5) * w1[i]) < 1e-14);
  /* threads split rows only */
  df_wmat M = {.kind = DF_W_BF16, .rows = R, .cols = C, .w = W};
  double *Yt = malloc(sizeof *Yt * T * R);
  for (int n = 1; n <= 3; n++) {
    df_pool *pool = df_pool_create(n);
    df_kctx kc = {.k = df_kern_scalar(), .k64 = k, .pool = pool};
    df_mm64(&kc, &M, X, T, C, Yt, R);
    assert_memory_equal(Yt, Y, sizeof *Y * T * R);
    df_mm_mxfp4_64(&kc, 0, P, S, R, C, X, T, C, Yt, R);
    assert_memory_equal(Yt, Ym, sizeof *Ym * T * R);
    df_pool_destroy(pool);
  }
  free(W), free(P), free(S), free(X), free(Y), free(Ym), free(Yt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm_bf16),   cmocka_unit_test(test_gemm_f32_i8),
      cmocka_unit_test(test_gemm_mxfp4),  cmocka_unit_test(test_gemv_t),
      cmocka_unit_test(test_elementwise), cmocka_unit_test(test_kda_step),
      cmocka_unit_test(test_threads),     cmocka_unit_test(test_scalar64),
      cmocka_unit_test(test_situ_ffn_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The scalar reference loops, written once for both activation types.
 * Included by kern_scalar.c with
 *   R        the activation type (float, or double for --precision f64)
 *   S(name)  the instance's function name
 *   EXP, SQRT, TANH  the math functions of R
 * Every loop keeps the lane-16 order of kernels.h; products go to a named
 * temporary before they are added so no compiler may fuse them into an FMA
 * (C forbids contraction across statements). The 16 lanes are independent,
 * so compilers may still vectorise these loops without changing a bit.
 * Weights are exact in either type (bf16, E2M1 x 2^k, int8, fp32). */

static inline R S(lane_reduce)(R *acc) {
  for (int w = L / 2; w >= 1; w >>= 1)
    for (int j = 0; j < w; j++) acc[j] += acc[j + w];
  return acc[0];
}

/* Accumulates the products of one block of up to 16 weights with nt vectors. */
static inline void S(acc_block)(R acc[TB][L], const R *wf, int n, const R *X, size_t ldx, int t0,
                                int nt, int i) {
  for (int tt = 0; tt < nt; tt++) {
    const R *x = X + (size_t)(t0 + tt) * ldx + i;
    for (int j = 0; j < n; j++) {
      R p = wf[j] * x[j];
      acc[tt][j] += p;
    }
  }
}

/* The dense GEMMs differ only in how a chunk of up to L weights becomes R
 * (exactly, in every case); the products, lanes and reduction are shared. */
static void S(gemm_dense)(dense_kind k, const void *W, const float *scale, int cols, int r0,
                          int r1, const R *X, int T, size_t ldx, R *Y, size_t ldy) {
  for (int r = r0; r < r1; r++) {
    size_t row = (size_t)r * cols;
    for (int t0 = 0; t0 < T; t0 += TB) {
      int nt = T - t0 < TB ? T - t0 : TB;
      R acc[TB][L];
      memset(acc, 0, sizeof acc);
      for (int i = 0; i < cols; i += L) {
        int n = cols - i < L ? cols - i : L;
        R wf[L];
        for (int j = 0; j < n; j++)
          wf[j] = k == DENSE_BF16 ? (R)df_kbf16(((const uint16_t *)W)[row + i + j])
                  : k == DENSE_F32 ? (R)((const float *)W)[row + i + j]
                                   : (R)((const int8_t *)W)[row + i + j];
        S(acc_block)(acc, wf, n, X, ldx, t0, nt, i);
      }
      for (int tt = 0; tt < nt; tt++) {
        R s = S(lane_reduce)(acc[tt]);
        Y[(size_t)(t0 + tt) * ldy + (r - r0)] = k == DENSE_I8 ? s * (R)scale[r] : s;
      }
    }
  }
}

static void S(gemm_bf16)(const uint16_t *W, int cols, int r0, int r1, const R *X, int T,
                         size_t ldx, R *Y, size_t ldy) {
  S(gemm_dense)(DENSE_BF16, W, NULL, cols, r0, r1, X, T, ldx, Y, ldy);
}

static void S(gemm_f32)(const float *W, int cols, int r0, int r1, const R *X, int T, size_t ldx,
                        R *Y, size_t ldy) {
  S(gemm_dense)(DENSE_F32, W, NULL, cols, r0, r1, X, T, ldx, Y, ldy);
}

static void S(gemm_i8)(const int8_t *W, const float *scale, int cols, int r0, int r1, const R *X,
                       int T, size_t ldx, R *Y, size_t ldy) {
  S(gemm_dense)(DENSE_I8, W, scale, cols, r0, r1, X, T, ldx, Y, ldy);
}

static void S(gemm_mxfp4)(const uint8_t *packed, const uint8_t *scales, int cols, int r0, int r1,
                          const R *X, int T, size_t ldx, R *Y, size_t ldy) {
  int ng = cols / 32;
  for (int r = r0; r < r1; r++) {
    const uint8_t *p = packed + (size_t)r * (cols / 2);
    const uint8_t *sc = scales + (size_t)r * ng;
    for (int t0 = 0; t0 < T; t0 += TB) {
      int nt = T - t0 < TB ? T - t0 : TB;
      R acc[TB][L];
      memset(acc, 0, sizeof acc);
      for (int g = 0; g < ng; g++) {
        float s = df_ke8m0(sc[g]);
        R wf[32];
        for (int j = 0; j < 16; j++) {
          uint8_t b = p[g * 16 + j];
          wf[2 * j] = (R)(df_kern_e2m1[b & 15] * s);
          wf[2 * j + 1] = (R)(df_kern_e2m1[b >> 4] * s);
        }
        S(acc_block)(acc, wf, L, X, ldx, t0, nt, g * 32);
        S(acc_block)(acc, wf + L, L, X, ldx, t0, nt, g * 32 + L);
      }
      for (int tt = 0; tt < nt; tt++)
        Y[(size_t)(t0 + tt) * ldy + (r - r0)] = S(lane_reduce)(acc[tt]);
    }
  }
}

static void S(gemv_t_bf16)(const uint16_t *W, int cols, int r0, int r1, const R *x, R *y) {
  for (int c = 0; c < cols; c++) y[c] = 0;
  for (int r = r0; r < r1; r++) {
    const uint16_t *w = W + (size_t)r * cols;
    R xr = x[r - r0];
    for (int c = 0; c < cols; c++) {
      R p = (R)df_kbf16(w[c]) * xr;
      y[c] += p;
    }
  }
}

static void S(gemv_t_i8)(const int8_t *W, const float *scale, int cols, int r0, int r1,
                         const R *x, R *y) {
  for (int c = 0; c < cols; c++) y[c] = 0;
  for (int r = r0; r < r1; r++) {
    const int8_t *w = W + (size_t)r * cols;
    R xr = (R)scale[r] * x[r - r0];
    for (int c = 0; c < cols; c++) {
      R p = (R)w[c] * xr;
      y[c] += p;
    }
  }
}

static R S(dot)(const R *a, const R *b, int n) {
  R acc[L] = {0};
  for (int i = 0; i < n; i += L) {
    int m = n - i < L ? n - i : L;
    for (int j = 0; j < m; j++) {
      R p = a[i + j] * b[i + j];
      acc[j] += p;
    }
  }
  return S(lane_reduce)(acc);
}

static void S(rmsnorm)(R *y, const R *x, const float *w, int n, R eps) {
  R ss = S(dot)(x, x, n);
  R inv = (R)1 / SQRT(ss / (R)n + eps);
  if (w)
    for (int i = 0; i < n; i++) {
      R t = x[i] * inv;
      y[i] = t * (R)w[i];
    }
  else
    for (int i = 0; i < n; i++) y[i] = x[i] * inv;
}

static void S(softmax)(R *x, int n) {
  R m = x[0];
  for (int i = 1; i < n; i++)
    if (x[i] > m) m = x[i];
  R sum = 0;
  for (int i = 0; i < n; i++) {
    x[i] = EXP(x[i] - m);
    sum += x[i];
  }
  for (int i = 0; i < n; i++) x[i] /= sum;
}

static inline R S(sigm)(R x) { return (R)1 / ((R)1 + EXP(-x)); }

static void S(sigmoid)(R *x, int n) {
  for (int i = 0; i < n; i++) x[i] = S(sigm)(x[i]);
}

static void S(silu)(R *x, int n) {
  for (int i = 0; i < n; i++) x[i] = x[i] * S(sigm)(x[i]);
}

static void S(situ)(R *out, const R *g, const R *u, int n, R bg, R bu) {
  for (int i = 0; i < n; i++) {
    R gate = bg * TANH(g[i] / bg);
    gate = gate * S(sigm)(g[i]);
    R up = bu * TANH(u[i] / bu);
    out[i] = gate * up;
  }
}

static void S(kda_step)(R *St, const R *q, const R *k, const R *v, const R *alpha, R beta, R *o,
                        R *scratch, int D) {
  R *u = scratch;
  for (int j = 0; j < D; j++) u[j] = 0;
  /* decay each key row, then u = S^T k (ascending key index) */
  for (int i = 0; i < D; i++) {
    R *row = St + (size_t)i * D;
    R a = alpha[i], ki = k[i];
    for (int j = 0; j < D; j++) {
      row[j] *= a;
      R p = row[j] * ki;
      u[j] += p;
    }
  }
  /* delta = beta (v - u); S += k delta^T; o = S^T q, read after the update */
  for (int j = 0; j < D; j++) u[j] = beta * (v[j] - u[j]);
  for (int j = 0; j < D; j++) o[j] = 0;
  for (int i = 0; i < D; i++) {
    R *row = St + (size_t)i * D;
    R ki = k[i], qi = q[i];
    for (int j = 0; j < D; j++) {
      R p = ki * u[j];
      row[j] += p;
      R r = row[j] * qi;
      o[j] += r;
    }
  }
}

/* CPU kernels: matrix products over bf16, row-int8, fp32 and MXFP4 weights,
 * norms, activations and the KDA recurrence step.
 *
 * Dispatch: a table of function pointers (df_kern). The scalar table is the
 * reference every SIMD table is tested against; df_kern_select picks the best
 * table this CPU supports unless the scalar one is forced (`--kernels scalar`).
 *
 * Summation order (pinned, so results never depend on threads or batching):
 *   Every dot product of length n, dot(w, x) = sum_i w_i x_i, is computed in
 *   the "lane-16" order: 16 fp32 accumulators, acc[j] sums the rounded
 *   products w_i * x_i for i = j (mod 16) in ascending i (no FMA: the product
 *   is rounded before it is added); then acc[j] += acc[j + w] for
 *   w = 8, 4, 2, 1 (j < w), and the result is acc[0]. Lanes that receive no
 *   element stay +0. This order is what a 16-wide (or 2 x 8, 4 x 4) SIMD loop
 *   with separate multiply and add computes, so vector variants can match the
 *   scalar one bit for bit; an FMA variant may differ and must then be tested
 *   against it within a stated tolerance.
 *   - bf16 weights: w_i = the exact fp32 value of the bf16.
 *   - MXFP4 weights: w_i = E2M1(code) * 2^(s-127), exact (a power-of-two
 *     scale), so computing on codes or on dequantised values is identical.
 *   - row-int8 weights: y_r = scale_r * dot(q_r, x), q_i as exact fp32.
 *   Transposed products (y_c = sum_r W[r][c] x_r, used to absorb MLA's kv_b
 *   into queries) sum over r in ascending order, one accumulator per c.
 *   Matrix x T-vectors (GEMM) computes each (row, vector) pair exactly as the
 *   single-vector GEMV does, so a prefill batch equals token-by-token decode.
 *   Threads split output rows, never a reduction.
 */
#ifndef DF_KERNELS_KERNELS_H
#define DF_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "base/pool.h"

#define DF_KLANES 16

typedef enum { DF_W_BF16 = 0, DF_W_I8 = 1, DF_W_F32 = 2 } df_wkind;

/* A weight matrix [rows][cols], row-major, y = W x. Never owns its data (it
 * points into an mmap'd shard). */
typedef struct df_wmat {
  df_wkind kind;
  int rows, cols;
  const void *w;      /* uint16 bf16 / int8 / float, rows * cols */
  const float *scale; /* row-int8: one scale per row */
  /* The matrix's identity for a device's weight tier (kgpu.h): two views
   * with one id hold the same bytes wherever they sit (a streamed layer's
   * ring slot holds what the resident mapping would), so a copy in GPU
   * memory is reused across passes. 0: none, copied on every use. */
  uint64_t id;
} df_wmat;

/* A fresh df_wmat id (process-wide, never 0, below 2^40 so expert keys,
 * which set bit 63, cannot collide with it). */
uint64_t df_wmat_new_id(void);

/* All GEMM entries compute rows [r0, r1) for the T vectors X[t * ldx + c] and
 * write Y[t * ldy + (r - r0)]. One field list serves both activation types:
 * df_kern (fp32 activations, every SIMD table) and df_kern64 (float64
 * activations, the scalar table only; --precision f64). Weights are the same
 * bytes in both, widened exactly.
 *   gemm_mxfp4: packed [rows][cols/2] (low nibble = even column), scales
 *     [rows][cols/32] E8M0 (255 rejected before use); cols % 32 == 0.
 *   gemv_t_*: y[c] = sum_{r in [r0,r1)} W[r][c] * x[r - r0] for c in [0, cols);
 *     int8: y[c] = sum_r q[r][c] * (scale[r] * x[r - r0]) (the scaled x rounded first).
 *   rmsnorm: y = x / sqrt(mean(x^2) + eps) * w (w NULL: no weight); y may equal x.
 *   situ: out = [bg * tanh(g/bg) * sigmoid(g)] * [bu * tanh(u/bu)] (kimi-k3.md 5.5).
 *   kda_step: one KDA step for one head (kimi-k3.md 5.2 step 6). S is D x D
 *     (key x value, row-major), alpha D decays, beta the head's scalar; o gets
 *     S^T q after the update. scratch: D values. */
#define DF_KERN_FIELDS(R)                                                                       \
  const char *name;                                                                             \
  void (*gemm_bf16)(const uint16_t *W, int cols, int r0, int r1, const R *X, int T, size_t ldx, \
                    R *Y, size_t ldy);                                                          \
  void (*gemm_i8)(const int8_t *W, const float *scale, int cols, int r0, int r1, const R *X,    \
                  int T, size_t ldx, R *Y, size_t ldy);                                         \
  void (*gemm_f32)(const float *W, int cols, int r0, int r1, const R *X, int T, size_t ldx,     \
                   R *Y, size_t ldy);                                                           \
  void (*gemm_mxfp4)(const uint8_t *packed, const uint8_t *scales, int cols, int r0, int r1,    \
                     const R *X, int T, size_t ldx, R *Y, size_t ldy);                          \
  void (*gemv_t_bf16)(const uint16_t *W, int cols, int r0, int r1, const R *x, R *y);           \
  void (*gemv_t_i8)(const int8_t *W, const float *scale, int cols, int r0, int r1, const R *x,  \
                    R *y);                                                                      \
  R (*dot)(const R *a, const R *b, int n);                                                      \
  void (*rmsnorm)(R * y, const R *x, const float *w, int n, R eps);                             \
  void (*softmax)(R * x, int n);                                                                \
  void (*sigmoid)(R * x, int n);                                                                \
  void (*silu)(R * x, int n);                                                                   \
  void (*situ)(R * out, const R *g, const R *u, int n, R bg, R bu);                             \
  void (*kda_step)(R * S, const R *q, const R *k, const R *v, const R *alpha, R beta, R *o,     \
                   R *scratch, int D);

typedef struct df_kern {
  DF_KERN_FIELDS(float)
} df_kern;

typedef struct df_kern64 {
  DF_KERN_FIELDS(double)
} df_kern64;

/* The float64 scalar table (kern_scalar.c, the same loops as the fp32 one). */
const df_kern64 *df_kern_scalar64(void);

const df_kern *df_kern_scalar(void);
/* The best table this CPU supports, or the scalar one when force_scalar.
 * Without force_scalar, the environment variable DF_KERNELS (auto, scalar,
 * avx2, avx512, neon) may name a table; an unavailable one is a warning and
 * auto is used. */
const df_kern *df_kern_select(int force_scalar);
/* SIMD tables (kern_avx2.c, kern_avx512.c, kern_neon.c); NULL when not built
 * for this architecture or not supported by this CPU. Each equals the scalar
 * table bit for bit (same lane-16 order, no FMA). */
const df_kern *df_kern_avx2(void);
const df_kern *df_kern_avx512(void);
const df_kern *df_kern_neon(void);
/* "scalar", "avx2", "avx512", "neon" or "auto"; NULL if unavailable here. */
const df_kern *df_kern_by_name(const char *name);

/* Exact conversions used by the kernels. */
static inline float df_kbf16(uint16_t h) {
  union {
    uint32_t u;
    float f;
  } v = {.u = (uint32_t)h << 16};
  return v.f;
}
static inline float df_ke8m0(uint8_t s) {
  union {
    uint32_t u;
    float f;
  } v = {.u = s ? (uint32_t)s << 23 : 0x00400000u}; /* s = 0 is 2^-127, a subnormal */
  return v.f;
}
extern const float df_kern_e2m1[16];

/* ---- threaded drivers: split output rows over the pool ---- */
struct df_kgpu;
typedef struct df_kctx {
  const df_kern *k;
  const df_kern64 *k64; /* the float64 drivers' table (NULL: df_kern_scalar64) */
  df_pool *pool;        /* NULL = serial */
  /* --device cuda: the fp32 df_mm* drivers run their products here (kgpu.h);
   * a product the GPU cannot take runs on the CPU, with the same bits.
   * NULL: the CPU. The float64 drivers never use it. */
  struct df_kgpu *gpu;
} df_kctx;

/* Y[t][r] = W X[t] for all rows. */
void df_mm(const df_kctx *kc, const df_wmat *W, const float *X, int T, size_t ldx, float *Y,
           size_t ldy);
/* Y[i][t][r] = W[i] X[t] for n matrices of the same columns: the same
 * floats as n df_mm calls; on a device, one copy of X in and of the results
 * out (kgpu.h's df_kgpu_mm_many). */
void df_mm_many(const df_kctx *kc, int n, const df_wmat *const *W, const float *X, int T,
                size_t ldx, float *const *Y, const size_t *ldy);
/* out = SiTU(g, u) elementwise (df_kern.situ) over n floats, split over
 * the pool's threads (the same floats). */
void df_situ(const df_kctx *kc, float *out, const float *g, const float *u, size_t n, float bg,
             float bu);
/* A gated FFN: Y[t] = down(SiTU(gate X[t], up X[t])) with SiTU's betas bg,
 * bu; G and U are T x gate->rows scratch for the CPU. On a device the whole
 * of it runs there, one copy in and out (kgpu.h's df_kgpu_ffn): the same
 * floats. */
void df_ffn(const df_kctx *kc, const df_wmat *gate, const df_wmat *up, const df_wmat *down,
            const float *X, int T, size_t ldx, float bg, float bu, float *G, float *U, float *Y,
            size_t ldy);
/* Rows [r0, r1) only; Y[t][r - r0]. */
void df_mm_rows(const df_kctx *kc, const df_wmat *W, int r0, int r1, const float *X, int T,
                size_t ldx, float *Y, size_t ldy);
/* id: the matrix's identity for a device tier (as df_wmat.id; 0 = none). */
void df_mm_mxfp4(const df_kctx *kc, uint64_t id, const uint8_t *packed, const uint8_t *scales,
                 int rows, int cols, const float *X, int T, size_t ldx, float *Y, size_t ldy);
/* Single-threaded helpers on a df_wmat (for use inside pool tasks). */
void df_wmat_rows(const df_kern *k, const df_wmat *W, int r0, int r1, const float *X, int T,
                  size_t ldx, float *Y, size_t ldy);
void df_wmat_t(const df_kern *k, const df_wmat *W, int r0, int r1, const float *x, float *y);
/* The same drivers on float64 activations (kctx->k64). */
void df_mm64(const df_kctx *kc, const df_wmat *W, const double *X, int T, size_t ldx, double *Y,
             size_t ldy);
void df_mm_rows64(const df_kctx *kc, const df_wmat *W, int r0, int r1, const double *X, int T,
                  size_t ldx, double *Y, size_t ldy);
void df_mm_mxfp4_64(const df_kctx *kc, uint64_t id, const uint8_t *packed, const uint8_t *scales,
                    int rows, int cols, const double *X, int T, size_t ldx, double *Y, size_t ldy);
void df_wmat_rows64(const df_kern64 *k, const df_wmat *W, int r0, int r1, const double *X, int T,
                    size_t ldx, double *Y, size_t ldy);
void df_wmat_t64(const df_kern64 *k, const df_wmat *W, int r0, int r1, const double *x,
                 double *y);
/* Row r of W as fp32 (embedding lookup). */
void df_wmat_row(const df_wmat *W, int r, float *out);

#endif

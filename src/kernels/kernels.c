/* Kernel dispatch and the threaded matrix drivers. Output rows are cut into
 * contiguous ranges, one per task; every output element is computed by the
 * same kernel code whatever the cut, so thread count never changes a bit. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#include "kernels/kernels.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* Preference order: the widest vectors this CPU runs. Every table computes
 * the same bits, so this choice only changes speed. */
static const df_kern *kern_best(void) {
  const df_kern *k;
  if ((k = df_kern_avx512())) return k;
  if ((k = df_kern_avx2())) return k;
  if ((k = df_kern_neon())) return k;
  return df_kern_scalar();
}

const df_kern *df_kern_by_name(const char *name) {
  if (!name || !strcmp(name, "auto")) return kern_best();
  if (!strcmp(name, "scalar")) return df_kern_scalar();
  if (!strcmp(name, "avx512")) return df_kern_avx512();
  if (!strcmp(name, "avx2")) return df_kern_avx2();
  if (!strcmp(name, "neon")) return df_kern_neon();
  return NULL;
}

const df_kern *df_kern_select(int force_scalar) {
  if (force_scalar) return df_kern_scalar();
  const char *env = getenv("DF_KERNELS");
  if (env && *env) {
    const df_kern *k = df_kern_by_name(env);
    if (k) return k;
    df_log_warn("DF_KERNELS=%s: no such kernel table on this CPU; using auto", env);
  }
  return kern_best();
}

void df_wmat_rows(const df_kern *k, const df_wmat *W, int r0, int r1, const float *X, int T,
                  size_t ldx, float *Y, size_t ldy) {
  switch (W->kind) {
  case DF_W_BF16: k->gemm_bf16(W->w, W->cols, r0, r1, X, T, ldx, Y, ldy); break;
  case DF_W_I8: k->gemm_i8(W->w, W->scale, W->cols, r0, r1, X, T, ldx, Y, ldy); break;
  case DF_W_F32: k->gemm_f32(W->w, W->cols, r0, r1, X, T, ldx, Y, ldy); break;
  }
}

void df_wmat_t(const df_kern *k, const df_wmat *W, int r0, int r1, const float *x, float *y) {
  switch (W->kind) {
  case DF_W_BF16: k->gemv_t_bf16(W->w, W->cols, r0, r1, x, y); break;
  case DF_W_I8: k->gemv_t_i8(W->w, W->scale, W->cols, r0, r1, x, y); break;
  case DF_W_F32: {
    const float *w = W->w;
    for (int c = 0; c < W->cols; c++) y[c] = 0.0f;
    for (int r = r0; r < r1; r++)
      for (int c = 0; c < W->cols; c++) {
        float p = w[(size_t)r * W->cols + c] * x[r - r0];
        y[c] += p;
      }
    break;
  }
  }
}

void df_wmat_row(const df_wmat *W, int r, float *out) {
  size_t base = (size_t)r * W->cols;
  switch (W->kind) {
  case DF_W_BF16: {
    const uint16_t *w = W->w;
    for (int c = 0; c < W->cols; c++) out[c] = df_kbf16(w[base + c]);
    break;
  }
  case DF_W_I8: {
    const int8_t *w = W->w;
    float s = W->scale[r];
    for (int c = 0; c < W->cols; c++) out[c] = (float)w[base + c] * s;
    break;
  }
  case DF_W_F32: {
    const float *w = W->w;
    for (int c = 0; c < W->cols; c++) out[c] = w[base + c];
    break;
  }
  }
}

typedef struct {
  const df_kern *k;
  const df_wmat *W;
  const uint8_t *packed, *scales; /* MXFP4 when packed != NULL */
  int cols, r0, r1, per;
  const float *X;
  int T;
  size_t ldx, ldy;
  float *Y;
} mm_job;

static void mm_task(void *ctx, int task, int thread) {
  (void)thread;
  const mm_job *j = ctx;
  int a = j->r0 + task * j->per, b = a + j->per;
  if (b > j->r1) b = j->r1;
  if (a >= b) return;
  float *Y = j->Y + (a - j->r0);
  if (j->packed)
    j->k->gemm_mxfp4(j->packed, j->scales, j->cols, a, b, j->X, j->T, j->ldx, Y, j->ldy);
  else
    df_wmat_rows(j->k, j->W, a, b, j->X, j->T, j->ldx, Y, j->ldy);
}

/* Task size: enough rows to amortise scheduling, several tasks per thread
 * so uneven threads balance out. */
static void mm_run(const df_kctx *kc, mm_job *j) {
  int rows = j->r1 - j->r0;
  if (rows <= 0) return;
  int nth = df_pool_size(kc->pool);
  long work = (long)rows * j->cols * (j->T > 0 ? j->T : 1);
  if (nth <= 1 || work < 32768) {
    j->per = rows;
    mm_task(j, 0, 0);
    return;
  }
  int ntasks = nth * 4;
  j->per = (rows + ntasks - 1) / ntasks;
  if (j->per < 8) j->per = 8;
  ntasks = (rows + j->per - 1) / j->per;
  df_pool_run(kc->pool, ntasks, mm_task, j);
}

void df_mm_rows(const df_kctx *kc, const df_wmat *W, int r0, int r1, const float *X, int T,
                size_t ldx, float *Y, size_t ldy) {
  mm_job j = {.k = kc->k, .W = W, .cols = W->cols, .r0 = r0, .r1 = r1, .X = X, .T = T,
              .ldx = ldx, .ldy = ldy, .Y = Y};
  mm_run(kc, &j);
}

void df_mm(const df_kctx *kc, const df_wmat *W, const float *X, int T, size_t ldx, float *Y,
           size_t ldy) {
  df_mm_rows(kc, W, 0, W->rows, X, T, ldx, Y, ldy);
}

void df_mm_mxfp4(const df_kctx *kc, const uint8_t *packed, const uint8_t *scales, int rows,
                 int cols, const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  mm_job j = {.k = kc->k, .packed = packed, .scales = scales, .cols = cols, .r0 = 0, .r1 = rows,
              .X = X, .T = T, .ldx = ldx, .ldy = ldy, .Y = Y};
  mm_run(kc, &j);
}

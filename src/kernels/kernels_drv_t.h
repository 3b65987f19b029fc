/* The threaded matrix drivers, written once for both activation types.
 * Included by kernels.c with R (float or double), KT (df_kern or df_kern64),
 * KSEL(kc) (the context's table of that type), N(name) (the instance's
 * public name) and the device hooks GPU_MM / GPU_MMX (kgpu.h's calls, 0 when
 * the product ran on the device; the float64 instance's are -1: never). */

void N(df_wmat_rows)(const KT *k, const df_wmat *W, int r0, int r1, const R *X, int T,
                     size_t ldx, R *Y, size_t ldy) {
  switch (W->kind) {
  case DF_W_BF16: k->gemm_bf16(W->w, W->cols, r0, r1, X, T, ldx, Y, ldy); break;
  case DF_W_I8: k->gemm_i8(W->w, W->scale, W->cols, r0, r1, X, T, ldx, Y, ldy); break;
  case DF_W_F32: k->gemm_f32(W->w, W->cols, r0, r1, X, T, ldx, Y, ldy); break;
  }
}

void N(df_wmat_t)(const KT *k, const df_wmat *W, int r0, int r1, const R *x, R *y) {
  switch (W->kind) {
  case DF_W_BF16: k->gemv_t_bf16(W->w, W->cols, r0, r1, x, y); break;
  case DF_W_I8: k->gemv_t_i8(W->w, W->scale, W->cols, r0, r1, x, y); break;
  case DF_W_F32: {
    const float *w = W->w;
    for (int c = 0; c < W->cols; c++) y[c] = 0;
    for (int r = r0; r < r1; r++)
      for (int c = 0; c < W->cols; c++) {
        R p = (R)w[(size_t)r * W->cols + c] * x[r - r0];
        y[c] += p;
      }
    break;
  }
  }
}

typedef struct {
  const KT *k;
  const df_wmat *W;
  const uint8_t *packed, *scales; /* MXFP4 when packed != NULL */
  int cols, r0, r1, per;
  const R *X;
  int T;
  size_t ldx, ldy;
  R *Y;
} N(mm_job);

static void N(mm_task)(void *ctx, int task, int thread) {
  (void)thread;
  const N(mm_job) *j = ctx;
  int a = j->r0 + task * j->per, b = a + j->per;
  if (b > j->r1) b = j->r1;
  if (a >= b) return;
  R *Y = j->Y + (a - j->r0);
  if (j->packed)
    j->k->gemm_mxfp4(j->packed, j->scales, j->cols, a, b, j->X, j->T, j->ldx, Y, j->ldy);
  else
    N(df_wmat_rows)(j->k, j->W, a, b, j->X, j->T, j->ldx, Y, j->ldy);
}

/* Task size: enough rows to amortise scheduling, several tasks per thread
 * so uneven threads balance out. */
static void N(mm_run)(const df_kctx *kc, N(mm_job) *j) {
  int rows = j->r1 - j->r0;
  if (rows <= 0) return;
  int nth = df_pool_size(kc->pool);
  long work = (long)rows * j->cols * (j->T > 0 ? j->T : 1);
  if (nth <= 1 || work < 32768) {
    j->per = rows;
    N(mm_task)(j, 0, 0);
    return;
  }
  int ntasks = nth * 4;
  j->per = (rows + ntasks - 1) / ntasks;
  if (j->per < 8) j->per = 8;
  ntasks = (rows + j->per - 1) / j->per;
  df_pool_run(kc->pool, ntasks, N(mm_task), j);
}

void N(df_mm_rows)(const df_kctx *kc, const df_wmat *W, int r0, int r1, const R *X, int T,
                   size_t ldx, R *Y, size_t ldy) {
  if (kc->gpu && GPU_MM(kc->gpu, W, r0, r1, X, T, ldx, Y, ldy) == 0) return;
  N(mm_job) j = {.k = KSEL(kc), .W = W, .cols = W->cols, .r0 = r0, .r1 = r1, .X = X, .T = T,
              .ldx = ldx, .ldy = ldy, .Y = Y};
  N(mm_run)(kc, &j);
}

void N(df_mm)(const df_kctx *kc, const df_wmat *W, const R *X, int T, size_t ldx, R *Y,
              size_t ldy) {
  N(df_mm_rows)(kc, W, 0, W->rows, X, T, ldx, Y, ldy);
}

void N(df_mm_mxfp4)(const df_kctx *kc, uint64_t id, const uint8_t *packed, const uint8_t *scales,
                    int rows, int cols, const R *X, int T, size_t ldx, R *Y, size_t ldy) {
  (void)id; /* the float64 instance has no device */
  if (kc->gpu && GPU_MMX(kc->gpu, id, packed, scales, rows, cols, X, T, ldx, Y, ldy) == 0) return;
  N(mm_job) j = {.k = KSEL(kc), .packed = packed, .scales = scales, .cols = cols, .r0 = 0, .r1 = rows,
              .X = X, .T = T, .ldx = ldx, .ldy = ldy, .Y = Y};
  N(mm_run)(kc, &j);
}

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
#include "kernels/kgpu.h"

uint64_t df_wmat_new_id(void) {
  static _Atomic uint64_t next = 1;
  return next++;
}

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

#define R float
#define KT df_kern
#define KSEL(kc) ((kc)->k)
#define N(name) name
#define GPU_MM df_kgpu_mm
#define GPU_MMX df_kgpu_mm_mxfp4
#include "kernels/kernels_drv_t.h"
#undef GPU_MM
#undef GPU_MMX
#undef R
#undef KT
#undef KSEL
#undef N

void df_mm_many(const df_kctx *kc, int n, const df_wmat *const *W, const float *X, int T,
                size_t ldx, float *const *Y, const size_t *ldy) {
  if (kc->gpu && df_kgpu_mm_many(kc->gpu, n, W, X, T, ldx, Y, ldy) == 0) return;
  for (int i = 0; i < n; i++) df_mm(kc, W[i], X, T, ldx, Y[i], ldy[i]);
}

/* SiTU is elementwise, so any split gives the same floats; it is the
 * costliest loop a gated FFN leaves on the CPU (two elementary functions an
 * element: a K3 dense layer's 512-row prefill is 9.4 M of them). */
#define SITU_CHUNK 16384
typedef struct {
  const df_kern *k;
  float *out;
  const float *g, *u;
  size_t n;
  float bg, bu;
} situ_job;
static void situ_task(void *ctx, int task, int thread) {
  (void)thread;
  const situ_job *j = ctx;
  size_t a = (size_t)task * SITU_CHUNK, n = j->n - a < SITU_CHUNK ? j->n - a : SITU_CHUNK;
  j->k->situ(j->out + a, j->g + a, j->u + a, (int)n, j->bg, j->bu);
}
void df_situ(const df_kctx *kc, float *out, const float *g, const float *u, size_t n, float bg,
             float bu) {
  size_t tasks = (n + SITU_CHUNK - 1) / SITU_CHUNK;
  if (!kc->pool || tasks < 2) {
    kc->k->situ(out, g, u, (int)n, bg, bu);
    return;
  }
  situ_job j = {kc->k, out, g, u, n, bg, bu};
  df_pool_run(kc->pool, (int)tasks, situ_task, &j);
}

void df_ffn(const df_kctx *kc, const df_wmat *gate, const df_wmat *up, const df_wmat *down,
            const float *X, int T, size_t ldx, float bg, float bu, float *G, float *U, float *Y,
            size_t ldy) {
  if (kc->gpu && df_kgpu_ffn(kc->gpu, gate, up, down, X, T, ldx, bg, bu, Y, ldy) == 0) return;
  size_t I = (size_t)gate->rows;
  df_mm_many(kc, 2, (const df_wmat *const[]){gate, up}, X, T, ldx, (float *const[]){G, U},
             (const size_t[]){I, I});
  df_situ(kc, G, G, U, I * (size_t)T, bg, bu);
  df_mm(kc, down, G, T, I, Y, ldy);
}

/* --precision f64 always runs the scalar float64 table. */
#define R double
#define KT df_kern64
#define KSEL(kc) ((kc)->k64 ? (kc)->k64 : df_kern_scalar64())
#define N(name) DF_64_##name
#define DF_64_df_wmat_rows df_wmat_rows64
#define DF_64_df_wmat_t df_wmat_t64
#define DF_64_df_mm_rows df_mm_rows64
#define DF_64_df_mm df_mm64
#define DF_64_df_mm_mxfp4 df_mm_mxfp4_64
#define DF_64_mm_job mm_job64
#define DF_64_mm_task mm_task64
#define DF_64_mm_run mm_run64
#define GPU_MM(...) -1
#define GPU_MMX(...) -1
#include "kernels/kernels_drv_t.h"
#undef R
#undef KT
#undef KSEL
#undef N

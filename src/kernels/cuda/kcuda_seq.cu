/* The sequence kernels (kcuda_seq.h) on the GPU: a KDA layer's conv and
 * recurrence, MLA's attention between its projections. Compiled with
 * kcuda.cu's flags (-fmad=false, IEEE division and square root, no flush to
 * zero), and every operation is written with the _rn intrinsics besides, so
 * each float is the one the scalar loops of kcuda_seq_ref.h round to.
 *
 * The recurrence is sequential in the rows, so the parallel axes are the
 * channels (the conv) and the heads (one block per head, its threads over
 * the head's D values); the rows run in order inside each thread or block.
 * MLA's (row, head) pairs are independent: one block each. */
#include <cuda_runtime.h>

#include <stdio.h>

extern "C" {
#include "kernels/cuda/kcuda_seq.h"
}
#include "kernels/cuda/kmath.h"
#include "kernels/cuda/kcuda_seq.cuh"
#include "kernels/cuda/kcuda_launch.cuh"

static thread_local char seq_err[256];

extern "C" const char *df_cuda_kda_error(void) { return seq_err; }

static int seq_fail(const char *what, const char *why) {
  snprintf(seq_err, sizeof seq_err, "%s: %s", what, why);
  return -1;
}

/* a kernel on the context's stream, dependent where the context says so
 * (kcuda.h's df_cuda_launch_dependent); 0, or -1 with seq_err */
template <class... P, class... A>
static int seq_go(df_cuda *c, const char *what, void (*k)(P...), dim3 grid, dim3 block,
                  size_t smem, A... args) {
  bool ok =
      df_launch(df_cuda_stream(c), df_cuda_launch_dependent(c), k, grid, block, smem, args...);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return seq_fail(what, cudaGetErrorString(e));
  df_cuda_launched(c, !ok);
  return 0;
}

extern "C" int df_cuda_kda(df_cuda *c, const df_cuda_kda_args *a) {
  int P = a->heads * a->D;
  if (a->T <= 0 || a->heads <= 0 || a->D <= 0) return 0;
  if (a->K < 1) return seq_fail("kda", "conv width below 1");
  int nt = (a->D + 31) / 32 * 32;
  if (nt > 256) nt = 256;
  size_t smem = sizeof(float) * (5 * (size_t)a->D + SEQ_LANES);
  if (smem > 48 * 1024) return seq_fail("kda", "head dimension too large for shared memory");
  /* on the context's stream: after the copies in, before the copies out */
  if (seq_go(c, "kda conv", kda_conv_k, (unsigned)((3L * P + 255) / 256), 256, 0, *a)) return -1;
  return seq_go(c, "kda heads", kda_heads_k, a->heads, nt, smem, *a);
}

extern "C" int df_cuda_mla_attn(df_cuda *c, const df_cuda_mla_args *a) {
  if (a->T <= 0 || a->heads <= 0) return 0;
  size_t smem = sizeof(float) * (size_t)(a->kr > 0 ? a->kr : 1);
  if (smem > 48 * 1024) return seq_fail("mla", "kv_lora_rank too large for shared memory");
  return seq_go(c, "mla attention", mla_attn_k, a->T * a->heads, 256, smem, *a);
}

extern "C" int df_cuda_mla_gate(df_cuda *c, float *o, float *g, size_t n) {
  if (!n) return 0;
  size_t blocks = (n + 255) / 256;
  return seq_go(c, "mla gate", mla_gate_k, (unsigned)(blocks > 65535 ? 65535 : blocks), 256, 0,
                o, g, n);
}

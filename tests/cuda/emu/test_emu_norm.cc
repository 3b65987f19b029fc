/* The GPU's lane-16 sums and the kernels on them (src/kernels/cuda/
 * kcuda_norm.cuh: rmsnorm over strided rows, AttnRes's scores, weighted
 * sum and norm, the block's softmax) run on the host through cuda_emu.h,
 * launched as df_cuda_rmsnorm_rows and df_cuda_attn_res launch them,
 * against the scalar reference (kcuda_seq_ref.h's df_attn_res_ref, the
 * scalar table's rmsnorm and softmax) bit for bit: K3's hidden size, rows
 * longer than one shared-memory chunk, one snapshot and twenty, a row
 * range of the pass's snapshots. No GPU needed (label unit); the same
 * kernels run on the GPU in gpu.test_cuda_kernels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda_emu.h"
#include "emu_check.h"

extern "C" {
#include "kernels/kernels.h"
}
#include "kernels/cuda/kcuda_norm.cuh"
#include "seq_ref.h"

#define RAND_BITS_SEED 0x94d049bb133111ebull
#include "../rand_bits.h"
#include "emu_data.h"

/* rows of n floats ld apart, each normed with weight w (or none) */
static void rmsnorm_case(int rows, int n, size_t ld, int weighted) {
  std::vector<float> x = emu_rnd_vec((size_t)rows * ld, -20, 20), w = emu_rnd_vec((size_t)n, -2, 1);
  std::vector<float> ref(x), got(x);
  const df_kern *k = df_kern_scalar();
  for (int r = 0; r < rows; r++)
    k->rmsnorm(&ref[(size_t)r * ld], &x[(size_t)r * ld], weighted ? w.data() : NULL, n, 1e-5f);
  emu_launch(dim3((unsigned)rows), dim3(VBLOCK), rmsnorm_k, got.data(), (const float *)x.data(),
             (const float *)(weighted ? w.data() : NULL), n, ld, 1e-5f);
  char what[96];
  snprintf(what, sizeof what, "rmsnorm %d rows of %d, ld %zu%s", rows, n, ld,
           weighted ? "" : ", no weight");
  emu_same(what, ref.data(), got.data(), ref.size());
}

/* softmax of n floats by one block, as df_cuda_softmax launches it */
static void softmax_case(int n, int lo, int hi) {
  std::vector<float> ref = emu_rnd_vec((size_t)n, lo, hi), got(ref);
  df_kern_scalar()->softmax(ref.data(), n);
  emu_launch(dim3(1), dim3(VBLOCK), softmax_k, got.data(), n);
  char what[64];
  snprintf(what, sizeof what, "softmax of %d, exponents %d..%d", n, lo, hi);
  emu_same(what, ref.data(), got.data(), (size_t)n);
}

/* T rows from row t0 of the pass's rows, nS snapshots */
static void attn_res_case(int nS, int rows, int t0, int T, int H) {
  size_t ss = (size_t)rows * H, n = (size_t)T * H;
  std::vector<float> snaps = emu_rnd_vec(nS ? nS * ss : 1, -6, 3), last = emu_rnd_vec(n, -5, 4);
  std::vector<float> rn = emu_rnd_vec((size_t)H, -2, 1), rp = emu_rnd_vec((size_t)H, -6, 0);
  std::vector<float> nw = emu_rnd_vec((size_t)H, -2, 1), tmp((size_t)(H + nS + 1));
  std::vector<float> ref(n), got(n), work(n);
  const float *sn = snaps.data() + (size_t)t0 * H;
  emu_attn_res_ref(ref.data(), sn, ss, nS, last.data(), T, H, rn.data(), rp.data(), nw.data(),
                  1e-6f, tmp.data());
  const float *x = last.data();
  if (nS > 0) {
    emu_launch(dim3((unsigned)nS + 1, (unsigned)T), dim3(VBLOCK), attn_scores_k, work.data(), sn,
               ss, nS, (const float *)last.data(), H, (const float *)rn.data(),
               (const float *)rp.data(), 1e-6f);
    emu_launch_dyn(dim3((unsigned)(H + VBLOCK - 1) / VBLOCK, (unsigned)T), dim3(VBLOCK),
                   sizeof(float) * (size_t)(nS + 1), attn_combine_k, got.data(),
                   (const float *)work.data(), sn, ss, nS, (const float *)last.data(), H);
    x = got.data();
  }
  emu_launch(dim3((unsigned)T), dim3(VBLOCK), rmsnorm_k, got.data(), x, (const float *)nw.data(),
             H, (size_t)H, 1e-6f);
  char what[96];
  snprintf(what, sizeof what, "attn res %d snapshots, rows %d..%d of %d, H %d", nS, t0, t0 + T,
           rows, H);
  emu_same(what, ref.data(), got.data(), n);
}

int main(void) {
  rmsnorm_case(1, 7168, 7168, 1);
  rmsnorm_case(3, 12345, 12350, 1); /* two chunks of shared memory */
  rmsnorm_case(4, 17, 20, 0);
  rmsnorm_case(2, 1, 1, 1);
  softmax_case(896, -3, 4); /* a router's scores */
  softmax_case(1, 0, 0);
  softmax_case(1000, -20, 6);
  attn_res_case(8, 1, 0, 1, 7168);
  attn_res_case(0, 1, 0, 1, 7168);
  attn_res_case(3, 6, 0, 6, 7168);
  attn_res_case(5, 41, 40, 1, 7168);
  attn_res_case(2, 5, 1, 3, 17);
  attn_res_case(20, 2, 0, 2, 100);
  attn_res_case(0, 1, 0, 1, 1);
  attn_res_case(1, 1, 0, 1, 2);
  attn_res_case(3, 2, 0, 2, 12345);
  return emu_summary();
}

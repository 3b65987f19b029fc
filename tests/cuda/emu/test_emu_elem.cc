/* The GPU's element-wise kernels, the single KDA step and the router's
 * top-k (src/kernels/cuda/kcuda_elem.cuh) run on the host through
 * cuda_emu.h, launched as kcuda.cu launches them (and on a grid too small
 * for n, so every grid-stride loop goes round), against the scalar
 * reference bit for bit: the scalar table's sigmoid, SiLU, SiTU and KDA
 * step, model/router.c's selection (ties to the lower id, a policy this
 * pins on the GPU side too), and kcuda_seq_ref.h's routed sum. No GPU
 * needed (label unit); on the GPU, gpu.test_cuda_kernels runs the same
 * kernels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda_emu.h"
#include "emu_check.h"

extern "C" {
#include "kernels/kernels.h"
#include "model/router.h"
}
#include "kernels/cuda/kcuda_norm.cuh" /* VBLOCK */
#include "kernels/cuda/kcuda_elem.cuh"
#include "seq_ref.h"

#define RAND_BITS_SEED 0xbf58476d1ce4e5b9ull
#include "../rand_bits.h"
#include "emu_data.h"

/* kcuda.cu's grid for n elements */
static unsigned grid_for(long n) {
  long b = (n + VBLOCK - 1) / VBLOCK;
  return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

/* which: 0 sigmoid, 1 silu, 2 situ; grid 0: kcuda.cu's */
static void vec_case(int which, int n, unsigned grid) {
  const df_kern *k = df_kern_scalar();
  std::vector<float> g = emu_rnd_vec((size_t)n, -10, 6), u = emu_rnd_vec((size_t)n, -10, 6);
  for (int i = 0; i < n; i++) g[i] = fmaxf(fminf(g[i], 80.0f), -80.0f);
  std::vector<float> ref(g), got(g), out((size_t)n + 1);
  dim3 gr(grid ? grid : grid_for(n));
  if (which < 2) {
    (which ? k->silu : k->sigmoid)(ref.data(), n);
    emu_launch(gr, dim3(VBLOCK), sigmoid_k, got.data(), n, which);
  } else {
    k->situ(ref.data(), g.data(), u.data(), n, 7.0f, 3.5f);
    emu_launch(gr, dim3(VBLOCK), situ_k, out.data(), (const float *)g.data(),
               (const float *)u.data(), n, 7.0f, 3.5f);
    got.assign(out.begin(), out.begin() + n);
  }
  static const char *const nm[] = {"sigmoid", "silu", "situ"};
  char what[64];
  snprintf(what, sizeof what, "%s n %d%s", nm[which], n, grid ? ", a small grid" : "");
  emu_same(what, ref.data(), got.data(), (size_t)n);
}

/* A MoE layer's routed sum (T rows, K slots each, from nY rows of n) and
 * the add after it. */
static void moe_combine_case(int T, int K, int n, int nY, unsigned grid) {
  size_t m = (size_t)T * n;
  std::vector<float> Y = emu_rnd_vec((size_t)nY * n, -10, 4), w = emu_rnd_vec((size_t)T * K, -4, 0);
  std::vector<float> b = emu_rnd_vec(m, -10, 4), ref(m), got(m, -1.0f);
  std::vector<int> rows((size_t)T * K);
  for (auto &r : rows) r = (int)(rnd() % (uint64_t)nY);
  emu_moe_combine_ref(ref.data(), Y.data(), rows.data(), w.data(), T, K, n);
  emu_launch(dim3(grid ? grid : grid_for((long)m)), dim3(VBLOCK), moe_combine_k, got.data(),
             (const float *)Y.data(), (const int *)rows.data(), (const float *)w.data(), T, K, n);
  char what[80];
  snprintf(what, sizeof what, "moe combine T %d K %d n %d%s", T, K, n, grid ? ", a small grid" : "");
  emu_same(what, ref.data(), got.data(), m);
  std::vector<float> sref(m), sgot(m);
  for (size_t i = 0; i < m; i++) sref[i] = ref[i] + b[i];
  emu_launch(dim3(grid ? grid : grid_for((long)m)), dim3(VBLOCK), add_k, sgot.data(),
             (const float *)got.data(), (const float *)b.data(), m);
  snprintf(what, sizeof what, "add n %zu%s", m, grid ? ", a small grid" : "");
  emu_same(what, sref.data(), sgot.data(), m);
}

/* H heads of D: the state after the step and the output */
static void kda_step_case(int H, int D) {
  size_t hd = (size_t)H * D, n = hd * D;
  std::vector<float> S = emu_rnd_vec(n, -6, 0), q = emu_rnd_vec(hd, -4, 0), k = emu_rnd_vec(hd, -4, 0);
  std::vector<float> v = emu_rnd_vec(hd, -3, 1), a(hd), b((size_t)H), o(hd), scr((size_t)D);
  for (auto &x : a) x = (float)(rnd() % 1000000) / 1000000.0f;
  for (auto &x : b) x = (float)(rnd() % 1000000) / 1000000.0f;
  std::vector<float> Sg(S), og(hd);
  for (int h = 0; h < H; h++)
    df_kern_scalar()->kda_step(&S[(size_t)h * D * D], &q[(size_t)h * D], &k[(size_t)h * D],
                               &v[(size_t)h * D], &a[(size_t)h * D], b[(size_t)h],
                               &o[(size_t)h * D], scr.data(), D);
  emu_launch(dim3((unsigned)H), dim3((unsigned)(D < 256 ? D : 256)), kda_step_k, Sg.data(),
             (const float *)q.data(), (const float *)k.data(), (const float *)v.data(),
             (const float *)a.data(), (const float *)b.data(), og.data(), D);
  char what[64];
  snprintf(what, sizeof what, "kda step %d heads x %d: state", H, D);
  emu_same(what, S.data(), Sg.data(), n);
  snprintf(what, sizeof what, "kda step %d heads x %d: output", H, D);
  emu_same(what, o.data(), og.data(), hd);
}

/* The router's top-k over rows of sigmoid scores; coarse scores (many
 * ties) when ties, so the lower id must win as model/router.c's does. */
static void router_case(int E, int K, int norm, int rows, int ties) {
  df_config c;
  memset(&c, 0, sizeof c);
  c.n_experts = E, c.top_k = K, c.norm_topk_prob = norm, c.routed_scale = 2.5f;
  size_t n = (size_t)rows * E, nk = (size_t)rows * K;
  std::vector<float> sc(n), bias((size_t)E), w(nk), wg(nk);
  std::vector<int> ids(nk), idg(nk, -1);
  for (auto &x : sc) x = ties ? (float)(rnd() % 8) / 8.0f : (float)(rnd() % 16777216) / 16777216.0f;
  for (auto &x : bias) x = ties ? 0.0f : rndf(-12, -6);
  for (int r = 0; r < rows; r++)
    df_router_select(&c, &sc[(size_t)r * E], bias.data(), &ids[(size_t)r * K], &w[(size_t)r * K]);
  emu_launch(dim3((unsigned)((rows + 63) / 64)), dim3(64), router_k, (const float *)sc.data(),
             (const float *)bias.data(), E, K, norm, 2.5f, rows, idg.data(), wg.data());
  char what[96];
  snprintf(what, sizeof what, "router %d experts top-%d%s%s rows %d: ids", E, K,
           norm ? " normalised" : "", ties ? " ties" : "", rows);
  checks++;
  if (ids != idg) {
    failures++;
    printf("FAIL %s\n", what);
  } else {
    printf("ok   %s\n", what);
  }
  snprintf(what, sizeof what, "router %d experts top-%d%s%s: weights", E, K,
           norm ? " normalised" : "", ties ? " ties" : "");
  emu_same(what, w.data(), wg.data(), nk);
}

int main(void) {
  for (int which = 0; which < 3; which++) {
    vec_case(which, 7168, 0); /* K3's hidden size */
    vec_case(which, 1001, 0); /* a partial block */
    vec_case(which, 3000, 2); /* two blocks for twelve blocks' worth */
  }
  moe_combine_case(1, 16, 1024, 40, 0); /* a decode row: K3's top-k, its latent */
  moe_combine_case(5, 3, 300, 9, 0);
  moe_combine_case(7, 2, 257, 5, 3);
  kda_step_case(4, 128); /* K3's head size */
  kda_step_case(3, 300); /* more columns than threads */
  kda_step_case(2, 17);
  router_case(896, 16, 1, 70, 0); /* K3's experts and top-k, rows past one block */
  router_case(896, 16, 0, 3, 0);
  router_case(64, 8, 1, 65, 1);
  router_case(5, 5, 1, 3, 1); /* every expert chosen */
  return emu_summary();
}

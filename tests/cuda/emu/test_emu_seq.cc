/* The GPU's sequence kernels (src/kernels/cuda/kcuda_seq.cuh: a KDA
 * layer's conv and per-head recurrence, MLA's attention and gate) run on
 * the host through cuda_emu.h, launched as kcuda_seq.cu launches them,
 * against kcuda_seq_ref.h's scalar loops bit for bit: every buffer the
 * kernels write (q, k, v, g, f, o, the state S and the conv window), a
 * state carried in, rows in one call and in two, K3's head sizes and odd
 * ones, kv_b in each format. No GPU needed (label unit); on the GPU,
 * gpu.test_cuda_seq runs the same kernels. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda_emu.h"
#include "emu_check.h"

#include "kernels/cuda/kcuda_seq.cuh"
#include "seq_ref.h"

#define RAND_BITS_SEED 0xd6e8feb86659fd93ull
#include "../rand_bits.h"
#include "emu_data.h"

/* kcuda_seq.cu's df_cuda_kda, on host memory */
static void emu_kda(const df_cuda_kda_args *a) {
  int P = a->heads * a->D, nt = (a->D + 31) / 32 * 32;
  if (nt > 256) nt = 256;
  emu_launch(dim3((unsigned)((3L * P + 255) / 256)), dim3(256), kda_conv_k, *a);
  emu_launch_dyn(dim3((unsigned)a->heads), dim3((unsigned)nt),
                 sizeof(float) * (5 * (size_t)a->D + SEQ_LANES), kda_heads_k, *a);
}

enum { B_Q, B_K, B_V, B_G, B_F, B_B, B_O, B_S, B_C, B_W, B_A, B_DT, B_ON, NB };
static const char *const bname[NB] = {"q", "k", "v", "g", "f", "b", "o", "S", "conv state",
                                      "conv w", "A_log", "dt_bias", "o_norm"};

/* the args over buffers b, rows [t0, t0 + T) */
static df_cuda_kda_args kda_args(std::vector<float> *b, int heads, int D, int K, int t0, int T) {
  size_t P = (size_t)heads * D, r = (size_t)t0 * P;
  df_cuda_kda_args a;
  memset(&a, 0, sizeof a);
  a.T = T, a.heads = heads, a.D = D, a.K = K, a.lb = -5.0f, a.eps = 1e-5f;
  a.q = b[B_Q].data() + r, a.k = b[B_K].data() + r, a.v = b[B_V].data() + r;
  a.g = b[B_G].data() + r, a.f = b[B_F].data() + r, a.b = b[B_B].data() + (size_t)t0 * heads;
  a.o = b[B_O].data() + r, a.S = b[B_S].data(), a.conv_st = b[B_C].data();
  a.conv_w = b[B_W].data(), a.A_log = b[B_A].data(), a.dt_bias = b[B_DT].data();
  a.o_norm = b[B_ON].data();
  return a;
}

/* A layer call's inputs in their usual ranges, a state already carried:
 * ref and got the same, n their sizes. */
static void kda_inputs(int heads, int D, int K, int T, std::vector<float> *ref,
                       std::vector<float> *got, size_t *n) {
  size_t P = (size_t)heads * D, t = (size_t)T;
  size_t sz[NB] = {t * P, t * P, t * P, t * P, t * P, t * heads, t * P, P * D,
                   3 * (size_t)(K - 1) * P, 3 * P * K, (size_t)heads, P, (size_t)D};
  static const int range[NB][2] = {{-4, 1}, {-4, 1}, {-4, 1}, {-3, 2}, {-3, 1}, {-3, 2}, {-1, 0},
                                   {-8, -1}, {-4, 1}, {-3, 0}, {-2, 1}, {-4, 0}, {-1, 0}};
  for (int i = 0; i < NB; i++) n[i] = sz[i], ref[i] = emu_rnd_vec(n[i], range[i][0], range[i][1]);
  for (size_t i = 0; i < n[B_ON]; i++) ref[B_ON][i] = 1.0f + ref[B_ON][i] / 4;
  for (int i = 0; i < NB; i++) got[i] = ref[i];
}

/* the kernels over T rows in one call (split 0) or two, the reference in
 * one */
static void kda_case(int heads, int D, int K, int T, int split) {
  std::vector<float> ref[NB], got[NB];
  size_t n[NB];
  kda_inputs(heads, D, K, T, ref, got, n);
  if (split > 0) {
    df_cuda_kda_args a0 = kda_args(got, heads, D, K, 0, split);
    df_cuda_kda_args a1 = kda_args(got, heads, D, K, split, T - split);
    emu_kda(&a0), emu_kda(&a1);
  } else {
    df_cuda_kda_args a = kda_args(got, heads, D, K, 0, T);
    emu_kda(&a);
  }
  df_cuda_kda_args r = kda_args(ref, heads, D, K, 0, T);
  emu_kda_ref(&r);
  for (int i = 0; i < NB; i++) {
    if (i == B_B || i >= B_W) continue; /* inputs only */
    char what[128];
    snprintf(what, sizeof what, "kda %d heads x %d, conv %d, T %d%s: %s", heads, D, K, T,
             split > 0 ? " in two calls" : "", bname[i]);
    emu_same(what, ref[i].data(), got[i].data(), n[i]);
  }
}

/* Speculation's per-row states (df_cuda_kda_args.nrow): one call of T
 * rows writing the first nrow rows' states, against the reference run a
 * row at a time with S and the conv windows copied after each row, so
 * what is checked is "the state after row t", not the reference's own
 * copy-out. The blocks are padded (rconv and rstride off any round
 * size) and the padding must stay as it was. */
static void kda_rows_case(int heads, int D, int K, int T, int nrow) {
  std::vector<float> ref[NB], got[NB];
  size_t n[NB];
  kda_inputs(heads, D, K, T, ref, got, n);
  size_t nS = n[B_S], nc = n[B_C], rconv = nS + 3, rstride = rconv + nc + 5;
  std::vector<float> want((size_t)nrow * rstride, -7.25f), rows = want;
  df_cuda_kda_args a = kda_args(got, heads, D, K, 0, T);
  a.nrow = nrow, a.rows = rows.data(), a.rstride = rstride, a.rconv = rconv;
  emu_kda(&a);
  for (int r = 0; r < T; r++) {
    df_cuda_kda_args one = kda_args(ref, heads, D, K, r, 1);
    emu_kda_ref(&one);
    if (r >= nrow) continue;
    memcpy(&want[(size_t)r * rstride], ref[B_S].data(), sizeof(float) * nS);
    memcpy(&want[(size_t)r * rstride + rconv], ref[B_C].data(), sizeof(float) * nc);
  }
  char what[128];
  snprintf(what, sizeof what, "kda %d heads x %d, conv %d, T %d, %d row states", heads, D, K, T,
           nrow);
  emu_same(what, want.data(), rows.data(), want.size());
  for (int i = 0; i < NB; i++) {
    if (i == B_B || i >= B_W) continue;
    snprintf(what, sizeof what, "kda %d heads x %d, conv %d, T %d, %d row states: %s", heads, D,
             K, T, nrow, bname[i]);
    emu_same(what, ref[i].data(), got[i].data(), n[i]);
  }
}

/* MLA attention between its projections in kv_b's format wkind (0 bf16,
 * 1 int8, 2 f32), then the gate */
static void mla_case(int heads, int dn, int dr, int dv, int kr, int n0, int T, int wkind) {
  size_t rows = (size_t)heads * (dn + dv), nw = rows * kr, ntot = (size_t)n0 + T;
  size_t nq = (size_t)T * heads * (dn + dr), nc = ntot * (kr + dr), nl = (size_t)T * heads * kr;
  size_t ns = (size_t)T * heads * ntot, esz = wkind == 0 ? 2 : wkind == 1 ? 1 : 4;
  std::vector<uint8_t> w(nw * esz);
  for (size_t i = 0; i < nw; i++) {
    if (wkind == 1) {
      w[i] = (uint8_t)rnd();
      continue;
    }
    float f = rndf(-8, -2);
    uint32_t u;
    memcpy(&u, &f, 4);
    if (wkind == 0) {
      uint16_t h = (uint16_t)(u >> 16);
      memcpy(&w[2 * i], &h, 2);
    } else
      memcpy(&w[4 * i], &f, 4);
  }
  std::vector<float> scale = emu_rnd_vec(rows, -10, -6), q = emu_rnd_vec(nq, -3, 1), cache = emu_rnd_vec(nc, -3, 1);
  std::vector<float> olat(nl), og(nl), sc(ns), sc2(ns);
  df_cuda_mla_args a;
  memset(&a, 0, sizeof a);
  a.T = T, a.heads = heads, a.n0 = n0, a.dn = dn, a.dr = dr, a.dv = dv, a.kr = kr, a.wkind = wkind;
  a.w = w.data(), a.wscale = scale.data(), a.q = q.data(), a.cache = cache.data();
  a.olat = og.data(), a.sc = sc2.data();
  emu_launch_dyn(dim3((unsigned)(T * heads)), dim3(256), sizeof(float) * (size_t)(kr > 0 ? kr : 1),
                 mla_attn_k, a);
  df_cuda_mla_args r = a;
  r.olat = olat.data(), r.sc = sc.data();
  emu_mla_ref_attn(&r);
  static const char *const kn[] = {"bf16", "int8", "f32"};
  char what[160];
  snprintf(what, sizeof what, "mla %d heads, nope %d rope %d v %d latent %d, %d + %d positions, %s: olat",
           heads, dn, dr, dv, kr, n0, T, kn[wkind]);
  emu_same(what, olat.data(), og.data(), nl);
  size_t no = (size_t)T * heads * dv;
  std::vector<float> o = emu_rnd_vec(no, -3, 1), g = emu_rnd_vec(no, -3, 2), o2 = o, g2 = g;
  size_t blocks = (no + 255) / 256;
  emu_launch(dim3((unsigned)(blocks > 65535 ? 65535 : blocks)), dim3(256), mla_gate_k, o2.data(),
             g2.data(), no);
  emu_mla_ref_gate(o.data(), g.data(), no);
  snprintf(what, sizeof what, "mla gate, %zu values: output", no);
  emu_same(what, o.data(), o2.data(), no);
  snprintf(what, sizeof what, "mla gate, %zu values: sigmoid", no);
  emu_same(what, g.data(), g2.data(), no);
}

int main(void) {
  kda_case(4, 128, 4, 1, 0);  /* K3's head size, a decode row */
  kda_case(3, 128, 4, 7, 3);  /* rows in two calls */
  kda_case(3, 17, 4, 5, 0);   /* a head size off the warp */
  kda_case(2, 1, 1, 3, 0);    /* no conv window */
  kda_case(2, 300, 2, 2, 0);  /* more values than threads */
  kda_rows_case(3, 128, 4, 5, 5); /* a verify pass: every row's state */
  kda_rows_case(2, 17, 4, 6, 3);  /* rows past the marks */
  kda_rows_case(2, 300, 2, 3, 2); /* columns a thread owns more than one of */
  kda_rows_case(2, 8, 1, 3, 3);   /* no conv window */
  for (int wk = 0; wk < 3; wk++) {
    mla_case(2, 128, 64, 128, 512, 5, 2, wk); /* K3's MLA dims */
    mla_case(3, 7, 3, 5, 20, 0, 4, wk);
  }
  mla_case(1, 16, 8, 16, 300, 260, 1, 1); /* more positions than threads */
  return emu_summary();
}

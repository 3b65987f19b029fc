/* The GPU's GEMVs (src/kernels/cuda/kcuda_gemv.cuh) run on the host
 * through cuda_emu.h: the row tiles (the default for bf16, int8 and MXFP4)
 * in every variant the launch picks from (2 and 3 stages, deep, deep with
 * two and four threads a row), with the loads the operands' alignment
 * allows and element by element, single and grouped; the lanes layout with
 * 8, 4 and 2 lanes a thread in every format, against the scalar
 * reference's GEMV bit for bit: K3-like rows, rows ending mid-block,
 * chunks and steps cut short, unaligned weights and x. The bytes around
 * each y must stay untouched. Every row-tile launch also sees memory as a
 * dependent launch would (pdl_guard). No GPU needed (label unit); on the GPU,
 * gpu.test_cuda_kernels runs the same kernels. */
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
#include "kernels/cuda/kcuda_gemv.cuh"

#define RAND_BITS_SEED 0xbf58476d1ce4e5b9ull
#include "../rand_bits.h"
#include "emu_data.h"

static const char *fname[] = {"bf16", "int8", "f32", "mxfp4"};

/* one matrix: weights (and scales) in the release's layouts, x, and the
 * reference's y */
struct mat {
  int fmt, rows, cols;
  std::vector<uint8_t> wbuf, sbuf;
  std::vector<float> xbuf, ref;
  const uint8_t *W, *S;
  const float *x;
};

/* wshift / xshift: bytes / floats off 16-byte alignment */
static void mkmat(mat &m, int fmt, int rows, int cols, int wshift, int xshift) {
  m.fmt = fmt, m.rows = rows, m.cols = cols;
  std::vector<uint8_t> w0;
  emu_weights(fmt, rows, cols, w0, m.sbuf);
  m.sbuf.resize(m.sbuf.size() + 16);
  m.wbuf.assign(w0.size() + 32, 0);
  uint8_t *w = (uint8_t *)(((uintptr_t)m.wbuf.data() + 15) & ~(uintptr_t)15) + wshift;
  memcpy(w, w0.data(), w0.size());
  m.xbuf.assign((size_t)cols + 8, 0.0f);
  float *x = (float *)(((uintptr_t)m.xbuf.data() + 15) & ~(uintptr_t)15) + xshift;
  for (int i = 0; i < cols; i++) x[i] = rndf(-6, 2);
  m.W = w, m.S = fmt == 1 || fmt == 3 ? m.sbuf.data() : NULL, m.x = x;
  m.ref.assign((size_t)rows, 0.0f);
  const df_kern *k = df_kern_scalar();
  if (fmt == 0) k->gemm_bf16((const uint16_t *)w, cols, 0, rows, x, 1, (size_t)cols, m.ref.data(), (size_t)rows);
  else if (fmt == 2) k->gemm_f32((const float *)w, cols, 0, rows, x, 1, (size_t)cols, m.ref.data(), (size_t)rows);
  else if (fmt == 1)
    k->gemm_i8((const int8_t *)w, (const float *)m.S, cols, 0, rows, x, 1, (size_t)cols, m.ref.data(), (size_t)rows);
  else k->gemm_mxfp4(w, m.S, cols, 0, rows, x, 1, (size_t)cols, m.ref.data(), (size_t)rows);
}

/* fused: MXFP4's fused form asked for (TILE_FMA, as kcuda.cu asks by
 * default), which the kernel takes where x and the scales allow */
template <class TF> static int flags_of(const mat &m, unsigned pf = 0, bool fused = false) {
  return tile_flags<TF>(m.W, m.S, m.cols, m.x, pf) | (fused ? TILE_FMA : 0);
}


/* y with 4 guard floats either side, NaN patterns, as the device test does */
static void check(const char *what, const mat &m, const std::vector<float> &yb) {
  uint32_t pat = 0xffffffffu;
  size_t outside = 0;
  for (int i = 0; i < 4; i++)
    outside += (size_t)(memcmp(&yb[(size_t)i], &pat, 4) != 0) +
               (size_t)(memcmp(&yb[4 + (size_t)m.rows + i], &pat, 4) != 0);
  emu_same(what, m.ref.data(), yb.data() + 4, (size_t)m.rows, outside);
}

/* A row-tile launch with TILE_DEP runs as a dependent launch sees its
 * memory (kcuda_pdl.cuh): each block starts with every x NaN, as if the
 * kernel before it had not written them yet, and gets them at its first
 * pdl_wait; no y may change before then, and every thread must wait
 * exactly once (without TILE_DEP too). A read of x before the wait makes y
 * NaN, which the comparison catches. */
struct pdl_guard {
  struct span {
    float *p;
    std::vector<float> real;
  };
  std::vector<span> xs;
  std::vector<span> ys; /* snapshots at each block's start */
  long early = 0;
  bool on;
  explicit pdl_guard(bool dep) : on(dep) {
    emu_pdl_waits = 0;
    if (!on) return;
    emu_on_block = [this] {
      for (span &x : xs)
        for (size_t i = 0; i < x.real.size(); i++) x.p[i] = NAN;
      for (span &y : ys) memcpy(y.real.data(), y.p, y.real.size() * 4);
    };
    emu_on_pdl_wait = [this] {
      for (span &x : xs) memcpy(x.p, x.real.data(), x.real.size() * 4);
      for (span &y : ys) early += memcmp(y.real.data(), y.p, y.real.size() * 4) != 0;
    };
  }
  void x(const float *p, int n) { xs.push_back(span{(float *)p, std::vector<float>(p, p + n)}); }
  void y(float *p, int n) { ys.push_back(span{p, std::vector<float>((size_t)n)}); }
  /* threads: the launch's; puts x back */
  void finish(const char *what, long threads) {
    for (span &x : xs) memcpy(x.p, x.real.data(), x.real.size() * 4);
    emu_on_block = nullptr, emu_on_pdl_wait = nullptr;
    char w[240], seen[120];
    snprintf(w, sizeof w, "%s: %s", what,
             on ? "as a dependent launch (x only from pdl_wait, y untouched before it)"
                : "every thread waits once");
    snprintf(seen, sizeof seen, "%ld pdl_waits for %ld threads, y written before the wait in %ld blocks",
             emu_pdl_waits, threads, early);
    emu_true(w, emu_pdl_waits == threads && early == 0, seen);
  }
};

/* launched as kcuda.cu's tile_launch launches variant v; pf the L2
 * prefetch window (a no-op here, but its bookkeeping runs) */
template <class TF>
static void run_variant(int v, const mat &m, float *y, const float *rs, unsigned pf, bool dep,
                        bool fused) {
  int fl = flags_of<TF>(m, pf, fused) | (dep ? TILE_DEP : 0);
  pdl_guard pg(dep);
  pg.x(m.x, m.cols), pg.y(y, m.rows);
  long threads = 0;
  tile_variant<TF>(v, [&](auto t) {
    typedef decltype(t) V;
    unsigned nb = (unsigned)((m.rows + V::rows - 1) / V::rows);
    threads = (long)nb * V::threads;
    emu_launch_dyn(dim3(nb), dim3(V::threads), V::smem(), tile_k<typename V::F, V::NS, V::G, V::NW>, m.W, m.S,
                   m.rows, m.cols, m.x, y, rs, fl);
  });
  char what[160];
  snprintf(what, sizeof what, "gemv %s %d x %d, %s, prefetch %u%s%s", fname[TF::fmt], m.rows,
           m.cols, df_cuda_tile_name(v), pf, dep ? ", dependent" : "", fused ? ", fused" : "");
  pg.finish(what, threads);
}

/* every variant, with and without the L2 prefetch and as a dependent
 * launch; MXFP4 with its fused form asked for and not */
template <class TF> static void gemv_mat(const mat &m, const char *label) {
  const float *rs = TF::fmt == 1 ? (const float *)m.S : NULL;
  for (int v = 0; v < TILE_VARIANTS; v++)
    for (int k = 0; k < (TF::fmt == 3 ? 8 : 4); k++) {
      unsigned pf = k & 1 ? 1024 : 0;
      bool dep = k & 2, fused = k & 4;
      std::vector<float> yb((size_t)m.rows + 8);
      memset(yb.data(), 0xff, yb.size() * 4);
      run_variant<TF>(v, m, yb.data() + 4, rs, pf, dep, fused);
      char what[200];
      snprintf(what, sizeof what, "gemv %s %d x %d, %s, flags %d, %s", fname[TF::fmt], m.rows, m.cols,
               label, flags_of<TF>(m, pf, fused) | (dep ? TILE_DEP : 0), df_cuda_tile_name(v));
      check(what, m, yb);
    }
}
template <class TF> static void gemv_case(int rows, int cols, int wshift, int xshift) {
  mat m;
  mkmat(m, TF::fmt, rows, cols, wshift, xshift);
  char label[64];
  snprintf(label, sizeof label, "weights +%d, x +%d", wshift, xshift);
  gemv_mat<TF>(m, label);
}

/* MXFP4 at the edges of the float range, on 1024 columns (four chunks
 * of the narrow form, one of the wide): x huge, tiny, subnormal, infinite
 * and NaN, a chunk of signed zeros, products below the smallest normal
 * float, and scales up to 254, where the reference's weights and products
 * overflow. Every row must be the reference's bit for bit, and NaN exactly
 * where the reference's is (emu_check.h: a NaN's own bits are the
 * machine's): the GPU's order of operations, not only its arithmetic, is
 * the CPU's. With the fused form asked for (the default), the cases at its
 * bounds (kcuda_gemv.cuh: tile_xscale, tile_fused_s) take it just inside
 * and must leave it just outside: its lower bounds lowered by one binade or
 * one scale, or its x bound raised by one binade (x' = x * 2^70 then
 * overflows), rows here differ from the reference. */
static void mxfp4_edges(void) {
  struct edge {
    const char *what;
    float x[4];   /* x[c * 256 + 37] for chunk c (0: as drawn) */
    int s0, sn;   /* every 5th group's scale from s0, sn values in turn (sn 0: as drawn) */
    int low;      /* every x in [2^low, 2^(low+1)) (0: as drawn); with s0, every group's
                   * scale s0 or s0 + 1 */
    bool zeros;   /* chunk 2 all signed zeros */
  };
  static const edge cs[] = {
      {"x 2^64, -1.67 x 2^-64, a subnormal, inf", {0x1p64f, -0x1.abcdeep-64f, 0x1p-130f, INFINITY}, 0, 0, 0, false},
      {"x just below 2^64 and 2^-63, a chunk of signed zeros, scales 185-192",
       {0x1.fffffep63f, -0x1p-63f, 0, 0}, 185, 8, 0, true},
      {"x NaN last, scales to 254 (the reference overflows)", {0, 0, 0, NAN}, 252, 3, 0, false},
      {"scales 191-194", {0, 0, 0, 0}, 191, 4, 0, false},
      {"x in [2^-6, 2^-5), scales 7 and 8 (products at the smallest normal)", {0, 0, 0, 0}, 7, 2, -6, false},
      {"every x in [2^-64, 2^-63)", {0, 0, 0, 0}, 0, 0, -64, false},
      /* the fused form's bounds (kcuda_gemv.cuh, tile_xscale and
       * tile_fused_s): its lowest products, then just below them, and its
       * top, then just above it */
      {"every x in [2^-62, 2^-61), scales 64 and 65", {0, 0, 0, 0}, 64, 2, -62, false},
      {"every x in [2^-63, 2^-62), scales 64 and 65 (products below the smallest normal)", {0, 0, 0, 0}, 64, 2, -63, false},
      {"every x in [2^-62, 2^-61), scales 63 and 64 (products below the smallest normal)", {0, 0, 0, 0}, 63, 2, -62, false},
      {"every x in [2^57, 2^58), scales 190 and 191", {0, 0, 0, 0}, 190, 2, 57, false},
      {"every x in [2^58, 2^59), scales 191 and 192", {0, 0, 0, 0}, 191, 2, 58, false},
      {"every x in [2^58, 2^59), scales 190 and 191 (x' = x * 2^70 would overflow)", {0, 0, 0, 0}, 190, 2, 58, false},
  };
  for (const edge &e : cs) {
    mat m;
    mkmat(m, 3, 40, 1024, 0, 0);
    float *x = (float *)m.x;
    size_t ng = m.sbuf.size() - 16;
    if (e.low)
      for (int c = 0; c < m.cols; c++) x[c] = rndf(e.low, e.low);
    if (e.zeros)
      for (int c = 512; c < 768; c++) x[c] = c % 2 ? 0.0f : -0.0f;
    for (int c = 0; c < 4; c++)
      if (e.x[c] != 0) x[c * 256 + 37] = e.x[c]; /* NaN too: it equals nothing */
    for (size_t g = 0; g < ng; g++)
      if (e.low && e.s0) m.sbuf[g] = (uint8_t)(e.s0 + g % 2);
      else if (e.sn && g % 5 == 0) m.sbuf[g] = (uint8_t)(e.s0 + (int)(g / 5 % (size_t)e.sn));
    df_kern_scalar()->gemm_mxfp4(m.W, m.S, m.cols, 0, m.rows, x, 1, (size_t)m.cols, m.ref.data(),
                                 (size_t)m.rows);
    gemv_mat<tf_mxfp4>(m, e.what);
  }
}

/* When the fused form is taken (a speed policy; both forms are exact, so
 * only a count shows it): every unit of every whole chunk of K3-like
 * operands (scales 120-127, |x| from 2^-6 to 8 and zeros among them), in the
 * one-warp and four-warp variants and with one, two and four threads a row;
 * none with it off; and all but the chunk whose x has one value out of its
 * range (2^58), or the row's chunk with one scale out of it (63 or 192). */
static void fused_policy(void) {
  mat m;
  mkmat(m, 3, 64, 1024, 0, 0);
  float *x = (float *)m.x;
  for (int c = 0; c < m.cols; c += 5) x[c] = c % 2 ? 0.0f : -0.0f;
  size_t ng = m.sbuf.size() - 16;
  for (size_t g = 0; g < ng; g++) m.sbuf[g] = (uint8_t)(120 + g % 8);
  const int units = m.cols / 32, rows = m.rows;
  struct pcase {
    const char *what;
    long xc;         /* x[xc] = 2^58 (-1: none) */
    int srow, sg, s; /* scale of group sg of row srow (srow -1: none) */
    bool fused;
    long lost;       /* units (of a thread) not fused: an x out of range costs its chunk
                      * (8 units of 256 columns, twice that in the medium form) in
                      * every row, a scale its row's 8 (the scales are tested 8 at a time) */
  } cs[] = {
      {"K3-like operands", -1, -1, 0, 0, true, 0},
      {"K3-like operands, fused form off", -1, -1, 0, 0, false, -1},
      {"x[259] = 2^58 (chunk 1 of every row)", 259, -1, 0, 0, true, 8L * 64},
      {"row 5's scale 17 = 63 (its chunk 2)", -1, 5, 17, 63, true, 8},
      {"row 7's scale 30 = 192 (its chunk 3)", -1, 7, 30, 192, true, 8},
  };
  static const int vs[] = {0, 3, 4, 10, 11};
  for (const pcase &p : cs) {
    float xkeep = p.xc >= 0 ? x[p.xc] : 0.0f;
    if (p.xc >= 0) x[p.xc] = 0x1p58f;
    uint8_t keep = p.srow >= 0 ? m.sbuf[(size_t)p.srow * units + p.sg] : 0;
    if (p.srow >= 0) m.sbuf[(size_t)p.srow * units + p.sg] = (uint8_t)p.s;
    df_kern_scalar()->gemm_mxfp4(m.W, m.S, m.cols, 0, m.rows, x, 1, (size_t)m.cols, m.ref.data(),
                                 (size_t)m.rows);
    for (int v : vs) {
      int G = 1, ck = 256;
      tile_variant<tf_mxfp4>(v, [&](auto t) { G = decltype(t)::G, ck = decltype(t)::F::CK; });
      std::vector<float> yb((size_t)m.rows + 8);
      memset(yb.data(), 0xff, yb.size() * 4);
      emu_fused_units = 0;
      run_variant<tf_mxfp4>(v, m, yb.data() + 4, NULL, 0, false, p.fused);
      char what[200], seen[80];
      snprintf(what, sizeof what, "fused form's units, %s, %s", p.what, df_cuda_tile_name(v));
      check(what, m, yb);
      long want = p.lost < 0 ? 0 : ((long)rows * units - p.lost * (p.xc >= 0 ? ck / 256 : 1)) * G;
      snprintf(seen, sizeof seen, "%ld fused units, want %ld", emu_fused_units, want);
      emu_true(what, emu_fused_units == want, seen);
    }
    if (p.xc >= 0) x[p.xc] = xkeep;
    if (p.srow >= 0) m.sbuf[(size_t)p.srow * units + p.sg] = keep;
  }
}

/* MXFP4's variant (a speed policy: every variant's sums are the same, so
 * only this catches a change to it): variant 12 at every shape, and
 * variant 12 is the form the measurements name, the medium chunk (512
 * columns, 256 bytes of a row) in 2 stages, two threads a row, four warps
 * a block, in under 45 KB of shared memory (5 blocks an SM) */
static void pick_policy(void) {
  int v = tile_pick_mxfp4();
  char seen[160];
  snprintf(seen, sizeof seen, "variant %d, want 12", v);
  emu_true("MXFP4's pick", v == 12, seen);
  tile_variant<tf_mxfp4>(v, [&](auto t) {
    typedef decltype(t) V;
    bool form = V::F::CK == 512 && V::F::RB == 256 && V::NS == 2 && V::G == 2 && V::NW == 4;
    snprintf(seen, sizeof seen, "%d columns a chunk, %d stages, %d threads a row, %d warps, %zu bytes",
             V::F::CK, V::NS, V::G, V::NW, V::smem());
    /* an SM's 228 KB of shared memory, 1 KB of it reserved a block */
    bool five = 5 * (V::smem() + 1024) <= 228 * 1024;
    emu_true("MXFP4's pick is the medium form with 2 stages, 5 blocks an SM", form && five, seen);
  });
}

/* bf16's and int8's pick (tile_pick_rows) on an H100's 132 SMs with a
 * table of blocks an SM for each variant, the engine's shapes first: the
 * KDA q (384 blocks) and o (224) within one round, with the SMs holding
 * under 64 KB of the narrow form in flight, take a deep variant with four
 * threads a row or the wide form with two; the fused qkv (1,152) and the
 * LM head (5,120) the wide form's 5 stages with four; then each edge: one
 * round's last block and the next, the 64 KB line, x shared. (The table is
 * a device's kind of numbers, not one measured: the policy is a function
 * of them, and the test holds that function.) */
static void pick_rows_policy(void) {
  static const int occ[TILE_VARIANTS] = {16, 12, 4, 8, 16, 4, 4, 4, 4, 4, 5, 3, 5};
  static const struct {
    long blocks;
    int rb, shared_x, want;
    const char *what;
  } cs[] = {
      {384, 128, 0, 4, "int8 KDA q"},
      {224, 128, 0, 6, "int8 KDA o"},
      {1152, 128, 0, 7, "int8 KDA qkv"},
      {5120, 128, 0, 7, "int8 LM head"},
      {384, 256, 0, 4, "bf16 KDA q"},
      {1152, 256, 0, 7, "bf16 KDA qkv"},
      {132, 128, 0, 7, "one block an SM: the wide form, four threads a row"},
      {264, 128, 0, 6, "two an SM: two threads a row"},
      {264, 128, 1, 8, "two an SM, x shared"},
      {1152, 128, 1, 9, "int8 KDA qkv, x shared"},
      {4 * 132, 128, 0, 4, "4 blocks an SM: the deep form, four threads a row"},
      {12 * 132, 16, 0, 1, "a round's last block, under 64 KB: 3 stages (no deep form holds 12)"},
      {12 * 132 + 1, 16, 0, 7, "a block past the round"},
      {7 * 132, 128, 0, 1, "7 blocks an SM of 8 KB in flight: 56 KB"},
      {8 * 132, 128, 0, 7, "8 of them: 64 KB"},
  };
  for (const auto &c : cs) {
    int v = tile_pick_rows(occ, 132, c.blocks, c.rb, c.shared_x);
    char what[160], seen[64];
    snprintf(what, sizeof what, "pick for %ld blocks of %d bytes: %s", c.blocks, c.rb, c.what);
    snprintf(seen, sizeof seen, "variant %d, want %d", v, c.want);
    emu_true(what, v == c.want, seen);
  }
}

/* The lanes layout (gemv_k: f32's GEMV, any format's where chosen) with
 * 8, 4 and 2 lanes a thread, vector loads (with and without the L2
 * prefetch's bookkeeping, a no-op here) where the operands allow, and
 * element by element; launched as kcuda.cu's gemv_go launches it. */
template <int LPT, class F> static void lanes_one(const F &f, const mat &m, int vec, int pf) {
  std::vector<float> yb((size_t)m.rows + 8);
  memset(yb.data(), 0xff, yb.size() * 4);
  long threads = (long)(LANES / LPT) * m.rows;
  dim3 g((unsigned)((threads + GEMV_BLOCK - 1) / GEMV_BLOCK));
  const float *rs = m.fmt == 1 ? (const float *)m.S : NULL;
  if (vec) emu_launch(g, dim3(GEMV_BLOCK), gemv_k<F, LPT, true>, f, m.rows, m.cols, m.x, yb.data() + 4, rs, pf);
  else emu_launch(g, dim3(GEMV_BLOCK), gemv_k<F, LPT, false>, f, m.rows, m.cols, m.x, yb.data() + 4, rs, 0);
  char what[160];
  snprintf(what, sizeof what, "gemv %s %d x %d, lanes %d, %s%s", fname[m.fmt], m.rows, m.cols, LPT,
           vec ? "vector" : "element by element", pf ? ", prefetch" : "");
  check(what, m, yb);
}
template <int LPT> static void lanes_lpt(const mat &m, int vec, int pf) {
  if (m.fmt == 0) lanes_one<LPT>(fmt_bf16<LPT>{(const uint16_t *)m.W}, m, vec, pf);
  else if (m.fmt == 1) lanes_one<LPT>(fmt_i8<LPT>{(const int8_t *)m.W}, m, vec, pf);
  else if (m.fmt == 2) lanes_one<LPT>(fmt_f32<LPT>{(const float *)m.W}, m, vec, pf);
  else lanes_one<LPT>(fmt_mxfp4<LPT>{m.W, m.S}, m, vec, pf);
}
static void lanes_case(int fmt, int rows, int cols, int wshift, int xshift) {
  mat m;
  mkmat(m, fmt, rows, cols, wshift, xshift);
  int vec = ((uintptr_t)m.W & 15) == 0 && cols % LANES == 0 && ((uintptr_t)m.x & 15) == 0;
  for (int k = 0; k < (vec ? 3 : 1); k++) {
    int v = k > 0, pf = k == 2;
    lanes_lpt<8>(m, v, pf), lanes_lpt<4>(m, v, pf), lanes_lpt<2>(m, v, pf);
  }
}

/* n matrices in one grouped launch (kcuda.cu's tile_group_launch: each
 * matrix's blocks of the variant's rows after the previous one's), as a
 * dependent launch would see it (dep) and plain */
template <class TF> static void group_once(int v, int n, const int (*shape)[2], bool dep) {
  std::vector<mat> ms((size_t)n);
  std::vector<std::vector<float>> ys((size_t)n);
  tile_set q;
  memset(&q, 0, sizeof q);
  q.n = n;
  int b0 = 0, tr = TROWS, nt = TROWS;
  tile_variant<TF>(v, [&](auto t) { tr = decltype(t)::rows, nt = decltype(t)::threads; });
  for (int i = 0; i < n; i++) {
    mkmat(ms[(size_t)i], TF::fmt, shape[i][0], shape[i][1], i % 2 ? (TF::fmt == 0 ? 2 : 1) : 0, i % 2);
    ys[(size_t)i].assign((size_t)shape[i][0] + 8, 0.0f);
    memset(ys[(size_t)i].data(), 0xff, ys[(size_t)i].size() * 4);
    const mat &m = ms[(size_t)i];
    q.m[i] = tile_one{m.W, m.S, m.x, TF::fmt == 1 ? (const float *)m.S : NULL, ys[(size_t)i].data() + 4,
                      m.rows, m.cols, flags_of<TF>(m, 1024, TF::fmt == 3) | (dep ? TILE_DEP : 0), b0};
    b0 += (m.rows + tr - 1) / tr;
  }
  pdl_guard pg(dep);
  for (int i = 0; i < n; i++) pg.x(ms[(size_t)i].x, shape[i][1]), pg.y(ys[(size_t)i].data() + 4, shape[i][0]);
  tile_variant<TF>(v, [&](auto t) {
    typedef decltype(t) V;
    emu_launch_dyn(dim3((unsigned)b0), dim3(V::threads), V::smem(), tile_group_k<typename V::F, V::NS, V::G, V::NW>,
                   q);
  });
  char gw[120];
  snprintf(gw, sizeof gw, "grouped gemv %s, %s%s", fname[TF::fmt], df_cuda_tile_name(v),
           dep ? ", dependent" : "");
  pg.finish(gw, (long)b0 * nt);
  for (int i = 0; i < n; i++) {
    char what[160];
    snprintf(what, sizeof what, "grouped gemv %s, %s: matrix %d of %d, %d x %d", fname[TF::fmt], df_cuda_tile_name(v),
             i, n, shape[i][0], shape[i][1]);
    check(what, ms[(size_t)i], ys[(size_t)i]);
  }
}
template <class TF> static void group_case(int v, int n, const int (*shape)[2]) {
  for (int dep = 0; dep < 2; dep++) group_once<TF>(v, n, shape, dep);
}

int main(void) {
  /* whole chunks, a chunk cut short, rows ending mid-block, unaligned */
  gemv_case<tf_bf16>(64, 512, 0, 0);
  gemv_case<tf_bf16>(45, 200, 0, 0);
  gemv_case<tf_bf16>(33, 136, 2, 1);
  gemv_case<tf_bf16>(7, 17, 0, 0);
  gemv_case<tf_i8>(64, 512, 0, 0);
  gemv_case<tf_i8>(45, 200, 0, 0);
  gemv_case<tf_i8>(33, 144, 1, 3);
  gemv_case<tf_i8>(5, 9, 0, 0);
  gemv_case<tf_mxfp4>(64, 1024, 0, 0);
  gemv_case<tf_mxfp4>(45, 320, 0, 0);
  gemv_case<tf_mxfp4>(33, 96, 1, 2);
  gemv_case<tf_mxfp4>(3, 32, 0, 0);
  /* the wide form's chunks whole and cut short: int8 512 columns a chunk,
   * bf16 256, MXFP4 1024 (1280 and 1536: a last chunk of 8 and 16 groups;
   * 1120: groups not whole 8s, the scales staged one by one) */
  gemv_case<tf_i8>(40, 1200, 0, 0);
  gemv_case<tf_bf16>(24, 600, 0, 0);
  gemv_case<tf_mxfp4>(40, 1280, 0, 0);
  gemv_case<tf_mxfp4>(20, 1536, 0, 0);
  gemv_case<tf_mxfp4>(17, 1120, 0, 0);
  mxfp4_edges();
  fused_policy();
  pick_policy();
  pick_rows_policy();
  /* more rows than one block of four warps holds, the last block's last
   * warps without rows */
  gemv_case<tf_i8>(100, 1200, 0, 0);
  for (int fmt = 0; fmt < 4; fmt++) {
    lanes_case(fmt, 70, 256, 0, 0);
    lanes_case(fmt, 33, 96, fmt == 0 ? 2 : fmt == 2 ? 4 : 1, 1);
    if (fmt != 3) lanes_case(fmt, 9, 23, 0, 0);
  }
  static const int sh[3][2] = {{40, 256}, {17, 160}, {64, 512}};
  static const int shm[3][2] = {{40, 512}, {17, 256}, {64, 1024}};
  static const int shw[3][2] = {{40, 1280}, {17, 1536}, {9, 1024}};
  /* more matrices, of one block and of several, for the block's search of
   * its matrix */
  static const int sh9[9][2] = {{70, 256}, {5, 256}, {130, 512}, {64, 256}, {1, 256},
                                {200, 256}, {33, 512}, {65, 256}, {12, 256}};
  group_case<tf_bf16>(2, 3, sh);
  group_case<tf_i8>(3, 3, sh);
  group_case<tf_mxfp4>(4, 3, shm);
  group_case<tf_bf16>(5, 3, sh);
  group_case<tf_i8>(6, 3, shw);
  group_case<tf_mxfp4>(7, 3, shw);
  group_case<tf_bf16>(8, 3, sh);
  group_case<tf_i8>(9, 3, shw);
  group_case<tf_mxfp4>(9, 3, shw);
  group_case<tf_mxfp4>(10, 9, sh9);
  group_case<tf_mxfp4>(11, 9, sh9);
  group_case<tf_i8>(0, 9, sh9);
  return emu_summary();
}

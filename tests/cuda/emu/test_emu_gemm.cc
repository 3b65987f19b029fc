/* The GPU's GEMM kernels for T > 1 (src/kernels/cuda/kcuda_gemm.cuh: the
 * lanes layout with 8, 4 and 2 lanes a thread, the register tiles, one lane
 * a thread; vector and element-by-element loads) run on the host through
 * cuda_emu.h, launched as kcuda.cu launches them, against the scalar
 * reference table bit for bit (memcmp), in every weight format: shapes
 * whose rows, vectors and columns end inside a block, a step and a chunk,
 * a row range that starts mid-matrix (unaligned weights), x shifted off
 * 16-byte alignment and padded rows of x and y. Y's padding starts as a
 * NaN pattern on both sides, so a write outside the outputs fails too.
 * No GPU needed (label unit); the same kernels run on the GPU in
 * gpu.test_cuda_kernels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "cuda_emu.h"
#include "emu_check.h"

extern "C" {
#include "kernels/kernels.h"
}
#include "kernels/cuda/kcuda_gemm.cuh"

#define RAND_BITS_SEED 0x2545f4914f6cdd1dull
#include "../rand_bits.h"
#include "emu_data.h"

enum { F_BF16, F_I8, F_F32, F_MXFP4 };
static const char *fname[] = {"bf16", "int8", "f32", "mxfp4"};

static void ref_gemm(int fmt, const uint8_t *W, const uint8_t *S, int cols, int r0, int r1,
                     const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  const df_kern *k = df_kern_scalar();
  if (fmt == F_BF16) k->gemm_bf16((const uint16_t *)W, cols, r0, r1, X, T, ldx, Y, ldy);
  else if (fmt == F_I8)
    k->gemm_i8((const int8_t *)W, (const float *)S, cols, r0, r1, X, T, ldx, Y, ldy);
  else if (fmt == F_F32) k->gemm_f32((const float *)W, cols, r0, r1, X, T, ldx, Y, ldy);
  else k->gemm_mxfp4(W, S, cols, r0, r1, X, T, ldx, Y, ldy);
}

/* kernel: 0 register tiles, 1 a lane a thread with element staging, 2 the
 * same with vector staging; launched as kcuda.cu launches them */
template <class F>
static void run_kernel(int kernel, const F &f, int rows, int cols, const float *X, int T,
                       size_t ldx, float *Y, size_t ldy, const float *rowscale) {
  if (kernel == 0) {
    dim3 g((unsigned)((rows + GT_R - 1) / GT_R), (unsigned)((T + GT_V - 1) / GT_V));
    emu_launch(g, dim3(GT_THREADS), gemm_tile_k<F>, f, rows, cols, X, T, ldx, Y, ldy, rowscale);
  } else {
    dim3 g((unsigned)((rows + GL_R - 1) / GL_R), (unsigned)((T + GL_V - 1) / GL_V));
    if (kernel == 2)
      emu_launch(g, dim3(GL_THREADS), gemm_lane_k<F, true>, f, rows, cols, X, T, ldx, Y, ldy,
                 rowscale);
    else
      emu_launch(g, dim3(GL_THREADS), gemm_lane_k<F, false>, f, rows, cols, X, T, ldx, Y, ldy,
                 rowscale);
  }
}

/* The lanes layout (gemm_k) with LPT lanes a thread, its vector block as
 * kcuda.cu's gemm_tb picks it for T; make(LPT) builds the format. */
template <int LPT, class M>
static void run_lanes(const M &make, bool vec, int rows, int cols, const float *X, int T,
                      size_t ldx, float *Y, size_t ldy, const float *rs) {
  auto f = make(std::integral_constant<int, LPT>{});
  using F = decltype(f);
  long rblocks = ((long)(LANES / LPT) * rows + GEMV_BLOCK - 1) / GEMV_BLOCK;
  auto go = [&](auto tbc) {
    constexpr int TB = decltype(tbc)::value;
    int nvb = (T + TB - 1) / TB;
    dim3 g((unsigned)(rblocks * nvb));
    if (vec) emu_launch(g, dim3(GEMV_BLOCK), gemm_k<F, LPT, true, TB>, f, rows, cols, X, T, ldx, Y, ldy, rs, nvb);
    else emu_launch(g, dim3(GEMV_BLOCK), gemm_k<F, LPT, false, TB>, f, rows, cols, X, T, ldx, Y, ldy, rs, nvb);
  };
  if (T <= 2) go(std::integral_constant<int, 2>{});
  else if (T <= 4) go(std::integral_constant<int, 4>{});
  else go(std::integral_constant<int, LPT >= 8 ? 4 : 8>{});
}

/* rows [r0, rows) of a rows x cols matrix for T vectors, x rows ldx =
 * cols + xpad apart starting xoff floats into its buffer, y rows ldy =
 * (rows - r0) + ypad apart */
static void gemm_case(int fmt, int rows, int cols, int T, int xpad, int ypad, int r0, int xoff) {
  int n = rows - r0;
  size_t ldx = (size_t)cols + xpad, ldy = (size_t)n + ypad, ny = (size_t)T * ldy;
  std::vector<float> Xb((size_t)T * ldx + xoff + 4);
  float *X = (float *)(((uintptr_t)Xb.data() + 15) & ~(uintptr_t)15);
  for (size_t i = 0; i < (size_t)T * ldx + xoff; i++) X[i] = rndf(-6, 2);
  std::vector<uint8_t> W, S;
  emu_weights(fmt, rows, cols, W, S);
  std::vector<float> ref(ny), got(ny);
  memset(ref.data(), 0xff, ny * 4);
  ref_gemm(fmt, W.data(), S.data(), cols, r0, rows, X + xoff, T, ldx, ref.data(), ldy);
  size_t woff = fmt == F_BF16 ? (size_t)r0 * cols * 2
                : fmt == F_I8 ? (size_t)r0 * cols
                : fmt == F_F32 ? (size_t)r0 * cols * 4
                               : (size_t)r0 * cols / 2;
  size_t soff = fmt == F_I8 ? (size_t)r0 * 4 : fmt == F_MXFP4 ? (size_t)r0 * cols / 32 : 0;
  /* the weights at a 16-byte boundary, as the device's allocations are,
   * so a row range's offset is what makes them unaligned */
  std::vector<uint8_t> Wb(W.size() + 16);
  uint8_t *Wa = (uint8_t *)(((uintptr_t)Wb.data() + 15) & ~(uintptr_t)15);
  memcpy(Wa, W.data(), W.size());
  const uint8_t *w = Wa + woff, *sc = S.empty() ? NULL : S.data() + soff;
  const float *x = X + xoff;
  bool vec = ((uintptr_t)w & 15) == 0 && cols % LANES == 0 && ((uintptr_t)x & 15) == 0 &&
             ldx % 4 == 0;
  static const char *kname[] = {"register tiles", "a lane a thread", "a lane a thread, vector",
                                "lanes 8", "lanes 4", "lanes 2"};
  const float *rs = fmt == F_I8 ? (const float *)sc : NULL;
  for (int kernel = 0; kernel < 6; kernel++) {
    if (kernel == 2 && !vec) continue;
    memset(got.data(), 0xff, ny * 4);
    if (kernel < 3) {
      if (fmt == F_BF16) run_kernel(kernel, fmt_bf16<8>{(const uint16_t *)w}, n, cols, x, T, ldx, got.data(), ldy, rs);
      else if (fmt == F_I8) run_kernel(kernel, fmt_i8<8>{(const int8_t *)w}, n, cols, x, T, ldx, got.data(), ldy, rs);
      else if (fmt == F_F32) run_kernel(kernel, fmt_f32<8>{(const float *)w}, n, cols, x, T, ldx, got.data(), ldy, rs);
      else run_kernel(kernel, fmt_mxfp4<8>{w, sc}, n, cols, x, T, ldx, got.data(), ldy, rs);
    } else {
      int lpt = kernel == 3 ? 8 : kernel == 4 ? 4 : 2;
      auto lanes = [&](auto mk) {
        if (lpt == 8) run_lanes<8>(mk, vec, n, cols, x, T, ldx, got.data(), ldy, rs);
        else if (lpt == 4) run_lanes<4>(mk, vec, n, cols, x, T, ldx, got.data(), ldy, rs);
        else run_lanes<2>(mk, vec, n, cols, x, T, ldx, got.data(), ldy, rs);
      };
      if (fmt == F_BF16)
        lanes([&](auto lc) { return fmt_bf16<decltype(lc)::value>{(const uint16_t *)w}; });
      else if (fmt == F_I8)
        lanes([&](auto lc) { return fmt_i8<decltype(lc)::value>{(const int8_t *)w}; });
      else if (fmt == F_F32)
        lanes([&](auto lc) { return fmt_f32<decltype(lc)::value>{(const float *)w}; });
      else lanes([&](auto lc) { return fmt_mxfp4<decltype(lc)::value>{w, sc}; });
    }
    char what[224];
    snprintf(what, sizeof what, "gemm %s %d x %d rows from %d, T %d, ldx %zu%s, ldy %zu, %s",
             fname[fmt], rows, cols, r0, T, ldx, xoff ? " shifted" : "", ldy, kname[kernel]);
    emu_same(what, ref.data(), got.data(), ny);
  }
}

int main(void) {
  for (int fmt = 0; fmt < 4; fmt++) {
    /* whole blocks and chunks; rows, vectors and columns ending mid-block
     * and mid-chunk (160 = 2.5 chunks) */
    gemm_case(fmt, 64, 128, 32, 0, 0, 0, 0);
    gemm_case(fmt, 70, 160, 37, 0, 0, 0, 0);
    gemm_case(fmt, 33, 96, 2, 4, 3, 0, 0);
    /* a row range from row 3 (unaligned weights), padded and shifted x */
    gemm_case(fmt, 45, 224, 9, 4, 1, 3, 1);
    /* one chunk or less: a single stage, no prefetch */
    gemm_case(fmt, 40, 64, 33, 0, 0, 0, 0);
    gemm_case(fmt, 40, 32, 5, 0, 0, 0, 0);
    if (fmt != F_MXFP4) {
      /* columns that end mid-step: element staging, lanes left empty */
      gemm_case(fmt, 35, 100, 34, 0, 0, 0, 0);
      gemm_case(fmt, 17, 7, 3, 1, 2, 0, 0);
    }
  }
  return emu_summary();
}

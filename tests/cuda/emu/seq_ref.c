/* kcuda_seq_ref.h's references behind plain C functions: the header is C
 * (void * conversions C++ refuses), the emulation tests are C++. */
#include "kernels/cuda/kcuda_seq_ref.h"

#include "seq_ref.h"

void emu_attn_res_ref(float *xn, const float *snaps, size_t ss, int nS, const float *last, int T,
                      int H, const float *res_norm, const float *res_proj, const float *norm,
                      float eps, float *tmp) {
  df_attn_res_ref(xn, snaps, ss, nS, last, T, H, res_norm, res_proj, norm, eps, tmp);
}

void emu_kda_ref(const df_cuda_kda_args *a) { df_kda_ref(a); }
void emu_mla_ref_attn(const df_cuda_mla_args *a) { df_mla_ref_attn(a); }
void emu_mla_ref_gate(float *o, float *g, size_t n) { df_mla_ref_gate(o, g, n); }
void emu_moe_combine_ref(float *out, const float *Y, const int *rows, const float *w, int T, int K,
                         int n) {
  df_moe_combine_ref(out, Y, rows, w, T, K, n);
}

/* The scalar references the emulation tests call (seq_ref.c). */
#ifndef DF_TESTS_CUDA_EMU_SEQ_REF_H
#define DF_TESTS_CUDA_EMU_SEQ_REF_H

#include <stddef.h>

#include "kernels/cuda/kcuda_seq.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kcuda_seq_ref.h's df_attn_res_ref */
void emu_attn_res_ref(float *xn, const float *snaps, size_t ss, int nS, const float *last, int T,
                      int H, const float *res_norm, const float *res_proj, const float *norm,
                      float eps, float *tmp);
/* df_kda_ref, df_mla_ref_attn, df_mla_ref_gate */
void emu_kda_ref(const df_cuda_kda_args *a);
void emu_mla_ref_attn(const df_cuda_mla_args *a);
void emu_mla_ref_gate(float *o, float *g, size_t n);
/* df_moe_combine_ref */
void emu_moe_combine_ref(float *out, const float *Y, const int *rows, const float *w, int T, int K,
                         int n);

#ifdef __cplusplus
}
#endif

#endif

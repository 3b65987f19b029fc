/* The scalar references the emulation tests call (seq_ref.c). */
#ifndef DF_TESTS_CUDA_EMU_SEQ_REF_H
#define DF_TESTS_CUDA_EMU_SEQ_REF_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* kcuda_seq_ref.h's df_attn_res_ref */
void emu_attn_res_ref(float *xn, const float *snaps, size_t ss, int nS, const float *last, int T,
                      int H, const float *res_norm, const float *res_proj, const float *norm,
                      float eps, float *tmp);

#ifdef __cplusplus
}
#endif

#endif

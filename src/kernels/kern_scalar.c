/* The scalar reference kernels (the loops are in kern_scalar_t.h): the fp32
 * table every SIMD table is tested against, and the float64 table of
 * --precision f64, which is the same loops on doubles. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

#define L DF_KLANES
#define TB 4 /* vectors per weight pass in GEMM */

const float df_kern_e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

typedef enum { DENSE_BF16, DENSE_F32, DENSE_I8 } dense_kind;

#define R float
#define S(name) name##_s
#define EXP expf
#define SQRT sqrtf
#define TANH tanhf
#include "kernels/kern_scalar_t.h"
#undef R
#undef S
#undef EXP
#undef SQRT
#undef TANH

#define R double
#define S(name) name##_d
#define EXP exp
#define SQRT sqrt
#define TANH tanh
#include "kernels/kern_scalar_t.h"
#undef R
#undef S
#undef EXP
#undef SQRT
#undef TANH

#define TABLE(sfx, label)                                                                 \
  {                                                                                       \
    .name = label, .gemm_bf16 = gemm_bf16_##sfx, .gemm_i8 = gemm_i8_##sfx,                \
    .gemm_f32 = gemm_f32_##sfx, .gemm_mxfp4 = gemm_mxfp4_##sfx,                           \
    .gemv_t_bf16 = gemv_t_bf16_##sfx, .gemv_t_i8 = gemv_t_i8_##sfx, .dot = dot_##sfx,     \
    .rmsnorm = rmsnorm_##sfx, .softmax = softmax_##sfx, .sigmoid = sigmoid_##sfx,         \
    .silu = silu_##sfx, .situ = situ_##sfx, .kda_step = kda_step_##sfx,                   \
  }

static const df_kern scalar_table = TABLE(s, "scalar");
static const df_kern64 scalar64_table = TABLE(d, "scalar64");

const df_kern *df_kern_scalar(void) { return &scalar_table; }
const df_kern64 *df_kern_scalar64(void) { return &scalar64_table; }

/* The fp32 forward pass: every kernel table (k3_forward_t.h). */
#define R float
#define R_IS_F64 0
#define N(name) df_k3f32_##name
#define KT df_kern
#define KSEL(kc) ((kc)->k)
#define MM df_mm
#define MMX df_mm_mxfp4
#define WMT df_wmat_t
#define WMR df_wmat_rows
#define ROUTE df_router_select
#define EXP expf
#define SQRT sqrtf
#include "model/k3_forward_t.h"

/* The float64 forward pass (--precision f64): the scalar float64 kernels
 * on the same weights (k3_forward_t.h). */
#define R double
#define R_IS_F64 1
#define N(name) df_k3f64_##name
#define KT df_kern64
#define KSEL(kc) ((kc)->k64 ? (kc)->k64 : df_kern_scalar64())
#define MM df_mm64
#define MMX df_mm_mxfp4_64
#define WMT df_wmat_t64
#define WMR df_wmat_rows64
#define ROUTE df_router_select64
#define EXP exp
#define SQRT sqrt
#include "model/k3_forward_t.h"

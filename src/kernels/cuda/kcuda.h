/* The CUDA kernels (built only with -DDF_CUDA=ON; DF_HAVE_CUDA is then
 * defined for every C file). A narrow C interface: no CUDA header is
 * included on the C side, device memory is an opaque pointer.
 *
 * Every kernel computes what the scalar reference table (kern_scalar_t.h)
 * computes, bit for bit: the same lane-16 summation order of kernels.h (16
 * chains per output, each summing its rounded products in ascending index,
 * then the 8, 4, 2, 1 tree), separate multiply and add (the .cu files are
 * compiled with -fmad=false), no flush-to-zero, IEEE division and square
 * root, and for exp and tanh the same algorithms as the C library's expf and
 * tanhf (kmath.h), because CUDA's own differ from them in the last bit.
 *
 * All calls are asynchronous on the context's stream except those that
 * return data to the host (df_cuda_get) and df_cuda_sync. Errors: a call
 * returns -1 and df_cuda_error says why; after an error the context stays
 * usable only if CUDA says so. */
#ifndef DF_KERNELS_CUDA_KCUDA_H
#define DF_KERNELS_CUDA_KCUDA_H

#include <stddef.h>
#include <stdint.h>

typedef struct df_cuda df_cuda;

/* Number of CUDA devices (0 when there is no driver or no device). */
int df_cuda_device_count(void);
/* Opens device dev; NULL with a message in err on failure. */
df_cuda *df_cuda_open(int dev, char *err, size_t errlen);
void df_cuda_close(df_cuda *c);
/* "NVIDIA H200 (sm_90, 139.8 GiB)", with ", dependent launches of the
 * GEMVs" or ", dependent launches" before the ")" by df_cuda_set_pdl's
 * mode (the first by default on sm_90), and ", MXFP4 unfused" after it
 * when df_cuda_set_mxfp4_fused turned that off */
const char *df_cuda_describe(const df_cuda *c);
const char *df_cuda_error(const df_cuda *c);

void *df_cuda_alloc(df_cuda *c, size_t bytes);
void df_cuda_free(df_cuda *c, void *dptr);
int df_cuda_put(df_cuda *c, void *dst, const void *src, size_t bytes);
int df_cuda_get(df_cuda *c, void *dst, const void *src, size_t bytes);
/* The copy to the host queued, not waited for (dst page-locked, or the copy
 * is not asynchronous); valid after df_cuda_sync. */
int df_cuda_get_async(df_cuda *c, void *dst, const void *src, size_t bytes);
int df_cuda_copy(df_cuda *c, void *dst, const void *src, size_t bytes); /* device to device */
int df_cuda_sync(df_cuda *c);

/* Seconds between two marks on the stream (CUDA events), for benches:
 * df_cuda_mark(c, 0), the work, df_cuda_mark(c, 1), then df_cuda_elapsed. */
int df_cuda_mark(df_cuda *c, int which);
double df_cuda_elapsed(df_cuda *c);

/* y[r] = dot(W[r], x) for r in [0, rows), the layouts of df_kern's GEMMs
 * (kernels.h); every pointer is device memory. */
int df_cuda_gemv_bf16(df_cuda *c, const uint16_t *W, int rows, int cols, const float *x, float *y);
int df_cuda_gemv_i8(df_cuda *c, const int8_t *W, const float *scale, int rows, int cols,
                    const float *x, float *y);
int df_cuda_gemv_f32(df_cuda *c, const float *W, int rows, int cols, const float *x, float *y);
int df_cuda_gemv_mxfp4(df_cuda *c, const uint8_t *packed, const uint8_t *scales, int rows, int cols,
                       const float *x, float *y);

/* Y[t * ldy + r] = dot(W[r], X + t * ldx) for r < rows, t < T: the GEMVs
 * above for T vectors (df_kern's gemm_* for rows [0, rows)), each (row,
 * vector) bit for bit the GEMV of that vector, while one pass over the
 * weights serves a block of vectors. T == 1 is the GEMV (ldx, ldy unused);
 * otherwise ldy >= rows (the outputs may not overlap). Vector loads need W
 * and X 16-byte aligned, cols % 16 == 0 and ldx % 4 == 0; otherwise the
 * loads are element by element (slower, the same bits). Every pointer is
 * device memory. */
int df_cuda_gemm_bf16(df_cuda *c, const uint16_t *W, int rows, int cols, const float *X, int T,
                      size_t ldx, float *Y, size_t ldy);
int df_cuda_gemm_i8(df_cuda *c, const int8_t *W, const float *scale, int rows, int cols,
                    const float *X, int T, size_t ldx, float *Y, size_t ldy);
int df_cuda_gemm_f32(df_cuda *c, const float *W, int rows, int cols, const float *X, int T,
                     size_t ldx, float *Y, size_t ldy);
int df_cuda_gemm_mxfp4(df_cuda *c, const uint8_t *packed, const uint8_t *scales, int rows,
                       int cols, const float *X, int T, size_t ldx, float *Y, size_t ldy);

/* The GEMVs' L2 prefetch of each row ahead of its loads (the
 * bench measures both; default off: it lost on the large shapes on the H200).
 * Changes speed only, never a result. */
void df_cuda_set_prefetch(df_cuda *c, int on);
/* The GEMVs' and GEMMs' lanes per thread (8, 4 or 2 of a row's 16 lanes;
 * default 8) for fmt 0 bf16, 1 int8, 2 f32, 3 MXFP4: the bench measures
 * each; results never depend on it (the test runs every one). */
void df_cuda_set_gemv_lanes(df_cuda *c, int fmt, int lanes);
/* The GEMVs' kernel for fmt 0 bf16, 1 int8, 3 MXFP4 (f32 has only the
 * lanes layout): 1 (default) the row tiles staged in shared memory, their
 * variant chosen by the shape; 2, 3, 4, 5, 6 the row tiles with 2 stages,
 * 3, deep, deep with two threads a row, deep with four; 7, 8, 9 their wide
 * form (512 bytes of a row a chunk) with 2 stages, 3 stages and two
 * threads a row, 5 stages and four; 10, 11 those last two in blocks of
 * four warps that share one copy of x; 12 the narrow form's 3 stages with
 * two threads a row in such blocks, 13 the same in the medium form (512
 * columns of MXFP4 a chunk), 14 the medium form with 2 stages; 0 the
 * lanes layout above
 * (df_cuda_set_gemv_lanes, df_cuda_set_prefetch). The bench measures each;
 * results never depend on it (the test runs each). The GEMMs for T > 1 use
 * the lanes layout. */
void df_cuda_set_gemv_tiled(df_cuda *c, int fmt, int how);
/* How many row-tile variants there are (how 2 .. 1 + this above), and
 * variant v (how - 2; kcuda_gemv.cuh's tile_variant) in words, for the
 * tests and the bench; anything else is "by shape". */
#define DF_CUDA_TILE_VARIANTS 13
static inline const char *df_cuda_tile_name(int v) {
  static const char *const n[DF_CUDA_TILE_VARIANTS] = {"2 stages",
                                  "3 stages",
                                  "deep",
                                  "deep, 2 threads a row",
                                  "deep, 4 threads a row",
                                  "wide, 2 stages",
                                  "wide, 3 stages, 2 threads a row",
                                  "wide, 5 stages, 4 threads a row",
                                  "wide, 3 stages, 2 threads a row, 4 warps sharing x",
                                  "wide, 5 stages, 4 threads a row, 4 warps sharing x",
                                  "3 stages, 2 threads a row, 4 warps sharing x",
                                  "medium, 3 stages, 2 threads a row, 4 warps sharing x",
                                  "medium, 2 stages, 2 threads a row, 4 warps sharing x"};
  return v >= 0 && v < DF_CUDA_TILE_VARIANTS ? n[v] : "by shape";
}
/* Blocks of row-tile variant v (0 .. DF_CUDA_TILE_VARIANTS - 1) one SM of
 * this device holds for fmt 0 bf16, 1 int8, 3 MXFP4 (the numbers the pick
 * by shape weighs; the bench prints them); 0 for anything else. */
int df_cuda_tile_occupancy(df_cuda *c, int fmt, int v);
/* the device's SMs (the other number the pick weighs) */
int df_cuda_sm_count(const df_cuda *c);
/* The row tiles' L2 prefetch for fmt: each row's bytes asked of the memory
 * in windows of `bytes` (rounded down to 512; 0, the default: none) ahead
 * of the stages. Speed only, never a result (the test runs it). */
void df_cuda_set_gemv_tile_prefetch(df_cuda *c, int fmt, unsigned bytes);

/* The kernels as programmatic dependent launches (sm_90 and later; each
 * launch that follows another kernel on the context's stream, never one
 * after a copy): a kernel starts while the one before it ends, the
 * row-tile GEMVs staging their first weights then, and reads its inputs
 * only once that kernel is done (kcuda_pdl.cuh). mode 2, the default:
 * only the row-tile GEMVs (T = 1), so a prefill's GEMMs go as plain
 * launches; 1: every kernel; 0: none. Every kernel dependent cost the
 * full-depth prefill's MoE trunk 42% on the H200 (run 25); the GEMVs
 * alone took a 60-layer trunk's decode on an H100 from 0.0599 to 0.0552
 * s/token with its prefill unchanged (run 28, three runs each). The
 * environment's DF_CUDA_PDL (0, 1, or gemv) sets it when the context opens.
 * Speed only, never a result (the tests run every mode). */
void df_cuda_set_pdl(df_cuda *c, int mode);

/* The MXFP4 row tiles' fused form (kcuda_gemv.cuh, tf_mxfp4::unit_fma):
 * on (the default) a row's chunk whose x and scales keep every product a
 * normal float takes the group scale into the add, one multiply a code
 * fewer, and is the kernel's one unrolled form; other chunks, and every
 * chunk with it off, go a group at a time (slower: a MoE layer's token
 * 0.679 of the copy with it, PERFORMANCE.md run 42). The environment's
 * DF_CUDA_MXFP4_FMA=0 turns it off when the context opens ("MXFP4
 * unfused" in df_cuda_describe). Speed only, never a result (the tests run
 * both). */
void df_cuda_set_mxfp4_fused(df_cuda *c, int on);

/* The GEMMs' kernel for T > 1: 0 the lanes layout; 1 register tiles (a
 * block decodes 32 rows' weights once into shared memory for 32 vectors),
 * exact on the H200 but 1.2-1.5x slower than the lanes layout at T 64 and
 * 512 (docs/PERFORMANCE.md, run 14); 2 one lane a thread (kcuda_gemm.cuh:
 * the same 32 x 32 blocks, the next chunk's loads behind the current
 * chunk's products), about twice the lanes layout's speed at T 64 and 512
 * on the H200; -1 (the default) by T: 2 from DF_CUDA_LANE_GEMM_T vectors,
 * else 0. Results never depend on it (the test runs each). The
 * environment's DF_CUDA_GEMM_TILES (0, 1 or 2) forces one when the context
 * opens. */
#define DF_CUDA_LANE_GEMM_T 32
void df_cuda_set_gemm_tiles(df_cuda *c, int how);

/* Several GEMVs (T = 1) of one format in one launch: y[r] = dot(W[r], x)
 * for r < rows, each matrix with its own x and y, bit for bit its own
 * GEMV's (the row-tile kernel, whatever df_cuda_set_gemv_tiled says of the
 * lanes layout; a forced tile variant applies to the group). For the
 * products that one launch each would leave the GPU mostly idle for: a MoE
 * layer's experts on one token, a layer's projections of one input. fmt 0
 * bf16, 1 int8 (S: the row scales, floats), 3 MXFP4 (S: the group scales;
 * cols % 32 == 0); every pointer device memory. */
#define DF_CUDA_GROUP_MAX 32
typedef struct df_cuda_gemv_one {
  const void *W, *S;
  int rows, cols;
  const float *x;
  float *y;
} df_cuda_gemv_one;
int df_cuda_gemv_group(df_cuda *c, int fmt, int n, const df_cuda_gemv_one *m);

/* The vector functions of df_kern on n device floats: one block per vector. */
int df_cuda_rmsnorm(df_cuda *c, float *y, const float *x, const float *w, int n, float eps);
/* df_cuda_rmsnorm of the first n floats of `rows` rows, row r at [r * ld]
 * (ld >= n; y may be x): an MLA layer's kv_a rows norm their latent part
 * and keep the rest as it is */
int df_cuda_rmsnorm_rows(df_cuda *c, float *y, const float *x, const float *w, int n, int rows,
                         size_t ld, float eps);
/* Block AttnRes and the rmsnorm after it (model/k3_forward_t.h's ar_task
 * and rms_rows) for T rows: with V_i = snaps + i * ss for i < nS and
 * V_nS = last (rows of H floats, row t at [t * H] in each), row t's scores
 * are dot(rmsnorm(V_i[t], res_norm), res_proj) in the lane-16 order, their
 * softmax weighs the V_i[t] in ascending i from +0, and xn[t] is that sum
 * normed by norm (eps both). nS = 0: xn[t] = rmsnorm(last[t], norm), no
 * AR. work: T x H floats of scratch (nS > 0; row t holds its scores, so
 * nS + 1 <= H); xn and work may not overlap the inputs; T <= 65535. */
int df_cuda_attn_res(df_cuda *c, float *xn, float *work, const float *snaps, size_t ss, int nS,
                     const float *last, int T, int H, const float *res_norm,
                     const float *res_proj, const float *norm, float eps);
/* A MoE layer's routed sum (model/k3_forward_t.h's step 6): out[t][d] = the
 * sum over slots k < K, ascending, of w[t][k] * Y[rows[t][k]][d], each
 * product rounded before its add, from +0; rows and w are T x K, Y's rows
 * and out's are n floats. */
int df_cuda_moe_combine(df_cuda *c, float *out, const float *Y, const int *rows, const float *w,
                        int T, int K, int n);
/* y[i] = a[i] + b[i] (y may be a or b) */
int df_cuda_add(df_cuda *c, float *y, const float *a, const float *b, size_t n);
int df_cuda_softmax(df_cuda *c, float *x, int n);
int df_cuda_sigmoid(df_cuda *c, float *x, int n);
int df_cuda_silu(df_cuda *c, float *x, int n);
int df_cuda_situ(df_cuda *c, float *out, const float *g, const float *u, int n, float bg, float bu);
/* Elementwise y = f(x) for f = expf, tanhf, 1/sqrtf (which 0, 1, 2): the
 * elementary functions alone, for their exhaustive test. */
int df_cuda_elementary(df_cuda *c, int which, const float *x, float *y, size_t n);

/* The KDA step of df_kern.kda_step for `heads` heads at once: S is heads x
 * D x D, q, k, v, alpha, o heads x D, beta heads. */
int df_cuda_kda_step(df_cuda *c, float *S, const float *q, const float *k, const float *v,
                     const float *alpha, const float *beta, float *o, int heads, int D);
/* model/router.h's df_router_select for `rows` rows of n_experts sigmoid
 * scores (top_k <= 64): ids and w are rows x top_k. */
int df_cuda_router_topk(df_cuda *c, const float *sc, const float *bias, int n_experts, int top_k,
                        int norm_topk_prob, float routed_scale, int rows, int *ids, float *w);

#ifdef __CUDACC__
/* The context's stream, for the other .cu files' kernels (kcuda_seq.cu):
 * one stream, so their work is ordered with the copies and GEMMs around it
 * without a wait (the .cu file includes cuda_runtime.h first). */
cudaStream_t df_cuda_stream(df_cuda *c);
/* Their launches' form (kcuda_launch.cuh's df_launch): whether the next may
 * be a dependent one, and, once it went, that a kernel did (refused: the
 * dependent form was, so none is asked for again). */
bool df_cuda_launch_dependent(df_cuda *c);
void df_cuda_launched(df_cuda *c, bool refused);
#endif

#endif

/* --device cuda: the matrix products of the fp32 drivers (df_mm*, kernels.h)
 * on a CUDA device, with the weights kept in device memory between passes
 * (the weight tier, dtier.h: spine matrices by df_wmat.id, kept; routed
 * experts by their key, least recent out for one used more often lately:
 * an expert tier above the RAM cache).
 *
 * Exactness: the GPU kernels compute the scalar reference's bits
 * (kcuda.h), so a product gives the same floats on either side, and a
 * product the GPU cannot take (no memory, a CUDA error) is computed by the
 * CPU instead with the same result; the count of those is in the stats so a
 * test can tell "ran on the GPU" from "fell back".
 *
 * Compiled in every build: without -DDF_CUDA=ON df_kgpu_open fails, saying
 * so, and the products are never called. Calls are serialised by a mutex
 * (one engine runs one pass at a time; the lock only guards the tier). */
#ifndef DF_KERNELS_KGPU_H
#define DF_KERNELS_KGPU_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

typedef struct df_kgpu df_kgpu;

typedef struct df_kgpu_stats {
  char device[160];         /* "NVIDIA H200 (sm_90, 139.8 GiB)" */
  uint64_t mem_total, mem_free; /* the device's, when last read */
  uint64_t tier_cap, tier_bytes, tier_keep_bytes; /* keep: the spine's, never evicted (dtier.h) */
  int tier_entries;
  /* device memory mapped under the tier's heap, in granules of tier_granule
   * bytes (kgpu.c's heap_open; both 0 where each matrix is allocated on
   * its own) */
  uint64_t tier_mapped, tier_granule;
  uint64_t hits, misses, evictions, refused; /* the weight tier's */
  uint64_t products;        /* matrix products run on the GPU */
  uint64_t fallbacks;       /* products the GPU could not take (run on the CPU) */
  uint64_t seq_calls;       /* KDA layers' sequence parts run on the GPU (df_kgpu_kda) */
  uint64_t attn_calls;      /* MLA layers' attention run on the GPU (df_kgpu_mla) */
  uint64_t pre_calls;       /* AttnRes and norms made on the GPU (df_kgpu_pre) */
  uint64_t buffer_trims;    /* per-use buffers freed for a pass of far fewer rows (kgpu.c) */
  uint64_t seq_bytes;        /* device memory holding sequence state (df_kgpu_seq_*) */
  int seq_entries;
  uint64_t seq_pulls;        /* KDA states copied back because the host needed them */
  uint64_t seq_copies;       /* KDA states copied device to device (speculation's marks) */
  uint64_t h2d_bytes, d2h_bytes, weight_h2d_bytes;
  uint64_t pinned_bytes, pin_failures; /* host memory page-locked by df_kgpu_pin, ranges that failed */
  double weight_h2d_s;      /* weight copies into the tier (or the per-use buffer) */
  double compute_s;         /* activations in, kernels, results out (products, df_kgpu_kda, _mla) */
  char last_error[256];     /* the last CUDA error behind a fallback, "" if none */
} df_kgpu_stats;

/* The memory plan's say in the tier (plan.h's df_plan_gpu): called once the
 * tier's size and the device's free memory are known, it returns the most
 * the kept (spine) matrices may take (UINT64_MAX: no cap), which dtier.h's
 * df_dtier_keep_cap enforces. */
typedef uint64_t (*df_kgpu_plan_fn)(void *ud, uint64_t tier_bytes, uint64_t free_bytes);

/* Opens CUDA device dev with a weight tier of tier_bytes (0: the device's
 * free memory less 2 GiB for activations and per-use buffers, at least
 * 256 MiB), planned by plan (NULL: no cap on the kept matrices). NULL with
 * the reason in err. */
df_kgpu *df_kgpu_open(int dev, uint64_t tier_bytes, df_kgpu_plan_fn plan, void *plan_ud,
                      char *err, size_t errlen);
void df_kgpu_close(df_kgpu *g);

/* Y[t][r - r0] = W X[t] for rows [r0, r1) on the device. 0 when done there;
 * -1 when not (the caller computes it). */
int df_kgpu_mm(df_kgpu *g, const df_wmat *W, int r0, int r1, const float *X, int T, size_t ldx,
               float *Y, size_t ldy);
/* Y[i][t] = W[i] X[t] for n matrices of one input (kernels.h's df_mm_many):
 * X copied in once and the results out once, so the projections of one
 * normed input wait for the device once. 0 when done there; -1 when not
 * (nothing written). */
int df_kgpu_mm_many(df_kgpu *g, int n, const df_wmat *const *W, const float *X, int T,
                    size_t ldx, float *const *Y, const size_t *ldy);
#define DF_KGPU_MANY_MAX 16 /* matrices of one df_kgpu_mm_many call */
/* 5.1's AttnRes and the norm after it, made on the device in front of a
 * call (kcuda.h's df_cuda_attn_res): the call's x is then the residual
 * stream the layer reads (h, or p) and the device forms xn = norm(AR(the
 * pass's snapshots, x)) itself, from the snapshots it keeps for the pass
 * (x kept as the next one when keep), so a layer's AR and norm cost the
 * host nothing. A call given one returns -1 with nothing written when the
 * snapshots it reads are not all there (another pass came between, or one
 * was not kept): the host then makes xn itself and calls without. */
typedef struct df_kgpu_pre {
  uint64_t pass;   /* the forward pass: nonzero, unique in the process */
  int nS;          /* snapshots AR reads (0: none, xn = norm(x)) */
  int keep;        /* 1: x (the pass's rows) is kept as snapshot nS */
  int slots, rows; /* the most snapshots of the pass, its rows */
  int t0;          /* x's first row among them (keep: 0, and T = rows) */
  const float *res_norm, *res_proj; /* AR's (hidden floats; unread when nS = 0) */
  const float *norm;
  float eps;
  uint64_t id;     /* keys the three in the tier (0: copied every call) */
  /* add: the stream is x plus the output a KDA call left on the device
   * (df_kgpu_kda_args.defer; x NULL: that output alone), the same floats
   * as the host's adds, and it comes back to sum (T rows, stride ldx): so
   * the layer's attention output reaches the host with the router's
   * results, one wait instead of two. keep must be 0. */
  int add;
  float *sum;
} df_kgpu_pre;
/* df_kgpu_mm_many of xn, with pre's AttnRes and norm made from X on the
 * device first; xn stays there for the next df_kgpu_moe_tail, which names
 * it by *xtok. 0 done, -1 not (nothing written). */
int df_kgpu_mm_pre(df_kgpu *g, const df_kgpu_pre *pre, int n, const df_wmat *const *W,
                   const float *X, int T, size_t ldx, float *const *Y, const size_t *ldy,
                   uint64_t *xtok);
/* A gated FFN (kernels.h's df_ffn): Y[t] = down(SiTU(gate X[t], up X[t]))
 * with SiTU's betas bg, bu; X in once, the products and SiTU on the device,
 * Y out once. 0 when done there; -1 when not (nothing written). */
int df_kgpu_ffn(df_kgpu *g, const df_wmat *gate, const df_wmat *up, const df_wmat *down,
                const float *X, int T, size_t ldx, float bg, float bu, float *Y, size_t ldy);
/* The MXFP4 product of kernels.h's df_mm_mxfp4; id keys the tier (0: none). */
int df_kgpu_mm_mxfp4(df_kgpu *g, uint64_t id, const uint8_t *packed, const uint8_t *scales,
                     int rows, int cols, const float *X, int T, size_t ldx, float *Y, size_t ldy);

/* The sequence part of a KDA layer (model/k3_forward_t.h's conv_task and
 * kda_head_task, kernels/cuda/kcuda_seq.h) on the device for T rows: the
 * inputs and the state copied in, the kernels, the output and the state
 * copied back. 0 when done there: o holds the output, S and conv_st the
 * state after the T rows (what the CPU's loops leave; q, k, v, g, f are
 * only read). -1 when not: nothing the caller passed has been written, so
 * it runs its own loops on the same buffers. The layer's small weights are
 * kept in the tier under id (the identity of one of the layer's matrices:
 * df_wmat.id), or copied every call when id is 0. */
/* Sequence state kept on the device between passes, so that a decode step
 * moves its new rows and not the whole state: a KDA layer's S and conv
 * windows (6.3 MB a layer at full size) and an MLA layer's latent cache.
 * An entry is keyed by df_kgpu_seq_key(state id, layer), is never evicted
 * (the weight tier gives memory up for it, as for the per-use buffers) and
 * goes when its state does (df_kgpu_seq_drop). An MLA entry is a copy of
 * rows the host also holds; a KDA entry may be newer than the host's copy,
 * which then asks for it back (df_kgpu_seq_pull) before reading it. */
#define df_kgpu_seq_key(id, layer) (((uint64_t)(id) << 12) | (uint64_t)(layer))
/* on 1 (the default): entries are made; 0: none, every call copies its
 * state in and out (--gpu-state copy). Set before the first pass. */
void df_kgpu_keep_state(df_kgpu *g, int on);
/* Copies the KDA state kept under key to the host (S: nS floats, conv:
 * nconv); the entry stays, equal to it. 0, or -1 when it cannot (a dead
 * device): the state is then lost and the caller says so. */
int df_kgpu_seq_pull(df_kgpu *g, uint64_t key, float *S, size_t nS, float *conv, size_t nconv);
/* Makes the KDA entry under dst a copy of the one under src (made, or
 * overwritten), on the device: a mark saved or restored without the state
 * crossing the bus. 0, or -1 when it cannot (no entry under src, state
 * not kept, no room, a failed copy): the caller then copies through the
 * host, and dst's entry, if any, is stale. */
int df_kgpu_seq_copy(df_kgpu *g, uint64_t dst, uint64_t src);
/* Frees every entry of state id (its layers). */
void df_kgpu_seq_drop(df_kgpu *g, uint64_t id);

typedef struct df_kgpu_kda_args {
  int T, heads, D, K;       /* rows, heads, head dim, conv width */
  float lb, eps;            /* the gate's lower bound, o_norm's epsilon */
  const float *q, *k, *v, *g, *f; /* T x (heads x D): the products */
  const float *b;           /* T x heads */
  float *o;                 /* T x (heads x D) */
  float *S;                 /* heads x D x D */
  float *conv_st;           /* 3 x (K-1) x (heads x D) */
  const float *conv_w[3];   /* q's, k's, v's: (heads x D) x K */
  const float *A_log, *dt_bias, *o_norm; /* heads, heads x D, D */
  uint64_t id;
  /* skey: keep the state on the device under this key (0: copy it in and
   * out every call); s_host: 1 the host's S and conv_st are current (copied
   * in), 0 the entry under skey is (the host's are not read). */
  uint64_t skey;
  int s_host;
  int kept; /* out: 1 the state after the call is only in the entry (S and
             * conv_st not written), 0 it was written to the host */
  /* speculation's per-row boundary states: the state after row t < nrow
   * is also kept in the entry under rkey[t] (made, or overwritten), as a
   * call of t + 1 rows would leave it. Only with skey (and entries kept):
   * else -1, and the caller's loops write them. On -1 the entries under
   * rkey are not to be read: some may be half written. */
  int nrow;
  const uint64_t *rkey;
  /* defer (fused): the output may stay on the device for the next call's
   * df_kgpu_pre.add (or df_kgpu_take) instead of coming back to out, so
   * the call need not wait for the device; deferred (out): 1 it did (not
   * with --gpu-state copy, which keeps the host's copy of everything) */
  int defer, deferred;
  /* The layer's projections too, when x is set (one round trip for the
   * layer instead of four): q, k, v, g, b and fa made on the device from x
   * (T x hidden, stride ldx) by W[0..5] = q, k, v, g, fa, b, then f = fb(fa)
   * by W[6], and the output through o_proj W[7] into out (T x hidden,
   * stride ldo) in place of o. q, k, v, g, f, b and o are then neither read
   * nor written; on -1 nothing is, out included. With pre, x is the
   * residual stream and the layer's input is pre's xn of it. */
  const float *x;
  size_t ldx;
  const df_kgpu_pre *pre;
  const df_wmat *W[8];
  float *out;
  size_t ldo;
} df_kgpu_kda_args;
/* 0 done; -1 not done (nothing written, the entry as it was); -2 the
 * entry was being written when the device failed: the state is lost. */
int df_kgpu_kda(df_kgpu *g, df_kgpu_kda_args *a);
/* A deferred output to the host after all (T rows of H, stride ldo), when
 * the next call could not take it: 0, or -1 when it is gone (a dead
 * device: the caller cannot go on with the pass). */
int df_kgpu_take(df_kgpu *g, float *out, int T, size_t H, size_t ldo);

/* An MLA layer's attention between its projections (model/k3_forward_t.h's
 * mla_task: the query's latent through kv_b's key rows, the scores against
 * the latent cache, the softmax, the latent output through kv_b's value
 * rows, the output gate) for T rows on the device; the cache (n0 + T rows,
 * the batch's own included) copied in per call, kv_b kept in the tier by
 * its id. 0 when done there (o written); -1 when not, nothing written. */
typedef struct df_kgpu_mla_args {
  int T, heads, n0;          /* rows, heads, positions before row 0 */
  int dn, dr, dv, kr;        /* qk_nope, qk_rope, v_head dims, kv_lora_rank */
  const df_wmat *kvb;
  const float *q;            /* T x heads x (dn + dr) */
  const float *cache;        /* (n0 + T) x (kr + dr) */
  const float *g;            /* T x heads x dv: the gate before its sigmoid; NULL: none */
  float *o;                  /* T x heads x dv */
  /* skey: keep the cache's rows on the device under this key (0: copy all
   * of them every call); rows before n0 kept from an earlier call with the
   * same gen are not copied again (the state changes gen when rows before
   * its position change: a copy into it) */
  uint64_t skey;
  uint32_t gen;
  /* The layer's projections too, when x is set (one round trip for the
   * layer instead of five): from x (T x hidden, stride ldx) W[0..4] = q_a,
   * kv_a, q_b, the gate (NULL: none) and o_proj; q_a's output normed by
   * qa_norm before q_b, kv_a's first kr columns by kva_norm (eps both):
   * those rows are the cache's n0 .. n0 + T - 1, written to new_rows
   * (T x (kr + dr)) for the host's cache; o_proj's output to out (T x
   * hidden, stride ldo). q, g, o and the cache's rows from n0 on are then
   * neither read nor written; on -1 nothing is, out and new_rows included.
   * With pre, x is the residual stream and the layer's input pre's xn. */
  const float *x;
  size_t ldx;
  const df_kgpu_pre *pre;
  const df_wmat *W[5];
  const float *qa_norm, *kva_norm;
  float eps;
  float *new_rows, *out;
  size_t ldo;
} df_kgpu_mla_args;
int df_kgpu_mla(df_kgpu *g, const df_kgpu_mla_args *a);

/* A MoE layer batch's routed experts, queued as the store hands them out so
 * the GPU computes the ones that are there while the rest arrive; one wait
 * at the end. The order the experts arrive in changes where their rows sit
 * in the batch, never a value: each expert's rows are computed alone, and
 * the caller sums them in its fixed order afterwards.
 *   begin: the batch's record layout and the rows it will queue at most;
 *   expert_in: where to put the next expert's n input rows (latent each);
 *   expert: queues the expert (record rec of key) on those rows; *row0 is
 *     the batch row of its first output;
 *   end: waits; the outputs, row r at [r * latent], or NULL after an error
 *     (df_kgpu_error says which; the store may have released the records,
 *     so the caller reads them again to compute the batch on the CPU).
 * begin/expert return -1 when the GPU cannot take them (nothing queued by
 * that call; the caller computes that expert on the CPU). expert with rec
 * NULL queues the expert from the tier and returns 1, nothing queued and
 * nothing counted, when the tier no longer holds it (the caller reads it).
 * has_expert says whether the tier holds key now, without touching it: the
 * caller leaves out of its reads what the GPU already has, so a tier that
 * holds a layer's experts reads nothing from the drives for it. */
typedef struct df_kgpu_xshape {
  int inter, latent;
  uint64_t w1p, w1s, w3p, w3s, w2p, w2s, bytes; /* offsets in a record, its size */
  float beta, linear_beta;                      /* SiTU's */
} df_kgpu_xshape;
int df_kgpu_experts_begin(df_kgpu *g, const df_kgpu_xshape *sh, int max_rows);
float *df_kgpu_expert_in(df_kgpu *g, int n);
int df_kgpu_expert(df_kgpu *g, uint64_t key, const uint8_t *rec, int n, int *row0);
const float *df_kgpu_experts_end(df_kgpu *g);
int df_kgpu_has_expert(df_kgpu *g, uint64_t key);
/* The end of a MoE layer on the device, in place of _end when every expert
 * of the batch was queued there: the routed sum over each row's slots in
 * their order (model/k3_forward_t.h's moe_layer, step 6), the latent norm,
 * the up projection and, added to it, the shared expert of x (steps 7-9,
 * the same floats), so the layer's experts, its shared expert and its
 * output wait for the device once instead of three times:
 *   out[t] = up(norm(sum_k w[t][k] * y(slot_row[t][k]))) + shared(x[t]).
 * 0 when done (out written); -1 when not: the batch has failed as _end's
 * NULL says (nothing written; the caller reads the experts again). */
typedef struct df_kgpu_moe_tail {
  int T, K;
  const int *slot_row;  /* T x K: the batch row of slot (t, k)'s output (df_kgpu_expert's
                         * *row0 plus the slot's place among the expert's rows) */
  const float *slot_w;  /* T x K: the slots' weights */
  const float *norm;    /* latent floats: the latent norm's weights; NULL: no norm */
  uint64_t norm_id;     /* keeps norm in the tier (0: copied every call) */
  float eps;
  const df_wmat *up;    /* latent -> hidden */
  const df_wmat *sh_gate, *sh_up, *sh_down; /* the shared expert; sh_gate NULL: none */
  float bg, bu;         /* its SiTU's betas */
  const float *x;       /* T x hidden, stride ldx: the shared expert's input */
  size_t ldx;
  uint64_t xtok;        /* nonzero: x is instead the xn df_kgpu_mm_pre left under this */
  float *out;           /* T x hidden, stride ldo */
  size_t ldo;
} df_kgpu_moe_tail;
int df_kgpu_experts_end_tail(df_kgpu *g, const df_kgpu_moe_tail *a);
/* The last CUDA error ("" if none). */
const char *df_kgpu_error(df_kgpu *g);

/* Page-locks host memory the weights are copied from (the store's record
 * buffers: store.h's df_store_on_buffers), and undoes it before that memory
 * is freed. A range that cannot be locked stays pageable (slower, counted). */
void df_kgpu_pin(void *g, void *p, size_t n);
void df_kgpu_unpin(void *g, void *p, size_t n);

void df_kgpu_stats_get(df_kgpu *g, df_kgpu_stats *st);

#endif

/* The K3 model: spine weights checked against the config at load, per-
 * sequence state, and the exact forward pass of kimi-k3.md section 5 over a
 * batch of T positions. Routed experts come only from the expert store.
 *
 * Pinned choices where the contract leaves one open:
 *   - KDA L2 norm: u / sqrt(sum u^2 + 1e-6) (flash-linear-attention).
 *   - KDA A_log is indexed per head (entries >= num_heads are padding).
 *   - MLA uses the latent cache (kv_lora_rank normalised latent + rope part
 *     per position) with kv_b absorbed into the query and the output.
 *   - MoE: routed experts are summed in ascending expert id.
 *   - --spine int8: every 2-D bf16 spine matrix with more than one row is
 *     read from DIR/spine-int8/, except the router (block_sparse_moe.gate),
 *     which stays bf16 so int8 rounding never changes which experts run.
 */
#ifndef DF_MODEL_K3_H
#define DF_MODEL_K3_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "kernels/kernels.h"
#include "plan/plan.h"
#include "store/pack.h"
#include "store/spine.h"
#include "store/store.h"

#define DF_SPINE_INT8_DIR "spine-int8"

/* The loaded model is opaque (its layout is private to src/model/); the
 * engine and the tools reach it through the accessors below. */
typedef struct df_k3 df_k3;

/* Checks every spine tensor (presence, shape, dtype) against the config and
 * maps it; with int8 also DIR/spine-int8/. Messages name the tensor and the
 * config field it contradicts. */
int df_k3_load(df_k3 **out, const df_st_set *set, const df_config *c, int int8,
               const char *model_dir, df_err *e);
/* The same with the row-int8 spine read from int8_dir (NULL = DIR/spine-int8). */
int df_k3_load_from(df_k3 **out, const df_st_set *set, const df_config *c, int int8,
                    const char *model_dir, const char *int8_dir, df_err *e);
void df_k3_free(df_k3 *m);

const df_config *df_k3_config(const df_k3 *m);
int df_k3_is_int8(const df_k3 *m);
/* Spine weight bytes one decode token reads (every spine tensor once, one
 * embedding row), whether resident or streamed. */
uint64_t df_k3_spine_bytes_per_token(const df_k3 *m);
/* Positions a session may hold: the memory plan's admitted context, else
 * the config's max_position_embeddings. */
int df_k3_ctx_limit(const df_k3 *m);

/* Activation precision of the states made after this call: 32 (fp32, the
 * default; every kernel table) or 64 (float64 on the scalar float64 kernels:
 * the same weights, an error about 1e-9 of fp32's, for checking an output
 * against the reference where fp32 meets a near-tie; several times slower,
 * and the KDA state and MLA cache take twice the memory). */
void df_k3_set_precision(df_k3 *m, int bits);
int df_k3_precision(const df_k3 *m);

/* The planner's inputs this model supplies (plan/plan.h): units (layers,
 * then the head) with their weight and read bytes and whether they can
 * stream, the small always-resident tensors, the embedding row. The arrays
 * belong to m; the caller fills mem_limit, cache, ctx and rows. */
void df_k3_plan_input(const df_k3 *m, df_plan_in *in);

/* Applies a plan: non-resident units stream every pass, read by the weight
 * store (store/spine.h) into DF_PLAN_RING_SLOTS buffers, the next unit
 * arriving while one computes; resident units stay mmapped from the shards
 * (the page cache keeps them: the plan leaves room for them; zero-copy and
 * shared with other readers of the checkpoint). */
int df_k3_apply_plan(df_k3 *m, const df_plan *p, df_err *e);
/* Hands the streamed units to the store (no-op when nothing streams): it
 * opens the files, reads on its drives with its options (--io,
 * --queue-depth, --emulate-drives, --trace), from its pack's spine section
 * when that is of this model's kind and layout, and checks that section's
 * checksums (store/spine.h). Call after df_store_open and before the first
 * forward pass; free the model before closing the store. */
int df_k3_stream_start(df_k3 *m, df_store *st, df_err *e);

typedef df_spine_stats df_k3_stream_stats;
void df_k3_stream_stats_get(const df_k3 *m, df_k3_stream_stats *st);
/* Waits until no spine read is in flight (the next unit's, issued ahead):
 * for end-of-run reports, whose figures then agree with the trace, which
 * logs every read that lands. Never inside a measured window: the read it
 * waits for belongs to the next pass. */
void df_k3_stream_settle(const df_k3 *m);

/* The spine section `deltafin pack --spine` writes: every unit that can
 * stream (layers, then the head) as the file ranges of its stream buffer
 * (paths valid while m lives); returns the number of units. The layout id
 * is what a run compares with the pack's section (k3_spine_layout.c). */
int df_k3_spine_layout(const df_k3 *m, df_pack_spine *out);
void df_k3_spine_layout_free(df_pack_spine *sp);
uint64_t df_k3_spine_layout_id(const df_k3 *m);

/* The reads one pass of the spine stream makes (every streamed unit's
 * extents in DF_K3_STREAM_CHUNK pieces, or its chunks of the pack's spine
 * section, in forward order, with the store drive each goes to), for tools
 * that replay them (the bench's spine ceiling). Returns the spine reads in
 * flight per drive: through the store its df_store_spine_depth (queue depth
 * - 1), else the stream's own engine's depth. */
#define DF_K3_STREAM_CHUNK DF_SPINE_CHUNK
typedef df_spine_read_fn df_k3_read_fn;
int df_k3_stream_reads(const df_k3 *m, df_k3_read_fn fn, void *ud);

/* Compute time of decode passes (one position) by part, summed since load:
 * seconds and layer-passes. Waits (spine stream, expert store) are not
 * compute and are excluded. */
enum { DF_K3_T_KDA, DF_K3_T_MLA, DF_K3_T_DENSE, DF_K3_T_MOE_TRUNK, DF_K3_T_EXPERTS, DF_K3_T_HEAD,
       DF_K3_T_N };
typedef struct df_k3_compute {
  double s[DF_K3_T_N];
  uint64_t n[DF_K3_T_N]; /* layer-passes (experts: experts computed) */
  double store_wait_s;
  /* the same over passes of more than one row (prefill chunks, verified
   * drafts); n counts layer-rows there (experts: expert batches), so s / n
   * is a layer's time per token of a prompt */
  double pre_s[DF_K3_T_N];
  uint64_t pre_n[DF_K3_T_N];
  double pre_store_wait_s;
} df_k3_compute;
void df_k3_compute_get(const df_k3 *m, df_k3_compute *out);
extern const char *const df_k3_compute_names[DF_K3_T_N];

/* True for the spine tensors the int8 spine replaces (see above). */
int df_k3_int8_eligible(const df_tensor *t);

/* Writes DIR/spine-int8/ (one safetensors file per source shard holding its
 * eligible tensors as `<name>` I8 [rows, cols] + `<name>.scale` F32 [rows],
 * then an index); resumable per shard, every file written atomically. */
int df_k3_convert_spine(const char *model_dir, int threads, int force, df_err *e);
/* The same into out_dir (NULL = DIR/spine-int8), e.g. when the model folder
 * is read-only or on another drive; progress on stderr when progress != 0.
 * Memory stays bounded whatever the shard size: rows are converted in steps
 * and the source's pages are dropped from the page cache once converted. */
int df_k3_convert_spine_to(const char *model_dir, const char *out_dir, int threads, int force,
                           int progress, df_err *e);

/* The target's embedding rows (T x hidden) and LM head (T rows of x, each
 * hidden floats, to T x vocab logits, no final norm) for a draft that shares
 * them (dspark/): the same weights the forward pass reads, never a copy. A
 * streamed head is read for the call like the forward pass reads it. */
int df_k3_embed(const df_k3 *m, const int *ids, int T, float *out, df_err *e);
int df_k3_lm_head(const df_k3 *m, const df_kctx *kc, const float *x, int T, float *logits,
                  df_err *e);

/* ---- per-sequence state and the forward pass ----
 * A state is its sequence state (below) plus the scratch of the passes run
 * on it, made on its first pass and grown with the largest batch; clone,
 * copy, marks and df_k3_state_bytes see only the sequence state, whose size
 * for a config is df_plan_state_bytes (plan/plan.h). The engine reaches
 * these through the model seam (model/model.h). */
typedef struct df_k3_state df_k3_state;

df_k3_state *df_k3_state_new(const df_k3 *m);
void df_k3_state_free(df_k3_state *s);
void df_k3_state_reset(df_k3_state *s);
int df_k3_state_pos(const df_k3_state *s);

/* The sequence state alone (position, KDA recurrent states and conv
 * windows, the MLA latent cache up to the position; AttnRes keeps nothing
 * across positions): a clone without scratch (a source for copy), a copy of
 * one state into another of the same model (dst's MLA cache grows as
 * needed), and the bytes a clone of s takes. Continuing from a copy gives
 * the same results as continuing the original. */
df_k3_state *df_k3_state_clone(const df_k3_state *s);
void df_k3_state_copy(df_k3_state *dst, const df_k3_state *src);
size_t df_k3_state_bytes(const df_k3_state *s);

/* A cheap rollback point for speculation: the recurrent state (KDA
 * matrices, conv windows) and the position, copied; restoring it forgets
 * the positions after it (the MLA cache rows past it are rewritten before
 * they are read, so they need no copy). Its bytes are fixed: the KDA state,
 * whatever the context. A mark belongs to states of one model. */
typedef struct df_k3_mark df_k3_mark;
df_k3_mark *df_k3_mark_new(const df_k3_state *s);
void df_k3_mark_save(df_k3_mark *k, const df_k3_state *s);
void df_k3_mark_restore(df_k3_state *s, const df_k3_mark *k);
size_t df_k3_mark_bytes(const df_k3_state *s);
void df_k3_mark_free(df_k3_mark *k);
/* Per-row boundary states, the other rollback: during every later forward
 * pass (until n = 0 clears it), marks[t] for t < n receives the recurrent
 * state as it is after that pass's row t, so a verify block rejected after
 * row t is undone by restoring marks[t], with no recompute; the price is n
 * marks' memory and their copies during the pass. */
void df_k3_state_set_row_marks(df_k3_state *s, df_k3_mark *const *marks, int n);

/* Called after each layer with the T hidden states (the next layer's h). */
typedef void (*df_k3_layer_hook)(void *ud, int layer, const float *h, int T, int hidden);
void df_k3_state_set_hook(df_k3_state *s, df_k3_layer_hook fn, void *ud);

/* Called in every MoE layer once all T rows are routed: scores (T x E) are
 * the sigmoid scores before the correction bias, ids (T x K) each row's
 * chosen experts in ascending id. Lets a reference comparison find the
 * first routing decision that differs and measure its margin. */
typedef void (*df_k3_route_hook)(void *ud, int layer, const float *scores, const int *ids, int T,
                                 int E, int K);
void df_k3_state_set_route_hook(df_k3_state *s, df_k3_route_hook fn, void *ud);

/* Polled after each layer; nonzero stops the pass: df_k3_forward returns
 * DF_K3_CANCELLED (no error set) with the state partly updated (reset it).
 * A layer of a long prefill chunk can take seconds, so a chunk is not the
 * unit of cancellation. NULL removes it. */
#define DF_K3_CANCELLED 1
typedef int (*df_k3_cancel_fn)(void *ud);
void df_k3_state_set_cancel(df_k3_state *s, df_k3_cancel_fn fn, void *ud);

/* What the gate-ahead predictor feeds layer L+1's router with (only when
 * the store wants hints, see df_store_wants_hint). Decode recall measured on
 * the synthetic presets (40 tokens, top-k/E is chance): tiny 0.44 from x vs
 * 0.43 with the shared output (chance 0.25); small 0.41 vs 0.39 (chance
 * 0.06). x alone is as good and needs nothing more, so it is the default. */
enum {
  DF_GATE_FROM_X = 0,        /* L's normalised MLP input x */
  DF_GATE_FROM_X_SHARED = 1, /* L's MLP input + L's shared-expert output, normalised with
                              * L+1's post-attention norm */
};

typedef struct df_k3_run {
  const df_k3 *m;
  const df_kctx *kc;
  df_store *store;
  int gate_input; /* DF_GATE_FROM_* */
} df_k3_run;

/* Runs ids[0..T) at positions pos..pos+T-1. logits_last (vocab) gets the last
 * row's logits, logits_all (T x vocab) every row's; either may be NULL. On
 * error the state is left at its old position but may be partly updated:
 * reset the session. */
int df_k3_forward(const df_k3_run *r, df_k3_state *s, const int *ids, int T, float *logits_last,
                  float *logits_all, df_err *e);

#endif

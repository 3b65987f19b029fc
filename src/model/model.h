/* The model seam: what the engine needs of a model, whatever its family.
 * The engine (src/engine/) reaches the target model only through this
 * header; K3 is the first implementation (k3_model.c), the draft models the
 * second and third (qwen3/qwen3_model.c, dspark/dspark_model.c: they sit
 * above this layer because DSpark reads the target through it). A model is a
 * table of operations (df_model_ops) over an implementation's private handle;
 * the functions below dispatch.
 *
 * Life of a model in the engine:
 *   load (df_model_open_k3) -> plan input (df_model_plan_in) -> df_plan_make
 *   -> apply the plan (df_model_apply_plan) -> open the store
 *   -> start the spine stream (df_model_stream_start) -> bind the run
 *   (df_model_bind: kernels, store, gate-ahead input) -> states and forward.
 *
 * Sequence state (df_mstate) is what a continuation depends on and nothing
 * else: position, recurrent state, attention caches. A model's scratch is
 * not part of it, so a snapshot (df_mstate_clone), a copy and a rollback
 * mark (df_mmark) move only sequence state. */
#ifndef DF_MODEL_MODEL_H
#define DF_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "kernels/kernels.h"
#include "plan/plan.h"
#include "store/opts.h"
#include "store/store.h"

typedef struct df_model df_model;
typedef struct df_mstate df_mstate;
typedef struct df_mmark df_mmark;

/* Called after each layer with the T rows of hidden state the next layer
 * takes (a tap: a draft head or a test reads them; fp32 in every precision). */
typedef void (*df_model_tap_fn)(void *ud, int layer, const float *h, int T, int hidden);
/* Called in every MoE layer with the router's scores (T x E, before any
 * correction bias) and each row's chosen experts (T x K, ascending id). */
typedef void (*df_model_route_fn)(void *ud, int layer, const float *scores, const int *ids, int T,
                                  int E, int K);
/* Polled between layers; nonzero stops the pass with DF_MODEL_CANCELLED. */
typedef int (*df_model_cancel_fn)(void *ud);
#define DF_MODEL_CANCELLED 1

/* What the gate-ahead predictor (the store's prefetch hints) feeds layer
 * L+1's router with: L's normalised MLP input, or that plus L's
 * shared-expert output (k3.h explains the choice). */
enum { DF_MODEL_GATE_X = 0, DF_MODEL_GATE_X_SHARED = 1 };

/* What a forward pass runs with, fixed once the engine has its kernels and
 * store. */
typedef struct df_model_run {
  const df_kctx *kc;
  df_store *store;
  int gate_input; /* DF_MODEL_GATE_* */
} df_model_run;

/* The spine stream's figures (what streams, what it read, how long the
 * forward pass waited), for the engine's reports. units == 0: all resident. */
typedef struct df_model_stream_stats {
  int units;
  uint64_t bytes, weight_bytes, reads, wasted, passes;
  double wait_s;
  int direct, registered;
  const char *io;
  const char *source; /* "pack", "shards", "shards+int8" */
  int drives;
} df_model_stream_stats;

/* Decode compute time by part (names are the family's), summed since load. */
#define DF_MODEL_PARTS_MAX 8
typedef struct df_model_compute {
  int nparts;
  const char *const *names;
  double s[DF_MODEL_PARTS_MAX];
  uint64_t n[DF_MODEL_PARTS_MAX];
  double store_wait_s;
  /* passes of more than one row (prefill); n counts layer-rows */
  double pre_s[DF_MODEL_PARTS_MAX];
  uint64_t pre_n[DF_MODEL_PARTS_MAX];
  double pre_store_wait_s;
} df_model_compute;

typedef void (*df_model_read_fn)(void *ud, const char *path, int drive, uint64_t off, uint32_t len);

/* A family's sizes, for a model that has no df_config (a draft): what the
 * accessors df_model_vocab / hidden / layers / eos answer. eos < 0: none. */
typedef struct df_model_shape {
  int vocab, hidden, layers, eos;
} df_model_shape;

/* What a caller asks of the memory plan; the model supplies the rest of the
 * planner's input (its units, small tensors, experts, state size). */
typedef struct df_model_plan_req {
  uint64_t mem_limit;   /* bytes deltafin may use (already detected or given) */
  int64_t cache_req;    /* expert cache asked for in bytes; < 0 = planner decides */
  int64_t cache_default; /* the cache when the planner decides; < 0 = every expert */
  int ctx;              /* positions to admit; <= 0 = planner decides */
  int max_rows;         /* largest batch; <= 0 = 1 (decode) */
  uint64_t reuse_bytes; /* kept conversation states (serve --reuse-mb) */
  int reuse_states;
  int f64;              /* float64 activations */
  const char *draft;    /* --draft: NULL / "off" = none, "self" = a second state */
  int draft_rows;       /* logits rows of one verify block (the engine's DF_DRAFT_MAX + 1) */
  int draft_marks;      /* rollback marks kept (--draft-rollback: 1, or K for rows); <= 0 = 1 */
  uint64_t draft_fixed; /* a draft model's weights and buffers (df_draft_mem) */
  uint64_t draft_per_pos; /* ... and its cache per context position */
} df_model_plan_req;

/* The operations an implementation provides. `self` is the
 * implementation's handle; states and marks are its own types behind void *.
 * Ops a model cannot do (a plan-only model: no weights) are NULL, and the
 * dispatchers below then fail or answer nothing. */
typedef struct df_model_ops {
  const char *family;
  void (*free)(void *self);
  /* K3's config; NULL for a family without one (the drafts), which answers
   * shape instead. Exactly one of the two is set. */
  const df_config *(*config)(const void *self);
  void (*shape)(const void *self, df_model_shape *out);
  /* a draft's own weights and its cache per position, for the target's
   * memory plan (NULL: the model plans itself through plan_input) */
  void (*mem)(const void *self, uint64_t *weights, uint64_t *per_pos);
  /* NULL: the model is not planned (a draft; its memory is its own) */
  void (*plan_input)(const void *self, df_plan_in *in);
  int (*apply_plan)(void *self, const df_plan *p, df_err *e);
  int (*stream_start)(void *self, df_store *st, df_err *e);
  void (*stream_stats)(const void *self, df_model_stream_stats *out);
  void (*stream_settle)(const void *self);
  int (*stream_reads)(const void *self, df_model_read_fn fn, void *ud);
  void (*compute)(const void *self, df_model_compute *out);
  uint64_t (*spine_bytes_per_token)(const void *self);
  int (*ctx_limit)(const void *self);
  int (*precision)(const void *self);
  /* sequence state */
  void *(*state_new)(const void *self);
  void (*state_free)(void *st);
  void (*state_reset)(void *st);
  int (*state_pos)(const void *st);
  /* forgets positions >= pos; NULL: the state cannot be cut (K3's recurrent
   * KDA state: marks roll it back instead) */
  void (*state_truncate)(void *st, int pos);
  void *(*state_clone)(const void *st);
  void (*state_copy)(void *dst, const void *src);
  size_t (*state_bytes)(const void *st);
  /* hooks; NULL: the model has none (the drafts) and setting one is a no-op */
  void (*state_set_tap)(void *st, df_model_tap_fn fn, void *ud);
  void (*state_set_route)(void *st, df_model_route_fn fn, void *ud);
  void (*state_set_cancel)(void *st, df_model_cancel_fn fn, void *ud);
  /* NULL: no marks (a draft rolls back by state_truncate) */
  void *(*mark_new)(const void *st);
  void (*mark_save)(void *mark, const void *st);
  void (*mark_restore)(void *st, const void *mark);
  void (*mark_free)(void *mark);
  /* NULL: the model has no per-row boundary states (--draft-rollback rows refused) */
  void (*state_set_row_marks)(void *st, void *const *marks, int n);
  /* the embedding rows and the LM head a draft that shares them reads (a
   * DSpark head); NULL: the model shares none */
  int (*embed)(const void *self, const int *ids, int T, float *out, df_err *e);
  int (*lm_head)(const void *self, const df_kctx *kc, const float *x, int T, float *logits,
                 df_err *e);
  /* NULL: no causal forward over ids (DSpark: its pass is the family's own
   * block proposal, dspark.h) */
  int (*forward)(const void *self, const df_model_run *run, void *st, const int *ids, int T,
                 float *logits_last, float *logits_all, df_err *e);
} df_model_ops;

/* Wraps an implementation (ops and handle) as a model; the model owns self. */
df_model *df_model_wrap(const df_model_ops *ops, void *self);
void df_model_free(df_model *m);
const char *df_model_family(const df_model *m);
void *df_model_self(const df_model *m);

/* K3 (k3_model.c): loads the checkpoint's spine (df_k3_load_from) with the
 * activation precision bits (32 or 64). */
int df_model_open_k3(df_model **out, const df_st_set *set, const df_config *c, int int8,
                     const char *model_dir, const char *int8_dir, int precision, df_err *e);
/* K3 for planning alone, from its config (no checkpoint: the unit sizes the
 * loader would have, plan/plan_k3.c); only config, plan input and the
 * state-size accessors work. c must outlive the model. */
df_model *df_model_plan_only_k3(const df_config *c, int int8);
/* The drafts open in their own headers: df_model_open_qwen3 (qwen3/qwen3.h),
 * df_model_open_dspark (dspark/dspark.h). */

/* ---- accessors ---- */
/* K3's config; NULL for a family without one (the drafts). */
const df_config *df_model_config(const df_model *m);
/* From the config, or the family's shape where it has none. */
int df_model_vocab(const df_model *m);
int df_model_hidden(const df_model *m);
int df_model_layers(const df_model *m);
/* The end-of-sequence id, or -1 when the model names none. */
int df_model_eos(const df_model *m);
/* Positions a state may hold (the plan's admitted context). */
int df_model_ctx_limit(const df_model *m);
/* A draft model's weights and cache bytes per position (0, 0 without a mem op). */
void df_model_mem(const df_model *m, uint64_t *weights, uint64_t *per_pos);
int df_model_precision(const df_model *m);
uint64_t df_model_spine_bytes_per_token(const df_model *m);

/* ---- the memory plan ---- */
/* The planner's whole input: the model's part (units, small tensors,
 * expert records, its sequence state) and the request. The arrays belong to
 * m. The one place a df_plan_in is built (engine, inspect, plan). Only a
 * planned family (K3); for another, in is left zeroed. */
void df_model_plan_in(const df_model *m, const df_model_plan_req *rq, df_plan_in *in);
/* Applies a plan (which units stay resident, the stream ring); the spine
 * stream takes its I/O options from the store at df_model_stream_start. */
int df_model_apply_plan(df_model *m, const df_plan *p, df_err *e);
int df_model_stream_start(df_model *m, df_store *st, df_err *e);
void df_model_stream_stats_get(const df_model *m, df_model_stream_stats *out);
/* Waits until no spine read is in flight (for end-of-run reports). */
void df_model_stream_settle(const df_model *m);
int df_model_stream_reads(const df_model *m, df_model_read_fn fn, void *ud);
void df_model_compute_get(const df_model *m, df_model_compute *out);
/* Sets what forward passes run with (after the store is open). */
void df_model_bind(df_model *m, const df_model_run *run);

/* ---- sequence state ---- */
df_mstate *df_mstate_new(const df_model *m);
void df_mstate_free(df_mstate *s);
void df_mstate_reset(df_mstate *s);
int df_mstate_pos(const df_mstate *s);
/* The model s belongs to, and the implementation's state behind it (for a
 * family's own operations on it, as df_model_self is for the model). */
const df_model *df_mstate_model(const df_mstate *s);
void *df_mstate_self(const df_mstate *s);
/* Rollback by cutting: forgets positions >= pos (0 <= pos; pos past the
 * current one changes nothing). Returns -1 when the model cannot cut its
 * state (its ops leave state_truncate NULL: K3, which uses marks). */
int df_mstate_truncate(df_mstate *s, int pos);
/* A copy of the sequence state alone (no scratch: a snapshot, a source for
 * df_mstate_copy); continuing from it gives the same results as the source. */
df_mstate *df_mstate_clone(const df_mstate *s);
/* dst takes src's sequence (states of one model). */
void df_mstate_copy(df_mstate *dst, const df_mstate *src);
/* Bytes of sequence state s holds now (what a clone of it takes). */
size_t df_mstate_bytes(const df_mstate *s);
void df_mstate_set_tap(df_mstate *s, df_model_tap_fn fn, void *ud);
void df_mstate_set_route(df_mstate *s, df_model_route_fn fn, void *ud);
void df_mstate_set_cancel(df_mstate *s, df_model_cancel_fn fn, void *ud);

/* A rollback point (speculation): saving copies the part of the state a
 * continuation overwrites (K3: KDA matrices and conv windows, the
 * position); restoring it forgets the positions after it. df_mmark_new is
 * NULL for a model without marks (the drafts: df_mstate_truncate). */
df_mmark *df_mmark_new(const df_mstate *s);
void df_mmark_save(df_mmark *k, const df_mstate *s);
void df_mmark_restore(df_mstate *s, const df_mmark *k);
void df_mmark_free(df_mmark *k);
/* Per-row boundary states for speculation's other rollback: during every
 * later forward pass (until n = 0 clears it), marks[t] for t < n receives
 * the state as it is after that pass's row t. Returns -1 when the model has
 * none (its ops leave state_set_row_marks NULL). */
int df_mstate_set_row_marks(df_mstate *s, df_mmark *const *marks, int n);

/* The target's embedding rows (T x hidden) and its LM head over T rows of
 * hidden floats (T x vocab logits, no final norm), for a draft that shares
 * them (dspark/): the weights the forward pass reads, never a copy. */
int df_model_embed(const df_model *m, const int *ids, int T, float *out, df_err *e);
int df_model_lm_head(const df_model *m, const df_kctx *kc, const float *x, int T, float *logits,
                     df_err *e);

/* Runs ids[0..T) at the state's next positions with what df_model_bind set
 * (a draft needs only the kernel context); logits_last (vocab) gets the
 * last row's logits, logits_all (T x vocab) every row's, either NULL.
 * Returns 0, -1 (error; the state may be partly advanced: reset it; also a
 * model without a causal forward, or one not bound) or DF_MODEL_CANCELLED. */
int df_model_forward(const df_model *m, df_mstate *s, const int *ids, int T, float *logits_last,
                     float *logits_all, df_err *e);

#endif

/* The engine: a loaded model (config, tokenizer, spine weights, expert
 * source, thread pool) and sessions (per-sequence state) that run the exact
 * K3 forward pass over batches of positions. This is the API the CLI and the
 * server use; nothing above it touches weights or state directly. */
#ifndef DF_ENGINE_ENGINE_H
#define DF_ENGINE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/draft.h"
#include "engine/sample.h"
#include "format/config.h"
#include "store/opts.h"
#include "tokenizer/tokenizer.h"

typedef struct df_engine df_engine;
typedef struct df_session df_session;

typedef enum { DF_SPINE_BF16 = 0, DF_SPINE_INT8 = 1 } df_spine_kind;

/* What the gate-ahead predictor applies layer L+1's router to. */
typedef enum {
  DF_GATE_INPUT_X = 0,        /* layer L's normalised MLP input */
  DF_GATE_INPUT_X_SHARED = 1, /* L's MLP input plus L's shared-expert output */
} df_gate_input_kind;

/* Every option of an engine; the CLI fills it with one parser
 * (cli/engine_opts.h). Zero-initialised fields are defaults except
 * store.cache_mb (df_engine_opts_default sets -1 = default size). */
typedef struct df_engine_opts {
  const char *model_dir;
  int threads;              /* <= 0: all cores */
  df_spine_kind spine;      /* bf16 (as stored) or the row-int8 copy */
  int kernels_scalar;       /* force the scalar reference kernels */
  int f64;                  /* --precision f64: float64 activations on the scalar float64 kernels */
  df_gate_input_kind gate_input;
  df_store_opts store;      /* the expert store's own options; the engine sets store.model_dir */
  /* memory plan (issue 11) */
  uint64_t mem_limit;       /* bytes deltafin may use; 0 = MemAvailable / cgroup limit */
  int ctx;                  /* positions to admit; <= 0 = planner decides */
  int max_rows;             /* largest batch the caller runs (prefill chunk); <= 0 = 64 */
  const char *spine_dir;    /* the row-int8 spine's folder; NULL = <model_dir>/spine-int8 */
  uint64_t reuse_bytes;     /* serve --reuse-mb: kept sequence states take at most this... */
  int reuse_states;         /* ...and at most this many (0 = no count limit); the plan counts them */
  /* --draft: off (NULL), "ngram", "self", "auto" (n-gram, K adapted and
   * switched off when it does not pay); --draft-max: drafts per block */
  const char *draft;
  int draft_max;
  /* --draft-rollback: how a rejected block is undone. 0 (recompute, the
   * default): one mark taken before the block, restored, and the accepted
   * rows run again; 1 (rows): a mark per row filled during the verify pass
   * and the one after the last accepted row restored, no recompute, for
   * draft_max marks of memory (gen.c's header compares the two). */
  int draft_rows;
  /* --device: -1 the CPU, N CUDA device N: the layers' matrix products
   * there, weights kept in a tier of gpu_mem bytes of its memory (0: its
   * free memory less a sixteenth of the device, at least 2 GiB); same
   * results (kgpu.h). DF_DEVICE_UNSET (the
   * default): the environment variable DF_DEVICE (cpu, cuda, cuda:N) if set,
   * so a whole test suite can be run on the GPU unchanged; with
   * --precision f64 that default stays the CPU (f64 has no GPU path). */
  int device;
  uint64_t gpu_mem;
  int gpu_state_copy; /* --gpu-state copy: sequence state in and out every pass (kgpu.h) */
} df_engine_opts;

#define DF_DEVICE_UNSET (-2)
void df_engine_opts_default(df_engine_opts *o);
int df_engine_open(df_engine **out, const df_engine_opts *o, df_err *e);
void df_engine_close(df_engine *en);
const df_config *df_engine_config(const df_engine *en);
const df_tok *df_engine_tok(const df_engine *en);
/* A short id for the served model (directory base name). */
const char *df_engine_model_id(const df_engine *en);

/* ---- sessions ---- */
df_session *df_session_new(df_engine *en);
void df_session_free(df_session *s);
void df_session_reset(df_session *s);
int df_session_pos(const df_session *s);
df_engine *df_session_engine(const df_session *s);
/* Keeping a sequence for later (conversation reuse): a snapshot copies the
 * session's sequence state (see df_mstate_clone, model/model.h) and its last logits; restoring it
 * puts the session exactly where it was, so a prompt that extends the
 * snapshot's ids needs only its new part prefilled, with the same results
 * as a full prefill. df_session_state_bytes: what a snapshot of s would
 * take now. */
typedef struct df_session_snap df_session_snap;
df_session_snap *df_session_snapshot(const df_session *s);
void df_session_restore(df_session *s, const df_session_snap *snap);
void df_session_snap_free(df_session_snap *snap);
size_t df_session_snap_bytes(const df_session_snap *snap);
size_t df_session_state_bytes(const df_session *s);
/* 1 if the session holds the logits of its last position (a generation may
 * continue with an empty prompt). */
int df_session_has_logits(const df_session *s);

/* The logits of the last position run (vocab floats): inside on_token, the
 * distribution the token was drawn from. */
const float *df_session_logits(const df_session *s);

/* Runs n positions through the model as one batch (n = 1 decode, n > 1 a
 * prefill chunk). If logits != NULL it receives the logits of the LAST
 * position (vocab floats); if all_logits != NULL it receives n x vocab.
 * Results are bit-identical for any batch split and thread count. On error
 * the session may be partly advanced: reset it. One engine runs one forward
 * at a time (sessions of one engine must not run concurrently). */
int df_session_forward(df_session *s, const int *ids, int n, float *logits, float *all_logits,
                       df_err *e);

/* Test/debug hook: called after every layer with that layer's output hidden
 * states (n rows x hidden) of the batch being run. NULL removes it. */
typedef void (*df_layer_hook)(void *ud, int layer, const float *h, int n, int hidden);
void df_session_set_layer_hook(df_session *s, df_layer_hook fn, void *ud);
/* Test/debug hook: every MoE layer's sigmoid router scores (n x E, before the
 * correction bias) and chosen experts (n x K, ascending id). */
typedef void (*df_route_hook)(void *ud, int layer, const float *scores, const int *ids, int n,
                              int E, int K);
void df_session_set_route_hook(df_session *s, df_route_hook fn, void *ud);

/* ---- generation ---- */
typedef enum { DF_FINISH_STOP = 0, DF_FINISH_LENGTH = 1, DF_FINISH_CANCEL = 2 } df_finish;

typedef struct df_gen_opts {
  int max_new;        /* new tokens at most */
  int prefill_chunk;  /* positions per prefill batch; <= 0: whole prompt */
  const int *stop_ids; /* generation stops after emitting one of these */
  int nstop;
  float temperature;  /* 0 = greedy (exact) */
  float top_p;        /* 1 = off */
  uint64_t seed;
  /* The full sampling policy (engine/sample.h); NULL: temperature and top_p
   * above, nothing else. */
  const df_sample_opts *sampling;
  /* The ids the session already holds before `prompt` (a reused state's
   * prefix): the repeat penalty's context starts with them, so a cached
   * prefix penalises exactly as a prompt run in full. NULL: none. */
  const int *history;
  int nhistory;
  /* Called after each new token; return nonzero to cancel. */
  int (*on_token)(void *ud, int id);
  void *ud;
  /* Polled with ud between prefill chunks and after every layer of every
   * forward pass (a long prompt's layer can take seconds); nonzero cancels:
   * df_generate returns 0 with finish DF_FINISH_CANCEL and the ids so far,
   * and the session must be reset (a pass stopped between layers leaves its
   * state partly advanced). NULL: never. */
  int (*cancel)(void *ud);
  /* Called with ud before each draw with a copy of the logits (vocab floats)
   * to change, e.g. -INFINITY for what a grammar forbids (structured
   * output); NULL: none. The session's own logits stay as the model gave. */
  void (*mask)(void *ud, float *logits);
  /* Called with ud after each prefill chunk with the prompt positions done. */
  void (*on_prefill)(void *ud, int done);
  /* Speculation (engine/gen.c): drafts verified in blocks; the ids (greedy)
   * or their distribution (sampling) are those of plain decoding. NULL: the
   * engine's --draft source; no_draft: none. draft_max: drafts per block
   * (<= 0: the engine's --draft-max, at most DF_DRAFT_MAX). Ignored with a
   * mask (a grammar follows each id as it is handed out). */
  df_draft *draft;
  int draft_max;
  int no_draft;
} df_gen_opts;

#define DF_DRAFT_MAX 16

typedef struct df_gen_stats {
  int n_prompt, n_gen;
  int n_prefilled; /* prompt positions run through the model (fewer when cancelled) */
  double prefill_s, decode_s;
  uint64_t spine_bytes_per_token;  /* dense weights touched per decode token */
  uint64_t expert_bytes_read;      /* routed-expert bytes fetched in total */
  df_finish finish;
  /* speculation: verify blocks, drafts proposed, drafts accepted, blocks
   * rolled back; the block size at the end (0: off) and, with --draft auto,
   * how often it changed and switched off */
  int n_verify, n_drafted, n_accepted, n_rollback;
  int n_passes; /* forward passes of the decode (single steps, blocks and rollbacks) */
  int draft_k, draft_changes, draft_offs;
  /* the draft source that ran (df_draft_name; --draft auto picks one per
   * prompt: "dspark" for chat, "ngram" for raw text); NULL: none */
  const char *draft_src;
  /* per verify block: how many drafts it held (block_len[k], k = 1..DF_DRAFT_MAX);
   * per draft position j (0-based): accepted there, and the draft's
   * confidence estimates summed over the blocks that had one (DSpark) */
  int block_len[DF_DRAFT_MAX + 1];
  int acc_at[DF_DRAFT_MAX];
  double conf_sum[DF_DRAFT_MAX];
  int conf_n[DF_DRAFT_MAX];
} df_gen_stats;

void df_gen_opts_default(df_gen_opts *o);
/* Prefills prompt (continuing the session's state) and decodes. *out gets the
 * new ids (malloc'd). */
int df_generate(df_session *s, const int *prompt, int nprompt, const df_gen_opts *o, int **out,
                int *nout, df_gen_stats *st, df_err *e);

/* Engine-wide statistics as a JSON object string (store, cache, drives...);
 * caller frees. */
char *df_engine_stats_json(df_engine *en);
/* Which spine is loaded, which kernel table runs, how many threads. */
df_spine_kind df_engine_spine(const df_engine *en);
const char *df_engine_kernels(const df_engine *en);
/* "cpu" or "cuda:N" (where the layers' matrix products run). */
const char *df_engine_device(const df_engine *en);
/* --device cuda's counters as a JSON object string (kernels/kgpu.h's
 * df_kgpu_stats), NULL on the CPU; caller frees. Also under "device" in
 * df_engine_stats_json. */
char *df_engine_device_json(df_engine *en);
/* The same as two lines for --stats ("" on the CPU); caller frees. */
char *df_engine_device_text(df_engine *en);
/* The compute by part (the model's names), decode and prefill, in
 * milliseconds per layer-token; "" before any pass. Free it. */
char *df_engine_compute_text(df_engine *en);
int df_engine_threads(const df_engine *en);
/* The store's human-readable summary and where experts come from (for
 * --stats); caller frees. */
char *df_engine_store_text(df_engine *en);
char *df_engine_store_describe(df_engine *en);
/* The engine's expert store, for tools that measure it (the bench's read
 * log and df_store_locate, store/store.h); owned by the engine. */
typedef struct df_store df_store;
df_store *df_engine_store(df_engine *en);
/* The memory plan: text (for --stats) and JSON object; caller frees. */
char *df_engine_plan_text(const df_engine *en);
char *df_engine_plan_json(const df_engine *en);
/* Spine bytes read from the drives by the spine stream since the engine
 * opened (0 when the whole spine is resident); *wait_s (if not NULL): the
 * time the forward pass waited for them. */
uint64_t df_engine_spine_stream_bytes(const df_engine *en, double *wait_s);
/* The reads one pass of the spine stream makes (path, store drive, offset,
 * length), for the bench's spine ceiling; returns the spine reads in flight
 * per drive (df_model_stream_reads; 0: nothing streams). */
int df_engine_spine_reads(const df_engine *en,
                          void (*fn)(void *ud, const char *path, int drive, uint64_t off,
                                     uint32_t len),
                          void *ud);
/* Where the spine streams from ("pack", "shards", "shards+int8"; NULL when
 * nothing streams) and over how many drives. */
const char *df_engine_spine_source(const df_engine *en, int *drives);
/* Routed-expert bytes the store has fetched since the engine opened. */
uint64_t df_engine_expert_bytes(const df_engine *en);
/* The engine's --draft source name ("off" when none) and --draft-max. */
const char *df_engine_draft(const df_engine *en, int *draft_max);

#endif

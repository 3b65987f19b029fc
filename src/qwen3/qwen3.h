/* The dense Qwen3 decoder (Hugging Face Qwen3ForCausalLM), used as a draft
 * model for speculative decoding: a checkpoint folder as published
 * (config.json, bf16 safetensors, one file or sharded), fp32 activations on
 * the project's kernels.
 *
 * Determinism: every output row is computed the same way whatever the thread
 * count and however a sequence is split into forward calls, so prefilling T
 * ids at once gives bit for bit the logits of T single steps (the kernels'
 * pinned summation order; attention sums positions in ascending order).
 *
 * A loaded df_qwen3 is read-only and may be shared by threads; a
 * df_qwen3_state (the KV cache of one sequence) belongs to one caller. */
#ifndef DF_QWEN3_QWEN3_H
#define DF_QWEN3_QWEN3_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "kernels/kernels.h"
#include "model/model.h"

typedef struct df_qwen3 df_qwen3;
typedef struct df_qwen3_state df_qwen3_state;

/* Loads dir/config.json and the weights (model.safetensors.index.json or
 * model.safetensors; mmap'd, not copied). A missing tensor, a wrong shape or
 * dtype, or a config field that is missing, out of range or names a variant
 * this code does not implement is an error naming it. */
int df_qwen3_load(df_qwen3 **out, const char *dir, df_err *e);
void df_qwen3_free(df_qwen3 *m);
/* Replaces every projection and the lm_head (when tied, a copy: the embedding
 * lookup stays exact) by row-int8 copies (scale = absmax/127 per row,
 * round-half-even codes; format/codec.h): half the bytes each decode step
 * reads. Call once, after load and before any forward; deterministic. */
void df_qwen3_quantize_int8(df_qwen3 *m);
int df_qwen3_vocab(const df_qwen3 *m);
int df_qwen3_hidden(const df_qwen3 *m);
int df_qwen3_layers(const df_qwen3 *m);
/* config.json's eos_token_id (the first one when it is a list; else
 * generation_config.json's), or -1 when neither names one. */
int df_qwen3_eos(const df_qwen3 *m);
/* The longest sequence the state accepts (max_position_embeddings). */
int df_qwen3_max_pos(const df_qwen3 *m);
/* For the memory plan: the mapped weights' bytes and the KV cache's bytes
 * per position (row-int8 copies, a `deltafin draft` option only, are not
 * counted). */
void df_qwen3_mem(const df_qwen3 *m, uint64_t *weights, uint64_t *per_pos);

df_qwen3_state *df_qwen3_state_new(const df_qwen3 *m);
void df_qwen3_state_free(df_qwen3_state *s);
/* Forgets every position (keeps the memory). */
void df_qwen3_state_reset(df_qwen3_state *s);
/* The number of positions in the cache (the next id's position). */
int df_qwen3_state_pos(const df_qwen3_state *s);
/* Rollback: forgets positions >= pos (0 <= pos <= current; larger values are
 * ignored). Free: the KV cache rows past pos are simply overwritten later. */
void df_qwen3_state_truncate(df_qwen3_state *s, int pos);
/* Bytes of the KV cache's positions (what a clone holds). */
size_t df_qwen3_state_bytes(const df_qwen3_state *s);
/* A copy of the positions alone (no scratch), and dst taking src's
 * positions (states of one model): continuing either gives the source's
 * logits bit for bit. */
df_qwen3_state *df_qwen3_state_clone(const df_qwen3_state *s);
void df_qwen3_state_copy(df_qwen3_state *dst, const df_qwen3_state *src);

/* Runs ids[0..T) at positions pos..pos+T-1 and appends them to the cache.
 * logits_last (vocab floats) gets the last row's logits, logits_all (T x
 * vocab) every row's; either may be NULL. An id outside [0, vocab) or a
 * sequence past max_pos is an error and leaves the state unchanged. */
int df_qwen3_forward(const df_qwen3 *m, const df_kctx *kc, df_qwen3_state *s, const int *ids,
                     int T, float *logits_last, float *logits_all, df_err *e);

/* Qwen3 behind the model seam (qwen3_model.c, family "qwen3"): loads dir
 * (row-int8 projections when int8) and wraps it; the model owns it. Its
 * states are df_qwen3_state (new, free, reset, pos, truncate, clone, copy,
 * bytes), df_model_forward is df_qwen3_forward with the kernel context
 * df_model_bind set, the shape answers vocab, hidden, layers and eos, the
 * context limit is max_pos. No config, plan, stream, hooks or marks. */
int df_model_open_qwen3(df_model **out, const char *dir, int int8, df_err *e);

#endif

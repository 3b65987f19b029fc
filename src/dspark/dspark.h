/* The DSpark draft (docs/DSPARK.md): a few dense K3-MLA layers that read the
 * target's hidden states at its tapped layers and propose a block of up to
 * block_size ids in one non-causal pass, a low-rank Markov head chaining
 * each proposal to the one before, and a confidence head estimating each
 * position's acceptance. The embedding and the LM head are the target's own
 * (read through model/model.h, never loaded twice).
 *
 * The draft's state is its MLA latent cache over the accepted context, one
 * row per target position, made from that position's taps; truncating it is
 * the rollback (rows past the length are overwritten before they are read).
 *
 * A loaded df_dspark is read-only; a df_dspark_state belongs to one caller.
 * The engine reaches it through the model seam (df_model_open_dspark). */
#ifndef DF_DSPARK_DSPARK_H
#define DF_DSPARK_DSPARK_H

#include "base/err.h"
#include "kernels/kernels.h"
#include "format/config.h"
#include "model/model.h"

/* The longest block this code drafts (block_size above it is refused). */
#define DF_DSPARK_BLOCK_MAX 16
/* --draft auto's cut: a block ends where the product of the confidences
 * (the estimated chance that every draft so far is accepted) drops below it. */
#define DF_DSPARK_AUTO_CUT 0.5f

typedef struct df_dspark df_dspark;
typedef struct df_dspark_state df_dspark_state;

/* 1 when dir/config.json names model_type "k3_dspark". */
int df_dspark_is_dir(const char *dir);

/* Loads dir/config.json and dir/model.safetensors (mmap'd) for the loaded
 * target. A missing or malformed key, a value naming something this code
 * does not compute (aux_hidden_stream, markov_head_type, untied embeddings),
 * dimensions that contradict the target (hidden_size, target_hidden_size,
 * target_num_hidden_layers, vocab_size), a target_layer_ids entry out of
 * range, or a missing/misshapen tensor is an error naming the key or tensor. */
int df_dspark_load(df_dspark **out, const char *dir, const df_model *target, df_err *e);
void df_dspark_free(df_dspark *m);
/* The same checks against a target's config alone (setup: the K3 installed
 * but not loaded); loads nothing it keeps. */
int df_dspark_check(const char *dir, const df_config *target, df_err *e);

int df_dspark_block_size(const df_dspark *m);
/* The tapped target layers (0-based, in the config's order). */
int df_dspark_n_taps(const df_dspark *m);
/* For the memory plan: its own weights' bytes (the target's embedding and
 * head are the target's) and its context cache's bytes per position. */
void df_dspark_mem(const df_dspark *m, uint64_t *weights, uint64_t *per_pos);
const int *df_dspark_taps(const df_dspark *m);
/* The seam's sizes (vocab and eos are the target's) and context limit (the
 * target's: one row per target position). */
void df_dspark_shape(const df_dspark *m, df_model_shape *out);
int df_dspark_ctx_limit(const df_dspark *m);

df_dspark_state *df_dspark_state_new(const df_dspark *m);
void df_dspark_state_free(df_dspark_state *s);
/* Context positions held (the next position). */
int df_dspark_state_pos(const df_dspark_state *s);
/* Forgets positions >= pos (larger values are ignored). */
void df_dspark_state_truncate(df_dspark_state *s, int pos);
/* Bytes of the latent rows held (what a clone holds); a copy of the rows
 * alone, and dst taking src's rows (states of one draft). */
size_t df_dspark_state_bytes(const df_dspark_state *s);
df_dspark_state *df_dspark_state_clone(const df_dspark_state *s);
void df_dspark_state_copy(df_dspark_state *dst, const df_dspark_state *src);

/* Appends T context positions from their taps: row t holds n_taps x hidden
 * floats, the target's hidden states at the tapped layers in config order. */
int df_dspark_context(const df_dspark *m, const df_kctx *kc, df_dspark_state *s,
                      const float *taps, int T, df_err *e);

/* One block after the context, x the target's next token (position pos):
 * proposes up to k ids (1 <= k <= block_size) into out and returns how many.
 * conf (k floats) gets each position's confidence (-1 without the head);
 * logits (k x vocab) each position's logits; either may be NULL. cut > 0
 * stops at the first position where the product of the confidences falls
 * below cut (one id at least). The state is not changed. */
int df_dspark_propose(const df_dspark *m, const df_kctx *kc, const df_dspark_state *s, int x,
                      int k, float cut, int *out, float *conf, float *logits, df_err *e);

/* DSpark behind the model seam (dspark_model.c, family "dspark"): loads dir
 * for target (df_dspark_load) and wraps it; the model owns the draft, not
 * the target. Its states are df_dspark_state through df_mstate_* (new, free,
 * reset, pos, truncate: the rollback, clone, copy, bytes); its shape and
 * context limit are df_dspark_shape / ctx_limit. It has no causal forward
 * over ids (the seam's forward is NULL): its two passes are the family's
 * own, df_dspark_context (rows from the target's taps, not ids) and
 * df_dspark_propose (a non-causal block that leaves the state unchanged),
 * called on df_dspark_of(m) and df_dspark_state_of(s). */
int df_model_open_dspark(df_model **out, const char *dir, const df_model *target, df_err *e);
/* The draft behind a seam model, and the state behind a seam state, of
 * family "dspark"; NULL for another family. */
df_dspark *df_dspark_of(const df_model *m);
df_dspark_state *df_dspark_state_of(const df_mstate *s);

#endif

/* Draft sources for exact speculative decoding: each proposes ids that may
 * continue the sequence; the target model verifies them in one batched pass
 * and keeps only what it would have produced itself (engine/gen.c), so a
 * draft changes the speed, never the ids (greedy) or their distribution
 * (sampling). */
#ifndef DF_ENGINE_DRAFT_H
#define DF_ENGINE_DRAFT_H

#include <stdint.h>

#include "base/err.h"

typedef struct df_draft df_draft;
typedef struct df_engine df_engine;

/* Proposes up to kmax ids continuing hist[0..n) (the whole sequence so far:
 * reused history, prompt, generated ids). Returns how many (0: nothing to
 * propose) or -1 with e set. */
typedef int (*df_draft_fn)(void *ud, const int *hist, int n, int *out, int kmax, df_err *e);

/* A caller's own source (tests: one always right, one always wrong). */
df_draft *df_draft_new_fn(const char *name, df_draft_fn fn, void *ud);
/* Prompt lookup: the ids that followed the latest earlier occurrence of the
 * longest suffix of hist (3, 2, then 1 ids) - code edits, quotes, repeats. */
df_draft *df_draft_new_ngram(void);
/* The target itself, greedy, in a second session of en: always right under
 * greedy decoding (a test of the machinery, and its upper bound). */
df_draft *df_draft_new_self(df_engine *en);

/* A draft model in another vocabulary: a Qwen3 checkpoint folder (config.json,
 * safetensors, tokenizer.json; models/nano-draft, or Qwen3-0.6B/1.7B as
 * published). The committed ids become text (the target's tokenizer), the
 * text the draft's ids; the draft continues greedily and its text becomes
 * the target's ids again, the last one dropped (it may end inside a target
 * token the draft's text has not finished). Fails with e naming what is
 * missing (no tokenizer on either side, a bad checkpoint). */
df_draft *df_draft_new_model(df_engine *en, const char *dir, df_err *e);

/* K3's own drafter (dspark/dspark.h, docs/DSPARK.md): a DSpark checkpoint
 * folder for en's model. It reads the target's hidden states at its tapped
 * layers from the session it is attached to (the rows the target runs;
 * after a rollback the accepted rows run again and replace the rejected
 * ones), so it proposes only once attached. cut > 0: a block stops where the
 * product of the confidence head's estimates falls below cut (--draft auto). */
df_draft *df_draft_new_dspark(df_engine *en, const char *dir, float cut, df_err *e);

/* A draft that reads the target's state follows s from here (hist[0..n):
 * the ids s holds, for keeping what the draft still has of them); detach
 * before s is freed or runs without the draft. Attaching takes s's layer
 * hook (df_session_set_layer_hook) and detaching clears it. No-ops for other
 * sources. df_generate attaches and detaches around each generation. */
typedef struct df_session df_session;
void df_draft_attach(df_draft *d, df_session *s, const int *hist, int n);
void df_draft_detach(df_draft *d);

/* The confidence estimates of the latest proposal (k of them, one per id;
 * -1 where the source has none); returns how many were written. */
int df_draft_conf(const df_draft *d, float *conf, int kmax);

/* Tests: called with every proposal a source makes (out[0..*k), kmax room),
 * which it may change, e.g. to force a rejection at a chosen position. */
typedef void (*df_draft_edit_fn)(void *ud, const int *hist, int n, int *out, int *k, int kmax);
void df_draft_set_edit(df_draft *d, df_draft_edit_fn fn, void *ud);

/* Tests: the DSpark source's model and state (NULL for other sources). */
struct df_dspark;
struct df_dspark_state;
const struct df_dspark *df_draft_dspark(const df_draft *d, const struct df_dspark_state **st);

int df_draft_propose(df_draft *d, const int *hist, int n, int *out, int kmax, df_err *e);
const char *df_draft_name(const df_draft *d);
/* What a draft model holds for the memory plan: its weights and buffers,
 * and its cache per context position (zero for n-gram and self). */
void df_draft_mem(const df_draft *d, uint64_t *fixed, uint64_t *per_pos);
void df_draft_free(df_draft *d);

#endif

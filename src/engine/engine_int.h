/* What the engine's files share (engine.c: engine and sessions; gen.c:
 * generation and speculation; draft.c: draft sources). Not for callers. */
#ifndef DF_ENGINE_ENGINE_INT_H
#define DF_ENGINE_ENGINE_INT_H

#include "engine/draft.h"
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "kernels/kgpu.h"
#include "model/model.h"
#include "plan/plan.h"
#include "store/store.h"

struct df_engine {
  char *model_dir, *model_id;
  df_spine_kind spine;
  df_config cfg;
  df_tok *tok;
  df_st_set set;
  int set_open;
  df_model *model; /* the target, through the model seam (model/model.h) */
  df_store *store;
  df_pool *pool;
  df_kctx kc;
  df_kgpu *gpu;        /* --device cuda (NULL: the CPU); kc.gpu points here */
  char device[16];     /* "cpu" / "cuda:N" */
  df_plan plan;
  /* --device cuda: the GPU's plan, made when the device opens (its budget
   * is known only then) and fed to the tier (df_kgpu_open's plan) */
  df_plan_gpu gplan;
  int gplan_made;
  uint64_t cache_cap; /* min(store default cache, every expert) */
  char mem_src[128];
  df_draft *draft;      /* --draft: the engine's draft source (NULL: off) */
  df_draft *draft_raw;  /* --draft auto with a DSpark: n-gram, for prompts that are not chat */
  int chat_open;        /* the chat format's <|open|> id (-1: no tokenizer or none) */
  int draft_max;        /* --draft-max */
  int draft_auto;       /* --draft auto: adapt K, switch off when it does not pay */
  int draft_rows;       /* --draft-rollback rows */
};

struct df_session {
  df_engine *en;
  df_mstate *st;
  float *logits; /* last position's logits */
  int have_logits;
  df_sampler *sampler;
  float *masked; /* df_gen_opts.mask's copy of the logits */
};

/* Runs n positions; want_last = 0 skips the lm_head (a prefill chunk that
 * is not the last). Returns 0, -1 (error) or DF_MODEL_CANCELLED. */
int df_session_run(df_session *s, const int *ids, int n, int want_last, float *all_logits,
                   df_err *e);

#endif

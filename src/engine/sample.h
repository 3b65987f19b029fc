/* Token sampling: penalties, temperature, top-k, nucleus (top-p), min-p and
 * a seeded draw, over one position's logits. Pure (no engine), so the policy
 * is unit-tested exactly.
 *
 * The policy, in order:
 *   1. penalties on the logits (only those set): repeat_penalty (llama.cpp:
 *      a positive logit is divided by it, a negative one multiplied) for
 *      every distinct id among the last repeat_last_n ids of the context
 *      (prompt and generated); frequency and presence (OpenAI: logit -=
 *      frequency * count + presence * (count > 0)) over the generated ids;
 *      logit_bias added per id.
 *   2. temperature 0: the highest logit, ties to the lower id (greedy; exact,
 *      no other step runs).
 *   3. p_i = exp((l_i - max) / temperature).
 *   4. truncation, if any of top_k, top_p, min_p is set: candidates sorted by
 *      p descending (ties: lower id first); top_k keeps the first k; top_p
 *      keeps the shortest prefix whose mass reaches top_p of the mass kept so
 *      far; min_p keeps those with p >= min_p * p_max.
 *   5. u = uniform [0, 1) from the seeded generator (df_splitmix64, 53 bits) times
 *      the kept mass; the first candidate (sorted order when truncated, id
 *      order otherwise) whose running mass exceeds u is drawn.
 * Same seed, same logits, same options: the same id, on every machine. */
#ifndef DF_ENGINE_SAMPLE_H
#define DF_ENGINE_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct df_sample_bias {
  int id;
  float bias;
} df_sample_bias;

typedef struct df_sample_opts {
  float temperature;      /* 0 = greedy */
  float top_p;            /* 1 = off */
  int top_k;              /* 0 = off */
  float min_p;            /* 0 = off */
  float repeat_penalty;   /* 1 = off */
  int repeat_last_n;      /* window of the repeat penalty: ids at the end of the context */
  float presence_penalty; /* 0 = off */
  float frequency_penalty;
  const df_sample_bias *bias; /* logit_bias */
  int nbias;
} df_sample_opts;

void df_sample_opts_default(df_sample_opts *o);
/* 1 if any penalty or bias is set (the logits are then copied and changed). */
int df_sample_has_penalties(const df_sample_opts *o);

typedef struct df_sampler df_sampler;
df_sampler *df_sampler_new(int vocab);
void df_sampler_free(df_sampler *s);

/* One draw. ctx (nctx ids: prompt then generated) feeds the repeat
 * penalty; the last ngen of them are the generated ids for the presence and
 * frequency penalties. rng is advanced only when temperature > 0. */
int df_sample_pick(df_sampler *s, const float *logits, const df_sample_opts *o, const int *ctx,
                   int nctx, int ngen, uint64_t *rng);

/* Speculative sampling against a proposed id (a point-mass draft): with
 * temperature 0 the greedy id; otherwise `draft` with the policy's
 * probability p(draft), else a draw from the policy with draft excluded and
 * the rest renormalised, so the id returned has exactly the distribution of
 * df_sample_pick (P(draft) = p(draft), P(x) = (1 - p(draft)) p(x) / (1 -
 * p(draft)) = p(x)). Uses one or two draws of rng. */
int df_sample_verify(df_sampler *s, const float *logits, const df_sample_opts *o, const int *ctx,
                     int nctx, int ngen, int draft, uint64_t *rng);

/* The model's log-probabilities (log-softmax of the raw logits, in double):
 * lp of id, and the n most likely ids (ties: lower id) with theirs. n <= 20. */
double df_sample_logprobs(const float *logits, int vocab, int id, int n, int *top_ids,
                          double *top_lp);

/* The seeded generator: base/rng.h's df_splitmix64, named here for the
 * sampler's tests. */
uint64_t df_sample_splitmix(uint64_t *x);

#endif

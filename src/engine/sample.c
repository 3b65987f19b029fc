/* The sampling policy of sample.h. Kept bit-compatible with the engine's
 * earlier inline sampler for temperature/top_p, so seeded runs keep their
 * ids. */
#include "engine/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/util.h"

struct cand {
  float p;
  int id;
};

struct df_sampler {
  int V;
  struct cand *cand;
  float *lg;   /* penalised logits */
  int *count;  /* per id: occurrences among the generated ids */
  uint8_t *seen; /* per id: in the repeat window */
};

void df_sample_opts_default(df_sample_opts *o) {
  memset(o, 0, sizeof *o);
  o->top_p = 1.0f;
  o->repeat_penalty = 1.0f;
  o->repeat_last_n = 64;
}

int df_sample_has_penalties(const df_sample_opts *o) {
  return o->repeat_penalty != 1.0f || o->presence_penalty != 0.0f ||
         o->frequency_penalty != 0.0f || o->nbias > 0;
}

df_sampler *df_sampler_new(int vocab) {
  df_sampler *s = df_xcalloc(1, sizeof *s);
  s->V = vocab;
  return s;
}

void df_sampler_free(df_sampler *s) {
  if (!s) return;
  free(s->cand);
  free(s->lg);
  free(s->count);
  free(s->seen);
  free(s);
}

uint64_t df_sample_splitmix(uint64_t *x) { return df_splitmix64(x); }

static int cand_cmp(const void *a, const void *b) {
  const struct cand *x = a, *y = b;
  if (x->p != y->p) return x->p > y->p ? -1 : 1;
  return x->id - y->id;
}

static const float *penalise(df_sampler *s, const float *logits, const df_sample_opts *o,
                             const int *ctx, int nctx, int ngen) {
  int V = s->V;
  if (!s->lg) {
    s->lg = df_xmalloc(sizeof(float) * (size_t)V);
    s->count = df_xcalloc((size_t)V, sizeof(int));
    s->seen = df_xcalloc((size_t)V, 1);
  }
  memcpy(s->lg, logits, sizeof(float) * (size_t)V);
  if (o->repeat_penalty != 1.0f && o->repeat_penalty > 0) {
    int n = o->repeat_last_n < 0 || o->repeat_last_n > nctx ? nctx : o->repeat_last_n;
    for (int i = nctx - n; i < nctx; i++) {
      int id = ctx[i];
      if (id < 0 || id >= V || s->seen[id]) continue;
      s->seen[id] = 1;
      s->lg[id] = s->lg[id] > 0 ? s->lg[id] / o->repeat_penalty : s->lg[id] * o->repeat_penalty;
    }
    for (int i = nctx - n; i < nctx; i++)
      if (ctx[i] >= 0 && ctx[i] < V) s->seen[ctx[i]] = 0;
  }
  if (o->presence_penalty != 0.0f || o->frequency_penalty != 0.0f) {
    if (ngen > nctx) ngen = nctx;
    for (int i = nctx - ngen; i < nctx; i++)
      if (ctx[i] >= 0 && ctx[i] < V) s->count[ctx[i]]++;
    for (int i = nctx - ngen; i < nctx; i++) {
      int id = ctx[i];
      if (id < 0 || id >= V || !s->count[id]) continue;
      s->lg[id] -= o->frequency_penalty * (float)s->count[id] + o->presence_penalty;
      s->count[id] = 0; /* applied once per distinct id */
    }
  }
  for (int i = 0; i < o->nbias; i++)
    if (o->bias[i].id >= 0 && o->bias[i].id < V) s->lg[o->bias[i].id] += o->bias[i].bias;
  return s->lg;
}

/* Steps 3-4 of the policy on penalised logits lg (temperature > 0): the
 * kept candidates are s->cand[0..n), in draw order, with total mass *sum. */
static int kept_set(df_sampler *s, const float *lg, const df_sample_opts *o, double *sum_out) {
  int V = s->V;
  float temp = o->temperature;
  if (!s->cand) s->cand = df_xmalloc(sizeof *s->cand * (size_t)V);
  float mx = lg[df_argmax(lg, V)];
  double sum = 0;
  for (int i = 0; i < V; i++) {
    double p = exp(((double)lg[i] - mx) / temp);
    s->cand[i].p = (float)p;
    s->cand[i].id = i;
    sum += p;
  }
  int n = V;
  int k = o->top_k > 0 && o->top_k < V ? o->top_k : V;
  int nucleus = o->top_p > 0 && o->top_p < 1;
  int minp = o->min_p > 0 && o->min_p <= 1;
  if (k < V || nucleus || minp) {
    qsort(s->cand, (size_t)V, sizeof *s->cand, cand_cmp);
    n = k;
    if (k < V) {
      sum = 0;
      for (int i = 0; i < n; i++) sum += s->cand[i].p;
    }
    if (nucleus) {
      double acc = 0;
      int m;
      for (m = 0; m < n;) {
        acc += s->cand[m++].p / sum;
        if (acc >= o->top_p) break;
      }
      n = m;
    }
    if (minp) {
      float cut = o->min_p * s->cand[0].p;
      int m = 1;
      while (m < n && s->cand[m].p >= cut) m++;
      n = m;
    }
    sum = 0;
    for (int i = 0; i < n; i++) sum += s->cand[i].p;
  }
  *sum_out = sum;
  return n;
}

/* Step 5 over the kept set, skipping `skip` (-1: none) whose mass is
 * already taken out of sum. */
static int draw(const df_sampler *s, int n, double sum, int skip, uint64_t *rng) {
  double u = (double)(df_splitmix64(rng) >> 11) * 0x1p-53 * sum, acc = 0;
  int last = -1;
  for (int i = 0; i < n; i++) {
    if (s->cand[i].id == skip) continue;
    acc += s->cand[i].p;
    last = s->cand[i].id;
    if (u < acc) return last;
  }
  return last >= 0 ? last : s->cand[n - 1].id;
}

int df_sample_pick(df_sampler *s, const float *logits, const df_sample_opts *o, const int *ctx,
                   int nctx, int ngen, uint64_t *rng) {
  const float *lg = df_sample_has_penalties(o) ? penalise(s, logits, o, ctx, nctx, ngen) : logits;
  if (!(o->temperature > 0)) return df_argmax(lg, s->V);
  double sum;
  int n = kept_set(s, lg, o, &sum);
  return draw(s, n, sum, -1, rng);
}

int df_sample_verify(df_sampler *s, const float *logits, const df_sample_opts *o, const int *ctx,
                     int nctx, int ngen, int draft, uint64_t *rng) {
  const float *lg = df_sample_has_penalties(o) ? penalise(s, logits, o, ctx, nctx, ngen) : logits;
  if (!(o->temperature > 0)) return df_argmax(lg, s->V);
  double sum;
  int n = kept_set(s, lg, o, &sum);
  double pd = 0;
  for (int i = 0; i < n; i++)
    if (s->cand[i].id == draft) pd = s->cand[i].p;
  /* accept with the target's probability of the draft... */
  double u = (double)(df_splitmix64(rng) >> 11) * 0x1p-53 * sum;
  if (u < pd) return draft;
  /* ...else draw from the target with the draft taken out, renormalised */
  if (sum - pd <= 0) return draft; /* the draft held all the mass: u < pd always */
  return draw(s, n, sum - pd, draft, rng);
}

double df_sample_logprobs(const float *logits, int vocab, int id, int n, int *top_ids,
                          double *top_lp) {
  float mx = logits[df_argmax(logits, vocab)];
  double sum = 0;
  for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - mx);
  double lse = (double)mx + log(sum);
  if (n > 20) n = 20;
  if (n > vocab) n = vocab;
  /* the n best by insertion (n is small) */
  int cnt = 0;
  for (int i = 0; i < vocab && n > 0; i++) {
    float v = logits[i];
    if (cnt == n && !(v > logits[top_ids[n - 1]])) continue;
    int j = cnt < n ? cnt++ : n - 1;
    while (j > 0 && v > logits[top_ids[j - 1]]) {
      top_ids[j] = top_ids[j - 1];
      j--;
    }
    top_ids[j] = i;
  }
  for (int i = 0; i < cnt; i++) top_lp[i] = (double)logits[top_ids[i]] - lse;
  return (double)logits[id] - lse;
}

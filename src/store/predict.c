/* The prefetch predictors and their recall. gate-ahead: the model applies
 * layer L+1's router to layer L's input and hints the result
 * (df_store_hint); prev: layer L+1 will want what it wanted at the previous
 * position. Each prediction's recall is measured when its layer begins;
 * `auto` switches a predictor off per layer while its decode recall is low. */
#include <stdlib.h>
#include <string.h>

#include "store/source.h"
#include "store/store_int.h"

#define AUTO_MIN_SAMPLES 8 /* recall samples before `auto` may switch a predictor off */
#define AUTO_RECALL 0.35   /* below this a predictor moves more waste than it saves */

void df_pred_init(df_store *s, df_store_prefetch mode) {
  switch (mode) {
  case DF_PREFETCH_OFF: s->pr.mask = 0; break;
  case DF_PREFETCH_GATE: s->pr.mask = 1u << P_GATE; break;
  case DF_PREFETCH_PREV: s->pr.mask = 1u << P_PREV; break;
  default: s->pr.mask = 3, s->pr.is_auto = 1; break;
  }
  s->pr.name = df_xstrdup(df_store_prefetch_name(mode));
  for (int p = 0; p < NPRED; p++) {
    s->pr.p[p] = df_xcalloc((size_t)s->n_layers, sizeof *s->pr.p[p]);
    for (int l = 0; l < s->n_layers; l++) {
      s->pr.p[p][l].ex = df_xmalloc((size_t)s->n_experts * sizeof(int));
      s->pr.p[p][l].pass = -1;
    }
    s->pr.recall_ewma[p] = df_xcalloc((size_t)s->n_layers, sizeof(double));
    s->pr.recall_hits[p] = df_xcalloc((size_t)s->n_layers, sizeof(double));
    s->pr.recall_total[p] = df_xcalloc((size_t)s->n_layers, sizeof(double));
    s->pr.recall_samples[p] = df_xcalloc((size_t)s->n_layers, sizeof(long));
  }
  s->pr.prev_set = df_xcalloc((size_t)s->n_layers, sizeof *s->pr.prev_set);
  s->pr.prev_n = df_xcalloc((size_t)s->n_layers, sizeof *s->pr.prev_n);
  for (int l = 0; l < s->n_layers; l++) s->pr.prev_set[l] = df_xmalloc((size_t)s->n_experts * sizeof(int));
}

void df_pred_free(df_store *s) {
  for (int p = 0; p < NPRED; p++) {
    if (s->pr.p[p])
      for (int l = 0; l < s->n_layers; l++) free(s->pr.p[p][l].ex);
    free(s->pr.p[p]);
    free(s->pr.recall_ewma[p]);
    free(s->pr.recall_hits[p]);
    free(s->pr.recall_total[p]);
    free(s->pr.recall_samples[p]);
  }
  if (s->pr.prev_set)
    for (int l = 0; l < s->n_layers; l++) free(s->pr.prev_set[l]);
  free(s->pr.prev_set);
  free(s->pr.prev_n);
  free(s->pr.name);
}

int df_pred_on(const df_store *s, int p, int li) {
  if (!(s->pr.mask >> p & 1)) return 0;
  if (!s->pr.is_auto) return 1;
  return s->pr.recall_samples[p][li] < AUTO_MIN_SAMPLES || s->pr.recall_ewma[p][li] >= AUTO_RECALL;
}

/* A stream install's predicted record that is not local: with
 * --fetch-ahead on the fetcher gets it in the background (1), else the
 * prediction is dropped (1: the shard holds a hole there); 0 when local. */
static int ahead_remote(df_store *s, int key, int layer, int expert) {
  const copyloc *c = &s->loc.recs[key].c[0];
  uint64_t xxh;
  if (df_src_remote_local(s->net.src, c->file, c->off, s->rec_bytes, &xxh)) return 0;
  if (s->net.fetch_ahead) {
    df_src_need nd = {c->file, layer, expert, c->off, s->rec_bytes, 0};
    df_src_remote_ahead(s->net.src, &nd, 1);
  }
  return 1;
}

static void prefetch_one(df_store *s, int p, long pass, int layer, int expert) {
  int key = (layer - s->first_layer) * s->n_experts + expert;
  if (s->cache.by_key[key]) return;
  if (s->net.src && ahead_remote(s, key, layer, expert)) return;
  /* only spare budget: a speculative load never evicts anything, and never
   * takes the last free slot of the in-flight allowance */
  if (s->cache.n_unref + 1 >= s->cache.slots + s->cache.prefetch_allowance) return;
  entry *x = df_cache_entry_new(s, key);
  x->speculative = 1;
  x->spec_pass = pass;
  x->spec_layer = layer;
  x->prefill = s->batch_prefill;
  if (df_sched_enqueue(s, x, 0)) {
    df_cache_entry_free(s, x);
    return;
  }
  s->ct.pf_issued++;
  s->pr.issued[p]++;
}

static void predict(df_store *s, int p, long pass, int layer, const int *ex, int n) {
  int li = layer - s->first_layer;
  pred *pp = &s->pr.p[p][li];
  pp->pass = pass;
  pp->n = n;
  pp->prefill = s->batch_prefill;
  memcpy(pp->ex, ex, (size_t)n * sizeof *ex);
  /* auto reads nothing speculative for a prefill chunk: the chunk's own
   * union keeps the drives busy, and a chunk must read each needed expert
   * once (amplification 1.00); an explicit --prefetch gate still does */
  if (s->pr.is_auto && s->batch_prefill) return;
  if (df_pred_on(s, p, li))
    for (int i = 0; i < n; i++) prefetch_one(s, p, pass, layer, ex[i]);
}

void df_store_hint(df_store *s, int layer, const int *experts, int n) {
  if (!s || !s->nkeys || layer < s->first_layer || layer >= s->first_layer + s->n_layers || n <= 0 || n > s->n_experts)
    return;
  for (int i = 0; i < n; i++)
    if (experts[i] < 0 || experts[i] >= s->n_experts) return;
  pthread_mutex_lock(&s->mu);
  long pass = layer > s->layer ? s->pass : s->pass + 1;
  if (s->layer == 1 << 30) pass = 1;
  predict(s, P_GATE, pass, layer, experts, n);
  pthread_mutex_unlock(&s->mu);
}

int df_store_wants_hint(const df_store *s) {
  return s && s->nkeys && (s->pr.mask >> P_GATE & 1);
}


/* Layer li began with experts[]: the recall of what each predictor said about it. */
void df_pred_measure(df_store *s, int li, const int *experts, int n) {
  /* recall of what each predictor said about this layer */
  for (int p = 0; p < NPRED; p++) {
    pred *pp = &s->pr.p[p][li];
    if (pp->pass != s->pass) continue;
    int hit = 0;
    for (int i = 0; i < pp->n; i++) {
      int v = pp->ex[i];
      /* experts[] is sorted; predictions may not be */
      int lo = 0, hi = n - 1;
      while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (experts[mid] == v) {
          hit++;
          break;
        }
        if (experts[mid] < v) lo = mid + 1;
        else hi = mid - 1;
      }
    }
    double r = (double)hit / n;
    s->pr.recall_hits[p][li] += hit;
    s->pr.recall_total[p][li] += n;
    /* auto decides on per-token predictions only (a prefill union's recall
     * says little about decode) */
    if (!pp->prefill) {
      s->pr.recall_ewma[p][li] = s->pr.recall_samples[p][li] ? 0.8 * s->pr.recall_ewma[p][li] + 0.2 * r : r;
      s->pr.recall_samples[p][li]++;
    }
    pp->pass = -1;
  }
}

/* After layer li's batch is queued: the previous-token prediction for the next layer. */
void df_pred_after_begin(df_store *s, int li, const int *experts, int n) {
  /* previous-token predictor: the next layer will want what it wanted last time */
  memcpy(s->pr.prev_set[li], experts, (size_t)n * sizeof *experts);
  s->pr.prev_n[li] = n;
  int nli = li + 1 < s->n_layers ? li + 1 : 0;
  long npass = li + 1 < s->n_layers ? s->pass : s->pass + 1;
  /* only from decode-sized batches: a prefill chunk's union says little
   * about the next pass and would mostly be wasted reads */
  if (s->pr.prev_n[nli] && s->pr.prev_n[nli] <= s->cfg->top_k && n <= s->cfg->top_k)
    predict(s, P_PREV, npass, s->first_layer + nli, s->pr.prev_set[nli], s->pr.prev_n[nli]);
}

/* The draft sources of draft.h. Both draft models are reached through the
 * model seam (model/model.h): their loading, state life cycle (new, free,
 * reset, pos, truncate) and, for Qwen3, its forward are df_model_* and
 * df_mstate_* calls. What stays family-specific, and why:
 *  - the Qwen3 draft's tokenizer (df_hftok_*): a vocabulary is not a model's;
 *  - DSpark's taps (df_dspark_n_taps / taps), its context pass
 *    (df_dspark_context: rows from the target's hidden states, not ids) and
 *    its block proposal (df_dspark_propose: non-causal, state unchanged),
 *    none of which is the seam's causal forward over ids (dspark.h). */
#include "engine/draft.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "dspark/dspark.h"
#include "engine/engine_int.h"
#include "qwen3/qwen3.h"
#include "tokenizer/hf_bpe.h"

typedef enum { D_FN, D_NGRAM, D_SELF, D_MODEL, D_DSPARK } draft_kind;

struct df_draft {
  draft_kind kind;
  char name[32];
  df_draft_fn fn;
  void *ud;
  /* self: a second session, the ids it holds up to its mark, and the mark */
  df_session *sess;
  df_mmark *mark;
  int *held, nheld, capheld;
  float *mlog; /* the logits at the mark */
  /* model: the draft, its tokenizer and state; the target's tokenizer; the
   * draft ids that hold the committed text (nd of them, in the state),
   * committed bytes not yet handed to the draft (an unfinished UTF-8
   * character), and the draft's logits after the committed text */
  df_engine *en;
  df_model *q; /* family "qwen3" */
  df_mstate *qs;
  df_hftok *qt;
  const df_tok *kt;
  int nd;
  char pend[8];
  int npend;
  float *qlog;
  /* dspark: the draft and its context cache; the target state it follows
   * and the session that owns it; one forward's taps; the latest
   * proposal's confidences; the confidence cut */
  df_model *ds; /* family "dspark" */
  df_mstate *dst;
  df_mstate *hst;
  df_session *bound;
  float *taps;
  int tapcap, tap_last;
  float conf[DF_DRAFT_MAX];
  int nconf;
  float cut;
  df_draft_edit_fn edit;
  void *edit_ud;
};

static df_draft *draft_new(draft_kind k, const char *name) {
  df_draft *d = df_xcalloc(1, sizeof *d);
  d->kind = k;
  snprintf(d->name, sizeof d->name, "%s", name);
  return d;
}

df_draft *df_draft_new_fn(const char *name, df_draft_fn fn, void *ud) {
  df_draft *d = draft_new(D_FN, name);
  d->fn = fn;
  d->ud = ud;
  return d;
}

df_draft *df_draft_new_ngram(void) { return draft_new(D_NGRAM, "ngram"); }

df_draft *df_draft_new_self(df_engine *en) {
  df_draft *d = draft_new(D_SELF, "self");
  d->sess = df_session_new(en);
  d->mark = df_mmark_new(d->sess->st);
  df_mmark_save(d->mark, d->sess->st); /* the empty sequence */
  d->mlog = df_xmalloc(sizeof(float) * (size_t)en->cfg.vocab);
  return d;
}

const char *df_draft_name(const df_draft *d) { return d->name; }

void df_draft_mem(const df_draft *d, uint64_t *fixed, uint64_t *per_pos) {
  *fixed = *per_pos = 0;
  if (d->q) {
    df_model_mem(d->q, fixed, per_pos);
    *fixed += sizeof(float) * (uint64_t)df_model_vocab(d->q); /* its logits */
  }
  if (d->ds) df_model_mem(d->ds, fixed, per_pos);
}

df_draft *df_draft_new_model(df_engine *en, const char *dir, df_err *e) {
  const df_tok *kt = df_engine_tok(en);
  if (!kt) {
    df_err_set(e, "--draft %s: the target model has no tokenizer to turn drafts into its ids", dir);
    return NULL;
  }
  df_draft *d = draft_new(D_MODEL, "model");
  d->en = en;
  d->kt = kt;
  if (df_model_open_qwen3(&d->q, dir, 0, e) || df_hftok_load(&d->qt, dir, e)) {
    df_err_prefix(e, "--draft %s: ", dir);
    df_draft_free(d);
    return NULL;
  }
  /* the draft's passes run on the target's kernels (no store: dense) */
  df_model_bind(d->q, &(df_model_run){.kc = &en->kc});
  d->qs = df_mstate_new(d->q);
  d->qlog = df_xmalloc(sizeof(float) * (size_t)df_model_vocab(d->q));
  const char *b = strrchr(dir, '/');
  snprintf(d->name, sizeof d->name, "%s", b && b[1] ? b + 1 : dir);
  return d;
}

/* The target ran T rows at its position: their taps at this layer; after
 * the last tapped layer they become the draft's context rows there,
 * replacing what it held from that position on (a rollback's rerun). */
static void dspark_hook(void *ud, int layer, const float *h, int T, int hidden) {
  df_draft *d = ud;
  const df_dspark *ds = df_dspark_of(d->ds);
  int nt = df_dspark_n_taps(ds);
  const int *tp = df_dspark_taps(ds);
  size_t row = (size_t)nt * (size_t)hidden;
  if (T > d->tapcap) {
    d->tapcap = T;
    d->taps = df_xrealloc(d->taps, sizeof(float) * row * (size_t)T);
  }
  for (int i = 0; i < nt; i++)
    if (tp[i] == layer)
      for (int t = 0; t < T; t++)
        memcpy(d->taps + (size_t)t * row + (size_t)i * hidden, h + (size_t)t * hidden,
               sizeof(float) * (size_t)hidden);
  if (layer != d->tap_last) return;
  int pos0 = df_mstate_pos(d->hst);
  if (pos0 > df_mstate_pos(d->dst)) return; /* positions run while detached: a gap */
  df_mstate_truncate(d->dst, pos0);
  df_err e;
  df_dspark_context(ds, &d->en->kc, df_dspark_state_of(d->dst), d->taps, T, &e);
}

df_draft *df_draft_new_dspark(df_engine *en, const char *dir, float cut, df_err *e) {
  df_draft *d = draft_new(D_DSPARK, "dspark");
  d->en = en;
  d->cut = cut;
  if (df_model_open_dspark(&d->ds, dir, en->model, e)) {
    df_err_prefix(e, "--draft %s: ", dir);
    df_draft_free(d);
    return NULL;
  }
  d->dst = df_mstate_new(d->ds);
  const df_dspark *ds = df_dspark_of(d->ds);
  d->tap_last = -1;
  for (int i = 0; i < df_dspark_n_taps(ds); i++)
    if (df_dspark_taps(ds)[i] > d->tap_last) d->tap_last = df_dspark_taps(ds)[i];
  return d;
}

void df_draft_attach(df_draft *d, df_session *s, const int *hist, int n) {
  if (!d || d->kind != D_DSPARK) return;
  int P = df_mstate_pos(s->st), keep = 0;
  if (s == d->bound) /* what it still holds of the ids s holds */
    while (keep < P && keep < n && keep < d->nheld && d->held[keep] == hist[keep]) keep++;
  df_mstate_truncate(d->dst, keep);
  d->bound = s;
  d->hst = s->st;
  df_mstate_set_tap(s->st, dspark_hook, d);
}

void df_draft_detach(df_draft *d) {
  if (!d || d->kind != D_DSPARK || !d->hst) return;
  df_mstate_set_tap(d->hst, NULL, NULL);
  d->hst = NULL;
}

int df_draft_conf(const df_draft *d, float *conf, int kmax) {
  int n = d->nconf < kmax ? d->nconf : kmax;
  memcpy(conf, d->conf, sizeof(float) * (size_t)(n > 0 ? n : 0));
  return n;
}

void df_draft_set_edit(df_draft *d, df_draft_edit_fn fn, void *ud) {
  d->edit = fn;
  d->edit_ud = ud;
}

const struct df_dspark *df_draft_dspark(const df_draft *d, const struct df_dspark_state **st) {
  if (st) *st = d->kind == D_DSPARK ? df_dspark_state_of(d->dst) : NULL;
  return d->kind == D_DSPARK ? df_dspark_of(d->ds) : NULL;
}

/* x (the last id, not yet run) after the context the target has run; the
 * draft holds that context exactly when its rows match the target's. */
static int dspark_propose(df_draft *d, const int *h, int n, int *out, int kmax, df_err *e) {
  if (!d->hst || n < 1) return 0;
  int nctx = n - 1;
  if (df_mstate_pos(d->hst) != nctx || df_mstate_pos(d->dst) < nctx) return 0;
  df_mstate_truncate(d->dst, nctx);
  if (n > d->capheld) {
    d->capheld = n * 2;
    d->held = df_xrealloc(d->held, sizeof(int) * (size_t)d->capheld);
  }
  memcpy(d->held, h, sizeof(int) * (size_t)n);
  d->nheld = n;
  int k = df_dspark_propose(df_dspark_of(d->ds), &d->en->kc, df_dspark_state_of(d->dst), h[n - 1],
                            kmax, d->cut, out, d->conf, NULL, e);
  d->nconf = k > 0 ? k : 0;
  return k;
}

void df_draft_free(df_draft *d) {
  if (!d) return;
  df_draft_detach(d);
  df_mstate_free(d->dst);
  df_model_free(d->ds);
  free(d->taps);
  df_mstate_free(d->qs);
  df_model_free(d->q);
  df_hftok_free(d->qt);
  free(d->qlog);
  df_mmark_free(d->mark);
  df_session_free(d->sess);
  free(d->held);
  free(d->mlog);
  free(d);
}

/* Latest earlier occurrence of the longest suffix (3..1 ids) that has a
 * continuation; the continuation, up to kmax ids. Latest, because recent
 * text is the likeliest to repeat; longest, because it is the most
 * specific. */
static int ngram_propose(const int *h, int n, int *out, int kmax) {
  for (int m = 3; m >= 1; m--) {
    if (n < m + 1) continue;
    const int *suf = h + n - m;
    for (int j = n - m - 1; j >= 0; j--) {
      if (memcmp(h + j, suf, sizeof(int) * (size_t)m)) continue;
      int k = 0;
      while (k < kmax && j + m + k < n) {
        out[k] = h[j + m + k];
        k++;
      }
      return k;
    }
  }
  return 0;
}

/* The ids a stateful draft has consumed: still a prefix of the sequence
 * (it only grows between proposals of one generation), and extended to it. */
static int held_prefix(const df_draft *d, const int *h, int n) {
  return d->nheld <= n &&
         (d->nheld == 0 || !memcmp(d->held, h, sizeof(int) * (size_t)d->nheld));
}

static void held_extend(df_draft *d, const int *h, int n) {
  if (n > d->capheld) {
    d->capheld = n * 2;
    d->held = df_xrealloc(d->held, sizeof(int) * (size_t)d->capheld);
  }
  memcpy(d->held + d->nheld, h + d->nheld, sizeof(int) * (size_t)(n - d->nheld));
  d->nheld = n;
}

/* The held ids up to the mark are a prefix of hist (a sequence only grows
 * between proposals of one generation); anything else starts over. */
static int self_propose(df_draft *d, const int *h, int n, int *out, int kmax, df_err *e) {
  df_session *s = d->sess;
  int V = s->en->cfg.vocab;
  int keep = held_prefix(d, h, n);
  if (!keep) {
    df_session_reset(s);
    d->nheld = 0;
    df_mmark_save(d->mark, s->st);
  } else {
    df_mmark_restore(s->st, d->mark);
  }
  if (n > d->nheld) {
    if (df_session_run(s, h + d->nheld, n - d->nheld, 1, NULL, e)) return -1;
    held_extend(d, h, n);
    df_mmark_save(d->mark, s->st);
    memcpy(d->mlog, s->logits, sizeof(float) * (size_t)V);
  } else if (keep && n > 0) {
    memcpy(s->logits, d->mlog, sizeof(float) * (size_t)V);
    s->have_logits = 1;
  }
  if (!s->have_logits) return 0;
  int limit = df_model_ctx_limit(s->en->model) - n;
  if (kmax > limit) kmax = limit;
  int k = 0;
  while (k < kmax) {
    out[k] = df_argmax(s->logits, V);
    if (++k == kmax) break;
    if (df_session_run(s, &out[k - 1], 1, 1, NULL, e)) return -1;
  }
  return k;
}

/* Bytes of a complete UTF-8 prefix of p[0..n): an unfinished character at
 * the end waits for the next ids. */
static size_t utf8_complete(const char *p, size_t n) {
  size_t i = n;
  int back = 0;
  while (i > 0 && back < 4 && ((unsigned char)p[i - 1] & 0xC0) == 0x80) i--, back++;
  if (i == 0) return n; /* no lead byte: not ours to fix */
  unsigned char c = (unsigned char)p[i - 1];
  int need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  return back + 1 >= need ? n : i - 1;
}

static int model_sync(df_draft *d, const int *h, int n, df_err *e) {
  int keep = held_prefix(d, h, n);
  if (!keep) {
    df_mstate_reset(d->qs);
    d->nheld = d->nd = d->npend = 0;
  }
  df_mstate_truncate(d->qs, d->nd);
  if (n == d->nheld) return 0;
  size_t len;
  char *txt = df_tok_decode(d->kt, h + d->nheld, (size_t)(n - d->nheld), &len);
  size_t all = (size_t)d->npend + len;
  char *buf = df_xmalloc(all + 1);
  memcpy(buf, d->pend, (size_t)d->npend);
  memcpy(buf + d->npend, txt, len);
  free(txt);
  size_t ok = utf8_complete(buf, all);
  if (all - ok > sizeof d->pend) ok = all; /* not UTF-8 at all: hand it over */
  int rc = 0;
  if (ok > 0) {
    int *ids = NULL;
    size_t ni = 0, cap = 0;
    rc = df_hftok_encode(d->qt, buf, ok, 0, &ids, &ni, &cap, e);
    if (!rc && ni > 0) {
      rc = df_model_forward(d->q, d->qs, ids, (int)ni, d->qlog, NULL, e);
      if (!rc) d->nd += (int)ni;
    }
    free(ids);
  }
  if (!rc) {
    d->npend = (int)(all - ok);
    memcpy(d->pend, buf + ok, (size_t)d->npend);
    held_extend(d, h, n);
  }
  free(buf);
  return rc;
}

/* The draft's greedy text after the committed text, as target ids: a few
 * more draft ids than target ids wanted (draft ids are often shorter), the
 * last target id dropped unless the draft ended its text. */
static int model_propose(df_draft *d, const int *h, int n, int *out, int kmax, df_err *e) {
  if (model_sync(d, h, n, e)) return -1;
  if (d->nd == 0 || d->npend) return 0; /* nothing to continue, or mid-character */
  int QV = df_model_vocab(d->q), eos = df_model_eos(d->q);
  int want = kmax + 2, nq = 0, ended = 0;
  int qids[DF_DRAFT_MAX + 3];
  int room = df_model_ctx_limit(d->q) - d->nd;
  if (want > room) want = room;
  while (nq < want) {
    int id = df_argmax(d->qlog, QV);
    if (id == eos || df_hftok_is_special(d->qt, id)) {
      ended = 1;
      break;
    }
    qids[nq++] = id;
    if (nq == want) break;
    if (df_model_forward(d->q, d->qs, &id, 1, d->qlog, NULL, e)) return -1;
  }
  if (nq == 0) return 0;
  size_t len;
  char *txt = df_hftok_decode(d->qt, qids, (size_t)nq, &len);
  size_t ok = utf8_complete(txt, len);
  int *ids = NULL;
  size_t ni = 0, cap = 0;
  int k = 0;
  df_err e2;
  if (ok > 0 && !df_tok_encode(d->kt, txt, ok, &ids, &ni, &cap, &e2)) {
    if (!ended || ok < len) ni = ni > 0 ? ni - 1 : 0;
    for (k = 0; k < kmax && (size_t)k < ni; k++) out[k] = ids[k];
  }
  free(ids);
  free(txt);
  return k;
}

int df_draft_propose(df_draft *d, const int *hist, int n, int *out, int kmax, df_err *e) {
  if (kmax <= 0) return 0;
  int k = 0;
  d->nconf = 0;
  switch (d->kind) {
  case D_FN: k = d->fn(d->ud, hist, n, out, kmax, e); break;
  case D_NGRAM: k = ngram_propose(hist, n, out, kmax); break;
  case D_SELF: k = self_propose(d, hist, n, out, kmax, e); break;
  case D_MODEL: k = model_propose(d, hist, n, out, kmax, e); break;
  case D_DSPARK: k = dspark_propose(d, hist, n, out, kmax, e); break;
  }
  if (k >= 0 && d->edit) d->edit(d->edit_ud, hist, n, out, &k, kmax);
  if (d->nconf > k) d->nconf = k;
  return k;
}

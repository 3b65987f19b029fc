/* The draft sources of draft.h. */
#include "engine/draft.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/engine_int.h"

typedef enum { D_FN, D_NGRAM, D_SELF } draft_kind;

struct df_draft {
  draft_kind kind;
  char name[32];
  df_draft_fn fn;
  void *ud;
  /* self: a second session, the ids it holds up to its mark, and the mark */
  df_session *sess;
  df_k3_mark *mark;
  int *held, nheld, capheld;
  float *mlog; /* the logits at the mark */
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
  d->mark = df_k3_mark_new(d->sess->st);
  df_k3_mark_save(d->mark, d->sess->st); /* the empty sequence */
  d->mlog = df_xmalloc(sizeof(float) * (size_t)en->cfg.vocab);
  return d;
}

const char *df_draft_name(const df_draft *d) { return d->name; }

void df_draft_free(df_draft *d) {
  if (!d) return;
  df_k3_mark_free(d->mark);
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

static int argmax_f(const float *x, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

/* The held ids up to the mark are a prefix of hist (a sequence only grows
 * between proposals of one generation); anything else starts over. */
static int self_propose(df_draft *d, const int *h, int n, int *out, int kmax, df_err *e) {
  df_session *s = d->sess;
  int V = s->en->cfg.vocab;
  int keep = d->nheld <= n && !memcmp(d->held, h, sizeof(int) * (size_t)d->nheld);
  if (!keep) {
    df_session_reset(s);
    d->nheld = 0;
    df_k3_mark_save(d->mark, s->st);
  } else {
    df_k3_mark_restore(s->st, d->mark);
  }
  if (n > d->nheld) {
    if (df_session_run(s, h + d->nheld, n - d->nheld, 1, NULL, e)) return -1;
    if (n > d->capheld) {
      d->capheld = n * 2;
      d->held = df_xrealloc(d->held, sizeof(int) * (size_t)d->capheld);
    }
    memcpy(d->held + d->nheld, h + d->nheld, sizeof(int) * (size_t)(n - d->nheld));
    d->nheld = n;
    df_k3_mark_save(d->mark, s->st);
    memcpy(d->mlog, s->logits, sizeof(float) * (size_t)V);
  } else if (keep && n > 0) {
    memcpy(s->logits, d->mlog, sizeof(float) * (size_t)V);
    s->have_logits = 1;
  }
  if (!s->have_logits) return 0;
  int limit = df_k3_ctx_limit(s->en->model) - n;
  if (kmax > limit) kmax = limit;
  int k = 0;
  while (k < kmax) {
    out[k] = argmax_f(s->logits, V);
    if (++k == kmax) break;
    if (df_session_run(s, &out[k - 1], 1, 1, NULL, e)) return -1;
  }
  return k;
}

int df_draft_propose(df_draft *d, const int *hist, int n, int *out, int kmax, df_err *e) {
  if (kmax <= 0) return 0;
  switch (d->kind) {
  case D_FN: return d->fn(d->ud, hist, n, out, kmax, e);
  case D_NGRAM: return ngram_propose(hist, n, out, kmax);
  case D_SELF: return self_propose(d, hist, n, out, kmax, e);
  }
  return 0;
}

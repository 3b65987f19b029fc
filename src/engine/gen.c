/* Generation: the prompt prefilled in chunks, then decoding, either one
 * position at a time or, with a draft source, in speculative blocks:
 *
 *   x (the token just chosen, not yet run) and k drafts d0..dk-1 run as one
 *   batch [x, d0..dk-1]: every row's work is batched and each expert a row
 *   needs is read once for the block (the prefill path). Row i's logits are
 *   exactly those plain decoding would have after d(i-1), because the
 *   forward pass gives every row the same result whatever the batch, so
 *   choosing from them as plain decoding does and keeping drafts while they
 *   match gives the ids of plain decoding. The first mismatch (or, all
 *   matched, row k) gives the next token for free.
 *
 *   Rollback: a rejected tail is undone by restoring a mark taken before
 *   the block (df_mmark, model/model.h: K3's KDA state and the position) and
 *   running the accepted rows again without the head. The alternative, a
 *   state per row (--draft-rollback rows: the verify pass fills a mark after
 *   each row), skips the recompute but costs k KDA states (k x 443 MiB at
 *   real K3 size) instead of one, and copies each into place during the pass; the
 *   recompute's experts are the ones the block has just brought into the
 *   cache. docs/PERFORMANCE.md measures the two.
 *
 * With sampling, each draft is accepted with the target's probability of it
 * and a rejection draws from the target with the draft taken out
 * (df_sample_verify): the output distribution is the target's exactly. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/engine_int.h"

void df_gen_opts_default(df_gen_opts *o) {
  memset(o, 0, sizeof *o);
  o->max_new = 256;
  o->prefill_chunk = 64;
  o->temperature = 0.0f;
  o->top_p = 1.0f;
}

/* The decode loop's state. */
typedef struct gen {
  df_session *s;
  const df_gen_opts *o;
  df_gen_stats *st;
  df_sample_opts so;
  uint64_t rng;
  int *ids, n;        /* emitted */
  int *ctx, nctx;     /* the penalties' context (NULL: no penalties) */
  int *hist, nhist;   /* the drafts' view: history, prompt, emitted */
  df_draft *draft;    /* this generation's draft source (NULL: none) */
} gen;

/* Hands out one id; 1 when generation ends with it. */
static int emit(gen *g, int id) {
  g->ids[g->n++] = id;
  df_store_trace_mark(g->s->en->store, "token", g->n);
  if (g->ctx) g->ctx[g->nctx++] = id;
  if (g->hist) g->hist[g->nhist++] = id;
  if (g->o->on_token && g->o->on_token(g->o->ud, id)) {
    g->st->finish = DF_FINISH_CANCEL;
    return 1;
  }
  for (int i = 0; i < g->o->nstop; i++)
    if (g->o->stop_ids[i] == id) {
      g->st->finish = DF_FINISH_STOP;
      return 1;
    }
  return g->n == g->o->max_new;
}

static int pick(gen *g, const float *lg) {
  df_session *s = g->s;
  int V = s->en->cfg.vocab;
  if (g->o->mask) {
    if (!s->masked) s->masked = df_xmalloc(sizeof(float) * (size_t)V);
    memcpy(s->masked, lg, sizeof(float) * (size_t)V);
    g->o->mask(g->o->ud, s->masked);
    lg = s->masked;
  }
  return df_sample_pick(s->sampler, lg, &g->so, g->ctx, g->nctx, g->n, &g->rng);
}

/* --draft auto: K and on/off from what a block delivers. Greedy decoding
 * compares measured speed (tokens per second of blocks against single
 * steps; the ids do not depend on it); sampling decides on accepted counts
 * only, so a seed gives the same ids on every run. */
typedef struct spec_auto {
  int on, K, kmax;
  int window_tok, window_pass, window_full; /* since the last decision */
  int plain_left;          /* single steps before the next probe */
  double t_step, t_pass;   /* EMA seconds: a single step, a block (rollback included) */
  int changes, offs;
} spec_auto;

/* Returns what it decided ("grow", "shrink", "off"; NULL: K stays) and the
 * tokens per block it decided on, for the trace. */
static const char *auto_decide(spec_auto *a, int timed, double *tpp_out) {
  if (a->window_pass < 4) return NULL;
  const char *why = NULL;
  double tpp = (double)a->window_tok / a->window_pass; /* tokens per block */
  *tpp_out = tpp;
  int pays = timed && a->t_step > 0 && a->t_pass > 0 ? tpp / a->t_pass > 1.05 / a->t_step
                                                      : tpp >= 1.5;
  if (!pays) {
    /* next to nothing accepted: off at once rather than through every K */
    a->K = tpp < 1.1 ? 0 : a->K / 2;
    a->changes++;
    why = "shrink";
    if (a->K == 0) {
      a->on = 0, a->offs++;
      a->plain_left = 64; /* then probe again with K = 1 */
      why = "off";
    }
  } else if (a->window_full == a->window_pass && a->K < a->kmax) {
    a->K = a->K * 2 > a->kmax ? a->kmax : a->K * 2;
    a->changes++;
    why = "grow";
  }
  a->window_tok = a->window_pass = a->window_full = 0;
  return why;
}

static int decode(gen *g, df_err *e) {
  /* --max-new 0 (a prompt's ids only): the first id below would already be
   * one past the buffer and past the limit emit() checks */
  if (g->o->max_new <= 0) return 0;
  df_session *s = g->s;
  df_engine *en = s->en;
  const df_gen_opts *o = g->o;
  df_gen_stats *st = g->st;
  int V = en->cfg.vocab, limit = df_model_ctx_limit(en->model);
  df_draft *draft = g->draft;
  int kmax = o->draft_max > 0 ? o->draft_max : en->draft_max > 0 ? en->draft_max : 4;
  if (kmax > DF_DRAFT_MAX) kmax = DF_DRAFT_MAX;
  spec_auto au = {.on = 1, .K = kmax, .kmax = kmax};
  int adapt = !o->draft && en->draft_auto;
  int timed = !(g->so.temperature > 0);
  float *all = NULL;
  int d[DF_DRAFT_MAX + 1], blk[DF_DRAFT_MAX + 1];
  df_mmark *mark = NULL, *rowmk[DF_DRAFT_MAX] = {0};
  int rows = draft && en->draft_rows;
  if (draft) {
    all = df_xmalloc(sizeof(float) * (size_t)V * (DF_DRAFT_MAX + 1));
    if (rows)
      for (int i = 0; i < kmax; i++) rowmk[i] = df_mmark_new(s->st);
    else
      mark = df_mmark_new(s->st);
  }
  int rc = 0, x = pick(g, s->logits);
  if (emit(g, x)) goto out;
  for (;;) {
    /* a full context ends the reply like max_new does, instead of failing
     * after tokens were already handed out */
    if (df_session_pos(s) >= limit) break;
    int k = 0;
    int want = adapt ? (au.on ? au.K : 0) : kmax;
    if (adapt && !au.on && --au.plain_left <= 0) {
      au.on = 1, au.K = 1, want = 1;
      df_store_trace_draft(en->store, 1, 0, "probe");
    }
    if (draft && want > 0) {
      int room = o->max_new - g->n - 1, ctxroom = limit - df_session_pos(s) - 1;
      if (want > room) want = room;
      if (want > ctxroom) want = ctxroom;
      if (want > 0) {
        k = df_draft_propose(draft, g->hist, g->nhist, d, want, e);
        if (k < 0) {
          rc = -1;
          break;
        }
      }
    }
    double t0 = df_now();
    if (k == 0) {
      rc = df_session_run(s, &x, 1, 1, NULL, e);
      st->n_passes++;
      if (rc) break;
      double dt = df_now() - t0;
      au.t_step = au.t_step > 0 ? 0.8 * au.t_step + 0.2 * dt : dt;
      x = pick(g, s->logits);
      if (emit(g, x)) break;
      continue;
    }
    if (rows) df_mstate_set_row_marks(s->st, rowmk, k);
    else df_mmark_save(mark, s->st);
    blk[0] = x;
    memcpy(blk + 1, d, sizeof(int) * (size_t)k);
    rc = df_session_run(s, blk, k + 1, 1, all, e);
    if (rows) df_mstate_set_row_marks(s->st, NULL, 0);
    st->n_passes++;
    if (rc) break;
    st->n_verify++;
    st->n_drafted += k;
    st->block_len[k]++;
    float cf[DF_DRAFT_MAX];
    int ncf = df_draft_conf(draft, cf, k);
    for (int i = 0; i < ncf; i++)
      if (cf[i] >= 0) st->conf_sum[i] += cf[i], st->conf_n[i]++;
    /* rows: keep drafts while they are what the target chooses */
    int keep = k, stop = 0, acc = 0;
    for (int i = 0; i <= k; i++) {
      const float *row = all + (size_t)i * V;
      int t = i < k ? df_sample_verify(s->sampler, row, &g->so, g->ctx, g->nctx, g->n, d[i], &g->rng)
                    : pick(g, row);
      if (i < k && t == d[i]) {
        st->acc_at[i]++;
        acc++;
        if (emit(g, t)) {
          stop = 1, keep = i; /* d[i] is the last id out: the state holds what precedes it */
          break;
        }
        continue;
      }
      stop = emit(g, t);
      keep = i;
      x = t;
      break;
    }
    st->n_accepted += acc;
    if (keep < k) {
      if (rows) {
        df_mmark_restore(s->st, rowmk[keep]); /* the state after row keep */
      } else {
        df_mmark_restore(s->st, mark);
        rc = df_session_run(s, blk, keep + 1, 0, NULL, e);
        st->n_passes++;
        if (rc) break;
      }
      memcpy(s->logits, all + (size_t)keep * V, sizeof(float) * (size_t)V);
      s->have_logits = 1;
      st->n_rollback++;
    }
    double dt = df_now() - t0;
    au.t_pass = au.t_pass > 0 ? 0.8 * au.t_pass + 0.2 * dt : dt;
    au.window_tok += acc + 1, au.window_pass++, au.window_full += acc == k;
    double tpp = 0;
    const char *why = adapt ? auto_decide(&au, timed, &tpp) : NULL;
    if (why) df_store_trace_draft(en->store, au.K, tpp, why);
    if (stop) break;
  }
out:
  st->draft_k = draft ? (adapt ? (au.on ? au.K : 0) : kmax) : 0;
  st->draft_changes = au.changes;
  st->draft_offs = au.offs;
  df_mmark_free(mark);
  for (int i = 0; i < DF_DRAFT_MAX; i++) df_mmark_free(rowmk[i]);
  free(all);
  if (rc == DF_MODEL_CANCELLED) {
    st->finish = DF_FINISH_CANCEL;
    return 0;
  }
  return rc;
}

/* 1 when ids hold the chat format's <|open|>: every rendered message
 * (chat_render.c) starts with it, raw text never encodes to a special id. */
static int is_chat(const df_engine *en, const int *ids, int n) {
  for (int i = 0; en->chat_open >= 0 && i < n; i++)
    if (ids[i] == en->chat_open) return 1;
  return 0;
}

/* The generation's draft: the caller's, else the engine's; with --draft auto
 * and a DSpark, the DSpark for a chat prompt (or chat history) and n-gram
 * for raw text. None with a mask: a grammar's state moves with each
 * handed-out id. */
static df_draft *gen_draft(const df_engine *en, const int *prompt, int nprompt,
                           const df_gen_opts *o) {
  if (o->no_draft || o->mask) return NULL;
  if (o->draft) return o->draft;
  if (en->draft_raw && !is_chat(en, prompt, nprompt) &&
      !(o->history && is_chat(en, o->history, o->nhistory)))
    return en->draft_raw;
  return en->draft;
}

int df_generate(df_session *s, const int *prompt, int nprompt, const df_gen_opts *o, int **out,
                int *nout, df_gen_stats *st, df_err *e) {
  df_engine *en = s->en;
  int V = en->cfg.vocab;
  df_gen_stats z = {0};
  if (!st) st = &z;
  memset(st, 0, sizeof *st);
  st->n_prompt = nprompt;
  st->spine_bytes_per_token = df_model_spine_bytes_per_token(en->model);
  *out = NULL;
  *nout = 0;
  uint64_t bytes0 = df_store_bytes_read(en->store);
  int chunk = o->prefill_chunk > 0 ? o->prefill_chunk : (nprompt > 0 ? nprompt : 1);
  double t0 = df_now();
  df_store_trace_mark(en->store, "gen", nprompt);
  df_mstate_set_cancel(s->st, o->cancel, o->ud);
  /* a draft reading the target's hidden states sees the prompt's too */
  df_draft *dr = gen_draft(en, prompt, nprompt, o);
  st->draft_src = dr ? df_draft_name(dr) : NULL;
  if (dr) df_draft_attach(dr, s, o->history, o->history ? o->nhistory : 0);
  int rc = 0;
  for (int i = 0; i < nprompt && !rc; i += chunk) {
    int n = nprompt - i < chunk ? nprompt - i : chunk;
    if (o->cancel && o->cancel(o->ud)) rc = DF_MODEL_CANCELLED;
    else rc = df_session_run(s, prompt + i, n, i + n == nprompt, NULL, e);
    if (!rc) {
      st->n_prefilled += n;
      if (o->on_prefill) o->on_prefill(o->ud, st->n_prefilled);
    }
  }
  st->prefill_s = df_now() - t0;
  if (rc) {
    if (dr) df_draft_detach(dr);
    df_mstate_set_cancel(s->st, NULL, NULL);
    s->have_logits = 0;
    if (rc < 0) return -1;
    st->finish = DF_FINISH_CANCEL;
    st->expert_bytes_read = df_store_bytes_read(en->store) - bytes0;
    return 0;
  }
  if (!s->have_logits) {
    if (dr) df_draft_detach(dr);
    return df_err_set(e, "generate: empty prompt and no earlier context");
  }
  int cap = o->max_new > 0 ? o->max_new : 1;
  gen g = {.s = s, .o = o, .st = st, .rng = o->seed, .draft = dr};
  g.ids = df_xmalloc(sizeof(int) * (size_t)cap);
  if (o->sampling) {
    g.so = *o->sampling;
  } else {
    df_sample_opts_default(&g.so);
    g.so.temperature = o->temperature;
    g.so.top_p = o->top_p;
  }
  if (!s->sampler) s->sampler = df_sampler_new(V);
  int nh = o->history && o->nhistory > 0 ? o->nhistory : 0;
  size_t full = (size_t)nh + (size_t)nprompt + (size_t)cap;
  /* the context the penalties look at, and the drafts': history, prompt, each new id */
  if (df_sample_has_penalties(&g.so)) g.ctx = df_xmalloc(sizeof(int) * full);
  if (dr) g.hist = df_xmalloc(sizeof(int) * full);
  int *both[2] = {g.ctx, g.hist};
  for (int i = 0; i < 2; i++)
    if (both[i]) {
      if (nh) memcpy(both[i], o->history, sizeof(int) * (size_t)nh);
      if (nprompt) memcpy(both[i] + nh, prompt, sizeof(int) * (size_t)nprompt);
    }
  g.nctx = g.ctx ? nh + nprompt : 0;
  g.nhist = g.hist ? nh + nprompt : 0;
  st->finish = DF_FINISH_LENGTH;
  double t1 = df_now();
  rc = decode(&g, e);
  if (dr) df_draft_detach(dr);
  df_mstate_set_cancel(s->st, NULL, NULL);
  free(g.ctx);
  free(g.hist);
  if (rc) {
    free(g.ids);
    return -1;
  }
  st->decode_s = df_now() - t1;
  st->n_gen = g.n;
  st->expert_bytes_read = df_store_bytes_read(en->store) - bytes0;
  *out = g.ids;
  *nout = g.n;
  return 0;
}

/* The model seam's dispatchers (model.h) and the one builder of the memory
 * plan's input. */
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

struct df_model {
  const df_model_ops *ops;
  void *self;
  df_model_run run;
};

struct df_mstate {
  const df_model *m;
  void *st;
};

struct df_mmark {
  const df_model *m;
  void *k;
};

df_model *df_model_wrap(const df_model_ops *ops, void *self) {
  df_model *m = df_xcalloc(1, sizeof *m);
  m->ops = ops;
  m->self = self;
  return m;
}

void df_model_free(df_model *m) {
  if (!m) return;
  if (m->ops->free) m->ops->free(m->self);
  free(m);
}

const char *df_model_family(const df_model *m) { return m->ops->family; }
void *df_model_self(const df_model *m) { return m->self; }
const df_config *df_model_config(const df_model *m) {
  return m->ops->config ? m->ops->config(m->self) : NULL;
}

/* A family answers its sizes by its config (K3) or by its shape (the
 * drafts, which have no df_config). */
static df_model_shape shape_of(const df_model *m) {
  df_model_shape sh = {0, 0, 0, -1};
  const df_config *c = df_model_config(m);
  if (c)
    sh = (df_model_shape){c->vocab, c->hidden, c->n_layers, c->eos_id};
  else if (m->ops->shape)
    m->ops->shape(m->self, &sh);
  return sh;
}

int df_model_vocab(const df_model *m) { return shape_of(m).vocab; }
int df_model_hidden(const df_model *m) { return shape_of(m).hidden; }
int df_model_layers(const df_model *m) { return shape_of(m).layers; }
int df_model_eos(const df_model *m) { return shape_of(m).eos; }

void df_model_mem(const df_model *m, uint64_t *weights, uint64_t *per_pos) {
  *weights = *per_pos = 0;
  if (m->ops->mem) m->ops->mem(m->self, weights, per_pos);
}

int df_model_ctx_limit(const df_model *m) {
  if (m->ops->ctx_limit) return m->ops->ctx_limit(m->self);
  const df_config *c = df_model_config(m);
  return c ? (int)c->max_pos : 0;
}

int df_model_precision(const df_model *m) {
  return m->ops->precision ? m->ops->precision(m->self) : 32;
}

uint64_t df_model_spine_bytes_per_token(const df_model *m) {
  return m->ops->spine_bytes_per_token ? m->ops->spine_bytes_per_token(m->self) : 0;
}

/* The request's part of the planner's input, the same for every family:
 * the expert records come from the config (the store's layout), the
 * speculation budget from the state's fixed part (the rollback mark) and a
 * block of logits. */
void df_model_plan_in(const df_model *m, const df_model_plan_req *rq, df_plan_in *in) {
  memset(in, 0, sizeof *in);
  if (!m->ops->plan_input) return;
  m->ops->plan_input(m->self, in);
  const df_config *c = in->cfg;
  in->f64 = rq->f64;
  if (rq->draft && strcmp(rq->draft, "off")) {
    uint64_t marks = rq->draft_marks > 0 ? (uint64_t)rq->draft_marks : 1;
    in->spec_bytes = marks * df_plan_state_bytes(c, 0) * (rq->f64 ? 2 : 1) +
                     sizeof(float) * (uint64_t)rq->draft_rows * (uint64_t)c->vocab;
    in->spec_self = !strcmp(rq->draft, "self");
    in->spec_bytes += rq->draft_fixed;
    in->spec_per_pos = rq->draft_per_pos;
  }
  df_expert_layout lay;
  df_expert_layout_of(c, &lay);
  in->expert_record_bytes = DF_IO_ROUND_UP(lay.total);
  in->expert_total_bytes =
      in->expert_record_bytes * (uint64_t)c->n_experts * (uint64_t)(c->n_layers - c->first_k_dense);
  in->mem_limit = rq->mem_limit;
  in->cache_req = rq->cache_req;
  in->cache_default = rq->cache_default >= 0 ? rq->cache_default : (int64_t)in->expert_total_bytes;
  in->ctx_req = rq->ctx;
  in->max_rows = rq->max_rows > 0 ? rq->max_rows : 1;
  in->reuse_bytes = rq->reuse_bytes;
  in->reuse_states = rq->reuse_states;
}

int df_model_apply_plan(df_model *m, const df_plan *p, df_err *e) {
  if (!m->ops->apply_plan) return df_err_set(e, "%s: this model has no weights to plan", m->ops->family);
  return m->ops->apply_plan(m->self, p, e);
}

int df_model_stream_start(df_model *m, df_store *st, df_err *e) {
  return m->ops->stream_start ? m->ops->stream_start(m->self, st, e) : 0;
}

void df_model_stream_stats_get(const df_model *m, df_model_stream_stats *out) {
  memset(out, 0, sizeof *out);
  if (m->ops->stream_stats) m->ops->stream_stats(m->self, out);
}

void df_model_stream_settle(const df_model *m) {
  if (m->ops->stream_settle) m->ops->stream_settle(m->self);
}

int df_model_stream_reads(const df_model *m, df_model_read_fn fn, void *ud) {
  return m->ops->stream_reads ? m->ops->stream_reads(m->self, fn, ud) : 0;
}

void df_model_compute_get(const df_model *m, df_model_compute *out) {
  memset(out, 0, sizeof *out);
  if (m->ops->compute) m->ops->compute(m->self, out);
}

void df_model_bind(df_model *m, const df_model_run *run) { m->run = *run; }

/* ---- sequence state ---- */

static df_mstate *mstate_wrap(const df_model *m, void *st) {
  df_mstate *s = df_xcalloc(1, sizeof *s);
  s->m = m;
  s->st = st;
  return s;
}

df_mstate *df_mstate_new(const df_model *m) { return mstate_wrap(m, m->ops->state_new(m->self)); }

void df_mstate_free(df_mstate *s) {
  if (!s) return;
  s->m->ops->state_free(s->st);
  free(s);
}

void df_mstate_reset(df_mstate *s) { s->m->ops->state_reset(s->st); }
int df_mstate_pos(const df_mstate *s) { return s->m->ops->state_pos(s->st); }
const df_model *df_mstate_model(const df_mstate *s) { return s->m; }
void *df_mstate_self(const df_mstate *s) { return s->st; }

int df_mstate_truncate(df_mstate *s, int pos) {
  if (!s->m->ops->state_truncate || pos < 0) return -1;
  s->m->ops->state_truncate(s->st, pos);
  return 0;
}

df_mstate *df_mstate_clone(const df_mstate *s) {
  return mstate_wrap(s->m, s->m->ops->state_clone(s->st));
}

void df_mstate_copy(df_mstate *dst, const df_mstate *src) { dst->m->ops->state_copy(dst->st, src->st); }
size_t df_mstate_bytes(const df_mstate *s) { return s->m->ops->state_bytes(s->st); }

void df_mstate_set_tap(df_mstate *s, df_model_tap_fn fn, void *ud) {
  if (s->m->ops->state_set_tap) s->m->ops->state_set_tap(s->st, fn, ud);
}

void df_mstate_set_route(df_mstate *s, df_model_route_fn fn, void *ud) {
  if (s->m->ops->state_set_route) s->m->ops->state_set_route(s->st, fn, ud);
}

void df_mstate_set_cancel(df_mstate *s, df_model_cancel_fn fn, void *ud) {
  if (s->m->ops->state_set_cancel) s->m->ops->state_set_cancel(s->st, fn, ud);
}

df_mmark *df_mmark_new(const df_mstate *s) {
  if (!s->m->ops->mark_new) return NULL;
  df_mmark *k = df_xcalloc(1, sizeof *k);
  k->m = s->m;
  k->k = s->m->ops->mark_new(s->st);
  return k;
}

void df_mmark_save(df_mmark *k, const df_mstate *s) { k->m->ops->mark_save(k->k, s->st); }
void df_mmark_restore(df_mstate *s, const df_mmark *k) { k->m->ops->mark_restore(s->st, k->k); }

int df_model_embed(const df_model *m, const int *ids, int T, float *out, df_err *e) {
  if (!m->ops->embed) return df_err_set(e, "%s: shares no embedding", m->ops->family);
  return m->ops->embed(m->self, ids, T, out, e);
}

int df_model_lm_head(const df_model *m, const df_kctx *kc, const float *x, int T, float *logits,
                     df_err *e) {
  if (!m->ops->lm_head) return df_err_set(e, "%s: shares no LM head", m->ops->family);
  return m->ops->lm_head(m->self, kc, x, T, logits, e);
}

int df_mstate_set_row_marks(df_mstate *s, df_mmark *const *marks, int n) {
  if (!s->m->ops->state_set_row_marks) return -1;
  void *in[64];
  if (n > 64) return -1;
  for (int i = 0; i < n; i++) in[i] = marks[i]->k;
  s->m->ops->state_set_row_marks(s->st, in, n > 0 ? n : 0);
  return 0;
}

void df_mmark_free(df_mmark *k) {
  if (!k) return;
  k->m->ops->mark_free(k->k);
  free(k);
}

int df_model_forward(const df_model *m, df_mstate *s, const int *ids, int T, float *logits_last,
                     float *logits_all, df_err *e) {
  if (!m->ops->forward) return df_err_set(e, "%s: no forward pass over ids", m->ops->family);
  return m->ops->forward(m->self, &m->run, s->st, ids, T, logits_last, logits_all, e);
}

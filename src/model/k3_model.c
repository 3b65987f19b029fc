/* K3 behind the model seam (model.h): each operation is the df_k3_* call
 * of k3.h; the spine stream's options come from the store's. A plan-only K3
 * (no checkpoint) answers its config and the planner's input from
 * plan/plan_k3.c. */
#include <stdlib.h>

#include "base/util.h"
#include "model/k3.h"
#include "model/model.h"

static void k_free(void *self) { df_k3_free(self); }
static const df_config *k_config(const void *self) { return df_k3_config(self); }
static void k_plan_input(const void *self, df_plan_in *in) { df_k3_plan_input(self, in); }

static int k_apply_plan(void *self, const df_plan *p, df_err *e) { return df_k3_apply_plan(self, p, e); }

static int k_stream_start(void *self, df_store *st, df_err *e) {
  return df_k3_stream_start(self, st, e);
}

static void k_stream_stats(const void *self, df_model_stream_stats *o) {
  df_k3_stream_stats s;
  df_k3_stream_stats_get(self, &s);
  *o = (df_model_stream_stats){.units = s.units, .bytes = s.bytes, .weight_bytes = s.weight_bytes,
                               .reads = s.reads, .wasted = s.wasted, .passes = s.passes,
                               .wait_s = s.wait_s, .direct = s.direct, .registered = s.registered,
                               .io = s.io, .source = s.source, .drives = s.drives};
}

static void k_stream_settle(const void *self) { df_k3_stream_settle(self); }

static int k_stream_reads(const void *self, df_model_read_fn fn, void *ud) {
  return df_k3_stream_reads(self, fn, ud);
}

static void k_compute(const void *self, df_model_compute *o) {
  df_k3_compute c;
  df_k3_compute_get(self, &c);
  _Static_assert(DF_K3_T_N <= DF_MODEL_PARTS_MAX, "K3's compute parts fit the seam's");
  o->nparts = DF_K3_T_N;
  o->names = df_k3_compute_names;
  for (int i = 0; i < DF_K3_T_N; i++) {
    o->s[i] = c.s[i], o->n[i] = c.n[i];
    o->pre_s[i] = c.pre_s[i], o->pre_n[i] = c.pre_n[i];
  }
  o->store_wait_s = c.store_wait_s;
  o->pre_store_wait_s = c.pre_store_wait_s;
}

static uint64_t k_spine_bpt(const void *self) { return df_k3_spine_bytes_per_token(self); }
static int k_ctx_limit(const void *self) { return df_k3_ctx_limit(self); }
static int k_precision(const void *self) { return df_k3_precision(self); }
static void *k_state_new(const void *self) { return df_k3_state_new(self); }
static void k_state_free(void *st) { df_k3_state_free(st); }
static void k_state_reset(void *st) { df_k3_state_reset(st); }
static int k_state_pos(const void *st) { return df_k3_state_pos(st); }
static void *k_state_clone(const void *st) { return df_k3_state_clone(st); }
static void k_state_copy(void *d, const void *s) { df_k3_state_copy(d, s); }
static size_t k_state_bytes(const void *st) { return df_k3_state_bytes(st); }

static void k_set_tap(void *st, df_model_tap_fn fn, void *ud) { df_k3_state_set_hook(st, fn, ud); }
static void k_set_route(void *st, df_model_route_fn fn, void *ud) {
  df_k3_state_set_route_hook(st, fn, ud);
}
static void k_set_cancel(void *st, df_model_cancel_fn fn, void *ud) {
  df_k3_state_set_cancel(st, fn, ud);
}

static void *k_mark_new(const void *st) { return df_k3_mark_new(st); }
static void k_mark_save(void *k, const void *st) { df_k3_mark_save(k, st); }
static void k_mark_restore(void *st, const void *k) { df_k3_mark_restore(st, k); }
static void k_mark_free(void *k) { df_k3_mark_free(k); }
static int k_embed(const void *self, const int *ids, int T, float *out, df_err *e) {
  return df_k3_embed(self, ids, T, out, e);
}
static int k_lm_head(const void *self, const df_kctx *kc, const float *x, int T, float *logits,
                     df_err *e) {
  return df_k3_lm_head(self, kc, x, T, logits, e);
}
static void k_set_row_marks(void *st, void *const *marks, int n) {
  df_k3_state_set_row_marks(st, (df_k3_mark *const *)marks, n);
}

_Static_assert((int)DF_GATE_FROM_X == (int)DF_MODEL_GATE_X &&
                   (int)DF_GATE_FROM_X_SHARED == (int)DF_MODEL_GATE_X_SHARED,
               "the seam's gate-ahead inputs are K3's");
_Static_assert(DF_K3_CANCELLED == DF_MODEL_CANCELLED, "one cancelled code through the seam");

static int k_forward(const void *self, const df_model_run *run, void *st, const int *ids, int T,
                     float *logits_last, float *logits_all, df_err *e) {
  df_k3_run r = {.m = self, .kc = run->kc, .store = run->store, .gate_input = run->gate_input};
  return df_k3_forward(&r, st, ids, T, logits_last, logits_all, e);
}

static const df_model_ops k3_ops = {
    .family = "k3",
    .free = k_free,
    .config = k_config,
    .plan_input = k_plan_input,
    .apply_plan = k_apply_plan,
    .stream_start = k_stream_start,
    .stream_stats = k_stream_stats,
    .stream_settle = k_stream_settle,
    .stream_reads = k_stream_reads,
    .compute = k_compute,
    .spine_bytes_per_token = k_spine_bpt,
    .ctx_limit = k_ctx_limit,
    .precision = k_precision,
    .state_new = k_state_new,
    .state_free = k_state_free,
    .state_reset = k_state_reset,
    .state_pos = k_state_pos,
    .state_clone = k_state_clone,
    .state_copy = k_state_copy,
    .state_bytes = k_state_bytes,
    .state_set_tap = k_set_tap,
    .state_set_route = k_set_route,
    .state_set_cancel = k_set_cancel,
    .mark_new = k_mark_new,
    .mark_save = k_mark_save,
    .mark_restore = k_mark_restore,
    .mark_free = k_mark_free,
    .state_set_row_marks = k_set_row_marks,
    .embed = k_embed,
    .lm_head = k_lm_head,
    .forward = k_forward,
};

int df_model_open_k3(df_model **out, const df_st_set *set, const df_config *c, int int8,
                     const char *model_dir, const char *int8_dir, int precision, df_err *e) {
  df_k3 *k;
  if (df_k3_load_from(&k, set, c, int8, model_dir, int8_dir, e)) return -1;
  df_k3_set_precision(k, precision);
  *out = df_model_wrap(&k3_ops, k);
  return 0;
}

/* ---- plan-only ---- */

typedef struct k3_plan_only {
  const df_config *c;
  uint64_t *ub, *ur, fixed, erow;
} k3_plan_only;

static void p_free(void *self) {
  k3_plan_only *p = self;
  free(p->ub);
  free(p->ur);
  free(p);
}

static const df_config *p_config(const void *self) { return ((const k3_plan_only *)self)->c; }

static void p_plan_input(const void *self, df_plan_in *in) {
  const k3_plan_only *p = self;
  in->cfg = p->c;
  in->nunits = p->c->n_layers + 1;
  in->unit_bytes = p->ub;
  in->unit_read = p->ur;
  in->fixed_bytes = p->fixed;
  in->embed_row_bytes = p->erow;
}

static const df_model_ops k3_plan_ops = {
    .family = "k3 (config only)", .free = p_free, .config = p_config, .plan_input = p_plan_input};

df_model *df_model_plan_only_k3(const df_config *c, int int8) {
  k3_plan_only *p = df_xcalloc(1, sizeof *p);
  p->c = c;
  p->ub = df_xmalloc(sizeof *p->ub * (size_t)(c->n_layers + 1));
  p->ur = df_xmalloc(sizeof *p->ur * (size_t)(c->n_layers + 1));
  df_plan_k3_units(c, int8, p->ub, p->ur, &p->fixed, &p->erow);
  return df_model_wrap(&k3_plan_ops, p);
}

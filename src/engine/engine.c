/* The engine: owns the config, tokenizer, mapped shards, spine, expert store,
 * thread pool and kernel table; sessions own per-sequence state and the last
 * logits. Generation is prefill in chunks, then one position at a time. */
#include "engine/engine.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/sbuf.h"
#include "base/pool.h"
#include "base/util.h"
#include "format/safetensors.h"
#include "kernels/kdevice.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "store/store.h"
#include "dspark/dspark.h"
#include "engine/engine_int.h"

void df_engine_opts_default(df_engine_opts *o) {
  memset(o, 0, sizeof *o);
  o->threads = 0;
  o->spine = DF_SPINE_BF16;
  o->store.cache_mb = -1;
  o->device = DF_DEVICE_UNSET;
}

void df_engine_close(df_engine *en) {
  if (!en) return;
  df_draft_free(en->draft); /* a self draft holds a session of en */
  df_draft_free(en->draft_raw);
  df_model_free(en->model); /* first: its spine stream reads through the store */
  df_store_close(en->store);
  df_plan_free(&en->plan);
  df_plan_gpu_free(&en->gplan);
  if (en->set_open) df_st_set_close(&en->set);
  if (en->tok) df_tok_free(en->tok);
  df_pool_destroy(en->pool);
  df_kgpu_close(en->gpu);
  free(en->model_dir);
  free(en->model_id);
  free(en);
}

/* The --draft source. auto: the DSpark installed beside the model
 * (DIR/dspark, `setup --draft dspark`) with its blocks cut by confidence for
 * chat prompts and n-gram for raw text (gen.c chooses per generation, as
 * docs/PERFORMANCE.md's counts say: DSpark was trained on chat turns, and on
 * raw text n-gram accepts more per pass), else n-gram for every prompt;
 * dspark:DIR or a folder whose config says k3_dspark: DSpark. */
static int make_draft(df_engine *en, const char *v, df_err *e) {
  if (!strcmp(v, "auto")) {
    char *ds = df_path_join(en->model_dir, "dspark");
    if (df_dspark_is_dir(ds)) {
      en->draft = df_draft_new_dspark(en, ds, DF_DSPARK_AUTO_CUT, e);
      if (en->draft) en->draft_raw = df_draft_new_ngram();
    } else {
      en->draft = df_draft_new_ngram();
    }
    free(ds);
  } else if (!strcmp(v, "ngram")) {
    en->draft = df_draft_new_ngram();
  } else if (!strcmp(v, "self")) {
    en->draft = df_draft_new_self(en);
  } else if (!strncmp(v, "dspark:", 7)) {
    en->draft = df_draft_new_dspark(en, v + 7, 0, e);
  } else if (df_dspark_is_dir(v)) {
    en->draft = df_draft_new_dspark(en, v, 0, e);
  } else {
    en->draft = df_draft_new_model(en, v, e);
  }
  return en->draft ? 0 : -1;
}

/* --draft self: the model drafts for itself, from a second sequence. */
static int draft_self(const df_engine_opts *o) { return o->draft && !strcmp(o->draft, "self"); }

/* Speculation's rollback marks: none without a draft, else one, or one per
 * row (--draft-rollback rows). */
static int draft_marks(const df_engine_opts *o) {
  if (!o->draft || !strcmp(o->draft, "off")) return 0;
  return o->draft_rows ? (o->draft_max > 0 ? o->draft_max : 4) : 1;
}

/* Plans memory (plan/plan.h) and starts the spine stream for what the plan
 * leaves out of memory. */
static int plan_memory(df_engine *en, const df_engine_opts *o, long cache_mb, df_err *e) {
  df_model_plan_req rq = {.cache_req = o->store.cache_mb >= 0 ? (int64_t)o->store.cache_mb << 20 : -1,
                          .cache_default = (int64_t)cache_mb << 20, /* read only when no --cache-mb was given */
                          .ctx = o->ctx,
                          .max_rows = o->max_rows > 0 ? o->max_rows : 64,
                          .reuse_bytes = o->reuse_bytes,
                          .reuse_states = o->reuse_states,
                          .f64 = o->f64,
                          .draft = o->draft,
                          .draft_rows = DF_DRAFT_MAX + 1,
                          .draft_marks = draft_marks(o)};
  if (en->draft) df_draft_mem(en->draft, &rq.draft_fixed, &rq.draft_per_pos);
  if (o->mem_limit) {
    rq.mem_limit = o->mem_limit;
    snprintf(en->mem_src, sizeof en->mem_src, "--mem-limit");
  } else if (df_plan_mem_detect(&rq.mem_limit, en->mem_src, sizeof en->mem_src, e)) {
    return -1;
  }
  df_plan_in in;
  df_model_plan_in(en->model, &rq, &in);
  en->cache_cap = (uint64_t)in.cache_default < in.expert_total_bytes ? (uint64_t)in.cache_default
                                                                      : in.expert_total_bytes;
  if (df_plan_make(&en->plan, &in, e)) return df_err_prefix(e, "limit from %s: ", en->mem_src);
  return df_model_apply_plan(en->model, &en->plan, e);
}

/* The GPU's plan (plan.h's df_plan_gpu) once df_kgpu_open knows the
 * tier's size and the device's free memory; its cap on the kept matrices
 * goes to the tier. */
typedef struct gpu_plan_ctx {
  df_engine *en;
  int max_rows;
  uint64_t state_bytes; /* df_plan_gpu_in's */
} gpu_plan_ctx;

static uint64_t plan_gpu(void *ud, uint64_t tier_bytes, uint64_t free_bytes) {
  gpu_plan_ctx *x = ud;
  df_engine *en = x->en;
  const df_config *c = &en->cfg;
  int nu = c->n_layers + 1;
  uint64_t *ub = df_xcalloc((size_t)nu, sizeof *ub), *ul = df_xcalloc((size_t)nu, sizeof *ul);
  df_plan_gpu_units(c, en->spine == DF_SPINE_INT8, ub, ul);
  df_expert_layout lay;
  df_expert_layout_of(c, &lay);
  df_plan_gpu_in in = {.cfg = c, .nunits = nu, .unit_bytes = ub, .unit_largest = ul,
                       .expert_record_bytes = lay.total,
                       .expert_total_bytes = lay.total * (uint64_t)c->n_experts *
                                             (uint64_t)(c->n_layers - c->first_k_dense),
                       .budget = tier_bytes,
                       .outside = free_bytes > tier_bytes ? free_bytes - tier_bytes : 0,
                       .max_rows = x->max_rows, .state_bytes = x->state_bytes};
  df_plan_gpu_make(&en->gplan, &in);
  en->gplan_made = 1;
  free(ub);
  free(ul);
  return en->gplan.keep_cap;
}

/* --device cuda: the products of every pass (the model's and a draft's,
 * which share en->kc) on the GPU. fp32 only: --precision f64 is the CPU's
 * scalar float64 reference, with no GPU counterpart. */
static int open_device(df_engine *en, const df_engine_opts *o, df_err *e) {
  snprintf(en->device, sizeof en->device, "cpu");
  int dev = o->device;
  char err[256];
  if (dev == DF_DEVICE_UNSET) {
    const char *env = getenv("DF_DEVICE");
    dev = -1;
    if (env && *env && df_kern_device_parse(env, &dev, err, sizeof err))
      return df_err_set(e, "DF_DEVICE=%s: %s", env, err);
    if (o->f64) dev = -1;
  }
  if (dev < 0) return 0;
  if (o->f64)
    return df_err_set(e, "--device cuda:%d with --precision f64: the float64 path runs only on "
                         "the CPU's scalar kernels (drop one of the two)", dev);
  /* the state of one sequence at the planned context (and --draft self's
   * second one), the marks; none kept there with --gpu-state copy */
  gpu_plan_ctx px = {en, o->max_rows > 0 ? o->max_rows : 64 /* as plan_memory's */,
                     o->gpu_state_copy ? 0
                                       : df_plan_gpu_state_bytes(&en->cfg, en->plan.ctx,
                                                                 draft_marks(o), draft_self(o))};
  en->gpu = df_kgpu_open(dev, o->gpu_mem, plan_gpu, &px, err, sizeof err);
  if (!en->gpu) return df_err_set(e, "--device cuda:%d: %s", dev, err);
  en->kc.gpu = en->gpu;
  if (o->gpu_state_copy) df_kgpu_keep_state(en->gpu, 0);
  snprintf(en->device, sizeof en->device, "cuda:%d", dev);
  /* records go to the GPU straight from the store's buffers */
  df_store_on_buffers(en->store, df_kgpu_pin, df_kgpu_unpin, en->gpu);
  return 0;
}

int df_engine_open(df_engine **out, const df_engine_opts *o, df_err *e) {
  if (!o->model_dir) return df_err_set(e, "no model directory given (--model DIR)");
  df_engine *en = df_xcalloc(1, sizeof *en);
  en->model_dir = df_xstrdup(o->model_dir);
  {
    size_t n = strlen(en->model_dir);
    while (n > 1 && en->model_dir[n - 1] == '/') en->model_dir[--n] = 0;
    const char *b = strrchr(en->model_dir, '/');
    en->model_id = df_xstrdup(b ? b + 1 : en->model_dir);
  }
  en->spine = o->spine;
  int rc = df_config_load_dir(&en->cfg, en->model_dir, e);
  if (rc) goto fail;
  char *tkp = df_path_join(en->model_dir, "tiktoken.model");
  int have_tok = df_file_exists(tkp);
  free(tkp);
  if (have_tok) {
    if (df_tok_load(&en->tok, en->model_dir, e)) goto fail;
  } else {
    df_log_debug("%s: no tiktoken.model; only token ids can be used", en->model_dir);
  }
  if (df_st_set_open(&en->set, en->model_dir, e)) goto fail;
  en->set_open = 1;
  if (df_model_open_k3(&en->model, &en->set, &en->cfg, o->spine == DF_SPINE_INT8, en->model_dir,
                       o->spine_dir, o->f64 ? 64 : 32, e))
    goto fail;
  df_store_opts so = o->store;
  so.model_dir = en->model_dir;
  /* the budget resolved once (the store's default applied here); the plan
   * only ever lowers a default one (when memory is short) */
  so.cache_mb = df_store_cache_mb_of(&o->store);
  /* a draft model loads before the plan, which budgets its weights and
   * cache; the self draft needs a session, so it comes after (the plan
   * counts its second state by name) */
  int self = draft_self(o);
  if (o->draft && strcmp(o->draft, "off") && !self && make_draft(en, o->draft, e)) goto fail;
  if (plan_memory(en, o, so.cache_mb, e)) goto fail;
  if (!en->plan.cache_given && en->plan.cache_bytes < en->cache_cap)
    so.cache_mb = (long)(en->plan.cache_bytes >> 20);
  if (df_store_open(&en->store, &en->set, &en->cfg, &so, e)) goto fail;
  if (df_model_stream_start(en->model, en->store, e)) goto fail;
  en->pool = df_pool_create(o->threads);
  en->kc.k = df_kern_select(o->kernels_scalar);
  en->kc.k64 = df_kern_scalar64();
  en->kc.pool = en->pool;
  if (open_device(en, o, e)) goto fail;
  df_model_run run = {.kc = &en->kc, .store = en->store,
                      .gate_input = o->gate_input == DF_GATE_INPUT_X_SHARED ? DF_MODEL_GATE_X_SHARED
                                                                           : DF_MODEL_GATE_X};
  df_model_bind(en->model, &run);
  en->draft_max = o->draft_max > 0 ? o->draft_max : 4;
  en->draft_rows = o->draft_rows;
  en->chat_open = en->tok ? df_tok_special_id(en->tok, "<|open|>") : -1;
  if (self && make_draft(en, o->draft, e)) goto fail;
  en->draft_auto = o->draft && !strcmp(o->draft, "auto");
  *out = en;
  return 0;
fail:
  df_engine_close(en);
  return -1;
}

const df_config *df_engine_config(const df_engine *en) { return &en->cfg; }
const df_tok *df_engine_tok(const df_engine *en) { return en->tok; }
const char *df_engine_model_id(const df_engine *en) { return en->model_id; }
df_spine_kind df_engine_spine(const df_engine *en) { return en->spine; }
const char *df_engine_kernels(const df_engine *en) {
  return df_model_precision(en->model) == 64 ? en->kc.k64->name : en->kc.k->name;
}
int df_engine_threads(const df_engine *en) { return df_pool_size(en->pool); }
const char *df_engine_device(const df_engine *en) { return en->device; }

static json_t *device_json(df_engine *en) {
  if (!en->gpu) return json_null();
  df_kgpu_stats g;
  df_kgpu_stats_get(en->gpu, &g);
  json_t *o = json_object();
  json_object_set_new(o, "device", json_string(en->device));
  json_object_set_new(o, "name", json_string(g.device));
  static const struct {
    const char *key;
    size_t off;
  } u64[] = {{"mem_total", offsetof(df_kgpu_stats, mem_total)},
             {"mem_free", offsetof(df_kgpu_stats, mem_free)},
             {"tier_cap", offsetof(df_kgpu_stats, tier_cap)},
             {"tier_bytes", offsetof(df_kgpu_stats, tier_bytes)},
             {"tier_keep_bytes", offsetof(df_kgpu_stats, tier_keep_bytes)},
             {"tier_mapped", offsetof(df_kgpu_stats, tier_mapped)},
             {"tier_granule", offsetof(df_kgpu_stats, tier_granule)},
             {"tier_hits", offsetof(df_kgpu_stats, hits)},
             {"tier_misses", offsetof(df_kgpu_stats, misses)},
             {"tier_evictions", offsetof(df_kgpu_stats, evictions)},
             {"tier_refused", offsetof(df_kgpu_stats, refused)},
             {"buffer_trims", offsetof(df_kgpu_stats, buffer_trims)},
             {"products", offsetof(df_kgpu_stats, products)},
             {"fallbacks", offsetof(df_kgpu_stats, fallbacks)},
             {"seq_calls", offsetof(df_kgpu_stats, seq_calls)},
             {"attn_calls", offsetof(df_kgpu_stats, attn_calls)},
             {"pre_calls", offsetof(df_kgpu_stats, pre_calls)},
             {"h2d_bytes", offsetof(df_kgpu_stats, h2d_bytes)},
             {"weight_h2d_bytes", offsetof(df_kgpu_stats, weight_h2d_bytes)},
             {"d2h_bytes", offsetof(df_kgpu_stats, d2h_bytes)},
             {"seq_bytes", offsetof(df_kgpu_stats, seq_bytes)},
             {"seq_pulls", offsetof(df_kgpu_stats, seq_pulls)},
             {"seq_copies", offsetof(df_kgpu_stats, seq_copies)},
             {"pinned_bytes", offsetof(df_kgpu_stats, pinned_bytes)},
             {"pin_failures", offsetof(df_kgpu_stats, pin_failures)}};
  for (size_t i = 0; i < sizeof u64 / sizeof u64[0]; i++) {
    uint64_t v;
    memcpy(&v, (const char *)&g + u64[i].off, sizeof v);
    json_object_set_new(o, u64[i].key, json_integer((json_int_t)v));
  }
  json_object_set_new(o, "tier_entries", json_integer(g.tier_entries));
  json_object_set_new(o, "seq_entries", json_integer(g.seq_entries));
  json_object_set_new(o, "weight_h2d_s", json_real(g.weight_h2d_s));
  json_object_set_new(o, "compute_s", json_real(g.compute_s));
  json_object_set_new(o, "last_error", g.last_error[0] ? json_string(g.last_error) : json_null());
  return o;
}

char *df_engine_device_json(df_engine *en) {
  if (!en->gpu) return NULL;
  json_t *o = device_json(en);
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return s;
}

char *df_engine_device_text(df_engine *en) {
  if (!en->gpu) return df_xstrdup("");
  df_kgpu_stats g;
  df_kgpu_stats_get(en->gpu, &g);
  char s[768];
  snprintf(s, sizeof s,
                  "device   %s %s: %" PRIu64 " products (%" PRIu64 " on the CPU), %" PRIu64
                  " KDA recurrences, %" PRIu64 " MLA attentions, %" PRIu64
                  " layer inputs, %.3f s; %.1f MB in, %.1f MB out\n"
                  "gpu tier %.1f of %.1f MB, %d matrices, %" PRIu64 " hits, %" PRIu64
                  " misses, %" PRIu64 " evicted, %" PRIu64 " refused, %" PRIu64
                  " buffer trims; weights in %.1f MB, %.3f s\n"
                  "gpu state %.1f MB in %d layers' entries, %" PRIu64 " copied back, %" PRIu64
                  " copied there (marks)\n",
                  en->device, g.device, g.products, g.fallbacks, g.seq_calls, g.attn_calls, g.pre_calls,
                  g.compute_s,
                  g.h2d_bytes / 1e6,
                  g.d2h_bytes / 1e6, g.tier_bytes / 1e6, g.tier_cap / 1e6, g.tier_entries, g.hits,
                  g.misses, g.evictions, g.refused, g.buffer_trims, g.weight_h2d_bytes / 1e6,
                  g.weight_h2d_s,
                  g.seq_bytes / 1e6, g.seq_entries, g.seq_pulls, g.seq_copies);
  return df_xstrdup(s);
}
/* One phase's parts on one line, those that ran. */
static void compute_line(df_sbuf *b, const char *label, const df_model_compute *cp, const double *s,
                         const uint64_t *n, double wait_s) {
  int any = 0;
  char t[96];
  for (int i = 0; i < cp->nparts; i++) {
    if (!n[i]) continue;
    snprintf(t, sizeof t, "%s%s %.3g", any ? ", " : label, cp->names[i], 1e3 * s[i] / (double)n[i]);
    df_sbuf_addstr(b, t);
    any = 1;
  }
  if (!any) return;
  snprintf(t, sizeof t, "; store wait %.3f s\n", wait_s);
  df_sbuf_addstr(b, t);
}

char *df_engine_compute_text(df_engine *en) {
  df_model_compute cp;
  df_model_compute_get(en->model, &cp);
  df_sbuf b = {0};
  compute_line(&b, "compute  decode, ms per layer-token: ", &cp, cp.s, cp.n, cp.store_wait_s);
  compute_line(&b, "compute  prefill, ms per layer-token: ", &cp, cp.pre_s, cp.pre_n,
               cp.pre_store_wait_s);
  return b.p ? b.p : df_xstrdup("");
}

df_store *df_engine_store(df_engine *en) { return en->store; }
uint64_t df_engine_expert_bytes(const df_engine *en) { return df_store_bytes_read(en->store); }
const char *df_engine_draft(const df_engine *en, int *draft_max) {
  if (draft_max) *draft_max = en->draft_max;
  return en->draft ? (en->draft_auto ? "auto" : df_draft_name(en->draft)) : "off";
}

char *df_engine_store_text(df_engine *en) { return df_store_stats_text(en->store); }
char *df_engine_store_describe(df_engine *en) { return df_store_describe(en->store); }

/* ------------------------------------------------------------- sessions */

df_session *df_session_new(df_engine *en) {
  df_session *s = df_xcalloc(1, sizeof *s);
  s->en = en;
  s->st = df_mstate_new(en->model);
  s->logits = df_xmalloc(sizeof(float) * (size_t)en->cfg.vocab);
  return s;
}

void df_session_free(df_session *s) {
  if (!s) return;
  df_mstate_free(s->st);
  free(s->logits);
  df_sampler_free(s->sampler);
  free(s->masked);
  free(s);
}

void df_session_reset(df_session *s) {
  df_mstate_reset(s->st);
  s->have_logits = 0;
}

df_engine *df_session_engine(const df_session *s) { return s->en; }

int df_session_pos(const df_session *s) { return df_mstate_pos(s->st); }

const float *df_session_logits(const df_session *s) { return s->logits; }

struct df_session_snap {
  df_mstate *st;
  float *logits;
  int have_logits;
  size_t bytes;
};

df_session_snap *df_session_snapshot(const df_session *s) {
  df_session_snap *p = df_xcalloc(1, sizeof *p);
  size_t V = (size_t)s->en->cfg.vocab;
  p->st = df_mstate_clone(s->st);
  p->have_logits = s->have_logits;
  if (s->have_logits) {
    p->logits = df_xmalloc(sizeof(float) * V);
    memcpy(p->logits, s->logits, sizeof(float) * V);
  }
  p->bytes = df_mstate_bytes(p->st) + (p->logits ? sizeof(float) * V : 0);
  return p;
}

void df_session_restore(df_session *s, const df_session_snap *p) {
  df_mstate_copy(s->st, p->st);
  s->have_logits = p->have_logits;
  if (p->have_logits)
    memcpy(s->logits, p->logits, sizeof(float) * (size_t)s->en->cfg.vocab);
}

void df_session_snap_free(df_session_snap *p) {
  if (!p) return;
  df_mstate_free(p->st);
  free(p->logits);
  free(p);
}

size_t df_session_snap_bytes(const df_session_snap *p) { return p ? p->bytes : 0; }

size_t df_session_state_bytes(const df_session *s) {
  return df_mstate_bytes(s->st) + sizeof(float) * (size_t)s->en->cfg.vocab;
}

int df_session_has_logits(const df_session *s) { return s->have_logits; }

void df_session_set_layer_hook(df_session *s, df_layer_hook fn, void *ud) {
  df_mstate_set_tap(s->st, fn, ud);
}

void df_session_set_route_hook(df_session *s, df_route_hook fn, void *ud) {
  df_mstate_set_route(s->st, fn, ud);
}

int df_session_run(df_session *s, const int *ids, int n, int want_last, float *all_logits,
                   df_err *e) {
  int rc = df_model_forward(s->en->model, s->st, ids, n, want_last ? s->logits : NULL, all_logits, e);
  s->have_logits = rc == 0 && want_last;
  return rc;
}

int df_session_forward(df_session *s, const int *ids, int n, float *logits, float *all_logits,
                       df_err *e) {
  if (df_session_run(s, ids, n, 1, all_logits, e)) return -1; /* no cancel hook is set here */
  if (logits) memcpy(logits, s->logits, sizeof(float) * (size_t)s->en->cfg.vocab);
  return 0;
}

char *df_engine_plan_text(const df_engine *en) {
  char *t = df_plan_text(&en->plan);
  df_model_stream_stats ss;
  df_model_stream_settle(en->model); /* end of run: every read issued has landed */
  df_model_stream_stats_get(en->model, &ss);
  size_t n = strlen(t) + 512;
  char *o = df_xmalloc(n);
  int k = snprintf(o, n, "%s", t);
  if (ss.units)
    snprintf(o + k, n - (size_t)k,
             "spine    stream: %d units from %s on %d drive%s, %.1f MB read in %" PRIu64
             " reads (%s%s%s), waited %.3f s, wasted %.1f MB; memory from %s\n",
             ss.units,
             !strcmp(ss.source, "pack") ? "the pack's spine section"
             : !strcmp(ss.source, "shards") ? "the shards" : "the shards and the int8 spine",
             ss.drives, ss.drives == 1 ? "" : "s", ss.bytes / 1e6, ss.reads, ss.io,
             ss.direct ? ", O_DIRECT" : "",
             ss.registered ? ", registered buffers" : "", ss.wait_s, ss.wasted / 1e6, en->mem_src);
  else
    snprintf(o + k, n - (size_t)k, "spine    all resident; memory from %s\n", en->mem_src);
  free(t);
  if (en->gpu && en->gplan_made) {
    char *g = df_plan_gpu_text(&en->gplan);
    o = df_xrealloc(o, strlen(o) + strlen(g) + 1);
    strcat(o, g);
    free(g);
  }
  return o;
}

char *df_engine_plan_json(const df_engine *en) {
  char *t = df_plan_json(&en->plan);
  json_t *o = json_loads(t, 0, NULL);
  free(t);
  if (!o) o = json_object();
  json_object_set_new(o, "memory_source", json_string(en->mem_src));
  df_model_stream_stats ss;
  df_model_stream_settle(en->model); /* end of run: every read issued has landed */
  df_model_stream_stats_get(en->model, &ss);
  json_t *st = json_object();
  json_object_set_new(st, "units", json_integer(ss.units));
  json_object_set_new(st, "bytes_read", json_integer((json_int_t)ss.bytes));
  json_object_set_new(st, "weight_bytes", json_integer((json_int_t)ss.weight_bytes));
  json_object_set_new(st, "reads", json_integer((json_int_t)ss.reads));
  json_object_set_new(st, "passes", json_integer((json_int_t)ss.passes));
  json_object_set_new(st, "wasted_bytes", json_integer((json_int_t)ss.wasted));
  json_object_set_new(st, "wait_s", json_real(ss.wait_s));
  json_object_set_new(st, "o_direct", json_boolean(ss.direct));
  json_object_set_new(st, "io", ss.io ? json_string(ss.io) : json_null());
  json_object_set_new(st, "source", ss.units ? json_string(ss.source) : json_null());
  json_object_set_new(st, "drives", json_integer(ss.units ? ss.drives : 0));
  json_object_set_new(o, "spine_stream", st);
  if (en->gpu && en->gplan_made) {
    char *g = df_plan_gpu_json(&en->gplan);
    json_t *gv = json_loads(g, 0, NULL);
    free(g);
    if (gv) json_object_set_new(o, "gpu", gv);
  }
  char *r = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return r;
}

int df_engine_spine_reads(const df_engine *en,
                          void (*fn)(void *ud, const char *path, int drive, uint64_t off,
                                     uint32_t len),
                          void *ud) {
  return df_model_stream_reads(en->model, fn, ud);
}

const char *df_engine_spine_source(const df_engine *en, int *drives) {
  df_model_stream_stats ss;
  df_model_stream_stats_get(en->model, &ss);
  if (drives) *drives = ss.units ? ss.drives : 0;
  return ss.units ? ss.source : NULL;
}

uint64_t df_engine_spine_stream_bytes(const df_engine *en, double *wait_s) {
  df_model_stream_stats ss;
  df_model_stream_stats_get(en->model, &ss);
  if (wait_s) *wait_s = ss.wait_s;
  return ss.bytes;
}

/* One phase's compute by part: seconds, count (decode: layer-passes;
 * prefill: layer-rows) and milliseconds each. */
static json_t *compute_json(const df_model_compute *cp, const double *s, const uint64_t *n,
                            double wait_s) {
  json_t *cj = json_object();
  for (int i = 0; i < cp->nparts; i++) {
    json_t *k = json_object();
    json_object_set_new(k, "s", json_real(s[i]));
    json_object_set_new(k, "n", json_integer((json_int_t)n[i]));
    json_object_set_new(k, "ms_each", json_real(n[i] ? 1e3 * s[i] / (double)n[i] : 0));
    json_object_set_new(cj, cp->names[i], k);
  }
  json_object_set_new(cj, "store_wait_s", json_real(wait_s));
  return cj;
}

char *df_engine_stats_json(df_engine *en) {
  json_t *o = json_object();
  json_object_set_new(o, "model", json_string(en->model_id));
  json_object_set_new(o, "spine", json_string(en->spine == DF_SPINE_INT8 ? "int8" : "bf16"));
  json_object_set_new(o, "kernels", json_string(en->kc.k->name));
  json_object_set_new(o, "threads", json_integer(df_pool_size(en->pool)));
  json_object_set_new(o, "device", device_json(en));
  json_object_set_new(o, "spine_bytes_per_token",
                      json_integer((json_int_t)df_model_spine_bytes_per_token(en->model)));
  json_object_set_new(o, "expert_bytes_read",
                      json_integer((json_int_t)df_store_bytes_read(en->store)));
  df_model_compute cp;
  df_model_compute_get(en->model, &cp);
  json_object_set_new(o, "decode_compute", compute_json(&cp, cp.s, cp.n, cp.store_wait_s));
  json_object_set_new(o, "prefill_compute",
                      compute_json(&cp, cp.pre_s, cp.pre_n, cp.pre_store_wait_s));
  char *pj = df_engine_plan_json(en);
  json_t *pv = pj ? json_loads(pj, 0, NULL) : NULL;
  free(pj);
  json_object_set_new(o, "plan", pv ? pv : json_null());
  char *sj = df_store_stats_json(en->store);
  json_t *sv = sj ? json_loads(sj, 0, NULL) : NULL;
  json_object_set_new(o, "store", sv ? sv : json_string(sj ? sj : ""));
  free(sj);
  char *txt = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return txt;
}

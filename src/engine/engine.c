/* The engine: owns the config, tokenizer, mapped shards, spine, expert store,
 * thread pool and kernel table; sessions own per-sequence state and the last
 * logits. Generation is prefill in chunks, then one position at a time. */
#include "engine/engine.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/pool.h"
#include "base/util.h"
#include "format/safetensors.h"
#include "kernels/kernels.h"
#include "model/k3.h"
#include "store/store.h"

struct df_engine {
  char *model_dir, *model_id;
  df_spine_kind spine;
  df_config cfg;
  df_tok *tok;
  df_st_set set;
  int set_open;
  df_k3 *model;
  df_store *store;
  df_pool *pool;
  df_kctx kc;
  df_k3_run run;
  df_plan plan;
  uint64_t cache_cap; /* min(store default cache, every expert) */
  char mem_src[128];
};

struct df_session {
  df_engine *en;
  df_k3_state *st;
  float *logits; /* last position's logits */
  int have_logits;
  df_sampler *sampler;
  float *masked; /* df_gen_opts.mask's copy of the logits */
};

void df_engine_opts_default(df_engine_opts *o) {
  memset(o, 0, sizeof *o);
  o->threads = 0;
  o->spine = DF_SPINE_BF16;
  o->store.cache_mb = -1;
}

void df_engine_close(df_engine *en) {
  if (!en) return;
  df_k3_free(en->model); /* first: its spine stream reads through the store */
  df_store_close(en->store);
  df_plan_free(&en->plan);
  if (en->set_open) df_st_set_close(&en->set);
  if (en->tok) df_tok_free(en->tok);
  df_pool_destroy(en->pool);
  free(en->model_dir);
  free(en->model_id);
  free(en);
}

/* Plans memory (plan/plan.h) and starts the spine stream for what the plan
 * leaves out of memory. */
static int plan_memory(df_engine *en, const df_engine_opts *o, df_err *e) {
  df_plan_in in;
  df_k3_plan_input(en->model, &in);
  if (o->mem_limit) {
    in.mem_limit = o->mem_limit;
    snprintf(en->mem_src, sizeof en->mem_src, "--mem-limit");
  } else if (df_plan_mem_detect(&in.mem_limit, en->mem_src, sizeof en->mem_src, e)) {
    return -1;
  }
  df_expert_layout lay;
  df_expert_layout_of(&en->cfg, &lay);
  in.expert_record_bytes = DF_IO_ROUND_UP(lay.total);
  in.expert_total_bytes = in.expert_record_bytes * (uint64_t)en->cfg.n_experts *
                          (uint64_t)(en->cfg.n_layers - en->cfg.first_k_dense);
  in.cache_req = o->store.cache_mb >= 0 ? (int64_t)o->store.cache_mb << 20 : -1;
  in.cache_default = (int64_t)df_store_default_cache_mb() << 20;
  en->cache_cap = (uint64_t)in.cache_default < in.expert_total_bytes ? (uint64_t)in.cache_default
                                                                      : in.expert_total_bytes;
  in.ctx_req = o->ctx;
  in.max_rows = o->max_rows > 0 ? o->max_rows : 64;
  in.reuse_bytes = o->reuse_bytes;
  in.reuse_states = o->reuse_states;
  if (df_plan_make(&en->plan, &in, e)) return df_err_prefix(e, "limit from %s: ", en->mem_src);
  df_k3_stream_opts so = {.io = o->store.io == DF_STORE_IO_PREAD ? "pread" : "uring",
                          .emulate_drives = o->store.emulate_drives,
                          .trace_path = o->store.trace_path};
  if (df_k3_apply_plan(en->model, &en->plan, &so, e)) return -1;
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
  if (df_k3_load_from(&en->model, &en->set, &en->cfg, o->spine == DF_SPINE_INT8, en->model_dir,
                      o->spine_dir, e))
    goto fail;
  if (plan_memory(en, o, e)) goto fail;
  df_store_opts so = o->store;
  so.model_dir = en->model_dir;
  /* the plan only ever lowers the store's default cache (when memory is short) */
  if (!en->plan.cache_given && en->plan.cache_bytes < en->cache_cap)
    so.cache_mb = (long)(en->plan.cache_bytes >> 20);
  if (df_store_open(&en->store, &en->set, &en->cfg, &so, e)) goto fail;
  if (df_k3_stream_start(en->model, en->store, e)) goto fail;
  en->pool = df_pool_create(o->threads);
  en->kc.k = df_kern_select(o->kernels_scalar);
  en->kc.pool = en->pool;
  en->run.m = en->model;
  en->run.kc = &en->kc;
  en->run.store = en->store;
  en->run.gate_input = o->gate_input == DF_GATE_INPUT_X_SHARED ? DF_GATE_FROM_X_SHARED : DF_GATE_FROM_X;
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
const char *df_engine_kernels(const df_engine *en) { return en->kc.k->name; }
int df_engine_threads(const df_engine *en) { return df_pool_size(en->pool); }
df_store *df_engine_store(df_engine *en) { return en->store; }
uint64_t df_engine_expert_bytes(const df_engine *en) { return df_store_bytes_read(en->store); }
char *df_engine_store_text(df_engine *en) { return df_store_stats_text(en->store); }
char *df_engine_store_describe(df_engine *en) { return df_store_describe(en->store); }

/* ------------------------------------------------------------- sessions */

df_session *df_session_new(df_engine *en) {
  df_session *s = df_xcalloc(1, sizeof *s);
  s->en = en;
  s->st = df_k3_state_new(en->model);
  s->logits = df_xmalloc(sizeof(float) * (size_t)en->cfg.vocab);
  return s;
}

void df_session_free(df_session *s) {
  if (!s) return;
  df_k3_state_free(s->st);
  free(s->logits);
  df_sampler_free(s->sampler);
  free(s->masked);
  free(s);
}

void df_session_reset(df_session *s) {
  df_k3_state_reset(s->st);
  s->have_logits = 0;
}

int df_session_pos(const df_session *s) { return df_k3_state_pos(s->st); }

const float *df_session_logits(const df_session *s) { return s->logits; }

struct df_session_snap {
  df_k3_state *st;
  float *logits;
  int have_logits;
  size_t bytes;
};

df_session_snap *df_session_snapshot(const df_session *s) {
  df_session_snap *p = df_xcalloc(1, sizeof *p);
  size_t V = (size_t)s->en->cfg.vocab;
  p->st = df_k3_state_clone(s->st);
  p->have_logits = s->have_logits;
  if (s->have_logits) {
    p->logits = df_xmalloc(sizeof(float) * V);
    memcpy(p->logits, s->logits, sizeof(float) * V);
  }
  p->bytes = df_k3_state_bytes(p->st) + (p->logits ? sizeof(float) * V : 0);
  return p;
}

void df_session_restore(df_session *s, const df_session_snap *p) {
  df_k3_state_copy(s->st, p->st);
  s->have_logits = p->have_logits;
  if (p->have_logits)
    memcpy(s->logits, p->logits, sizeof(float) * (size_t)s->en->cfg.vocab);
}

void df_session_snap_free(df_session_snap *p) {
  if (!p) return;
  df_k3_state_free(p->st);
  free(p->logits);
  free(p);
}

size_t df_session_snap_bytes(const df_session_snap *p) { return p ? p->bytes : 0; }

size_t df_session_state_bytes(const df_session *s) {
  return df_k3_state_bytes(s->st) + sizeof(float) * (size_t)s->en->cfg.vocab;
}

int df_session_has_logits(const df_session *s) { return s->have_logits; }

void df_session_set_layer_hook(df_session *s, df_layer_hook fn, void *ud) {
  df_k3_state_set_hook(s->st, fn, ud);
}

/* want_last = 0 skips the lm_head (a prefill chunk that is not the last).
 * Returns 0, -1 (error) or DF_K3_CANCELLED. */
static int forward(df_session *s, const int *ids, int n, int want_last, float *all_logits,
                   df_err *e) {
  int rc = df_k3_forward(&s->en->run, s->st, ids, n, want_last ? s->logits : NULL, all_logits, e);
  s->have_logits = rc == 0 && want_last;
  return rc;
}

int df_session_forward(df_session *s, const int *ids, int n, float *logits, float *all_logits,
                       df_err *e) {
  if (forward(s, ids, n, 1, all_logits, e)) return -1; /* no cancel hook is set here */
  if (logits) memcpy(logits, s->logits, sizeof(float) * (size_t)s->en->cfg.vocab);
  return 0;
}

/* ----------------------------------------------------------- generation */

void df_gen_opts_default(df_gen_opts *o) {
  memset(o, 0, sizeof *o);
  o->max_new = 256;
  o->prefill_chunk = 64;
  o->temperature = 0.0f;
  o->top_p = 1.0f;
}

int df_generate(df_session *s, const int *prompt, int nprompt, const df_gen_opts *o, int **out,
                int *nout, df_gen_stats *st, df_err *e) {
  df_engine *en = s->en;
  int V = en->cfg.vocab;
  df_gen_stats z = {0};
  if (!st) st = &z;
  memset(st, 0, sizeof *st);
  st->n_prompt = nprompt;
  st->spine_bytes_per_token = df_k3_spine_bytes_per_token(en->model);
  *out = NULL;
  *nout = 0;
  uint64_t bytes0 = df_store_bytes_read(en->store);
  int chunk = o->prefill_chunk > 0 ? o->prefill_chunk : (nprompt > 0 ? nprompt : 1);
  double t0 = df_now();
  df_store_trace_mark(en->store, "gen", nprompt);
  df_k3_state_set_cancel(s->st, o->cancel, o->ud);
  int rc = 0;
  for (int i = 0; i < nprompt && !rc; i += chunk) {
    int n = nprompt - i < chunk ? nprompt - i : chunk;
    if (o->cancel && o->cancel(o->ud)) rc = DF_K3_CANCELLED;
    else rc = forward(s, prompt + i, n, i + n == nprompt, NULL, e);
    if (!rc) {
      st->n_prefilled += n;
      if (o->on_prefill) o->on_prefill(o->ud, st->n_prefilled);
    }
  }
  st->prefill_s = df_now() - t0;
  if (rc) {
    df_k3_state_set_cancel(s->st, NULL, NULL);
    s->have_logits = 0;
    if (rc < 0) return -1;
    st->finish = DF_FINISH_CANCEL;
    st->expert_bytes_read = df_store_bytes_read(en->store) - bytes0;
    return 0;
  }
  if (!s->have_logits) return df_err_set(e, "generate: empty prompt and no earlier context");
  int cap = o->max_new > 0 ? o->max_new : 1;
  int *ids = df_xmalloc(sizeof(int) * (size_t)cap);
  uint64_t rng = o->seed;
  df_sample_opts so;
  if (o->sampling) {
    so = *o->sampling;
  } else {
    df_sample_opts_default(&so);
    so.temperature = o->temperature;
    so.top_p = o->top_p;
  }
  if (!s->sampler) s->sampler = df_sampler_new(V);
  /* the context the penalties look at: the prompt, then each new id */
  int *ctx = NULL, nctx = 0;
  if (df_sample_has_penalties(&so)) {
    int nh = o->history && o->nhistory > 0 ? o->nhistory : 0;
    ctx = df_xmalloc(sizeof(int) * ((size_t)nh + (size_t)nprompt + (size_t)cap));
    if (nh) memcpy(ctx, o->history, sizeof(int) * (size_t)nh);
    if (nprompt) memcpy(ctx + nh, prompt, sizeof(int) * (size_t)nprompt);
    nctx = nh + nprompt;
  }
  st->finish = DF_FINISH_LENGTH;
  double t1 = df_now();
  int n = 0;
  while (n < o->max_new) {
    const float *lg = s->logits;
    if (o->mask) {
      if (!s->masked) s->masked = df_xmalloc(sizeof(float) * (size_t)V);
      memcpy(s->masked, s->logits, sizeof(float) * (size_t)V);
      o->mask(o->ud, s->masked);
      lg = s->masked;
    }
    int id = df_sample_pick(s->sampler, lg, &so, ctx, nctx, n, &rng);
    ids[n++] = id;
    df_store_trace_mark(en->store, "token", n);
    if (ctx) ctx[nctx++] = id;
    if (o->on_token && o->on_token(o->ud, id)) {
      st->finish = DF_FINISH_CANCEL;
      break;
    }
    int stop = 0;
    for (int i = 0; i < o->nstop; i++) stop |= o->stop_ids[i] == id;
    if (stop) {
      st->finish = DF_FINISH_STOP;
      break;
    }
    if (n == o->max_new) break;
    /* a full context ends the reply like max_new does, instead of failing
     * after tokens were already handed out */
    if (df_session_pos(s) >= df_k3_ctx_limit(en->model)) break;
    rc = forward(s, &id, 1, 1, NULL, e);
    if (rc == DF_K3_CANCELLED) {
      st->finish = DF_FINISH_CANCEL;
      break;
    }
    if (rc) {
      df_k3_state_set_cancel(s->st, NULL, NULL);
      free(ctx);
      free(ids);
      return -1;
    }
  }
  df_k3_state_set_cancel(s->st, NULL, NULL);
  free(ctx);
  st->decode_s = df_now() - t1;
  st->n_gen = n;
  st->expert_bytes_read = df_store_bytes_read(en->store) - bytes0;
  *out = ids;
  *nout = n;
  return 0;
}

char *df_engine_plan_text(const df_engine *en) {
  char *t = df_plan_text(&en->plan);
  df_k3_stream_stats ss;
  df_k3_stream_settle(en->model); /* end of run: every read issued has landed */
  df_k3_stream_stats_get(en->model, &ss);
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
  return o;
}

char *df_engine_plan_json(const df_engine *en) {
  char *t = df_plan_json(&en->plan);
  json_t *o = json_loads(t, 0, NULL);
  free(t);
  if (!o) o = json_object();
  json_object_set_new(o, "memory_source", json_string(en->mem_src));
  df_k3_stream_stats ss;
  df_k3_stream_settle(en->model); /* end of run: every read issued has landed */
  df_k3_stream_stats_get(en->model, &ss);
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
  char *r = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return r;
}

int df_engine_spine_reads(const df_engine *en,
                          void (*fn)(void *ud, const char *path, int drive, uint64_t off,
                                     uint32_t len),
                          void *ud) {
  return df_k3_stream_reads(en->model, fn, ud);
}

const char *df_engine_spine_source(const df_engine *en, int *drives) {
  df_k3_stream_stats ss;
  df_k3_stream_stats_get(en->model, &ss);
  if (drives) *drives = ss.units ? ss.drives : 0;
  return ss.units ? ss.source : NULL;
}

uint64_t df_engine_spine_stream_bytes(const df_engine *en, double *wait_s) {
  df_k3_stream_stats ss;
  df_k3_stream_stats_get(en->model, &ss);
  if (wait_s) *wait_s = ss.wait_s;
  return ss.bytes;
}

char *df_engine_stats_json(df_engine *en) {
  json_t *o = json_object();
  json_object_set_new(o, "model", json_string(en->model_id));
  json_object_set_new(o, "spine", json_string(en->spine == DF_SPINE_INT8 ? "int8" : "bf16"));
  json_object_set_new(o, "kernels", json_string(en->kc.k->name));
  json_object_set_new(o, "threads", json_integer(df_pool_size(en->pool)));
  json_object_set_new(o, "spine_bytes_per_token",
                      json_integer((json_int_t)df_k3_spine_bytes_per_token(en->model)));
  json_object_set_new(o, "expert_bytes_read",
                      json_integer((json_int_t)df_store_bytes_read(en->store)));
  df_k3_compute cp;
  df_k3_compute_get(en->model, &cp);
  json_t *cj = json_object();
  for (int i = 0; i < DF_K3_T_N; i++) {
    json_t *k = json_object();
    json_object_set_new(k, "s", json_real(cp.s[i]));
    json_object_set_new(k, "n", json_integer((json_int_t)cp.n[i]));
    json_object_set_new(k, "ms_each", json_real(cp.n[i] ? 1e3 * cp.s[i] / (double)cp.n[i] : 0));
    json_object_set_new(cj, df_k3_compute_names[i], k);
  }
  json_object_set_new(cj, "store_wait_s", json_real(cp.store_wait_s));
  json_object_set_new(o, "decode_compute", cj);
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

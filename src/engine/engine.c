/* The engine: owns the config, tokenizer, mapped shards, spine, expert store,
 * thread pool and kernel table; sessions own per-sequence state and the last
 * logits. Generation is prefill in chunks, then one position at a time. */
#include "engine/engine.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
};

struct df_session {
  df_engine *en;
  df_k3_state *st;
  float *logits; /* last position's logits */
  int have_logits;
  df_sampler *sampler;
};

void df_engine_opts_default(df_engine_opts *o) {
  memset(o, 0, sizeof *o);
  o->threads = 0;
  o->spine = DF_SPINE_BF16;
  o->cache_mb = -1;
}

void df_engine_close(df_engine *en) {
  if (!en) return;
  df_store_close(en->store);
  df_k3_free(en->model);
  if (en->set_open) df_st_set_close(&en->set);
  if (en->tok) df_tok_free(en->tok);
  df_pool_destroy(en->pool);
  free(en->model_dir);
  free(en->model_id);
  free(en);
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
  char *cfgp = df_path_join(en->model_dir, "config.json");
  int rc = df_config_load(&en->cfg, cfgp, e);
  free(cfgp);
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
  if (df_k3_load(&en->model, &en->set, &en->cfg, o->spine == DF_SPINE_INT8, en->model_dir, e))
    goto fail;
  df_store_opts so = {.model_dir = en->model_dir,
                      .manifest = o->store_manifest,
                      .no_pack = o->no_pack,
                      .cache_mb = o->cache_mb,
                      .io = o->io,
                      .prefetch = o->prefetch,
                      .emulate_drives = o->emulate_drives,
                      .trace_path = o->trace_path,
                      .pin_mb = o->pin_mb,
                      .queue_depth = o->queue_depth,
                      .heat_path = o->heat_path,
                      .split_reads = o->split_reads};
  if (df_store_open(&en->store, &en->set, &en->cfg, &so, e)) goto fail;
  en->pool = df_pool_create(o->threads);
  en->kc.k = df_kern_select(o->kernels_scalar);
  en->kc.pool = en->pool;
  en->run.m = en->model;
  en->run.kc = &en->kc;
  en->run.store = en->store;
  en->run.gate_input = o->gate_ahead_shared ? DF_GATE_FROM_X_SHARED : DF_GATE_FROM_X;
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
  free(s);
}

void df_session_reset(df_session *s) {
  df_k3_state_reset(s->st);
  s->have_logits = 0;
}

int df_session_pos(const df_session *s) { return df_k3_state_pos(s->st); }

const float *df_session_logits(const df_session *s) { return s->logits; }

void df_session_set_layer_hook(df_session *s, df_layer_hook fn, void *ud) {
  df_k3_state_set_hook(s->st, fn, ud);
}

/* want_last = 0 skips the lm_head (a prefill chunk that is not the last).
 * Returns 0, -1 (error) or DF_K3_CANCELLED. */
static int forward(df_session *s, const int *ids, int n, int want_last, float *all_logits,
                   df_err *e) {
  df_store_set_rows(s->en->store, n);
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
  st->spine_bytes_per_token = en->model->spine_bytes_per_token;
  *out = NULL;
  *nout = 0;
  uint64_t bytes0 = df_store_bytes_read(en->store);
  int chunk = o->prefill_chunk > 0 ? o->prefill_chunk : (nprompt > 0 ? nprompt : 1);
  double t0 = df_now();
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
    ctx = df_xmalloc(sizeof(int) * ((size_t)nprompt + (size_t)cap));
    memcpy(ctx, prompt, sizeof(int) * (size_t)nprompt);
    nctx = nprompt;
  }
  st->finish = DF_FINISH_LENGTH;
  double t1 = df_now();
  int n = 0;
  while (n < o->max_new) {
    int id = df_sample_pick(s->sampler, s->logits, &so, ctx, nctx, n, &rng);
    ids[n++] = id;
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

char *df_engine_stats_json(df_engine *en) {
  json_t *o = json_object();
  json_object_set_new(o, "model", json_string(en->model_id));
  json_object_set_new(o, "spine", json_string(en->spine == DF_SPINE_INT8 ? "int8" : "bf16"));
  json_object_set_new(o, "kernels", json_string(en->kc.k->name));
  json_object_set_new(o, "threads", json_integer(df_pool_size(en->pool)));
  json_object_set_new(o, "spine_bytes_per_token",
                      json_integer((json_int_t)en->model->spine_bytes_per_token));
  json_object_set_new(o, "expert_bytes_read",
                      json_integer((json_int_t)df_store_bytes_read(en->store)));
  char *sj = df_store_stats_json(en->store);
  json_t *sv = sj ? json_loads(sj, 0, NULL) : NULL;
  json_object_set_new(o, "store", sv ? sv : json_string(sj ? sj : ""));
  free(sj);
  char *txt = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return txt;
}

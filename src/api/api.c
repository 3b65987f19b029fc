/* The public API (include/deltafin.h) as a thin layer over the engine: it
 * translates the public option structs into the engine's, copies df_err
 * messages into the caller's buffer and hides every internal type. Nothing
 * here computes anything the engine does not. */
#include "deltafin.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "store/store.h"

struct df_api_engine {
  df_engine *en;
};

struct df_api_session {
  df_session *s;
};

/* The engine's message into the caller's buffer; returns -1 for `return`. */
static int fail(char *err, size_t errlen, const char *msg) {
  if (err && errlen) snprintf(err, errlen, "%s", msg);
  return -1;
}

void df_api_opts_init(df_api_opts *o) {
  memset(o, 0, sizeof *o);
  o->cache_mb = -1;
}

int df_api_engine_open(df_api_engine **out, const df_api_opts *o, char *err, size_t errlen) {
  *out = NULL;
  if (!o || !o->model_dir) return fail(err, errlen, "df_api_engine_open: model_dir is required");
  if (o->threads < 0 || o->ctx < 0)
    return fail(err, errlen, "df_api_engine_open: threads and ctx must be >= 0");
  df_engine_opts eo;
  df_engine_opts_default(&eo);
  eo.model_dir = o->model_dir;
  eo.threads = o->threads;
  eo.store.cache_mb = o->cache_mb;
  eo.mem_limit = o->mem_limit;
  eo.ctx = o->ctx;
  df_err e = {{0}};
  df_api_engine *a = calloc(1, sizeof *a);
  if (!a) return fail(err, errlen, "df_api_engine_open: out of memory");
  if (df_engine_open(&a->en, &eo, &e)) {
    free(a);
    return fail(err, errlen, e.msg);
  }
  *out = a;
  return 0;
}

void df_api_engine_close(df_api_engine *en) {
  if (!en) return;
  df_engine_close(en->en);
  free(en);
}

int df_api_vocab(const df_api_engine *en) { return df_engine_config(en->en)->vocab; }
int df_api_eos_id(const df_api_engine *en) { return df_engine_config(en->en)->eos_id; }

int df_api_tokenize(const df_api_engine *en, const char *text, int **ids, size_t *n, char *err,
                    size_t errlen) {
  *ids = NULL;
  *n = 0;
  const df_tok *tok = df_engine_tok(en->en);
  if (!tok) return fail(err, errlen, "df_api_tokenize: the model has no tokenizer");
  size_t cap = 0;
  df_err e = {{0}};
  if (df_tok_encode(tok, text, strlen(text), ids, n, &cap, &e)) return fail(err, errlen, e.msg);
  return 0;
}

char *df_api_detokenize(const df_api_engine *en, const int *ids, size_t n) {
  const df_tok *tok = df_engine_tok(en->en);
  int vocab = df_api_vocab(en);
  if (!tok) return NULL;
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab) return NULL;
  size_t len;
  return df_tok_decode(tok, ids, n, &len);
}

void df_api_free(void *p) { free(p); }

df_api_session *df_api_session_new(df_api_engine *en) {
  df_api_session *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->s = df_session_new(en->en);
  if (!a->s) {
    free(a);
    return NULL;
  }
  return a;
}

void df_api_session_free(df_api_session *s) {
  if (!s) return;
  df_session_free(s->s);
  free(s);
}

void df_api_session_reset(df_api_session *s) { df_session_reset(s->s); }
int df_api_session_pos(const df_api_session *s) { return df_session_pos(s->s); }

void df_api_gen_opts_init(df_api_gen_opts *o) {
  memset(o, 0, sizeof *o);
  df_gen_opts g;
  df_gen_opts_default(&g);
  o->max_new = 256;
  o->temperature = g.temperature;
  o->top_p = g.top_p;
  o->seed = g.seed;
}

int df_api_generate(df_api_session *s, const int *prompt, int nprompt, const df_api_gen_opts *o,
                    int **ids, int *n, df_api_gen_result *r, char *err, size_t errlen) {
  if (ids) *ids = NULL;
  if (n) *n = 0;
  if (!o || o->max_new < 0 || nprompt < 0 || o->nstop < 0 || !(o->temperature >= 0) ||
      !(o->top_p > 0 && o->top_p <= 1))
    return fail(err, errlen, "df_api_generate: max_new, nprompt and nstop must be >= 0, "
                "temperature >= 0 and top_p in (0, 1]");
  df_gen_opts g;
  df_gen_opts_default(&g);
  g.max_new = o->max_new;
  g.temperature = o->temperature;
  g.top_p = o->top_p;
  g.seed = o->seed;
  g.stop_ids = o->stop_ids;
  g.nstop = o->stop_ids ? o->nstop : 0;
  g.on_token = o->on_token;
  g.ud = o->ud;
  int *out = NULL, nout = 0;
  df_gen_stats st;
  memset(&st, 0, sizeof st);
  df_err e = {{0}};
  if (df_generate(s->s, prompt, nprompt, &g, &out, &nout, &st, &e)) {
    free(out);
    return fail(err, errlen, e.msg);
  }
  if (r) {
    r->n_prompt = st.n_prompt;
    r->n_gen = st.n_gen;
    r->finish = st.finish == DF_FINISH_STOP     ? DF_API_FINISH_STOP
                : st.finish == DF_FINISH_CANCEL ? DF_API_FINISH_CANCEL
                                                : DF_API_FINISH_LENGTH;
    r->prefill_s = st.prefill_s;
    r->decode_s = st.decode_s;
  }
  if (n) *n = nout;
  if (ids) *ids = out;
  else free(out);
  return 0;
}

static uint64_t ju(const json_t *o, const char *k) {
  const json_t *v = json_object_get(o, k);
  return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

int df_api_store_stats_get(df_api_engine *en, df_api_store_stats *st, char *err, size_t errlen) {
  memset(st, 0, sizeof *st);
  /* the store keeps its counters private and publishes them as its stats
   * JSON (the same object `run --json` prints under "store") */
  char *js = df_store_stats_json(df_engine_store(en->en));
  json_t *o = js ? json_loads(js, 0, NULL) : NULL;
  free(js);
  if (!json_is_object(o)) {
    json_decref(o);
    return fail(err, errlen, "df_api_store_stats_get: the store gave no statistics");
  }
  st->expert_bytes_read = ju(o, "expert_bytes_read");
  st->expert_requests = ju(o, "expert_requests");
  st->cache_hits = ju(o, "cache_hits");
  st->read_errors = ju(o, "read_errors");
  st->checksum_errors = ju(o, "checksum_errors");
  const json_t *c = json_object_get(o, "cache");
  st->cache_resident_bytes = ju(c, "resident_bytes");
  st->cache_budget_mb = (long)ju(c, "budget_mb");
  json_decref(o);
  st->spine_stream_bytes = df_engine_spine_stream_bytes(en->en, NULL);
  return 0;
}

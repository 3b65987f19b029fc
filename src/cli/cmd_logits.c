/* deltafin logits: runs a prompt through the engine and writes every
 * position's logits (optionally every layer's hidden states and every MoE
 * layer's router scores and choices) to a safetensors file, for comparison
 * with an independent reference (tools/reference/scan.py). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"
#include "cli/opt_table.h"
#include "cli/engine_opts.h"
#include "engine/engine.h"
#include "format/safetensors.h"

void df_cmd_logits_help(void) {
  printf(
      "usage: deltafin logits --model DIR (--prompt-ids LIST | --prompt-ids-file FILE)\n"
      "                       --out FILE [--hidden] [--routes] [options]\n"
      "\n"
      "Runs the prompt through the exact forward pass (prefill only, nothing is\n"
      "generated) and writes a safetensors file (to FILE.tmp.PID, then renamed):\n"
      "  logits        F32 [T, V]     every prompt position's logits\n"
      "  prompt_ids    I32 [T]\n"
      "  hidden        F32 [L, T, H]  with --hidden: every layer's output\n"
      "  route_scores  F32 [M, T, E]  with --routes: each MoE layer's sigmoid router\n"
      "                               scores (before the correction bias)\n"
      "  route_ids     I32 [M, T, K]  with --routes: the chosen experts, ascending id\n"
      "Metadata (strings): moe_layers (JSON list of the M MoE layers' indices,\n"
      "0-based), engine_args (JSON list of the engine options given), kernels,\n"
      "threads, spine, prefill_chunk, spine_stream_bytes, plan (JSON).\n"
      "\n"
      "options:\n"
      "  --prompt-ids LIST       token ids, separated by commas and/or spaces\n"
      "  --prompt-ids-file FILE  the ids from FILE (same separators, newlines too;\n"
      "                          '-' = standard input)\n"
      "  --out FILE              the safetensors file to write\n"
      "  --hidden                also every layer's hidden states\n"
      "  --routes                also every MoE layer's router scores and choices\n"
      "  --prefill-chunk N       positions per forward pass (default 64; 0 = the whole\n"
      "                          prompt in one)\n"
      "\n");
  df_cli_engine_help(stdout);
}

typedef struct capture {
  const df_config *cfg;
  int T;       /* prompt positions */
  int pos0;    /* first position of the chunk being run */
  float *hidden; /* [L][T][H] or NULL */
  float *scores; /* [M][T][E] or NULL */
  int32_t *ids;  /* [M][T][K] */
  int moe_index[DF_MAX_LAYERS]; /* layer -> MoE index, -1 for a dense layer */
  char bad[160]; /* first inconsistency a hook saw */
} capture;

static void on_layer(void *ud, int layer, const float *h, int n, int hidden) {
  capture *c = ud;
  if (layer < 0 || layer >= c->cfg->n_layers || hidden != c->cfg->hidden || c->pos0 + n > c->T) {
    if (!c->bad[0])
      snprintf(c->bad, sizeof c->bad, "layer hook: layer %d, %d rows x %d at position %d", layer, n,
               hidden, c->pos0);
    return;
  }
  size_t H = (size_t)hidden;
  memcpy(c->hidden + ((size_t)layer * (size_t)c->T + (size_t)c->pos0) * H, h,
         sizeof(float) * H * (size_t)n);
}

static void on_route(void *ud, int layer, const float *scores, const int *ids, int n, int E,
                     int K) {
  capture *c = ud;
  int m = layer >= 0 && layer < c->cfg->n_layers ? c->moe_index[layer] : -1;
  if (m < 0 || E != c->cfg->n_experts || K != c->cfg->top_k || c->pos0 + n > c->T) {
    if (!c->bad[0])
      snprintf(c->bad, sizeof c->bad, "route hook: layer %d (MoE index %d), %d rows, E %d, K %d",
               layer, m, n, E, K);
    return;
  }
  size_t T = (size_t)c->T, p = (size_t)c->pos0;
  memcpy(c->scores + ((size_t)m * T + p) * (size_t)E, scores, sizeof(float) * (size_t)E * (size_t)n);
  for (size_t i = 0; i < (size_t)n * (size_t)K; i++)
    c->ids[((size_t)m * T + p) * (size_t)K + i] = ids[i];
}

static void meta_int(df_st_writer *w, const char *key, long long v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", v);
  df_st_writer_set_metadata(w, key, buf);
}

static void meta_json(df_st_writer *w, const char *key, json_t *v) {
  char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(v);
  df_st_writer_set_metadata(w, key, s ? s : "null");
  free(s);
}

typedef struct out_tensor {
  const char *name;
  df_dtype dt;
  int ndim;
  int64_t shape[3];
  const void *data;
} out_tensor;

static int write_out(const out_tensor *t, int nt, df_st_writer *w, df_err *e) {
  for (int i = 0; i < nt; i++)
    if (df_st_writer_declare(w, t[i].name, t[i].dt, t[i].ndim, t[i].shape, e)) return -1;
  if (df_st_writer_begin(w, e)) return -1;
  for (int i = 0; i < nt; i++) {
    size_t n = df_dtype_size(t[i].dt);
    for (int d = 0; d < t[i].ndim; d++) n *= (size_t)t[i].shape[d];
    if (df_st_writer_write(w, t[i].data, n, e)) return -1;
  }
  return df_st_writer_finish(w, e);
}

/* The prompt ids from --prompt-ids or --prompt-ids-file: 0, or 1 said. */
static int logits_ids(const char *ids_s, const char *ids_file, int **ids, size_t *nids,
                      size_t *cap) {
  if (ids_s) {
    if (df_cli_parse_ids("logits", ids_s, ids, nids, cap)) return 1;
  } else {
    char *buf;
    size_t len;
    if (df_cli_read_input(ids_file, &buf, &len)) return 1;
    int bad = strlen(buf) != len;
    if (bad) df_cli_fail("%s: contains a NUL byte", ids_file);
    else bad = df_cli_parse_ids("logits", buf, ids, nids, cap);
    free(buf);
    if (bad) return 1;
  }
  if (*nids == 0) return df_cli_fail("logits: no token ids given");
  if (*nids > (1u << 24))
    return df_cli_fail("logits: %zu positions is more than this command handles (16777216)",
                       *nids);
  return 0;
}

/* The output file: logits, prompt ids, what the hooks captured and the run's
 * metadata (moe consumed): 0, or 1 said. */
static int logits_write(const char *out_path, const capture *hkp, float *logits, const int *ids,
                        int T, json_t *moe, json_t *eargs, df_engine *en, int chunk) {
  capture hk = *hkp;
  const df_config *cfg = hk.cfg;
  size_t V = (size_t)cfg->vocab, H = (size_t)cfg->hidden, L = (size_t)cfg->n_layers;
  size_t E = (size_t)cfg->n_experts, K = (size_t)cfg->top_k, Tz = (size_t)T;
  int M = (int)json_array_size(moe);
  df_err e;
  int32_t *pid = df_xmalloc(sizeof(int32_t) * Tz);
  for (size_t i = 0; i < Tz; i++) pid[i] = ids[i];
  out_tensor t[5];
  int nt = 0;
  t[nt++] = (out_tensor){"logits", DF_DT_F32, 2, {T, (int64_t)V}, logits};
  t[nt++] = (out_tensor){"prompt_ids", DF_DT_I32, 1, {T}, pid};
  if (hk.hidden) t[nt++] = (out_tensor){"hidden", DF_DT_F32, 3, {(int64_t)L, T, (int64_t)H}, hk.hidden};
  if (hk.scores) {
    t[nt++] = (out_tensor){"route_scores", DF_DT_F32, 3, {M, T, (int64_t)E}, hk.scores};
    t[nt++] = (out_tensor){"route_ids", DF_DT_I32, 3, {M, T, (int64_t)K}, hk.ids};
  }
  df_st_writer *w = df_st_writer_new(out_path);
  meta_json(w, "moe_layers", moe);
  meta_json(w, "engine_args", json_incref(eargs));
  df_st_writer_set_metadata(w, "kernels", df_engine_kernels(en));
  df_st_writer_set_metadata(w, "spine", df_engine_spine(en) == DF_SPINE_INT8 ? "int8" : "bf16");
  meta_int(w, "threads", df_engine_threads(en));
  meta_int(w, "prefill_chunk", chunk);
  meta_int(w, "spine_stream_bytes", (long long)df_engine_spine_stream_bytes(en, NULL));
  char *plan = df_engine_plan_json(en);
  if (plan) df_st_writer_set_metadata(w, "plan", plan);
  free(plan);
  int wr = write_out(t, nt, w, &e);
  free(pid);
  df_st_writer_free(w);
  if (wr) return df_cli_fail("%s", e.msg);
  return 0;
}

/* --prefill-chunk's one row (opt_table.h), shared with run, chat, bench, eval. */
static const df_opt chunk_row = DF_OPT_PREFILL_CHUNK(DF_OPT_INT, 0, NULL);

int df_cmd_logits(int argc, char **argv) {
  df_engine_opts eo;
  df_engine_opts_default(&eo);
  const char *ids_s = NULL, *ids_file = NULL, *out_path = NULL;
  int want_hidden = 0, want_routes = 0, chunk = 64;
  int r;
  json_t *eargs = json_array(), *moe = NULL;
  int rc = 1;
  int *ids = NULL;
  size_t nids = 0, cap = 0;
  df_engine *en = NULL;
  df_session *s = NULL;
  float *logits = NULL;
  capture hk = {0}; /* what the hooks fill */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int i0 = i;
    if (!strcmp(a, "--hidden")) want_hidden = 1;
    else if (!strcmp(a, "--routes")) want_routes = 1;
    else if ((r = df_cli_engine_opt(&eo, "logits", argc, argv, &i)) != 0) {
      if (r < 0) goto out;
      for (int j = i0; j <= i; j++) json_array_append_new(eargs, json_string(argv[j]));
    } else if (!strcmp(a, "--prompt-ids") || !strcmp(a, "--prompt-ids-file") ||
               !strcmp(a, "--out") || !strcmp(a, "--prefill-chunk")) {
      if (i + 1 >= argc) {
        df_cli_fail("%s needs a value (see deltafin logits --help)", a);
        goto out;
      }
      const char *val = argv[++i];
      if (!strcmp(a, "--prompt-ids")) ids_s = val;
      else if (!strcmp(a, "--prompt-ids-file")) ids_file = val;
      else if (!strcmp(a, "--out")) out_path = val;
      else if (df_opt_value(&chunk_row, &chunk, val)) goto out;
    } else if (a[0] == '-') {
      df_cli_fail("logits: unknown option '%s' (see deltafin logits --help)", a);
      goto out;
    } else {
      df_cli_fail("logits: unexpected argument '%s' (the ids go after --prompt-ids)", a);
      goto out;
    }
  }
  if (!eo.model_dir) {
    df_cli_fail("logits needs --model DIR");
    goto out;
  }
  if (!!ids_s + !!ids_file != 1) {
    df_cli_fail("logits needs exactly one of --prompt-ids LIST or --prompt-ids-file FILE");
    goto out;
  }
  if (!out_path || !*out_path) {
    df_cli_fail("logits needs --out FILE (the safetensors file to write)");
    goto out;
  }
  if (logits_ids(ids_s, ids_file, &ids, &nids, &cap)) goto out;
  int T = (int)nids;
  if (chunk <= 0 || chunk > T) chunk = T;

  df_err e;
  eo.max_rows = chunk;
  if (df_engine_open(&en, &eo, &e)) {
    df_cli_fail("%s", e.msg);
    goto out;
  }
  const df_config *cfg = df_engine_config(en);
  for (int i = 0; i < T; i++)
    if (ids[i] >= cfg->vocab) {
      df_cli_fail("logits: id %d (position %d) is outside the vocabulary (vocab_size %d)", ids[i],
                  i, cfg->vocab);
      goto out;
    }
  size_t V = (size_t)cfg->vocab, H = (size_t)cfg->hidden, L = (size_t)cfg->n_layers;
  size_t E = (size_t)cfg->n_experts, K = (size_t)cfg->top_k, Tz = (size_t)T;
  hk.cfg = cfg;
  hk.T = T;
  int M = 0;
  moe = json_array();
  for (int l = 0; l < cfg->n_layers; l++) {
    hk.moe_index[l] = l >= cfg->first_k_dense ? M++ : -1;
    if (hk.moe_index[l] >= 0) json_array_append_new(moe, json_integer(l));
  }
  logits = df_xmalloc(sizeof(float) * Tz * V);
  s = df_session_new(en);
  if (want_hidden) {
    hk.hidden = df_xcalloc(L * Tz * H, sizeof(float));
    df_session_set_layer_hook(s, on_layer, &hk);
  }
  if (want_routes && M > 0) {
    hk.scores = df_xcalloc((size_t)M * Tz * E, sizeof(float));
    hk.ids = df_xcalloc((size_t)M * Tz * K, sizeof(int32_t));
    df_session_set_route_hook(s, on_route, &hk);
  }
  for (int p = 0; p < T; p += chunk) {
    int n = T - p < chunk ? T - p : chunk;
    hk.pos0 = p;
    if (df_session_forward(s, ids + p, n, NULL, logits + (size_t)p * V, &e)) {
      df_cli_fail("positions %d-%d: %s", p, p + n - 1, e.msg);
      goto out;
    }
  }
  if (hk.bad[0]) {
    df_cli_fail("logits: the engine's hooks gave what this command did not expect (%s)", hk.bad);
    goto out;
  }

  int wr = logits_write(out_path, &hk, logits, ids, T, moe, eargs, en, chunk);
  moe = NULL;
  if (wr) goto out;
  printf("logits: %d positions x %zu vocab%s%s -> %s\n", T, V, hk.hidden ? ", hidden states" : "",
         hk.scores ? ", routes" : "", out_path);
  rc = 0;
out:
  json_decref(moe);
  free(logits);
  free(hk.hidden);
  free(hk.scores);
  free(hk.ids);
  free(ids);
  json_decref(eargs);
  df_session_free(s);
  df_engine_close(en);
  return rc;
}

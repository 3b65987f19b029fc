/* config.json parsing: every value the engine uses is required and checked,
 * because a defaulted or mistyped dimension turns into wrong output, not a
 * crash. Messages name the key with its full path ("text_config.x.y"). */
#include "format/config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "format/codec.h"

#define DIM_MAX (1L << 24) /* no dimension of any K3-family model comes close */

/* A JSON object and the path used to name its keys in messages. */
typedef struct sec {
  const json_t *obj;
  char path[96]; /* "" or "text_config." or "text_config.linear_attn_config." */
  const char *label;
} sec;

/* Two values of one field given under both spellings: equal when they mean the
 * same (1 and 1.0 are the same number). */
static int same_value(const json_t *a, const json_t *b) {
  if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
  return json_equal(a, b);
}

/* The value of a field that has the release's spelling `key` and, when alias is
 * not NULL, an older spelling (DeepSeek's, as transformers' KimiLinearConfig maps
 * them). *used gets the spelling found, so messages name what the file says.
 * Both present and different is an error naming both. */
static const json_t *need2(const sec *s, const char *key, const char *alias, const char **used,
                           df_err *e) {
  const json_t *v = json_object_get(s->obj, key);
  const json_t *a = alias ? json_object_get(s->obj, alias) : NULL;
  *used = key;
  if (v && a && !same_value(v, a)) {
    char *x = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    char *y = json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT);
    df_err_set(e, "%s: %s%s (%.40s) and %s%s (%.40s) are two spellings of one field and "
               "disagree; remove one", s->label, s->path, key, x ? x : "?", s->path, alias,
               y ? y : "?");
    free(x);
    free(y);
    return NULL;
  }
  if (!v && a) {
    *used = alias;
    return a;
  }
  if (!v) {
    if (alias)
      df_err_set(e, "%s: %s%s missing (the release's spelling): %s%s missing (its older "
                 "spelling) too; one of the two is required", s->label, s->path, key, s->path,
                 alias);
    else
      df_err_set(e, "%s: %s%s missing", s->label, s->path, key);
  }
  return v;
}

static const json_t *need(const sec *s, const char *key, df_err *e) {
  const char *used;
  return need2(s, key, NULL, &used, e);
}

static int get_long2(const sec *s, const char *key, const char *alias, long lo, long hi,
                     long *out, df_err *e) {
  const char *k;
  const json_t *v = need2(s, key, alias, &k, e);
  if (!v) return -1;
  if (!json_is_integer(v))
    return df_err_set(e, "%s: %s%s must be an integer", s->label, s->path, k);
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return df_err_set(e, "%s: %s%s is %lld, must be in [%ld, %ld]", s->label, s->path, k,
                      (long long)x, lo, hi);
  *out = (long)x;
  return 0;
}

static int get_long(const sec *s, const char *key, long lo, long hi, long *out, df_err *e) {
  return get_long2(s, key, NULL, lo, hi, out, e);
}

static int get_int2(const sec *s, const char *key, const char *alias, long lo, long hi, int *out,
                    df_err *e) {
  long v;
  if (get_long2(s, key, alias, lo, hi, &v, e) != 0) return -1;
  *out = (int)v;
  return 0;
}

static int get_int(const sec *s, const char *key, long lo, long hi, int *out, df_err *e) {
  return get_int2(s, key, NULL, lo, hi, out, e);
}

static int get_float2(const sec *s, const char *key, const char *alias, float *out, df_err *e) {
  const char *k;
  const json_t *v = need2(s, key, alias, &k, e);
  if (!v) return -1;
  if (!json_is_number(v)) return df_err_set(e, "%s: %s%s must be a number", s->label, s->path, k);
  double d = json_number_value(v);
  float f = (float)d;
  if (!isfinite(f))
    return df_err_set(e, "%s: %s%s is not a finite float", s->label, s->path, k);
  *out = f;
  return 0;
}

static int get_float(const sec *s, const char *key, float *out, df_err *e) {
  return get_float2(s, key, NULL, out, e);
}

/* A number kept as written: --precision f64 must not see it rounded to fp32. */
static int get_double(const sec *s, const char *key, double *out, df_err *e) {
  float f;
  if (get_float2(s, key, NULL, &f, e)) return -1; /* the same checks */
  *out = json_number_value(json_object_get(s->obj, key));
  return 0;
}

static int get_bool2(const sec *s, const char *key, const char *alias, int *out, df_err *e) {
  const char *k;
  const json_t *v = need2(s, key, alias, &k, e);
  if (!v) return -1;
  if (!json_is_boolean(v))
    return df_err_set(e, "%s: %s%s must be true or false", s->label, s->path, k);
  *out = json_is_true(v);
  return 0;
}

static int get_bool(const sec *s, const char *key, int *out, df_err *e) {
  return get_bool2(s, key, NULL, out, e);
}

static int get_str2(const sec *s, const char *key, const char *alias, const char **out,
                    const char **used, df_err *e) {
  *out = NULL; /* defined on every path, so callers never read an unset pointer */
  const json_t *v = need2(s, key, alias, used, e);
  if (!v) return -1;
  if (!json_is_string(v))
    return df_err_set(e, "%s: %s%s must be a string", s->label, s->path, *used);
  *out = json_string_value(v);
  return 0;
}

static int get_str(const sec *s, const char *key, const char **out, df_err *e) {
  const char *used;
  return get_str2(s, key, NULL, out, &used, e);
}

/* A string field that must have one exact value. */
static int want_str2(const sec *s, const char *key, const char *alias, const char *want,
                     const char *why, df_err *e) {
  const char *v, *k;
  if (get_str2(s, key, alias, &v, &k, e) != 0) return -1;
  if (strcmp(v, want))
    return df_err_set(e, "%s: %s%s is \"%.64s\", %s \"%s\"", s->label, s->path, k, v, why,
                      want);
  return 0;
}

static int want_str(const sec *s, const char *key, const char *want, const char *why,
                    df_err *e) {
  return want_str2(s, key, NULL, want, why, e);
}

static int sub(const sec *s, const char *key, sec *out, df_err *e) {
  const json_t *v = need(s, key, e);
  if (!v) return -1;
  if (!json_is_object(v))
    return df_err_set(e, "%s: %s%s must be an object", s->label, s->path, key);
  out->obj = v;
  out->label = s->label;
  /* path + key + "." (a long key, e.g. a config group name, is cut short) */
  size_t room = sizeof out->path - 2, pl = strlen(s->path), kl = strlen(key);
  if (pl > room) pl = room; /* nested long keys: the parent path may already be full */
  if (kl > room - pl) kl = room - pl;
  memmove(out->path, s->path, pl);
  memcpy(out->path + pl, key, kl);
  out->path[pl + kl] = '.';
  out->path[pl + kl + 1] = 0;
  return 0;
}

/* Marks the 1-based layers of list `key` as `kind` in seen[]. */
static int layer_list(const sec *s, const char *key, int n_layers, int kind, int *seen,
                      df_err *e) {
  const json_t *v = need(s, key, e);
  if (!v) return -1;
  if (!json_is_array(v)) return df_err_set(e, "%s: %s%s must be an array", s->label, s->path, key);
  size_t i;
  const json_t *x;
  json_array_foreach(v, i, x) {
    if (!json_is_integer(x))
      return df_err_set(e, "%s: %s%s[%zu] must be an integer", s->label, s->path, key, i);
    json_int_t l = json_integer_value(x);
    if (l < 1 || l > n_layers)
      return df_err_set(e, "%s: %s%s[%zu] is %lld, not a layer in 1..%d (1-based)", s->label,
                        s->path, key, i, (long long)l, n_layers);
    if (seen[l - 1] == kind)
      return df_err_set(e, "%s: %s%s lists layer %lld twice", s->label, s->path, key,
                        (long long)l);
    if (seen[l - 1] >= 0)
      return df_err_set(e, "%s: %slayer %lld is in both full_attn_layers and kda_layers",
                        s->label, s->path, (long long)l);
    seen[l - 1] = kind;
  }
  return 0;
}

static int parse_quant(const sec *q, df_config *c, df_err *e) {
  if (want_str(q, "quant_method", "compressed-tensors", "the engine supports only", e) != 0 ||
      want_str(q, "format", "mxfp4-pack-quantized", "the engine supports only", e) != 0)
    return -1;
  sec groups;
  if (sub(q, "config_groups", &groups, e) != 0) return -1;
  if (json_object_size(groups.obj) == 0)
    return df_err_set(e, "%s: %sconfig_groups is empty", q->label, q->path);
  const char *gk;
  const json_t *gv;
  c->expert_group = 0;
  json_object_foreach((json_t *)groups.obj, gk, gv) {
    sec g, w;
    if (sub(&groups, gk, &g, e) != 0 || sub(&g, "weights", &w, e) != 0) return -1;
    int bits, gs;
    if (get_int(&w, "num_bits", 0, 64, &bits, e) != 0) return -1;
    if (bits != 4)
      return df_err_set(e, "%s: %snum_bits is %d, MXFP4 needs 4", w.label, w.path, bits);
    if (get_int(&w, "group_size", 0, DIM_MAX, &gs, e) != 0) return -1;
    if (gs != DF_MXFP4_GROUP)
      return df_err_set(e, "%s: %sgroup_size is %d, MXFP4 needs %d", w.label, w.path, gs,
                        DF_MXFP4_GROUP);
    c->expert_group = gs;
  }
  return 0;
}

static int parse_text(const sec *t, const sec *root, df_config *c, df_err *e) {
  const char *lab = t->label;
  if (get_int(t, "hidden_size", 1, DIM_MAX, &c->hidden, e) ||
      get_int(t, "num_hidden_layers", 1, DF_MAX_LAYERS, &c->n_layers, e) ||
      get_int(t, "vocab_size", 1, DIM_MAX, &c->vocab, e) ||
      get_double(t, "rms_norm_eps", &c->eps, e))
    return -1;
  if (!(c->eps > 0))
    return df_err_set(e, "%s: %srms_norm_eps must be positive", lab, t->path);
  if (get_int(t, "bos_token_id", 0, c->vocab - 1, &c->bos_id, e) ||
      get_int(t, "eos_token_id", 0, c->vocab - 1, &c->eos_id, e) ||
      get_int(t, "pad_token_id", 0, c->vocab - 1, &c->pad_id, e) ||
      get_long(t, "max_position_embeddings", 1, 1L << 40, &c->max_pos, e))
    return -1;
  /* situ_beta / situ_linear_beta: the spellings deltafin's generator wrote before
   * it followed the release; read so those checkpoints keep loading. */
  if (want_str(t, "hidden_act", "situ", "the engine implements only", e) ||
      get_float2(t, "activation_situ_beta", "situ_beta", &c->situ_beta, e) ||
      get_float2(t, "activation_situ_linear_beta", "situ_linear_beta", &c->situ_linear_beta, e))
    return -1;
  if (!(c->situ_beta > 0) || !(c->situ_linear_beta > 0))
    return df_err_set(e, "%s: %sactivation_situ_beta and activation_situ_linear_beta must be "
                      "positive", lab, t->path);
  if (get_int(t, "attn_res_block_size", 1, DF_MAX_LAYERS, &c->attn_res_block, e)) return -1;

  /* MLA */
  if (get_int(t, "num_attention_heads", 1, 65536, &c->mla_heads, e) ||
      get_int(t, "q_lora_rank", 1, DIM_MAX, &c->q_lora_rank, e) ||
      get_int(t, "kv_lora_rank", 1, DIM_MAX, &c->kv_lora_rank, e) ||
      get_int(t, "qk_nope_head_dim", 1, 65536, &c->qk_nope_dim, e) ||
      get_int(t, "qk_rope_head_dim", 0, 65536, &c->qk_rope_dim, e) ||
      get_int(t, "v_head_dim", 1, 65536, &c->v_head_dim, e) ||
      get_bool(t, "mla_use_nope", &c->mla_use_nope, e) ||
      get_bool(t, "mla_use_output_gate", &c->mla_output_gate, e))
    return -1;
  if (!c->mla_use_nope)
    return df_err_set(e, "%s: %smla_use_nope is false: rotary MLA is not supported", lab,
                      t->path);
  if ((long)c->mla_heads * (c->qk_nope_dim + c->qk_rope_dim) > DIM_MAX ||
      (long)c->mla_heads * (c->qk_nope_dim + c->v_head_dim) > DIM_MAX)
    return df_err_set(e, "%s: %snum_attention_heads x head dims is implausibly large", lab,
                      t->path);

  /* FFN / MoE. The release spells these the kimi_linear way; the DeepSeek
   * spellings are read as aliases (transformers' KimiLinearConfig maps them). */
  const char *k_ng;
  if (get_int(t, "first_k_dense_replace", 0, c->n_layers, &c->first_k_dense, e) ||
      get_int(t, "intermediate_size", 1, DIM_MAX, &c->dense_inter, e) ||
      get_int2(t, "num_experts", "n_routed_experts", 1, 65536, &c->n_experts, e) ||
      get_int2(t, "num_experts_per_token", "num_experts_per_tok", 1, c->n_experts, &c->top_k,
               e) ||
      get_int2(t, "num_shared_experts", "n_shared_experts", 0, 64, &c->n_shared, e) ||
      get_int(t, "moe_intermediate_size", 1, DIM_MAX, &c->moe_inter, e) ||
      get_int(t, "routed_expert_hidden_size", 1, DIM_MAX, &c->latent, e) ||
      get_bool(t, "latent_moe_use_norm", &c->latent_norm, e) ||
      want_str2(t, "moe_router_activation_func", "scoring_func", "sigmoid",
                "the engine implements only", e) ||
      want_str(t, "topk_method", "noaux_tc", "the engine implements only", e) ||
      get_int2(t, "num_expert_group", "n_group", 1, 65536, &c->n_group, e))
    return -1;
  need2(t, "num_expert_group", "n_group", &k_ng, e);
  if (c->n_group != 1)
    return df_err_set(e, "%s: %s%s is %d: the engine supports only 1 expert group", lab,
                      t->path, k_ng, c->n_group);
  if (get_int(t, "topk_group", 1, c->n_group, &c->topk_group, e) ||
      get_bool2(t, "moe_renormalize", "norm_topk_prob", &c->norm_topk_prob, e) ||
      get_float(t, "routed_scaling_factor", &c->routed_scale, e))
    return -1;
  if (!(c->routed_scale > 0))
    return df_err_set(e, "%s: %srouted_scaling_factor must be positive", lab, t->path);
  if ((long)c->n_shared * c->moe_inter > DIM_MAX)
    return df_err_set(e, "%s: %snum_shared_experts x moe_intermediate_size is implausibly "
                      "large", lab, t->path);
  /* Optional in the DeepSeek layout, present in the release: with one group,
   * grouped and ungrouped top-k select the same experts. */
  const json_t *ug = json_object_get(t->obj, "use_grouped_topk");
  if (ug && !json_is_boolean(ug))
    return df_err_set(e, "%s: %suse_grouped_topk must be true or false", lab, t->path);
  c->grouped_topk = ug ? json_is_true(ug) : 0;
  const json_t *mlf = json_object_get(t->obj, "moe_layer_freq");
  if (mlf && !(json_is_integer(mlf) && json_integer_value(mlf) == 1))
    return df_err_set(e, "%s: %smoe_layer_freq must be 1 or absent (every layer after "
                      "first_k_dense_replace is MoE)", lab, t->path);
  const json_t *kvh = json_object_get(t->obj, "num_key_value_heads");
  if (kvh && !(json_is_integer(kvh) && json_integer_value(kvh) == c->mla_heads))
    return df_err_set(e, "%s: %snum_key_value_heads must equal num_attention_heads (%d) or be "
                      "absent (MLA has one key/value head per query head)", lab, t->path,
                      c->mla_heads);
  const json_t *mtp = json_object_get(t->obj, "num_nextn_predict_layers");
  if (mtp && !(json_is_integer(mtp) && json_integer_value(mtp) == 0))
    return df_err_set(e, "%s: %snum_nextn_predict_layers must be 0 or absent (MTP layers are "
                      "not supported)", lab, t->path);

  /* KDA and the layer kinds */
  sec la;
  if (sub(t, "linear_attn_config", &la, e) ||
      get_int(&la, "num_heads", 1, 65536, &c->kda_heads, e) ||
      get_int(&la, "head_dim", 1, 65536, &c->kda_head_dim, e) ||
      get_int(&la, "short_conv_kernel_size", 1, 64, &c->kda_conv, e) ||
      get_float(&la, "gate_lower_bound", &c->kda_gate_lower_bound, e) ||
      get_bool(&la, "use_full_rank_gate", &c->kda_full_rank_gate, e))
    return -1;
  if ((long)c->kda_heads * c->kda_head_dim > DIM_MAX)
    return df_err_set(e, "%s: %snum_heads x head_dim is implausibly large", lab, la.path);
  if (!c->kda_full_rank_gate)
    return df_err_set(e, "%s: %suse_full_rank_gate is false: only the full-rank gate is "
                      "supported", lab, la.path);
  int seen[DF_MAX_LAYERS];
  for (int i = 0; i < c->n_layers; i++) seen[i] = -1;
  if (layer_list(&la, "full_attn_layers", c->n_layers, DF_LAYER_MLA, seen, e) ||
      layer_list(&la, "kda_layers", c->n_layers, DF_LAYER_KDA, seen, e))
    return -1;
  c->n_kda = c->n_mla = 0;
  for (int i = 0; i < c->n_layers; i++) {
    if (seen[i] < 0)
      return df_err_set(e, "%s: %slayer %d (1-based) is in neither full_attn_layers nor "
                        "kda_layers", lab, la.path, i + 1);
    c->layer_kind[i] = (df_layer_kind)seen[i];
    if (seen[i] == DF_LAYER_MLA) c->n_mla++;
    else c->n_kda++;
  }

  /* Routed experts: MXFP4, so both expert matrix dimensions hold whole groups. */
  sec q;
  const json_t *qv = json_object_get(t->obj, "quantization_config");
  const sec *qs = t;
  if (!qv && root != t) {
    qv = json_object_get(root->obj, "quantization_config");
    qs = root;
  }
  if (!qv)
    return df_err_set(e, "%s: quantization_config missing (routed experts must be MXFP4; bf16 "
                      "experts are not supported)", lab);
  if (sub(qs, "quantization_config", &q, e) || parse_quant(&q, c, e)) return -1;
  if (c->latent % c->expert_group)
    return df_err_set(e, "%s: %srouted_expert_hidden_size %d is not a multiple of the MXFP4 "
                      "group size %d", lab, t->path, c->latent, c->expert_group);
  if (c->moe_inter % c->expert_group)
    return df_err_set(e, "%s: %smoe_intermediate_size %d is not a multiple of the MXFP4 group "
                      "size %d", lab, t->path, c->moe_inter, c->expert_group);
  return 0;
}

static int parse_labeled(df_config *c, const char *json, size_t len, const char *label,
                         df_err *e) {
  memset(c, 0, sizeof *c);
  json_error_t je;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return df_err_set(e, "%s: invalid JSON at line %d column %d: %s", label, je.line, je.column,
                      je.text);
  int rc = -1;
  sec r = {.obj = root, .path = "", .label = label};
  if (!json_is_object(root)) {
    df_err_set(e, "%s: not a JSON object", label);
    goto out;
  }
  const char *mt;
  if (get_str(&r, "model_type", &mt, e)) goto out;
  sec t;
  if (!strcmp(mt, "kimi_k3") && json_object_get(root, "text_config")) {
    if (sub(&r, "text_config", &t, e) ||
        want_str(&t, "model_type", "kimi_linear", "expected", e))
      goto out;
    c->nested = 1;
  } else if (!strcmp(mt, "kimi_k3") || !strcmp(mt, "kimi_linear")) {
    t = r;
  } else {
    df_err_set(e, "%s: unknown model_type \"%.64s\" (expected \"kimi_k3\" or \"kimi_linear\")",
               label, mt);
    goto out;
  }
  snprintf(c->model_type, sizeof c->model_type, "%s", mt);
  rc = parse_text(&t, &r, c, e);
out:
  json_decref(root);
  return rc;
}

int df_config_parse(df_config *c, const char *json, size_t len, df_err *e) {
  return parse_labeled(c, json, len, "config.json", e);
}

int df_config_load(df_config *c, const char *path, df_err *e) {
  char *buf;
  size_t len;
  if (df_file_read(path, &buf, &len, e) != 0) return -1;
  int rc = parse_labeled(c, buf, len, path, e);
  free(buf);
  return rc;
}

int df_config_load_dir(df_config *c, const char *dir, df_err *e) {
  char *p = df_path_join(dir, "config.json");
  int rc = df_config_load(c, p, e);
  free(p);
  return rc;
}

/* --------------------------------------------------------------- printing */

void df_config_print(const df_config *c, void *FILE_stream) {
  FILE *f = FILE_stream;
  fprintf(f, "model_type        %s (%s config)\n", c->model_type, c->nested ? "nested" : "flat");
  fprintf(f, "hidden            %d\n", c->hidden);
  fprintf(f, "layers            %d (%d KDA, %d MLA; dense FFN in layers 0..%d, MoE after)\n",
          c->n_layers, c->n_kda, c->n_mla, c->first_k_dense - 1);
  fprintf(f, "MLA layers        ");
  int first = 1;
  for (int i = 0; i < c->n_layers; i++)
    if (c->layer_kind[i] == DF_LAYER_MLA) {
      fprintf(f, "%s%d", first ? "" : ",", i);
      first = 0;
    }
  fprintf(f, "%s\n", first ? "none" : " (0-based)");
  fprintf(f, "vocab             %d (bos %d, eos %d, pad %d)\n", c->vocab, c->bos_id, c->eos_id,
          c->pad_id);
  fprintf(f, "rms_norm_eps      %g\n", (double)c->eps);
  fprintf(f, "max positions     %ld\n", c->max_pos);
  fprintf(f, "activation        situ (beta %g, linear beta %g)\n", (double)c->situ_beta,
          (double)c->situ_linear_beta);
  fprintf(f, "AttnRes block     %d\n", c->attn_res_block);
  fprintf(f, "KDA               %d heads x %d, conv %d, gate lower bound %g, full-rank gate %s\n",
          c->kda_heads, c->kda_head_dim, c->kda_conv, (double)c->kda_gate_lower_bound,
          c->kda_full_rank_gate ? "yes" : "no");
  fprintf(f, "MLA               %d heads, q_lora %d, kv_lora %d, nope %d, rope %d, v %d, "
          "output gate %s\n",
          c->mla_heads, c->q_lora_rank, c->kv_lora_rank, c->qk_nope_dim, c->qk_rope_dim,
          c->v_head_dim, c->mla_output_gate ? "yes" : "no");
  fprintf(f, "dense FFN         intermediate %d\n", c->dense_inter);
  fprintf(f, "MoE               %d routed experts, top %d, %d shared (width %d), expert "
          "intermediate %d, latent %d%s\n",
          c->n_experts, c->top_k, c->n_shared, c->n_shared * c->moe_inter, c->moe_inter,
          c->latent, c->latent_norm ? " (normed)" : "");
  fprintf(f, "router            sigmoid, noaux_tc, %d group, renormalize %s, scale %g\n",
          c->n_group, c->norm_topk_prob ? "yes" : "no", (double)c->routed_scale);
  fprintf(f, "experts           MXFP4, group %d\n", c->expert_group);
}

/* ------------------------------------------------------------ serialising */

/* The shortest decimal that reads back as the same float, so 1e-5f is
 * written "1e-05" and not its double expansion. */
static json_t *jfloat(float v) {
  char buf[32];
  for (int p = 1; p <= 9; p++) {
    snprintf(buf, sizeof buf, "%.*g", p, (double)v);
    if (strtof(buf, NULL) == v) break;
  }
  return json_real(strtod(buf, NULL));
}

/* The same for a double (rms_norm_eps): the shortest that reads back as v. */
static json_t *jdouble(double v) {
  char buf[40];
  for (int p = 1; p <= 17; p++) {
    snprintf(buf, sizeof buf, "%.*g", p, v);
    if (strtod(buf, NULL) == v) break;
  }
  return json_real(strtod(buf, NULL));
}

static json_t *auto_map(const char *cfg, const char *model, const char *causal) {
  return json_pack("{s:s, s:s, s:s}", "AutoConfig", cfg, "AutoModel", model,
                   "AutoModelForCausalLM", causal);
}

/* The release's text_config.quantization_config: compressed-tensors MXFP4 on
 * the routed experts. Only quant_method, format, num_bits and group_size are
 * read back; the rest is written as the release has it. */
static json_t *release_quant(int group) {
  json_t *w = json_pack("{s:b, s:i, s:i, s:s, s:s, s:s, s:b, s:s}", "dynamic", 0, "group_size",
                        group, "num_bits", 4, "observer", "minmax", "scale_dtype",
                        "torch.uint8", "strategy", "group", "symmetric", 1, "type", "float");
  json_object_set_new(w, "actorder", json_null());
  json_object_set_new(w, "block_structure", json_null());
  json_object_set_new(w, "observer_kwargs", json_object());
  json_object_set_new(w, "zp_dtype", json_null());
  json_t *g = json_pack("{s:s, s:[s], s:o}", "format", "mxfp4-pack-quantized", "targets",
                        "Linear", "weights", w);
  json_object_set_new(g, "input_activations", json_null());
  json_object_set_new(g, "output_activations", json_null());
  json_t *q = json_pack("{s:{s:o}, s:s, s:[s,s,s,s,s,s], s:s, s:s}", "config_groups", "group_0",
                        g, "format", "mxfp4-pack-quantized", "ignore", "re:.*self_attn.*",
                        "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
                        "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*",
                        "quant_method", "compressed-tensors", "quantization_status",
                        "compressed");
  json_object_set_new(q, "global_compression_ratio", json_null());
  json_object_set_new(q, "kv_cache_scheme", json_null());
  return q;
}

char *df_config_to_json(const df_config *c) {
  json_t *full = json_array(), *kda = json_array();
  for (int i = 0; i < c->n_layers; i++)
    json_array_append_new(c->layer_kind[i] == DF_LAYER_MLA ? full : kda, json_integer(i + 1));
  json_t *lin = json_object();
  json_object_set_new(lin, "full_attn_layers", full);
  json_object_set_new(lin, "kda_layers", kda);
  json_object_set_new(lin, "num_heads", json_integer(c->kda_heads));
  json_object_set_new(lin, "head_dim", json_integer(c->kda_head_dim));
  json_object_set_new(lin, "short_conv_kernel_size", json_integer(c->kda_conv));
  json_object_set_new(lin, "gate_lower_bound", jfloat(c->kda_gate_lower_bound));
  json_object_set_new(lin, "use_full_rank_gate", json_boolean(c->kda_full_rank_gate));

  json_t *t = json_object();
  json_object_set_new(t, "architectures", json_pack("[s]", "KimiLinearForCausalLM"));
  json_object_set_new(t, "auto_map", auto_map("configuration_kimi_k3.KimiLinearConfig",
                                              "modeling_kimi_linear.KimiLinearModel",
                                              "modeling_kimi_linear.KimiLinearForCausalLM"));
  json_object_set_new(t, "model_type", json_string("kimi_linear"));
  json_object_set_new(t, "dtype", json_string("bfloat16"));
  json_object_set_new(t, "hidden_size", json_integer(c->hidden));
  json_object_set_new(t, "num_hidden_layers", json_integer(c->n_layers));
  json_object_set_new(t, "vocab_size", json_integer(c->vocab));
  json_object_set_new(t, "rms_norm_eps", jdouble(c->eps));
  json_object_set_new(t, "initializer_range", jfloat(0.02f));
  json_object_set_new(t, "bos_token_id", json_integer(c->bos_id));
  json_object_set_new(t, "eos_token_id", json_integer(c->eos_id));
  json_object_set_new(t, "pad_token_id", json_integer(c->pad_id));
  json_object_set_new(t, "max_position_embeddings", json_integer(c->max_pos));
  json_object_set_new(t, "hidden_act", json_string("situ"));
  json_object_set_new(t, "activation_situ_beta", jfloat(c->situ_beta));
  json_object_set_new(t, "activation_situ_linear_beta", jfloat(c->situ_linear_beta));
  json_object_set_new(t, "attn_res_block_size", json_integer(c->attn_res_block));
  json_object_set_new(t, "num_attention_heads", json_integer(c->mla_heads));
  json_object_set_new(t, "num_key_value_heads", json_integer(c->mla_heads));
  json_object_set_new(t, "q_lora_rank", json_integer(c->q_lora_rank));
  json_object_set_new(t, "kv_lora_rank", json_integer(c->kv_lora_rank));
  json_object_set_new(t, "qk_nope_head_dim", json_integer(c->qk_nope_dim));
  json_object_set_new(t, "qk_rope_head_dim", json_integer(c->qk_rope_dim));
  json_object_set_new(t, "v_head_dim", json_integer(c->v_head_dim));
  json_object_set_new(t, "mla_use_nope", json_boolean(c->mla_use_nope));
  json_object_set_new(t, "mla_use_output_gate", json_boolean(c->mla_output_gate));
  json_object_set_new(t, "first_k_dense_replace", json_integer(c->first_k_dense));
  json_object_set_new(t, "moe_layer_freq", json_integer(1));
  json_object_set_new(t, "intermediate_size", json_integer(c->dense_inter));
  json_object_set_new(t, "num_experts", json_integer(c->n_experts));
  json_object_set_new(t, "num_experts_per_token", json_integer(c->top_k));
  json_object_set_new(t, "num_shared_experts", json_integer(c->n_shared));
  json_object_set_new(t, "moe_intermediate_size", json_integer(c->moe_inter));
  json_object_set_new(t, "routed_expert_hidden_size", json_integer(c->latent));
  json_object_set_new(t, "latent_moe_use_norm", json_boolean(c->latent_norm));
  json_object_set_new(t, "moe_router_activation_func", json_string("sigmoid"));
  json_object_set_new(t, "topk_method", json_string("noaux_tc"));
  json_object_set_new(t, "use_grouped_topk", json_boolean(c->grouped_topk));
  json_object_set_new(t, "num_expert_group", json_integer(c->n_group));
  json_object_set_new(t, "topk_group", json_integer(c->topk_group));
  json_object_set_new(t, "moe_renormalize", json_boolean(c->norm_topk_prob));
  json_object_set_new(t, "routed_scaling_factor", jfloat(c->routed_scale));
  json_object_set_new(t, "num_nextn_predict_layers", json_integer(0));
  json_object_set_new(t, "tie_word_embeddings", json_false());
  json_object_set_new(t, "use_cache", json_true());
  json_object_set_new(t, "linear_attn_config", lin);
  json_object_set_new(t, "quantization_config", release_quant(c->expert_group));

  /* The release's root: a multimodal wrapper whose vision tower a text-only
   * engine never loads (vision_config is the release's, text_hidden_size ours).
   * media_placeholder_token_id is <|media_pad|>, special 21 after [BOS]. */
  json_t *v = json_pack(
      "{s:s, s:s, s:b, s:i, s:i, s:i, s:b, s:[i,i], s:s, s:s, s:i, s:s, s:s, s:b, s:i, s:s, "
      "s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i}",
      "_attn_implementation", "flash_attention_2", "activation_func", "gelu_pytorch_tanh",
      "attn_bias", 0, "init_pos_emb_height", 64, "init_pos_emb_time", 4, "init_pos_emb_width",
      64, "linear_bias", 0, "merge_kernel_size", 2, 2, "merge_type", "sd2_tpool", "mlp_type",
      "mlp2", "mm_hidden_size", 1024, "mm_projector_type", "patchmergerv2", "norm_type",
      "rmsnorm", "patch_embed_proj_bias", 0, "patch_size", 14, "pos_emb_interpolation_mode",
      "bilinear", "pos_emb_type", "divided_fixed", "projector_hidden_act", "gelu",
      "qkv_hidden_size", 1536, "text_hidden_size", c->hidden, "vt_hidden_size", 1024,
      "vt_intermediate_size", 4096, "vt_num_attention_heads", 12, "vt_num_hidden_layers", 27);
  json_object_set_new(v, "projector_ln_eps", jfloat(1e-5f));
  json_t *root = json_object();
  json_object_set_new(root, "architectures", json_pack("[s]", "KimiK3ForConditionalGeneration"));
  json_object_set_new(root, "auto_map", auto_map("configuration_kimi_k3.KimiK3Config",
                                                 "modeling_kimi_k3.KimiK3ForConditionalGeneration",
                                                 "modeling_kimi_k3.KimiK3ForConditionalGeneration"));
  json_object_set_new(root, "bos_token_id", json_integer(c->bos_id));
  json_object_set_new(root, "dtype", json_string("bfloat16"));
  json_object_set_new(root, "eos_token_id", json_integer(c->eos_id));
  json_object_set_new(root, "ignore_index", json_integer(-100));
  json_object_set_new(root, "image_placeholder", json_string("<|kimi_image_placeholder|>"));
  json_object_set_new(root, "media_placeholder_token_id", json_integer(c->bos_id + 21));
  json_object_set_new(root, "model_type", json_string("kimi_k3"));
  json_object_set_new(root, "pad_token_id", json_integer(c->pad_id));
  json_object_set_new(root, "text_config", t);
  json_object_set_new(root, "tie_word_embeddings", json_false());
  json_object_set_new(root, "vision_config", v);
  /* sorted keys, two-space indent: how transformers' save_pretrained writes it */
  char *s = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(9));
  json_decref(root);
  return s;
}

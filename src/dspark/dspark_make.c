/* A random DSpark checkpoint in the published layout (dspark.h,
 * docs/DSPARK.md) for a target's dimensions: what the tests and the Python
 * reference's goldens run on before a trained one exists. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "base/rng.h"
#include "base/util.h"
#include "dspark/dspark_make.h"
#include "format/codec.h"
#include "format/config.h"
#include "format/safetensors.h"

typedef struct tdef {
  char name[96];
  int rows, cols; /* cols 0: a vector */
  int f32;
  int kind; /* 0 matrix (uniform +-1/sqrt(cols)), 1 norm (1 +- 0.1), 2 bias (+-0.5) */
} tdef;

/* The nano layout's taps (docs/DSPARK.md) for an 8-layer target; otherwise
 * up to five spread from the first layer to the last. */
static int default_taps(int L, int *ids) {
  static const int nano[5] = {1, 3, 4, 6, 7};
  if (L == 8) {
    memcpy(ids, nano, sizeof nano);
    return 5;
  }
  int n = 0;
  for (int j = 0; j < 5; j++) {
    int v = (j * (L - 1) + 2) / 4;
    if (n == 0 || ids[n - 1] != v) ids[n++] = v;
  }
  return n;
}

static json_t *config_json(const df_config *t, const df_dspark_make_opts *o, const int *taps,
                           int ntaps) {
  json_t *c = json_object();
  json_t *arch = json_array();
  json_array_append_new(arch, json_string("K3DSparkForCausalLM"));
  json_object_set_new(c, "architectures", arch);
  json_object_set_new(c, "model_type", json_string("k3_dspark"));
#define I(k, v) json_object_set_new(c, k, json_integer(v))
  I("hidden_size", t->hidden);
  I("num_hidden_layers", o->layers);
  I("num_attention_heads", t->mla_heads);
  I("q_lora_rank", t->q_lora_rank);
  I("kv_lora_rank", t->kv_lora_rank);
  I("qk_nope_head_dim", t->qk_nope_dim);
  I("qk_rope_head_dim", t->qk_rope_dim);
  I("v_head_dim", t->v_head_dim);
  I("intermediate_size", 2 * t->hidden);
  I("vocab_size", t->vocab);
  I("target_hidden_size", t->hidden);
  I("target_num_hidden_layers", t->n_layers);
  I("block_size", 7);
  I("mask_token_id", t->vocab - 256 + 8); /* a reserved special of K3's table */
  I("markov_rank", t->hidden / 8 > 0 ? t->hidden / 8 : 1);
#undef I
  json_object_set_new(c, "mla_use_output_gate", json_true());
  json_object_set_new(c, "rope_theta", json_real(10000.0));
  json_object_set_new(c, "hidden_act", json_string("situ"));
  json_object_set_new(c, "activation_situ_beta", json_real(4.0));
  json_object_set_new(c, "activation_situ_linear_beta", json_real(25.0));
  json_object_set_new(c, "rms_norm_eps", json_real(t->eps));
  json_t *ids = json_array();
  for (int i = 0; i < ntaps; i++) json_array_append_new(ids, json_integer(taps[i]));
  json_object_set_new(c, "target_layer_ids", ids);
  json_object_set_new(c, "aux_hidden_stream", json_string("hidden"));
  json_object_set_new(c, "fc_norm", json_true());
  json_object_set_new(c, "markov_head_type", json_string("low_rank"));
  json_object_set_new(c, "enable_confidence_head", json_true());
  json_object_set_new(c, "confidence_head_with_markov", json_true());
  json_object_set_new(c, "tie_word_embeddings", json_true());
  json_object_set_new(c, "torch_dtype", json_string("bfloat16"));
  return c;
}

static int add(tdef **v, int *n, const char *name, int rows, int cols, int f32, int kind) {
  *v = df_xrealloc(*v, sizeof(tdef) * (size_t)(*n + 1));
  tdef *d = &(*v)[(*n)++];
  snprintf(d->name, sizeof d->name, "%s", name);
  d->rows = rows, d->cols = cols, d->f32 = f32, d->kind = kind;
  return 0;
}

static int roster(const df_config *t, int layers, int ntaps, tdef **v) {
  int n = 0, H = t->hidden, I = 2 * H, r = H / 8 > 0 ? H / 8 : 1, MH = t->mla_heads;
  char nm[96];
  add(v, &n, "model.fc.weight", H, ntaps * H, 0, 0);
  add(v, &n, "model.fc_norm.weight", H, 0, 0, 1);
  for (int i = 0; i < layers; i++) {
#define A(s, rows, cols, kind) \
  (snprintf(nm, sizeof nm, "model.layers.%d.%s", i, s), add(v, &n, nm, rows, cols, 0, kind))
    A("input_layernorm.weight", H, 0, 1);
    A("post_attention_layernorm.weight", H, 0, 1);
    A("self_attn.q_a_proj.weight", t->q_lora_rank, H, 0);
    A("self_attn.q_a_layernorm.weight", t->q_lora_rank, 0, 1);
    A("self_attn.q_b_proj.weight", MH * (t->qk_nope_dim + t->qk_rope_dim), t->q_lora_rank, 0);
    A("self_attn.kv_a_proj_with_mqa.weight", t->kv_lora_rank + t->qk_rope_dim, H, 0);
    A("self_attn.kv_a_layernorm.weight", t->kv_lora_rank, 0, 1);
    A("self_attn.kv_b_proj.weight", MH * (t->qk_nope_dim + t->v_head_dim), t->kv_lora_rank, 0);
    A("self_attn.g_proj.weight", MH * t->v_head_dim, H, 0);
    A("self_attn.o_proj.weight", H, MH * t->v_head_dim, 0);
    A("mlp.gate_proj.weight", I, H, 0);
    A("mlp.up_proj.weight", I, H, 0);
    A("mlp.down_proj.weight", H, I, 0);
#undef A
  }
  add(v, &n, "model.norm.weight", H, 0, 0, 1);
  add(v, &n, "model.markov.down_proj.weight", r, H, 0, 0);
  add(v, &n, "model.markov.up_proj.weight", H, r, 0, 0);
  add(v, &n, "model.confidence_head.weight", 1, H, 0, 0);
  add(v, &n, "model.confidence_head.bias", 1, 0, 1, 2);
  return n;
}

static int write_weights(const char *path, const tdef *v, int n, uint64_t seed, df_err *e) {
  df_st_writer *w = df_st_writer_new(path);
  df_st_writer_set_metadata(w, "format", "pt");
  int rc = -1;
  for (int i = 0; i < n; i++) {
    int64_t shape[2] = {v[i].rows, v[i].cols};
    if (df_st_writer_declare(w, v[i].name, v[i].f32 ? DF_DT_F32 : DF_DT_BF16, v[i].cols ? 2 : 1,
                             shape, e))
      goto out;
  }
  if (df_st_writer_begin(w, e)) goto out;
  for (int i = 0; i < n; i++) {
    size_t cnt = (size_t)v[i].rows * (size_t)(v[i].cols ? v[i].cols : 1);
    df_rng r;
    df_rng_seed_named(&r, seed, v[i].name);
    double a = v[i].kind == 0 ? 1.0 / sqrt((double)v[i].cols) : v[i].kind == 1 ? 0.1 : 0.5;
    void *buf = df_xmalloc(cnt * 4);
    for (size_t j = 0; j < cnt; j++) {
      double x = df_rng_uniform(&r, a) + (v[i].kind == 1 ? 1.0 : 0.0);
      if (v[i].f32) ((float *)buf)[j] = (float)x;
      else ((uint16_t *)buf)[j] = df_f32_to_bf16((float)x);
    }
    int bad = df_st_writer_write(w, buf, cnt * (v[i].f32 ? 4 : 2), e);
    free(buf);
    if (bad) goto out;
  }
  rc = df_st_writer_finish(w, e);
out:
  df_st_writer_free(w);
  return rc;
}

int df_dspark_make(const df_dspark_make_opts *o, df_err *e) {
  df_config t;
  if (df_config_load_dir(&t, o->target_dir, e)) return df_err_prefix(e, "--target %s: ", o->target_dir);
  if (!t.n_mla || t.mla_heads <= 0)
    return df_err_set(e, "--target %s: the target has no MLA layers to take the dimensions from",
                      o->target_dir);
  int taps[64], ntaps = o->ntaps;
  if (ntaps > 0) memcpy(taps, o->taps, sizeof(int) * (size_t)ntaps);
  else ntaps = default_taps(t.n_layers, taps);
  for (int i = 0; i < ntaps; i++)
    if (taps[i] < 0 || taps[i] >= t.n_layers)
      return df_err_set(e, "--taps: layer %d is not a layer of the target (0..%d)", taps[i],
                        t.n_layers - 1);
  if (df_mkdir_p(o->out_dir, e)) return df_err_prefix(e, "--out %s: ", o->out_dir);
  tdef *v = NULL;
  int n = roster(&t, o->layers, ntaps, &v);
  char *wp = df_path_join(o->out_dir, "model.safetensors");
  int rc = write_weights(wp, v, n, o->seed, e);
  free(wp);
  free(v);
  if (rc) return -1;
  /* config.json last: a folder without it is not a checkpoint yet */
  json_t *c = config_json(&t, o, taps, ntaps);
  char *txt = json_dumps(c, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(c);
  char *cp = df_path_join(o->out_dir, "config.json");
  size_t len = strlen(txt);
  txt = df_xrealloc(txt, len + 2);
  txt[len] = '\n';
  rc = df_file_write_atomic(cp, txt, len + 1, e);
  free(cp);
  free(txt);
  return rc;
}

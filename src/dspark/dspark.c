/* The DSpark forward (dspark.h, docs/DSPARK.md). MLA keeps the latent form
 * of the target's (model/k3.h): the cache holds the normalised latent and
 * the rotated k_pe; kv_b is absorbed into each head's query and output, so a
 * context row costs kv_lora + rope floats per layer whatever the heads. */
#include "dspark/dspark.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "format/config.h"
#include "format/safetensors.h"

#define DS_MAX_TAPS 64

typedef struct ds_layer {
  df_wmat qa, qb, kva, kvb, g, o, gate, up, down;
  float *in_norm, *post_norm, *qa_norm, *kva_norm;
} ds_layer;

struct df_dspark {
  char *dir;
  const df_model *target;
  int H, layers, heads, qlr, kvlr, nope, rope, vdim, inter, vocab, block, mask_id, rank;
  int ntaps, taps[DS_MAX_TAPS];
  int gate, fc_norm_on, conf_on, conf_markov;
  float eps, situ_b, situ_lb;
  double theta;
  double *inv_freq; /* rope / 2 */
  df_st_set st;
  int st_open;
  df_wmat fc, mk_down, mk_up, conf_w;
  float *fc_norm, *norm, conf_b;
  ds_layer *L;
  void **owned;
  int nowned;
};

struct df_dspark_state {
  const df_dspark *m;
  int pos, cap;
  float **c; /* per layer [cap][kvlr + rope] */
};

/* ---------------------------------------------------------------- config */

typedef struct cfgctx {
  json_t *root;
  const char *dir;
  df_err *e;
} cfgctx;

static int need(cfgctx *c, const char *key, json_t **v) {
  *v = json_object_get(c->root, key);
  if (!*v || json_is_null(*v))
    return df_err_set(c->e, "dspark: %s/config.json: key '%s' is missing", c->dir, key);
  return 0;
}

static int get_int(cfgctx *c, const char *key, long lo, long hi, int *out) {
  json_t *v;
  if (need(c, key, &v)) return -1;
  if (!json_is_integer(v))
    return df_err_set(c->e, "dspark: %s/config.json: key '%s' must be an integer", c->dir, key);
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return df_err_set(c->e, "dspark: %s/config.json: key '%s' = %lld is out of range [%ld, %ld]",
                      c->dir, key, (long long)x, lo, hi);
  *out = (int)x;
  return 0;
}

static int get_bool(cfgctx *c, const char *key, int def, int *out) {
  json_t *v = json_object_get(c->root, key);
  if (!v || json_is_null(v)) {
    if (def < 0) return need(c, key, &v);
    *out = def;
    return 0;
  }
  if (!json_is_boolean(v))
    return df_err_set(c->e, "dspark: %s/config.json: key '%s' must be true or false", c->dir, key);
  *out = json_is_true(v);
  return 0;
}

static int get_num(cfgctx *c, const char *key, double def, double *out) {
  json_t *v = json_object_get(c->root, key);
  if (!v || json_is_null(v)) {
    if (isnan(def)) return need(c, key, &v);
    *out = def;
    return 0;
  }
  if (!json_is_number(v) || json_number_value(v) <= 0)
    return df_err_set(c->e, "dspark: %s/config.json: key '%s' must be a positive number", c->dir,
                      key);
  *out = json_number_value(v);
  return 0;
}

static int get_str(cfgctx *c, const char *key, const char *want, const char *def) {
  json_t *v = json_object_get(c->root, key);
  const char *s = v && json_is_string(v) ? json_string_value(v) : NULL;
  if (!v || json_is_null(v)) {
    if (!def) return need(c, key, &v);
    s = def;
  }
  if (!s || strcmp(s, want))
    return df_err_set(c->e, "dspark: %s/config.json: key '%s' = %s is not supported (only \"%s\")",
                      c->dir, key, s ? s : "(not a string)", want);
  return 0;
}

/* The config's value for a target dimension must be the loaded target's. */
static int match(cfgctx *c, const char *key, int v, int target) {
  if (v != target)
    return df_err_set(c->e, "dspark: %s/config.json: key '%s' = %d does not match the target "
                            "model's %d", c->dir, key, v, target);
  return 0;
}

static int parse_config(df_dspark *m, const df_config *t, json_t *root, const char *dir,
                        df_err *e) {
  cfgctx c = {root, dir, e};
  int th = 0, tl = 0, tie = 1;
  double eps, b, lb;
  if (get_str(&c, "model_type", "k3_dspark", NULL) ||
      get_int(&c, "hidden_size", 1, 1 << 16, &m->H) || match(&c, "hidden_size", m->H, t->hidden) ||
      get_int(&c, "target_hidden_size", 1, 1 << 16, &th) ||
      match(&c, "target_hidden_size", th, t->hidden) ||
      get_int(&c, "target_num_hidden_layers", 1, DF_MAX_LAYERS, &tl) ||
      match(&c, "target_num_hidden_layers", tl, t->n_layers) ||
      get_int(&c, "vocab_size", 1, 1 << 24, &m->vocab) ||
      match(&c, "vocab_size", m->vocab, t->vocab) ||
      get_int(&c, "num_hidden_layers", 1, 64, &m->layers) ||
      get_int(&c, "num_attention_heads", 1, 1024, &m->heads) ||
      get_int(&c, "q_lora_rank", 1, 1 << 16, &m->qlr) ||
      get_int(&c, "kv_lora_rank", 1, 1 << 16, &m->kvlr) ||
      get_int(&c, "qk_nope_head_dim", 1, 4096, &m->nope) ||
      get_int(&c, "qk_rope_head_dim", 2, 4096, &m->rope) ||
      get_int(&c, "v_head_dim", 1, 4096, &m->vdim) ||
      get_int(&c, "intermediate_size", 1, 1 << 20, &m->inter) ||
      get_int(&c, "block_size", 1, DF_DSPARK_BLOCK_MAX, &m->block) ||
      get_int(&c, "mask_token_id", 0, m->vocab - 1, &m->mask_id) ||
      get_int(&c, "markov_rank", 1, 1 << 16, &m->rank) ||
      get_bool(&c, "mla_use_output_gate", 1, &m->gate) ||
      get_bool(&c, "fc_norm", -1, &m->fc_norm_on) ||
      get_bool(&c, "enable_confidence_head", -1, &m->conf_on) ||
      get_bool(&c, "confidence_head_with_markov", 0, &m->conf_markov) ||
      get_bool(&c, "tie_word_embeddings", 1, &tie) ||
      get_str(&c, "aux_hidden_stream", "hidden", NULL) ||
      get_str(&c, "markov_head_type", "low_rank", NULL) ||
      get_str(&c, "hidden_act", "situ", "situ") ||
      get_num(&c, "rms_norm_eps", NAN, &eps) || get_num(&c, "rope_theta", 10000.0, &m->theta) ||
      get_num(&c, "activation_situ_beta", 4.0, &b) ||
      get_num(&c, "activation_situ_linear_beta", 25.0, &lb))
    return -1;
  if (m->rope % 2)
    return df_err_set(e, "dspark: %s/config.json: key 'qk_rope_head_dim' = %d must be even",
                      dir, m->rope);
  if (!tie)
    return df_err_set(e, "dspark: %s/config.json: key 'tie_word_embeddings' = false is not "
                         "supported (the draft uses the target's embedding and LM head)", dir);
  m->eps = (float)eps;
  m->situ_b = (float)b;
  m->situ_lb = (float)lb;
  json_t *ids;
  if (need(&c, "target_layer_ids", &ids)) return -1;
  size_t n = json_is_array(ids) ? json_array_size(ids) : 0;
  if (n == 0 || n > DS_MAX_TAPS)
    return df_err_set(e, "dspark: %s/config.json: key 'target_layer_ids' must be a list of 1 to "
                         "%d layer indices", dir, DS_MAX_TAPS);
  m->ntaps = (int)n;
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(ids, i);
    long x = json_is_integer(v) ? (long)json_integer_value(v) : -1;
    if (x < 0 || x >= t->n_layers)
      return df_err_set(e, "dspark: %s/config.json: key 'target_layer_ids'[%zu] is not a layer "
                           "of the target (0..%d)", dir, i, t->n_layers - 1);
    for (size_t j = 0; j < i; j++)
      if (m->taps[j] == x)
        return df_err_set(e, "dspark: %s/config.json: key 'target_layer_ids' names layer %ld "
                             "twice", dir, x);
    m->taps[i] = (int)x;
  }
  return 0;
}

/* --------------------------------------------------------------- tensors */

static const df_tensor *find(const df_dspark *m, const char *name, int ndim, int64_t d0,
                             int64_t d1, df_err *e) {
  const df_tensor *t = df_st_set_find(&m->st, name);
  if (!t) {
    df_err_set(e, "dspark: %s: tensor '%s' is missing", m->dir, name);
    return NULL;
  }
  if (t->dtype != DF_DT_BF16 && t->dtype != DF_DT_F32) {
    df_err_set(e, "dspark: %s: tensor '%s' has dtype %s (expected BF16 or F32)", m->dir, name,
               df_dtype_name(t->dtype));
    return NULL;
  }
  if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
    if (ndim == 1)
      df_err_set(e, "dspark: %s: tensor '%s' does not have shape [%lld]", m->dir, name,
                 (long long)d0);
    else
      df_err_set(e, "dspark: %s: tensor '%s' does not have shape [%lld, %lld]", m->dir, name,
                 (long long)d0, (long long)d1);
    return NULL;
  }
  return t;
}

static int mat(const df_dspark *m, df_wmat *w, const char *name, int rows, int cols, df_err *e) {
  const df_tensor *t = find(m, name, 2, rows, cols, e);
  if (!t) return -1;
  *w = (df_wmat){t->dtype == DF_DT_BF16 ? DF_W_BF16 : DF_W_F32, rows, cols, t->data, NULL,
                 df_wmat_new_id()};
  return 0;
}

/* Small vectors widened to fp32 once (the norm kernels read fp32). */
static int vec(df_dspark *m, float **out, const char *name, int n, df_err *e) {
  const df_tensor *t = find(m, name, 1, n, 0, e);
  if (!t) return -1;
  float *v = df_xmalloc(sizeof(float) * (size_t)n);
  for (int i = 0; i < n; i++)
    v[i] = t->dtype == DF_DT_BF16 ? df_kbf16(((const uint16_t *)t->data)[i])
                                  : ((const float *)t->data)[i];
  m->owned = df_xrealloc(m->owned, sizeof(void *) * (size_t)(m->nowned + 1));
  m->owned[m->nowned++] = v;
  *out = v;
  return 0;
}

static int bind(df_dspark *m, df_err *e) {
  int H = m->H, qd = m->heads * (m->nope + m->rope), kvd = m->heads * (m->nope + m->vdim);
  int vd = m->heads * m->vdim;
  char nm[256];
  if (mat(m, &m->fc, "model.fc.weight", H, m->ntaps * H, e) ||
      (m->fc_norm_on && vec(m, &m->fc_norm, "model.fc_norm.weight", H, e)) ||
      vec(m, &m->norm, "model.norm.weight", H, e) ||
      mat(m, &m->mk_down, "model.markov.down_proj.weight", m->rank, H, e) ||
      mat(m, &m->mk_up, "model.markov.up_proj.weight", H, m->rank, e))
    return -1;
  if (m->conf_on) {
    float *bias;
    if (mat(m, &m->conf_w, "model.confidence_head.weight", 1, H, e) ||
        vec(m, &bias, "model.confidence_head.bias", 1, e))
      return -1;
    m->conf_b = bias[0];
  }
  m->L = df_xcalloc((size_t)m->layers, sizeof *m->L);
  for (int i = 0; i < m->layers; i++) {
    ds_layer *l = &m->L[i];
#define P(s) (snprintf(nm, sizeof nm, "model.layers.%d.%s", i, s), nm)
    if (vec(m, &l->in_norm, P("input_layernorm.weight"), H, e) ||
        vec(m, &l->post_norm, P("post_attention_layernorm.weight"), H, e) ||
        mat(m, &l->qa, P("self_attn.q_a_proj.weight"), m->qlr, H, e) ||
        vec(m, &l->qa_norm, P("self_attn.q_a_layernorm.weight"), m->qlr, e) ||
        mat(m, &l->qb, P("self_attn.q_b_proj.weight"), qd, m->qlr, e) ||
        mat(m, &l->kva, P("self_attn.kv_a_proj_with_mqa.weight"), m->kvlr + m->rope, H, e) ||
        vec(m, &l->kva_norm, P("self_attn.kv_a_layernorm.weight"), m->kvlr, e) ||
        mat(m, &l->kvb, P("self_attn.kv_b_proj.weight"), kvd, m->kvlr, e) ||
        (m->gate && mat(m, &l->g, P("self_attn.g_proj.weight"), vd, H, e)) ||
        mat(m, &l->o, P("self_attn.o_proj.weight"), H, vd, e) ||
        mat(m, &l->gate, P("mlp.gate_proj.weight"), m->inter, H, e) ||
        mat(m, &l->up, P("mlp.up_proj.weight"), m->inter, H, e) ||
        mat(m, &l->down, P("mlp.down_proj.weight"), H, m->inter, e))
      return -1;
#undef P
  }
  return 0;
}

int df_dspark_is_dir(const char *dir) {
  char *p = df_path_join(dir, "config.json");
  json_t *root = json_load_file(p, 0, NULL);
  free(p);
  json_t *mt = root ? json_object_get(root, "model_type") : NULL;
  int yes = json_is_string(mt) && !strcmp(json_string_value(mt), "k3_dspark");
  json_decref(root);
  return yes;
}

static int load(df_dspark **out, const char *dir, const df_model *target, const df_config *tc,
                df_err *e) {
  *out = NULL;
  df_dspark *m = df_xcalloc(1, sizeof *m);
  m->dir = df_xstrdup(dir);
  m->target = target;
  char *p = df_path_join(dir, "config.json");
  json_error_t je;
  json_t *root = json_load_file(p, 0, &je);
  free(p);
  int rc = -1;
  if (!root) df_err_set(e, "dspark: %s/config.json: %s (line %d)", dir, je.text, je.line);
  else if (!json_is_object(root)) df_err_set(e, "dspark: %s/config.json: not a JSON object", dir);
  else rc = parse_config(m, tc, root, dir, e);
  json_decref(root);
  if (rc) goto fail;
  if (df_st_set_open(&m->st, dir, e)) {
    df_err_prefix(e, "dspark: ");
    goto fail;
  }
  m->st_open = 1;
  if (bind(m, e)) goto fail;
  int half = m->rope / 2;
  m->inv_freq = df_xmalloc(sizeof(double) * (size_t)half);
  for (int i = 0; i < half; i++) m->inv_freq[i] = pow(m->theta, -2.0 * i / m->rope);
  *out = m;
  return 0;
fail:
  df_dspark_free(m);
  return -1;
}

int df_dspark_load(df_dspark **out, const char *dir, const df_model *target, df_err *e) {
  *out = NULL;
  if (!df_model_config(target))
    return df_err_set(e, "dspark: %s: the target (%s) is not a K3 model", dir, df_model_family(target));
  return load(out, dir, target, df_model_config(target), e);
}

int df_dspark_check(const char *dir, const df_config *target, df_err *e) {
  df_dspark *m;
  if (load(&m, dir, NULL, target, e)) return -1;
  df_dspark_free(m);
  return 0;
}

void df_dspark_free(df_dspark *m) {
  if (!m) return;
  for (int i = 0; i < m->nowned; i++) free(m->owned[i]);
  free(m->owned);
  free(m->L);
  free(m->inv_freq);
  if (m->st_open) df_st_set_close(&m->st);
  free(m->dir);
  free(m);
}

int df_dspark_block_size(const df_dspark *m) { return m->block; }
int df_dspark_n_taps(const df_dspark *m) { return m->ntaps; }

void df_dspark_mem(const df_dspark *m, uint64_t *weights, uint64_t *per_pos) {
  uint64_t w = 0;
  for (int i = 0; i < m->st.ntensors; i++) w += m->st.all[i]->nbytes;
  *weights = w;
  *per_pos = (uint64_t)m->layers * (uint64_t)(m->kvlr + m->rope) * sizeof(float);
}
const int *df_dspark_taps(const df_dspark *m) { return m->taps; }

void df_dspark_shape(const df_dspark *m, df_model_shape *out) {
  *out = (df_model_shape){.vocab = m->vocab, .hidden = m->H, .layers = m->layers,
                          .eos = m->target ? df_model_eos(m->target) : -1};
}

int df_dspark_ctx_limit(const df_dspark *m) { return m->target ? df_model_ctx_limit(m->target) : 0; }

/* ----------------------------------------------------------------- state */

df_dspark_state *df_dspark_state_new(const df_dspark *m) {
  df_dspark_state *s = df_xcalloc(1, sizeof *s);
  s->m = m;
  s->c = df_xcalloc((size_t)m->layers, sizeof *s->c);
  return s;
}

void df_dspark_state_free(df_dspark_state *s) {
  if (!s) return;
  for (int i = 0; i < s->m->layers; i++) free(s->c[i]);
  free(s->c);
  free(s);
}

int df_dspark_state_pos(const df_dspark_state *s) { return s->pos; }

void df_dspark_state_truncate(df_dspark_state *s, int pos) {
  if (pos >= 0 && pos < s->pos) s->pos = pos;
}

static void reserve(df_dspark_state *s, int n) {
  if (n <= s->cap) return;
  int cap = s->cap ? s->cap : 64;
  while (cap < n) cap *= 2;
  size_t w = (size_t)(s->m->kvlr + s->m->rope);
  for (int i = 0; i < s->m->layers; i++)
    s->c[i] = df_xrealloc(s->c[i], sizeof(float) * (size_t)cap * w);
  s->cap = cap;
}

/* Bytes of one position's latent row in one layer. */
static size_t latent_row(const df_dspark *m) { return sizeof(float) * (size_t)(m->kvlr + m->rope); }

size_t df_dspark_state_bytes(const df_dspark_state *s) {
  return (size_t)s->pos * (size_t)s->m->layers * latent_row(s->m);
}

void df_dspark_state_copy(df_dspark_state *dst, const df_dspark_state *src) {
  reserve(dst, src->pos);
  for (int i = 0; i < src->m->layers && src->pos > 0; i++)
    memcpy(dst->c[i], src->c[i], (size_t)src->pos * latent_row(src->m));
  dst->pos = src->pos;
}

df_dspark_state *df_dspark_state_clone(const df_dspark_state *s) {
  df_dspark_state *c = df_dspark_state_new(s->m);
  df_dspark_state_copy(c, s);
  return c;
}

/* --------------------------------------------------------------- forward */

/* Rotate-half RoPE of one d-vector at position pos (pairs i, i + d/2); the
 * angles in double so they do not depend on how pos was reached. */
static void rope(const df_dspark *m, float *x, int pos) {
  int half = m->rope / 2;
  for (int i = 0; i < half; i++) {
    double a = pos * m->inv_freq[i];
    float c = (float)cos(a), s = (float)sin(a);
    float x0 = x[i], x1 = x[i + half];
    x[i] = x0 * c - x1 * s;
    x[i + half] = x1 * c + x0 * s;
  }
}

static void rms_rows(const df_kern *k, float *y, const float *x, const float *w, int T, int n,
                     float eps, size_t ldy, size_t ldx) {
  for (int t = 0; t < T; t++) k->rmsnorm(y + (size_t)t * ldy, x + (size_t)t * ldx, w, n, eps);
}

/* Latent rows (normalised latent | rotated k_pe) of layer l for T inputs
 * xn (already normalised with the layer's input norm) at pos0... */
static void latents(const df_dspark *m, const df_kctx *kc, const ds_layer *l, const float *xn,
                    int T, int pos0, float *dst) {
  size_t w = (size_t)(m->kvlr + m->rope);
  df_mm(kc, &l->kva, xn, T, (size_t)m->H, dst, w);
  for (int t = 0; t < T; t++) {
    float *r = dst + (size_t)t * w;
    kc->k->rmsnorm(r, r, l->kva_norm, m->kvlr, m->eps);
    rope(m, r + m->kvlr, pos0 + t);
  }
}

int df_dspark_context(const df_dspark *m, const df_kctx *kc, df_dspark_state *s,
                      const float *taps, int T, df_err *e) {
  (void)e;
  if (T <= 0) return 0;
  int H = m->H;
  reserve(s, s->pos + T);
  float *f = df_xmalloc(sizeof(float) * (size_t)T * H * 2), *xn = f + (size_t)T * H;
  df_mm(kc, &m->fc, taps, T, (size_t)m->ntaps * H, f, (size_t)H);
  if (m->fc_norm_on) rms_rows(kc->k, f, f, m->fc_norm, T, H, m->eps, H, H);
  size_t w = (size_t)(m->kvlr + m->rope);
  for (int i = 0; i < m->layers; i++) {
    rms_rows(kc->k, xn, f, m->L[i].in_norm, T, H, m->eps, H, H);
    latents(m, kc, &m->L[i], xn, T, s->pos, s->c[i] + (size_t)s->pos * w);
  }
  free(f);
  s->pos += T;
  return 0;
}

/* Scratch of one block pass. */
typedef struct blk {
  float *h, *xn, *qa, *q, *lat, *g, *o, *a, *f1, *f2, *ql, *sc, *ol;
} blk;

/* MLA of one layer over the block rows (T of them at positions n..n+T-1)
 * against the n context rows and all T block rows (non-causal). */
static void mla(const df_dspark *m, const df_kctx *kc, const df_dspark_state *s, int li,
                const blk *b, int T) {
  const ds_layer *l = &m->L[li];
  const df_kern *k = kc->k;
  int n = s->pos, H = m->H, qh = m->nope + m->rope, kvh = m->nope + m->vdim;
  size_t w = (size_t)(m->kvlr + m->rope), vd = (size_t)m->heads * m->vdim;
  df_mm(kc, &l->qa, b->xn, T, (size_t)H, b->qa, (size_t)m->qlr);
  rms_rows(k, b->qa, b->qa, l->qa_norm, T, m->qlr, m->eps, m->qlr, m->qlr);
  df_mm(kc, &l->qb, b->qa, T, (size_t)m->qlr, b->q, (size_t)m->heads * qh);
  latents(m, kc, l, b->xn, T, n, b->lat);
  float scale = 1.0f / sqrtf((float)qh);
  const float *ctx = s->c[li];
  for (int t = 0; t < T; t++) {
    for (int hd = 0; hd < m->heads; hd++) {
      float *q = b->q + (size_t)t * m->heads * qh + (size_t)hd * qh;
      rope(m, q + m->nope, n + t);
      /* q_nope through the head's key rows of kv_b: a query on the latent */
      df_wmat_t(k, &l->kvb, hd * kvh, hd * kvh + m->nope, q, b->ql);
      for (int j = 0; j < n + T; j++) {
        const float *r = j < n ? ctx + (size_t)j * w : b->lat + (size_t)(j - n) * w;
        b->sc[j] = (k->dot(b->ql, r, m->kvlr) + k->dot(q + m->nope, r + m->kvlr, m->rope)) * scale;
      }
      k->softmax(b->sc, n + T);
      memset(b->ol, 0, sizeof(float) * (size_t)m->kvlr);
      for (int j = 0; j < n + T; j++) {
        const float *r = j < n ? ctx + (size_t)j * w : b->lat + (size_t)(j - n) * w;
        for (int c = 0; c < m->kvlr; c++) b->ol[c] += b->sc[j] * r[c];
      }
      /* the head's value rows of kv_b on the attended latent */
      df_wmat_rows(k, &l->kvb, hd * kvh + m->nope, (hd + 1) * kvh, b->ol, 1, (size_t)m->kvlr,
                   b->o + (size_t)t * vd + (size_t)hd * m->vdim, vd);
    }
  }
  if (m->gate) {
    df_mm(kc, &l->g, b->xn, T, (size_t)H, b->g, vd);
    k->sigmoid(b->g, (int)(T * vd));
    for (size_t i = 0; i < T * vd; i++) b->o[i] *= b->g[i];
  }
  df_mm(kc, &l->o, b->o, T, vd, b->a, (size_t)H);
}

int df_dspark_propose(const df_dspark *m, const df_kctx *kc, const df_dspark_state *s, int x,
                      int kk, float cut, int *out, float *conf, float *logits, df_err *e) {
  if (kk > m->block) kk = m->block;
  if (kk <= 0) return 0;
  if (x < 0 || x >= m->vocab)
    return df_err_set(e, "dspark: token id %d is outside the vocabulary (%d)", x, m->vocab);
  const df_kern *k = kc->k;
  int T = kk + 1, H = m->H, n = s->pos, V = m->vocab;
  size_t vd = (size_t)m->heads * m->vdim, w = (size_t)(m->kvlr + m->rope);
  blk b;
  b.h = df_xmalloc(sizeof(float) * (size_t)T * H);
  b.xn = df_xmalloc(sizeof(float) * (size_t)T * H);
  b.a = df_xmalloc(sizeof(float) * (size_t)T * H);
  b.qa = df_xmalloc(sizeof(float) * (size_t)T * m->qlr);
  b.q = df_xmalloc(sizeof(float) * (size_t)T * m->heads * (m->nope + m->rope));
  b.lat = df_xmalloc(sizeof(float) * (size_t)T * w);
  b.g = df_xmalloc(sizeof(float) * (size_t)T * vd);
  b.o = df_xmalloc(sizeof(float) * (size_t)T * vd);
  b.f1 = df_xmalloc(sizeof(float) * (size_t)T * m->inter);
  b.f2 = df_xmalloc(sizeof(float) * (size_t)T * m->inter);
  b.ql = df_xmalloc(sizeof(float) * (size_t)m->kvlr * 2);
  b.ol = b.ql + m->kvlr;
  b.sc = df_xmalloc(sizeof(float) * (size_t)(n + T));
  float *lg = df_xmalloc(sizeof(float) * (size_t)V);
  float *u = df_xmalloc(sizeof(float) * (size_t)(3 * H + m->rank));
  float *emb = u + H, *hn = emb + H, *r = hn + H;
  int ids[DF_DSPARK_BLOCK_MAX + 1], got = 0, rc = -1;
  ids[0] = x;
  for (int j = 1; j < T; j++) ids[j] = m->mask_id;
  if (df_model_embed(m->target, ids, T, b.h, e)) goto out;
  for (int i = 0; i < m->layers; i++) {
    const ds_layer *l = &m->L[i];
    rms_rows(k, b.xn, b.h, l->in_norm, T, H, m->eps, H, H);
    mla(m, kc, s, i, &b, T);
    for (size_t c = 0; c < (size_t)T * H; c++) b.h[c] += b.a[c];
    rms_rows(k, b.xn, b.h, l->post_norm, T, H, m->eps, H, H);
    df_mm(kc, &l->gate, b.xn, T, (size_t)H, b.f1, (size_t)m->inter);
    df_mm(kc, &l->up, b.xn, T, (size_t)H, b.f2, (size_t)m->inter);
    for (int t = 0; t < T; t++)
      k->situ(b.f1 + (size_t)t * m->inter, b.f1 + (size_t)t * m->inter,
              b.f2 + (size_t)t * m->inter, m->inter, m->situ_b, m->situ_lb);
    df_mm(kc, &l->down, b.f1, T, (size_t)m->inter, b.a, (size_t)H);
    for (size_t c = 0; c < (size_t)T * H; c++) b.h[c] += b.a[c];
  }
  /* heads, in order: each position's Markov term reads the proposal before it */
  double prod = 1.0;
  int prev = x;
  for (int j = 1; j < T; j++) {
    k->rmsnorm(hn, b.h + (size_t)j * H, m->norm, H, m->eps);
    if (df_model_embed(m->target, &prev, 1, emb, e)) goto out;
    df_mm(kc, &m->mk_down, emb, 1, (size_t)H, r, (size_t)m->rank);
    df_mm(kc, &m->mk_up, r, 1, (size_t)m->rank, u, (size_t)H);
    for (int c = 0; c < H; c++) u[c] += hn[c];
    if (df_model_lm_head(m->target, kc, u, 1, lg, e)) goto out;
    if (logits) memcpy(logits + (size_t)(j - 1) * V, lg, sizeof(float) * (size_t)V);
    out[got++] = prev = df_argmax(lg, V);
    float cj = -1.0f;
    if (m->conf_on) {
      float z;
      df_mm(kc, &m->conf_w, m->conf_markov ? u : hn, 1, (size_t)H, &z, 1);
      z += m->conf_b;
      k->sigmoid(&z, 1);
      cj = z;
    }
    if (conf) conf[j - 1] = cj;
    if (cut > 0 && m->conf_on && (prod *= cj) < cut) {
      if (got > 1) got--; /* from here on the target likely rejects; one id at least */
      break;
    }
  }
  rc = got;
out:
  free(b.h), free(b.xn), free(b.a), free(b.qa), free(b.q), free(b.lat), free(b.g), free(b.o);
  free(b.f1), free(b.f2), free(b.ql), free(b.sc), free(lg), free(u);
  return rc;
}

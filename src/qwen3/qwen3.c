/* The dense Qwen3 forward pass (see qwen3.h). Per layer:
 *   h = x + o_proj(attn(rope(q_norm(q_proj n)), rope(k_norm(k_proj n)), v_proj n)), n = rms(x)
 *   x = h + down(silu(gate m) * up m), m = rms(h)
 * then the final norm and lm_head (the embedding when tied).
 *
 * Every step is row-local except attention, and attention for row t reads
 * the cache rows 0..t in ascending order, so a row's result does not depend
 * on which other rows share the forward call. */
#include "qwen3/qwen3.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "format/codec.h"
#include "format/safetensors.h"

typedef struct q3_layer {
  df_wmat q, k, v, o, gate, up, down;
  float *in_norm, *post_norm, *q_norm, *k_norm; /* fp32 copies of the norm weights */
} q3_layer;

struct df_qwen3 {
  char *dir;
  int hidden, layers, heads, kv_heads, head_dim, inter, vocab, max_pos, eos, tied;
  float eps;
  double theta;
  double *inv_freq; /* head_dim / 2 RoPE frequencies, theta^(-2i/head_dim) */
  df_st_set st;
  df_wmat embed, lm_head;
  float *final_norm;
  q3_layer *L;
  void **owned; /* row-int8 copies (codes, scales) made by df_qwen3_quantize_int8 */
  int nowned;
};

struct df_qwen3_state {
  const df_qwen3 *m;
  int pos, cap; /* positions held, positions allocated */
  float **k, **v; /* per layer [cap][kv_heads][head_dim] */
  /* per-call buffers, grown to the largest T seen */
  int tcap;
  float *x, *n, *q, *kk, *vv, *att, *g, *u, *tmp;
  float *scores; /* per thread: one row of attention scores */
  size_t scores_cap;
};

/* ---------------------------------------------------------------- config */

static int cfg_int(json_t *root, const char *dir, const char *key, long lo, long hi, int def,
                   int *out, df_err *e) {
  json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) {
    if (def == INT32_MIN)
      return df_err_set(e, "qwen3: %s/config.json: field '%s' is missing", dir, key);
    *out = def;
    return 0;
  }
  if (!json_is_integer(v))
    return df_err_set(e, "qwen3: %s/config.json: field '%s' must be an integer", dir, key);
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return df_err_set(e, "qwen3: %s/config.json: field '%s' = %lld is out of range [%ld, %ld]",
                      dir, key, (long long)x, lo, hi);
  *out = (int)x;
  return 0;
}

/* eos_token_id as an integer or the first of a list; -1 when absent. */
static int eos_of(json_t *root) {
  json_t *v = root ? json_object_get(root, "eos_token_id") : NULL;
  if (v && json_is_array(v)) v = json_array_get(v, 0);
  return v && json_is_integer(v) ? (int)json_integer_value(v) : -1;
}

static int parse_config(df_qwen3 *m, const char *dir, df_err *e) {
  char *path = df_path_join(dir, "config.json");
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  free(path);
  if (!root) return df_err_set(e, "qwen3: %s/config.json: %s (line %d)", dir, je.text, je.line);
  int rc = -1;
  if (!json_is_object(root)) {
    df_err_set(e, "qwen3: %s/config.json: not a JSON object", dir);
    goto out;
  }
  json_t *mt = json_object_get(root, "model_type");
  if (!json_is_string(mt) || strcmp(json_string_value(mt), "qwen3")) {
    df_err_set(e, "qwen3: %s/config.json: field 'model_type' must be \"qwen3\"", dir);
    goto out;
  }
  if (cfg_int(root, dir, "hidden_size", 1, 1 << 16, INT32_MIN, &m->hidden, e) ||
      cfg_int(root, dir, "num_hidden_layers", 1, 1024, INT32_MIN, &m->layers, e) ||
      cfg_int(root, dir, "num_attention_heads", 1, 1024, INT32_MIN, &m->heads, e) ||
      cfg_int(root, dir, "num_key_value_heads", 1, 1024, m->heads, &m->kv_heads, e) ||
      cfg_int(root, dir, "intermediate_size", 1, 1 << 20, INT32_MIN, &m->inter, e) ||
      cfg_int(root, dir, "vocab_size", 1, 1 << 24, INT32_MIN, &m->vocab, e) ||
      cfg_int(root, dir, "max_position_embeddings", 1, 1 << 24, 40960, &m->max_pos, e))
    goto out;
  /* transformers' default head_dim is hidden / heads when the field is absent */
  if (cfg_int(root, dir, "head_dim", 2, 4096, m->hidden / m->heads, &m->head_dim, e)) goto out;
  if (m->head_dim % 2) {
    df_err_set(e, "qwen3: %s/config.json: field 'head_dim' = %d must be even (RoPE pairs)", dir,
               m->head_dim);
    goto out;
  }
  if (m->heads % m->kv_heads) {
    df_err_set(e,
               "qwen3: %s/config.json: field 'num_attention_heads' = %d is not a multiple of "
               "'num_key_value_heads' = %d",
               dir, m->heads, m->kv_heads);
    goto out;
  }
  json_t *eps = json_object_get(root, "rms_norm_eps");
  if (!eps || !json_is_number(eps) || json_number_value(eps) <= 0) {
    df_err_set(e, "qwen3: %s/config.json: field 'rms_norm_eps' must be a positive number", dir);
    goto out;
  }
  m->eps = (float)json_number_value(eps);
  /* rope_theta at the top level (transformers < 5) or in rope_parameters (5.x) */
  json_t *rp = json_object_get(root, "rope_parameters");
  json_t *th = json_object_get(root, "rope_theta");
  if ((!th || json_is_null(th)) && json_is_object(rp)) th = json_object_get(rp, "rope_theta");
  if (!th || !json_is_number(th) || json_number_value(th) <= 1) {
    df_err_set(e,
               "qwen3: %s/config.json: field 'rope_theta' (or 'rope_parameters.rope_theta') "
               "must be a number > 1",
               dir);
    goto out;
  }
  m->theta = json_number_value(th);
  /* variants this code does not compute must be refused, not silently ignored */
  json_t *rs = json_object_get(root, "rope_scaling");
  json_t *rt = json_is_object(rp) ? json_object_get(rp, "rope_type") : NULL;
  if (json_is_object(rs)) rt = json_object_get(rs, "rope_type") ? json_object_get(rs, "rope_type")
                                                               : json_object_get(rs, "type");
  if (rt && !json_is_null(rt) &&
      !(json_is_string(rt) && !strcmp(json_string_value(rt), "default"))) {
    df_err_set(e, "qwen3: %s/config.json: rope_type '%s' is not supported (only default RoPE)",
               dir, json_is_string(rt) ? json_string_value(rt) : "?");
    goto out;
  }
  json_t *ab = json_object_get(root, "attention_bias");
  if (ab && json_is_true(ab)) {
    df_err_set(e, "qwen3: %s/config.json: field 'attention_bias' = true is not supported", dir);
    goto out;
  }
  json_t *sw = json_object_get(root, "use_sliding_window");
  if (sw && json_is_true(sw)) {
    df_err_set(e, "qwen3: %s/config.json: field 'use_sliding_window' = true is not supported",
               dir);
    goto out;
  }
  /* transformers 5 names each layer's attention; a sliding one would need a window here */
  json_t *lt = json_object_get(root, "layer_types");
  size_t li;
  json_t *lv;
  json_array_foreach(json_is_array(lt) ? lt : NULL, li, lv) {
    if (!json_is_string(lv) || strcmp(json_string_value(lv), "full_attention")) {
      df_err_set(e, "qwen3: %s/config.json: layer_types[%zu] is not \"full_attention\"", dir, li);
      goto out;
    }
  }
  json_t *act = json_object_get(root, "hidden_act");
  if (act && !(json_is_string(act) && !strcmp(json_string_value(act), "silu"))) {
    df_err_set(e, "qwen3: %s/config.json: field 'hidden_act' must be \"silu\"", dir);
    goto out;
  }
  json_t *tie = json_object_get(root, "tie_word_embeddings");
  if (tie && !json_is_boolean(tie)) {
    df_err_set(e, "qwen3: %s/config.json: field 'tie_word_embeddings' must be a boolean", dir);
    goto out;
  }
  /* Qwen3Config's default is untied; the small releases set it to true */
  m->tied = tie && json_is_true(tie);
  m->eos = eos_of(root);
  if (m->eos < 0) {
    char *gp = df_path_join(dir, "generation_config.json");
    json_t *g = json_load_file(gp, 0, &je);
    free(gp);
    m->eos = eos_of(g);
    json_decref(g);
  }
  rc = 0;
out:
  json_decref(root);
  return rc;
}

/* --------------------------------------------------------------- tensors */

static const df_tensor *tensor_shaped(const df_qwen3 *m, const char *name, int ndim, int64_t d0,
                                      int64_t d1, df_err *e) {
  const df_tensor *t = df_st_set_find(&m->st, name);
  if (!t) {
    df_err_set(e, "qwen3: %s: tensor '%s' is missing", m->dir, name);
    return NULL;
  }
  if (t->dtype != DF_DT_BF16 && t->dtype != DF_DT_F32) {
    df_err_set(e, "qwen3: %s: tensor '%s' has dtype %s (expected BF16 or F32)", m->dir, name,
               df_dtype_name(t->dtype));
    return NULL;
  }
  int ok = t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1);
  if (!ok) {
    char got[128] = "";
    size_t o = 0;
    for (int i = 0; i < t->ndim && o < sizeof got - 24; i++)
      o += (size_t)snprintf(got + o, sizeof got - o, "%s%lld", i ? ", " : "",
                            (long long)t->shape[i]);
    if (ndim == 1)
      df_err_set(e, "qwen3: %s: tensor '%s' has shape [%s] (expected [%lld])", m->dir, name, got,
                 (long long)d0);
    else
      df_err_set(e, "qwen3: %s: tensor '%s' has shape [%s] (expected [%lld, %lld])", m->dir, name,
                 got, (long long)d0, (long long)d1);
    return NULL;
  }
  return t;
}

static int bind_mat(const df_qwen3 *m, df_wmat *w, const char *name, int rows, int cols,
                    df_err *e) {
  const df_tensor *t = tensor_shaped(m, name, 2, rows, cols, e);
  if (!t) return -1;
  w->kind = t->dtype == DF_DT_BF16 ? DF_W_BF16 : DF_W_F32;
  w->rows = rows;
  w->cols = cols;
  w->w = t->data;
  w->scale = NULL;
  w->id = df_wmat_new_id();
  return 0;
}

/* Norm weights are small and read by the fp32 rmsnorm kernel: widened once. */
static int bind_vec(const df_qwen3 *m, float **out, const char *name, int n, df_err *e) {
  const df_tensor *t = tensor_shaped(m, name, 1, n, 0, e);
  if (!t) return -1;
  float *v = df_xmalloc((size_t)n * sizeof *v);
  if (t->dtype == DF_DT_BF16) {
    const uint16_t *h = t->data;
    for (int i = 0; i < n; i++) v[i] = df_kbf16(h[i]);
  } else {
    memcpy(v, t->data, (size_t)n * sizeof *v);
  }
  *out = v;
  return 0;
}

static int bind_weights(df_qwen3 *m, int tied, df_err *e) {
  char nm[256];
  int H = m->hidden, qd = m->heads * m->head_dim, kd = m->kv_heads * m->head_dim;
  if (bind_mat(m, &m->embed, "model.embed_tokens.weight", m->vocab, H, e)) return -1;
  if (bind_vec(m, &m->final_norm, "model.norm.weight", H, e)) return -1;
  if (tied)
    m->lm_head = m->embed;
  else if (bind_mat(m, &m->lm_head, "lm_head.weight", m->vocab, H, e))
    return -1;
  m->L = df_xcalloc((size_t)m->layers, sizeof *m->L);
  for (int i = 0; i < m->layers; i++) {
    q3_layer *l = &m->L[i];
#define P(suffix) (snprintf(nm, sizeof nm, "model.layers.%d.%s", i, suffix), nm)
    if (bind_mat(m, &l->q, P("self_attn.q_proj.weight"), qd, H, e) ||
        bind_mat(m, &l->k, P("self_attn.k_proj.weight"), kd, H, e) ||
        bind_mat(m, &l->v, P("self_attn.v_proj.weight"), kd, H, e) ||
        bind_mat(m, &l->o, P("self_attn.o_proj.weight"), H, qd, e) ||
        bind_mat(m, &l->gate, P("mlp.gate_proj.weight"), m->inter, H, e) ||
        bind_mat(m, &l->up, P("mlp.up_proj.weight"), m->inter, H, e) ||
        bind_mat(m, &l->down, P("mlp.down_proj.weight"), H, m->inter, e) ||
        bind_vec(m, &l->in_norm, P("input_layernorm.weight"), H, e) ||
        bind_vec(m, &l->post_norm, P("post_attention_layernorm.weight"), H, e) ||
        bind_vec(m, &l->q_norm, P("self_attn.q_norm.weight"), m->head_dim, e) ||
        bind_vec(m, &l->k_norm, P("self_attn.k_norm.weight"), m->head_dim, e))
      return -1;
#undef P
  }
  return 0;
}

int df_qwen3_load(df_qwen3 **out, const char *dir, df_err *e) {
  *out = NULL;
  df_qwen3 *m = df_xcalloc(1, sizeof *m);
  m->dir = df_xstrdup(dir);
  if (parse_config(m, dir, e)) goto fail;
  if (df_st_set_open(&m->st, dir, e)) {
    df_err_prefix(e, "qwen3: ");
    goto fail;
  }
  if (bind_weights(m, m->tied, e)) goto fail;
  int half = m->head_dim / 2;
  m->inv_freq = df_xmalloc((size_t)half * sizeof *m->inv_freq);
  for (int i = 0; i < half; i++) m->inv_freq[i] = pow(m->theta, -2.0 * i / m->head_dim);
  *out = m;
  return 0;
fail:
  df_qwen3_free(m);
  return -1;
}

static void quantize(df_qwen3 *m, df_wmat *w, float *row) {
  int8_t *q = df_xmalloc((size_t)w->rows * w->cols);
  float *sc = df_xmalloc((size_t)w->rows * sizeof *sc);
  for (int r = 0; r < w->rows; r++) {
    df_wmat_row(w, r, row);
    df_int8_quant_row(row, w->cols, q + (size_t)r * w->cols, &sc[r]);
  }
  m->owned = df_xrealloc(m->owned, (size_t)(m->nowned + 2) * sizeof *m->owned);
  m->owned[m->nowned++] = q;
  m->owned[m->nowned++] = sc;
  *w = (df_wmat){.kind = DF_W_I8, .rows = w->rows, .cols = w->cols, .w = q, .scale = sc,
                    .id = df_wmat_new_id()};
}

void df_qwen3_quantize_int8(df_qwen3 *m) {
  if (m->lm_head.kind == DF_W_I8) return;
  int wide = m->hidden > m->inter ? m->hidden : m->inter;
  if (m->heads * m->head_dim > wide) wide = m->heads * m->head_dim;
  float *row = df_xmalloc((size_t)wide * sizeof *row);
  for (int i = 0; i < m->layers; i++) {
    q3_layer *l = &m->L[i];
    df_wmat *ws[] = {&l->q, &l->k, &l->v, &l->o, &l->gate, &l->up, &l->down};
    for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++) quantize(m, ws[j], row);
  }
  quantize(m, &m->lm_head, row); /* a copy when tied: embed keeps the exact rows */
  free(row);
}

void df_qwen3_free(df_qwen3 *m) {
  if (!m) return;
  for (int i = 0; i < m->nowned; i++) free(m->owned[i]);
  free(m->owned);
  if (m->L)
    for (int i = 0; i < m->layers; i++) {
      free(m->L[i].in_norm);
      free(m->L[i].post_norm);
      free(m->L[i].q_norm);
      free(m->L[i].k_norm);
    }
  free(m->L);
  free(m->final_norm);
  free(m->inv_freq);
  df_st_set_close(&m->st);
  free(m->dir);
  free(m);
}

int df_qwen3_vocab(const df_qwen3 *m) { return m->vocab; }
int df_qwen3_hidden(const df_qwen3 *m) { return m->hidden; }
int df_qwen3_layers(const df_qwen3 *m) { return m->layers; }
int df_qwen3_eos(const df_qwen3 *m) { return m->eos; }
int df_qwen3_max_pos(const df_qwen3 *m) { return m->max_pos; }

void df_qwen3_mem(const df_qwen3 *m, uint64_t *weights, uint64_t *per_pos) {
  uint64_t w = 0;
  for (int i = 0; i < m->st.ntensors; i++) w += m->st.all[i]->nbytes;
  *weights = w;
  *per_pos = (uint64_t)m->layers * 2 * (uint64_t)m->kv_heads * (uint64_t)m->head_dim * sizeof(float);
}

/* ----------------------------------------------------------------- state */

df_qwen3_state *df_qwen3_state_new(const df_qwen3 *m) {
  df_qwen3_state *s = df_xcalloc(1, sizeof *s);
  s->m = m;
  s->k = df_xcalloc((size_t)m->layers, sizeof *s->k);
  s->v = df_xcalloc((size_t)m->layers, sizeof *s->v);
  return s;
}

void df_qwen3_state_free(df_qwen3_state *s) {
  if (!s) return;
  for (int i = 0; i < s->m->layers; i++) {
    free(s->k[i]);
    free(s->v[i]);
  }
  free(s->k);
  free(s->v);
  free(s->x);
  free(s->n);
  free(s->q);
  free(s->kk);
  free(s->vv);
  free(s->att);
  free(s->g);
  free(s->u);
  free(s->tmp);
  free(s->scores);
  free(s);
}

void df_qwen3_state_reset(df_qwen3_state *s) { s->pos = 0; }
int df_qwen3_state_pos(const df_qwen3_state *s) { return s->pos; }
void df_qwen3_state_truncate(df_qwen3_state *s, int pos) {
  if (pos >= 0 && pos < s->pos) s->pos = pos;
}

/* Bytes of one position's keys and values in one layer. */
static size_t kv_row(const df_qwen3 *m) { return (size_t)m->kv_heads * m->head_dim * sizeof(float); }

size_t df_qwen3_state_bytes(const df_qwen3_state *s) {
  return (size_t)s->pos * (size_t)s->m->layers * 2 * kv_row(s->m);
}

/* dst's cache grows to src's positions (no scratch: the next forward sizes
 * it), then takes src's rows; rows past pos are never read. */
void df_qwen3_state_copy(df_qwen3_state *dst, const df_qwen3_state *src) {
  const df_qwen3 *m = src->m;
  if (src->pos > dst->cap) {
    for (int i = 0; i < m->layers; i++) {
      dst->k[i] = df_xrealloc(dst->k[i], (size_t)src->pos * kv_row(m));
      dst->v[i] = df_xrealloc(dst->v[i], (size_t)src->pos * kv_row(m));
    }
    dst->cap = src->pos;
  }
  for (int i = 0; i < m->layers && src->pos > 0; i++) {
    memcpy(dst->k[i], src->k[i], (size_t)src->pos * kv_row(m));
    memcpy(dst->v[i], src->v[i], (size_t)src->pos * kv_row(m));
  }
  dst->pos = src->pos;
}

df_qwen3_state *df_qwen3_state_clone(const df_qwen3_state *s) {
  df_qwen3_state *c = df_qwen3_state_new(s->m);
  df_qwen3_state_copy(c, s);
  return c;
}

static void state_reserve(df_qwen3_state *s, int need, int T, int nthr) {
  const df_qwen3 *m = s->m;
  if (need > s->cap) {
    int c = s->cap ? s->cap : 64;
    while (c < need) c *= 2;
    if (c > m->max_pos) c = m->max_pos;
    size_t row = (size_t)m->kv_heads * m->head_dim * sizeof(float);
    for (int i = 0; i < m->layers; i++) {
      s->k[i] = df_xrealloc(s->k[i], (size_t)c * row);
      s->v[i] = df_xrealloc(s->v[i], (size_t)c * row);
    }
    s->cap = c;
  }
  if (T > s->tcap) {
    size_t t = (size_t)T, H = (size_t)m->hidden, qd = (size_t)m->heads * m->head_dim,
           kd = (size_t)m->kv_heads * m->head_dim, I = (size_t)m->inter;
    s->x = df_xrealloc(s->x, t * H * sizeof(float));
    s->n = df_xrealloc(s->n, t * H * sizeof(float));
    s->tmp = df_xrealloc(s->tmp, t * H * sizeof(float));
    s->q = df_xrealloc(s->q, t * qd * sizeof(float));
    s->att = df_xrealloc(s->att, t * qd * sizeof(float));
    s->kk = df_xrealloc(s->kk, t * kd * sizeof(float));
    s->vv = df_xrealloc(s->vv, t * kd * sizeof(float));
    s->g = df_xrealloc(s->g, t * I * sizeof(float));
    s->u = df_xrealloc(s->u, t * I * sizeof(float));
    s->tcap = T;
  }
  size_t sc = (size_t)nthr * (size_t)s->cap;
  if (sc > s->scores_cap) {
    s->scores = df_xrealloc(s->scores, sc * sizeof(float));
    s->scores_cap = sc;
  }
}

/* --------------------------------------------------------------- forward */

/* HF's rotate-half RoPE on one head: the pair is (i, i + d/2), not (2i, 2i+1).
 * The angle is computed in double and rounded once, so it does not depend on
 * how the position was reached. */
static void rope_head(const df_qwen3 *m, float *x, int pos) {
  int half = m->head_dim / 2;
  for (int i = 0; i < half; i++) {
    double a = (double)pos * m->inv_freq[i];
    float c = (float)cos(a), s = (float)sin(a);
    float x0 = x[i], x1 = x[i + half];
    float p0 = x0 * c, p1 = x1 * s, p2 = x1 * c, p3 = x0 * s;
    x[i] = p0 - p1;
    x[i + half] = p2 + p3;
  }
}

typedef struct attn_job {
  const df_qwen3 *m;
  const df_kern *k;
  df_qwen3_state *s;
  int layer, pos0, T;
  float scale;
  size_t scores_stride;
} attn_job;

/* One (row, query head): softmax(q . k_j * scale) over j <= pos0 + t, then
 * the weighted sum of v_j in ascending j. */
static void attn_task(void *ctx, int task, int thread) {
  const attn_job *j = ctx;
  const df_qwen3 *m = j->m;
  int t = task / m->heads, h = task % m->heads, D = m->head_dim;
  int kvh = h / (m->heads / m->kv_heads), n = j->pos0 + t + 1;
  size_t kd = (size_t)m->kv_heads * D;
  const float *q = j->s->q + (size_t)t * m->heads * D + (size_t)h * D;
  const float *K = j->s->k[j->layer] + (size_t)kvh * D, *V = j->s->v[j->layer] + (size_t)kvh * D;
  float *sc = j->s->scores + (size_t)thread * j->scores_stride;
  for (int p = 0; p < n; p++) sc[p] = j->k->dot(q, K + (size_t)p * kd, D) * j->scale;
  j->k->softmax(sc, n);
  float *o = j->s->att + (size_t)t * m->heads * D + (size_t)h * D;
  for (int d = 0; d < D; d++) o[d] = 0;
  for (int p = 0; p < n; p++) {
    const float *v = V + (size_t)p * kd;
    float w = sc[p];
    for (int d = 0; d < D; d++) {
      float y = w * v[d];
      o[d] += y;
    }
  }
}

static void rms_rows(const df_kern *k, float *y, const float *x, const float *w, int T, int n,
                     float eps) {
  for (int t = 0; t < T; t++) k->rmsnorm(y + (size_t)t * n, x + (size_t)t * n, w, n, eps);
}

int df_qwen3_forward(const df_qwen3 *m, const df_kctx *kc, df_qwen3_state *s, const int *ids,
                     int T, float *logits_last, float *logits_all, df_err *e) {
  if (T < 1) return df_err_set(e, "qwen3: forward needs at least one id (got %d)", T);
  for (int t = 0; t < T; t++)
    if (ids[t] < 0 || ids[t] >= m->vocab)
      return df_err_set(e, "qwen3: id %d at row %d is outside the vocabulary [0, %d)", ids[t], t,
                        m->vocab);
  if (T > m->max_pos - s->pos)
    return df_err_set(e, "qwen3: %d positions + %d new ids exceed max_position_embeddings %d",
                      s->pos, T, m->max_pos);
  const df_kern *k = kc->k;
  int nthr = df_pool_size(kc->pool);
  int pos0 = s->pos, H = m->hidden, D = m->head_dim;
  state_reserve(s, pos0 + T, T, nthr);
  size_t qd = (size_t)m->heads * D, kd = (size_t)m->kv_heads * D, I = (size_t)m->inter;
  for (int t = 0; t < T; t++) df_wmat_row(&m->embed, ids[t], s->x + (size_t)t * H);
  attn_job aj = {.m = m, .k = k, .s = s, .pos0 = pos0, .T = T,
                 .scale = (float)(1.0 / sqrt((double)D)), .scores_stride = (size_t)s->cap};
  for (int l = 0; l < m->layers; l++) {
    const q3_layer *L = &m->L[l];
    rms_rows(k, s->n, s->x, L->in_norm, T, H, m->eps);
    df_mm(kc, &L->q, s->n, T, (size_t)H, s->q, qd);
    df_mm(kc, &L->k, s->n, T, (size_t)H, s->kk, kd);
    df_mm(kc, &L->v, s->n, T, (size_t)H, s->vv, kd);
    for (int t = 0; t < T; t++) {
      for (int h = 0; h < m->heads; h++) {
        float *q = s->q + (size_t)t * qd + (size_t)h * D;
        k->rmsnorm(q, q, L->q_norm, D, m->eps);
        rope_head(m, q, pos0 + t);
      }
      float *kc_row = s->k[l] + (size_t)(pos0 + t) * kd;
      for (int h = 0; h < m->kv_heads; h++) {
        float *kh = s->kk + (size_t)t * kd + (size_t)h * D;
        k->rmsnorm(kh, kh, L->k_norm, D, m->eps);
        rope_head(m, kh, pos0 + t);
      }
      memcpy(kc_row, s->kk + (size_t)t * kd, kd * sizeof(float));
      memcpy(s->v[l] + (size_t)(pos0 + t) * kd, s->vv + (size_t)t * kd, kd * sizeof(float));
    }
    aj.layer = l;
    df_pool_run(kc->pool, T * m->heads, attn_task, &aj);
    df_mm(kc, &L->o, s->att, T, qd, s->tmp, (size_t)H);
    for (size_t i = 0; i < (size_t)T * H; i++) s->x[i] += s->tmp[i];
    rms_rows(k, s->n, s->x, L->post_norm, T, H, m->eps);
    df_mm(kc, &L->gate, s->n, T, (size_t)H, s->g, I);
    df_mm(kc, &L->up, s->n, T, (size_t)H, s->u, I);
    for (int t = 0; t < T; t++) {
      float *g = s->g + (size_t)t * I, *u = s->u + (size_t)t * I;
      k->silu(g, (int)I);
      for (size_t i = 0; i < I; i++) g[i] *= u[i];
    }
    df_mm(kc, &L->down, s->g, T, I, s->tmp, (size_t)H);
    for (size_t i = 0; i < (size_t)T * H; i++) s->x[i] += s->tmp[i];
  }
  s->pos = pos0 + T;
  if (logits_all) {
    rms_rows(k, s->n, s->x, m->final_norm, T, H, m->eps);
    df_mm(kc, &m->lm_head, s->n, T, (size_t)H, logits_all, (size_t)m->vocab);
    if (logits_last)
      memcpy(logits_last, logits_all + (size_t)(T - 1) * m->vocab, (size_t)m->vocab * sizeof(float));
  } else if (logits_last) {
    float *xl = s->x + (size_t)(T - 1) * H;
    k->rmsnorm(s->n, xl, m->final_norm, H, m->eps);
    df_mm(kc, &m->lm_head, s->n, 1, (size_t)H, logits_last, (size_t)m->vocab);
  }
  return 0;
}

/* Loading the K3 spine: every tensor the forward pass reads is looked up,
 * checked for dtype and for the shape the config implies, and mapped in
 * place (bf16 matrices are never copied). Small vectors (norms, AttnRes
 * projections) become fp32 copies; a tensor whose mmap address is not
 * aligned for its type is copied once to an aligned buffer. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/codec.h"
#include "format/roster.h"
#include "model/k3_int.h"
#include "model/spine_int8.h"

#define PFX "language_model.model."

typedef struct {
  const df_st_set *set;
  const df_st_set *i8; /* NULL unless --spine int8 */
  const df_config *c;
  const char *model_dir;
  df_k3 *m;
  df_err *e;
  int unit;    /* unit the matrices being loaded belong to; -1 = none */
  char *ubase; /* that unit's view struct */
  char name[320];
} ld;

static void own(df_k3 *m, void *p, size_t bytes) {
  m->owned_bytes += bytes;
  if (m->nowned == m->capowned) {
    m->capowned = m->capowned ? 2 * m->capowned : 64;
    m->owned = df_xrealloc(m->owned, sizeof *m->owned * m->capowned);
  }
  m->owned[m->nowned++] = p;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, n - o, "[");
  for (int i = 0; i < ndim && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", shape[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

/* Finds name and checks dtype and shape; `why` names the config fields the
 * expected shape comes from. */
static const df_tensor *need_in(const df_st_set *set, df_err *e, const char *name, df_dtype dt,
                                int ndim, const int64_t *shape, const char *why,
                                const char *where) {
  const df_tensor *t = df_st_set_find(set, name);
  if (!t) {
    df_err_set(e, "%smissing tensor %s", where, name);
    return NULL;
  }
  if (t->dtype != dt) {
    df_err_set(e, "%s%s: dtype %s, expected %s", where, name, df_dtype_name(t->dtype),
               df_dtype_name(dt));
    return NULL;
  }
  int ok = t->ndim == ndim;
  for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
  if (!ok) {
    char got[128], want[128];
    shape_str(got, sizeof got, t->ndim, t->shape);
    shape_str(want, sizeof want, ndim, shape);
    df_err_set(e, "%s%s: shape %s, expected %s from config %s", where, name, got, want, why);
    return NULL;
  }
  if (!t->data) {
    df_err_set(e, "%s%s: data not mapped (truncated shard?)", where, name);
    return NULL;
  }
  return t;
}

static const void *aligned_data(df_k3 *m, const df_tensor *t, size_t align) {
  if ((uintptr_t)t->data % align == 0) return t->data;
  df_log_debug("%s: data not %zu-byte aligned in its shard; using an aligned copy", t->name,
               align);
  void *p = df_xaligned(64, t->nbytes);
  memcpy(p, t->data, t->nbytes);
  own(m, p, t->nbytes);
  return p;
}

/* Small tensors are always copied: they are read every pass, also in layers
 * whose matrices stream, and a copy never faults on the hot path. */
static const void *copy_data(df_k3 *m, const df_tensor *t) {
  void *p = df_xaligned(64, t->nbytes ? t->nbytes : 1);
  memcpy(p, t->data, t->nbytes);
  own(m, p, t->nbytes);
  return p;
}

/* Records a streamable tensor of the current unit. */
static void piece(ld *L, const df_tensor *t, int int8set, const void *const *field,
                  size_t align) {
  if (L->unit < 0) return;
  df_k3_unit *u = &L->m->units[L->unit];
  if (u->npc == u->cappc) {
    u->cappc = u->cappc ? 2 * u->cappc : 16;
    u->pc = df_xrealloc(u->pc, sizeof *u->pc * (size_t)u->cappc);
  }
  df_k3_piece *pc = &u->pc[u->npc++];
  pc->file = t->file + (int8set ? L->m->sets[0]->nfiles : 0);
  pc->off = t->offset;
  pc->len = t->nbytes;
  pc->field = (size_t)((const char *)field - L->ubase);
  pc->boff = 0;
  u->bytes += t->nbytes;
  if (t->offset % align) u->misaligned = 1;
}

/* A bf16 tensor of n values widened once to an owned, aligned fp32 copy. */
static const float *bf16_copy(ld *L, const df_tensor *t, int64_t n) {
  float *p = df_xaligned(64, sizeof(float) * (size_t)n);
  const uint8_t *b = t->data;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, b + 2 * i, 2);
    p[i] = df_bf16_to_f32(h);
  }
  own(L->m, p, sizeof(float) * (size_t)n);
  return p;
}

/* A vector of n values stored as dt (BF16 or F32), returned as fp32. */
static const float *vec(ld *L, const char *name, df_dtype dt, int64_t n, const char *why) {
  const df_tensor *t = need_in(L->set, L->e, name, dt, 1, &n, why, "");
  if (!t) return NULL;
  if (dt == DF_DT_F32) return copy_data(L->m, t);
  return bf16_copy(L, t, n);
}

/* A [1, n] bf16 row (the AttnRes projections) as fp32. */
static const float *row1(ld *L, const char *name, int64_t n, const char *why) {
  int64_t sh[2] = {1, n};
  const df_tensor *t = need_in(L->set, L->e, name, DF_DT_BF16, 2, sh, why, "");
  return t ? bf16_copy(L, t, n) : NULL;
}

int df_k3_int8_eligible(const df_tensor *t) {
  if (t->dtype != DF_DT_BF16 || t->ndim != 2 || t->shape[0] <= 1) return 0;
  if (strncmp(t->name, PFX, strlen(PFX)) && strcmp(t->name, "language_model.lm_head.weight"))
    return 0;
  if (strstr(t->name, ".block_sparse_moe.gate.")) return 0;
  if (strstr(t->name, ".experts.")) return 0;
  return 1;
}

static int mat_in(ld *L, const char *name, int64_t rows, int64_t cols, const char *why,
                  df_wmat *w);

static int mat(ld *L, const char *name, int64_t rows, int64_t cols, const char *why, df_wmat *w) {
  int unit = L->unit;
  /* the router stays resident: gate-ahead reads layer L+1's during layer L */
  if (strstr(name, ".block_sparse_moe.gate.")) L->unit = -1;
  int rc = mat_in(L, name, rows, cols, why, w);
  L->unit = unit;
  return rc;
}

static int mat_in(ld *L, const char *name, int64_t rows, int64_t cols, const char *why,
                  df_wmat *w) {
  int64_t sh[2] = {rows, cols};
  const df_tensor *t = need_in(L->set, L->e, name, DF_DT_BF16, 2, sh, why, "");
  if (!t) return -1;
  w->rows = (int)rows;
  w->cols = (int)cols;
  if (L->i8 && df_k3_int8_eligible(t)) {
    char sname[sizeof L->name + 8];
    snprintf(sname, sizeof sname, "%s.scale", name);
    const df_tensor *q = need_in(L->i8, L->e, name, DF_DT_I8, 2, sh, why, "spine-int8: ");
    const df_tensor *s = q ? need_in(L->i8, L->e, sname, DF_DT_F32, 1, &rows, why, "spine-int8: ")
                           : NULL;
    if (!s) {
      char msg[sizeof L->e->msg];
      snprintf(msg, sizeof msg, "%s", L->e->msg);
      return df_err_set(L->e, "%.700s (re-run `deltafin convert-spine --model %.200s`)", msg,
                        L->model_dir);
    }
    w->kind = DF_W_I8;
    w->w = q->data;
    w->scale = aligned_data(L->m, s, 4);
    L->m->spine_bytes_per_token += q->nbytes + s->nbytes;
    piece(L, q, 1, &w->w, 1);
    piece(L, s, 1, (const void *const *)&w->scale, 4);
  } else {
    w->kind = DF_W_BF16;
    w->w = aligned_data(L->m, t, 2);
    L->m->spine_bytes_per_token += t->nbytes;
    piece(L, t, 0, &w->w, 2);
  }
  w->id = df_wmat_new_id();
  return 0;
}

/* Where embedding rows are read from (one pread per position). */
static int embed_source(ld *L) {
  df_k3 *m = L->m;
  const char *name = PFX "embed_tokens.weight";
  int i8 = m->embed.kind == DF_W_I8;
  const df_st_set *set = i8 ? L->i8 : L->set;
  const df_tensor *t = df_st_set_find(set, name);
  if (!t) return df_err_set(L->e, "missing tensor %s", name);
  m->emb_fd = set->files[t->file].fd;
  m->emb_off = t->offset;
  m->emb_row_bytes = (uint64_t)m->embed.cols * (i8 ? 1 : 2);
  if (i8) {
    const df_tensor *s = df_st_set_find(set, PFX "embed_tokens.weight.scale");
    if (!s) return df_err_set(L->e, "spine-int8: missing tensor %s.scale", name);
    m->emb_scale_off = s->offset;
  }
  m->emb_buf = df_xaligned(64, m->emb_row_bytes + 64);
  return 0;
}

#define NM(...) (snprintf(L->name, sizeof L->name, __VA_ARGS__), L->name)

static int load_layer(ld *L, int l, df_k3_layer *y) {
  const df_config *c = L->c;
  int64_t H = c->hidden;
  char p[96];
  snprintf(p, sizeof p, PFX "layers.%d.", l);
  L->unit = l;
  L->ubase = (char *)y;
  y->kind = c->layer_kind[l];
  y->moe = l >= c->first_k_dense;
#define VEC(dst, suffix, dt, n, why)                  \
  do {                                                \
    if (!((dst) = vec(L, NM("%s" suffix, p), dt, n, why))) return -1; \
  } while (0)
#define MAT(dst, suffix, r, cc, why)                              \
  do {                                                            \
    if (mat(L, NM("%s" suffix, p), r, cc, why, &(dst))) return -1; \
  } while (0)
  VEC(y->in_norm, "input_layernorm.weight", DF_DT_BF16, H, "hidden_size");
  VEC(y->post_norm, "post_attention_layernorm.weight", DF_DT_BF16, H, "hidden_size");
  VEC(y->attn_res_norm, "self_attention_res_norm.weight", DF_DT_BF16, H, "hidden_size");
  VEC(y->mlp_res_norm, "mlp_res_norm.weight", DF_DT_BF16, H, "hidden_size");
  if (!(y->attn_res_proj = row1(L, NM("%sself_attention_res_proj.weight", p), H, "hidden_size")) ||
      !(y->mlp_res_proj = row1(L, NM("%smlp_res_proj.weight", p), H, "hidden_size")))
    return -1;

  if (y->kind == DF_LAYER_KDA) {
    int64_t Hk = c->kda_heads, D = c->kda_head_dim, P = Hk * D, K = c->kda_conv;
    const char *wp = "linear_attn_config num_heads x head_dim, hidden_size";
    MAT(y->q, "self_attn.q_proj.weight", P, H, wp);
    MAT(y->k, "self_attn.k_proj.weight", P, H, wp);
    MAT(y->v, "self_attn.v_proj.weight", P, H, wp);
    MAT(y->g, "self_attn.g_proj.weight", P, H, wp);
    MAT(y->fa, "self_attn.f_a_proj.weight", D, H, "linear_attn_config head_dim, hidden_size");
    MAT(y->fb, "self_attn.f_b_proj.weight", P, D, "linear_attn_config num_heads x head_dim, head_dim");
    MAT(y->b, "self_attn.b_proj.weight", Hk, H, "linear_attn_config num_heads, hidden_size");
    MAT(y->o, "self_attn.o_proj.weight", H, P, "hidden_size, linear_attn_config num_heads x head_dim");
    static const char *cv[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
      int64_t sh[3] = {P, 1, K};
      const df_tensor *t =
          need_in(L->set, L->e, NM("%sself_attn.%s_conv1d.weight", p, cv[i]), DF_DT_F32, 3, sh,
                  "linear_attn_config num_heads x head_dim, 1, short_conv_kernel_size", "");
      if (!t) return -1;
      y->conv[i] = copy_data(L->m, t);
    }
    const df_tensor *a = df_st_set_find(L->set, NM("%sself_attn.A_log", p));
    if (!a) return df_err_set(L->e, "missing tensor %s", L->name);
    if (a->dtype != DF_DT_F32)
      return df_err_set(L->e, "%s: dtype %s, expected F32", L->name, df_dtype_name(a->dtype));
    if (a->nelem < (uint64_t)Hk)
      return df_err_set(L->e, "%s: %" PRIu64 " values, fewer than linear_attn_config num_heads %" PRId64
                        " (A_log is per head)", L->name, a->nelem, Hk);
    if (!a->data) return df_err_set(L->e, "%s: data not mapped", L->name);
    y->A_log = copy_data(L->m, a);
    VEC(y->dt_bias, "self_attn.dt_bias", DF_DT_F32, P, "linear_attn_config num_heads x head_dim");
    VEC(y->o_norm, "self_attn.o_norm.weight", DF_DT_F32, D, "linear_attn_config head_dim");
  } else {
    int64_t Hm = c->mla_heads, qr = c->q_lora_rank, kr = c->kv_lora_rank, dn = c->qk_nope_dim,
            dr = c->qk_rope_dim, dv = c->v_head_dim;
    MAT(y->qa, "self_attn.q_a_proj.weight", qr, H, "q_lora_rank, hidden_size");
    VEC(y->qa_norm, "self_attn.q_a_layernorm.weight", DF_DT_BF16, qr, "q_lora_rank");
    MAT(y->qb, "self_attn.q_b_proj.weight", Hm * (dn + dr), qr,
        "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim), q_lora_rank");
    MAT(y->kva, "self_attn.kv_a_proj_with_mqa.weight", kr + dr, H,
        "kv_lora_rank + qk_rope_head_dim, hidden_size");
    VEC(y->kva_norm, "self_attn.kv_a_layernorm.weight", DF_DT_BF16, kr, "kv_lora_rank");
    MAT(y->kvb, "self_attn.kv_b_proj.weight", Hm * (dn + dv), kr,
        "num_attention_heads x (qk_nope_head_dim + v_head_dim), kv_lora_rank");
    if (c->mla_output_gate)
      MAT(y->mg, "self_attn.g_proj.weight", Hm * dv, H, "num_attention_heads x v_head_dim, hidden_size");
    MAT(y->mo, "self_attn.o_proj.weight", H, Hm * dv, "hidden_size, num_attention_heads x v_head_dim");
  }

  if (!y->moe) {
    int64_t I = c->dense_inter;
    MAT(y->gate, "mlp.gate_proj.weight", I, H, "intermediate_size, hidden_size");
    MAT(y->up, "mlp.up_proj.weight", I, H, "intermediate_size, hidden_size");
    MAT(y->down, "mlp.down_proj.weight", H, I, "hidden_size, intermediate_size");
  } else {
    int64_t E = c->n_experts, Lt = c->latent, S = (int64_t)c->n_shared * c->moe_inter;
    MAT(y->router, "block_sparse_moe.gate.weight", E, H, "n_routed_experts, hidden_size");
    VEC(y->router_bias, "block_sparse_moe.gate.e_score_correction_bias", DF_DT_F32, E,
        "n_routed_experts");
    MAT(y->lat_down, "block_sparse_moe.routed_expert_down_proj.weight", Lt, H,
        "routed_expert_hidden_size, hidden_size");
    if (c->latent_norm)
      VEC(y->lat_norm, "block_sparse_moe.routed_expert_norm.weight", DF_DT_BF16, Lt,
          "routed_expert_hidden_size");
    MAT(y->lat_up, "block_sparse_moe.routed_expert_up_proj.weight", H, Lt,
        "hidden_size, routed_expert_hidden_size");
    if (S > 0) {
      const char *ws = "n_shared_experts x moe_intermediate_size, hidden_size";
      MAT(y->sh_gate, "block_sparse_moe.shared_experts.gate_proj.weight", S, H, ws);
      MAT(y->sh_up, "block_sparse_moe.shared_experts.up_proj.weight", S, H, ws);
      MAT(y->sh_down, "block_sparse_moe.shared_experts.down_proj.weight", H, S,
          "hidden_size, n_shared_experts x moe_intermediate_size");
    }
  }
#undef VEC
#undef MAT
  return 0;
}

void df_k3_free(df_k3 *m) {
  if (!m) return;
  for (int i = 0; i < m->nowned; i++) free(m->owned[i]);
  free(m->owned);
  free(m->layers);
  df_k3_stream_close(m->stream);
  for (int u = 0; u < m->nunits; u++) free(m->units[u].pc), free(m->units[u].ex);
  free(m->pl_bytes), free(m->pl_read), free(m->pl_must);
  free(m->units);
  free(m->emb_buf);
  free(m->comp);
  if (m->int8set) {
    df_st_set_close(m->int8set);
    free(m->int8set);
  }
  free(m);
}

/* The shared roster (format/roster.h) as a second, whole-checkpoint check:
 * the routed experts' names, dtypes, shapes and record layout, and, when the
 * expert scales are small enough to read at every start (tiny and small
 * models; K3's are ~5 GB), every E8M0 scale byte. Otherwise the store
 * rejects a 255 scale when it reads that expert, and `deltafin doctor`/pack
 * check them all. Unexpected extra tensors are only a warning. */
#define SCAN_SCALES_MAX (64ull << 20)

static int roster_check(const df_st_set *set, const df_config *c, df_err *e) {
  uint64_t scale_bytes = (uint64_t)(c->n_layers - c->first_k_dense) * (uint64_t)c->n_experts *
                         ((uint64_t)c->moe_inter * c->latent / 32 * 3);
  df_roster_report r;
  if (df_roster_check(set, c, scale_bytes <= SCAN_SCALES_MAX ? DF_ROSTER_SCAN_SCALES : 0, &r, e))
    return -1;
  long serious = r.n_problems - r.n_unexpected;
  int rc = 0;
  if (serious > 0) {
    /* roster problems are listed before unexpected tensors, except scales */
    const char *line = r.n_lines ? r.lines[0] : "problem";
    for (int i = 0; i < r.n_lines; i++)
      if (strncmp(r.lines[i], "unexpected tensor", 17)) {
        line = r.lines[i];
        break;
      }
    rc = df_err_set(e, "%s%s", line,
                    r.n_problems > 1 ? " (and more: `deltafin inspect --model DIR` lists all)" : "");
  } else if (r.n_unexpected > 0 && r.n_lines) {
    df_log_warn("%s (%ld such tensors, ignored)", r.lines[0], r.n_unexpected);
  }
  df_roster_report_free(&r);
  return rc;
}

int df_k3_load(df_k3 **out, const df_st_set *set, const df_config *c, int int8,
               const char *model_dir, df_err *e) {
  return df_k3_load_from(out, set, c, int8, model_dir, NULL, e);
}

int df_k3_load_from(df_k3 **out, const df_st_set *set, const df_config *c, int int8,
                    const char *model_dir, const char *int8_dir, df_err *e) {
  /* a model whose bf16 spine is holes (make-model --spine int8) is read
   * only through its int8 copy: here, so no loader path can take its zeros */
  if (df_k3_spine_holes_check(set, int8, "reading the bf16 spine", e)) return -1;
  df_k3 *m = df_xcalloc(1, sizeof *m);
  m->cfg = c;
  m->int8 = int8;
  ld L = {.set = set, .c = c, .model_dir = model_dir, .m = m, .e = e, .unit = -1};
  m->emb_fd = -1;
  m->sets[0] = set;
  m->nfiles = set->nfiles;
  m->nunits = c->n_layers + 1;
  m->units = df_xcalloc((size_t)m->nunits, sizeof *m->units);
  m->comp = df_xcalloc(1, sizeof *m->comp);
  if (int8) {
    char *dir = int8_dir ? df_xstrdup(int8_dir) : df_path_join(model_dir, DF_SPINE_INT8_DIR);
    char *idx = df_path_join(dir, "model.safetensors.index.json");
    int have = df_file_exists(idx);
    free(idx);
    if (!have) {
      df_err_set(e, "%s: no complete row-int8 spine here (run `deltafin convert-spine --model %s%s%s`)",
                 dir, model_dir, int8_dir ? " --out " : "", int8_dir ? int8_dir : "");
      free(dir);
      goto fail;
    }
    m->int8set = df_xcalloc(1, sizeof *m->int8set);
    int rc = df_st_set_open(m->int8set, dir, e);
    free(dir);
    if (rc) {
      free(m->int8set);
      m->int8set = NULL;
      df_err_prefix(e, "int8 spine: ");
      goto fail;
    }
    L.i8 = m->int8set;
    m->sets[1] = m->int8set;
    m->nfiles += m->int8set->nfiles;
  }
  int64_t H = c->hidden, V = c->vocab;
  if (mat(&L, PFX "embed_tokens.weight", V, H, "vocab_size, hidden_size", &m->embed)) goto fail;
  /* one decode token reads one embedding row, not the table */
  m->spine_bytes_per_token -= (uint64_t)(V - 1) * H * (m->embed.kind == DF_W_I8 ? 1 : 2) +
                              (m->embed.kind == DF_W_I8 ? (uint64_t)(V - 1) * 4 : 0);
  if (embed_source(&L)) goto fail;
  L.unit = c->n_layers;
  L.ubase = (char *)&m->lm_head;
  int hm = mat(&L, "language_model.lm_head.weight", V, H, "vocab_size, hidden_size", &m->lm_head);
  L.unit = -1;
  if (hm ||
      !(m->final_norm = vec(&L, PFX "norm.weight", DF_DT_BF16, H, "hidden_size")) ||
      !(m->out_res_norm = vec(&L, PFX "output_attn_res_norm.weight", DF_DT_BF16, H, "hidden_size")) ||
      !(m->out_res_proj = row1(&L, PFX "output_attn_res_proj.weight", H, "hidden_size")))
    goto fail;
  m->layers = df_xcalloc((size_t)c->n_layers, sizeof *m->layers);
  for (int l = 0; l < c->n_layers; l++)
    if (load_layer(&L, l, &m->layers[l])) goto fail;
  if (roster_check(set, c, e)) goto fail;
  df_k3_units_finish(m);
  *out = m;
  return 0;
fail:
  df_k3_free(m);
  return -1;
}

const df_config *df_k3_config(const df_k3 *m) { return m->cfg; }
int df_k3_is_int8(const df_k3 *m) { return m->int8; }

int df_k3_embed(const df_k3 *m, const int *ids, int T, float *out, df_err *e) {
  for (int t = 0; t < T; t++)
    if (ids[t] < 0 || ids[t] >= m->cfg->vocab)
      return df_err_set(e, "embedding: token id %d is outside the vocabulary (%d)", ids[t],
                        m->cfg->vocab);
  return df_k3_embed_rows(m, ids, T, out, e);
}

int df_k3_lm_head(const df_k3 *m, const df_kctx *kc, const float *x, int T, float *logits,
                  df_err *e) {
  int nl = m->cfg->n_layers;
  /* next: what the target's next pass streams first, as after its own head */
  const df_wmat *h = df_k3_acquire_head(m, df_k3_next_streamed(m, nl, 0), e);
  if (!h) return -1;
  df_mm(kc, h, x, T, (size_t)m->cfg->hidden, logits, (size_t)m->cfg->vocab);
  df_k3_release(m, nl);
  return 0;
}
uint64_t df_k3_spine_bytes_per_token(const df_k3 *m) { return m->spine_bytes_per_token; }

int df_k3_ctx_limit(const df_k3 *m) {
  return m->ctx_limit > 0 ? m->ctx_limit : (int)m->cfg->max_pos;
}

const char *df_k3_file_path(const df_k3 *m, int f) {
  int n0 = m->sets[0]->nfiles;
  return f < n0 ? m->sets[0]->files[f].path : m->sets[1]->files[f - n0].path;
}

const df_st_file *df_k3_file(const df_k3 *m, int f) {
  int n0 = m->sets[0]->nfiles;
  return f < n0 ? &m->sets[0]->files[f] : &m->sets[1]->files[f - n0];
}

void df_k3_plan_input(const df_k3 *m, df_plan_in *in) {
  memset(in, 0, sizeof *in);
  in->cfg = m->cfg;
  in->nunits = m->nunits;
  in->unit_bytes = m->pl_bytes;
  in->unit_read = m->pl_read;
  in->must_resident = m->pl_must;
  in->fixed_bytes = m->owned_bytes;
  for (int l = 0; l < m->cfg->n_layers; l++)
    if (m->layers[l].moe) in->fixed_bytes += (uint64_t)m->layers[l].router.rows * m->layers[l].router.cols * 2;
  in->embed_row_bytes = m->emb_row_bytes + (m->embed.kind == DF_W_I8 ? 4 : 0);
}

const char *const df_k3_compute_names[DF_K3_T_N] = {"kda", "mla", "dense_ffn", "moe_trunk",
                                                    "routed_expert", "head"};

void df_k3_compute_get(const df_k3 *m, df_k3_compute *out) { *out = *m->comp; }

void df_k3_set_precision(df_k3 *m, int bits) { m->precision = bits == 64 ? 64 : 32; }
int df_k3_precision(const df_k3 *m) { return m->precision == 64 ? 64 : 32; }

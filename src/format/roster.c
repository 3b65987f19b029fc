/* The expected K3 tensor roster for a config, and a checkpoint check. The
 * per-layer list lives in one function (layer_spine) so the roster, the
 * name lookup and the check can never disagree. */
#include "format/roster.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "format/codec.h"

#define PFX "language_model.model."
#define LAYERS PFX "layers."
#define EXPERTS ".block_sparse_moe.experts."

typedef int (*emit_fn)(const df_roster_item *it, void *ctx);

const char *const df_expert_part_name[6] = {"w1.weight_packed", "w1.weight_scale",
                                            "w2.weight_packed", "w2.weight_scale",
                                            "w3.weight_packed", "w3.weight_scale"};

static int starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

df_tensor_class df_roster_classify(const char *name) {
  if (df_st_is_vision_name(name)) return DF_TC_IGNORED;
  if (!starts(name, "language_model.")) return DF_TC_OTHER;
  if (starts(name, LAYERS) && strstr(name, EXPERTS)) return DF_TC_EXPERT;
  return DF_TC_SPINE;
}

/* A canonical non-negative decimal (no sign, no leading zeros); advances *p. */
static int parse_index(const char **p, int *out) {
  const char *s = *p;
  if (*s < '0' || *s > '9') return -1;
  if (*s == '0' && s[1] >= '0' && s[1] <= '9') return -1;
  long v = 0;
  while (*s >= '0' && *s <= '9') {
    v = v * 10 + (*s - '0');
    if (v > 1000000000L) return -1;
    s++;
  }
  *out = (int)v;
  *p = s;
  return 0;
}

int df_roster_parse_expert(const char *name, int *layer, int *expert, int *part) {
  if (!starts(name, LAYERS)) return -1;
  const char *p = name + strlen(LAYERS);
  int l, x;
  if (parse_index(&p, &l) != 0 || !starts(p, EXPERTS)) return -1;
  p += strlen(EXPERTS);
  if (parse_index(&p, &x) != 0 || *p != '.') return -1;
  p++;
  for (int i = 0; i < 6; i++)
    if (!strcmp(p, df_expert_part_name[i])) {
      *layer = l;
      *expert = x;
      *part = i;
      return 0;
    }
  return -1;
}

/* ---- emitting the roster ---- */

static int emit(emit_fn fn, void *ctx, df_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2,
                const char *fmt, ...) __attribute__((format(printf, 8, 9)));

static int emit(emit_fn fn, void *ctx, df_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2,
                const char *fmt, ...) {
  df_roster_item it;
  memset(&it, 0, sizeof it);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(it.name, sizeof it.name, fmt, ap);
  va_end(ap);
  it.dtype = dt;
  it.ndim = ndim;
  it.shape[0] = d0;
  it.shape[1] = d1;
  it.shape[2] = d2;
  return fn(&it, ctx);
}

#define BF DF_DT_BF16
#define F32 DF_DT_F32
#define E1(dt, a, ...) do { int r_ = emit(fn, ctx, dt, 1, a, 0, 0, __VA_ARGS__); if (r_) return r_; } while (0)
#define E2(dt, a, b, ...) do { int r_ = emit(fn, ctx, dt, 2, a, b, 0, __VA_ARGS__); if (r_) return r_; } while (0)
#define E3(dt, a, b, c3, ...) do { int r_ = emit(fn, ctx, dt, 3, a, b, c3, __VA_ARGS__); if (r_) return r_; } while (0)

static int globals(const df_config *c, emit_fn fn, void *ctx) {
  int64_t H = c->hidden, V = c->vocab;
  E2(BF, V, H, PFX "embed_tokens.weight");
  E1(BF, H, PFX "norm.weight");
  E1(BF, H, PFX "output_attn_res_norm.weight");
  E2(BF, 1, H, PFX "output_attn_res_proj.weight");
  E2(BF, V, H, "language_model.lm_head.weight");
  return 0;
}

/* Marks A_log: its first dimension is a minimum, see roster.h. */
static int emit_alog(const df_config *c, int l, emit_fn fn, void *ctx) {
  df_roster_item it;
  memset(&it, 0, sizeof it);
  snprintf(it.name, sizeof it.name, LAYERS "%d.self_attn.A_log", l);
  it.dtype = F32;
  it.ndim = 1;
  it.shape[0] = c->kda_heads > c->kda_head_dim ? c->kda_heads : c->kda_head_dim;
  it.min_len = 1;
  return fn(&it, ctx);
}

static int layer_spine(const df_config *c, int l, emit_fn fn, void *ctx) {
  int64_t H = c->hidden;
  E1(BF, H, LAYERS "%d.input_layernorm.weight", l);
  E1(BF, H, LAYERS "%d.post_attention_layernorm.weight", l);
  E1(BF, H, LAYERS "%d.self_attention_res_norm.weight", l);
  E1(BF, H, LAYERS "%d.mlp_res_norm.weight", l);
  E2(BF, 1, H, LAYERS "%d.self_attention_res_proj.weight", l);
  E2(BF, 1, H, LAYERS "%d.mlp_res_proj.weight", l);
  if (c->layer_kind[l] == DF_LAYER_KDA) {
    int64_t NH = c->kda_heads, D = c->kda_head_dim, P = NH * D, K = c->kda_conv;
    static const char *const qkvg[4] = {"q", "k", "v", "g"};
    for (int i = 0; i < 4; i++) E2(BF, P, H, LAYERS "%d.self_attn.%s_proj.weight", l, qkvg[i]);
    E2(BF, D, H, LAYERS "%d.self_attn.f_a_proj.weight", l);
    E2(BF, P, D, LAYERS "%d.self_attn.f_b_proj.weight", l);
    E2(BF, NH, H, LAYERS "%d.self_attn.b_proj.weight", l);
    E2(BF, H, P, LAYERS "%d.self_attn.o_proj.weight", l);
    for (int i = 0; i < 3; i++) E3(F32, P, 1, K, LAYERS "%d.self_attn.%s_conv1d.weight", l, qkvg[i]);
    int r = emit_alog(c, l, fn, ctx);
    if (r) return r;
    E1(F32, P, LAYERS "%d.self_attn.dt_bias", l);
    E1(F32, D, LAYERS "%d.self_attn.o_norm.weight", l);
  } else {
    int64_t MH = c->mla_heads, QL = c->q_lora_rank, KL = c->kv_lora_rank, dn = c->qk_nope_dim,
            dr = c->qk_rope_dim, dv = c->v_head_dim;
    E2(BF, QL, H, LAYERS "%d.self_attn.q_a_proj.weight", l);
    E1(BF, QL, LAYERS "%d.self_attn.q_a_layernorm.weight", l);
    E2(BF, MH * (dn + dr), QL, LAYERS "%d.self_attn.q_b_proj.weight", l);
    E2(BF, KL + dr, H, LAYERS "%d.self_attn.kv_a_proj_with_mqa.weight", l);
    E1(BF, KL, LAYERS "%d.self_attn.kv_a_layernorm.weight", l);
    E2(BF, MH * (dn + dv), KL, LAYERS "%d.self_attn.kv_b_proj.weight", l);
    if (c->mla_output_gate) E2(BF, MH * dv, H, LAYERS "%d.self_attn.g_proj.weight", l);
    E2(BF, H, MH * dv, LAYERS "%d.self_attn.o_proj.weight", l);
  }
  if (l < c->first_k_dense) {
    int64_t I = c->dense_inter;
    E2(BF, I, H, LAYERS "%d.mlp.gate_proj.weight", l);
    E2(BF, I, H, LAYERS "%d.mlp.up_proj.weight", l);
    E2(BF, H, I, LAYERS "%d.mlp.down_proj.weight", l);
  } else {
    int64_t E = c->n_experts, L = c->latent, S = (int64_t)c->n_shared * c->moe_inter;
    E2(BF, E, H, LAYERS "%d.block_sparse_moe.gate.weight", l);
    E1(F32, E, LAYERS "%d.block_sparse_moe.gate.e_score_correction_bias", l);
    E2(BF, L, H, LAYERS "%d.block_sparse_moe.routed_expert_down_proj.weight", l);
    if (c->latent_norm) E1(BF, L, LAYERS "%d.block_sparse_moe.routed_expert_norm.weight", l);
    E2(BF, H, L, LAYERS "%d.block_sparse_moe.routed_expert_up_proj.weight", l);
    if (S > 0) {
      E2(BF, S, H, LAYERS "%d.block_sparse_moe.shared_experts.gate_proj.weight", l);
      E2(BF, S, H, LAYERS "%d.block_sparse_moe.shared_experts.up_proj.weight", l);
      E2(BF, H, S, LAYERS "%d.block_sparse_moe.shared_experts.down_proj.weight", l);
    }
  }
  return 0;
}

static int expert_part(const df_config *c, int l, int x, int p, emit_fn fn, void *ctx) {
  int64_t M = c->moe_inter, L = c->latent, g = c->expert_group;
  /* w1 (gate) and w3 (up): [M, L]; w2 (down): [L, M]; packed 2 codes/byte. */
  int64_t rows = (p / 2 == 1) ? L : M, cols = (p / 2 == 1) ? M : L;
  df_roster_item it;
  memset(&it, 0, sizeof it);
  snprintf(it.name, sizeof it.name, LAYERS "%d" EXPERTS "%d.%s", l, x, df_expert_part_name[p]);
  it.dtype = DF_DT_U8;
  it.ndim = 2;
  it.shape[0] = rows;
  it.shape[1] = (p & 1) ? cols / g : cols / 2;
  it.is_expert = 1;
  return fn(&it, ctx);
}

int df_roster_foreach(const df_config *c, int (*fn)(const df_roster_item *it, void *ctx),
                      void *ctx) {
  int r = globals(c, fn, ctx);
  if (r) return r;
  for (int l = 0; l < c->n_layers; l++) {
    if ((r = layer_spine(c, l, fn, ctx))) return r;
    if (l < c->first_k_dense) continue;
    for (int x = 0; x < c->n_experts; x++)
      for (int p = 0; p < 6; p++)
        if ((r = expert_part(c, l, x, p, fn, ctx))) return r;
  }
  return 0;
}

typedef struct find_ctx {
  const char *name;
  df_roster_item *out;
} find_ctx;

static int find_cb(const df_roster_item *it, void *vctx) {
  find_ctx *f = vctx;
  if (strcmp(it->name, f->name)) return 0;
  *f->out = *it;
  return 1;
}

int df_roster_expect(const df_config *c, const char *name, df_roster_item *out) {
  find_ctx f = {name, out};
  int l, x, p;
  if (df_roster_parse_expert(name, &l, &x, &p) == 0) {
    if (l < c->first_k_dense || l >= c->n_layers || x >= c->n_experts) return 0;
    return expert_part(c, l, x, p, find_cb, &f) == 1;
  }
  if (starts(name, LAYERS)) {
    const char *q = name + strlen(LAYERS);
    if (parse_index(&q, &l) != 0 || l >= c->n_layers) return 0;
    return layer_spine(c, l, find_cb, &f) == 1;
  }
  return globals(c, find_cb, &f) == 1;
}

int df_roster_matches(const df_roster_item *it, const df_tensor *t) {
  if (t->dtype != it->dtype || t->ndim != it->ndim) return 0;
  if (it->min_len) return it->ndim == 1 && t->shape[0] >= it->shape[0];
  for (int i = 0; i < it->ndim; i++)
    if (t->shape[i] != it->shape[i]) return 0;
  return 1;
}

/* ---- checking a checkpoint ---- */

static void shape_str(char *buf, size_t n, int ndim, const int64_t *sh) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "", sh[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

static void problem(df_roster_report *r, long *counter, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void problem(df_roster_report *r, long *counter, const char *fmt, ...) {
  (*counter)++;
  r->n_problems++;
  if (r->n_lines >= DF_ROSTER_MAX_LINES) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (!r->lines) r->lines = df_xcalloc(DF_ROSTER_MAX_LINES, sizeof *r->lines);
  r->lines[r->n_lines++] = df_xstrdup(buf);
}

typedef struct check_ctx {
  const df_st_set *s;
  int flags;
  df_roster_report *r;
  /* contiguity of the current expert's record */
  const df_tensor *first;
  uint64_t next;
  int layout_ok;
  df_roster_progress_fn progress;
  void *progress_ctx;
  uint64_t scanned; /* scale bytes read so far */
} check_ctx;

static int check_cb(const df_roster_item *it, void *vctx) {
  check_ctx *k = vctx;
  df_roster_report *r = k->r;
  r->n_expected++;
  int l = 0, x = 0, p = -1;
  if (it->is_expert && df_roster_parse_expert(it->name, &l, &x, &p) == 0 && p == 0) {
    k->first = NULL;
    k->layout_ok = 1;
  }
  const df_tensor *t = df_st_set_find(k->s, it->name);
  char want[96], got[96];
  shape_str(want, sizeof want, it->ndim, it->shape);
  if (!t) {
    problem(r, &r->n_missing, "missing tensor %s (%s %s)", it->name, df_dtype_name(it->dtype),
            want);
    if (p >= 0) k->layout_ok = 0;
    return 0;
  }
  r->n_found++;
  int ok = 1;
  if (t->dtype != it->dtype) {
    problem(r, &r->n_bad_dtype, "%s: dtype %s, expected %s", it->name, df_dtype_name(t->dtype),
            df_dtype_name(it->dtype));
    ok = 0;
  } else if (!df_roster_matches(it, t)) {
    shape_str(got, sizeof got, t->ndim, t->shape);
    problem(r, &r->n_bad_shape, "%s: shape %s, expected %s%s", it->name, got,
            it->min_len ? "1-D with at least " : "", want);
    ok = 0;
  }
  if (p < 0) return 0;
  /* Routed experts: the six parts must form one contiguous record (what the
   * stores read), and with the flag every scale byte is validated. */
  if (!ok) k->layout_ok = 0;
  if (k->layout_ok) {
    if (p == 0) {
      k->first = t;
      k->next = t->offset + t->nbytes;
    } else if (t->file != k->first->file || t->offset != k->next) {
      problem(r, &r->n_bad_layout,
              "layer %d expert %d: %s is not contiguous with the parts before it (record "
              "order w1 packed, w1 scale, w2 packed, w2 scale, w3 packed, w3 scale)",
              l, x, df_expert_part_name[p]);
      k->layout_ok = 0;
    } else {
      k->next = t->offset + t->nbytes;
    }
  }
  if (ok && (p & 1) && (k->flags & DF_ROSTER_SCAN_SCALES) && t->data) {
    df_err e;
    if (df_mxfp4_check_scales(t->data, (size_t)t->nbytes, t->name, &e) != 0)
      problem(r, &r->n_bad_scales, "%s", e.msg);
    k->scanned += t->nbytes;
    if (k->progress) k->progress(k->scanned, k->progress_ctx);
  }
  return 0;
}

int df_roster_check(const df_st_set *s, const df_config *c, int flags, df_roster_report *out,
                    df_err *e) {
  return df_roster_check_progress(s, c, flags, out, NULL, NULL, e);
}

int df_roster_check_progress(const df_st_set *s, const df_config *c, int flags,
                             df_roster_report *out, df_roster_progress_fn progress,
                             void *progress_ctx, df_err *e) {
  (void)e;
  memset(out, 0, sizeof *out);
  check_ctx k = {.s = s, .flags = flags, .r = out, .progress = progress,
                 .progress_ctx = progress_ctx};
  df_roster_foreach(c, check_cb, &k);
  for (int i = 0; i < s->ntensors; i++) {
    const df_tensor *t = s->all[i];
    df_tensor_class tc = df_roster_classify(t->name);
    if (tc == DF_TC_IGNORED) continue;
    df_roster_item it;
    if (tc == DF_TC_OTHER || !df_roster_expect(c, t->name, &it))
      problem(out, &out->n_unexpected, "unexpected tensor %s (not in the K3 roster for this "
              "config)", t->name);
  }
  return 0;
}

void df_roster_report_free(df_roster_report *r) {
  if (!r) return;
  for (int i = 0; i < r->n_lines; i++) free(r->lines[i]);
  free(r->lines);
  memset(r, 0, sizeof *r);
}

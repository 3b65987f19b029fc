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

/* ------------------------------------------------------------ the table */

/* One row per config.json field the engine reads: its spellings, type, where it
 * lands in df_config, whether it may be absent, its range and the value the
 * release ships. Parsing, df_config_print, df_config_to_json and the generator's
 * defaults (df_config_release_defaults) all walk this table, so a field cannot be
 * read under one name and written under another, or printed but never checked. */
typedef enum { T_INT, T_LONG, T_FLOAT, T_DOUBLE, T_BOOL, T_STR } ftype;
typedef enum { IN_TEXT, IN_LINEAR } fsec; /* text_config (or the flat root), linear_attn_config */

/* The lines df_config_print writes, in order; fields name the line they show on. */
typedef enum {
  L_NONE, L_HIDDEN, L_VOCAB, L_EPS, L_MAXPOS, L_ACT, L_ATTNRES, L_KDA, L_MLA, L_DENSE, L_MOE,
  L_ROUTER, L_COUNT
} pline;

/* Offsets are kept +1 so that a row leaving one out (0) means "none". */
#define NO_OFF ((size_t)0)
#define OFF(f) (offsetof(df_config, f) + 1)
#define AT(c, o) ((const char *)(c) + (o) - 1)
#define REL(v) .has_release = 1, .release = (v)

typedef struct cfield cfield;
/* A check run right after the field is read (cross-field and implementation
 * limits); `used` is the spelling found, for the message. */
typedef int (*fcheck)(const cfield *f, const char *path, const char *label, const char *used,
                      const df_config *c, df_err *e);

struct cfield {
  fsec in;
  const char *key;   /* the release's (kimi_linear) spelling */
  const char *alias; /* the older spelling read too (DeepSeek's / the earlier generator's) */
  ftype type;
  size_t off;        /* where the value is kept; NO_OFF: checked, never kept */
  long lo, hi;       /* integers: the range */
  size_t hi_of;      /* != NO_OFF: hi is that (already read) field's value + hi */
  size_t eq_of;      /* != NO_OFF: an unkept field that must equal that field (and is written as it) */
  int optional;      /* absent allowed: a kept field then gets `absent` */
  double absent;
  int has_release;   /* 0: the value is per model (the preset, or the file, gives it) */
  double release;    /* what the release ships and the generator writes */
  int positive;      /* numbers: must be > 0 */
  int must_true;     /* booleans: false is refused with `why` */
  const char *fixed; /* strings: the one value the engine implements */
  const char *why;
  fcheck check;
  pline line;        /* df_config_print: the line it shows on and its fragment there */
  const char *show;  /* printf fragment for the value; a leading '?' (booleans): shown only when true */
  size_t mul_of;     /* != NO_OFF: show has a second %d, the value times that field */
};

static long ival(const df_config *c, size_t off, ftype t) {
  const char *p = AT(c, off);
  if (t == T_LONG) return *(const long *)p;
  return *(const int *)p;
}

static int chk_mla_dims(const cfield *f, const char *path, const char *lab, const char *used,
                        const df_config *c, df_err *e) {
  (void)f, (void)used;
  if ((long)c->mla_heads * (c->qk_nope_dim + c->qk_rope_dim) > DIM_MAX ||
      (long)c->mla_heads * (c->qk_nope_dim + c->v_head_dim) > DIM_MAX)
    return df_err_set(e, "%s: %snum_attention_heads x head dims is implausibly large", lab, path);
  return 0;
}

static int chk_one_group(const cfield *f, const char *path, const char *lab, const char *used,
                         const df_config *c, df_err *e) {
  (void)f;
  if (c->n_group != 1)
    return df_err_set(e, "%s: %s%s is %d: the engine supports only 1 expert group", lab, path,
                      used, c->n_group);
  return 0;
}

static int chk_shared_width(const cfield *f, const char *path, const char *lab, const char *used,
                            const df_config *c, df_err *e) {
  (void)f, (void)used;
  if ((long)c->n_shared * c->moe_inter > DIM_MAX)
    return df_err_set(e, "%s: %snum_shared_experts x moe_intermediate_size is implausibly "
                      "large", lab, path);
  return 0;
}

static int chk_kda_dims(const cfield *f, const char *path, const char *lab, const char *used,
                        const df_config *c, df_err *e) {
  (void)f, (void)used;
  if ((long)c->kda_heads * c->kda_head_dim > DIM_MAX)
    return df_err_set(e, "%s: %snum_heads x head_dim is implausibly large", lab, path);
  return 0;
}

#define INT(k, al, f, l, h) .key = k, .alias = al, .type = T_INT, .off = OFF(f), .lo = l, .hi = h
#define IMPL "the engine implements only"

static const cfield fields[] = {
    {INT("hidden_size", NULL, hidden, 1, DIM_MAX), .line = L_HIDDEN, .show = "%d"},
    {INT("num_hidden_layers", NULL, n_layers, 1, DF_MAX_LAYERS)},
    {INT("vocab_size", NULL, vocab, 1, DIM_MAX), .line = L_VOCAB, .show = "%d"},
    {.key = "rms_norm_eps", .type = T_DOUBLE, .off = OFF(eps), .positive = 1, REL(1e-5),
        .line = L_EPS, .show = "%g"},
    {INT("bos_token_id", NULL, bos_id, 0, -1), .hi_of = OFF(vocab), .line = L_VOCAB,
        .show = " (bos %d"},
    {INT("eos_token_id", NULL, eos_id, 0, -1), .hi_of = OFF(vocab), .line = L_VOCAB,
        .show = ", eos %d"},
    {INT("pad_token_id", NULL, pad_id, 0, -1), .hi_of = OFF(vocab), .line = L_VOCAB,
        .show = ", pad %d)"},
    {.key = "max_position_embeddings", .type = T_LONG, .off = OFF(max_pos), .lo = 1,
        .hi = 1L << 40, .line = L_MAXPOS, .show = "%ld"},
    {.key = "hidden_act", .type = T_STR, .off = NO_OFF, .fixed = "situ", .why = IMPL,
        .line = L_ACT, .show = "%s"},
    /* situ_beta / situ_linear_beta: the spellings deltafin's generator wrote before
     * it followed the release; read so those checkpoints keep loading. */
    {.key = "activation_situ_beta", .alias = "situ_beta", .type = T_FLOAT,
        .off = OFF(situ_beta), .positive = 1, REL(4.0), .line = L_ACT,
        .show = " (beta %g"},
    {.key = "activation_situ_linear_beta", .alias = "situ_linear_beta", .type = T_FLOAT,
        .off = OFF(situ_linear_beta), .positive = 1, REL(25.0), .line = L_ACT,
        .show = ", linear beta %g)"},
    {INT("attn_res_block_size", NULL, attn_res_block, 1, DF_MAX_LAYERS), .line = L_ATTNRES,
        .show = "%d"},

    /* MLA */
    {INT("num_attention_heads", NULL, mla_heads, 1, 65536), .line = L_MLA, .show = "%d heads"},
    {INT("q_lora_rank", NULL, q_lora_rank, 1, DIM_MAX), .line = L_MLA, .show = ", q_lora %d"},
    {INT("kv_lora_rank", NULL, kv_lora_rank, 1, DIM_MAX), .line = L_MLA,
        .show = ", kv_lora %d"},
    {INT("qk_nope_head_dim", NULL, qk_nope_dim, 1, 65536), .line = L_MLA, .show = ", nope %d"},
    {INT("qk_rope_head_dim", NULL, qk_rope_dim, 0, 65536), .line = L_MLA, .show = ", rope %d"},
    {INT("v_head_dim", NULL, v_head_dim, 1, 65536), .line = L_MLA, .show = ", v %d"},
    {.key = "mla_use_nope", .type = T_BOOL, .off = OFF(mla_use_nope), .must_true = 1,
        .why = "rotary MLA is not supported", REL(1)},
    {.key = "mla_use_output_gate", .type = T_BOOL, .off = OFF(mla_output_gate), REL(1),
        .check = chk_mla_dims, .line = L_MLA, .show = ", output gate %s"},

    /* FFN / MoE. The release spells these the kimi_linear way; the DeepSeek
     * spellings are read as aliases (transformers' KimiLinearConfig maps them). */
    {INT("first_k_dense_replace", NULL, first_k_dense, 0, 0), .hi_of = OFF(n_layers),
        REL(1)},
    {INT("intermediate_size", NULL, dense_inter, 1, DIM_MAX), .line = L_DENSE,
        .show = "intermediate %d"},
    {INT("num_experts", "n_routed_experts", n_experts, 1, 65536), .line = L_MOE,
        .show = "%d routed experts"},
    {INT("num_experts_per_token", "num_experts_per_tok", top_k, 1, 0), .hi_of = OFF(n_experts),
        .line = L_MOE, .show = ", top %d"},
    {INT("num_shared_experts", "n_shared_experts", n_shared, 0, 64), .line = L_MOE,
        .show = ", %d shared (width %d)", .mul_of = OFF(moe_inter)},
    {INT("moe_intermediate_size", NULL, moe_inter, 1, DIM_MAX), .line = L_MOE,
        .show = ", expert intermediate %d"},
    {INT("routed_expert_hidden_size", NULL, latent, 1, DIM_MAX), .line = L_MOE,
        .show = ", latent %d"},
    {.key = "latent_moe_use_norm", .type = T_BOOL, .off = OFF(latent_norm), REL(1),
        .line = L_MOE, .show = "? (normed)"},
    {.key = "moe_router_activation_func", .alias = "scoring_func", .type = T_STR,
        .off = NO_OFF, .fixed = "sigmoid", .why = IMPL, .line = L_ROUTER, .show = "%s"},
    {.key = "topk_method", .type = T_STR, .off = NO_OFF, .fixed = "noaux_tc", .why = IMPL,
        .line = L_ROUTER, .show = ", %s"},
    {INT("num_expert_group", "n_group", n_group, 1, 65536), REL(1),
        .check = chk_one_group, .line = L_ROUTER, .show = ", %d group"},
    {INT("topk_group", NULL, topk_group, 1, 0), .hi_of = OFF(n_group), REL(1)},
    {.key = "moe_renormalize", .alias = "norm_topk_prob", .type = T_BOOL,
        .off = OFF(norm_topk_prob), REL(1), .line = L_ROUTER, .show = ", renormalize %s"},
    {.key = "routed_scaling_factor", .type = T_FLOAT, .off = OFF(routed_scale), .positive = 1,
        REL(1.0), .check = chk_shared_width, .line = L_ROUTER, .show = ", scale %g"},
    /* Optional in the DeepSeek layout, present in the release: with one group,
     * grouped and ungrouped top-k select the same experts. */
    {.key = "use_grouped_topk", .type = T_BOOL, .off = OFF(grouped_topk), .optional = 1,
        .absent = 0, REL(1)},
    {.key = "moe_layer_freq", .type = T_INT, .off = NO_OFF, .lo = 1, .hi = 1, .optional = 1,
        REL(1), .why = "every layer after first_k_dense_replace is MoE"},
    {.key = "num_key_value_heads", .type = T_INT, .off = NO_OFF, .eq_of = OFF(mla_heads),
        .optional = 1, .why = "MLA has one key/value head per query head"},
    {.key = "num_nextn_predict_layers", .type = T_INT, .off = NO_OFF, .lo = 0, .hi = 0,
        .optional = 1, REL(0), .why = "MTP layers are not supported"},

    /* KDA (linear_attn_config; its layer lists are read by layer_list) */
    {.in = IN_LINEAR, INT("num_heads", NULL, kda_heads, 1, 65536), .line = L_KDA,
        .show = "%d heads"},
    {.in = IN_LINEAR, INT("head_dim", NULL, kda_head_dim, 1, 65536), .line = L_KDA,
        .show = " x %d"},
    {.in = IN_LINEAR, INT("short_conv_kernel_size", NULL, kda_conv, 1, 64), REL(4),
        .line = L_KDA, .show = ", conv %d"},
    {.in = IN_LINEAR, .key = "gate_lower_bound", .type = T_FLOAT,
        .off = OFF(kda_gate_lower_bound), REL(-5.0), .line = L_KDA,
        .show = ", gate lower bound %g"},
    {.in = IN_LINEAR, .key = "use_full_rank_gate", .type = T_BOOL,
        .off = OFF(kda_full_rank_gate), .must_true = 1,
        .why = "only the full-rank gate is supported", REL(1), .check = chk_kda_dims,
        .line = L_KDA, .show = ", full-rank gate %s"},
};
#define NFIELDS (sizeof fields / sizeof fields[0])

static const char *field_key_at(size_t off) {
  for (size_t i = 0; i < NFIELDS; i++)
    if (fields[i].off == off) return fields[i].key;
  return "?";
}

/* An optional field present: unkept ones must have their one value. */
static int read_unkept_int(const sec *s, const cfield *f, const df_config *c, df_err *e) {
  const json_t *v = json_object_get(s->obj, f->key);
  if (!v) return 0;
  if (f->eq_of != NO_OFF) {
    int want = (int)ival(c, f->eq_of, T_INT);
    if (!(json_is_integer(v) && json_integer_value(v) == want))
      return df_err_set(e, "%s: %s%s must equal %s (%d) or be absent (%s)", s->label, s->path,
                        f->key, field_key_at(f->eq_of), want, f->why);
    return 0;
  }
  if (!(json_is_integer(v) && json_integer_value(v) == f->lo))
    return df_err_set(e, "%s: %s%s must be %ld or absent (%s)", s->label, s->path, f->key, f->lo,
                      f->why);
  return 0;
}

static int read_field(const sec *s, const cfield *f, df_config *c, df_err *e) {
  char *dst = f->off == NO_OFF ? NULL : (char *)c + f->off - 1;
  if (f->optional && !json_object_get(s->obj, f->key) &&
      !(f->alias && json_object_get(s->obj, f->alias))) {
    if (dst && f->type == T_BOOL) *(int *)dst = (int)f->absent;
    return 0;
  }
  const char *used = f->key;
  long hi = f->hi_of != NO_OFF ? ival(c, f->hi_of, T_INT) + f->hi : f->hi;
  switch (f->type) {
  case T_INT:
    if (!dst) return read_unkept_int(s, f, c, e);
    if (get_int2(s, f->key, f->alias, f->lo, hi, (int *)dst, e)) return -1;
    break;
  case T_LONG:
    if (get_long2(s, f->key, f->alias, f->lo, hi, (long *)dst, e)) return -1;
    break;
  case T_FLOAT:
    if (get_float2(s, f->key, f->alias, (float *)dst, e)) return -1;
    if (f->positive && !(*(float *)dst > 0)) goto not_positive;
    break;
  case T_DOUBLE:
    if (get_double(s, f->key, (double *)dst, e)) return -1;
    if (f->positive && !(*(double *)dst > 0)) goto not_positive;
    break;
  case T_BOOL:
    if (get_bool2(s, f->key, f->alias, (int *)dst, e)) return -1;
    if (f->must_true && !*(int *)dst)
      return df_err_set(e, "%s: %s%s is false: %s", s->label, s->path, f->key, f->why);
    break;
  case T_STR:
    if (want_str2(s, f->key, f->alias, f->fixed, f->why, e)) return -1;
    break;
  }
  if (f->alias) need2(s, f->key, f->alias, &used, e); /* the spelling found, for the check */
  return f->check ? f->check(f, s->path, s->label, used, c, e) : 0;
not_positive:
  need2(s, f->key, f->alias, &used, e);
  return df_err_set(e, "%s: %s%s must be positive", s->label, s->path, used);
}

static int read_fields(const sec *s, fsec in, df_config *c, df_err *e) {
  for (size_t i = 0; i < NFIELDS; i++)
    if (fields[i].in == in && read_field(s, &fields[i], c, e)) return -1;
  return 0;
}

void df_config_release_defaults(df_config *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->model_type, sizeof c->model_type, "kimi_k3");
  c->nested = 1;
  for (size_t i = 0; i < NFIELDS; i++) {
    const cfield *f = &fields[i];
    if (f->off == NO_OFF || !f->has_release) continue;
    char *dst = (char *)c + f->off - 1;
    switch (f->type) {
    case T_INT:
    case T_BOOL: *(int *)dst = (int)f->release; break;
    case T_LONG: *(long *)dst = (long)f->release; break;
    case T_FLOAT: *(float *)dst = (float)f->release; break;
    case T_DOUBLE: *(double *)dst = f->release; break;
    case T_STR: break;
    }
  }
  c->expert_group = DF_MXFP4_GROUP;
}

static int parse_text(const sec *t, const sec *root, df_config *c, df_err *e) {
  const char *lab = t->label;
  if (read_fields(t, IN_TEXT, c, e)) return -1;

  /* KDA and the layer kinds */
  sec la;
  if (sub(t, "linear_attn_config", &la, e) || read_fields(&la, IN_LINEAR, c, e)) return -1;
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

/* The labels of the lines fields show on (pline order). */
static const char *const line_label[L_COUNT] = {
    [L_HIDDEN] = "hidden",         [L_VOCAB] = "vocab",         [L_EPS] = "rms_norm_eps",
    [L_MAXPOS] = "max positions",  [L_ACT] = "activation",      [L_ATTNRES] = "AttnRes block",
    [L_KDA] = "KDA",               [L_MLA] = "MLA",             [L_DENSE] = "dense FFN",
    [L_MOE] = "MoE",               [L_ROUTER] = "router",
};

static void show_field(FILE *f, const cfield *d, const df_config *c) {
  const char *p = d->off == NO_OFF ? NULL : AT(c, d->off);
  switch (d->type) {
  case T_INT:
    if (d->mul_of != NO_OFF)
      fprintf(f, d->show, *(const int *)p, *(const int *)p * (int)ival(c, d->mul_of, T_INT));
    else
      fprintf(f, d->show, *(const int *)p);
    break;
  case T_LONG: fprintf(f, d->show, *(const long *)p); break;
  case T_FLOAT: fprintf(f, d->show, (double)*(const float *)p); break;
  case T_DOUBLE: fprintf(f, d->show, *(const double *)p); break;
  case T_BOOL:
    if (d->show[0] == '?') {
      if (*(const int *)p) fputs(d->show + 1, f);
    } else {
      fprintf(f, d->show, *(const int *)p ? "yes" : "no");
    }
    break;
  case T_STR: fprintf(f, d->show, d->fixed); break; /* the one value accepted */
  }
}

static void print_line(FILE *f, pline l, const df_config *c) {
  fprintf(f, "%-18s", line_label[l]);
  for (size_t i = 0; i < NFIELDS; i++)
    if (fields[i].line == l) show_field(f, &fields[i], c);
  fputc('\n', f);
}

void df_config_print(const df_config *c, void *FILE_stream) {
  FILE *f = FILE_stream;
  fprintf(f, "model_type        %s (%s config)\n", c->model_type, c->nested ? "nested" : "flat");
  print_line(f, L_HIDDEN, c);
  /* the layer lists, summarised (they are not table fields: two lists, one kind each) */
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
  for (int l = L_VOCAB; l < L_COUNT; l++) print_line(f, (pline)l, c);
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

/* The significant digits of the shortest decimal that reads back as the
 * double v (17 always do). */
static int double_digits(double v) {
  char buf[40];
  for (int p = 1; p < 17; p++) {
    snprintf(buf, sizeof buf, "%.*g", p, v);
    if (strtod(buf, NULL) == v) return p;
  }
  return 17;
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

/* A field's JSON value: kept fields from c, unkept ones as the release has them
 * (the fixed string, the one number, or the field they must equal). */
static json_t *field_json(const cfield *f, const df_config *c) {
  const char *p = f->off == NO_OFF ? NULL : AT(c, f->off);
  switch (f->type) {
  case T_INT:
    if (f->off != NO_OFF) return json_integer(*(const int *)p);
    return json_integer(f->eq_of != NO_OFF ? ival(c, f->eq_of, T_INT) : f->lo);
  case T_LONG: return json_integer(*(const long *)p);
  case T_FLOAT: return jfloat(*(const float *)p);
  /* a double (rms_norm_eps) as it is: the dump's precision reaches its
   * shortest decimal (df_config_to_json) */
  case T_DOUBLE: return json_real(*(const double *)p);
  case T_BOOL: return json_boolean(*(const int *)p);
  case T_STR: return json_string(f->fixed);
  }
  return json_null();
}

char *df_config_to_json(const df_config *c) {
  json_t *full = json_array(), *kda = json_array();
  for (int i = 0; i < c->n_layers; i++)
    json_array_append_new(c->layer_kind[i] == DF_LAYER_MLA ? full : kda, json_integer(i + 1));
  json_t *lin = json_object();
  json_object_set_new(lin, "full_attn_layers", full);
  json_object_set_new(lin, "kda_layers", kda);
  json_t *t = json_object();
  for (size_t i = 0; i < NFIELDS; i++)
    json_object_set_new(fields[i].in == IN_LINEAR ? lin : t, fields[i].key,
                        field_json(&fields[i], c));

  /* The release's text_config keys the engine does not read. */
  json_object_set_new(t, "architectures", json_pack("[s]", "KimiLinearForCausalLM"));
  json_object_set_new(t, "auto_map", auto_map("configuration_kimi_k3.KimiLinearConfig",
                                              "modeling_kimi_linear.KimiLinearModel",
                                              "modeling_kimi_linear.KimiLinearForCausalLM"));
  json_object_set_new(t, "model_type", json_string("kimi_linear"));
  json_object_set_new(t, "dtype", json_string("bfloat16"));
  json_object_set_new(t, "initializer_range", jfloat(0.02f));
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
  /* sorted keys, two-space indent: how transformers' save_pretrained writes it.
   * Reals with 9 digits, which every float's shortest decimal fits (1e-05, not
   * its double expansion), unless a double field needs more: then 17 for all,
   * exact if longer (a fuzzed rms_norm_eps of 1.6666666666666666e29 came back
   * as 1.66666667e29) */
  int prec = 9;
  for (size_t i = 0; i < NFIELDS; i++)
    if (fields[i].type == T_DOUBLE && fields[i].off != NO_OFF) {
      int d = double_digits(*(const double *)AT(c, fields[i].off));
      if (d > prec) prec = 17;
    }
  char *s = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(prec));
  json_decref(root);
  return s;
}

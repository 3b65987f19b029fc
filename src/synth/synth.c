/* Checkpoint generator: presets, the tensor plan and the model directory
 * (see synth.h for the layout); the weights' values and their parallel
 * output are synth_gen.c's. */
#include "synth/synth.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/util.h"
#include "format/safetensors.h"
#include "model/k3.h"
#include "model/spine_int8.h"
#include "synth/synth_int.h"

/* ---------------- presets ---------------- */

const char *const df_synth_presets[] = {"tiny", "small", "k3-shaped", "k3-trunk", NULL};

typedef struct preset {
  const char *name;
  int hidden, layers, block;
  int kda_heads, kda_dim;
  int mla_heads, q_lora, kv_lora, nope, rope, vdim;
  int dense_inter, experts, top_k, shared, moe_inter, latent;
  long max_pos;
  uint64_t shard_target; /* bytes per shard before starting the next */
  int random_codes;      /* experts as random codes with valid scales (fast) */
} preset;

static const preset presets[] = {
    {"tiny", 64, 8, 4, 4, 16, 4, 32, 32, 16, 8, 16, 128, 32, 4, 2, 64, 32, 131072, 768u << 10, 0},
    {"small", 512, 16, 4, 8, 64, 8, 256, 128, 64, 32, 64, 1536, 128, 8, 2, 256, 256, 131072,
     64u << 20, 0},
    /* K3's real expert shapes (latent 3584, moe_inter 3072, top-16) on a small trunk */
    {"k3-shaped", 1024, 5, 4, 8, 128, 8, 512, 512, 128, 64, 128, 2048, 64, 16, 2, 3072, 3584,
     1048576, 1024ull << 20, 1},
    /* K3's real trunk and vocabulary; layers and experts set in synth_trunk.c */
    {"k3-trunk", 7168, 4, 12, 96, 128, 96, 1536, 512, 128, 64, 128, 33792, 16, 16, 2, 3072, 3584,
     1048576, 4096ull << 20, 1},
};

static const preset *find_preset(const char *name) {
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (!strcmp(presets[i].name, name)) return &presets[i];
  return NULL;
}

static int vocab_ranks(void) {
  static int cached = 0;
  if (!cached) {
    df_synth_vocab v;
    df_synth_vocab_build(&v);
    cached = v.n;
    df_synth_vocab_free(&v);
  }
  return cached;
}

int df_synth_config(const df_synth_opts *o, df_config *c, df_err *e) {
  const preset *p = find_preset(o->preset ? o->preset : "");
  if (!p) return df_err_set(e, "unknown preset '%s' (tiny, small, k3-shaped, k3-trunk)", o->preset ? o->preset : "");
  int layers = p->layers, experts = p->experts;
  if (!strcmp(p->name, "k3-shaped")) {
    if (o->moe_layers) layers = 1 + o->moe_layers;
    if (o->experts) experts = o->experts;
  } else if (!strcmp(p->name, "k3-trunk")) {
    if (o->moe_layers) return df_err_set(e, "k3-trunk takes --layers N, not --moe-layers");
  } else if (o->moe_layers || o->experts || o->layers) {
    return df_err_set(e, "--moe-layers/--experts apply to the k3-shaped preset, --layers/--experts to k3-trunk");
  }
  if (layers < 2 || layers > DF_MAX_LAYERS)
    return df_err_set(e, "--moe-layers: %d layers is outside [2, %d]", layers, DF_MAX_LAYERS);
  if (experts < p->top_k || experts > 65536)
    return df_err_set(e, "--experts: %d is outside [%d, 65536] (top-k is %d)", experts, p->top_k,
                      p->top_k);
  int n_ranks = vocab_ranks();
  /* the release's fixed values (activation betas, eps, flags, MXFP4 group) from
   * the config table; the preset gives the dimensions */
  df_config_release_defaults(c);
  c->hidden = p->hidden;
  c->n_layers = layers;
  c->vocab = n_ranks + 256;
  c->bos_id = n_ranks;
  c->eos_id = n_ranks + 2;
  c->pad_id = n_ranks + 255;
  c->max_pos = p->max_pos;
  c->attn_res_block = p->block;
  for (int l = 0; l < layers; l++) {
    /* like K3: every 4th layer (1-based) and the last one are MLA */
    int mla = (l + 1) % 4 == 0 || l + 1 == layers;
    c->layer_kind[l] = mla ? DF_LAYER_MLA : DF_LAYER_KDA;
    if (mla) c->n_mla++;
    else c->n_kda++;
  }
  c->kda_heads = p->kda_heads;
  c->kda_head_dim = p->kda_dim;
  c->mla_heads = p->mla_heads;
  c->q_lora_rank = p->q_lora;
  c->kv_lora_rank = p->kv_lora;
  c->qk_nope_dim = p->nope;
  c->qk_rope_dim = p->rope;
  c->v_head_dim = p->vdim;
  c->dense_inter = p->dense_inter;
  c->n_experts = experts;
  c->top_k = p->top_k;
  c->n_shared = p->shared;
  c->moe_inter = p->moe_inter;
  c->latent = p->latent;
  if (!strcmp(p->name, "k3-trunk")) return df_synth_trunk_config(o, c, e);
  return 0;
}

/* ---------------- the tensor plan ---------------- */

#define P_LM "language_model."
#define P_M "language_model.model."

static tspec *add(plan *p, df_dtype dt, gen_kind k, double a, double off, int ndim, int64_t d0,
                  int64_t d1, int64_t d2, const char *fmt, ...) __attribute__((format(printf, 10, 11)));
static tspec *add(plan *p, df_dtype dt, gen_kind k, double a, double off, int ndim, int64_t d0,
                  int64_t d1, int64_t d2, const char *fmt, ...) {
  if (p->n == p->cap) {
    p->cap = p->cap ? p->cap * 2 : 256;
    p->t = df_xrealloc(p->t, (size_t)p->cap * sizeof *p->t);
  }
  tspec *t = &p->t[p->n++];
  memset(t, 0, sizeof *t);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->name, sizeof t->name, fmt, ap);
  va_end(ap);
  t->dt = dt;
  t->kind = k;
  t->a = a;
  t->off = off;
  t->ndim = ndim;
  t->shape[0] = d0;
  t->shape[1] = d1;
  t->shape[2] = d2;
  t->nelem = 1;
  for (int i = 0; i < ndim; i++) t->nelem *= (uint64_t)t->shape[i];
  t->nbytes = t->nelem * df_dtype_size(dt);
  t->group = p->ngroups++;
  return t;
}

/* Amplitude of U(-a, a) with variance gain^2 / fan_in: y = W x keeps x's scale. */
static double amp(double gain, int64_t fan_in) { return gain * sqrt(3.0 / (double)fan_in); }

#define BF DF_DT_BF16
#define F32 DF_DT_F32
#define U8 DF_DT_U8

/* Weight scales: chosen so activations stay O(1) through every layer, the
 * AttnRes softmax is far from uniform, the router spreads over experts and the
 * logits have a realistic spread (checked with the reference). */
#define NORM_JITTER 0.1
#define RES_PROJ_GAIN 1.5
#define ROUTER_GAIN 2.0
#define ROUTER_BIAS 0.1
#define LM_HEAD_GAIN 2.5

#define WEIGHT(out, in, gain, ...) add(p, BF, G_UNIFORM, amp(gain, in), 0, 2, out, in, 0, __VA_ARGS__)
#define NORMW(n, ...) add(p, BF, G_UNIFORM, NORM_JITTER, 1.0, 1, n, 0, 0, __VA_ARGS__)

static void plan_build(plan *p, const df_config *c, const preset *pr) {
  memset(p, 0, sizeof *p);
  const int64_t H = c->hidden, V = c->vocab;
  add(p, BF, G_UNIFORM, 1.0, 0, 2, V, H, 0, P_M "embed_tokens.weight");
  for (int l = 0; l < c->n_layers; l++) {
    NORMW(H, P_M "layers.%d.input_layernorm.weight", l);
    NORMW(H, P_M "layers.%d.post_attention_layernorm.weight", l);
    NORMW(H, P_M "layers.%d.self_attention_res_norm.weight", l);
    NORMW(H, P_M "layers.%d.mlp_res_norm.weight", l);
    WEIGHT(1, H, RES_PROJ_GAIN, P_M "layers.%d.self_attention_res_proj.weight", l);
    WEIGHT(1, H, RES_PROJ_GAIN, P_M "layers.%d.mlp_res_proj.weight", l);
    if (c->layer_kind[l] == DF_LAYER_KDA) {
      const int64_t NH = c->kda_heads, D = c->kda_head_dim, P = NH * D, K = c->kda_conv;
      WEIGHT(P, H, 1.0, P_M "layers.%d.self_attn.q_proj.weight", l);
      WEIGHT(P, H, 1.0, P_M "layers.%d.self_attn.k_proj.weight", l);
      WEIGHT(P, H, 1.0, P_M "layers.%d.self_attn.v_proj.weight", l);
      WEIGHT(P, H, 1.0, P_M "layers.%d.self_attn.g_proj.weight", l);
      WEIGHT(D, H, 1.0, P_M "layers.%d.self_attn.f_a_proj.weight", l);
      WEIGHT(P, D, 1.0, P_M "layers.%d.self_attn.f_b_proj.weight", l);
      WEIGHT(NH, H, 1.0, P_M "layers.%d.self_attn.b_proj.weight", l);
      WEIGHT(H, P, 1.0, P_M "layers.%d.self_attn.o_proj.weight", l);
      static const char *conv[3] = {"q", "k", "v"};
      for (int i = 0; i < 3; i++)
        add(p, F32, G_UNIFORM, amp(1.0, K), 0, 3, P, 1, K, P_M "layers.%d.self_attn.%s_conv1d.weight",
            l, conv[i]);
      /* K3 stores max(heads, head_dim) entries, only the first `heads` used */
      tspec *al = add(p, F32, G_ALOG, 1.0, 0, 1, NH > D ? NH : D, 0, 0, P_M "layers.%d.self_attn.A_log", l);
      al->used = (int)NH;
      /* dt_bias in [-4, -1]: decays from fast to slow (alpha ~0.25 .. ~0.995) */
      add(p, F32, G_UNIFORM, 1.5, -2.5, 1, P, 0, 0, P_M "layers.%d.self_attn.dt_bias", l);
      add(p, F32, G_UNIFORM, NORM_JITTER, 1.0, 1, D, 0, 0, P_M "layers.%d.self_attn.o_norm.weight", l);
    } else {
      const int64_t MH = c->mla_heads, QL = c->q_lora_rank, KL = c->kv_lora_rank;
      const int64_t NO = c->qk_nope_dim, RO = c->qk_rope_dim, VD = c->v_head_dim;
      WEIGHT(QL, H, 1.0, P_M "layers.%d.self_attn.q_a_proj.weight", l);
      NORMW(QL, P_M "layers.%d.self_attn.q_a_layernorm.weight", l);
      WEIGHT(MH * (NO + RO), QL, 1.0, P_M "layers.%d.self_attn.q_b_proj.weight", l);
      WEIGHT(KL + RO, H, 1.0, P_M "layers.%d.self_attn.kv_a_proj_with_mqa.weight", l);
      NORMW(KL, P_M "layers.%d.self_attn.kv_a_layernorm.weight", l);
      WEIGHT(MH * (NO + VD), KL, 1.0, P_M "layers.%d.self_attn.kv_b_proj.weight", l);
      WEIGHT(MH * VD, H, 1.0, P_M "layers.%d.self_attn.g_proj.weight", l);
      WEIGHT(H, MH * VD, 1.0, P_M "layers.%d.self_attn.o_proj.weight", l);
    }
    if (l < c->first_k_dense) {
      const int64_t I = c->dense_inter;
      WEIGHT(I, H, 1.0, P_M "layers.%d.mlp.gate_proj.weight", l);
      WEIGHT(I, H, 1.0, P_M "layers.%d.mlp.up_proj.weight", l);
      WEIGHT(H, I, 1.0, P_M "layers.%d.mlp.down_proj.weight", l);
    } else {
      const int64_t E = c->n_experts, L = c->latent, M = c->moe_inter, S = c->n_shared * M;
      const int64_t G = c->expert_group;
      WEIGHT(E, H, ROUTER_GAIN, P_M "layers.%d.block_sparse_moe.gate.weight", l);
      add(p, F32, G_UNIFORM, ROUTER_BIAS, 0, 1, E, 0, 0,
          P_M "layers.%d.block_sparse_moe.gate.e_score_correction_bias", l);
      WEIGHT(L, H, 1.0, P_M "layers.%d.block_sparse_moe.routed_expert_down_proj.weight", l);
      NORMW(L, P_M "layers.%d.block_sparse_moe.routed_expert_norm.weight", l);
      WEIGHT(H, L, 1.0, P_M "layers.%d.block_sparse_moe.routed_expert_up_proj.weight", l);
      WEIGHT(S, H, 1.0, P_M "layers.%d.block_sparse_moe.shared_experts.gate_proj.weight", l);
      WEIGHT(S, H, 1.0, P_M "layers.%d.block_sparse_moe.shared_experts.up_proj.weight", l);
      WEIGHT(H, S, 1.0, P_M "layers.%d.block_sparse_moe.shared_experts.down_proj.weight", l);
      for (int64_t x = 0; x < E; x++) {
        const int grp = p->ngroups;
        /* w1 (gate) [M, L], w2 (down) [L, M], w3 (up) [M, L]: upstream order */
        const int64_t rows[3] = {M, L, M}, cols[3] = {L, M, L};
        for (int w = 0; w < 3; w++) {
          tspec *pk, *sc;
          if (pr->random_codes) {
            pk = add(p, U8, G_CODES, 0, 0, 2, rows[w], cols[w] / 2, 0,
                     P_M "layers.%d.block_sparse_moe.experts.%lld.w%d.weight_packed", l, (long long)x, w + 1);
            sc = add(p, U8, G_SCALES, 0, 0, 2, rows[w], cols[w] / G, 0,
                     P_M "layers.%d.block_sparse_moe.experts.%lld.w%d.weight_scale", l, (long long)x, w + 1);
          } else {
            pk = add(p, U8, G_MX_PACKED, amp(1.0, cols[w]), 0, 2, rows[w], cols[w] / 2, 0,
                     P_M "layers.%d.block_sparse_moe.experts.%lld.w%d.weight_packed", l, (long long)x, w + 1);
            sc = add(p, U8, G_MX_SCALE, 0, 0, 2, rows[w], cols[w] / G, 0,
                     P_M "layers.%d.block_sparse_moe.experts.%lld.w%d.weight_scale", l, (long long)x, w + 1);
          }
          pk->group = sc->group = grp;
        }
        p->ngroups = grp + 1;
      }
    }
  }
  NORMW(H, P_M "norm.weight");
  NORMW(H, P_M "output_attn_res_norm.weight");
  WEIGHT(1, H, RES_PROJ_GAIN, P_M "output_attn_res_proj.weight");
  WEIGHT(V, H, LM_HEAD_GAIN, P_LM "lm_head.weight");
  /* multimodal tensors a text-only engine must skip */
  add(p, BF, G_UNIFORM, 0.05, 0, 2, 32, 48, 0, "vision_tower.encoder.blocks.%d.attn.qkv.weight", 0);
  add(p, F32, G_UNIFORM, 0.05, 0, 1, 32, 0, 0, "vision_tower.encoder.blocks.%d.norm1.weight", 0);
  add(p, BF, G_UNIFORM, 0.05, 0, 2, H, 32, 0, "mm_projector.proj.%d.weight", 0);

  /* shards: fill up to the target, never splitting a group */
  uint64_t cur = 0;
  int shard = 0;
  for (int i = 0; i < p->n;) {
    int j = i;
    uint64_t gb = 0;
    while (j < p->n && p->t[j].group == p->t[i].group) gb += p->t[j++].nbytes;
    if (cur > 0 && cur + gb > pr->shard_target) {
      shard++;
      cur = 0;
    }
    for (int k = i; k < j; k++) p->t[k].shard = shard;
    cur += gb;
    p->total += gb;
    i = j;
  }
  p->nshards = shard + 1;
}

/* --spine int8: the spine matrices the int8 copy replaces (the loader's
 * rule, so a hole is exactly what a run with --spine int8 never reads). */
static void mark_holes(plan *p) {
  for (int i = 0; i < p->n; i++) {
    tspec *t = &p->t[i];
    df_tensor d = {.name = t->name, .dtype = t->dt, .ndim = t->ndim,
                   .shape = {t->shape[0], t->shape[1], t->shape[2]}};
    t->hole = df_k3_int8_eligible(&d);
  }
}

static int plan_for(const df_synth_opts *o, df_config *c, plan *p, df_err *e) {
  if (o->spine_int8 && !strcmp(o->preset ? o->preset : "", "dspark"))
    return df_err_set(e, "--spine int8 applies to K3 presets, not dspark");
  if (df_synth_config(o, c, e)) return -1;
  plan_build(p, c, find_preset(o->preset));
  if (o->spine_int8) mark_holes(p);
  return 0;
}

/* headers: ~ name + 80 bytes of JSON per tensor; small files: < 1 MiB */
static void plan_sizes(const plan *p, uint64_t *model, uint64_t *int8) {
  *model = 1u << 20;
  *int8 = 0;
  for (int i = 0; i < p->n; i++) {
    const tspec *t = &p->t[i];
    uint64_t hdr = strlen(t->name) * 2 + 160;
    *model += hdr + (t->hole ? 0 : t->nbytes);
    /* I8 rows, F32 scales, each 64-byte aligned, both in the header */
    if (t->hole) *int8 += 2 * hdr + t->nelem + 4 * (uint64_t)t->shape[0] + 128;
  }
  if (*int8) *int8 += 1u << 20; /* the index */
}

int df_synth_sizes(const df_synth_opts *o, uint64_t *model, uint64_t *int8, df_err *e) {
  df_config c;
  plan p;
  if (plan_for(o, &c, &p, e)) return -1;
  plan_sizes(&p, model, int8);
  free(p.t);
  return 0;
}

int df_synth_size(const df_synth_opts *o, uint64_t *bytes, df_err *e) {
  uint64_t m, i;
  if (df_synth_sizes(o, &m, &i, e)) return -1;
  *bytes = m + i;
  return 0;
}

static int write_json(const char *dir, const char *name, json_t *j, size_t flags, df_err *e) {
  char *s = json_dumps(j, flags | JSON_INDENT(2));
  json_decref(j);
  if (!s) return df_err_set(e, "%s: could not serialise", name);
  size_t n = strlen(s);
  s = df_xrealloc(s, n + 2);
  s[n++] = '\n';
  char *path = df_path_join(dir, name);
  int rc = df_file_write_atomic(path, s, n, e);
  free(path);
  free(s);
  return rc;
}

/* Removes a previous model's files (completion markers first, so an
 * interrupted rewrite never looks complete), and the completion marker of
 * an int8 copy inside it, which would no longer match the new weights. */
static int clear_old(const char *dir, int force, df_err *e) {
  char *cfg = df_path_join(dir, "config.json");
  char *idx = df_path_join(dir, "model.safetensors.index.json");
  int exists = df_file_exists(cfg) || df_file_exists(idx);
  if (exists && !force) {
    free(cfg);
    free(idx);
    return df_err_set(e, "%s already holds a model (pass --force to replace it)", dir);
  }
  unlink(cfg);
  unlink(idx);
  free(cfg);
  free(idx);
  if (!exists) return 0;
  char *i8 = df_path_join(dir, DF_SPINE_INT8_DIR "/model.safetensors.index.json");
  unlink(i8);
  free(i8);
  DIR *d = opendir(dir);
  if (!d) return df_err_errno(e, "%s", dir);
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t n = strlen(de->d_name);
    if (!strncmp(de->d_name, "model-", 6) && n > 12 && !strcmp(de->d_name + n - 12, ".safetensors")) {
      char *p = df_path_join(dir, de->d_name);
      unlink(p);
      free(p);
    }
  }
  closedir(d);
  return 0;
}

/* The nearest existing ancestor of path (so a refusal leaves no empty folder). */
static int probe_fs(const char *path, struct statvfs *vs, struct stat *st) {
  char *probe = df_xstrdup(path);
  int ok;
  while (!(ok = statvfs(probe, vs) == 0 && stat(probe, st) == 0)) {
    char *slash = strrchr(probe, '/');
    if (!slash) {
      strcpy(probe, ".");
      ok = statvfs(probe, vs) == 0 && stat(probe, st) == 0;
      break;
    }
    if (slash == probe) slash[1] = 0;
    else *slash = 0;
  }
  free(probe);
  return ok;
}

static int space_refusal(const char *dir, const char *what, uint64_t need, uint64_t avail,
                         const char *preset, df_err *e) {
  /* MB below a GB: a tiny preset refused on a full or pseudo file system
   * (/proc) must not read "needs 0.00 GB ... 0.00 GB free" */
  double unit = need < 1000000000ull ? 1e6 : 1e9;
  const char *un = unit == 1e6 ? "MB" : "GB";
  return df_err_set(e,
                    "%s: preset %s needs %.2f %s%s but the file system has %.2f %s free; "
                    "choose another --out%s or fewer --experts/--moe-layers",
                    dir, preset, (double)need / unit, un, what, (double)avail / unit, un,
                    *what ? " / --spine-dir" : "");
}

/* Refuses when the model (and the int8 copy, on the same or another file
 * system) would not fit. Holes take no space. */
static int check_space(const df_synth_opts *o, const char *spine_dir, uint64_t model,
                       uint64_t int8, df_err *e) {
  const uint64_t margin = 64ull << 20;
  struct statvfs vm, vi;
  struct stat sm, si;
  if (!probe_fs(o->out_dir, &vm, &sm)) return 0;
  uint64_t am = (uint64_t)vm.f_bavail * (uint64_t)vm.f_frsize;
  if (spine_dir && probe_fs(spine_dir, &vi, &si) && si.st_dev != sm.st_dev) {
    uint64_t ai = (uint64_t)vi.f_bavail * (uint64_t)vi.f_frsize;
    if (ai < int8 + margin)
      return space_refusal(spine_dir, " for the int8 spine", int8 + margin, ai, o->preset, e);
    int8 = 0;
  }
  if (am < model + int8 + margin)
    return space_refusal(o->out_dir, spine_dir ? " with the int8 spine" : "",
                         model + int8 + margin, am, o->preset, e);
  return 0;
}

/* The index: the release's shape, plus, for --spine int8, the marker that
 * keeps the holes from ever being read as weights (model/spine_int8.h). */
static int write_index(const df_synth_opts *o, const char *spine_dir, const plan *p, json_t *wmap,
                       df_err *e) {
  json_t *idx = json_object();
  json_t *meta = json_object();
  json_object_set_new(meta, "total_size", json_integer((json_int_t)p->total));
  if (spine_dir) {
    json_object_set_new(meta, DF_K3_HOLES_KEY, json_string(DF_K3_HOLES_VALUE));
    char *abs = o->spine_dir ? realpath(spine_dir, NULL) : NULL;
    if (abs) json_object_set_new(meta, DF_K3_HOLES_DIR_KEY, json_string(abs));
    free(abs);
  }
  json_object_set_new(idx, "metadata", meta);
  json_object_set_new(idx, "weight_map", wmap);
  return write_json(o->out_dir, "model.safetensors.index.json", idx, JSON_SORT_KEYS, e);
}

/* The int8 copy's folder: a previous copy there is replaced only with
 * --force (checked before anything is created), its index (the completion
 * marker) removed first. */
static int spine_dir_step(const char *dir, int force, int create, df_err *e) {
  char *idx = df_path_join(dir, "model.safetensors.index.json");
  int exists = df_file_exists(idx);
  int rc = 0;
  if (exists && !force)
    rc = df_err_set(e, "%s already holds an int8 spine (pass --force to replace it)", dir);
  else if (create && exists && unlink(idx))
    rc = df_err_errno(e, "%s", idx);
  free(idx);
  return rc || !create ? rc : df_mkdir_p(dir, e);
}

static int write_small_files(const df_synth_opts *o, const df_config *c, df_err *e) {
  df_synth_vocab voc;
  df_synth_vocab_build(&voc);
  int rc = df_synth_write_tokenizer(o->out_dir, &voc, e);
  df_synth_vocab_free(&voc);
  if (rc) return -1;
  json_t *gen = json_object();
  json_object_set_new(gen, "bos_token_id", json_integer(c->bos_id));
  json_object_set_new(gen, "eos_token_id", json_integer(c->eos_id));
  json_object_set_new(gen, "pad_token_id", json_integer(c->pad_id));
  return write_json(o->out_dir, "generation_config.json", gen, 0, e);
}

int df_synth_make_model(const df_synth_opts *o, df_err *e) {
  if (!o->out_dir || !*o->out_dir) return df_err_set(e, "no output directory (--out DIR)");
  df_config c;
  plan p;
  if (plan_for(o, &c, &p, e)) return -1;
  char *spine_dir = NULL;
  if (o->spine_int8)
    spine_dir = o->spine_dir ? df_xstrdup(o->spine_dir) : df_path_join(o->out_dir, DF_SPINE_INT8_DIR);
  uint64_t need_model, need_int8;
  plan_sizes(&p, &need_model, &need_int8);
  int rc = check_space(o, spine_dir, need_model, need_int8, e);
  if (!rc && spine_dir) rc = spine_dir_step(spine_dir, o->force, 0, e);
  if (!rc) rc = df_mkdir_p(o->out_dir, e);
  if (!rc) rc = clear_old(o->out_dir, o->force, e);
  if (!rc && spine_dir) rc = spine_dir_step(spine_dir, o->force, 1, e);
  if (!rc) rc = write_small_files(o, &c, e);
  json_t *wmap = json_object();
  if (!rc) {
    synth_out so = {.out_dir = o->out_dir, .spine_dir = spine_dir, .seed = o->seed,
                    .threads = o->threads, .progress = o->progress};
    rc = synth_write_weights(&so, &p, wmap, e);
  }
  /* config.json last: only a complete directory has one */
  if (!rc) rc = write_index(o, spine_dir, &p, json_incref(wmap), e);
  json_decref(wmap);
  free(p.t);
  free(spine_dir);
  if (rc) return -1;
  char *cj = df_config_to_json(&c);
  if (!cj) return df_err_set(e, "config.json: could not serialise the config");
  char *path = df_path_join(o->out_dir, "config.json");
  rc = df_file_write_atomic(path, cj, strlen(cj), e);
  free(path);
  free(cj);
  return rc;
}

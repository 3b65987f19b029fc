/* The K3 roster against the published shapes (kimi-k3.md sections 3-4), the
 * checkpoint check on small written checkpoints with one defect each, and
 * `deltafin inspect` on them. */
#include <ftw.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/util.h"
#include "format/config.h"
#include "format/roster.h"
#include "format/safetensors.h"
#include "store/store.h"

/* ---- K3 itself ---- */

static void k3_config(df_config *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->model_type, sizeof c->model_type, "kimi_k3");
  c->hidden = 7168;
  c->n_layers = 93;
  c->vocab = 163840;
  c->kda_heads = 96;
  c->kda_head_dim = 128;
  c->kda_conv = 4;
  c->mla_heads = 96;
  c->q_lora_rank = 1536;
  c->kv_lora_rank = 512;
  c->qk_nope_dim = 128;
  c->qk_rope_dim = 64;
  c->v_head_dim = 128;
  c->mla_use_nope = 1;
  c->mla_output_gate = 1;
  c->first_k_dense = 1;
  c->dense_inter = 33792;
  c->n_experts = 896;
  c->top_k = 16;
  c->n_shared = 2;
  c->moe_inter = 3072;
  c->latent = 3584;
  c->latent_norm = 1;
  c->n_group = c->topk_group = 1;
  c->expert_group = 32;
  for (int l = 1; l <= 93; l++) {
    int mla = l % 4 == 0 || l == 93;
    c->layer_kind[l - 1] = mla ? DF_LAYER_MLA : DF_LAYER_KDA;
    if (mla) c->n_mla++;
    else c->n_kda++;
  }
}

typedef struct count_ctx {
  long n, experts;
  uint64_t expert_bytes_first; /* bytes of layer 1 expert 0's six parts */
} count_ctx;

static int count_cb(const df_roster_item *it, void *v) {
  count_ctx *k = v;
  k->n++;
  if (it->is_expert) {
    k->experts++;
    int l, x, p;
    assert_int_equal(df_roster_parse_expert(it->name, &l, &x, &p), 0);
    if (l == 1 && x == 0) k->expert_bytes_first += (uint64_t)it->shape[0] * (uint64_t)it->shape[1];
  }
  return 0;
}

static void expect_shape(const df_config *c, const char *name, df_dtype dt, int ndim, int64_t a,
                         int64_t b, int64_t d) {
  df_roster_item it;
  if (!df_roster_expect(c, name, &it)) fail_msg("not in roster: %s", name);
  assert_string_equal(it.name, name);
  assert_int_equal(it.dtype, dt);
  assert_int_equal(it.ndim, ndim);
  const int64_t want[3] = {a, b, d};
  for (int i = 0; i < ndim; i++)
    if (it.shape[i] != want[i]) fail_msg("%s: dim %d is %lld, want %lld", name, i,
                                         (long long)it.shape[i], (long long)want[i]);
}

static void test_k3_roster(void **st) {
  (void)st;
  df_config c;
  k3_config(&c);
  count_ctx k = {0};
  assert_int_equal(df_roster_foreach(&c, count_cb, &k), 0);
  /* 5 globals; per layer 6 shared + 14 KDA or 8 MLA; 3 dense (layer 0);
   * 8 MoE spine tensors and 896 x 6 expert tensors in 92 layers. */
  assert_int_equal(k.n, 5 + 93 * 6 + 69 * 14 + 24 * 8 + 3 + 92 * 8 + 92L * 896 * 6);
  assert_int_equal(k.experts, 92L * 896 * 6);
  /* one expert record: 17,547,264 bytes (kimi-k3.md section 4) */
  assert_int_equal(k.expert_bytes_first, 17547264);
  df_expert_layout lay;
  df_expert_layout_of(&c, &lay);
  assert_int_equal(lay.total, 17547264);

  const char *L = "language_model.model.layers.";
  char n[200];
#define N(fmt) (snprintf(n, sizeof n, "%s" fmt, L), n)
  expect_shape(&c, "language_model.model.embed_tokens.weight", DF_DT_BF16, 2, 163840, 7168, 0);
  expect_shape(&c, "language_model.lm_head.weight", DF_DT_BF16, 2, 163840, 7168, 0);
  expect_shape(&c, "language_model.model.norm.weight", DF_DT_BF16, 1, 7168, 0, 0);
  expect_shape(&c, "language_model.model.output_attn_res_proj.weight", DF_DT_BF16, 2, 1, 7168, 0);
  expect_shape(&c, N("5.mlp_res_proj.weight"), DF_DT_BF16, 2, 1, 7168, 0);
  expect_shape(&c, N("0.self_attn.q_proj.weight"), DF_DT_BF16, 2, 12288, 7168, 0);
  expect_shape(&c, N("0.self_attn.f_a_proj.weight"), DF_DT_BF16, 2, 128, 7168, 0);
  expect_shape(&c, N("0.self_attn.f_b_proj.weight"), DF_DT_BF16, 2, 12288, 128, 0);
  expect_shape(&c, N("0.self_attn.b_proj.weight"), DF_DT_BF16, 2, 96, 7168, 0);
  expect_shape(&c, N("0.self_attn.o_proj.weight"), DF_DT_BF16, 2, 7168, 12288, 0);
  expect_shape(&c, N("0.self_attn.v_conv1d.weight"), DF_DT_F32, 3, 12288, 1, 4);
  expect_shape(&c, N("0.self_attn.A_log"), DF_DT_F32, 1, 128, 0, 0);
  expect_shape(&c, N("0.self_attn.dt_bias"), DF_DT_F32, 1, 12288, 0, 0);
  expect_shape(&c, N("0.self_attn.o_norm.weight"), DF_DT_F32, 1, 128, 0, 0);
  expect_shape(&c, N("3.self_attn.q_a_proj.weight"), DF_DT_BF16, 2, 1536, 7168, 0);
  expect_shape(&c, N("3.self_attn.q_a_layernorm.weight"), DF_DT_BF16, 1, 1536, 0, 0);
  expect_shape(&c, N("3.self_attn.q_b_proj.weight"), DF_DT_BF16, 2, 18432, 1536, 0);
  expect_shape(&c, N("3.self_attn.kv_a_proj_with_mqa.weight"), DF_DT_BF16, 2, 576, 7168, 0);
  expect_shape(&c, N("3.self_attn.kv_a_layernorm.weight"), DF_DT_BF16, 1, 512, 0, 0);
  expect_shape(&c, N("3.self_attn.kv_b_proj.weight"), DF_DT_BF16, 2, 24576, 512, 0);
  expect_shape(&c, N("92.self_attn.g_proj.weight"), DF_DT_BF16, 2, 12288, 7168, 0);
  expect_shape(&c, N("92.self_attn.o_proj.weight"), DF_DT_BF16, 2, 7168, 12288, 0);
  expect_shape(&c, N("0.mlp.gate_proj.weight"), DF_DT_BF16, 2, 33792, 7168, 0);
  expect_shape(&c, N("0.mlp.down_proj.weight"), DF_DT_BF16, 2, 7168, 33792, 0);
  expect_shape(&c, N("1.block_sparse_moe.gate.weight"), DF_DT_BF16, 2, 896, 7168, 0);
  expect_shape(&c, N("1.block_sparse_moe.gate.e_score_correction_bias"), DF_DT_F32, 1, 896, 0, 0);
  expect_shape(&c, N("1.block_sparse_moe.routed_expert_down_proj.weight"), DF_DT_BF16, 2, 3584,
               7168, 0);
  expect_shape(&c, N("1.block_sparse_moe.routed_expert_norm.weight"), DF_DT_BF16, 1, 3584, 0, 0);
  expect_shape(&c, N("1.block_sparse_moe.routed_expert_up_proj.weight"), DF_DT_BF16, 2, 7168,
               3584, 0);
  expect_shape(&c, N("1.block_sparse_moe.shared_experts.up_proj.weight"), DF_DT_BF16, 2, 6144,
               7168, 0);
  expect_shape(&c, N("1.block_sparse_moe.shared_experts.down_proj.weight"), DF_DT_BF16, 2, 7168,
               6144, 0);
  expect_shape(&c, N("92.block_sparse_moe.experts.895.w1.weight_packed"), DF_DT_U8, 2, 3072, 1792,
               0);
  expect_shape(&c, N("92.block_sparse_moe.experts.895.w1.weight_scale"), DF_DT_U8, 2, 3072, 112,
               0);
  expect_shape(&c, N("1.block_sparse_moe.experts.0.w2.weight_packed"), DF_DT_U8, 2, 3584, 1536, 0);
  expect_shape(&c, N("1.block_sparse_moe.experts.0.w2.weight_scale"), DF_DT_U8, 2, 3584, 96, 0);
  expect_shape(&c, N("7.block_sparse_moe.experts.12.w3.weight_packed"), DF_DT_U8, 2, 3072, 1792,
               0);

  df_roster_item it;
  assert_false(df_roster_expect(&c, N("0.block_sparse_moe.gate.weight"), &it)); /* dense */
  assert_false(df_roster_expect(&c, N("1.mlp.gate_proj.weight"), &it));         /* MoE */
  assert_false(df_roster_expect(&c, N("3.self_attn.q_proj.weight"), &it));      /* MLA */
  assert_false(df_roster_expect(&c, N("0.self_attn.q_a_proj.weight"), &it));    /* KDA */
  assert_false(df_roster_expect(&c, N("93.input_layernorm.weight"), &it));
  assert_false(df_roster_expect(&c, N("01.input_layernorm.weight"), &it));
  assert_false(df_roster_expect(&c, N("1.block_sparse_moe.experts.896.w1.weight_packed"), &it));
  assert_false(df_roster_expect(&c, N("0.block_sparse_moe.experts.0.w1.weight_packed"), &it));
  assert_false(df_roster_expect(&c, N("1.block_sparse_moe.experts.0.w4.weight_packed"), &it));
  assert_false(df_roster_expect(&c, "vision_tower.blocks.0.w", &it));
  assert_false(df_roster_expect(&c, "language_model.model.embed_tokens", &it));
#undef N
}

static void test_classify_and_parse(void **st) {
  (void)st;
  assert_int_equal(df_roster_classify("language_model.model.norm.weight"), DF_TC_SPINE);
  assert_int_equal(df_roster_classify("language_model.lm_head.weight"), DF_TC_SPINE);
  assert_int_equal(
      df_roster_classify("language_model.model.layers.4.block_sparse_moe.experts.2.w1.weight_scale"),
      DF_TC_EXPERT);
  assert_int_equal(
      df_roster_classify("language_model.model.layers.4.block_sparse_moe.shared_experts.up_proj.weight"),
      DF_TC_SPINE);
  assert_int_equal(df_roster_classify("vision_tower.patch_embed.weight"), DF_TC_IGNORED);
  assert_int_equal(df_roster_classify("mm_projector.proj.0.weight"), DF_TC_IGNORED);
  assert_int_equal(df_roster_classify("model.layers.0.x"), DF_TC_OTHER);
  int l, x, p;
  assert_int_equal(df_roster_parse_expert(
                       "language_model.model.layers.41.block_sparse_moe.experts.805.w3.weight_scale",
                       &l, &x, &p),
                   0);
  assert_int_equal(l, 41);
  assert_int_equal(x, 805);
  assert_int_equal(p, 5);
  assert_int_equal(df_roster_parse_expert(
                       "language_model.model.layers.1.block_sparse_moe.experts.0.w2.weight_packed",
                       &l, &x, &p),
                   0);
  assert_int_equal(p, 2);
  assert_int_equal(df_roster_parse_expert(
                       "language_model.model.layers.1.block_sparse_moe.experts.00.w2.weight_packed",
                       &l, &x, &p),
                   -1);
  assert_int_equal(df_roster_parse_expert(
                       "language_model.model.layers.1.block_sparse_moe.experts.0.w2.weight_packedx",
                       &l, &x, &p),
                   -1);
  assert_int_equal(df_roster_parse_expert(
                       "language_model.model.layers.x.block_sparse_moe.experts.0.w2.weight_packed",
                       &l, &x, &p),
                   -1);
}

/* ---- small checkpoints with one defect each ---- */

static const char *tiny_json =
    "{\"model_type\":\"kimi_k3\",\"quantization_config\":{\"quant_method\":"
    "\"compressed-tensors\",\"format\":\"mxfp4-pack-quantized\",\"config_groups\":{\"group_0\":"
    "{\"weights\":{\"num_bits\":4,\"group_size\":32}}}},"
    "\"text_config\":{\"model_type\":\"kimi_linear\",\"hidden_size\":32,"
    "\"num_hidden_layers\":4,\"vocab_size\":64,\"rms_norm_eps\":1e-05,\"bos_token_id\":60,"
    "\"eos_token_id\":61,\"pad_token_id\":63,\"max_position_embeddings\":256,"
    "\"hidden_act\":\"situ\",\"situ_beta\":4.0,\"situ_linear_beta\":25.0,"
    "\"attn_res_block_size\":2,\"num_attention_heads\":2,\"q_lora_rank\":16,"
    "\"kv_lora_rank\":8,\"qk_nope_head_dim\":4,\"qk_rope_head_dim\":2,\"v_head_dim\":4,"
    "\"mla_use_nope\":true,\"mla_use_output_gate\":true,\"first_k_dense_replace\":1,"
    "\"intermediate_size\":48,\"n_routed_experts\":4,\"num_experts_per_tok\":2,"
    "\"n_shared_experts\":1,\"moe_intermediate_size\":32,\"routed_expert_hidden_size\":64,"
    "\"latent_moe_use_norm\":true,\"scoring_func\":\"sigmoid\",\"topk_method\":\"noaux_tc\","
    "\"n_group\":1,\"topk_group\":1,\"norm_topk_prob\":true,\"routed_scaling_factor\":1.0,"
    "\"linear_attn_config\":{\"full_attn_layers\":[2,4],"
    "\"kda_layers\":[1,3],\"num_heads\":2,\"head_dim\":8,\"short_conv_kernel_size\":4,"
    "\"gate_lower_bound\":-5.0,\"use_full_rank_gate\":true}}}";

static char dir[64];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static int setup(void **st) {
  (void)st;
  strcpy(dir, "/tmp/df_test_roster_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **st) {
  (void)st;
  return nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* What to break while writing. */
typedef struct defect {
  const char *drop, *reshape, *retype, *bad_scale, *extra;
  int swap_expert; /* write layer 1 expert 0's w2 parts before w1 */
  int64_t alog_len; /* 0 = canonical */
} defect;

typedef struct item_list {
  df_roster_item *v;
  int n, cap;
} item_list;

static int collect_cb(const df_roster_item *it, void *ctx) {
  item_list *l = ctx;
  if (l->n == l->cap) l->v = df_xrealloc(l->v, (size_t)(l->cap = l->cap ? 2 * l->cap : 256) * sizeof *l->v);
  l->v[l->n++] = *it;
  return 0;
}

static uint64_t item_bytes(const df_roster_item *it) {
  uint64_t n = df_dtype_size(it->dtype);
  for (int i = 0; i < it->ndim; i++) n *= (uint64_t)it->shape[i];
  return n;
}

static const char *g_bad_scale; /* tensor that gets an E8M0 255 */

static void write_shard(const char *file, df_roster_item *v, int n) {
  char *p = df_path_join(dir, file);
  df_st_writer *w = df_st_writer_new(p);
  free(p);
  df_err e;
  for (int i = 0; i < n; i++)
    if (df_st_writer_declare(w, v[i].name, v[i].dtype, v[i].ndim, v[i].shape, &e))
      fail_msg("%s", e.msg);
  assert_int_equal(df_st_writer_begin(w, &e), 0);
  for (int i = 0; i < n; i++) {
    uint64_t nb = item_bytes(&v[i]);
    uint8_t *b = df_xcalloc(1, nb + 1);
    if (strstr(v[i].name, "weight_scale")) memset(b, 127, nb);
    if (g_bad_scale && !strcmp(v[i].name, g_bad_scale)) b[3] = 255;
    assert_int_equal(df_st_writer_write(w, b, nb, &e), 0);
    free(b);
  }
  if (df_st_writer_finish(w, &e)) fail_msg("%s", e.msg);
  df_st_writer_free(w);
}

/* Writes config.json, two shards split at a layer boundary, the index, and a
 * vision tensor the check must ignore. */
static void write_ckpt(const df_config *c, const defect *d) {
  df_err e;
  char *cj = df_config_to_json(c);
  char *p = df_path_join(dir, "config.json");
  assert_int_equal(df_file_write_atomic(p, cj, strlen(cj), &e), 0);
  free(p);
  free(cj);
  item_list l = {0};
  df_roster_foreach(c, collect_cb, &l);
  g_bad_scale = d->bad_scale;
  int keep = 0, split = -1;
  for (int i = 0; i < l.n; i++) {
    df_roster_item it = l.v[i];
    if (d->drop && !strcmp(it.name, d->drop)) continue;
    if (d->reshape && !strcmp(it.name, d->reshape)) it.shape[0]++;
    if (d->retype && !strcmp(it.name, d->retype)) it.dtype = DF_DT_F32;
    if (d->alog_len && strstr(it.name, "A_log")) it.shape[0] = d->alog_len;
    if (split < 0 && strstr(it.name, "layers.2.")) split = keep;
    l.v[keep++] = it;
  }
  if (d->swap_expert) {
    const char *w1 = "language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_packed";
    for (int i = 0; i < keep; i++)
      if (!strcmp(l.v[i].name, w1)) {
        df_roster_item a = l.v[i], b = l.v[i + 1];
        l.v[i] = l.v[i + 2];
        l.v[i + 1] = l.v[i + 3];
        l.v[i + 2] = a;
        l.v[i + 3] = b;
        break;
      }
  }
  df_roster_item extra[2];
  memset(extra, 0, sizeof extra);
  snprintf(extra[0].name, sizeof extra[0].name, "vision_tower.patch_embed.weight");
  extra[0].dtype = DF_DT_BF16;
  extra[0].ndim = 1;
  extra[0].shape[0] = 8;
  int nextra = 1;
  if (d->extra) {
    extra[1] = extra[0];
    snprintf(extra[1].name, sizeof extra[1].name, "%s", d->extra);
    nextra = 2;
  }
  write_shard("model-00001-of-00003.safetensors", l.v, split);
  write_shard("model-00002-of-00003.safetensors", l.v + split, keep - split);
  write_shard("model-00003-of-00003.safetensors", extra, nextra);
  json_t *wm = json_object();
  for (int i = 0; i < keep; i++)
    json_object_set_new(wm, l.v[i].name,
                        json_string(i < split ? "model-00001-of-00003.safetensors"
                                              : "model-00002-of-00003.safetensors"));
  for (int i = 0; i < nextra; i++)
    json_object_set_new(wm, extra[i].name, json_string("model-00003-of-00003.safetensors"));
  json_t *idx = json_pack("{s:{}, s:o}", "metadata", "weight_map", wm);
  char *s = json_dumps(idx, 0);
  json_decref(idx);
  p = df_path_join(dir, "model.safetensors.index.json");
  assert_int_equal(df_file_write_atomic(p, s, strlen(s), &e), 0);
  free(p);
  free(s);
  free(l.v);
}

static void tiny(df_config *c) {
  df_err e;
  if (df_config_parse(c, tiny_json, strlen(tiny_json), &e)) fail_msg("%s", e.msg);
}

static void check(const defect *d, int flags, df_roster_report *r) {
  df_config c;
  tiny(&c);
  write_ckpt(&c, d);
  df_st_set s;
  df_err e;
  if (df_st_set_open(&s, dir, &e)) fail_msg("%s", e.msg);
  assert_int_equal(df_roster_check(&s, &c, flags, r, &e), 0);
  df_st_set_close(&s);
}

static int has_line(const df_roster_report *r, const char *a, const char *b) {
  for (int i = 0; i < r->n_lines; i++)
    if (strstr(r->lines[i], a) && (!b || strstr(r->lines[i], b))) return 1;
  return 0;
}

#define LP "language_model.model.layers."

static void test_check_clean(void **st) {
  (void)st;
  defect d = {0};
  df_roster_report r;
  check(&d, DF_ROSTER_SCAN_SCALES, &r);
  for (int i = 0; i < r.n_lines; i++) print_message("%s\n", r.lines[i]);
  assert_int_equal(r.n_problems, 0);
  assert_int_equal(r.n_found, r.n_expected);
  /* 5 + 4*6 + 2 KDA*14 + 2 MLA*8 + 3 dense + 3 MoE layers * (8 + 4*6) */
  assert_int_equal(r.n_expected, 5 + 24 + 28 + 16 + 3 + 3 * (8 + 24));
  df_roster_report_free(&r);
  /* a longer (padded) A_log is fine */
  d.alog_len = 20;
  check(&d, DF_ROSTER_SCAN_SCALES, &r);
  assert_int_equal(r.n_problems, 0);
  df_roster_report_free(&r);
}

static void test_check_defects(void **st) {
  (void)st;
  df_roster_report r;
  defect d = {.drop = LP "2.self_attn.A_log"};
  check(&d, 0, &r);
  assert_int_equal(r.n_problems, 1);
  assert_int_equal(r.n_missing, 1);
  assert_true(has_line(&r, "missing", LP "2.self_attn.A_log"));
  df_roster_report_free(&r);

  d = (defect){.reshape = LP "1.self_attn.q_b_proj.weight"};
  check(&d, 0, &r);
  assert_int_equal(r.n_problems, 1);
  assert_int_equal(r.n_bad_shape, 1);
  assert_true(has_line(&r, LP "1.self_attn.q_b_proj.weight", "[13, 16]"));
  df_roster_report_free(&r);

  d = (defect){.retype = LP "0.input_layernorm.weight"};
  check(&d, 0, &r);
  assert_int_equal(r.n_problems, 1);
  assert_int_equal(r.n_bad_dtype, 1);
  assert_true(has_line(&r, LP "0.input_layernorm.weight", "F32"));
  df_roster_report_free(&r);

  d = (defect){.alog_len = 1}; /* fewer than num_heads: both KDA layers */
  check(&d, 0, &r);
  assert_int_equal(r.n_bad_shape, 2);
  assert_true(has_line(&r, LP "0.self_attn.A_log", "at least"));
  df_roster_report_free(&r);

  const char *sc = LP "3.block_sparse_moe.experts.2.w2.weight_scale";
  d = (defect){.bad_scale = sc};
  check(&d, DF_ROSTER_SCAN_SCALES, &r);
  assert_int_equal(r.n_problems, 1);
  assert_int_equal(r.n_bad_scales, 1);
  assert_true(has_line(&r, sc, "255"));
  df_roster_report_free(&r);
  check(&d, 0, &r); /* without the scan it goes unseen */
  assert_int_equal(r.n_problems, 0);
  df_roster_report_free(&r);

  d = (defect){.extra = LP "0.self_attn.bogus.weight"};
  check(&d, 0, &r);
  assert_int_equal(r.n_unexpected, 1);
  assert_true(has_line(&r, "unexpected", "bogus"));
  df_roster_report_free(&r);
  d = (defect){.extra = "model.norm.weight"};
  check(&d, 0, &r);
  assert_int_equal(r.n_unexpected, 1);
  df_roster_report_free(&r);

  d = (defect){.swap_expert = 1};
  check(&d, 0, &r);
  assert_true(r.n_bad_layout >= 1);
  assert_true(has_line(&r, "layer 1 expert 0", "contiguous"));
  df_roster_report_free(&r);

  /* a missing expert part: one problem, no layout noise */
  d = (defect){.drop = LP "2.block_sparse_moe.experts.3.w3.weight_packed"};
  check(&d, DF_ROSTER_SCAN_SCALES, &r);
  assert_int_equal(r.n_problems, 1);
  assert_int_equal(r.n_missing, 1);
  df_roster_report_free(&r);
}

/* ---- deltafin inspect ---- */

/* Runs DF_BIN inspect ARGS; returns the exit status, stdout and stderr. */
static int run_inspect(const char *args, char **out, char **err) {
  const char *bin = getenv("DF_BIN");
  char *ep = df_path_join(dir, "stderr.txt");
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "\"%s\" inspect %s 2>\"%s\"", bin, args, ep);
  FILE *f = popen(cmd, "r");
  assert_non_null(f);
  size_t cap = 1 << 16, n = 0, got;
  char *b = df_xmalloc(cap);
  while ((got = fread(b + n, 1, cap - n - 1, f)) > 0)
    if ((n += got) + 1 >= cap) b = df_xrealloc(b, cap *= 2);
  b[n] = 0;
  int st = pclose(f);
  df_err e;
  size_t el;
  if (df_file_read(ep, err, &el, &e)) *err = df_xstrdup("");
  unlink(ep);
  free(ep);
  *out = b;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static long jint(json_t *o, const char *a, const char *b) {
  json_t *x = json_object_get(o, a);
  if (b) x = json_object_get(x, b);
  if (!json_is_integer(x)) fail_msg("no integer %s.%s", a, b ? b : "");
  return (long)json_integer_value(x);
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

static void test_inspect_cli(void **st) {
  (void)st;
  if (!getenv("DF_BIN") || access(getenv("DF_BIN"), X_OK) != 0) skip();
  defect d = {0};
  df_config c;
  tiny(&c);
  write_ckpt(&c, &d);
  char args[256], *out, *err;
  snprintf(args, sizeof args, "--model \"%s\" --json", dir);
  int rc = run_inspect(args, &out, &err);
  if (rc != 0) fail_msg("exit %d: %s", rc, err);
  json_error_t je;
  json_t *j = json_loads(out, 0, &je);
  if (!j) fail_msg("not JSON (%s): %s", je.text, out);
  /* independent tallies: MoE spine per layer = 8 (H=32, L=64, S=32, E=4) */
  long spine_tensors = 5 + 24 + 28 + 16 + 3 + 3 * 8;
  assert_int_equal(jint(j, "spine", "tensors"), spine_tensors);
  assert_int_equal(jint(j, "experts", "tensors"), 3 * 4 * 6);
  assert_int_equal(jint(j, "experts", "records"), 12);
  assert_int_equal(jint(j, "experts", "expected_records"), 12);
  /* record: w1,w3 packed [32, 32] + scale [32, 2]; w2 packed [64, 16] + scale [64, 1] */
  long rec = 2 * (32 * 32 + 32 * 2) + 64 * 16 + 64 * 1;
  assert_int_equal(jint(j, "experts", "record_bytes"), rec);
  assert_int_equal(jint(j, "experts", "bytes"), 12 * rec);
  assert_int_equal(jint(j, "ignored", "tensors"), 1);
  assert_int_equal(jint(j, "files", NULL), 3);
  /* per token: every spine byte except the embedding table, plus one row */
  long spine_bytes = jint(j, "spine", "bytes");
  long embed = 64 * 32 * 2;
  assert_int_equal(jint(j, "per_token", "spine_bytes"), spine_bytes - embed + 32 * 2);
  assert_int_equal(jint(j, "per_token", "expert_bytes"), 2 * 3 * rec);
  assert_int_equal(jint(j, "problems", "count"), 0);
  assert_true(json_is_null(json_object_get(j, "spine_int8")));
  assert_int_equal(jint(json_object_get(j, "config"), "text_config", "hidden_size"), 32);
  json_decref(j);
  free(out);
  free(err);

  /* text form, with a spine-int8 copy present */
  char *i8 = df_path_join(dir, "spine-int8");
  df_err e;
  assert_int_equal(df_mkdir_p(i8, &e), 0);
  char *i8f = df_path_join(i8, "spine-00001.safetensors");
  df_st_writer *w = df_st_writer_new(i8f);
  int64_t sh[2] = {4, 8};
  assert_int_equal(df_st_writer_declare(w, "a", DF_DT_I8, 2, sh, &e), 0);
  assert_int_equal(df_st_writer_begin(w, &e), 0);
  uint8_t z[32] = {0};
  assert_int_equal(df_st_writer_write(w, z, 32, &e), 0);
  assert_int_equal(df_st_writer_finish(w, &e), 0);
  df_st_writer_free(w);
  snprintf(args, sizeof args, "--model \"%s\"", dir);
  rc = run_inspect(args, &out, &err);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "kimi_k3"));
  assert_non_null(strstr(out, "1 files, 1 tensors"));
  assert_non_null(strstr(out, "problems          none"));
  free(out);
  free(err);
  unlink(i8f);
  rmdir(i8);
  free(i8f);
  free(i8);

  /* problems: exit 3, listed on stdout, one summary line on stderr */
  d.bad_scale = LP "1.block_sparse_moe.experts.1.w1.weight_scale";
  d.drop = LP "3.self_attn.o_proj.weight";
  write_ckpt(&c, &d);
  snprintf(args, sizeof args, "--model \"%s\" --full-scan", dir); /* scales: not the default */
  rc = run_inspect(args, &out, &err);
  assert_int_equal(rc, 3);
  assert_non_null(strstr(out, d.bad_scale));
  assert_non_null(strstr(out, d.drop));
  assert_int_equal(count_lines(err), 1);
  free(out);
  free(err);
  snprintf(args, sizeof args, "--model \"%s\" --quick --json", dir);
  rc = run_inspect(args, &out, &err);
  assert_int_equal(rc, 3);
  j = json_loads(out, 0, NULL);
  assert_non_null(j);
  assert_int_equal(jint(j, "problems", "count"), 1); /* the scale is not read with --quick */
  assert_int_equal(jint(j, "problems", "missing"), 1);
  json_decref(j);
  free(out);
  free(err);

  /* fatal errors: exit 1, exactly one line on stderr naming the cause */
  char *cfg = df_path_join(dir, "config.json");
  const char *bad = "{\"model_type\":\"llama\"}";
  assert_int_equal(df_file_write_atomic(cfg, bad, strlen(bad), &e), 0);
  rc = run_inspect(args, &out, &err);
  assert_int_equal(rc, 1);
  assert_int_equal(count_lines(err), 1);
  assert_non_null(strstr(err, "llama"));
  free(out);
  free(err);
  free(cfg);
  rc = run_inspect("--model /nonexistent/df_model", &out, &err);
  assert_int_equal(rc, 1);
  assert_int_equal(count_lines(err), 1);
  assert_non_null(strstr(err, "/nonexistent/df_model"));
  free(out);
  free(err);
  rc = run_inspect("--bogus", &out, &err);
  assert_int_equal(rc, 1);
  assert_int_equal(count_lines(err), 1);
  free(out);
  free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_k3_roster),
      cmocka_unit_test(test_classify_and_parse),
      cmocka_unit_test_setup_teardown(test_check_clean, setup, teardown),
      cmocka_unit_test_setup_teardown(test_check_defects, setup, teardown),
      cmocka_unit_test_setup_teardown(test_inspect_cli, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* config.json: nested and flat forms, every required key, contradictions,
 * and to_json -> parse round trips. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/util.h"
#include "format/config.h"

/* A tiny K3-family config in the nested upstream layout. */
static const char *base_json =
    "{\"architectures\":[\"KimiK3ForConditionalGeneration\"],\"model_type\":\"kimi_k3\","
    "\"quantization_config\":{\"quant_method\":\"compressed-tensors\","
    "\"format\":\"mxfp4-pack-quantized\",\"config_groups\":{\"group_0\":{\"targets\":[\"Linear\"],"
    "\"weights\":{\"num_bits\":4,\"type\":\"float\",\"group_size\":32,\"strategy\":\"group\"}}},"
    "\"ignore\":[\"lm_head\"]},"
    "\"text_config\":{\"model_type\":\"kimi_linear\",\"hidden_size\":64,"
    "\"num_hidden_layers\":6,\"vocab_size\":300,\"rms_norm_eps\":1e-05,\"bos_token_id\":256,"
    "\"eos_token_id\":258,\"pad_token_id\":299,\"max_position_embeddings\":4096,"
    "\"hidden_act\":\"situ\",\"situ_beta\":4.0,\"situ_linear_beta\":25.0,"
    "\"attn_res_block_size\":2,\"num_attention_heads\":4,\"q_lora_rank\":32,"
    "\"kv_lora_rank\":16,\"qk_nope_head_dim\":8,\"qk_rope_head_dim\":4,\"v_head_dim\":8,"
    "\"mla_use_nope\":true,\"mla_use_output_gate\":true,\"first_k_dense_replace\":1,"
    "\"intermediate_size\":96,\"n_routed_experts\":8,\"num_experts_per_tok\":2,"
    "\"n_shared_experts\":2,\"moe_intermediate_size\":32,\"routed_expert_hidden_size\":64,"
    "\"latent_moe_use_norm\":true,\"scoring_func\":\"sigmoid\",\"topk_method\":\"noaux_tc\","
    "\"n_group\":1,\"topk_group\":1,\"norm_topk_prob\":true,\"routed_scaling_factor\":1.0,"
    "\"num_nextn_predict_layers\":0,\"linear_attn_config\":{\"full_attn_layers\":[4,6],"
    "\"kda_layers\":[1,2,3,5],\"num_heads\":4,\"head_dim\":8,\"short_conv_kernel_size\":4,"
    "\"gate_lower_bound\":-5.0,\"use_full_rank_gate\":true}}}";

static const char *text_keys[] = {
    "hidden_size", "num_hidden_layers", "vocab_size", "rms_norm_eps", "bos_token_id",
    "eos_token_id", "pad_token_id", "max_position_embeddings", "hidden_act", "situ_beta",
    "situ_linear_beta", "attn_res_block_size", "num_attention_heads", "q_lora_rank",
    "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "mla_use_nope",
    "mla_use_output_gate", "first_k_dense_replace", "intermediate_size", "n_routed_experts",
    "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
    "routed_expert_hidden_size", "latent_moe_use_norm", "scoring_func", "topk_method", "n_group",
    "topk_group", "norm_topk_prob", "routed_scaling_factor", "linear_attn_config"};
static const char *lin_keys[] = {"full_attn_layers", "kda_layers", "num_heads", "head_dim",
                                 "short_conv_kernel_size", "gate_lower_bound",
                                 "use_full_rank_gate"};

static json_t *base(void) {
  json_t *j = json_loads(base_json, 0, NULL);
  assert_non_null(j);
  return j;
}

static json_t *tc(json_t *root) { return json_object_get(root, "text_config"); }
static json_t *lin(json_t *root) { return json_object_get(tc(root), "linear_attn_config"); }
static json_t *qweights(json_t *root) {
  json_t *q = json_object_get(root, "quantization_config");
  return json_object_get(json_object_get(json_object_get(q, "config_groups"), "group_0"),
                         "weights");
}

static int parse_j(json_t *j, df_config *c, df_err *e) {
  char *s = json_dumps(j, 0);
  int rc = df_config_parse(c, s, strlen(s), e);
  free(s);
  return rc;
}

/* Parses j (consumed) and expects failure naming n1 (and n2). */
static void expect_fail(json_t *j, const char *n1, const char *n2) {
  df_config c;
  df_err e = {{0}};
  int rc = parse_j(j, &c, &e);
  json_decref(j);
  if (rc == 0) fail_msg("accepted; expected an error naming '%s'", n1);
  if (!strstr(e.msg, "config.json")) fail_msg("message lacks the file: %s", e.msg);
  if (n1 && !strstr(e.msg, n1)) fail_msg("no '%s' in: %s", n1, e.msg);
  if (n2 && !strstr(e.msg, n2)) fail_msg("no '%s' in: %s", n2, e.msg);
}

static void check_tiny(const df_config *c) {
  assert_string_equal(c->model_type, "kimi_k3");
  assert_int_equal(c->hidden, 64);
  assert_int_equal(c->n_layers, 6);
  assert_int_equal(c->vocab, 300);
  assert_true(c->eps == 1e-5);
  assert_int_equal(c->bos_id, 256);
  assert_int_equal(c->eos_id, 258);
  assert_int_equal(c->pad_id, 299);
  assert_int_equal(c->max_pos, 4096);
  assert_true(c->situ_beta == 4.0f && c->situ_linear_beta == 25.0f);
  assert_int_equal(c->attn_res_block, 2);
  const df_layer_kind kinds[6] = {DF_LAYER_KDA, DF_LAYER_KDA, DF_LAYER_KDA,
                                  DF_LAYER_MLA, DF_LAYER_KDA, DF_LAYER_MLA};
  for (int i = 0; i < 6; i++) assert_int_equal(c->layer_kind[i], kinds[i]);
  assert_int_equal(c->n_kda, 4);
  assert_int_equal(c->n_mla, 2);
  assert_int_equal(c->kda_heads, 4);
  assert_int_equal(c->kda_head_dim, 8);
  assert_int_equal(c->kda_conv, 4);
  assert_true(c->kda_gate_lower_bound == -5.0f);
  assert_int_equal(c->kda_full_rank_gate, 1);
  assert_int_equal(c->mla_heads, 4);
  assert_int_equal(c->q_lora_rank, 32);
  assert_int_equal(c->kv_lora_rank, 16);
  assert_int_equal(c->qk_nope_dim, 8);
  assert_int_equal(c->qk_rope_dim, 4);
  assert_int_equal(c->v_head_dim, 8);
  assert_int_equal(c->mla_use_nope, 1);
  assert_int_equal(c->mla_output_gate, 1);
  assert_int_equal(c->first_k_dense, 1);
  assert_int_equal(c->dense_inter, 96);
  assert_int_equal(c->n_experts, 8);
  assert_int_equal(c->top_k, 2);
  assert_int_equal(c->n_shared, 2);
  assert_int_equal(c->moe_inter, 32);
  assert_int_equal(c->latent, 64);
  assert_int_equal(c->latent_norm, 1);
  assert_int_equal(c->n_group, 1);
  assert_int_equal(c->topk_group, 1);
  assert_int_equal(c->norm_topk_prob, 1);
  assert_true(c->routed_scale == 1.0f);
  assert_int_equal(c->expert_group, 32);
}

static void test_nested(void **st) {
  (void)st;
  df_config c;
  df_err e = {{0}};
  if (df_config_parse(&c, base_json, strlen(base_json), &e) != 0) fail_msg("%s", e.msg);
  check_tiny(&c);
  assert_int_equal(c.nested, 1);
}

/* The text_config keys moved to the root. */
static json_t *flatten(const char *model_type) {
  json_t *b = base();
  json_t *f = json_deep_copy(tc(b));
  json_object_set_new(f, "model_type", json_string(model_type));
  json_object_set(f, "quantization_config", json_object_get(b, "quantization_config"));
  json_decref(b);
  return f;
}

static void test_flat(void **st) {
  (void)st;
  df_config n, c;
  df_err e = {{0}};
  assert_int_equal(df_config_parse(&n, base_json, strlen(base_json), &e), 0);
  const char *types[2] = {"kimi_linear", "kimi_k3"};
  for (int i = 0; i < 2; i++) {
    json_t *f = flatten(types[i]);
    if (parse_j(f, &c, &e) != 0) fail_msg("%s", e.msg);
    json_decref(f);
    assert_string_equal(c.model_type, types[i]);
    assert_int_equal(c.nested, 0);
    /* everything else identical to the nested parse */
    memcpy(c.model_type, n.model_type, sizeof c.model_type);
    c.nested = 1;
    assert_memory_equal(&c, &n, sizeof c);
  }
  /* quantization_config may also sit inside text_config */
  json_t *b = base();
  json_object_set(tc(b), "quantization_config", json_object_get(b, "quantization_config"));
  json_object_del(b, "quantization_config");
  assert_int_equal(parse_j(b, &c, &e), 0);
  json_decref(b);
  check_tiny(&c);
  /* num_nextn_predict_layers may be absent */
  b = base();
  json_object_del(tc(b), "num_nextn_predict_layers");
  assert_int_equal(parse_j(b, &c, &e), 0);
  json_decref(b);
}

static void test_each_missing_field(void **st) {
  (void)st;
  char want[128];
  for (size_t i = 0; i < sizeof text_keys / sizeof *text_keys; i++) {
    json_t *b = base();
    assert_int_equal(json_object_del(tc(b), text_keys[i]), 0);
    snprintf(want, sizeof want, "text_config.%s missing", text_keys[i]);
    expect_fail(b, want, NULL);
    /* flat form: named without the prefix */
    json_t *f = flatten("kimi_linear");
    assert_int_equal(json_object_del(f, text_keys[i]), 0);
    snprintf(want, sizeof want, ": %s missing", text_keys[i]);
    expect_fail(f, want, NULL);
  }
  for (size_t i = 0; i < sizeof lin_keys / sizeof *lin_keys; i++) {
    json_t *b = base();
    assert_int_equal(json_object_del(lin(b), lin_keys[i]), 0);
    snprintf(want, sizeof want, "text_config.linear_attn_config.%s missing", lin_keys[i]);
    expect_fail(b, want, NULL);
  }
  json_t *b = base();
  json_object_del(tc(b), "model_type");
  expect_fail(b, "text_config.model_type missing", NULL);
  b = base();
  json_object_del(b, "model_type");
  expect_fail(b, "model_type missing", NULL);
  b = base();
  json_object_del(b, "quantization_config");
  expect_fail(b, "quantization_config missing", NULL);
  const char *qkeys[] = {"quant_method", "format", "config_groups"};
  for (int i = 0; i < 3; i++) {
    b = base();
    json_object_del(json_object_get(b, "quantization_config"), qkeys[i]);
    snprintf(want, sizeof want, "quantization_config.%s missing", qkeys[i]);
    expect_fail(b, want, NULL);
  }
  const char *wkeys[] = {"num_bits", "group_size"};
  for (int i = 0; i < 2; i++) {
    b = base();
    json_object_del(qweights(b), wkeys[i]);
    snprintf(want, sizeof want, "quantization_config.config_groups.group_0.weights.%s missing",
             wkeys[i]);
    expect_fail(b, want, NULL);
  }
}

static void test_wrong_types(void **st) {
  (void)st;
  json_t *b = base();
  json_object_set_new(tc(b), "hidden_size", json_string("64"));
  expect_fail(b, "text_config.hidden_size", "integer");
  b = base();
  json_object_set_new(tc(b), "hidden_size", json_real(64.0));
  expect_fail(b, "text_config.hidden_size", "integer");
  b = base();
  json_object_set_new(tc(b), "mla_use_nope", json_integer(1));
  expect_fail(b, "text_config.mla_use_nope", "true or false");
  b = base();
  json_object_set_new(tc(b), "rms_norm_eps", json_string("1e-5"));
  expect_fail(b, "text_config.rms_norm_eps", "number");
  b = base();
  json_object_set_new(tc(b), "linear_attn_config", json_array());
  expect_fail(b, "text_config.linear_attn_config", "object");
  b = base();
  json_object_set_new(lin(b), "kda_layers", json_pack("[i,i,s,i]", 1, 2, "3", 5));
  expect_fail(b, "kda_layers[2]", NULL);
  b = base();
  json_object_set_new(tc(b), "hidden_act", json_integer(3));
  expect_fail(b, "hidden_act", "string");
  b = base();
  json_object_set_new(tc(b), "hidden_size", json_integer(0));
  expect_fail(b, "text_config.hidden_size", "is 0");
  b = base();
  json_object_set_new(tc(b), "rms_norm_eps", json_real(-1e-5));
  expect_fail(b, "rms_norm_eps", "positive");
  b = base();
  json_object_set_new(tc(b), "rms_norm_eps", json_real(1e300));
  expect_fail(b, "rms_norm_eps", "finite");
}

static void test_contradictions(void **st) {
  (void)st;
  json_t *b = base();
  json_object_set_new(lin(b), "kda_layers", json_pack("[i,i,i,i,i]", 1, 2, 3, 4, 5));
  expect_fail(b, "layer 4", "both");
  b = base();
  json_object_set_new(lin(b), "kda_layers", json_pack("[i,i,i]", 1, 2, 3));
  expect_fail(b, "layer 5", "neither");
  b = base();
  json_object_set_new(lin(b), "full_attn_layers", json_pack("[i,i,i]", 4, 6, 7));
  expect_fail(b, "full_attn_layers[2]", "is 7");
  b = base();
  json_object_set_new(lin(b), "full_attn_layers", json_pack("[i,i]", 0, 4));
  expect_fail(b, "full_attn_layers[0]", "is 0");
  b = base();
  json_object_set_new(lin(b), "full_attn_layers", json_pack("[i,i,i]", 4, 6, 4));
  expect_fail(b, "full_attn_layers", "twice");
  b = base();
  json_object_set_new(tc(b), "num_experts_per_tok", json_integer(9));
  expect_fail(b, "num_experts_per_tok", "[1, 8]");
  b = base();
  json_object_set_new(tc(b), "first_k_dense_replace", json_integer(7));
  expect_fail(b, "first_k_dense_replace", "[0, 6]");
  b = base();
  json_object_set_new(tc(b), "routed_expert_hidden_size", json_integer(48));
  expect_fail(b, "routed_expert_hidden_size", "32");
  b = base();
  json_object_set_new(tc(b), "moe_intermediate_size", json_integer(40));
  expect_fail(b, "moe_intermediate_size", "32");
  b = base();
  json_object_set_new(qweights(b), "group_size", json_integer(16));
  expect_fail(b, "group_size", "16");
  b = base();
  json_object_set_new(qweights(b), "num_bits", json_integer(8));
  expect_fail(b, "num_bits", "8");
  b = base();
  json_object_set_new(json_object_get(b, "quantization_config"), "format",
                      json_string("nvfp4-pack-quantized"));
  expect_fail(b, "quantization_config.format", "nvfp4");
  b = base();
  json_object_set_new(json_object_get(b, "quantization_config"), "quant_method",
                      json_string("fp8"));
  expect_fail(b, "quant_method", "fp8");
  b = base();
  json_object_set_new(json_object_get(b, "quantization_config"), "config_groups",
                      json_object());
  expect_fail(b, "config_groups", "empty");
  b = base();
  json_object_set_new(tc(b), "hidden_act", json_string("silu"));
  expect_fail(b, "hidden_act", "situ");
  b = base();
  json_object_set_new(tc(b), "scoring_func", json_string("softmax"));
  expect_fail(b, "scoring_func", "sigmoid");
  b = base();
  json_object_set_new(tc(b), "topk_method", json_string("greedy"));
  expect_fail(b, "topk_method", "noaux_tc");
  b = base();
  json_object_set_new(tc(b), "n_group", json_integer(8));
  expect_fail(b, "n_group", "only 1");
  b = base();
  json_object_set_new(tc(b), "topk_group", json_integer(2));
  expect_fail(b, "topk_group", NULL);
  b = base();
  json_object_set_new(tc(b), "num_nextn_predict_layers", json_integer(1));
  expect_fail(b, "num_nextn_predict_layers", NULL);
  b = base();
  json_object_set_new(tc(b), "bos_token_id", json_integer(300));
  expect_fail(b, "bos_token_id", "300");
  b = base();
  json_object_set_new(tc(b), "mla_use_nope", json_false());
  expect_fail(b, "mla_use_nope", "rotary");
  b = base();
  json_object_set_new(lin(b), "use_full_rank_gate", json_false());
  expect_fail(b, "use_full_rank_gate", NULL);
  b = base();
  json_object_set_new(tc(b), "model_type", json_string("deepseek_v3"));
  expect_fail(b, "text_config.model_type", "deepseek_v3");
  b = base();
  json_object_set_new(b, "model_type", json_string("llama"));
  expect_fail(b, "unknown model_type", "llama");
  b = base();
  json_object_set_new(b, "model_type", json_string("a_model_type_name_much_longer_than_32"));
  expect_fail(b, "unknown model_type", "a_model_type_name_much_longer_than_32");
}

static void test_bad_json(void **st) {
  (void)st;
  df_config c;
  df_err e = {{0}};
  assert_int_equal(df_config_parse(&c, "{\"model_type\":", 14, &e), -1);
  assert_non_null(strstr(e.msg, "config.json"));
  assert_int_equal(df_config_parse(&c, "[]", 2, &e), -1);
  assert_int_equal(df_config_parse(&c, "", 0, &e), -1);
  const char *dup = "{\"model_type\":\"kimi_k3\",\"model_type\":\"llama\"}";
  assert_int_equal(df_config_parse(&c, dup, strlen(dup), &e), -1);
  assert_non_null(strstr(e.msg, "config.json"));
}

/* The published K3 dimensions (kimi-k3.md section 2). */
static void test_k3_dims(void **st) {
  (void)st;
  json_t *b = base(), *t = tc(b);
  json_object_set_new(t, "hidden_size", json_integer(7168));
  json_object_set_new(t, "num_hidden_layers", json_integer(93));
  json_object_set_new(t, "vocab_size", json_integer(163840));
  json_object_set_new(t, "bos_token_id", json_integer(163584));
  json_object_set_new(t, "eos_token_id", json_integer(163586));
  json_object_set_new(t, "pad_token_id", json_integer(163839));
  json_object_set_new(t, "max_position_embeddings", json_integer(1048576));
  json_object_set_new(t, "attn_res_block_size", json_integer(12));
  json_object_set_new(t, "num_attention_heads", json_integer(96));
  json_object_set_new(t, "q_lora_rank", json_integer(1536));
  json_object_set_new(t, "kv_lora_rank", json_integer(512));
  json_object_set_new(t, "qk_nope_head_dim", json_integer(128));
  json_object_set_new(t, "qk_rope_head_dim", json_integer(64));
  json_object_set_new(t, "v_head_dim", json_integer(128));
  json_object_set_new(t, "intermediate_size", json_integer(33792));
  json_object_set_new(t, "n_routed_experts", json_integer(896));
  json_object_set_new(t, "num_experts_per_tok", json_integer(16));
  json_object_set_new(t, "moe_intermediate_size", json_integer(3072));
  json_object_set_new(t, "routed_expert_hidden_size", json_integer(3584));
  json_t *full = json_array(), *kda = json_array();
  for (int l = 1; l <= 93; l++)
    json_array_append_new((l % 4 == 0 || l == 93) ? full : kda, json_integer(l));
  json_t *la = lin(b);
  json_object_set_new(la, "full_attn_layers", full);
  json_object_set_new(la, "kda_layers", kda);
  json_object_set_new(la, "num_heads", json_integer(96));
  json_object_set_new(la, "head_dim", json_integer(128));
  df_config c;
  df_err e = {{0}};
  if (parse_j(b, &c, &e) != 0) fail_msg("%s", e.msg);
  json_decref(b);
  assert_int_equal(c.n_layers, 93);
  assert_int_equal(c.n_mla, 24);
  assert_int_equal(c.n_kda, 69);
  assert_int_equal(c.layer_kind[3], DF_LAYER_MLA);
  assert_int_equal(c.layer_kind[87], DF_LAYER_MLA);
  assert_int_equal(c.layer_kind[91], DF_LAYER_MLA);
  assert_int_equal(c.layer_kind[92], DF_LAYER_MLA);
  assert_int_equal(c.layer_kind[90], DF_LAYER_KDA);
  assert_int_equal(c.layer_kind[0], DF_LAYER_KDA);

  /* and it survives a round trip */
  char *js = df_config_to_json(&c);
  df_config r;
  assert_int_equal(df_config_parse(&r, js, strlen(js), &e), 0);
  free(js);
  assert_memory_equal(&c, &r, sizeof c);
}

static void test_to_json_roundtrip(void **st) {
  (void)st;
  df_config c, r;
  df_err e = {{0}};
  assert_int_equal(df_config_parse(&c, base_json, strlen(base_json), &e), 0);
  char *js = df_config_to_json(&c);
  assert_non_null(js);
  if (df_config_parse(&r, js, strlen(js), &e) != 0) fail_msg("%s\n%s", e.msg, js);
  assert_memory_equal(&c, &r, sizeof c);
  /* floats written as the shortest decimal that reads back exactly */
  assert_non_null(strstr(js, "\"rms_norm_eps\": 1e-5"));
  assert_non_null(strstr(js, "\"activation_situ_beta\": 4.0"));
  assert_non_null(strstr(js, "\"architectures\""));
  assert_non_null(strstr(js, "\"ignore\""));
  free(js);

  /* odd values and flags survive too */
  c.eps = 3.3e-7; /* a double, as parsed: written with 9 digits, it reads back exactly */
  c.routed_scale = 2.5f;
  c.situ_beta = 0.1f;
  c.kda_gate_lower_bound = -4.75f;
  c.norm_topk_prob = 0;
  c.mla_output_gate = 0;
  c.latent_norm = 0;
  c.first_k_dense = 0;
  c.n_shared = 0;
  c.layer_kind[0] = DF_LAYER_MLA;
  c.n_mla++;
  c.n_kda--;
  js = df_config_to_json(&c);
  assert_int_equal(df_config_parse(&r, js, strlen(js), &e), 0);
  free(js);
  assert_memory_equal(&c, &r, sizeof c);

  /* an eps whose shortest decimal has more than 9 digits (the fuzzer's
   * 1666...6e-05): kept exactly, the floats still reading back */
  c.eps = 1.6666666666666666e29;
  js = df_config_to_json(&c);
  assert_int_equal(df_config_parse(&r, js, strlen(js), &e), 0);
  assert_non_null(strstr(js, "\"rms_norm_eps\": 1.6666666666666666e29"));
  free(js);
  assert_true(r.eps == 1.6666666666666666e29);
  assert_memory_equal(&c, &r, sizeof c);
  c.eps = 1e-5 + 1e-20; /* 17 digits */
  js = df_config_to_json(&c);
  assert_int_equal(df_config_parse(&r, js, strlen(js), &e), 0);
  free(js);
  assert_memory_equal(&c, &r, sizeof c);
}

static void test_load_and_print(void **st) {
  (void)st;
  char path[] = "/tmp/df_test_cfg_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  df_err e = {{0}};
  assert_int_equal(df_file_write_atomic(path, base_json, strlen(base_json), &e), 0);
  df_config c;
  assert_int_equal(df_config_load(&c, path, &e), 0);
  check_tiny(&c);
  json_t *b = base();
  json_object_del(tc(b), "vocab_size");
  char *s = json_dumps(b, 0);
  json_decref(b);
  assert_int_equal(df_file_write_atomic(path, s, strlen(s), &e), 0);
  free(s);
  assert_int_equal(df_config_load(&c, path, &e), -1);
  assert_non_null(strstr(e.msg, path));
  assert_non_null(strstr(e.msg, "text_config.vocab_size missing"));
  unlink(path);
  assert_int_equal(df_config_load(&c, path, &e), -1);
  assert_non_null(strstr(e.msg, path));

  assert_int_equal(df_config_parse(&c, base_json, strlen(base_json), &e), 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  df_config_print(&c, m);
  fclose(m);
  assert_non_null(strstr(buf, "kimi_k3"));
  assert_non_null(strstr(buf, "64"));
  assert_non_null(strstr(buf, "3,5")); /* MLA layers, 0-based */
  free(buf);
}

/* A config group named with a key longer than the error path buffer: the path is cut
 * short, the message still names the field (fuzzer regression: the path length used to
 * wrap around and overflow). */
static void test_long_group_name(void **st) {
  (void)st;
  char name[300];
  memset(name, 'g', sizeof name - 1);
  name[sizeof name - 1] = 0;
  json_t *j = base();
  json_t *groups = json_object_get(json_object_get(j, "quantization_config"), "config_groups");
  json_t *g0 = json_incref(json_object_get(groups, "group_0"));
  json_object_del(groups, "group_0");
  json_object_set_new(groups, name, g0);
  json_object_set_new(json_object_get(g0, "weights"), "num_bits", json_integer(5));
  expect_fail(j, "num_bits", NULL);
}

/* The published moonshotai/Kimi-K3 config.json (tests/fixtures/config/, values
 * and their sources in the README there): every dimension the engine uses. */
static char *fixture_path(void) {
  const char *src = getenv("DF_SRC");
  if (!src) src = ".";
  return df_path_join(src, "tests/fixtures/config/kimi-k3-config.json");
}

static void check_k3_release(const df_config *c) {
  assert_string_equal(c->model_type, "kimi_k3");
  assert_int_equal(c->nested, 1);
  assert_int_equal(c->hidden, 7168);
  assert_int_equal(c->n_layers, 93);
  assert_int_equal(c->vocab, 163840);
  assert_true(c->eps == 1e-5);
  assert_int_equal(c->bos_id, 163584);
  assert_int_equal(c->eos_id, 163586);
  assert_int_equal(c->pad_id, 163839);
  assert_int_equal(c->max_pos, 1048576);
  assert_true(c->situ_beta == 4.0f && c->situ_linear_beta == 25.0f);
  assert_int_equal(c->attn_res_block, 12);
  assert_int_equal(c->n_mla, 24);
  assert_int_equal(c->n_kda, 69);
  for (int l = 0; l < 93; l++)
    assert_int_equal(c->layer_kind[l], ((l + 1) % 4 == 0 || l == 92) ? DF_LAYER_MLA : DF_LAYER_KDA);
  assert_int_equal(c->kda_heads, 96);
  assert_int_equal(c->kda_head_dim, 128);
  assert_int_equal(c->kda_conv, 4);
  assert_true(c->kda_gate_lower_bound == -5.0f);
  assert_int_equal(c->mla_heads, 96);
  assert_int_equal(c->q_lora_rank, 1536);
  assert_int_equal(c->kv_lora_rank, 512);
  assert_int_equal(c->qk_nope_dim, 128);
  assert_int_equal(c->qk_rope_dim, 64);
  assert_int_equal(c->v_head_dim, 128);
  assert_int_equal(c->first_k_dense, 1);
  assert_int_equal(c->dense_inter, 33792);
  assert_int_equal(c->n_experts, 896);
  assert_int_equal(c->top_k, 16);
  assert_int_equal(c->n_shared, 2);
  assert_int_equal(c->moe_inter, 3072);
  assert_int_equal(c->latent, 3584);
  assert_int_equal(c->latent_norm, 1);
  assert_int_equal(c->n_group, 1);
  assert_int_equal(c->topk_group, 1);
  assert_int_equal(c->grouped_topk, 1);
  assert_int_equal(c->norm_topk_prob, 1);
  assert_true(c->routed_scale == 1.0f);
  assert_int_equal(c->expert_group, 32);
}

static void test_release_config(void **st) {
  (void)st;
  char *p = fixture_path();
  df_config c;
  df_err e = {{0}};
  if (df_config_load(&c, p, &e) != 0) fail_msg("%s", e.msg);
  check_k3_release(&c);
  /* transformers' sampling "top_k" (50) must not be read as the router's top-k */
  char *buf;
  size_t len;
  assert_int_equal(df_file_read(p, &buf, &len, &e), 0);
  json_t *j = json_loadb(buf, len, 0, NULL);
  free(buf);
  assert_non_null(j);
  json_object_set_new(tc(j), "top_k", json_integer(50));
  df_config d;
  if (parse_j(j, &d, &e) != 0) fail_msg("%s", e.msg);
  assert_int_equal(d.top_k, 16);
  /* flat: the text_config keys at the root */
  json_t *f = json_deep_copy(tc(j));
  if (parse_j(f, &d, &e) != 0) fail_msg("%s", e.msg);
  assert_int_equal(d.nested, 0);
  d.nested = 1;
  memcpy(d.model_type, c.model_type, sizeof d.model_type);
  assert_memory_equal(&c, &d, sizeof c);
  json_decref(f);
  /* the generator's serialisation reads back to the same config */
  char *js = df_config_to_json(&c);
  if (df_config_parse(&d, js, strlen(js), &e) != 0) fail_msg("%s", e.msg);
  assert_memory_equal(&c, &d, sizeof c);
  free(js);
  json_decref(j);
  free(p);
}

/* Each release spelling and its older alias: either alone gives the same
 * config; both agreeing is fine; both disagreeing names both. */
static void test_aliases(void **st) {
  (void)st;
  static const char *pairs[][2] = {
      {"num_experts", "n_routed_experts"},
      {"num_experts_per_token", "num_experts_per_tok"},
      {"num_shared_experts", "n_shared_experts"},
      {"num_expert_group", "n_group"},
      {"moe_renormalize", "norm_topk_prob"},
      {"moe_router_activation_func", "scoring_func"},
      {"activation_situ_beta", "situ_beta"},
      {"activation_situ_linear_beta", "situ_linear_beta"},
  };
  df_config ref, c;
  df_err e = {{0}};
  assert_int_equal(df_config_parse(&ref, base_json, strlen(base_json), &e), 0);
  for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
    const char *rel = pairs[i][0], *old = pairs[i][1];
    /* release spelling only */
    json_t *b = base();
    json_t *v = json_incref(json_object_get(tc(b), old));
    json_object_del(tc(b), old);
    json_object_set(tc(b), rel, v);
    if (parse_j(b, &c, &e) != 0) fail_msg("%s alone: %s", rel, e.msg);
    assert_memory_equal(&c, &ref, sizeof c);
    /* both, equal */
    json_object_set(tc(b), old, v);
    if (parse_j(b, &c, &e) != 0) fail_msg("%s and %s equal: %s", rel, old, e.msg);
    assert_memory_equal(&c, &ref, sizeof c);
    /* both, different */
    json_t *other;
    if (json_is_boolean(v)) other = json_boolean(!json_is_true(v));
    else if (json_is_string(v)) other = json_string("softmax");
    else if (json_is_integer(v)) other = json_integer(json_integer_value(v) + 1);
    else other = json_real(json_number_value(v) * 2);
    json_object_set_new(tc(b), old, other);
    json_decref(v);
    char want[128];
    snprintf(want, sizeof want, "text_config.%s", rel);
    char want2[128];
    snprintf(want2, sizeof want2, "text_config.%s", old);
    df_config x;
    char *s = json_dumps(b, 0);
    int rc = df_config_parse(&x, s, strlen(s), &e);
    free(s);
    json_decref(b);
    if (rc == 0) fail_msg("%s and %s disagree but were accepted", rel, old);
    if (!strstr(e.msg, want) || !strstr(e.msg, want2) || !strstr(e.msg, "disagree"))
      fail_msg("message does not name both spellings: %s", e.msg);
  }
  /* an integer and the same value as a real agree */
  json_t *b = base();
  json_object_set_new(tc(b), "num_experts", json_integer(8));
  json_object_set_new(tc(b), "n_routed_experts", json_real(8.0));
  assert_int_equal(parse_j(b, &c, &e), 0);
  json_decref(b);
  /* optional release keys are checked when present */
  b = base();
  json_object_set_new(tc(b), "moe_layer_freq", json_integer(2));
  expect_fail(b, "moe_layer_freq", NULL);
  b = base();
  json_object_set_new(tc(b), "num_key_value_heads", json_integer(1));
  expect_fail(b, "num_key_value_heads", NULL);
  b = base();
  json_object_set_new(tc(b), "use_grouped_topk", json_string("yes"));
  expect_fail(b, "use_grouped_topk", "true or false");
}

/* The generator writes the release's spellings and layout only. */
static void test_writer_spellings(void **st) {
  (void)st;
  df_config c;
  df_err e = {{0}};
  assert_int_equal(df_config_parse(&c, base_json, strlen(base_json), &e), 0);
  char *js = df_config_to_json(&c);
  json_t *j = json_loads(js, 0, NULL);
  assert_non_null(j);
  json_t *t = tc(j);
  static const char *release[] = {"num_experts", "num_experts_per_token", "num_shared_experts",
                                  "num_expert_group", "topk_group", "use_grouped_topk",
                                  "moe_renormalize", "moe_router_activation_func",
                                  "activation_situ_beta", "activation_situ_linear_beta",
                                  "quantization_config", "moe_layer_freq", "num_key_value_heads"};
  static const char *older[] = {"n_routed_experts", "num_experts_per_tok", "n_shared_experts",
                                "n_group", "norm_topk_prob", "scoring_func", "situ_beta",
                                "situ_linear_beta"};
  for (size_t i = 0; i < sizeof release / sizeof *release; i++)
    if (!json_object_get(t, release[i])) fail_msg("text_config.%s not written", release[i]);
  for (size_t i = 0; i < sizeof older / sizeof *older; i++)
    if (json_object_get(t, older[i])) fail_msg("text_config.%s written", older[i]);
  assert_null(json_object_get(j, "quantization_config"));
  /* the release's root fields */
  static const char *root[] = {"architectures", "auto_map", "bos_token_id", "dtype",
                               "eos_token_id", "ignore_index", "image_placeholder",
                               "media_placeholder_token_id", "model_type", "pad_token_id",
                               "text_config", "tie_word_embeddings", "vision_config"};
  assert_int_equal(json_object_size(j), sizeof root / sizeof *root);
  for (size_t i = 0; i < sizeof root / sizeof *root; i++)
    if (!json_object_get(j, root[i])) fail_msg("%s not written", root[i]);
  /* the same key set as the published file's text_config (values differ) */
  char *p = fixture_path(), *buf;
  size_t len;
  assert_int_equal(df_file_read(p, &buf, &len, &e), 0);
  json_t *pub = json_loadb(buf, len, 0, NULL);
  free(buf);
  free(p);
  const char *k;
  json_t *v;
  json_object_foreach(tc(pub), k, v) if (!json_object_get(t, k))
      fail_msg("published text_config.%s not written", k);
  json_object_foreach(t, k, v) if (!json_object_get(tc(pub), k))
      fail_msg("text_config.%s written but not in the published file", k);
  json_decref(pub);
  json_decref(j);
  free(js);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nested),        cmocka_unit_test(test_flat),
      cmocka_unit_test(test_each_missing_field), cmocka_unit_test(test_wrong_types),
      cmocka_unit_test(test_contradictions), cmocka_unit_test(test_bad_json),
      cmocka_unit_test(test_k3_dims),        cmocka_unit_test(test_to_json_roundtrip),
      cmocka_unit_test(test_load_and_print), cmocka_unit_test(test_long_group_name),
      cmocka_unit_test(test_release_config), cmocka_unit_test(test_aliases),
      cmocka_unit_test(test_writer_spellings),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

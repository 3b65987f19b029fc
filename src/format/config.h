/* config.json for the K3 family, nested (root model_type "kimi_k3" with
 * text_config {model_type "kimi_linear", ...}, as the release ships it) or flat
 * (the text_config keys at the root, model_type "kimi_linear" or "kimi_k3").
 * Every value the engine uses comes from here; nothing K3-specific is assumed.
 *
 * Keys read (text_config or root), in the release's kimi_linear spellings; the
 * older spelling in brackets is accepted too (DeepSeek's, as transformers'
 * KimiLinearConfig maps them, or deltafin's earlier generator's); both present
 * with different values is an error naming both:
 *   hidden_size, num_hidden_layers, vocab_size, rms_norm_eps,
 *   bos_token_id, eos_token_id, pad_token_id, max_position_embeddings,
 *   hidden_act ("situ"), activation_situ_beta [situ_beta] (4.0),
 *   activation_situ_linear_beta [situ_linear_beta] (25.0), attn_res_block_size,
 *   num_attention_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
 *   qk_rope_head_dim, v_head_dim, mla_use_nope, mla_use_output_gate,
 *   first_k_dense_replace, intermediate_size,
 *   num_experts [n_routed_experts], num_experts_per_token [num_experts_per_tok],
 *   num_shared_experts [n_shared_experts], moe_intermediate_size,
 *   routed_expert_hidden_size, latent_moe_use_norm,
 *   moe_router_activation_func [scoring_func] ("sigmoid"), topk_method
 *   ("noaux_tc"), num_expert_group [n_group], topk_group,
 *   moe_renormalize [norm_topk_prob], routed_scaling_factor,
 *   optional: use_grouped_topk, moe_layer_freq (1), num_key_value_heads
 *   (= num_attention_heads), num_nextn_predict_layers (0),
 *   linear_attn_config { full_attn_layers [1-based], kda_layers [1-based],
 *     num_heads, head_dim, short_conv_kernel_size, gate_lower_bound,
 *     use_full_rank_gate },
 *   quantization_config { quant_method "compressed-tensors",
 *     format "mxfp4-pack-quantized", config_groups.*.weights.num_bits 4,
 *     group_size 32 } (inside text_config as the release has it, or at the
 *     root; absent is an error: bf16 experts are not supported).
 * Other keys (HF's sampling "top_k", vision_config, auto_map...) are ignored.
 * The fields are one table in config.c (spellings, type, range, default, the
 * release's value, how it prints); parsing, printing, to_json and the
 * generator's defaults all walk it. */
#ifndef DF_FORMAT_CONFIG_H
#define DF_FORMAT_CONFIG_H

#include <stddef.h>

#include "base/err.h"

#define DF_MAX_LAYERS 256

typedef enum { DF_LAYER_KDA = 0, DF_LAYER_MLA = 1 } df_layer_kind;

/* What the engine reads from config.json: about 43 fields, one per release
 * key the table in config.c lists (that table parses, prints and writes
 * them); flat, because every component reads a few of them. */
typedef struct df_config {
  char model_type[32]; /* root model_type as found */
  int nested;          /* 1 when text_config was used */

  int hidden;       /* hidden_size */
  int n_layers;     /* num_hidden_layers */
  int vocab;        /* vocab_size */
  double eps;       /* rms_norm_eps as written (the fp32 kernels take it rounded) */
  int bos_id, eos_id, pad_id;
  long max_pos;     /* max_position_embeddings */
  float situ_beta, situ_linear_beta;
  int attn_res_block; /* attn_res_block_size */

  df_layer_kind layer_kind[DF_MAX_LAYERS]; /* 0-based */
  int n_kda, n_mla;

  /* KDA */
  int kda_heads, kda_head_dim, kda_conv; /* num_heads, head_dim, short_conv_kernel_size */
  float kda_gate_lower_bound;            /* -5.0 */
  int kda_full_rank_gate;

  /* MLA */
  int mla_heads, q_lora_rank, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim;
  int mla_use_nope, mla_output_gate;

  /* FFN / MoE */
  int first_k_dense;  /* layers [0, first_k_dense) are dense */
  int dense_inter;    /* intermediate_size */
  int n_experts;      /* num_experts */
  int top_k;          /* num_experts_per_token */
  int n_shared;       /* num_shared_experts */
  int moe_inter;      /* moe_intermediate_size */
  int latent;         /* routed_expert_hidden_size */
  int latent_norm;    /* latent_moe_use_norm */
  int n_group, topk_group; /* num_expert_group, topk_group */
  int norm_topk_prob;       /* moe_renormalize */
  int grouped_topk;         /* use_grouped_topk (0 when absent) */
  float routed_scale; /* routed_scaling_factor */

  /* quantization of routed experts */
  int expert_group; /* 32 */
} df_config;

int df_config_parse(df_config *c, const char *json, size_t len, df_err *e);
int df_config_load(df_config *c, const char *path, df_err *e);
/* df_config_load of dir/config.json (a model folder). */
int df_config_load_dir(df_config *c, const char *dir, df_err *e);
/* Prints the config as the engine understood it (for `inspect`). */
void df_config_print(const df_config *c, void *FILE_stream);
/* Serialises to the release's nested layout and spellings: the root fields of
 * moonshotai/Kimi-K3's config.json, text_config with quantization_config
 * inside it, keys sorted (used by the generator); caller frees. */
char *df_config_to_json(const df_config *c);
/* Zeroes c and sets every field the release gives one value to (activation
 * betas, rms_norm_eps, the fixed flags, MXFP4 group 32, ...), nested kimi_k3;
 * the per-model dimensions stay 0 for the caller (the generator's presets). */
void df_config_release_defaults(df_config *c);

#endif

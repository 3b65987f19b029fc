/* Synthetic checkpoints in the exact K3 layout (kimi-k3.md sections 1-4, 6),
 * generated from a seed, for testing without the real 1.5 TB checkpoint.
 *
 * A model directory holds config.json (nested: root model_type "kimi_k3",
 * text_config "kimi_linear"), generation_config.json, tokenizer_config.json,
 * tiktoken.model, model.safetensors.index.json and shards
 * model-NNNNN-of-NNNNNN.safetensors with the upstream tensor names, shapes and
 * dtypes (prefix "language_model.model.", "language_model.lm_head.weight",
 * plus a few vision_tower.* / mm_projector.* tensors a text engine ignores).
 *
 * Tensor names (i = layer, e = expert), all matrices [out, in]:
 *   embed_tokens.weight [V,H]; norm.weight, output_attn_res_norm.weight [H];
 *   output_attn_res_proj.weight [1,H]; language_model.lm_head.weight [V,H]
 *   layers.i.{input_layernorm,post_attention_layernorm,self_attention_res_norm,
 *     mlp_res_norm}.weight [H]; layers.i.{self_attention_res_proj,mlp_res_proj}.weight [1,H]
 *   KDA  layers.i.self_attn.{q,k,v,g}_proj.weight [P,H], f_a_proj.weight [D,H],
 *        f_b_proj.weight [P,D], b_proj.weight [NH,H], o_proj.weight [H,P],
 *        {q,k,v}_conv1d.weight [P,1,K] F32, A_log [max(NH,D)] F32 (entries >= NH
 *        are zero padding, as in K3), dt_bias [P] F32, o_norm.weight [D] F32
 *   MLA  layers.i.self_attn.q_a_proj.weight [QL,H], q_a_layernorm.weight [QL],
 *        q_b_proj.weight [MH*(nope+rope),QL], kv_a_proj_with_mqa.weight [KL+rope,H],
 *        kv_a_layernorm.weight [KL], kv_b_proj.weight [MH*(nope+v),KL],
 *        g_proj.weight [MH*v,H], o_proj.weight [H,MH*v]
 *   dense (i < first_k_dense_replace) layers.i.mlp.{gate,up}_proj.weight [I,H], down_proj [H,I]
 *   MoE  layers.i.block_sparse_moe.gate.weight [E,H], gate.e_score_correction_bias [E] F32,
 *        routed_expert_down_proj.weight [L,H], routed_expert_norm.weight [L],
 *        routed_expert_up_proj.weight [H,L], shared_experts.{gate,up}_proj.weight [S*M,H],
 *        shared_experts.down_proj.weight [H,S*M],
 *        experts.e.w{1,3}.weight_packed U8 [M,L/2], .weight_scale U8 [M,L/32],
 *        experts.e.w2.weight_packed U8 [L,M/2], .weight_scale U8 [L,M/32]
 *        (an expert's six tensors are contiguous in one shard in the order
 *        w1 packed, w1 scale, w2 packed, w2 scale, w3 packed, w3 scale).
 * Everything not named F32/U8 is BF16.
 *
 * Determinism: the bytes depend only on (preset, options, seed). Each tensor
 * draws from its own xoshiro256** stream seeded from (seed, tensor name), values
 * are integers scaled by exactly-rounded IEEE operations (no libm), rounded to
 * bf16 by the codec. The same seed gives byte-identical files on any machine. */
#ifndef DF_SYNTH_SYNTH_H
#define DF_SYNTH_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/rng.h" /* df_rng: each tensor's value stream */
#include "format/config.h"

/* ---- presets ---- */
typedef struct df_synth_opts {
  const char *preset;  /* "tiny", "small", "k3-shaped" */
  uint64_t seed;
  const char *out_dir;
  int moe_layers;      /* k3-shaped: number of MoE layers (0 = default 4) */
  int experts;         /* k3-shaped: routed experts per layer (0 = default 64); k3-trunk too */
  int layers;          /* k3-trunk: layers (0 = default 4) */
  int force;           /* overwrite a directory that already holds a model */
  int progress;        /* draw a progress bar */
  int threads;         /* generating threads (0 = every online CPU); the bytes never depend on it */
  /* --spine int8: the spine matrices (model/k3.h's df_k3_int8_eligible) are
   * written only as their row-int8 copy, byte for byte what convert-spine
   * would make of the bf16 ones, into spine_dir (NULL = DIR/spine-int8); the
   * bf16 shards keep their headers and every other tensor, the spine
   * matrices left as holes, and the index marks the model so that nothing
   * reads them (model/spine_int8.h). For a full-depth trunk whose bf16 spine
   * (113 GB) does not fit where its int8 copy (56 GB) does. */
  int spine_int8;
  const char *spine_dir;
} df_synth_opts;

/* k3-trunk (synth_trunk.c): applies --layers/--experts and K3's vocabulary. */
int df_synth_trunk_config(const df_synth_opts *o, df_config *c, df_err *e);

/* Names of the presets, NULL-terminated. */
extern const char *const df_synth_presets[];

/* Fills the config of a preset (vocab and special ids from the synthetic
 * tokenizer). */
int df_synth_config(const df_synth_opts *o, df_config *c, df_err *e);

/* Total bytes the model directory will take (tensor data + headers + small
 * files; with spine_int8, the int8 copy included and the holes not). */
int df_synth_size(const df_synth_opts *o, uint64_t *bytes, df_err *e);
/* The same split: the model directory's files and the int8 copy (0 without
 * spine_int8). */
int df_synth_sizes(const df_synth_opts *o, uint64_t *model, uint64_t *int8, df_err *e);

/* Writes the whole directory; every file via a temporary name + rename, and
 * config.json last, so a half-written directory never looks complete. Refuses
 * when the free space of the target file system is too small. */
int df_synth_make_model(const df_synth_opts *o, df_err *e);

/* ---- synthetic tokenizer ----
 * 256 byte tokens (rank = byte value) followed by merges learned by a small
 * byte-level BPE over an embedded English + C text, then the 256 K3 specials
 * right after the last rank. tokenizer_config.json lists the 16 the release
 * lists ([BOS], [EOS], <|end_of_msg|>, <|open|>, <|close|>, <|sep|>,
 * [start_header_id], [end_header_id], [EOT], the 4 media tokens,
 * <osagent_mode>, [UNK], [PAD], at the release's offsets 0-7, 9, 18-21, 65,
 * 254, 255); the other 240 are <|reserved_token_ID|> by position, as the
 * release's TikTokenTokenizer names them. */
#define DF_SYNTH_MERGES 512
typedef struct df_synth_vocab {
  uint8_t **bytes; /* token bytes by rank */
  int *len;
  int n;           /* number of ranks */
} df_synth_vocab;

void df_synth_vocab_build(df_synth_vocab *v);
void df_synth_vocab_free(df_synth_vocab *v);
/* The text of special token `offset` (0..255) for a vocabulary of n_ranks. */
void df_synth_special_name(int offset, int n_ranks, char *buf, size_t cap);
/* The embedded training text (also handy for tokenizer tests). */
extern const char df_synth_corpus[];

/* Writes tiktoken.model and tokenizer_config.json into dir (each atomically). */
int df_synth_write_tokenizer(const char *dir, const df_synth_vocab *v, df_err *e);

#endif

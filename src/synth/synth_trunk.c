/* The k3-trunk preset: K3's real trunk (hidden 7168, KDA 96 x 128, MLA as
 * released, dense layer 0 of 33792, shared experts 6144, latent 3584) and
 * K3's vocabulary size (163,840), the release's layer pattern (MLA every
 * fourth layer and the last) cut to --layers N, with --experts E routed
 * experts per MoE layer of the real shape (random codes, valid scales). It
 * exists to measure real per-layer costs and to make the spine larger than
 * memory on a small machine: about 1.2 GB of spine per KDA layer plus 4.7 GB
 * of embedding and head. The tokenizer stays the synthetic one (its ids are
 * a prefix of the vocabulary); runs use --prompt-ids. */
#include <string.h>

#include "synth/synth.h"

#define TRUNK_VOCAB 163840
#define TRUNK_LAYERS 4

int df_synth_trunk_config(const df_synth_opts *o, df_config *c, df_err *e) {
  int layers = o->layers ? o->layers : TRUNK_LAYERS;
  if (layers < 2 || layers > DF_MAX_LAYERS)
    return df_err_set(e, "--layers: %d is outside [2, %d]", layers, DF_MAX_LAYERS);
  if (o->experts) {
    if (o->experts < c->top_k || o->experts > 65536)
      return df_err_set(e, "--experts: %d is outside [%d, 65536] (top-k is %d)", o->experts,
                        c->top_k, c->top_k);
    c->n_experts = o->experts;
  }
  c->n_layers = layers;
  c->n_mla = c->n_kda = 0;
  for (int l = 0; l < layers; l++) {
    int mla = (l + 1) % 4 == 0 || l + 1 == layers; /* as in the release, 1-based */
    c->layer_kind[l] = mla ? DF_LAYER_MLA : DF_LAYER_KDA;
    if (mla) c->n_mla++;
    else c->n_kda++;
  }
  c->vocab = TRUNK_VOCAB;
  return 0;
}

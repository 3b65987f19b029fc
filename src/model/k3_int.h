/* Private to src/model/: the layout of a loaded model. Everything outside
 * the model component uses the accessors of k3.h. */
#ifndef DF_MODEL_K3_INT_H
#define DF_MODEL_K3_INT_H

#include "model/k3.h"

/* A routed expert's identity for a device's weight tier (kernels.h's
 * df_mm_mxfp4 id): the record of (layer, expert) holds the same bytes in
 * every pass, wherever the store put it. Bit 63 keeps it apart from
 * df_wmat ids; the low two bits name the matrix (0 gate, 1 up, 2 down). */
static inline uint64_t expert_key(int layer, int expert) {
  return 1ull << 63 | (uint64_t)layer << 32 | (uint64_t)expert << 2;
}

/* One layer's weights: a field per tensor of kimi-k3.md section 3 (about
 * 40), flat so that the stream can patch each pointer by its offset
 * (df_k3_piece.field) and the forward pass names each tensor as the
 * contract does. */
typedef struct df_k3_layer {
  int kind; /* DF_LAYER_KDA / DF_LAYER_MLA */
  int moe;
  const float *in_norm, *post_norm, *attn_res_norm, *mlp_res_norm, *attn_res_proj, *mlp_res_proj;
  /* KDA */
  df_wmat q, k, v, g, fa, fb, b, o;
  const float *conv[3]; /* q, k, v: [P][K] */
  const float *A_log, *dt_bias, *o_norm;
  /* MLA */
  df_wmat qa, qb, kva, kvb, mg, mo;
  const float *qa_norm, *kva_norm;
  /* dense FFN */
  df_wmat gate, up, down;
  /* MoE */
  df_wmat router, lat_down, lat_up, sh_gate, sh_up, sh_down;
  const float *router_bias, *lat_norm;
} df_k3_layer;

/* One streamed tensor of a unit: where its bytes are in a shard, and which
 * pointer of the unit's view (a df_k3_layer, or the head's df_wmat) points at
 * them. boff: its offset in the unit's ring buffer (set by the stream). */
typedef struct df_k3_piece {
  int file;      /* index in df_k3.files */
  uint64_t off, len;
  size_t field;  /* byte offset of the `const void *` to patch in the view */
  uint64_t boff;
} df_k3_piece;

/* A unit: one layer's spine matrices (except the router, always resident),
 * or the head (lm_head). See plan/plan.h. */
/* One coalesced read range of a unit (4 KiB-aligned), at boff in its buffer. */
typedef df_spine_extent df_k3_extent; /* the store's spine stream reads them (store/spine.h) */

typedef struct df_k3_unit {
  uint64_t bytes;   /* weight bytes */
  uint64_t read;    /* bytes its coalesced, aligned reads move */
  int misaligned;   /* a piece's file offset does not suit its dtype: cannot stream */
  int resident;
  df_k3_piece *pc;
  int npc, cappc;
  df_k3_extent *ex;
  int nex;
} df_k3_unit;

typedef struct df_k3_stream df_k3_stream;

struct df_k3 {
  const df_config *cfg;
  int int8;
  df_k3_layer *layers;
  df_wmat embed, lm_head;
  const float *final_norm, *out_res_norm, *out_res_proj;
  df_st_set *int8set; /* owned when int8 */
  void **owned;       /* fp32 copies of small vectors and realigned tensors */
  int nowned, capowned;
  uint64_t spine_bytes_per_token; /* spine weight bytes one decode token reads */
  uint64_t owned_bytes;           /* bytes of the owned copies */
  /* units: n_layers layers, then the head */
  int nunits;
  df_k3_unit *units;
  uint64_t *pl_bytes, *pl_read; /* planner inputs, per unit */
  uint8_t *pl_must;
  /* shard files the pieces name (main set, then the int8 set) */
  const df_st_set *sets[2];
  int nfiles;
  /* the embedding, read one row per position (never resident) */
  int emb_fd;
  uint64_t emb_off, emb_scale_off, emb_row_bytes;
  uint8_t *emb_buf;
  int ctx_limit; /* positions admitted by the plan; 0 = max_position_embeddings */
  int precision; /* activation bits of new states: 32 (default) or 64 */
  df_k3_stream *stream; /* NULL when every unit is resident */
  df_k3_compute *comp;  /* decode compute timers (mutable through a const model) */
};

/* After loading: coalesces each unit's pieces into aligned extents and fills
 * the planner's per-unit arrays. */
void df_k3_units_finish(df_k3 *m);

/* The path of file f of m->files. */
const char *df_k3_file_path(const df_k3 *m, int f);
/* File f itself (its mapping). */
const df_st_file *df_k3_file(const df_k3 *m, int f);

/* Units: the view the forward pass computes with. Resident units return the
 * loaded struct; streamed ones wait for their ring buffer. next: the unit the
 * forward pass will acquire after this one (-1 = none), read ahead now. */
const df_k3_layer *df_k3_acquire_layer(const df_k3 *m, int l, int next, df_err *e);
const df_wmat *df_k3_acquire_head(const df_k3 *m, int next, df_err *e);
void df_k3_release(const df_k3 *m, int unit);
/* The next non-resident unit after `unit` in forward order (-1: the start of
 * a pass); with_head: this pass computes the head. -1 if none streams. */
int df_k3_next_streamed(const df_k3 *m, int unit, int with_head);
/* Embedding rows of ids[0..T) into out (T x hidden), read from the shard. */
int df_k3_embed_rows(const df_k3 *m, const int *ids, int T, float *out, df_err *e);
void df_k3_stream_close(df_k3_stream *s);

#endif

/* The memory planner: divides the memory deltafin may use between
 * per-sequence state, scratch, the spine stream's I/O ring, the resident part
 * of the spine and the expert cache.
 *
 * A "unit" is what streams as one piece: one layer's spine matrices, or the
 * output head (lm_head). Every spine byte is read every token, so a resident
 * byte saves exactly one streamed byte per token whichever unit it belongs
 * to; a cached expert byte saves only what the router happens to pick again
 * (top_k / n_experts of a layer per token at chance). So the spine is made
 * resident before the expert cache gets memory (unless the cache size was
 * given explicitly), and among spine units the planner maximises resident
 * bytes: largest unit first, ties to the lower unit index. The embedding is
 * read one row per position and is never resident. A server's kept
 * conversation states (serve --reuse-mb) are budgeted like the live state:
 * min(the reuse budget, its state count x one state for the admitted
 * context and its logits), before anything else gets memory.
 *
 * df_plan_make is a pure function of its inputs (config, unit sizes, memory),
 * so it is unit-tested; df_plan_mem_detect reads the machine. */
#ifndef DF_PLAN_PLAN_H
#define DF_PLAN_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "format/config.h"

#define DF_PLAN_RING_SLOTS 2 /* the unit computing and the next one arriving */
#define DF_PLAN_SERVE_KEPT 8 /* kept conversation states of a server (serve/server.h) */

typedef struct df_plan_in {
  const df_config *cfg;
  int nunits;                  /* n_layers + 1: layers in order, then the head */
  const uint64_t *unit_bytes;  /* weight bytes of each unit (resident cost, read per token) */
  const uint64_t *unit_read;   /* bytes one read of the unit moves (aligned extents: ring slot) */
  const uint8_t *must_resident; /* NULL or 1 where a unit cannot stream (e.g. misaligned) */
  uint64_t fixed_bytes;        /* always-resident small tensors (norms, routers, conv, ...) */
  uint64_t embed_row_bytes;    /* one embedding row (read per position) */
  uint64_t expert_record_bytes; /* one routed expert's record (its cache slot) */
  uint64_t expert_total_bytes;  /* every routed expert's slot: no cache ever needs more */
  uint64_t mem_limit;          /* bytes deltafin may use */
  int64_t cache_req;           /* expert cache asked for in bytes; < 0 = planner decides */
  int64_t cache_default;       /* the store's default cache when the planner decides */
  int ctx_req;                 /* context asked for; <= 0 = min(max_position_embeddings, 8192) */
  int max_rows;                /* largest batch (prefill chunk), for scratch and experts in flight */
  uint64_t reuse_bytes;        /* conversation reuse (serve --reuse-mb): kept sequence states
                                * take at most this; 0 = none kept */
  int reuse_states;            /* and at most this many, each a state for ctx positions plus
                                * its logits (0 = no count limit) */
  int f64;                     /* float64 activations (--precision f64): state and scratch x2 */
  uint64_t spec_bytes;         /* --draft: the rollback mark and a block's logits */
  int spec_self;               /* --draft self: a second state of ctx positions too */
  uint64_t spec_per_pos;       /* a draft model's cache per context position (Qwen3 KV, DSpark latents) */
} df_plan_in;

typedef struct df_plan {
  uint64_t mem_limit;
  int ctx;                     /* positions admitted */
  uint64_t state_bytes;        /* KDA state + MLA latent cache for ctx positions */
  uint64_t reuse_bytes;        /* kept states for conversation reuse (df_plan_in.reuse_*) */
  uint64_t scratch_bytes;      /* activations for max_rows rows, logits */
  uint64_t fixed_bytes;        /* always-resident small tensors */
  uint64_t expert_min_bytes;   /* experts one batch holds in flight (the store needs them) */
  uint64_t ring_bytes;         /* spine stream buffers (0 when nothing streams) */
  uint64_t ring_slot_bytes;
  int ring_slots;
  uint64_t resident_bytes;     /* spine units kept in memory */
  uint64_t cache_bytes;        /* expert cache beyond the in-flight minimum */
  uint64_t streamed_per_token; /* spine bytes read from the drives per token */
  uint64_t embed_row_bytes;
  int nunits, n_resident, n_streamed;
  uint8_t *resident;           /* per unit */
  int cache_given;             /* the cache size came from the caller */
} df_plan;

/* Fills p; refuses (naming what does not fit and the least memory that
 * would) when even streaming every unit with no expert cache cannot fit. */
int df_plan_make(df_plan *p, const df_plan_in *in, df_err *e);
void df_plan_free(df_plan *p);

/* Bytes of per-sequence state for ctx positions, and scratch for rows. */
uint64_t df_plan_state_bytes(const df_config *c, int ctx);
/* The sequence state's two parts (fp32; float64 doubles both): fixed, every
 * KDA layer's matrices (heads x D x D) and conv windows (3 x (conv - 1) x P);
 * per position, every MLA layer's latent row (kv_lora_rank + rope).
 * df_plan_state_bytes(c, n) = fixed + n x per_pos; the model's states take
 * exactly this (df_k3_state_bytes), the session adds its last logits. */
void df_plan_state_parts(const df_config *c, uint64_t *fixed, uint64_t *per_pos);
/* "state    sequence state X MiB at 4096 positions, Y MiB at 32768 (...)\n"
 * for inspect and plan; caller frees. */
#define DF_PLAN_STATE_SHOWN_A 4096
#define DF_PLAN_STATE_SHOWN_B 32768
char *df_plan_state_text(const df_config *c, int f64);
/* The same as a JSON object text: fixed_bytes, per_position_bytes,
 * bytes_at_4096, bytes_at_32768, logits_bytes, precision; caller frees. */
char *df_plan_state_json(const df_config *c, int f64);
uint64_t df_plan_scratch_bytes(const df_config *c, int rows);

/* Human-readable summary (several lines) and a JSON object text; caller frees. */
char *df_plan_text(const df_plan *p);
char *df_plan_json(const df_plan *p);

/* The memory this process may use: MemAvailable, lowered to the cgroup v2
 * (memory.max of this cgroup and its ancestors, minus what the cgroup already
 * uses beyond this process) or v1 limit. *why names the source. */
int df_plan_mem_detect(uint64_t *bytes, char *why, size_t whylen, df_err *e);

/* Planner inputs from a K3 config alone (plan_k3.c): per unit (n_layers + 1)
 * weight and read bytes as the loader would stream them, the always-resident
 * small tensors and routers, one embedding row. For planning full K3 without
 * its checkpoint. */
void df_plan_k3_units(const df_config *c, int int8, uint64_t *bytes, uint64_t *read,
                      uint64_t *fixed, uint64_t *embed_row);

/* Parses a size such as 64G, 512M, 1.5GiB, 100000 (bytes). */
int df_plan_parse_size(const char *s, uint64_t *out);

#endif

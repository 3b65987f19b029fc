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

/* ---- GPU memory (--device cuda) ----
 * The device's weight tier (kernels/dtier.h) holds two classes: the
 * spine's matrices, kept, and the routed experts', least recent out; the
 * per-use buffers (activations in and out, a MoE batch's expert rows, a
 * matrix the tier does not keep) are taken from the device's memory beyond
 * the tier, and where that is too small the tier gives the difference back
 * (df_dtier_shrink). The same argument as for RAM holds here: a spine byte
 * on the GPU saves one host-to-device copy every token, an expert byte only
 * when its expert is picked again. So the experts get one token's batch of
 * a layer (top_k records: the batch then never waits on an eviction of its
 * own), the spine gets what is left (all of it when it fits; else units
 * largest first, ties to the lower index, as df_plan_make), and the experts
 * get the remainder. The tier enforces the bytes, not the unit list: its
 * KEEP class is capped at the chosen units' bytes (df_dtier_keep_cap) and
 * keeps matrices in the order a pass first uses them, so which matrices
 * stay may differ from the units named here, never how many bytes. */
#define DF_PLAN_GPU_RESERVE (2ull << 30) /* kgpu's default: free memory less this */
#define DF_PLAN_GPU_UNKNOWN UINT64_MAX   /* df_plan_gpu_in.outside: not known */

typedef struct df_plan_gpu_in {
  const df_config *cfg;
  int nunits;                   /* n_layers + 1, as df_plan_in */
  const uint64_t *unit_bytes;   /* the matrices a unit's products use, as the tier holds them */
  const uint64_t *unit_largest; /* a unit's largest such matrix (the per-use weight buffer) */
  uint64_t expert_record_bytes; /* one routed expert's record (the tier aligns it to 256) */
  uint64_t expert_total_bytes;  /* every routed expert */
  uint64_t budget;              /* the tier: --gpu-mem, or free memory less DF_PLAN_GPU_RESERVE */
  uint64_t outside;             /* device memory beyond the tier for the per-use buffers;
                                 * DF_PLAN_GPU_UNKNOWN: assumed enough (no device to ask) */
  int max_rows;                 /* largest batch (prefill chunk) */
  uint64_t state_bytes;         /* sequence state the device keeps beside the tier
                                 * (df_plan_gpu_state_bytes; 0: --gpu-state copy) */
} df_plan_gpu_in;

typedef struct df_plan_gpu {
  uint64_t budget, outside;
  /* per-use buffers at max_rows, as kgpu.c sizes them (a quarter over, as
   * it grows them): activations in and out (the head's logits included),
   * the expert batch's gate and up rows, the weight buffer for the largest
   * matrix not kept (0 when every unit is) */
  uint64_t peruse_act, peruse_experts, peruse_weights, peruse_bytes;
  uint64_t state_bytes;         /* df_plan_gpu_in's: beside the per-use buffers */
  uint64_t given_back;          /* per-use and state bytes past `outside`: the tier gives them up */
  uint64_t usable;              /* budget - given_back */
  uint64_t spine_total, spine_bytes; /* the spine's products' matrices; those on the GPU */
  uint64_t keep_cap;            /* for df_dtier_keep_cap: UINT64_MAX when all of the spine fits */
  uint64_t expert_min_bytes;    /* one token's experts of a layer */
  uint64_t expert_bytes;        /* the experts' share of the tier */
  uint64_t expert_records, expert_records_all;
  int nunits, n_gpu, max_rows;
  uint8_t *on_gpu;              /* per unit */
} df_plan_gpu;

/* What --device cuda keeps of one sequence of ctx positions in device
 * memory (kgpu.h's df_kgpu_seq_*: taken from the tier when the device is
 * short, so the plan counts it): its KDA states and MLA caches, marks more
 * KDA states (speculation's marks, which stay there too), and with self a
 * second sequence (--draft self). */
uint64_t df_plan_gpu_state_bytes(const df_config *c, int ctx, int marks, int self);

/* Fills g (never fails: a budget too small for anything leaves every unit
 * per-use, which kgpu handles, slower). */
void df_plan_gpu_make(df_plan_gpu *g, const df_plan_gpu_in *in);
void df_plan_gpu_free(df_plan_gpu *g);
/* "gpu      ..." lines, and a JSON object text; caller frees. */
char *df_plan_gpu_text(const df_plan_gpu *g);
char *df_plan_gpu_json(const df_plan_gpu *g);
/* The GPU's units from a K3 config (plan_gpu.c): per unit (n_layers + 1)
 * the matrices its products send to the device (the MoE router included,
 * MLA's kv_b not: it is applied on the CPU) as kgpu.c stores them, int8
 * (with its scales, 256-byte aligned) or bf16, and the largest of them. */
void df_plan_gpu_units(const df_config *c, int int8, uint64_t *bytes, uint64_t *largest);

/* Parses a size such as 64G, 512M, 1.5GiB, 100000 (bytes). */
int df_plan_parse_size(const char *s, uint64_t *out);

#endif

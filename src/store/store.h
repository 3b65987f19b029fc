/* The expert store: the only way the model reaches routed experts.
 *
 * Per MoE layer and batch, the model asks for the sorted, unique set of
 * experts its rows chose (df_store_begin), then takes experts as they become
 * ready (df_store_next, in any order) and computes on them into per-expert
 * slots; it sums the slots in a fixed order afterwards, so the order in which
 * bytes arrive never changes a result. An expert's bytes are its six upstream
 * tensors, contiguous: w1 packed, w1 scale, w2 packed, w2 scale, w3 packed,
 * w3 scale (kimi-k3.md section 4). */
#ifndef DF_STORE_STORE_H
#define DF_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "store/io.h"
#include "store/manifest.h"
#include "store/opts.h"

typedef struct df_store df_store;


/* The manifest `deltafin pack` records in the model folder. */
#define DF_PACK_MANIFEST_NAME "deltafin-pack.json"

/* Byte offsets of the six tensors inside one expert record. */
typedef struct df_expert_layout {
  uint64_t w1p, w1s, w2p, w2s, w3p, w3s, total;
} df_expert_layout;
void df_expert_layout_of(const df_config *c, df_expert_layout *l);

/* The expert cache a store gets without --cache-mb: a quarter of physical
 * memory (4096 MiB where the system does not say). */
long df_store_default_cache_mb(void);

int df_store_open(df_store **out, const df_st_set *set, const df_config *c,
                  const df_store_opts *o, df_err *e);
void df_store_close(df_store *s);

/* Starts a layer batch: experts[] sorted ascending, unique, n >= 1; rows is
 * the number of positions of the forward pass the batch belongs to (1 =
 * decode, > 1 = a prefill chunk: its reads count as prefill reads, and
 * `auto` prefetch reads nothing speculative for it). */
int df_store_begin(df_store *s, int layer, const int *experts, int n, int rows, df_err *e);
/* Hands out one ready expert: *idx is its index in experts[], *bytes its
 * record (valid until df_store_end). Returns 1 when it handed one out, 0 when
 * every expert of the batch has been handed out, -1 on error (the message
 * names the layer and expert). */
int df_store_next(df_store *s, int *idx, const uint8_t **bytes, df_err *e);
void df_store_end(df_store *s);
/* Optional hint: experts likely needed soon (prefetch); never changes results.
 * The gate-ahead predictor: call it for layer L+1 as soon as L's router
 * input is known, before waiting on L's experts; its recall per layer is
 * measured at L+1's df_store_begin. */
void df_store_hint(df_store *s, int layer, const int *experts, int n);
/* 1 when hints are used or measured (prefetch gate or auto): a caller may
 * skip computing them otherwise. */
int df_store_wants_hint(const df_store *s);

/* The buffers records are read into (O_DIRECT, by the chunk of slots):
 * fn is called for every chunk allocated so far and for each later one,
 * unfn before one is freed (at close). --device cuda page-locks them, so a
 * record goes to the GPU by DMA from where the drive put it, without a
 * staging copy, and the copy can overlap the next read. */
void df_store_on_buffers(df_store *s, void (*fn)(void *ud, void *p, size_t n),
                         void (*unfn)(void *ud, void *p, size_t n), void *ud);

/* ---- where records live, and what the store read ----
 * The one answer to "where is this record and how would you read it", for
 * tools that replay or check the store's reads (the bench's storage
 * ceiling) without re-deriving the pack's or the shards' layout. */
typedef struct df_store_loc {
  const char *path;  /* the file holding this copy (valid while the store is open) */
  int file;          /* the store's index of that file (same path, same index) */
  int drive;         /* the drive it is on (the store's drive index; shards: 0) */
  uint64_t off;      /* the record's first byte in the file */
  uint64_t bytes;    /* record bytes */
  uint64_t read_off; /* the span one whole read of it covers (O_DIRECT aligned) */
  uint32_t read_len;
} df_store_loc;
/* Copies of the record of (layer, expert); 0 when there is no such record. */
int df_store_copies(const df_store *s, int layer, int expert);
int df_store_locate(const df_store *s, int layer, int expert, int copy, df_store_loc *out,
                    df_err *e);

/* One verified record read: which record, from which copy (a split read is
 * logged as a read of its first part's copy). */
typedef struct df_store_read {
  int layer, expert, copy;
} df_store_read;
/* Starts (on = 1) or stops logging successful reads in order, in memory. */
void df_store_log_reads(df_store *s, int on);
/* Reads logged so far; df_store_read_log copies entries [from, from + max)
 * and returns how many it copied. */
size_t df_store_reads_logged(const df_store *s);
size_t df_store_read_log(const df_store *s, size_t from, size_t max, df_store_read *out);

/* The spine stream (the model's streamed spine units) is the store's too:
 * store/spine.h. */

/* The I/O options as the store resolved them at open (opts.h); the
 * strings are valid while the store is open. */
const df_store_iocfg *df_store_iocfg_of(const df_store *s);
/* The I/O engine in use ("uring" or "pread"), and the trace's clock:
 * seconds since the store opened. */
const char *df_store_io_used(const df_store *s);
double df_store_clock(const df_store *s);

/* Generation marks in the store's trace (no-op without one): kind "gen"
 * (i = prompt length) when a generation begins, "token" (i = 1-based
 * number) when a token was sampled. store/trace.h has the format. */
void df_store_trace_mark(df_store *s, const char *kind, int i);
/* A --draft auto decision in the trace (store/trace.h: df_trace_draft). */
void df_store_trace_draft(df_store *s, int K, double tpp, const char *why);

/* Total routed-expert bytes fetched so far (reads and cache hits are
 * reported separately in the stats JSON). */
uint64_t df_store_bytes_read(const df_store *s);
/* Stats as a JSON object text; caller frees. */
char *df_store_stats_json(const df_store *s);
/* Human-readable stats (several lines, for --stats); caller frees. */
char *df_store_stats_text(const df_store *s);
/* One line saying where experts come from (pack or shards, drives, io,
 * emulation); caller frees. */
char *df_store_describe(const df_store *s);

#endif

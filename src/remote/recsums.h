/* Record sums: a trusted sha256 per routed-expert record of one checkpoint.
 *
 * The hub publishes one sha256 per file, so in a stream install a record
 * fetched alone cannot be proven against the hub until its whole shard is
 * local. A record-sums document, made by `deltafin record-sums` from a model
 * folder whose shards were all hashed (a full install, or any folder: it
 * hashes every shard itself), carries every shard's name, size and sha256 and
 * every record's place and sha256. A stream install checks the shard list
 * against the hub's model info (so the sums are for the pinned revision) and
 * then verifies each fetched record before it is written. A shard's optional
 * spans are the rest of what a stream install fetches from it (the header,
 * named "header", and each tensor that is neither a routed expert nor a
 * vision tensor): setup --stream checks them once they are local.
 *
 *   {"format": "deltafin-record-sums/1",
 *    "repo": "owner/name", "commit": "<40 hex>",          (optional, informative)
 *    "shards":  [{"name": N, "size": S, "sha256": H,
 *                 "spans": [{"name": T, "offset": O, "length": B, "sha256": H}, ...]}, ...],
 *    "records": [{"layer": L, "expert": X, "shard": <index into shards>,
 *                 "offset": O, "length": B, "sha256": H}, ...]}
 *
 * The parser is strict: unknown format, a bad name or hex digest, a record
 * outside its shard, two records that overlap or share (layer, expert) are
 * errors naming the entry. */
#ifndef DF_REMOTE_RECSUMS_H
#define DF_REMOTE_RECSUMS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "format/safetensors.h"
#include "remote/hub.h"

#define DF_RECSUMS_FORMAT "deltafin-record-sums/1"
#define DF_RECSUMS_FILE "deltafin-record-sums.json" /* in a stream install's model root */
#define DF_RECSUMS_MAX_BYTES (256u << 20)

typedef struct df_recsums df_recsums;

typedef struct df_recsum_span {
  const char *name; /* "header" or a tensor name */
  uint64_t off, len;
  uint8_t sha256[32];
} df_recsum_span;

typedef struct df_recsum_shard {
  const char *name;
  uint64_t size;
  const char *sha256; /* 64 lowercase hex */
  const df_recsum_span *spans; /* sorted by offset, disjoint */
  int nspans;
} df_recsum_shard;

typedef struct df_recsum {
  int layer, expert, shard;
  uint64_t off, len;
  uint8_t sha256[32];
} df_recsum;

int df_recsums_parse(const char *buf, size_t len, const char *label, df_recsums **out, df_err *e);
void df_recsums_free(df_recsums *r);

int df_recsums_nshards(const df_recsums *r);
const df_recsum_shard *df_recsums_shard(const df_recsums *r, int i);
int df_recsums_find_shard(const df_recsums *r, const char *name); /* index or -1 */
int df_recsums_nrecords(const df_recsums *r);
const df_recsum *df_recsums_record(const df_recsums *r, int i);
/* The record of shard index `shard` starting at off, or NULL. */
const df_recsum *df_recsums_lookup(const df_recsums *r, int shard, uint64_t off);

/* Every listed shard must be in the model info with the same size and LFS
 * sha256: else the sums are refused ("record sums are for another
 * revision/repo"). */
int df_recsums_check_info(const df_recsums *r, const df_hub_info *info, const char *label,
                          df_err *e);
/* 0 when data (rs->len bytes) has the record's sha256. */
int df_recsums_verify(const df_recsum *rs, const void *data);
/* 0 when data (len bytes) has the digest sha. */
int df_recsums_check_bytes(const uint8_t sha[32], const void *data, uint64_t len);

#endif

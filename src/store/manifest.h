/* The pack manifest: which bytes of which drive hold each routed expert.
 *
 * JSON (one object, every key required, no others):
 *   {"format":"deltafin-pack","version":1,
 *    "model":{"fingerprint":"<16 hex>","first_layer":F,"n_layers":L,"n_experts":E,
 *             "record_bytes":B},
 *    "align":4096,
 *    "drives":[{"path":"/abs/dir","file":"name.dfpack","bytes":N,"bandwidth":R},...],
 *    "records":[[layer,expert,[[drive,offset,"<16 hex xxh3-64>"],...]],...],
 *    "spine":{"kind":"bf16"|"int8","layout":"<16 hex>",
 *             "units":[[unit,bytes,[[drive,offset,len,"<16 hex xxh3-64>"],...]],...]}}
 *
 * "spine" is the one optional key (deltafin pack --spine): the streamable
 * spine units (model/k3.h: layers, then the head) as the spine stream's
 * buffer images (each unit's coalesced, aligned shard extents back to back),
 * cut into aligned chunks spread over the drives (store/spine_place.h), one
 * checksum per chunk. layout ties it to the model's unit layout (its files,
 * offsets and lengths, df_k3_spine_layout): a run whose layout differs reads
 * the shards instead. Units are listed in increasing order, each once; a
 * unit's chunks, in buffer order, add up to its bytes.
 *
 * The parser is strict: records cover every (layer, expert) with layer in
 * [F, L) exactly once, copies of one record sit on distinct drives, offsets
 * are multiples of align, no two records overlap within a drive's file and
 * every record ends inside the file's declared size; spine chunks are
 * aligned, non-empty, inside their file and overlap neither records nor each
 * other. Anything else is an error naming the field. */
#ifndef DF_STORE_MANIFEST_H
#define DF_STORE_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/util.h"

#define DF_MF_MAX_COPIES 4
#define DF_MF_MAX_DRIVES 64
#define DF_MF_ALIGN ((int)DF_IO_ALIGN) /* the one alignment (base/util.h) */

typedef struct df_mf_copy {
  int drive;
  uint64_t offset;
  uint64_t xxh3;
} df_mf_copy;

typedef struct df_mf_record {
  int layer, expert;
  int ncopies;
  df_mf_copy copies[DF_MF_MAX_COPIES];
} df_mf_record;

typedef struct df_mf_drive {
  char *path;        /* the drive directory */
  char *file;        /* pack file name inside it */
  uint64_t bytes;    /* pack file size */
  double bandwidth;  /* bytes/s as declared or measured at pack time; 0 = unknown */
} df_mf_drive;

/* One piece of a spine unit on one drive. */
typedef struct df_mf_chunk {
  int drive;
  uint64_t offset, len; /* both multiples of align */
  uint64_t xxh3;
} df_mf_chunk;

typedef struct df_mf_spine_unit {
  int unit;       /* the model's unit index (layers 0..n-1, then the head) */
  uint64_t bytes; /* its buffer image: the sum of its chunks' len */
  int first, nchunks; /* its chunks: spine.chunks[first .. first + nchunks) */
} df_mf_spine_unit;

#define DF_MF_SPINE_KIND_MAX 8
typedef struct df_mf_spine {
  char kind[DF_MF_SPINE_KIND_MAX]; /* "bf16" or "int8" */
  uint64_t layout;
  int nunits;
  df_mf_spine_unit *units; /* increasing unit */
  int nchunks;
  df_mf_chunk *chunks;
} df_mf_spine;

typedef struct df_manifest {
  uint64_t fingerprint; /* of the model's config + shard index (df_pack_fingerprint) */
  int first_layer, n_layers, n_experts;
  uint64_t record_bytes;
  uint32_t align;
  int ndrives;
  df_mf_drive *drives;
  int nrecs; /* (n_layers - first_layer) * n_experts, ordered by (layer, expert) */
  df_mf_record *recs;
  int has_spine; /* the optional spine section */
  df_mf_spine spine;
} df_manifest;

/* label names the source in errors (a path). */
int df_manifest_parse(df_manifest *m, const char *json, size_t len, const char *label, df_err *e);
int df_manifest_load(df_manifest *m, const char *path, df_err *e);
/* Serialises (caller frees). */
char *df_manifest_to_json(const df_manifest *m);
/* Validates the in-memory manifest with the parser's rules. */
int df_manifest_check(const df_manifest *m, const char *label, df_err *e);
void df_manifest_free(df_manifest *m);
/* The record of (layer, expert), or NULL when out of range. */
const df_mf_record *df_manifest_find(const df_manifest *m, int layer, int expert);
/* The spine section's entry for unit, or NULL (no section, or not in it). */
const df_mf_spine_unit *df_manifest_spine_unit(const df_manifest *m, int unit);
/* Moves the spine section out of m into out (m keeps none; free with
 * df_mf_spine_free). */
void df_manifest_take_spine(df_manifest *m, df_mf_spine *out);
void df_mf_spine_free(df_mf_spine *s);
/* Joined path of a drive's pack file (caller frees). */
char *df_manifest_file_path(const df_manifest *m, int drive);

#endif

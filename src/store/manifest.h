/* The pack manifest: which bytes of which drive hold each routed expert.
 *
 * JSON (one object, every key required, no others):
 *   {"format":"deltafin-pack","version":1,
 *    "model":{"fingerprint":"<16 hex>","first_layer":F,"n_layers":L,"n_experts":E,
 *             "record_bytes":B},
 *    "align":4096,
 *    "drives":[{"path":"/abs/dir","file":"name.dfpack","bytes":N,"bandwidth":R},...],
 *    "records":[[layer,expert,[[drive,offset,"<16 hex xxh3-64>"],...]],...]}
 *
 * The parser is strict: records cover every (layer, expert) with layer in
 * [F, L) exactly once, copies of one record sit on distinct drives, offsets
 * are multiples of align, no two records overlap within a drive's file and
 * every record ends inside the file's declared size. Anything else is an
 * error naming the field. */
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

typedef struct df_manifest {
  uint64_t fingerprint; /* of the model's config + shard index (df_pack_fingerprint) */
  int first_layer, n_layers, n_experts;
  uint64_t record_bytes;
  uint32_t align;
  int ndrives;
  df_mf_drive *drives;
  int nrecs; /* (n_layers - first_layer) * n_experts, ordered by (layer, expert) */
  df_mf_record *recs;
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
/* Joined path of a drive's pack file (caller frees). */
char *df_manifest_file_path(const df_manifest *m, int drive);

#endif

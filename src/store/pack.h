/* `deltafin pack` and `deltafin doctor`.
 *
 * Pack: every routed expert becomes one 4 KiB-aligned record (its six
 * upstream tensors verbatim) in a per-drive pack file <drive>/<model>.dfpack.
 * Placement goes hottest first to the drive whose expected load per unit of
 * bandwidth is lowest; the hottest `replicas_hot` percent get a second copy
 * on another drive. Resumable: the placement (plan) is written first, each
 * drive keeps a journal of records written and fsynced, and a re-run skips
 * them; the manifest is written last, atomically, into the model folder.
 *
 * With a spine (pack --spine bf16|int8), the streamable spine units follow
 * the expert records on the same drives: each unit's buffer image (what the
 * spine stream would read from the shards, model/k3.h) cut into aligned,
 * checksummed chunks spread over the drives (store/spine_place.h), journalled
 * and resumed like the records. */
#ifndef DF_STORE_PACK_H
#define DF_STORE_PACK_H

#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

/* The spine section's source: per unit, the file ranges whose bytes, back to
 * back, make its buffer image (bytes past a file's end read as zeros). */
typedef struct df_pack_extent {
  const char *path;
  uint64_t off, len; /* multiples of 4096 */
} df_pack_extent;

typedef struct df_pack_spine_unit {
  int unit;       /* increasing */
  uint64_t bytes; /* sum of the extents' len */
  int nex;
  const df_pack_extent *ex;
} df_pack_spine_unit;

typedef struct df_pack_spine {
  const char *kind; /* "bf16" or "int8" */
  uint64_t layout;  /* the model's unit layout id (df_k3_spine_layout) */
  int nunits;
  const df_pack_spine_unit *units;
} df_pack_spine;

typedef struct df_pack_opts {
  const char *model_dir;
  int ndrives;
  const char *const *drives;  /* directories (created if missing) */
  const double *bandwidth;    /* declared bytes/s per drive, 0 = unknown; NULL = all unknown */
  int measure;                /* measure unknown bandwidths with a short O_DIRECT test */
  double replicas_hot;        /* percent of experts (hottest) with a second copy */
  const char *heat_path;      /* NULL: <model_dir>/deltafin.heat if present; "" none */
  const char *manifest_out;   /* NULL: <model_dir>/deltafin-pack.json */
  double max_rate;            /* bytes/s written at most; 0 = no limit */
  int progress;
  const df_pack_spine *spine; /* NULL: no spine section */
} df_pack_opts;

int df_pack(const df_pack_opts *o, df_err *e);
/* Creates a --drives folder if missing, but only its last component: a
 * path whose parent does not exist (a typo, an unmounted drive) is an error
 * naming the parent. An existing directory is fine; a file is an error. */
int df_pack_make_drive_dir(const char *path, df_err *e);

typedef struct df_doctor_report {
  uint64_t records, copies, ok, corrupt, missing;
  uint64_t lost; /* records with no good copy */
  /* the spine section (0 chunks without one); a bad chunk has no other copy:
   * its unit streams from nowhere until the pack is redone (or --no-pack) */
  uint64_t spine_chunks, spine_ok, spine_corrupt, spine_missing;
} df_doctor_report;

/* Verifies every copy of every record; prints one line per problem and a
 * summary to out. Returns 0 when it could check (even with problems: see
 * rep), -1 when it could not (no manifest, unreadable model). */
int df_doctor(const char *model_dir, const char *manifest, FILE *out, int progress,
              df_doctor_report *rep, df_err *e);

/* Sequential O_DIRECT write+read speed of a directory (bytes/s), using a
 * temporary file of `bytes`. */
int df_pack_measure_drive(const char *dir, uint64_t bytes, double *rate, df_err *e);

#endif

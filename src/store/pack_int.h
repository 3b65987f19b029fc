/* df_pack's internals, shared by pack.c (the plan, the expert records, the
 * manifest) and pack_spine.c (the spine section). */
#ifndef DF_STORE_PACK_INT_H
#define DF_STORE_PACK_INT_H

#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "store/manifest.h"
#include "store/pack.h"
#include "store/store.h"

typedef struct pack_job {
  const df_pack_opts *o;
  df_config cfg;
  df_st_set set;
  df_expert_layout lay;
  uint64_t fingerprint;  /* of the checkpoint files (a pack is tied to them) */
  df_manifest m;         /* the plan, and at the end the manifest */
  char *mpath;           /* where the manifest goes */
  char *plan_path;       /* <manifest>.plan: the placement, written before any record */
  char *header;          /* the plan's first line: model, drives, replica share */
  char *plan_text;       /* header + plan JSON (its hash ties the journals to it) */
  uint64_t plan_id;
  char *fname;           /* the pack file's name on every drive */
  char **dabs;           /* absolute drive folders */
  double *bw;            /* declared or measured bandwidth per drive, 0 = unknown */
  int known;             /* drives with a bandwidth (all or none) */
  int *fd;               /* pack file per drive */
  char **jpath;          /* journal per drive */
  FILE **jf;
  size_t nk;             /* records */
  size_t nitems;         /* records, then spine chunks: the journal's keys */
  uint64_t *done_xxh;    /* [record][copy]: the hash of what was written */
  uint8_t *done;         /* [record][copy]: 0 to write, 2 written not durable, 1 journalled */
} pack_job;

#define DONE(j, k, c) ((j)->done[(k) * DF_MF_MAX_COPIES + (size_t)(c)])
#define DONE_XXH(j, k, c) ((j)->done_xxh[(k) * DF_MF_MAX_COPIES + (size_t)(c)])

/* One journal line (key, copy, xxh3 of what was written, a line check). */
void df_pack_journal_line(char *buf, size_t cap, int key, int copy, uint64_t xxh);
/* Sleeps so that `written` bytes since t_start stay under max_rate (0: none). */
void df_pack_throttle(double max_rate, uint64_t written, double t_start);
/* The spine section's placement, after each drive's expert records. */
void df_pack_plan_spine(pack_job *j, const double *bw);
/* Writes the spine chunks still to write (journalled like the records). */
int df_pack_copy_spine(pack_job *j, df_err *e);

#endif

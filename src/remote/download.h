/* Parallel, resumable, verified downloads of whole files or of byte ranges
 * of them.
 *
 * A file is written into a data file (dest.part for a fresh download, or
 * dest itself for a sparse stream-install shard) with a present-ranges
 * journal beside it (ranges.h). What is missing from the wanted ranges is
 * cut into chunks that workers fetch over several connections; each chunk is
 * fdatasync'd before the journal records it, so a kill at any point loses
 * at most the chunks in flight. When a file is complete it is verified
 * against the hub's sha256 (or git blob id), renamed to its final name and
 * its journal removed; a mismatch removes the data (nothing corrupt is left)
 * and fails naming the file. */
#ifndef DF_REMOTE_DOWNLOAD_H
#define DF_REMOTE_DOWNLOAD_H

#include <stdint.h>

#include "base/err.h"
#include "remote/http.h"
#include "remote/hub.h"
#include "remote/ranges.h"

typedef struct df_dl_item {
  const df_hub_file *file; /* name, size, checksum */
  const char *url;
  const char *dest;        /* final path */
  int in_place;            /* data lives at dest with dest.ranges (a stream-install shard) */
  const df_range *want;    /* NULL: the whole file; else only these ranges (sorted) */
  int nwant;
} df_dl_item;

typedef struct df_dl_opts {
  df_http_cfg http;
  int connections;  /* parallel connections; <= 0: 4 */
  uint64_t chunk;   /* bytes per range request; 0: 16 MiB */
  int progress;     /* 1: progress on stderr */
  const char *step; /* progress label, "download" */
  int offline;      /* nothing may be fetched: anything missing is an error naming it */
} df_dl_opts;

typedef struct df_dl_stats {
  uint64_t bytes_net;     /* body bytes received */
  uint64_t bytes_wanted;  /* bytes that were missing when it started */
  uint64_t requests, retries;
  int files_completed;    /* files verified and renamed in this call */
  double seconds;
} df_dl_stats;

/* Bytes of the wanted ranges of item that are not yet present locally. */
int df_dl_missing(const df_dl_item *it, uint64_t *missing, df_err *e);

int df_dl_run(const df_dl_item *items, int n, const df_dl_opts *o, df_dl_stats *st, df_err *e);

/* The path of dest's journal: dest.part.ranges, or dest.ranges in place
 * (fresh string). */
char *df_dl_journal_path(const char *dest, int in_place);

/* A size in the unit that fits it ("812 B", "7.4 KB", "2.3 MB", "1.50 GB",
 * "1.52 TB"; decimal units, as the hub shows sizes); returns out. */
const char *df_dl_fmt_size(uint64_t bytes, char out[24]);

#endif

/* The present-ranges record of a partly written file: which byte ranges of
 * it hold final data, each with the xxh3-64 of its bytes.
 *
 * It is an append-only text journal beside the file (<file>.ranges). A range
 * is appended only after its bytes are written and fdatasync'd, so after a
 * kill at any point every listed range is on disk; a torn last line (kill
 * during the append) is dropped when the journal is opened again. Each line
 * carries its own check, so a damaged journal is an error, never a lie:
 *   R <begin:16 hex> <end:16 hex> <xxh3:16 hex> <xxh32 of the text before it:8 hex>\n
 * Used by the downloader (chunks of a .part file) and by the stream store
 * (expert records fetched into a sparse shard, checked on every read). */
#ifndef DF_REMOTE_RANGES_H
#define DF_REMOTE_RANGES_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct df_range {
  uint64_t begin, end; /* [begin, end) */
  uint64_t hash;       /* xxh3-64 of the bytes */
} df_range;

/* Parses a journal held in memory. A torn or damaged LAST line is dropped
 * (*valid_len is the length of the good prefix); damage anywhere else is an
 * error naming the line. *out sorted by begin; caller frees. */
int df_ranges_parse(const char *buf, size_t len, const char *label, df_range **out, int *n,
                    size_t *valid_len, df_err *e);
/* Formats one line into line[80]; returns its length. */
int df_ranges_format(char *line, const df_range *r);

typedef struct df_ranges df_ranges; /* thread-safe */

/* Opens (creating if missing) the journal at path; truncates a torn tail. */
int df_ranges_open(df_ranges **out, const char *path, df_err *e);
void df_ranges_close(df_ranges *r);
/* Appends a range (the caller has made its bytes durable) and fsyncs. */
int df_ranges_add(df_ranges *r, uint64_t begin, uint64_t end, uint64_t hash, df_err *e);
/* Appends several ranges with one write and one fsync. */
int df_ranges_add_many(df_ranges *r, const df_range *v, int n, df_err *e);
/* Reads what other processes appended to the journal since this handle
 * last saw it (run and warm, or two runs, fetching into one install) and
 * adds their ranges. A torn last line (an append not yet complete) is left
 * for a later refresh. -1 when the new lines are damaged. */
int df_ranges_refresh(df_ranges *r, df_err *e);
/* 1 if [begin, end) is fully inside the union of the ranges. */
int df_ranges_covered(df_ranges *r, uint64_t begin, uint64_t end);
/* The entry exactly equal to [begin, end): 0 and *hash set, or -1. */
int df_ranges_lookup(df_ranges *r, uint64_t begin, uint64_t end, uint64_t *hash);
/* Bytes covered (union). */
uint64_t df_ranges_bytes(df_ranges *r);
int df_ranges_count(df_ranges *r);
/* Calls fn(ud, b, e) for each maximal gap [b, e) of [begin, end) that no
 * range covers, in ascending order. */
void df_ranges_gaps(df_ranges *r, uint64_t begin, uint64_t end,
                    void (*fn)(void *ud, uint64_t b, uint64_t e), void *ud);

#endif

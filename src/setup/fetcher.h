/* The stream fetcher: fetches routed-expert records of a stream install by
 * HTTP range requests from their shard offsets, the first time they are
 * needed, into the sparse local shards (stream.h).
 *
 * - Records asked for together are coalesced when adjacent in a shard and
 *   fetched over several connections at once; a record already being
 *   fetched (by another caller) is waited for, never fetched twice.
 * - Each fetched record is written at its true offset, fdatasync'd, and then
 *   recorded with its xxh3-64 in the shard's present-ranges journal; readers
 *   verify that checksum on every read until the shard is complete. A
 *   complete shard is verified against the hub's sha256 (which proves every
 *   record fetched from it) and its journal removed; a mismatch is an error
 *   naming the shard, and its records are refused from then on.
 * - Nothing is fetched speculatively: only what a caller asks for. */
#ifndef DF_SETUP_FETCHER_H
#define DF_SETUP_FETCHER_H

#include <stdint.h>

#include "base/err.h"
#include "format/safetensors.h"
#include "setup/sverify.h"

typedef struct df_fetcher df_fetcher;

/* 1 and *out when dir is a stream install with shards still partial; 0 when
 * every shard is complete (nothing to fetch); -1 on error (e.g. a journal
 * that is damaged, or the install state is unreadable). */
int df_fetcher_open(df_fetcher **out, const char *dir, const df_st_set *set, df_err *e);
void df_fetcher_close(df_fetcher *f);

/* 1 if [off, off + len) of shard `file` is local: *xxh is the xxh3-64 its
 * bytes must have (0 when the shard is complete and verified, nothing to
 * check). 0 if not local. */
int df_fetcher_local(df_fetcher *f, int file, uint64_t off, uint64_t len, uint64_t *xxh);

typedef struct df_fetch_req {
  int file;
  uint64_t off, len;
  int layer, expert; /* named in errors */
} df_fetch_req;

/* Makes every requested record local (blocking). -1 with e naming the first
 * record that could not be fetched (and the endpoint). */
int df_fetcher_fetch(df_fetcher *f, const df_fetch_req *r, int n, df_err *e);

typedef struct df_fetcher_stats {
  uint64_t records, bytes, requests, retries;
  double wait_s;       /* time callers spent waiting in df_fetcher_fetch */
  int shards_partial;  /* shards still being filled */
  df_stream_verify policy; /* in force */
  uint64_t verified;   /* fetched records checked against the record sums */
  uint64_t refetched;  /* records fetched again after a record-sum mismatch */
} df_fetcher_stats;
void df_fetcher_get_stats(df_fetcher *f, df_fetcher_stats *out);

/* ---- verification (sverify.h) ----
 * The policy in force: `want` (a run/serve override), else the one setup
 * recorded, else record when the install holds record sums (DIR/
 * deltafin-record-sums.json, checked against the model info at open), else
 * arrival (with warn: the loud warning). record without sums is an error.
 * With record sums every fetched record is checked before it is written
 * (whatever the policy); with shard a record of a partial shard is not local
 * until its whole shard is fetched and verified. */
int df_fetcher_set_verify(df_fetcher *f, df_stream_verify want, int warn, df_err *e);
df_stream_verify df_fetcher_verify_policy(const df_fetcher *f);
/* 1 when the record's bytes are proven: its shard verified, or checked
 * against the record sums. */
int df_fetcher_proven(df_fetcher *f, int file, uint64_t off, uint64_t len);

/* Parallel connections (default 8, or DF_FETCH_CONNECTIONS). */
void df_fetcher_set_connections(df_fetcher *f, int n);

#endif

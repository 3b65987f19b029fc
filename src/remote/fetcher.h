/* The stream fetcher: fetches routed-expert records of a stream install by
 * HTTP range requests from their shard offsets, the first time they are
 * needed, into the sparse local shards (setup/stream.h lays them out).
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
 * - Nothing is fetched speculatively unless asked (df_fetcher_set_ahead:
 *   `--fetch-ahead on`): then predicted records are fetched in the
 *   background, below every demand fetch, a few at a time.
 * - Never more than one fetch of a record, across threads (a table of
 *   records in flight) and across processes (byte-range locks on the shard
 *   and a re-read of its journal: reclock.h). */
#ifndef DF_REMOTE_FETCHER_H
#define DF_REMOTE_FETCHER_H

#include <stdint.h>

#include "base/err.h"
#include "format/safetensors.h"
#include "remote/sverify.h"

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

/* Fetch-ahead (default off): on starts the background workers, off stops
 * them (waiting for the requests in flight). */
void df_fetcher_set_ahead(df_fetcher *f, int on);
/* Queues records a predictor expects (never blocks on the network; a
 * no-op while fetch-ahead is off). The queue is bounded: the oldest guesses
 * are dropped. */
void df_fetcher_ahead(df_fetcher *f, const df_fetch_req *r, int n);
/* For reports at the end of a generation: drops the queued guesses (they
 * were for positions that will not come) and waits for the speculative
 * fetches in flight, so that the counters include every one started. */
void df_fetcher_settle(df_fetcher *f);
/* The caller needs these records now (local already, or made local by
 * df_fetcher_fetch): those fetched ahead count as used, once. */
void df_fetcher_demanded(df_fetcher *f, const df_fetch_req *r, int n);

typedef struct df_fetcher_stats {
  uint64_t records, bytes, requests, retries; /* demand fetches */
  uint64_t ahead_records, ahead_bytes, ahead_requests; /* speculative fetches */
  uint64_t ahead_used;    /* records fetched ahead that a caller then needed */
  uint64_t ahead_failed;  /* speculative fetches that failed (never an error) */
  uint64_t ahead_dropped; /* guesses dropped from the full queue */
  /* both kinds of fetches: redirects followed, requests sent straight to a
   * remembered redirect target, remembered targets resolved again */
  uint64_t redirects_followed, redirects_skipped, reresolved;
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

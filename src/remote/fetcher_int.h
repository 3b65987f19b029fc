/* The stream fetcher's internals, shared by its parts: fetcher.c (open,
 * flights, claims, the fetch path), fetcher_verify.c (the --stream-verify
 * policy and whole-shard completion) and fetcher_ahead.c (fetch-ahead).
 * One struct, one mutex (mu) for all of its mutable state. */
#ifndef DF_REMOTE_FETCHER_INT_H
#define DF_REMOTE_FETCHER_INT_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "remote/fetcher.h"
#include "remote/http.h"
#include "remote/hub.h"
#include "remote/ranges.h"
#include "remote/recsums.h"
#include "remote/sverify.h"

#define MAX_RUN_BYTES (64u << 20) /* one coalesced range request at most */
#define AHEAD_CONNS 2     /* speculative requests in flight at most */
#define AHEAD_QUEUE 32    /* predictions waiting; the oldest is dropped beyond */
#define AHEAD_PAUSE_S 2.0 /* no speculation for this long after one failed */

typedef struct fshard {
  int stream;          /* still partial: has a journal */
  int bad;             /* complete but failed its sha256: refuse its records */
  char *path, *url;
  const df_hub_file *hf;
  df_ranges *rj;
  int fd;
  int rs_shard; /* its index in the record sums, -1 = not listed */
} fshard;

typedef struct flight {
  int file;
  uint64_t off, len;
} flight;

struct df_fetcher {
  char *dir, *endpoint;
  char repo[256], commit[41];
  df_hub_info info;
  int n;
  fshard *sh;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  flight *fl;
  int nfl, capfl;
  df_http **pool;
  int npool, nfree;
  df_http_gate *gate;            /* rate limits: shared by every connection, demand and ahead */
  df_http **free_h;
  df_fetcher_stats st;
  char last_err[1024];
  /* fetch-ahead: speculative fetches for the store's predictors */
  int demand_active;             /* demand fetches running: no speculative one starts */
  df_fetch_req aq[AHEAD_QUEUE];  /* queued predictions, oldest first */
  int naq;
  pthread_cond_t acv;            /* wakes the ahead workers */
  struct ahead_thr {
    df_fetcher *f;
    df_http *h;
    pthread_t th;
  } athr[AHEAD_CONNS];
  int nathr, astop;
  int abusy;                     /* workers between taking a guess and finishing it */
  double apause_until;           /* after a failed speculative fetch */
  uint64_t *aset;                /* fetched ahead, not yet demanded: sorted ahead_key()s */
  int naset, capaset;
  df_recsums *sums;             /* the install's record sums, NULL = none */
  int lock_fd;                  /* DF_SETUP_FETCH_LOCK, held shared while open */
  df_stream_verify installed;   /* as setup recorded it (auto when it did not) */
  df_stream_verify policy;      /* in force: never auto */
};

typedef struct run_t {
  int file;
  uint64_t off, len;
  int first, count; /* its records in the sorted todo list */
} run_t;

static inline const char *df_fetcher_base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* A shard's state under mu: 0 = failed verification (or no such shard),
 * 1 = complete and verified, 2 = still partial (stream). */
int df_fetcher_shard_state(df_fetcher *f, int file);
/* 1 when [off, off + len) of file overlaps a fetch in flight (mu held). */
int df_fetcher_overlaps(const df_fetcher *f, int file, uint64_t off, uint64_t len);
/* Ends the flight of exactly [off, off + len) of file (mu held). */
void df_fetcher_flight_remove(df_fetcher *f, int file, uint64_t off, uint64_t len);
/* Starts the flight of q (mu held). */
void df_fetcher_flight_add(df_fetcher *f, const df_fetch_req *q);
/* Verifies a shard whose ranges are all local against the hub's sha256:
 * complete (journal removed), or removed when it fails (an error naming it). */
int df_fetcher_maybe_complete(df_fetcher *f, int file, df_err *e);
/* Fetches todo[0..nt) (sorted), writes, syncs, then journals them. */
int df_fetcher_fetch_journal(df_fetcher *f, const df_fetch_req *todo, int nt, int coalesce, df_err *err);
/* Fetches one run (checked against the record sums when there are any)
 * and writes it at its offset; the records' xxh3 into hash[]. */
int df_fetcher_fetch_run(df_fetcher *f, df_http *h, const run_t *r, const df_fetch_req *todo, uint64_t *hash, df_err *e);
/* Reads the policy setup recorded and the install's record sums. */
int df_fetcher_load_verify(df_fetcher *f, df_err *e);
/* --stream-verify shard: completes and proves the shards of r[] first. */
int df_fetcher_shard_first(df_fetcher *f, const df_fetch_req *r, int n, df_err *e);
/* Drops the queued predictions overlapping q: a demand takes them over (mu held). */
void df_fetcher_ahead_unqueue(df_fetcher *f, const df_fetch_req *q);

#endif

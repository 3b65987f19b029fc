/* The stream fetcher's fetch-ahead: background fetches of predicted records. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "remote/download.h"
#include "remote/reclock.h"
#include "remote/fetcher_int.h"
#include "remote/hub.h"

/* ---- fetch-ahead: speculative fetches for the store's predictors ----
 * A bounded queue of predicted records and AHEAD_CONNS workers with their own
 * connections. A worker starts a request only while no demand fetch runs
 * (a demand fetch then waits behind nothing but the requests already in
 * flight), takes the newest prediction first, and fetches one record per
 * request under the same flights and cross-process locks as demand fetches,
 * never waiting for a lock (a guess is dropped instead). A failure is
 * counted and pauses speculation; it never fails a caller: a demand for that
 * record fetches it itself. */

static uint64_t ahead_key(int file, uint64_t off) { return (uint64_t)file << 44 | off; }

/* Index of key in aset, or where it would go (mu held). */
static int aset_pos(const df_fetcher *f, uint64_t key) {
  int lo = 0, hi = f->naset;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (f->aset[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void aset_add(df_fetcher *f, uint64_t key) {
  int i = aset_pos(f, key);
  if (i < f->naset && f->aset[i] == key) return;
  if (f->naset == f->capaset) {
    f->capaset = f->capaset ? 2 * f->capaset : 64;
    f->aset = df_xrealloc(f->aset, (size_t)f->capaset * sizeof *f->aset);
  }
  memmove(f->aset + i + 1, f->aset + i, (size_t)(f->naset - i) * sizeof *f->aset);
  f->aset[i] = key;
  f->naset++;
}

/* 1 (and removed) when key is in aset (mu held). */
static int aset_take(df_fetcher *f, uint64_t key) {
  int p = aset_pos(f, key);
  if (p >= f->naset || f->aset[p] != key) return 0;
  memmove(f->aset + p, f->aset + p + 1, (size_t)(f->naset - p - 1) * sizeof *f->aset);
  f->naset--;
  return 1;
}

void df_fetcher_ahead_unqueue(df_fetcher *f, const df_fetch_req *q) {
  int k = 0;
  for (int i = 0; i < f->naq; i++)
    if (!(f->aq[i].file == q->file && f->aq[i].off < q->off + q->len && q->off < f->aq[i].off + f->aq[i].len))
      f->aq[k++] = f->aq[i];
  f->naq = k;
}

/* Fetches one claimed record (its flight is ours): 1 fetched, 0 nothing to
 * do (local now, or another process holds it), -1 failed. */
static int ahead_one(df_fetcher *f, df_http *h, const df_fetch_req *q, df_err *e) {
  fshard *s = &f->sh[q->file];
  int st = df_reclock_claim(s->fd, s->rj, q->off, q->len, 0, e);
  if (st != DF_RECLOCK_MINE) return st < 0 ? -1 : 0;
  run_t run = {q->file, q->off, q->len, 0, 1};
  uint64_t hash = 0;
  int rc = df_fetcher_fetch_run(f, h, &run, q, &hash, e);
  if (!rc && fdatasync(s->fd)) rc = df_err_errno(e, "syncing %s", s->path);
  if (!rc) rc = df_ranges_add(s->rj, q->off, q->off + q->len, hash, e);
  df_reclock_release(s->fd, q->off, q->len);
  return rc ? -1 : 1;
}

/* Waits on acv (mu held), until `until` when it is in the future. */
static void ahead_sleep(df_fetcher *f, double until) {
  if (until <= df_now()) {
    pthread_cond_wait(&f->acv, &f->mu);
    return;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  double d = until - df_now();
  ts.tv_sec += (time_t)d;
  ts.tv_nsec += (long)((d - (double)(time_t)d) * 1e9);
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_cond_timedwait(&f->acv, &f->mu, &ts);
}

static void *ahead_worker(void *arg) {
  struct ahead_thr *t = arg;
  df_fetcher *f = t->f;
  uint64_t xxh;
  pthread_mutex_lock(&f->mu);
  while (!f->astop) {
    double pause = f->apause_until;
    if (!f->naq || f->demand_active || df_now() < pause) {
      ahead_sleep(f, df_now() < pause ? pause : 0);
      continue;
    }
    df_fetch_req q = f->aq[--f->naq]; /* the newest guess is the likeliest still useful */
    if (!f->sh[q.file].stream || f->sh[q.file].bad) continue;
    f->abusy++;
    pthread_mutex_unlock(&f->mu);
    int local = df_fetcher_local(f, q.file, q.off, q.len, &xxh);
    pthread_mutex_lock(&f->mu);
    if (local || df_fetcher_overlaps(f, q.file, q.off, q.len) || f->demand_active || f->astop) {
      f->abusy--;
      pthread_cond_broadcast(&f->cv);
      continue;
    }
    df_fetcher_flight_add(f, &q);
    /* among the records fetched ahead from now: the record is local (and a
     * demand may find it so, without waiting) before its flight ends */
    aset_add(f, ahead_key(q.file, q.off));
    pthread_mutex_unlock(&f->mu);
    df_err e;
    int got = ahead_one(f, t->h, &q, &e);
    pthread_mutex_lock(&f->mu);
    df_fetcher_flight_remove(f, q.file, q.off, q.len);
    if (got > 0) {
      f->st.ahead_records++;
      f->st.ahead_bytes += q.len;
    } else {
      aset_take(f, ahead_key(q.file, q.off)); /* not fetched by this guess */
    }
    if (got < 0) {
      f->st.ahead_failed++;
      f->apause_until = df_now() + AHEAD_PAUSE_S;
      f->naq = 0;
      df_log_debug("fetch-ahead of layer %d expert %d failed (a demand fetch will retry): %s",
                   q.layer, q.expert, e.msg);
    }
    pthread_cond_broadcast(&f->cv);
    if (got > 0) {
      /* the shard may be complete now: its sha256 (long) after the flight
       * ended, without the lock */
      pthread_mutex_unlock(&f->mu);
      if (df_fetcher_maybe_complete(f, q.file, &e)) df_log_warn("%s", e.msg);
      pthread_mutex_lock(&f->mu);
    }
    f->abusy--;
    pthread_cond_broadcast(&f->cv);
  }
  pthread_mutex_unlock(&f->mu);
  return NULL;
}

void df_fetcher_set_ahead(df_fetcher *f, int on) {
  if (on && df_hub_offline()) on = 0; /* no request at all, not even a guess */
  if (on && !f->nathr) {
    char *tok = df_hub_token();
    /* a guess is not worth long retries: one, soon, and a shorter stall */
    if (!f->gate) f->gate = df_http_gate_new(0);
    df_http_cfg hc = {.token = tok, .what = f->repo, .retries = 1, .backoff_s = 0.02, .stall_s = 10,
                      .gate = f->gate};
    f->astop = 0;
    for (int i = 0; i < AHEAD_CONNS; i++) {
      f->athr[i] = (struct ahead_thr){.f = f, .h = df_http_new(&hc)};
    }
    pthread_mutex_lock(&f->mu);
    f->nathr = AHEAD_CONNS;
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < AHEAD_CONNS; i++) pthread_create(&f->athr[i].th, NULL, ahead_worker, &f->athr[i]);
    if (tok) {
      memset(tok, 0, strlen(tok));
      free(tok);
    }
  } else if (!on && f->nathr) {
    pthread_mutex_lock(&f->mu);
    f->astop = 1;
    f->naq = 0;
    pthread_cond_broadcast(&f->acv);
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < f->nathr; i++) pthread_join(f->athr[i].th, NULL);
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->nathr; i++) df_http_free(f->athr[i].h);
    f->nathr = 0;
    pthread_mutex_unlock(&f->mu);
  }
}

void df_fetcher_ahead(df_fetcher *f, const df_fetch_req *r, int n) {
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < n && f->nathr; i++) {
    const df_fetch_req *q = &r[i];
    if (q->file < 0 || q->file >= f->n || !f->sh[q->file].stream) continue;
    if (df_fetcher_overlaps(f, q->file, q->off, q->len)) continue;
    int dup = 0;
    for (int k = 0; k < f->naq && !dup; k++)
      dup = f->aq[k].file == q->file && f->aq[k].off == q->off;
    if (dup) continue;
    if (f->naq == AHEAD_QUEUE) {
      memmove(f->aq, f->aq + 1, (AHEAD_QUEUE - 1) * sizeof *f->aq);
      f->naq--;
      f->st.ahead_dropped++;
    }
    f->aq[f->naq++] = *q;
  }
  pthread_cond_signal(&f->acv);
  pthread_mutex_unlock(&f->mu);
}

void df_fetcher_demanded(df_fetcher *f, const df_fetch_req *r, int n) {
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < n && f->naset; i++)
    if (aset_take(f, ahead_key(r[i].file, r[i].off))) f->st.ahead_used++;
  pthread_mutex_unlock(&f->mu);
}

void df_fetcher_settle(df_fetcher *f) {
  pthread_mutex_lock(&f->mu);
  f->naq = 0;
  while (f->abusy) pthread_cond_wait(&f->cv, &f->mu);
  pthread_mutex_unlock(&f->mu);
}

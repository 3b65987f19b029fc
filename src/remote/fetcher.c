#include "remote/fetcher.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/log.h"
#include "base/util.h"
#include "remote/download.h"
#include "remote/http.h"
#include "remote/hub.h"
#include "remote/ranges.h"
#include "remote/reclock.h"
#include "remote/recsums.h"
#include "remote/root.h"
#include "remote/sverify.h"

#include "remote/fetcher_int.h"

static int load_install(df_fetcher *f, df_err *e) {
  char *p = df_path_join(f->dir, DF_SETUP_STATE);
  json_error_t je;
  json_t *o = json_load_file(p, 0, &je);
  if (!o) {
    df_err_set(e, "%s: %s (the stream install's record; run deltafin setup --stream again)", p,
               je.text);
    free(p);
    return -1;
  }
  const char *r = json_string_value(json_object_get(o, "repo"));
  const char *c = json_string_value(json_object_get(o, "commit"));
  const char *ep = json_string_value(json_object_get(o, "endpoint"));
  int rc = 0;
  if (!r || !df_hub_is_commit(c) || !ep)
    rc = df_err_set(e, "%s: needs repo, commit and endpoint; run deltafin setup --stream again", p);
  else {
    snprintf(f->repo, sizeof f->repo, "%s", r);
    snprintf(f->commit, sizeof f->commit, "%s", c);
    /* HF_ENDPOINT, when set, wins: a mirror may serve the same commit. */
    const char *env = getenv("HF_ENDPOINT");
    f->endpoint = df_hub_endpoint(env && *env ? env : ep);
  }
  json_decref(o);
  free(p);
  if (rc) return -1;
  char *ip = df_path_join(f->dir, DF_SETUP_INFO), *buf = NULL;
  size_t len = 0;
  rc = df_file_read(ip, &buf, &len, e);
  if (!rc) rc = df_hub_info_parse(buf, len, ip, &f->info, e);
  free(buf);
  free(ip);
  return rc;
}

/* Shared for as long as the fetcher is open: setup adds record sums only
 * while no fetcher holds it (root.h, DF_SETUP_FETCH_LOCK). */
static int hold_fetch_lock(df_fetcher *f, df_err *e) {
  char *p = df_path_join(f->dir, DF_SETUP_FETCH_LOCK);
  f->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  free(p);
  if (f->lock_fd < 0) return df_err_errno(e, "%s/%s", f->dir, DF_SETUP_FETCH_LOCK);
  if (flock(f->lock_fd, LOCK_SH | LOCK_NB) == 0) return 0;
  return df_err_set(e, "%s: deltafin setup is adding record sums to this stream install; run again "
                       "when it has finished", f->dir);
}

int df_fetcher_open(df_fetcher **out, const char *dir, const df_st_set *set, df_err *e) {
  *out = NULL;
  int any = 0;
  for (int i = 0; i < set->nfiles && !any; i++) {
    char *jp = df_dl_journal_path(set->files[i].path, 1);
    any = df_file_exists(jp);
    free(jp);
  }
  if (!any) return 0;
  df_fetcher *f = df_xcalloc(1, sizeof *f);
  f->lock_fd = -1;
  f->dir = df_xstrdup(dir);
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  pthread_cond_init(&f->acv, NULL);
  if (load_install(f, e) || hold_fetch_lock(f, e)) goto fail;
  f->n = set->nfiles;
  f->sh = df_xcalloc((size_t)f->n, sizeof *f->sh);
  for (int i = 0; i < f->n; i++) {
    fshard *s = &f->sh[i];
    s->fd = -1;
    s->path = df_xstrdup(set->files[i].path);
    char *jp = df_dl_journal_path(s->path, 1);
    if (df_file_exists(jp)) {
      s->hf = df_hub_info_find(&f->info, df_fetcher_base_name(s->path));
      if (!s->hf) {
        df_err_set(e, "%s: not in the model info of %s@%s", s->path, f->repo, f->commit);
        free(jp);
        goto fail;
      }
      if (s->hf->size != set->files[i].size) {
        df_err_set(e, "%s: %llu bytes, the hub says %llu", s->path,
                   (unsigned long long)set->files[i].size, (unsigned long long)s->hf->size);
        free(jp);
        goto fail;
      }
      if (df_ranges_open(&s->rj, jp, e)) {
        free(jp);
        goto fail;
      }
      s->fd = open(s->path, O_RDWR | O_CLOEXEC);
      if (s->fd < 0) {
        df_err_errno(e, "%s", s->path);
        free(jp);
        goto fail;
      }
      s->url = df_hub_file_url(f->endpoint, f->repo, f->commit, s->hf->name);
      s->stream = 1;
      f->st.shards_partial++;
    }
    free(jp);
  }
  if (df_fetcher_load_verify(f, e)) goto fail;
  /* A decode step needs top-k records per layer at once: enough connections
   * to ask for them in one round trip. DF_FETCH_CONNECTIONS overrides. */
  const char *cv = getenv("DF_FETCH_CONNECTIONS");
  int conns = cv && atoi(cv) > 0 ? atoi(cv) : 8;
  df_fetcher_set_connections(f, conns > 64 ? 64 : conns);
  *out = f;
  return 1;
fail:
  df_fetcher_close(f);
  return -1;
}

void df_fetcher_set_connections(df_fetcher *f, int n) {
  if (n < 1) n = 1;
  for (int i = 0; i < f->npool; i++) df_http_free(f->pool[i]);
  free(f->pool);
  free(f->free_h);
  char *tok = df_hub_token();
  /* stall: HF_HUB_DOWNLOAD_TIMEOUT or 30 s; once a connection is told to
   * wait (429/503), none of them sends before that time */
  if (!f->gate) f->gate = df_http_gate_new(0);
  df_http_cfg hc = {.token = tok, .what = f->repo, .retries = 5, .gate = f->gate};
  f->pool = df_xcalloc((size_t)n, sizeof *f->pool);
  f->free_h = df_xcalloc((size_t)n, sizeof *f->free_h);
  for (int i = 0; i < n; i++) f->pool[i] = f->free_h[i] = df_http_new(&hc);
  if (tok) {
    memset(tok, 0, strlen(tok));
    free(tok);
  }
  f->npool = f->nfree = n;
}

void df_fetcher_close(df_fetcher *f) {
  if (!f) return;
  df_fetcher_set_ahead(f, 0);
  free(f->aset);
  pthread_cond_destroy(&f->acv);
  for (int i = 0; i < f->n; i++) {
    df_ranges_close(f->sh[i].rj);
    if (f->sh[i].fd >= 0) close(f->sh[i].fd);
    free(f->sh[i].path);
    free(f->sh[i].url);
  }
  free(f->sh);
  for (int i = 0; i < f->npool; i++) df_http_free(f->pool[i]);
  free(f->pool);
  free(f->free_h);
  df_http_gate_free(f->gate);
  free(f->fl);
  df_recsums_free(f->sums);
  df_hub_info_free(&f->info);
  if (f->lock_fd >= 0) close(f->lock_fd);
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
  free(f->endpoint);
  free(f->dir);
  free(f);
}

/* A shard's state under the lock: 0 = failed verification (or no such
 * shard), 1 = complete and verified, 2 = still partial (stream). */
int df_fetcher_shard_state(df_fetcher *f, int file) {
  if (file < 0 || file >= f->n) return 0;
  const fshard *s = &f->sh[file];
  pthread_mutex_lock(&f->mu);
  int st = s->bad ? 0 : s->stream ? 2 : 1;
  pthread_mutex_unlock(&f->mu);
  return st;
}

int df_fetcher_local(df_fetcher *f, int file, uint64_t off, uint64_t len, uint64_t *xxh) {
  *xxh = 0;
  int state = df_fetcher_shard_state(f, file);
  if (state < 2) return state;
  fshard *s = &f->sh[file];
  if (f->policy == DF_SVERIFY_SHARD) return 0; /* not until its shard is proven */
  if (df_ranges_lookup(s->rj, off, off + len, xxh) == 0) return 1;
  /* Covered by other ranges (chunks of an interrupted `setup --full`):
   * local, checked when the shard completes; with record sums not proven
   * yet, so fetched (and checked) as a record. */
  if (f->sums) return 0;
  return df_ranges_covered(s->rj, off, off + len);
}

void df_fetcher_get_stats(df_fetcher *f, df_fetcher_stats *out) {
  pthread_mutex_lock(&f->mu);
  *out = f->st;
  out->policy = f->policy;
  out->requests = out->retries = 0;
  out->redirects_followed = out->redirects_skipped = out->reresolved = 0;
  for (int i = 0; i < f->npool; i++) {
    df_http_stats hs;
    df_http_get_stats(f->pool[i], &hs);
    out->requests += hs.requests;
    out->retries += hs.retries;
    out->redirects_followed += hs.redirects_followed;
    out->redirects_skipped += hs.redirects_skipped;
    out->reresolved += hs.reresolved;
  }
  out->ahead_requests = 0;
  for (int i = 0; i < f->nathr; i++) {
    df_http_stats hs;
    df_http_get_stats(f->athr[i].h, &hs);
    out->ahead_requests += hs.requests;
    out->redirects_followed += hs.redirects_followed;
    out->redirects_skipped += hs.redirects_skipped;
    out->reresolved += hs.reresolved;
  }
  pthread_mutex_unlock(&f->mu);
}

/* ---- fetching ---- */


typedef struct job_ctx {
  df_fetcher *f;
  const df_fetch_req *todo;
  uint64_t *hash; /* per todo record, filled by the workers */
  run_t *runs;
  int nruns, next;
  pthread_mutex_t mu;
  int failed;
  df_err err;
} job_ctx;

typedef struct membuf {
  uint8_t *p;
  uint64_t base;
} membuf;

static int mem_sink(void *ud, uint64_t off, const void *data, size_t n, df_err *e) {
  (void)e;
  membuf *m = ud;
  memcpy(m->p + (off - m->base), data, n);
  return 0;
}

/* ---- verification: record sums ----
 * With record sums every fetched record is checked against its sha256 before
 * a byte of it is written or journalled (so nothing unproven is ever read). A
 * mismatch is fetched once more (a transient fault on the way), then refused
 * naming the record, its shard, offset and the endpoint. */
static int check_run(df_fetcher *f, const run_t *r, const df_fetch_req *todo, const uint8_t *buf,
                     const df_fetch_req **bad, df_err *e) {
  *bad = NULL;
  const fshard *s = &f->sh[r->file];
  /* no sums, or a chunk of a whole-shard fetch (the shard's sha256 proves it) */
  if (!f->sums || todo[r->first].layer < 0) return 0;
  for (int k = 0; k < r->count; k++) {
    const df_fetch_req *q = &todo[r->first + k];
    const df_recsum *rs = s->rs_shard < 0 ? NULL : df_recsums_lookup(f->sums, s->rs_shard, q->off);
    if (!rs || rs->len != q->len || rs->layer != q->layer || rs->expert != q->expert)
      return df_err_set(e,
                        "layer %d expert %d (%s, offset %llu): the record sums in %s have no entry "
                        "for it; they do not describe this install: add the sums of this commit "
                        "(deltafin setup --stream ... --record-sums FILE)",
                        q->layer, q->expert, df_fetcher_base_name(s->path), (unsigned long long)q->off, f->dir);
    if (df_recsums_verify(rs, buf + (q->off - r->off))) {
      *bad = q;
      return 0;
    }
  }
  return 0;
}

static int fetch_checked(df_fetcher *f, df_http *h, const run_t *r, const df_fetch_req *todo,
                         membuf *m, df_err *e) {
  fshard *s = &f->sh[r->file];
  for (int attempt = 0;; attempt++) {
    if (df_http_get_range(h, s->url, r->off, r->len, (int64_t)s->hf->size, mem_sink, m, e)) return -1;
    const df_fetch_req *bad;
    if (check_run(f, r, todo, m->p, &bad, e)) return -1;
    pthread_mutex_lock(&f->mu);
    if (!bad && f->sums && todo[r->first].layer >= 0) f->st.verified += (uint64_t)r->count;
    if (bad && !attempt) f->st.refetched++;
    pthread_mutex_unlock(&f->mu);
    if (!bad) return 0;
    if (attempt)
      return df_err_set(e,
                        "layer %d expert %d: the bytes served for %s at offset %llu (%llu bytes) by "
                        "%s do not match the record sums' sha256, twice: a damaged mirror, proxy or "
                        "cache; the expert is not used (nothing was written)",
                        bad->layer, bad->expert, df_fetcher_base_name(s->path), (unsigned long long)bad->off,
                        (unsigned long long)bad->len, f->endpoint);
    df_log_warn("layer %d expert %d: the bytes served for %s at offset %llu do not match the record "
                "sums' sha256: fetching them again from %s",
                bad->layer, bad->expert, df_fetcher_base_name(s->path), (unsigned long long)bad->off, f->endpoint);
  }
}

/* Fetches a run and writes it at its offset; the records' hashes go to
 * hash[] (journalled by the caller after one sync per shard). */
int df_fetcher_fetch_run(df_fetcher *f, df_http *h, const run_t *r, const df_fetch_req *todo,
                     uint64_t *hash, df_err *e) {
  fshard *s = &f->sh[r->file];
  membuf m = {df_xmalloc(r->len), r->off};
  int rc = fetch_checked(f, h, r, todo, &m, e);
  if (!rc) {
    uint64_t done = 0;
    while (done < r->len) {
      ssize_t w = pwrite(s->fd, m.p + done, r->len - done, (off_t)(r->off + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        rc = df_err_errno(e, "writing %s", s->path);
        break;
      }
      done += (uint64_t)w;
    }
  }
  for (int k = 0; !rc && k < r->count; k++) {
    const df_fetch_req *q = &todo[r->first + k];
    hash[r->first + k] = XXH3_64bits(m.p + (q->off - r->off), q->len);
  }
  free(m.p);
  return rc;
}

static void *fetch_worker(void *arg) {
  job_ctx *c = arg;
  df_fetcher *f = c->f;
  pthread_mutex_lock(&f->mu);
  /* two callers at once (a demand fetch and a shard completion) may start
   * more workers than the pool has connections: wait for one */
  while (f->nfree == 0) pthread_cond_wait(&f->cv, &f->mu);
  df_http *h = f->free_h[--f->nfree];
  pthread_mutex_unlock(&f->mu);
  for (;;) {
    pthread_mutex_lock(&c->mu);
    int i = c->failed ? c->nruns : c->next++;
    pthread_mutex_unlock(&c->mu);
    if (i >= c->nruns) break;
    df_err e;
    if (df_fetcher_fetch_run(f, h, &c->runs[i], c->todo, c->hash, &e)) {
      pthread_mutex_lock(&c->mu);
      if (!c->failed) c->err = e;
      c->failed = 1;
      pthread_mutex_unlock(&c->mu);
    }
  }
  pthread_mutex_lock(&f->mu);
  f->free_h[f->nfree++] = h;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  return NULL;
}

int df_fetcher_overlaps(const df_fetcher *f, int file, uint64_t off, uint64_t len) {
  for (int i = 0; i < f->nfl; i++)
    if (f->fl[i].file == file && f->fl[i].off < off + len && off < f->fl[i].off + f->fl[i].len)
      return 1;
  return 0;
}

void df_fetcher_flight_remove(df_fetcher *f, int file, uint64_t off, uint64_t len) {
  for (int i = 0; i < f->nfl; i++)
    if (f->fl[i].file == file && f->fl[i].off == off && f->fl[i].len == len) {
      f->fl[i] = f->fl[--f->nfl];
      return;
    }
}

static int cmp_req(const void *a, const void *b) {
  const df_fetch_req *x = a, *y = b;
  if (x->file != y->file) return x->file < y->file ? -1 : 1;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* A shard whose every byte is present: the hub's sha256 proves it (and every
 * record fetched into it); its journal goes, readers stop checking records. */
int df_fetcher_maybe_complete(df_fetcher *f, int file, df_err *e) {
  fshard *s = &f->sh[file];
  pthread_mutex_lock(&f->mu);
  int stream = s->stream;
  pthread_mutex_unlock(&f->mu);
  if (!stream || !df_ranges_covered(s->rj, 0, s->hf->size)) return 0;
  df_err ve;
  if (df_hub_verify_file(s->path, s->hf, &ve)) {
    pthread_mutex_lock(&f->mu);
    s->bad = 1;
    pthread_mutex_unlock(&f->mu);
    /* Nothing corrupt stays behind: the data goes (first: a journal alone
     * is harmless), so no later run can read a record of it. */
    char *jp = df_dl_journal_path(s->path, 1);
    unlink(s->path);
    unlink(jp);
    free(jp);
    return df_err_set(e,
                      "%s: every range of this shard is now local but it fails verification (%s); "
                      "it was removed: run deltafin setup --full (or --stream) to fetch it again",
                      s->path, ve.msg);
  }
  char *jp = df_dl_journal_path(s->path, 1);
  pthread_mutex_lock(&f->mu);
  if (s->stream) { /* a demand and a speculative fetch may both complete it */
    s->stream = 0;
    f->st.shards_partial--;
  }
  pthread_mutex_unlock(&f->mu);
  unlink(jp);
  free(jp);
  df_log_info("%s: complete and verified (sha256)", s->path);
  return 0;
}

/* Fetches todo[0..nt) (sorted by file and offset) over the pool's
 * connections, adjacent records coalesced into one request when asked,
 * writes them at their offsets, then per shard syncs the bytes and only
 * then journals them (a kill in between only loses ranges, never journals
 * bytes that are not on disk). -1 with *err set on the first failure. */
int df_fetcher_fetch_journal(df_fetcher *f, const df_fetch_req *todo, int nt, int coalesce, df_err *err) {
  run_t *runs = df_xmalloc((size_t)(nt ? nt : 1) * sizeof *runs);
  int nr = 0;
  for (int i = 0; i < nt; i++) {
    run_t *last = nr ? &runs[nr - 1] : NULL;
    if (coalesce && last && last->file == todo[i].file && last->off + last->len == todo[i].off &&
        last->len + todo[i].len <= MAX_RUN_BYTES) {
      last->len += todo[i].len;
      last->count++;
    } else {
      runs[nr++] = (run_t){todo[i].file, todo[i].off, todo[i].len, i, 1};
    }
  }
  uint64_t *hash = df_xcalloc((size_t)(nt ? nt : 1), sizeof *hash);
  job_ctx c = {.f = f, .todo = todo, .hash = hash, .runs = runs, .nruns = nr};
  pthread_mutex_init(&c.mu, NULL);
  int nw = nr < f->npool ? nr : f->npool;
  pthread_t th[64];
  if (nw > 64) nw = 64;
  for (int i = 0; i < nw; i++) pthread_create(&th[i], NULL, fetch_worker, &c);
  for (int i = 0; i < nw; i++) pthread_join(th[i], NULL);
  pthread_mutex_destroy(&c.mu);
  if (!c.failed) {
    df_range *v = df_xmalloc((size_t)(nt ? nt : 1) * sizeof *v);
    for (int i = 0; i < nt && !c.failed;) {
      int j = i, file = todo[i].file;
      fshard *sh = &f->sh[file];
      while (j < nt && todo[j].file == file) {
        v[j - i] = (df_range){todo[j].off, todo[j].off + todo[j].len, hash[j]};
        j++;
      }
      if (fdatasync(sh->fd)) {
        df_err_errno(&c.err, "syncing %s", sh->path);
        c.failed = 1;
      } else if (df_ranges_add_many(sh->rj, v, j - i, &c.err)) {
        c.failed = 1;
      }
      i = j;
    }
    free(v);
  }
  free(hash);
  free(runs);
  if (c.failed) *err = c.err;
  return c.failed ? -1 : 0;
}

void df_fetcher_flight_add(df_fetcher *f, const df_fetch_req *q) {
  if (f->nfl == f->capfl) {
    f->capfl = f->capfl ? 2 * f->capfl : 64;
    f->fl = df_xrealloc(f->fl, (size_t)f->capfl * sizeof *f->fl);
  }
  f->fl[f->nfl++] = (flight){q->file, q->off, q->len};
}

/* Ends flights of this process without fetching them (done elsewhere). */
static void flights_drop(df_fetcher *f, const df_fetch_req *q, int n) {
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < n; i++) df_fetcher_flight_remove(f, q[i].file, q[i].off, q[i].len);
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

/* This caller's share of r[]: the records neither local nor in flight go to
 * todo (each now a flight of this caller); *waits counts those another
 * caller of this process is fetching. -1 for a shard that failed. */
static int claim_flights(df_fetcher *f, const df_fetch_req *r, int n, df_fetch_req *todo, int *nt,
                         int *waits, df_err *e) {
  uint64_t xxh;
  *nt = *waits = 0;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < n; i++) {
    const df_fetch_req *q = &r[i];
    if (q->file < 0 || q->file >= f->n) continue;
    if (f->sh[q->file].bad) {
      pthread_mutex_unlock(&f->mu);
      flights_drop(f, todo, *nt);
      return df_err_set(e, "layer %d expert %d: shard %s failed verification; run deltafin setup "
                        "--full to fetch it again",
                        q->layer, q->expert, f->sh[q->file].path);
    }
    if (!f->sh[q->file].stream) continue;
    pthread_mutex_unlock(&f->mu);
    int local = df_fetcher_local(f, q->file, q->off, q->len, &xxh);
    pthread_mutex_lock(&f->mu);
    if (local) continue;
    if (df_fetcher_overlaps(f, q->file, q->off, q->len)) {
      (*waits)++;
      continue;
    }
    int dup = 0;
    for (int k = 0; k < *nt && !dup; k++)
      dup = todo[k].file == q->file && todo[k].off == q->off && todo[k].len == q->len;
    if (dup) continue;
    df_fetcher_ahead_unqueue(f, q); /* a demand fetch takes a queued prediction over */
    df_fetcher_flight_add(f, q);
    todo[(*nt)++] = *q;
  }
  pthread_mutex_unlock(&f->mu);
  return 0;
}

/* Other processes on this install: every record of todo (sorted) is locked
 * without waiting; one another process journalled meanwhile is dropped,
 * one another process holds now moves to later[] (claimed one at a time,
 * waiting, once this caller holds no lock), the rest stay in todo, locked. */
static int lock_claimed(df_fetcher *f, df_fetch_req *todo, int *nt, df_fetch_req *later, int *nl,
                        df_err *e) {
  int k = 0, rc = 0;
  *nl = 0;
  for (int i = 0; i < *nt; i++) {
    fshard *s = &f->sh[todo[i].file];
    int st = rc ? -1 : df_reclock_claim(s->fd, s->rj, todo[i].off, todo[i].len, 0, e);
    if (st == DF_RECLOCK_MINE) todo[k++] = todo[i];
    else if (st == DF_RECLOCK_BUSY) later[(*nl)++] = todo[i];
    else {
      if (st < 0) rc = -1;
      flights_drop(f, &todo[i], 1);
    }
  }
  *nt = k;
  if (rc) {
    for (int i = 0; i < k; i++) df_reclock_release(f->sh[todo[i].file].fd, todo[i].off, todo[i].len);
    flights_drop(f, todo, k);
    flights_drop(f, later, *nl);
    *nt = *nl = 0;
  }
  return rc;
}

/* Fetches todo[0..nt) (sorted; flights and locks of this caller), writes,
 * syncs and journals them, then releases the locks and the flights. */
static int fetch_locked(df_fetcher *f, const df_fetch_req *todo, int nt, df_err *e) {
  df_err err = {0};
  int failed = df_fetcher_fetch_journal(f, todo, nt, 1, &err) != 0;
  /* journalled (or failed): other processes may take the records now */
  for (int i = 0; i < nt; i++) df_reclock_release(f->sh[todo[i].file].fd, todo[i].off, todo[i].len);
  uint64_t bytes = 0;
  for (int i = 0; i < nt; i++) bytes += todo[i].len;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < nt; i++) df_fetcher_flight_remove(f, todo[i].file, todo[i].off, todo[i].len);
  if (!failed) {
    f->st.records += (uint64_t)nt;
    f->st.bytes += bytes;
  } else {
    snprintf(f->last_err, sizeof f->last_err, "%s", err.msg);
  }
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  if (!failed) return 0;
  *e = err;
  char more[48] = "";
  if (nt > 1) snprintf(more, sizeof more, " (and %d more)", nt - 1);
  df_err_prefix(e, "layer %d expert %d%s could not be fetched from %s: ", todo[0].layer,
                todo[0].expert, more, f->endpoint);
  return -1;
}

/* The records of r[] that another caller of this process is fetching. */
static void wait_flights(df_fetcher *f, const df_fetch_req *r, int n) {
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < n; i++)
    while (r[i].file >= 0 && r[i].file < f->n && df_fetcher_overlaps(f, r[i].file, r[i].off, r[i].len))
      pthread_cond_wait(&f->cv, &f->mu);
  pthread_mutex_unlock(&f->mu);
}

/* One round: claim, lock, fetch, wait for the others' records. */
static int fetch_round(df_fetcher *f, const df_fetch_req *r, int n, df_fetch_req *todo,
                       df_fetch_req *later, df_err *e) {
  int nt, nl, waits;
  if (claim_flights(f, r, n, todo, &nt, &waits, e)) return -1;
  qsort(todo, (size_t)nt, sizeof *todo, cmp_req);
  int rc = lock_claimed(f, todo, &nt, later, &nl, e);
  if (!rc && nt) rc = fetch_locked(f, todo, nt, e);
  for (int i = 0; i < nl; i++) {
    /* held by another process: wait for it holding no lock of our own */
    fshard *s = &f->sh[later[i].file];
    int st = rc ? -1 : df_reclock_claim(s->fd, s->rj, later[i].off, later[i].len, 1, e);
    if (st == DF_RECLOCK_MINE) rc = fetch_locked(f, &later[i], 1, e);
    else {
      if (st < 0) rc = -1;
      flights_drop(f, &later[i], 1);
    }
  }
  if (!rc && waits) wait_flights(f, r, n);
  for (int i = 0; i < n && !rc; i++)
    if (r[i].file >= 0 && r[i].file < f->n && (i == 0 || r[i].file != r[i - 1].file))
      rc = df_fetcher_maybe_complete(f, r[i].file, e);
  return rc;
}

/* HF_HUB_OFFLINE: what is local is served, the first record that is not
 * fails the fetch, named, and no request is sent. */
static int offline_refuse(df_fetcher *f, const df_fetch_req *r, int n, df_err *e) {
  uint64_t xxh;
  for (int i = 0; i < n; i++) {
    if (r[i].file < 0 || r[i].file >= f->n || df_fetcher_local(f, r[i].file, r[i].off, r[i].len, &xxh))
      continue;
    return df_err_set(e,
                      "offline (HF_HUB_OFFLINE is set): layer %d expert %d is not local (shard %s, "
                      "bytes %llu-%llu) and nothing may be fetched; unset HF_HUB_OFFLINE, or fetch "
                      "it ahead with deltafin warm or setup --full",
                      r[i].layer, r[i].expert, df_fetcher_base_name(f->sh[r[i].file].path),
                      (unsigned long long)r[i].off, (unsigned long long)(r[i].off + r[i].len - 1));
  }
  return 0;
}

int df_fetcher_fetch(df_fetcher *f, const df_fetch_req *r, int n, df_err *e) {
  if (df_hub_offline()) return offline_refuse(f, r, n, e);
  if (f->policy == DF_SVERIFY_SHARD && df_fetcher_shard_first(f, r, n, e)) return -1;
  double t0 = df_now();
  df_fetch_req *todo = df_xmalloc((size_t)(n ? n : 1) * sizeof *todo);
  df_fetch_req *later = df_xmalloc((size_t)(n ? n : 1) * sizeof *later);
  pthread_mutex_lock(&f->mu);
  f->demand_active++; /* speculative fetches start nothing new meanwhile */
  pthread_mutex_unlock(&f->mu);
  int rc = 0;
  uint64_t xxh;
  /* A record waited for may still be missing after its round: the other
   * fetch failed (a speculative one, or another caller's): fetch it then. */
  for (int round = 0; !rc; round++) {
    rc = fetch_round(f, r, n, todo, later, e);
    int miss = -1;
    for (int i = 0; i < n && !rc && miss < 0; i++)
      if (r[i].file >= 0 && r[i].file < f->n && !df_fetcher_local(f, r[i].file, r[i].off, r[i].len, &xxh))
        miss = i;
    if (rc || miss < 0) break;
    if (round == 3) {
      pthread_mutex_lock(&f->mu);
      rc = df_err_set(e, "layer %d expert %d could not be fetched: %s", r[miss].layer,
                      r[miss].expert, f->last_err[0] ? f->last_err : "still missing after 4 tries");
      pthread_mutex_unlock(&f->mu);
    }
  }
  free(todo);
  free(later);
  pthread_mutex_lock(&f->mu);
  f->demand_active--;
  pthread_cond_broadcast(&f->acv);
  f->st.wait_s += df_now() - t0;
  pthread_mutex_unlock(&f->mu);
  return rc;
}


#include "setup/fetcher.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/log.h"
#include "base/util.h"
#include "setup/download.h"
#include "setup/http.h"
#include "setup/hub.h"
#include "setup/install.h"
#include "setup/ranges.h"

#define MAX_RUN_BYTES (64u << 20) /* one coalesced range request at most */

typedef struct fshard {
  int stream;          /* still partial: has a journal */
  int bad;             /* complete but failed its sha256: refuse its records */
  char *path, *url;
  const df_hub_file *hf;
  df_ranges *rj;
  int fd;
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
  df_http **free_h;
  df_fetcher_stats st;
  char last_err[1024];
};

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

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
  f->dir = df_xstrdup(dir);
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  if (load_install(f, e)) goto fail;
  f->n = set->nfiles;
  f->sh = df_xcalloc((size_t)f->n, sizeof *f->sh);
  for (int i = 0; i < f->n; i++) {
    fshard *s = &f->sh[i];
    s->fd = -1;
    s->path = df_xstrdup(set->files[i].path);
    char *jp = df_dl_journal_path(s->path, 1);
    if (df_file_exists(jp)) {
      s->hf = df_hub_info_find(&f->info, base_name(s->path));
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
  char *tok = df_setup_token();
  df_http_cfg hc = {.token = tok, .what = f->repo, .retries = 5, .stall_s = 30};
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
  free(f->fl);
  df_hub_info_free(&f->info);
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
  free(f->endpoint);
  free(f->dir);
  free(f);
}

int df_fetcher_local(df_fetcher *f, int file, uint64_t off, uint64_t len, uint64_t *xxh) {
  *xxh = 0;
  if (file < 0 || file >= f->n) return 0;
  fshard *s = &f->sh[file];
  pthread_mutex_lock(&f->mu);
  int stream = s->stream, bad = s->bad;
  pthread_mutex_unlock(&f->mu);
  if (bad) return 0;
  if (!stream) return 1;
  if (df_ranges_lookup(s->rj, off, off + len, xxh) == 0) return 1;
  /* Covered by other ranges (chunks of an interrupted `setup --full`):
   * local, checked when the shard completes. */
  return df_ranges_covered(s->rj, off, off + len);
}

void df_fetcher_get_stats(df_fetcher *f, df_fetcher_stats *out) {
  pthread_mutex_lock(&f->mu);
  *out = f->st;
  out->requests = out->retries = 0;
  for (int i = 0; i < f->npool; i++) {
    df_http_stats hs;
    df_http_get_stats(f->pool[i], &hs);
    out->requests += hs.requests;
    out->retries += hs.retries;
  }
  pthread_mutex_unlock(&f->mu);
}

/* ---- fetching ---- */

typedef struct run_t {
  int file;
  uint64_t off, len;
  int first, count; /* its records in the sorted todo list */
} run_t;

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

/* Fetches a run and writes it at its offset; the records' hashes go to
 * hash[] (journalled by the caller after one sync per shard). */
static int fetch_run(df_fetcher *f, df_http *h, const run_t *r, const df_fetch_req *todo,
                     uint64_t *hash, df_err *e) {
  fshard *s = &f->sh[r->file];
  membuf m = {df_xmalloc(r->len), r->off};
  int rc = df_http_get_range(h, s->url, r->off, r->len, (int64_t)s->hf->size, mem_sink, &m, e);
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
  df_http *h = f->free_h[--f->nfree];
  pthread_mutex_unlock(&f->mu);
  for (;;) {
    pthread_mutex_lock(&c->mu);
    int i = c->failed ? c->nruns : c->next++;
    pthread_mutex_unlock(&c->mu);
    if (i >= c->nruns) break;
    df_err e;
    if (fetch_run(f, h, &c->runs[i], c->todo, c->hash, &e)) {
      pthread_mutex_lock(&c->mu);
      if (!c->failed) c->err = e;
      c->failed = 1;
      pthread_mutex_unlock(&c->mu);
    }
  }
  pthread_mutex_lock(&f->mu);
  f->free_h[f->nfree++] = h;
  pthread_mutex_unlock(&f->mu);
  return NULL;
}

static int overlaps_flight(const df_fetcher *f, int file, uint64_t off, uint64_t len) {
  for (int i = 0; i < f->nfl; i++)
    if (f->fl[i].file == file && f->fl[i].off < off + len && off < f->fl[i].off + f->fl[i].len)
      return 1;
  return 0;
}

static void flight_remove(df_fetcher *f, int file, uint64_t off, uint64_t len) {
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
static int maybe_complete(df_fetcher *f, int file, df_err *e) {
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
  s->stream = 0;
  f->st.shards_partial--;
  pthread_mutex_unlock(&f->mu);
  unlink(jp);
  free(jp);
  df_log_info("%s: complete and verified (sha256)", s->path);
  return 0;
}

int df_fetcher_fetch(df_fetcher *f, const df_fetch_req *r, int n, df_err *e) {
  double t0 = df_now();
  df_fetch_req *todo = df_xmalloc((size_t)(n ? n : 1) * sizeof *todo);
  int nt = 0, waits = 0, rc = 0;
  uint64_t xxh;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < n; i++) {
    const df_fetch_req *q = &r[i];
    if (q->file < 0 || q->file >= f->n) continue;
    if (f->sh[q->file].bad) {
      pthread_mutex_unlock(&f->mu);
      free(todo);
      return df_err_set(e, "layer %d expert %d: shard %s failed verification; run deltafin setup "
                        "--full to fetch it again",
                        q->layer, q->expert, f->sh[q->file].path);
    }
    if (!f->sh[q->file].stream) continue;
    pthread_mutex_unlock(&f->mu);
    int local = df_fetcher_local(f, q->file, q->off, q->len, &xxh);
    pthread_mutex_lock(&f->mu);
    if (local) continue;
    if (overlaps_flight(f, q->file, q->off, q->len)) {
      waits++;
      continue;
    }
    int dup = 0;
    for (int k = 0; k < nt && !dup; k++)
      dup = todo[k].file == q->file && todo[k].off == q->off && todo[k].len == q->len;
    if (dup) continue;
    if (f->nfl == f->capfl) {
      f->capfl = f->capfl ? 2 * f->capfl : 64;
      f->fl = df_xrealloc(f->fl, (size_t)f->capfl * sizeof *f->fl);
    }
    f->fl[f->nfl++] = (flight){q->file, q->off, q->len};
    todo[nt++] = *q;
  }
  pthread_mutex_unlock(&f->mu);
  if (nt) {
    qsort(todo, (size_t)nt, sizeof *todo, cmp_req);
    run_t *runs = df_xmalloc((size_t)nt * sizeof *runs);
    int nr = 0;
    for (int i = 0; i < nt; i++) {
      run_t *last = nr ? &runs[nr - 1] : NULL;
      if (last && last->file == todo[i].file && last->off + last->len == todo[i].off &&
          last->len + todo[i].len <= MAX_RUN_BYTES) {
        last->len += todo[i].len;
        last->count++;
      } else {
        runs[nr++] = (run_t){todo[i].file, todo[i].off, todo[i].len, i, 1};
      }
    }
    uint64_t *hash = df_xcalloc((size_t)nt, sizeof *hash);
    job_ctx c = {.f = f, .todo = todo, .hash = hash, .runs = runs, .nruns = nr};
    pthread_mutex_init(&c.mu, NULL);
    int nw = nr < f->npool ? nr : f->npool;
    pthread_t th[64];
    if (nw > 64) nw = 64;
    for (int i = 0; i < nw; i++) pthread_create(&th[i], NULL, fetch_worker, &c);
    for (int i = 0; i < nw; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&c.mu);
    /* Durability order: every fetched byte of a shard is synced, then its
     * records are journalled (one write, one sync): a kill in between only
     * loses records, never journals bytes that are not on disk. */
    if (!c.failed) {
      df_range *v = df_xmalloc((size_t)nt * sizeof *v);
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
    uint64_t bytes = 0;
    for (int i = 0; i < nt; i++) bytes += todo[i].len;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < nt; i++) flight_remove(f, todo[i].file, todo[i].off, todo[i].len);
    if (!c.failed) {
      f->st.records += (uint64_t)nt;
      f->st.bytes += bytes;
    } else {
      snprintf(f->last_err, sizeof f->last_err, "%s", c.err.msg);
    }
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    free(runs);
    if (c.failed) {
      *e = c.err;
      char more[48] = "";
      if (nt > 1) snprintf(more, sizeof more, " (and %d more)", nt - 1);
      df_err_prefix(e, "layer %d expert %d%s could not be fetched from %s: ", todo[0].layer,
                    todo[0].expert, more, f->endpoint);
      rc = -1;
    }
  }
  if (!rc && waits) {
    /* Records another caller is fetching: wait for it, then check. */
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < n; i++)
      while (r[i].file >= 0 && r[i].file < f->n && overlaps_flight(f, r[i].file, r[i].off, r[i].len))
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < n && !rc; i++)
      if (!df_fetcher_local(f, r[i].file, r[i].off, r[i].len, &xxh))
        rc = df_err_set(e, "layer %d expert %d could not be fetched: %s", r[i].layer, r[i].expert,
                        f->last_err);
  }
  if (!rc)
    for (int i = 0; i < nt && !rc; i++)
      if (i == 0 || todo[i].file != todo[i - 1].file) rc = maybe_complete(f, todo[i].file, e);
  free(todo);
  pthread_mutex_lock(&f->mu);
  f->st.wait_s += df_now() - t0;
  pthread_mutex_unlock(&f->mu);
  return rc;
}

#include "remote/download.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/log.h"
#include "base/util.h"

char *df_dl_journal_path(const char *dest, int in_place) {
  size_t n = strlen(dest) + 16;
  char *p = df_xmalloc(n);
  snprintf(p, n, "%s%s", dest, in_place ? ".ranges" : ".part.ranges");
  return p;
}

static char *data_path(const df_dl_item *it) {
  if (it->in_place) return df_xstrdup(it->dest);
  size_t n = strlen(it->dest) + 8;
  char *p = df_xmalloc(n);
  snprintf(p, n, "%s.part", it->dest);
  return p;
}

typedef struct fstate {
  const df_dl_item *it;
  char *data, *jpath;
  int fd;
  df_ranges *rj;
  int pending;
  int norange;  /* its server ignores Range: fetched as one stream once its chunks are done */
  int streamed; /* a worker took its stream */
  int done;     /* verified and at its final name */
} fstate;

typedef struct job {
  int file;
  uint64_t b, e;
} job;

typedef struct run {
  const df_dl_opts *o;
  df_http_cfg hc;  /* o->http with the run's rate-limit gate */
  fstate *fs;
  int nfs;
  job *jobs;
  int njobs, next;
  pthread_mutex_t mu;
  int stop;
  df_err err;
  _Atomic uint64_t bytes;
  _Atomic int running;
  int completed;
  df_http_stats hs;
} run;

static void fail(run *r, const df_err *e) {
  pthread_mutex_lock(&r->mu);
  if (!r->stop) r->err = *e;
  r->stop = 1;
  pthread_mutex_unlock(&r->mu);
}

static int fsync_dir_of(const char *path) {
  char *d = df_xstrdup(path);
  int fd = open(dirname(d), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  free(d);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* The file is fully present: verify, rename, drop the journal. */
static int finalize(run *r, fstate *f, df_err *e) {
  const df_dl_item *it = f->it;
  if (fdatasync(f->fd)) return df_err_errno(e, "syncing %s", f->data);
  if (df_hub_verify_file(f->data, it->file, e)) {
    /* The bytes are wrong although every range arrived as asked: the source
     * serves something else than what the hub records. Keep nothing. */
    unlink(f->data);
    unlink(f->jpath);
    return df_err_prefix(e,
                         "%s: downloaded file failed verification and was removed (a corrupt "
                         "mirror, proxy or disk?); run setup again to fetch it anew: ",
                         it->file->name);
  }
  if (!it->in_place && rename(f->data, it->dest))
    return df_err_errno(e, "renaming %s to %s", f->data, it->dest);
  fsync_dir_of(it->dest);
  /* The journal goes last: a kill before this leaves a complete, verified
   * file with a stale journal, which the next run verifies and removes. */
  if (unlink(f->jpath) && errno != ENOENT) return df_err_errno(e, "removing %s", f->jpath);
  pthread_mutex_lock(&r->mu);
  r->completed++;
  f->done = 1;
  pthread_mutex_unlock(&r->mu);
  char z[24];
  df_log_info("%s: %s downloaded and verified", it->file->name, df_dl_fmt_size(it->file->size, z));
  return 0;
}

typedef struct sinkctx {
  run *r;
  int fd;
  const char *path;
  XXH3_state_t *h;
  /* a stream (stream_fetch): journalled every `every` bytes, so a kill or a
   * failure loses at most that much */
  df_ranges *rj;
  uint64_t every, jb, at;
} sinkctx;

static int stream_flush(sinkctx *s, df_err *e) {
  if (s->at == s->jb) return 0;
  if (fdatasync(s->fd)) return df_err_errno(e, "syncing %s", s->path);
  if (df_ranges_add(s->rj, s->jb, s->at, XXH3_64bits_digest(s->h), e)) return -1;
  XXH3_64bits_reset(s->h);
  s->jb = s->at;
  return 0;
}

static int sink_write(void *ud, uint64_t off, const void *data, size_t n, df_err *e) {
  sinkctx *s = ud;
  const char *p = data;
  size_t left = n;
  while (left) {
    ssize_t w = pwrite(s->fd, p, left, (off_t)off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return df_err_errno(e, "writing %s", s->path);
    }
    p += w;
    off += (uint64_t)w;
    left -= (size_t)w;
  }
  XXH3_64bits_update(s->h, data, n);
  atomic_fetch_add(&s->r->bytes, n);
  if (s->rj) {
    s->at = off;
    if (s->at - s->jb >= s->every) return stream_flush(s, e);
  }
  return 0;
}

static void first_gap(void *ud, uint64_t b, uint64_t e) {
  (void)e;
  uint64_t *g = ud;
  if (*g == UINT64_MAX) *g = b;
}

/* A file whose server ignores Range: everything from its first gap to its
 * end as one stream over one connection (the server sends the whole file;
 * the bytes before the gap are skipped), journalled as it arrives. */
static int stream_fetch(run *r, df_http *h, fstate *f, df_err *e) {
  uint64_t size = f->it->file->size, b = UINT64_MAX;
  df_ranges_gaps(f->rj, 0, size, first_gap, &b);
  if (b == UINT64_MAX) return f->done ? 0 : finalize(r, f, e);
  XXH3_state_t *xs = XXH3_createState();
  XXH3_64bits_reset(xs);
  sinkctx sc = {r, f->fd, f->data, xs, f->rj, r->o->chunk ? r->o->chunk : 16u << 20, b, b};
  int rc = df_http_get_range_ex(h, f->it->url, b, size - b, (int64_t)size, 1, sink_write, &sc, e);
  df_err fe;
  if (stream_flush(&sc, rc ? &fe : e) && !rc) rc = -1;
  if (rc) df_err_prefix(e, "%s: ", f->it->file->name);
  XXH3_freeState(xs);
  if (!rc && df_ranges_covered(f->rj, 0, size)) rc = finalize(r, f, e);
  return rc;
}

static void *worker(void *arg) {
  run *r = arg;
  df_http *h = df_http_new(&r->hc);
  XXH3_state_t *xs = XXH3_createState();
  df_err e;
  for (;;) {
    pthread_mutex_lock(&r->mu);
    if (r->stop) {
      pthread_mutex_unlock(&r->mu);
      break;
    }
    if (r->next >= r->njobs) {
      /* the chunks are done: a file whose server ignores Range is fetched
       * as one stream once none of its chunks is in flight */
      int pick = -1, busy = 0;
      for (int i = 0; i < r->nfs && pick < 0; i++)
        if (r->fs[i].norange && !r->fs[i].streamed) {
          if (r->fs[i].pending) busy = 1;
          else r->fs[pick = i].streamed = 1;
        }
      pthread_mutex_unlock(&r->mu);
      if (pick >= 0) {
        if (stream_fetch(r, h, &r->fs[pick], &e)) {
          fail(r, &e);
          break;
        }
        continue;
      }
      if (!busy) break;
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, NULL);
      continue;
    }
    job j = r->jobs[r->next++];
    fstate *f = &r->fs[j.file];
    if (f->norange) { /* left to its stream */
      f->pending--;
      pthread_mutex_unlock(&r->mu);
      continue;
    }
    pthread_mutex_unlock(&r->mu);
    XXH3_64bits_reset(xs);
    sinkctx sc = {r, f->fd, f->data, xs, NULL, 0, 0, 0};
    int gr = df_http_get_range(h, f->it->url, j.b, j.e - j.b, (int64_t)f->it->file->size,
                               sink_write, &sc, &e);
    if (gr == DF_HTTP_NORANGE && f->it->want) {
      /* only parts of this file are wanted (a stream install): a server that
       * sends whole files cannot serve them */
      df_err_prefix(&e, "%s: a stream install needs a server that honours Range (setup --full "
                        "downloads whole files from this one): ",
                    f->it->file->name);
      fail(r, &e);
      break;
    }
    if (gr == DF_HTTP_NORANGE) {
      pthread_mutex_lock(&r->mu);
      int first = !f->norange;
      f->norange = 1;
      f->pending--;
      pthread_mutex_unlock(&r->mu);
      if (first) {
        char host[200];
        const char *u = strstr(f->it->url, "://");
        u = u ? u + 3 : f->it->url;
        snprintf(host, sizeof host, "%.*s", (int)strcspn(u, "/?#"), u);
        df_log_warn("%s ignores Range requests (%s): fetching %s as one stream from it, over one "
                    "connection",
                    host, e.msg, f->it->file->name);
      }
      continue;
    }
    if (gr) {
      df_err_prefix(&e, "%s: ", f->it->file->name);
      fail(r, &e);
      break;
    }
    if (fdatasync(f->fd)) {
      df_err_errno(&e, "syncing %s", f->data);
      fail(r, &e);
      break;
    }
    if (df_ranges_add(f->rj, j.b, j.e, XXH3_64bits_digest(xs), &e)) {
      fail(r, &e);
      break;
    }
    pthread_mutex_lock(&r->mu);
    int last = --f->pending == 0;
    pthread_mutex_unlock(&r->mu);
    if (last && df_ranges_covered(f->rj, 0, f->it->file->size) && finalize(r, f, &e)) {
      fail(r, &e);
      break;
    }
  }
  df_http_stats hs;
  df_http_get_stats(h, &hs);
  pthread_mutex_lock(&r->mu);
  r->hs.requests += hs.requests;
  r->hs.retries += hs.retries;
  r->hs.bytes += hs.bytes;
  pthread_mutex_unlock(&r->mu);
  XXH3_freeState(xs);
  df_http_free(h);
  atomic_fetch_sub(&r->running, 1);
  return NULL;
}

static void gaps(df_ranges *rj, uint64_t b, uint64_t e, void (*fn)(void *, uint64_t, uint64_t),
                 void *ud) {
  df_ranges_gaps(rj, b, e, fn, ud);
}

typedef struct addctx {
  run *r;
  int file;
  uint64_t chunk;
  uint64_t total;
} addctx;

static void add_gap(void *ud, uint64_t b, uint64_t e) {
  addctx *a = ud;
  run *r = a->r;
  for (uint64_t x = b; x < e; x += a->chunk) {
    uint64_t y = x + a->chunk < e ? x + a->chunk : e;
    r->jobs = df_xrealloc(r->jobs, (size_t)(r->njobs + 1) * sizeof *r->jobs);
    r->jobs[r->njobs++] = (job){a->file, x, y};
    r->fs[a->file].pending++;
    a->total += y - x;
  }
}

static void count_gap(void *ud, uint64_t b, uint64_t e) { *(uint64_t *)ud += e - b; }

int df_dl_missing(const df_dl_item *it, uint64_t *missing, df_err *e) {
  *missing = 0;
  char *d = data_path(it), *jp = df_dl_journal_path(it->dest, it->in_place);
  struct stat st;
  int have_data = stat(d, &st) == 0, have_j = stat(jp, &st) == 0;
  int rc = 0;
  if (!have_data || !have_j) {
    if (it->want)
      for (int i = 0; i < it->nwant; i++) *missing += it->want[i].end - it->want[i].begin;
    else *missing = it->file->size;
  } else {
    df_ranges *rj;
    if (df_ranges_open(&rj, jp, e)) rc = -1;
    else {
      if (it->want)
        for (int i = 0; i < it->nwant; i++) gaps(rj, it->want[i].begin, it->want[i].end, count_gap, missing);
      else gaps(rj, 0, it->file->size, count_gap, missing);
      df_ranges_close(rj);
    }
  }
  free(d);
  free(jp);
  return rc;
}

/* A stream shard's journalled ranges are checked against their bytes before
 * the gaps are filled: a range damaged on the local disk is dropped from the
 * journal (rewritten atomically) and so fetched again, instead of failing
 * the shard's sha256 at the end. */
static int scrub_journal(const char *data, const char *jpath, df_err *e) {
  char *buf;
  size_t len;
  if (df_file_read(jpath, &buf, &len, e)) return -1;
  df_range *v;
  int n;
  size_t good;
  int rc = df_ranges_parse(buf, len, jpath, &v, &n, &good, e);
  free(buf);
  if (rc) return -1;
  int fd = open(data, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    free(v);
    return df_err_errno(e, "%s", data);
  }
  int bad = 0, k = 0;
  uint8_t *tmp = NULL;
  size_t cap = 0;
  for (int i = 0; i < n; i++) {
    uint64_t l = v[i].end - v[i].begin;
    if (l > cap) tmp = df_xrealloc(tmp, cap = (size_t)l);
    ssize_t got = pread(fd, tmp, (size_t)l, (off_t)v[i].begin);
    if (got == (ssize_t)l && XXH3_64bits(tmp, (size_t)l) == v[i].hash) v[k++] = v[i];
    else bad++;
  }
  free(tmp);
  close(fd);
  if (bad) {
    df_log_warn("%s: %d range%s damaged on the local disk: fetching %s again", data, bad,
                bad == 1 ? "" : "s", bad == 1 ? "it" : "them");
    size_t cap2 = (size_t)k * 80 + 1, off = 0;
    char *out = df_xmalloc(cap2);
    for (int i = 0; i < k; i++) off += (size_t)df_ranges_format(out + off, &v[i]);
    rc = df_file_write_atomic(jpath, out, off, e);
    free(out);
  }
  free(v);
  return rc;
}

static int open_file(run *r, int i, const df_dl_item *it, df_err *e) {
  fstate *f = &r->fs[i];
  f->it = it;
  f->data = data_path(it);
  f->jpath = df_dl_journal_path(it->dest, it->in_place);
  struct stat st;
  /* The invariants a kill at any point must keep: partial data never
   * exists without its journal (a shard at its final name without a journal
   * is complete and verified, and readers trust it), so the journal is
   * created before the data and removed after it; a journal whose data is
   * gone or of the wrong size describes nothing: start that file over. */
  int have_data = stat(f->data, &st) == 0;
  if (have_data && (uint64_t)st.st_size != it->file->size) {
    unlink(f->data); /* data first: a journal alone is harmless, data alone is not */
    have_data = 0;
  }
  if (!have_data) unlink(f->jpath);
  else if (stat(f->jpath, &st) && !it->in_place) {
    unlink(f->data); /* a .part without its journal may hold anything */
    have_data = 0;
  }
  if (have_data && it->in_place && !it->want && df_file_exists(f->jpath) &&
      scrub_journal(f->data, f->jpath, e))
    return -1;
  if (df_ranges_open(&f->rj, f->jpath, e)) return -1;
  f->fd = open(f->data, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (f->fd < 0) return df_err_errno(e, "%s", f->data);
  if (!have_data && ftruncate(f->fd, (off_t)it->file->size))
    return df_err_errno(e, "sizing %s to %llu bytes", f->data,
                        (unsigned long long)it->file->size);
  return 0;
}

int df_dl_run(const df_dl_item *items, int n, const df_dl_opts *o, df_dl_stats *st, df_err *e) {
  memset(st, 0, sizeof *st);
  double t0 = df_now();
  run r = {.o = o, .hc = o->http};
  df_http_gate *own_gate = NULL;
  if (!r.hc.gate) r.hc.gate = own_gate = df_http_gate_new(o->http.max_wait_s);
  pthread_mutex_init(&r.mu, NULL);
  r.fs = df_xcalloc((size_t)(n ? n : 1), sizeof *r.fs);
  r.nfs = n;
  for (int i = 0; i < n; i++) r.fs[i].fd = -1;
  int rc = -1;
  uint64_t chunk = o->chunk ? o->chunk : 16u << 20;
  uint64_t total = 0;
  for (int i = 0; i < n; i++) {
    if (open_file(&r, i, &items[i], e)) goto out;
    addctx a = {&r, i, chunk, 0};
    if (items[i].want)
      for (int k = 0; k < items[i].nwant; k++)
        gaps(r.fs[i].rj, items[i].want[k].begin, items[i].want[k].end, add_gap, &a);
    else gaps(r.fs[i].rj, 0, items[i].file->size, add_gap, &a);
    total += a.total;
    /* Complete already (killed between the last chunk and the rename). */
    if (!r.fs[i].pending && df_ranges_covered(r.fs[i].rj, 0, items[i].file->size) &&
        finalize(&r, &r.fs[i], e))
      goto out;
  }
  st->bytes_wanted = total;
  if (o->offline && total) {
    int nmiss = 0;
    char names[600] = "";
    for (int i = 0; i < n; i++)
      if (r.fs[i].pending) {
        size_t k = strlen(names);
        if (nmiss++ < 3)
          snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "", items[i].file->name);
      }
    df_err_set(e,
               "offline (HF_HUB_OFFLINE or --offline): %d file%s not local (%s%s; %.1f MB) and "
               "nothing may be downloaded: they are neither in the install nor in the hub cache; "
               "run setup without offline to fetch them",
               nmiss, nmiss == 1 ? " is" : "s are", names, nmiss > 3 ? ", ..." : "",
               (double)total / 1e6);
    goto out;
  }
  int nw = o->connections > 0 ? o->connections : 4;
  if (nw > r.njobs) nw = r.njobs;
  pthread_t *th = df_xcalloc((size_t)(nw ? nw : 1), sizeof *th);
  atomic_store(&r.running, nw);
  for (int i = 0; i < nw; i++) pthread_create(&th[i], NULL, worker, &r);
  df_progress pr;
  char label[160];
  snprintf(label, sizeof label, "%s", o->step ? o->step : "download");
  df_progress_begin(&pr, label, total);
  if (!o->progress) pr.tty = 0;
  while (atomic_load(&r.running) > 0) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (o->progress) {
      uint64_t b = atomic_load(&r.bytes);
      double wait = df_http_gate_remaining(r.hc.gate);
      snprintf(label, sizeof label, "%s %.1f/%.1f MB%s", o->step ? o->step : "download",
               (double)b / 1e6, (double)total / 1e6, wait > 0 ? " (rate limited: waiting)" : "");
      df_progress_update(&pr, b < total ? b : total);
    }
  }
  for (int i = 0; i < nw; i++) pthread_join(th[i], NULL);
  free(th);

  if (o->progress && total) {
    uint64_t b = atomic_load(&r.bytes);
    if (b > total) b = total; /* a whole body's skipped bytes are not progress */
    snprintf(label, sizeof label, "%s %.1f/%.1f MB%s", o->step ? o->step : "download",
             (double)b / 1e6, (double)total / 1e6, r.stop ? " (failed)" : "");
    /* the real figure when it failed, never the total */
    if (r.stop) df_progress_stop(&pr, b);
    else df_progress_end(&pr);
  }
  if (r.stop) {
    *e = r.err;
    goto out;
  }
  rc = 0;
out:
  st->bytes_net = atomic_load(&r.bytes);
  st->requests = r.hs.requests;
  st->retries = r.hs.retries;
  st->files_completed = r.completed;
  st->seconds = df_now() - t0;
  for (int i = 0; i < n; i++) {
    if (r.fs[i].fd >= 0) close(r.fs[i].fd);
    df_ranges_close(r.fs[i].rj);
    free(r.fs[i].data);
    free(r.fs[i].jpath);
  }
  free(r.fs);
  free(r.jobs);
  pthread_mutex_destroy(&r.mu);
  df_http_gate_free(own_gate);
  return rc;
}

const char *df_dl_fmt_size(uint64_t b, char out[24]) {
  double v = (double)b;
  if (b < 1000) snprintf(out, 24, "%llu B", (unsigned long long)b);
  else if (v < 1e6) snprintf(out, 24, "%.1f KB", v / 1e3);
  else if (v < 1e9) snprintf(out, 24, "%.1f MB", v / 1e6);
  else if (v < 1e12) snprintf(out, 24, "%.2f GB", v / 1e9);
  else snprintf(out, 24, "%.2f TB", v / 1e12);
  return out;
}

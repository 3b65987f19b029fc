/* The stream fetcher's verification policy (--stream-verify record | shard
 * | arrival, from setup's record and the install's record sums) and the
 * whole-shard completion that --stream-verify shard needs. */
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
#include "remote/root.h"
#include "remote/reclock.h"
#include "remote/fetcher_int.h"

/* ---- verification: the policy, and --stream-verify shard ---- */

/* The policy recorded by setup and the record sums stored beside the
 * install (checked against the model info: sums of another revision are
 * refused, never half-used). */
int df_fetcher_load_verify(df_fetcher *f, df_err *e) {
  char *p = df_path_join(f->dir, DF_SETUP_STATE);
  json_t *o = json_load_file(p, 0, NULL);
  const json_t *v = json_object_get(o, "stream_verify");
  int rc = 0;
  if (v && (!json_is_string(v) || df_sverify_parse(json_string_value(v), &f->installed)))
    rc = df_err_set(e, "%s: 'stream_verify' is not record, shard or arrival; run deltafin setup "
                    "--stream --stream-verify POLICY again", p);
  json_decref(o);
  free(p);
  if (rc) return -1;
  char *sp = df_path_join(f->dir, DF_RECSUMS_FILE), *buf = NULL;
  size_t len = 0;
  if (df_file_exists(sp)) {
    rc = df_file_read(sp, &buf, &len, e);
    if (!rc) rc = df_recsums_parse(buf, len, sp, &f->sums, e);
    if (!rc) rc = df_recsums_check_info(f->sums, &f->info, sp, e);
    free(buf);
  }
  free(sp);
  for (int i = 0; !rc && i < f->n; i++)
    f->sh[i].rs_shard = f->sums ? df_recsums_find_shard(f->sums, df_fetcher_base_name(f->sh[i].path)) : -1;
  if (!rc) rc = df_fetcher_set_verify(f, DF_SVERIFY_AUTO, 0, e);
  return rc;
}

int df_fetcher_set_verify(df_fetcher *f, df_stream_verify want, int warn, df_err *e) {
  df_stream_verify p = want != DF_SVERIFY_AUTO ? want : f->installed;
  if (p == DF_SVERIFY_AUTO) p = f->sums ? DF_SVERIFY_RECORD : DF_SVERIFY_ARRIVAL;
  if (p == DF_SVERIFY_RECORD && !f->sums)
    return df_err_set(e,
                      "%s: --stream-verify record needs record sums (%s); add them with deltafin "
                      "setup --stream ... --record-sums FILE|URL (deltafin record-sums makes them "
                      "from a verified full install), or use --stream-verify shard",
                      f->dir, DF_RECSUMS_FILE);
  f->policy = p;
  if (warn && p == DF_SVERIFY_ARRIVAL) df_sverify_warn_arrival(f->dir);
  return 0;
}

df_stream_verify df_fetcher_verify_policy(const df_fetcher *f) { return f->policy; }

int df_fetcher_proven(df_fetcher *f, int file, uint64_t off, uint64_t len) {
  int state = df_fetcher_shard_state(f, file);
  if (state < 2) return state;
  fshard *s = &f->sh[file];
  uint64_t x;
  /* with record sums every exactly journalled record was checked (on
   * arrival, or when the sums were added to the install) */
  return f->policy != DF_SVERIFY_SHARD && f->sums && df_ranges_lookup(s->rj, off, off + len, &x) == 0;
}

#define SHARD_RUN_BYTES (16u << 20)

typedef struct gapv {
  df_fetch_req *v;
  int n, cap, file;
} gapv;

static void add_gap(void *ud, uint64_t b, uint64_t end) {
  gapv *g = ud;
  for (uint64_t o = b; o < end; o += SHARD_RUN_BYTES) {
    if (g->n == g->cap) g->v = df_xrealloc(g->v, (size_t)(g->cap = g->cap ? 2 * g->cap : 64) * sizeof *g->v);
    uint64_t l = end - o < SHARD_RUN_BYTES ? end - o : SHARD_RUN_BYTES;
    g->v[g->n++] = (df_fetch_req){g->file, o, l, -1, -1}; /* a chunk, not a record */
  }
}

/* Fetches every missing range of a partial shard (in parallel), journals
 * them, and verifies the whole shard against the hub's sha256; a mismatch
 * removes it (df_fetcher_maybe_complete). Another caller completing the same shard is
 * waited for. */
static int complete_shard(df_fetcher *f, int file, const df_fetch_req *why, df_err *e) {
  fshard *s = &f->sh[file];
  uint64_t size = s->hf->size;
  pthread_mutex_lock(&f->mu);
  while (s->stream && !s->bad && df_fetcher_overlaps(f, file, 0, size)) pthread_cond_wait(&f->cv, &f->mu);
  int stream = s->stream, bad = s->bad;
  if (stream && !bad) {
    if (f->nfl == f->capfl) {
      f->capfl = f->capfl ? 2 * f->capfl : 64;
      f->fl = df_xrealloc(f->fl, (size_t)f->capfl * sizeof *f->fl);
    }
    f->fl[f->nfl++] = (flight){file, 0, size};
  }
  pthread_mutex_unlock(&f->mu);
  if (bad)
    return df_err_set(e, "layer %d expert %d: shard %s failed verification; run deltafin setup "
                      "--full to fetch it again", why->layer, why->expert, s->path);
  if (!stream) return 0;
  /* other processes: the whole shard is claimed (waiting, holding no other
   * claim), which also re-reads its journal: what they fetched meanwhile is
   * not fetched again, and none of its records is fetched twice */
  int cl = df_reclock_claim(s->fd, s->rj, 0, size, 1, e);
  int rc = cl < 0 ? -1 : 0;
  gapv g = {.file = file};
  if (cl == DF_RECLOCK_MINE) df_ranges_gaps(s->rj, 0, size, add_gap, &g);
  if (g.n) {
    df_log_info("%s: --stream-verify shard: fetching the rest of the shard (%.1f MB) for layer %d "
                "expert %d",
                df_fetcher_base_name(s->path), (double)(size - df_ranges_bytes(s->rj)) / 1e6, why->layer,
                why->expert);
    uint64_t bytes = 0;
    for (int i = 0; i < g.n; i++) bytes += g.v[i].len;
    rc = df_fetcher_fetch_journal(f, g.v, g.n, 0, e);
    pthread_mutex_lock(&f->mu);
    if (!rc) f->st.bytes += bytes;
    pthread_mutex_unlock(&f->mu);
  }
  if (cl == DF_RECLOCK_MINE) df_reclock_release(s->fd, 0, size);
  free(g.v);
  pthread_mutex_lock(&f->mu);
  df_fetcher_flight_remove(f, file, 0, size);
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  if (!rc) rc = df_fetcher_maybe_complete(f, file, e);
  if (rc)
    df_err_prefix(e, "layer %d expert %d could not be used (--stream-verify shard: its shard %s is "
                  "fetched from %s and checked first): ",
                  why->layer, why->expert, df_fetcher_base_name(s->path), f->endpoint);
  return rc;
}

/* --stream-verify shard: the requested records' partial shards are
 * completed and proven before any of their records is used. */
int df_fetcher_shard_first(df_fetcher *f, const df_fetch_req *r, int n, df_err *e) {
  double t0 = df_now();
  int rc = 0;
  for (int i = 0; i < n && !rc; i++) {
    if (r[i].file < 0 || r[i].file >= f->n) continue;
    pthread_mutex_lock(&f->mu);
    int todo = f->sh[r[i].file].stream || f->sh[r[i].file].bad;
    pthread_mutex_unlock(&f->mu);
    if (todo) rc = complete_shard(f, r[i].file, &r[i], e);
  }
  pthread_mutex_lock(&f->mu);
  f->st.wait_s += df_now() - t0;
  pthread_mutex_unlock(&f->mu);
  return rc;
}


#include "store/source.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/util.h"
#include "remote/fetcher.h"

static const char *part_name[6] = {"w1.weight_packed", "w1.weight_scale", "w2.weight_packed",
                                   "w2.weight_scale",  "w3.weight_packed", "w3.weight_scale"};

void df_expert_layout_of(const df_config *c, df_expert_layout *l) {
  uint64_t I = (uint64_t)c->moe_inter, L = (uint64_t)c->latent, g = (uint64_t)c->expert_group;
  l->w1p = 0;
  l->w1s = l->w1p + I * L / 2;
  l->w2p = l->w1s + I * L / g;
  l->w2s = l->w2p + L * I / 2;
  l->w3p = l->w2s + L * I / g;
  l->w3s = l->w3p + I * L / 2;
  l->total = l->w3s + I * L / g;
}

int df_src_locate(const df_st_set *set, const df_config *c, df_src_loc *loc, df_err *e) {
  df_expert_layout lay;
  df_expert_layout_of(c, &lay);
  const uint64_t off[7] = {lay.w1p, lay.w1s, lay.w2p, lay.w2s, lay.w3p, lay.w3s, lay.total};
  char name[256];
  for (int l = c->first_k_dense; l < c->n_layers; l++)
    for (int x = 0; x < c->n_experts; x++) {
      const df_tensor *first = NULL;
      for (int p = 0; p < 6; p++) {
        snprintf(name, sizeof name, "language_model.model.layers.%d.block_sparse_moe.experts.%d.%s",
                 l, x, part_name[p]);
        const df_tensor *t = df_st_set_find(set, name);
        if (!t) return df_err_set(e, "missing tensor %s", name);
        if (t->dtype != DF_DT_U8)
          return df_err_set(e, "%s: dtype %s, expected U8", name, df_dtype_name(t->dtype));
        if (t->nbytes != off[p + 1] - off[p])
          return df_err_set(e, "%s: %llu bytes, expected %llu for this config", name,
                            (unsigned long long)t->nbytes,
                            (unsigned long long)(off[p + 1] - off[p]));
        if (p == 0) first = t;
        else if (t->file != first->file || t->offset != first->offset + off[p])
          return df_err_set(e,
                            "%s: expert tensors are not contiguous in upstream order "
                            "(w1 packed, w1 scale, w2 packed, w2 scale, w3 packed, w3 scale)",
                            name);
      }
      df_src_loc *o = &loc[(size_t)(l - c->first_k_dense) * (size_t)c->n_experts + (size_t)x];
      o->file = first->file;
      o->off = first->offset;
    }
  return 0;
}

int df_src_fingerprint(const df_st_set *set, uint64_t *out, df_err *e) {
  char *p = df_path_join(set->dir, "config.json"), *buf;
  size_t len;
  int rc = df_file_read(p, &buf, &len, e);
  free(p);
  if (rc) return -1;
  XXH3_state_t *st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, buf, len);
  free(buf);
  for (int i = 0; i < set->nfiles; i++) {
    const char *path = set->files[i].path, *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    XXH3_64bits_update(st, base, strlen(base) + 1);
    uint64_t sz = set->files[i].size;
    XXH3_64bits_update(st, &sz, sizeof sz);
  }
  *out = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return 0;
}

int df_src_check_scales(const df_expert_layout *l, const uint8_t *rec) {
  if (memchr(rec + l->w1s, 255, l->w2p - l->w1s)) return -1;
  if (memchr(rec + l->w2s, 255, l->w3p - l->w2s)) return -1;
  if (memchr(rec + l->w3s, 255, l->total - l->w3s)) return -1;
  return 0;
}

/* ---- stream installs ---- */

struct df_src_remote {
  df_fetcher *f;
  int ahead; /* --fetch-ahead on */
  /* distinct records used while not proven (set of file << 44 | offset) */
  uint64_t *unv;
  size_t unv_cap, unv_n;
  pthread_mutex_t mu;
};

static int remote_open(df_src_remote **out, const df_st_set *set, df_stream_verify want, int warn,
                       df_err *e) {
  *out = NULL;
  df_fetcher *f;
  int rc = df_fetcher_open(&f, set->dir, set, e);
  if (rc <= 0) return rc;
  if (df_fetcher_set_verify(f, want, warn, e)) {
    df_fetcher_close(f);
    return -1;
  }
  df_src_remote *r = df_xcalloc(1, sizeof *r);
  r->f = f;
  pthread_mutex_init(&r->mu, NULL);
  *out = r;
  return 0;
}

int df_src_remote_open_verify(df_src_remote **out, const df_st_set *set, df_stream_verify want,
                              df_err *e) {
  return remote_open(out, set, want, 1, e);
}

int df_src_remote_open(df_src_remote **out, const df_st_set *set, df_err *e) {
  return remote_open(out, set, DF_SVERIFY_AUTO, 0, e);
}

void df_src_remote_close(df_src_remote *r) {
  if (!r) return;
  df_fetcher_close(r->f);
  free(r->unv);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

static void unv_insert(uint64_t *t, size_t cap, uint64_t k, size_t *n) {
  size_t i = (size_t)(XXH3_64bits(&k, sizeof k) & (cap - 1));
  while (t[i] && t[i] != k) i = (i + 1) & (cap - 1);
  if (!t[i]) t[i] = k, (*n)++;
}

/* Counts a used record that nothing proved (a stream install under
 * --stream-verify arrival): --stats and --json report how many. */
static void note_unverified(df_src_remote *r, int file, uint64_t off) {
  uint64_t k = ((uint64_t)file + 1) << 44 | off; /* never 0: 0 marks a free slot */
  pthread_mutex_lock(&r->mu);
  if (2 * (r->unv_n + 1) > r->unv_cap) {
    size_t nc = r->unv_cap ? 2 * r->unv_cap : 1024, nn = 0;
    uint64_t *t = df_xcalloc(nc, sizeof *t);
    for (size_t i = 0; i < r->unv_cap; i++)
      if (r->unv[i]) unv_insert(t, nc, r->unv[i], &nn);
    free(r->unv);
    r->unv = t, r->unv_cap = nc;
  }
  unv_insert(r->unv, r->unv_cap, k, &r->unv_n);
  pthread_mutex_unlock(&r->mu);
}

int df_src_remote_local(df_src_remote *r, int file, uint64_t off, uint64_t len, uint64_t *xxh) {
  return df_fetcher_local(r->f, file, off, len, xxh);
}

int df_src_remote_ensure(df_src_remote *r, df_src_need *need, int n, df_err *e) {
  df_fetch_req *q = df_xmalloc((size_t)(n ? n : 1) * sizeof *q);
  int m = 0;
  for (int i = 0; i < n; i++)
    if (!df_fetcher_local(r->f, need[i].file, need[i].off, need[i].len, &need[i].xxh))
      q[m++] = (df_fetch_req){need[i].file, need[i].off, need[i].len, need[i].layer, need[i].expert};
  int rc = m ? df_fetcher_fetch(r->f, q, m, e) : 0;
  for (int i = 0; !rc && i < n; i++)
    if (!df_fetcher_local(r->f, need[i].file, need[i].off, need[i].len, &need[i].xxh))
      rc = df_err_set(e, "layer %d expert %d: not local after its fetch", need[i].layer,
                      need[i].expert);
  for (int i = 0; !rc && i < n; i++)
    if (!df_fetcher_proven(r->f, need[i].file, need[i].off, need[i].len))
      note_unverified(r, need[i].file, need[i].off);
  if (!rc && r->ahead) {
    /* records fetched ahead that this batch needs: the predictions that paid */
    for (int i = 0; i < n; i++)
      q[i] = (df_fetch_req){need[i].file, need[i].off, need[i].len, need[i].layer, need[i].expert};
    df_fetcher_demanded(r->f, q, n);
  }
  free(q);
  return rc;
}

void df_src_remote_set_ahead(df_src_remote *r, int on) {
  r->ahead = on;
  df_fetcher_set_ahead(r->f, on);
}

void df_src_remote_settle(df_src_remote *r) {
  if (r->ahead) df_fetcher_settle(r->f);
}

void df_src_remote_ahead(df_src_remote *r, const df_src_need *need, int n) {
  if (!r->ahead) return;
  df_fetch_req q[64];
  for (int i = 0; i < n;) {
    int m = 0;
    for (; i < n && m < 64; i++)
      q[m++] = (df_fetch_req){need[i].file, need[i].off, need[i].len, need[i].layer, need[i].expert};
    df_fetcher_ahead(r->f, q, m);
  }
}

char *df_src_remote_stats_json(df_src_remote *r) {
  df_fetcher_stats st;
  df_fetcher_get_stats(r->f, &st);
  pthread_mutex_lock(&r->mu);
  size_t unv = r->unv_n;
  pthread_mutex_unlock(&r->mu);
  char buf[1280];
  snprintf(buf, sizeof buf,
           "{\"records_fetched\":%llu,\"bytes_fetched\":%llu,\"http_requests\":%llu,"
           "\"http_retries\":%llu,\"wait_seconds\":%.6f,\"shards_partial\":%d,"
           "\"stream_verify\":\"%s\",\"records_verified\":%llu,\"records_refetched\":%llu,"
           "\"records_used_unverified\":%llu,"
           "\"fetch_ahead\":%s,\"ahead_records_fetched\":%llu,\"ahead_bytes_fetched\":%llu,"
           "\"ahead_http_requests\":%llu,\"ahead_used\":%llu,\"ahead_failed\":%llu,"
           "\"ahead_dropped\":%llu,\"http_redirects_followed\":%llu,"
           "\"http_redirects_skipped\":%llu,\"http_reresolved\":%llu}",
           (unsigned long long)st.records, (unsigned long long)st.bytes,
           (unsigned long long)st.requests, (unsigned long long)st.retries, st.wait_s,
           st.shards_partial, df_sverify_name(st.policy), (unsigned long long)st.verified,
           (unsigned long long)st.refetched, (unsigned long long)unv,
           r->ahead ? "true" : "false", (unsigned long long)st.ahead_records,
           (unsigned long long)st.ahead_bytes, (unsigned long long)st.ahead_requests,
           (unsigned long long)st.ahead_used, (unsigned long long)st.ahead_failed,
           (unsigned long long)st.ahead_dropped, (unsigned long long)st.redirects_followed,
           (unsigned long long)st.redirects_skipped, (unsigned long long)st.reresolved);
  return df_xstrdup(buf);
}

/* The store's statistics: the JSON object (engine stats, bench), the text
 * summary (--stats) and the one-line description. */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/source.h"
#include "store/store_int.h"

static const char *pred_name[NPRED] = {"gate", "prev"};

/* Under the lock: prefetch completions update it from the I/O threads. */
uint64_t df_store_bytes_read(const df_store *s) {
  if (!s) return 0;
  df_store *m = (df_store *)s;
  pthread_mutex_lock(&m->mu);
  uint64_t v = s->ct.bytes_read;
  pthread_mutex_unlock(&m->mu);
  return v;
}

static double amp(const df_store *s) {
  if (s->ct.prefill_need) return (double)s->ct.prefill_read / (double)s->ct.prefill_need;
  return s->ct.all_need ? (double)s->ct.all_read / (double)s->ct.all_need : 0.0;
}

char *df_store_describe(const df_store *s) {
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "experts from %s %s (%d drive%s), io %s qd %d%s, cache %ld MB, prefetch %s",
                   s->loc.from_pack ? "pack" : "shards", s->loc.source ? s->loc.source : "-", s->sch.ndrives,
                   s->sch.ndrives == 1 ? "" : "s", s->sch.io_kind == DF_IO_URING ? "io_uring" : "pread", s->sch.ioc.queue_depth,
                   s->sch.io && df_io_registered(s->sch.io) ? " registered buffers" : "", s->cache.mb,
                   s->pr.name ? s->pr.name : "off");
  if (s->sch.ioc.emu_spec && n > 0 && (size_t)n < sizeof buf)
    snprintf(buf + n, sizeof buf - (size_t)n, ", EMULATED drives %s", s->sch.ioc.emu_spec);
  return df_xstrdup(buf);
}

char *df_store_stats_json(const df_store *s) {
  df_store *m = (df_store *)s;
  /* reports come after a generation: the guesses fetched ahead for it are
   * counted whole (the queued ones, for positions that will not come, go) */
  if (s->net.src) df_src_remote_settle(s->net.src);
  pthread_mutex_lock(&m->mu);
  json_t *o = json_object();
  json_object_set_new(o, "source", json_string(s->loc.from_pack ? "pack" : "shards"));
  json_object_set_new(o, "location", s->loc.source ? json_string(s->loc.source) : json_null());
  json_object_set_new(o, "io", json_string(s->sch.io_kind == DF_IO_URING ? "uring" : "pread"));
  json_object_set_new(o, "o_direct", json_boolean(s->loc.o_direct));
  json_object_set_new(o, "registered_buffers", json_boolean(s->sch.io && df_io_registered(s->sch.io)));
  json_object_set_new(o, "queue_depth", json_integer(s->sch.ioc.queue_depth));
  json_object_set_new(o, "emulated", s->sch.ioc.emu_spec ? json_string(s->sch.ioc.emu_spec) : json_null());
  json_object_set_new(o, "record_bytes", json_integer((json_int_t)s->rec_bytes));
  json_object_set_new(o, "expert_bytes_read", json_integer((json_int_t)s->ct.bytes_read));
  json_object_set_new(o, "expert_bytes_demand", json_integer((json_int_t)s->ct.bytes_demand));
  json_object_set_new(o, "expert_bytes_prefetch", json_integer((json_int_t)s->ct.bytes_prefetch));
  json_object_set_new(o, "prefetch_used_bytes", json_integer((json_int_t)s->ct.pf_used));
  json_object_set_new(o, "prefetch_wasted_bytes", json_integer((json_int_t)s->ct.pf_wasted));
  json_object_set_new(o, "prefetch_issued", json_integer((json_int_t)s->ct.pf_issued));
  json_object_set_new(o, "prefetch_dropped", json_integer((json_int_t)s->ct.pf_dropped));
  json_object_set_new(o, "expert_bytes_handed", json_integer((json_int_t)s->ct.bytes_handed));
  json_object_set_new(o, "expert_requests", json_integer((json_int_t)s->ct.requests));
  json_object_set_new(o, "cache_hits", json_integer((json_int_t)s->ct.hits));
  json_object_set_new(o, "prefetch_inflight_hits", json_integer((json_int_t)s->ct.pf_inflight_hits));
  json_object_set_new(o, "cache_hit_rate",
                      json_real(s->ct.requests ? (double)s->ct.hits / (double)s->ct.requests : 0.0));
  json_object_set_new(o, "prefill_read_amplification", json_real(amp(s)));
  json_object_set_new(o, "read_amplification",
                      json_real(s->ct.all_need ? (double)s->ct.all_read / (double)s->ct.all_need : 0.0));
  json_t *c = json_object();
  json_object_set_new(c, "budget_mb", json_integer(s->cache.mb));
  json_object_set_new(c, "resident_bytes", json_integer((json_int_t)((uint64_t)s->cache.n_resident * s->rec_bytes)));
  json_object_set_new(c, "pinned_bytes", json_integer((json_int_t)((uint64_t)s->cache.pinned * s->rec_bytes)));
  json_object_set_new(c, "protected", json_integer(s->cache.n_protected));
  json_object_set_new(c, "evictions", json_integer((json_int_t)s->ct.evictions));
  json_object_set_new(o, "cache", c);
  json_object_set_new(o, "wait_seconds", json_real(s->ct.wait_total));
  json_t *wl = json_array();
  for (int l = 0; l < s->n_layers; l++) json_array_append_new(wl, json_real(s->ct.wait_layer ? s->ct.wait_layer[l] : 0));
  json_object_set_new(o, "wait_seconds_per_layer", wl);
  json_t *pr = json_object();
  for (int p = 0; p < NPRED && s->pr.recall_samples[p]; p++) {
    json_t *po = json_object(), *pl = json_array();
    double h = 0, t = 0;
    long nsm = 0;
    for (int l = 0; l < s->n_layers; l++) {
      h += s->pr.recall_hits[p][l];
      t += s->pr.recall_total[p][l];
      nsm += s->pr.recall_samples[p][l];
      json_array_append_new(pl, s->pr.recall_total[p][l] > 0 ? json_real(s->pr.recall_hits[p][l] / s->pr.recall_total[p][l])
                                                      : json_null());
    }
    json_t *on = json_array();
    for (int l = 0; l < s->n_layers; l++) json_array_append_new(on, json_boolean(df_pred_on(s, p, l)));
    json_object_set_new(po, "enabled", json_boolean(s->pr.mask >> p & 1));
    json_object_set_new(po, "on_per_layer", on);
    json_object_set_new(po, "recall", t > 0 ? json_real(h / t) : json_null());
    json_object_set_new(po, "samples", json_integer(nsm));
    json_object_set_new(po, "issued", json_integer((json_int_t)s->pr.issued[p]));
    json_object_set_new(po, "recall_per_layer", pl);
    json_object_set_new(pr, pred_name[p], po);
  }
  json_object_set_new(o, "predictors", pr);
  json_t *dr = json_array();
  for (int i = 0; i < s->sch.ndrives; i++) {
    const dstate *d = &s->sch.drive[i];
    double busy = d->busy_s + (d->inflight ? df_now() - d->busy_since : 0);
    json_t *x = json_object();
    json_object_set_new(x, "path", json_string(d->path));
    json_object_set_new(x, "bytes", json_integer((json_int_t)d->bytes));
    json_object_set_new(x, "reads", json_integer((json_int_t)d->reads));
    json_object_set_new(x, "seconds_busy", json_real(busy));
    json_object_set_new(x, "mb_per_s_busy", json_real(busy > 0 ? (double)d->bytes / 1e6 / busy : 0.0));
    json_object_set_new(x, "rate_estimate", json_real(d->rate));
    json_object_set_new(x, "errors", json_integer((json_int_t)d->errors));
    json_object_set_new(x, "alive", json_boolean(d->alive));
    json_array_append_new(dr, x);
  }
  json_object_set_new(o, "drives", dr);
  json_object_set_new(o, "split_reads", json_integer((json_int_t)s->ct.split_reads));
  uint32_t g = 0;
  for (int i = 0; i < s->sch.ndrives && s->loc.from_pack; i++)
    if (s->sch.drive[i].dio_align > g) g = s->sch.drive[i].dio_align;
  json_object_set_new(o, "split_granularity", json_integer(g));
  json_object_set_new(o, "retries", json_integer((json_int_t)s->ct.retries));
  json_object_set_new(o, "checksum_errors", json_integer((json_int_t)s->ct.checksum_errors));
  json_object_set_new(o, "read_errors", json_integer((json_int_t)s->ct.read_errors));
  /* a stream install's network fetches, apart from the local reads above */
  json_t *net = NULL;
  if (s->net.src) {
    char *nj = df_src_remote_stats_json(s->net.src);
    net = json_loads(nj, 0, NULL);
    free(nj);
    if (net) json_object_set_new(net, "store_wait_seconds", json_real(s->net.wait));
  }
  json_object_set_new(o, "network", net ? net : json_null());
  pthread_mutex_unlock(&m->mu);
  char *j = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  char *r = df_xstrdup(j);
  free(j);
  return r;
}

char *df_store_stats_text(const df_store *s) {
  df_store *m = (df_store *)s;
  if (s->net.src) df_src_remote_settle(s->net.src); /* as in df_store_stats_json */
  char *desc = df_store_describe(s);
  size_t cap = 4096 + (size_t)s->sch.ndrives * 200 + (size_t)s->n_layers * 64, n = 0;
  char *b = df_xmalloc(cap);
  pthread_mutex_lock(&m->mu);
#define AP(...) n += (size_t)snprintf(b + n, n < cap ? cap - n : 0, __VA_ARGS__)
  AP("%s\n", desc);
  if (s->sch.ioc.emu_spec)
    AP("NOTE: drives are EMULATED (%s each, throttled in the store): the drive figures below are "
       "the emulation's, not the disks'\n",
       s->sch.ioc.emu_spec);
  AP("expert reads: %.1f MB (demand %.1f MB, prefetch used %.1f MB, prefetch wasted %.1f MB); "
     "cache hit rate %.1f%% (%llu of %llu); waited %.3f s on experts\n",
     (double)s->ct.bytes_read / 1e6, (double)s->ct.bytes_demand / 1e6, (double)s->ct.pf_used / 1e6,
     (double)s->ct.pf_wasted / 1e6, s->ct.requests ? 100.0 * (double)s->ct.hits / (double)s->ct.requests : 0.0,
     (unsigned long long)s->ct.hits, (unsigned long long)s->ct.requests, s->ct.wait_total);
  if (s->net.src) {
    char *nj = df_src_remote_stats_json(s->net.src);
    json_t *net = json_loads(nj, 0, NULL);
    free(nj);
    AP("network (stream install): %lld experts fetched, %.1f MB in %lld HTTP requests (%lld "
       "retries; %lld redirects followed, %lld skipped to a remembered target, %lld resolved "
       "again); waited %.3f s on the network, apart from the local reads\n",
       (long long)json_integer_value(json_object_get(net, "records_fetched")),
       (double)json_integer_value(json_object_get(net, "bytes_fetched")) / 1e6,
       (long long)json_integer_value(json_object_get(net, "http_requests")),
       (long long)json_integer_value(json_object_get(net, "http_retries")),
       (long long)json_integer_value(json_object_get(net, "http_redirects_followed")),
       (long long)json_integer_value(json_object_get(net, "http_redirects_skipped")),
       (long long)json_integer_value(json_object_get(net, "http_reresolved")), s->net.wait);
    if (s->net.fetch_ahead)
      AP("network fetch-ahead: %lld experts fetched ahead (%.1f MB in %lld HTTP requests), %lld "
         "of them then used, %lld failed\n",
         (long long)json_integer_value(json_object_get(net, "ahead_records_fetched")),
         (double)json_integer_value(json_object_get(net, "ahead_bytes_fetched")) / 1e6,
         (long long)json_integer_value(json_object_get(net, "ahead_http_requests")),
         (long long)json_integer_value(json_object_get(net, "ahead_used")),
         (long long)json_integer_value(json_object_get(net, "ahead_failed")));
    AP("stream verify: %s; %lld experts checked against record sums (%lld fetched again after a "
       "mismatch); %lld experts used unverified\n",
       json_string_value(json_object_get(net, "stream_verify")),
       (long long)json_integer_value(json_object_get(net, "records_verified")),
       (long long)json_integer_value(json_object_get(net, "records_refetched")),
       (long long)json_integer_value(json_object_get(net, "records_used_unverified")));
    json_decref(net);
  }
  AP("prefill read amplification %.2f; %llu reads split over two copies\n", amp(s),
     (unsigned long long)s->ct.split_reads);
  for (int i = 0; i < s->sch.ndrives; i++) {
    const dstate *d = &s->sch.drive[i];
    AP("drive %d%s %s: %.1f MB in %llu reads, busy %.3f s, %.1f MB/s%s%s\n", i,
       s->sch.ioc.emu_spec ? " (emulated)" : "", d->path,
       (double)d->bytes / 1e6, (unsigned long long)d->reads, d->busy_s,
       d->busy_s > 0 ? (double)d->bytes / 1e6 / d->busy_s : 0.0, d->errors ? ", errors" : "",
       d->alive ? "" : " (missing)");
  }
  for (int p = 0; p < NPRED; p++) {
    double h = 0, t = 0;
    for (int l = 0; l < s->n_layers; l++) h += s->pr.recall_hits[p][l], t += s->pr.recall_total[p][l];
    if (!(t > 0)) continue;
    AP("predictor %s: recall %.2f%s; per layer (* = switched off by auto):", pred_name[p], h / t,
       s->pr.mask >> p & 1 ? "" : " (measured only)");
    for (int l = 0; l < s->n_layers && n < cap - 32; l++) {
      if (s->pr.recall_total[p][l] > 0)
        AP(" %d:%.2f%s", s->first_layer + l, s->pr.recall_hits[p][l] / s->pr.recall_total[p][l],
           (s->pr.mask >> p & 1) && !df_pred_on(s, p, l) ? "*" : "");
      else
        AP(" %d:-", s->first_layer + l);
    }
    AP("\n");
  }
  if (s->n_layers) {
    AP("wait per layer (ms):");
    for (int l = 0; l < s->n_layers && n < cap - 32; l++) AP(" %.1f", s->ct.wait_layer[l] * 1e3);
    AP("\n");
  }
#undef AP
  pthread_mutex_unlock(&m->mu);
  free(desc);
  return b;
}


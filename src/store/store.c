/* The expert store: open and close, and the batch API the model calls
 * (begin, next, end). See store_int.h for the files and what each owns. */
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "store/source.h"
#include "store/store_int.h"

int df_store_open(df_store **out, const df_st_set *set, const df_config *c,
                  const df_store_opts *o, df_err *e) {
  df_store_opts dflt = {0};
  if (!o) {
    dflt.cache_mb = -1;
    o = &dflt;
  }
  if (!df_store_io_name(o->io) || !df_store_prefetch_name(o->prefetch) ||
      !df_store_split_name(o->split_reads))
    return df_err_set(e, "store options out of range (--io %d, --prefetch %d, --split-reads %d)",
                      (int)o->io, (int)o->prefetch, (int)o->split_reads);
  df_store_iocfg ioc;
  if (df_store_iocfg_resolve(o, &ioc, e)) return -1;
  df_store *s = df_xcalloc(1, sizeof *s);
  s->sch.ioc = ioc;
  s->sch.ioc.emu_spec = ioc.emu_spec ? df_xstrdup(ioc.emu_spec) : NULL;
  s->sch.ioc.trace_path = ioc.trace_path ? df_xstrdup(ioc.trace_path) : NULL;
  s->sch.io_kind = ioc.io == DF_STORE_IO_PREAD ? DF_IO_PREAD : DF_IO_URING;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->t_open = df_now();
  s->cfg = c;
  df_expert_layout_of(c, &s->lay);
  s->first_layer = c->first_k_dense;
  s->n_layers = c->n_layers - c->first_k_dense;
  s->n_experts = c->n_experts;
  s->layer = 1 << 30;
  s->loc.o_direct = 1;
  if (s->n_layers < 1 || s->n_experts < 1) {
    *out = s; /* no routed experts: nothing to store */
    return 0;
  }
  s->nkeys = (size_t)s->n_layers * (size_t)s->n_experts;
  s->rec_bytes = s->lay.total;
  s->loc.recs = df_xcalloc(s->nkeys, sizeof *s->loc.recs);
  s->cache.by_key = df_xcalloc(s->nkeys, sizeof *s->cache.by_key);
  const char *model_dir = o->model_dir ? o->model_dir : set->dir;
  s->net.stream_verify = (int)o->stream_verify;

  char *mpath = NULL;
  if (o->manifest && o->no_pack) {
    df_store_close(s);
    return df_err_set(e, "--store and --no-pack contradict each other; pass one");
  }
  if (o->manifest) mpath = df_xstrdup(o->manifest);
  else if (!o->no_pack) {
    mpath = df_path_join(model_dir, DF_PACK_MANIFEST_NAME);
    if (!df_file_exists(mpath)) {
      free(mpath);
      mpath = NULL;
    }
  }
  int rc;
  if (mpath) {
    s->loc.from_pack = 1;
    s->loc.source = mpath;
    rc = df_store_open_pack(s, set, mpath, e);
  } else {
    s->loc.source = df_xstrdup(set->dir);
    rc = df_store_open_shards(s, set, e);
  }
  if (rc) goto fail;
  if (s->net.src && o->fetch_ahead) {
    s->net.fetch_ahead = 1;
    df_src_remote_set_ahead(s->net.src, 1);
  }
  /* shard records are not aligned: their buffer holds the head pad too */
  s->slot_bytes = DF_IO_ROUND_UP(s->rec_bytes) + (s->loc.from_pack ? 0 : DF_IO_ALIGN);

  s->sch.split = o->split_reads;
  if (s->sch.ioc.emu.bw > 0)
    for (int i = 0; i < s->sch.ndrives; i++) s->sch.drive[i].rate = s->sch.ioc.emu.bw;
  s->cache.mb = df_store_cache_mb_of(o);
  s->cache.slots = (long)(((uint64_t)s->cache.mb << 20) / s->slot_bytes);
  s->cache.prefetch_allowance = (long)s->sch.ioc.queue_depth * s->sch.ndrives;
  if (s->cache.prefetch_allowance < 2L * c->top_k) s->cache.prefetch_allowance = 2L * c->top_k;
  s->cache.slots_per_chunk = (int)((1u << 30) / s->slot_bytes);
  if (s->cache.slots_per_chunk > 16) s->cache.slots_per_chunk = 16;
  if (s->cache.slots_per_chunk < 1) s->cache.slots_per_chunk = 1;

  df_pred_init(s, o->prefetch);
  s->ct.wait_layer = df_xcalloc((size_t)s->n_layers, sizeof(double));

  /* heat: the prior (from the file) seeds cache scores and pinning; this
   * run's counts are merged into the file at close */
  df_heat prior = {0};
  df_cache_heat_open(s, model_dir, o->heat_path, &prior);

  if (s->sch.ioc.trace_path) {
    char **paths = df_xmalloc((size_t)s->sch.ndrives * sizeof *paths);
    for (int i = 0; i < s->sch.ndrives; i++) paths[i] = s->sch.drive[i].path;
    s->trace = df_trace_open(s->sch.ioc.trace_path, s->sch.ndrives, paths, s->sch.ioc.emu_spec,
                          s->sch.io_kind == DF_IO_URING ? "uring" : "pread", e);
    free(paths);
    if (!s->trace) {
      df_heat_free(&prior);
      rc = -1;
      goto fail;
    }
  }
  df_io_ops ops = df_sched_ops(s);
  if (df_io_open(&s->sch.io, s->sch.io_kind, s->sch.ndrives, s->sch.ioc.queue_depth, &s->sch.ioc.emu, &ops, e)) {
    if (s->sch.io_kind != DF_IO_URING) {
      df_heat_free(&prior);
      rc = -1;
      goto fail;
    }
    df_log_warn("%s; falling back to --io pread", e->msg);
    s->sch.io_kind = DF_IO_PREAD;
    if (df_io_open(&s->sch.io, s->sch.io_kind, s->sch.ndrives, s->sch.ioc.queue_depth, &s->sch.ioc.emu, &ops, e)) {
      df_heat_free(&prior);
      rc = -1;
      goto fail;
    }
  }
  if (!s->loc.o_direct) df_log_warn("O_DIRECT is not supported for %s: expert reads go through the page cache", s->loc.source);
  if (s->trace) df_sampler_start(s);
  if (o->pin_mb > 0) rc = df_cache_pin_hottest(s, prior.count, o->pin_mb, e);
  df_heat_free(&prior);
  if (rc) goto fail;
  *out = s;
  return 0;
fail:
  df_store_close(s);
  return -1;
}

/* The trace's last records: each predictor's recall per layer and the
 * drives' rate estimates. */
static void trace_close_records(df_store *s) {
  static const char *const names[NPRED] = {"gate", "prev"};
  double *r = df_xcalloc((size_t)s->n_layers + 1, sizeof *r);
  for (int p = 0; p < NPRED; p++) {
    if (!s->pr.recall_samples[p] || !(s->pr.mask >> p & 1)) continue;
    for (int l = 0; l < s->n_layers; l++)
      r[l] = s->pr.recall_total[p][l] > 0 ? s->pr.recall_hits[p][l] / s->pr.recall_total[p][l] : -1;
    df_trace_recall(s->trace, names[p], r, s->n_layers);
  }
  free(r);
  double *rate = df_xcalloc((size_t)s->sch.ndrives + 1, sizeof *rate);
  for (int i = 0; i < s->sch.ndrives; i++) rate[i] = s->sch.drive[i].rate;
  df_trace_end(s->trace, df_store_now_rel(s), rate, s->sch.ndrives);
  free(rate);
}

void df_store_trace_mark(df_store *s, const char *kind, int i) {
  if (s && s->trace) df_trace_mark(s->trace, df_store_now_rel(s), kind, i);
}

void df_store_trace_draft(df_store *s, int K, double tpp, const char *why) {
  if (s && s->trace) df_trace_draft(s->trace, df_store_now_rel(s), K, tpp, why);
}

void df_store_on_buffers(df_store *s, void (*fn)(void *ud, void *p, size_t n),
                         void (*unfn)(void *ud, void *p, size_t n), void *ud) {
  pthread_mutex_lock(&s->mu);
  s->cache.buf_fn = fn;
  s->cache.buf_unfn = unfn;
  s->cache.buf_ud = ud;
  size_t bytes = (size_t)s->cache.slots_per_chunk * s->slot_bytes;
  for (int i = 0; fn && i < s->cache.n_chunks; i++) fn(ud, s->cache.slot_chunks[i], bytes);
  pthread_mutex_unlock(&s->mu);
}

void df_store_close(df_store *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->sch.closing = 1;
  df_sched_cancel_queued(s);
  df_store_spine_req *sq = df_sched_take_spine_queued(s);
  pthread_mutex_unlock(&s->mu);
  while (sq) { /* their callbacks run without the lock, as always */
    df_store_spine_req *nx = sq->next;
    sq->req.got = 0;
    sq->req.err = ECANCELED;
    sq->done(sq->ud, sq);
    sq = nx;
  }
  pthread_mutex_lock(&s->mu);
  while (s->sch.total_inflight > 0) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  df_sampler_stop(s);
  if (s->sch.io) df_io_close(s->sch.io);
  if (s->cache.heat_path && s->cache.heat.count && s->ct.requests) {
    df_err e;
    if (df_heat_merge_save(&s->cache.heat, s->cache.heat_path, &e))
      df_log_warn("heat file not saved: %s", e.msg);
  }
  if (s->trace) trace_close_records(s);
  df_trace_close(s->trace);
  df_cache_free_all(s);
  df_store_close_files(s);
  for (int i = 0; i < s->sch.ndrives; i++) free(s->sch.drive[i].path);
  free(s->sch.drive);
  free(s->loc.recs);
  free(s->cache.by_key);
  free(s->batch);
  df_pred_free(s);
  free(s->log);
  free(s->ct.wait_layer);
  df_heat_free(&s->cache.heat);
  free(s->cache.heat_seed);
  free(s->cache.kscore);
  free(s->cache.ktick);
  free(s->cache.heat_path);
  free(s->loc.source);
  free((char *)s->sch.ioc.emu_spec);
  free((char *)s->sch.ioc.trace_path);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

/* Stream install: the records (by key) that are not local are fetched now,
 * before any read of them is queued (the store's lock is not held: other
 * threads keep reading local records meanwhile). Only for records a batch
 * needs or --pin-mb asked for: never speculatively. */
int df_store_fetch_remote(df_store *s, const int *keys, int n, df_err *e) {
  df_src_need *need = df_xmalloc((size_t)(n ? n : 1) * sizeof *need);
  for (int i = 0; i < n; i++) {
    const copyloc *c = &s->loc.recs[keys[i]].c[0];
    need[i] = (df_src_need){c->file, df_store_key_layer(s, keys[i]), df_store_key_expert(s, keys[i]),
                            c->off, s->rec_bytes, 0};
  }
  double t0 = df_now();
  int rc = df_src_remote_ensure(s->net.src, need, n, e);
  pthread_mutex_lock(&s->mu);
  s->net.wait += df_now() - t0;
  for (int i = 0; !rc && i < n; i++) {
    copyloc *c = &s->loc.recs[keys[i]].c[0];
    if (!c->xxh) c->xxh = need[i].xxh; /* 0 -> its checksum, before its first read */
  }
  pthread_mutex_unlock(&s->mu);
  free(need);
  return rc;
}

int df_store_begin(df_store *s, int layer, const int *experts, int n, int rows, df_err *e) {
  if (!s->nkeys || layer < s->first_layer || layer >= s->cfg->n_layers)
    return df_err_set(e, "store: layer %d has no routed experts", layer);
  if (n < 1) return df_err_set(e, "store: layer %d: empty expert list", layer);
  for (int i = 0; i < n; i++)
    if (experts[i] < 0 || experts[i] >= s->n_experts || (i && experts[i] <= experts[i - 1]))
      return df_err_set(e, "store: layer %d: expert list not sorted/unique/in range", layer);
  if (s->net.src) {
    int keys[n];
    for (int i = 0; i < n; i++) keys[i] = (layer - s->first_layer) * s->n_experts + experts[i];
    if (df_store_fetch_remote(s, keys, n, e)) return -1;
  }
  pthread_mutex_lock(&s->mu);
  if (s->batch_n) {
    pthread_mutex_unlock(&s->mu);
    return df_err_set(e, "store: layer %d: df_store_begin before df_store_end", layer);
  }
  if (layer <= s->layer) s->pass++;
  if (s->layer == 1 << 30) s->pass = 1;
  s->layer = layer;
  int li = layer - s->first_layer;
  df_pred_measure(s, li, experts, n);
  if (s->batch_capacity < n) {
    s->batch_capacity = n;
    s->batch = df_xrealloc(s->batch, (size_t)n * sizeof *s->batch);
  }
  s->batch_n = n;
  s->batch_wait = 0;
  int prefill = rows > 1;
  s->batch_prefill = prefill;
  for (int i = 0; i < n; i++) {
    int key = li * s->n_experts + experts[i];
    entry *x = s->cache.by_key[key];
    s->ct.requests++;
    s->ct.all_need += s->rec_bytes;
    if (prefill) s->ct.prefill_need += s->rec_bytes;
    s->cache.heat.count[key] += 1;
    if (x && x->state == E_FAILED && x->refs == 0 && x->pending == 0) {
      df_cache_entry_free(s, x);
      x = NULL;
    }
    if (x) {
      if (x->state == E_READY) {
        df_cache_hit(s, x);
      } else {
        s->ct.pf_inflight_hits++;
        df_sched_promote(s, x);
      }
      if (x->speculative) {
        s->ct.pf_used += s->rec_bytes;
        x->speculative = 0;
        x->born = s->pass; /* read ahead, but new from its first use (evict.h) */
      }
      x->demand = 1;
    } else {
      x = df_cache_entry_new(s, key);
      x->demand = 1;
      x->prefill = prefill;
      if (df_sched_enqueue(s, x, 1)) df_sched_fail(s, x, "every copy is unreadable or corrupt");
    }
    df_cache_touch(s, x);
    if (x->refs++ == 0) s->cache.n_unref--;
    x->handed = 0;
    s->batch[i] = x;
  }
  /* queued prefetches for layers that have begun are dropped */
  df_sched_drop_all_stale(s);
  df_pred_after_begin(s, li, experts, n);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

int df_store_next(df_store *s, int *idx, const uint8_t **bytes, df_err *e) {
  pthread_mutex_lock(&s->mu);
  double t0 = 0;
  int li = s->layer - s->first_layer;
  for (;;) {
    int left = 0;
    for (int i = 0; i < s->batch_n; i++) {
      entry *x = s->batch[i];
      if (x->handed) continue;
      left = 1;
      if (x->state == E_READY) {
        x->handed = 1;
        *idx = i;
        *bytes = x->data;
        s->ct.bytes_handed += s->rec_bytes;
        if (t0 > 0) {
          double w = df_now() - t0;
          s->ct.wait_layer[li] += w;
          s->ct.wait_total += w;
          s->batch_wait += w;
        }
        pthread_mutex_unlock(&s->mu);
        return 1;
      }
      if (x->state == E_FAILED) {
        df_err_set(e, "%s", x->err ? x->err : "expert read failed");
        pthread_mutex_unlock(&s->mu);
        return -1;
      }
    }
    if (!left) {
      pthread_mutex_unlock(&s->mu);
      return 0;
    }
    if (t0 == 0) t0 = df_now();
    pthread_cond_wait(&s->cv, &s->mu);
  }
}

void df_store_end(df_store *s) {
  if (!s || !s->nkeys) return;
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < s->batch_n; i++) {
    entry *x = s->batch[i];
    if (--x->refs == 0) s->cache.n_unref++;
  }
  if (s->trace)
    df_trace_batch_ex(s->trace, df_store_now_rel(s), s->layer, s->batch_n, s->batch_wait, s->pass,
                      s->batch_prefill ? 2 : 1, s->ct.hits, s->ct.requests, (uint64_t)s->cache.n_resident * s->rec_bytes);
  s->batch_n = 0;
  df_cache_evict(s);
  pthread_mutex_unlock(&s->mu);
}


void df_store_log_reads(df_store *s, int on) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->log_on = on;
  pthread_mutex_unlock(&s->mu);
}

size_t df_store_reads_logged(const df_store *s) {
  if (!s) return 0;
  df_store *m = (df_store *)s;
  pthread_mutex_lock(&m->mu);
  size_t n = s->log_n;
  pthread_mutex_unlock(&m->mu);
  return n;
}

size_t df_store_read_log(const df_store *s, size_t from, size_t max, df_store_read *out) {
  if (!s) return 0;
  df_store *m = (df_store *)s;
  pthread_mutex_lock(&m->mu);
  size_t n = from < s->log_n ? s->log_n - from : 0;
  if (n > max) n = max;
  if (n) memcpy(out, s->log + from, n * sizeof *out);
  pthread_mutex_unlock(&m->mu);
  return n;
}

const df_store_iocfg *df_store_iocfg_of(const df_store *s) { return &s->sch.ioc; }

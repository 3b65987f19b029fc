/* The expert cache: O_DIRECT slots, entries and the resident list, the
 * eviction (its order is evict.c's policy), pinning and the heat prior. Called
 * with the store's lock held, except df_cache_pin_hottest and heat open. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "store/evict.h"
#include "store/store_int.h"

/* ---- slots: O_DIRECT buffers, allocated and registered with the rings in chunks ---- */

static slot slot_get(df_store *s) {
  if (!s->cache.n_free) {
    size_t bytes = (size_t)s->cache.slots_per_chunk * s->slot_bytes;
    uint8_t *base = df_xaligned(DF_IO_ALIGN, bytes);
    int bidx = s->sch.io ? df_io_register(s->sch.io, base, bytes) : -1;
    s->cache.slot_chunks = df_xrealloc(s->cache.slot_chunks, (size_t)(s->cache.n_chunks + 1) * sizeof *s->cache.slot_chunks);
    s->cache.slot_chunks[s->cache.n_chunks++] = base;
    if (s->cache.buf_fn) s->cache.buf_fn(s->cache.buf_ud, base, bytes);
    if (s->cache.cap_free < s->cache.n_free + s->cache.slots_per_chunk) {
      s->cache.cap_free = s->cache.n_free + s->cache.slots_per_chunk + s->cache.cap_free;
      s->cache.free_slots = df_xrealloc(s->cache.free_slots, (size_t)s->cache.cap_free * sizeof *s->cache.free_slots);
    }
    for (int i = s->cache.slots_per_chunk - 1; i >= 0; i--)
      s->cache.free_slots[s->cache.n_free++] = (slot){base + (size_t)i * s->slot_bytes, bidx};
  }
  return s->cache.free_slots[--s->cache.n_free];
}

static void slot_put(df_store *s, slot sl) {
  if (s->cache.n_free == s->cache.cap_free) {
    s->cache.cap_free = s->cache.cap_free ? s->cache.cap_free * 2 : 64;
    s->cache.free_slots = df_xrealloc(s->cache.free_slots, (size_t)s->cache.cap_free * sizeof *s->cache.free_slots);
  }
  s->cache.free_slots[s->cache.n_free++] = sl;
}

/* ---- entries ---- */


entry *df_cache_entry_new(df_store *s, int key) {
  entry *e = df_xcalloc(1, sizeof *e);
  e->key = key;
  e->state = E_LOADING;
  e->slot = slot_get(s);
  e->born = s->pass;
  e->parts[0].e = e->parts[1].e = e;
  e->res_next = s->cache.resident_head;
  if (s->cache.resident_head) s->cache.resident_head->res_prev = e;
  s->cache.resident_head = e;
  s->cache.by_key[key] = e;
  s->cache.n_resident++;
  s->cache.n_unref++;
  return e;
}

void df_cache_entry_free(df_store *s, entry *e) {
  if (e->refs == 0) s->cache.n_unref--;
  if (e->is_protected) s->cache.n_protected--;
  s->cache.n_resident--;
  if (e->res_prev) e->res_prev->res_next = e->res_next;
  else s->cache.resident_head = e->res_next;
  if (e->res_next) e->res_next->res_prev = e->res_prev;
  s->cache.by_key[e->key] = NULL;
  slot_put(s, e->slot);
  free(e->err);
  free(e);
}
long df_store_default_cache_mb(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || psz <= 0) return 4096;
  return (long)((double)pages * (double)psz / 4 / 1048576.0);
}

int df_cache_pin_hottest(df_store *s, const float *heat, long pin_mb, df_err *e) {
  uint64_t want = (uint64_t)pin_mb << 20;
  size_t n = s->nkeys, cnt = 0;
  int *order = df_xmalloc(n * sizeof *order);
  for (size_t k = 0; k < n; k++)
    if (heat[k] > 0) order[cnt++] = (int)k;
  /* hottest first; ties by key so the choice is reproducible */
  for (size_t i = 1; i < cnt; i++) {
    int v = order[i];
    size_t j = i;
    while (j > 0 && (heat[order[j - 1]] < heat[v] ||
                     (heat[order[j - 1]] == heat[v] && order[j - 1] > v))) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = v;
  }
  size_t take = (size_t)(want / s->rec_bytes);
  if (take > cnt) take = cnt;
  if (!cnt) df_log_warn("--pin-mb: no heat recorded yet (%s); nothing pinned", s->cache.heat_path ? s->cache.heat_path : "no heat file");
  /* a stream install: pinning asks for these experts, so fetch those not local */
  if (s->net.src && take && df_store_fetch_remote(s, order, (int)take, e)) {
    free(order);
    return df_err_prefix(e, "--pin-mb: ");
  }
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < take; i++) {
    entry *x = df_cache_entry_new(s, order[i]);
    x->pinned = 1;
    x->refs = 1;
    s->cache.n_unref--;
    x->demand = 1;
    if (df_sched_enqueue(s, x, 1)) df_sched_fail(s, x, "no readable copy");
  }
  int rc = 0;
  for (size_t i = 0; i < take && !rc; i++) {
    entry *x = s->cache.by_key[order[i]];
    while (x->state == E_LOADING) pthread_cond_wait(&s->cv, &s->mu);
    if (x->state == E_FAILED) rc = df_err_set(e, "--pin-mb: %s", x->err);
  }
  s->cache.pinned = (long)take;
  pthread_mutex_unlock(&s->mu);
  free(order);
  return rc;
}

void df_cache_touch(df_store *s, entry *x) {
  df_evict_touch(&s->cache.kscore[x->key], &s->cache.ktick[x->key], s->pass, DF_STORE_HALF_LIFE);
}

/* A batch found x ready in the cache. */
void df_cache_hit(df_store *s, entry *x) {
  s->ct.hits++;
  if (++x->hits >= 2 && !x->is_protected && s->cache.n_protected < s->cache.slots * 4 / 5) {
    x->is_protected = 1;
    s->cache.n_protected++;
  }
}

/* Evicts unreferenced entries down to the budget: coldest unprotected first.
 * Entries still loading and prefetches for layers not yet begun stay, and
 * the prefetches (up to the allowance predict.c reads them within) are not
 * counted against the budget: a read ahead never evicts a held entry (with
 * them counted, a predictor reading the experts a cycle had refused evicted
 * as many held ones, which then missed in turn). */
void df_cache_evict(df_store *s) {
  long over = s->cache.n_unref - s->cache.slots;
  if (over <= 0) return;
  df_evict_cand *c = df_xmalloc((size_t)s->cache.n_unref * sizeof *c);
  long nc = 0, nspec = 0;
  for (entry *x = s->cache.resident_head; x; x = x->res_next) {
    if (x->refs || x->pinned) continue;
    if (x->speculative && !df_sched_stale(s, x)) { /* ready or still being read */
      nspec++;
      continue;
    }
    if (x->state == E_LOADING || x->pending > 0) continue;
    if (nc < s->cache.n_unref)
      c[nc++] = (df_evict_cand){x->key, x->is_protected,
                                df_evict_score(s->cache.kscore[x->key], s->cache.ktick[x->key],
                                               s->pass, DF_STORE_HALF_LIFE),
                                x->born == s->pass};
  }
  df_evict_order(c, (size_t)nc);
  over -= nspec < s->cache.prefetch_allowance ? nspec : s->cache.prefetch_allowance;
  for (long i = 0; i < nc && i < over; i++) {
    entry *x = s->cache.by_key[c[i].key];
    if (x->speculative) {
      s->ct.pf_wasted += s->rec_bytes;
      if (s->trace)
        df_trace_wasted(s->trace, df_store_now_rel(s), df_store_key_layer(s, x->key),
                        df_store_key_expert(s, x->key), s->rec_bytes);
    }
    s->ct.evictions++;
    df_cache_entry_free(s, x);
  }
  free(c);
}


/* The heat file: *prior gets its counts (zeros when there is none or it is
 * unreadable, with a warning), which seed every entry's score; this run's
 * counts start at zero. heat_path: NULL = the model folder's default (when
 * writable), "" = none. */
void df_cache_heat_open(df_store *s, const char *model_dir, const char *heat_path, df_heat *prior) {
  /* the default heat file lives in the model folder when that is writable;
   * a read-only checkpoint (no write permission for anyone, which root's
   * access() would not report, or not writable for this user) runs without
   * one, said once per process */
  if (!heat_path) {
    struct stat st;
    if (access(model_dir, W_OK) == 0 && stat(model_dir, &st) == 0 && (st.st_mode & 0222)) {
      s->cache.heat_path = df_path_join(model_dir, "deltafin.heat");
    } else {
      static atomic_int warned;
      if (!atomic_exchange(&warned, 1))
        df_log_warn("model folder %s is read-only: no heat file this run (nothing is written "
                    "there; --heat FILE keeps one elsewhere)", model_dir);
    }
  }
  else if (*heat_path) s->cache.heat_path = df_xstrdup(heat_path);
  int found = 0;
  df_err he;
  if (s->cache.heat_path &&
      df_heat_load(prior, s->cache.heat_path, s->first_layer, s->cfg->n_layers, s->n_experts, &found, &he)) {
    df_log_warn("%s (ignored)", he.msg);
    found = 0;
  }
  if (!found) {
    df_heat_free(prior);
    prior->count = df_xcalloc(s->nkeys, sizeof(float));
  }
  if (found) {
    double sum = 0;
    for (size_t k = 0; k < s->nkeys; k++) sum += prior->count[k];
    s->cache.heat_seed = df_xcalloc(s->nkeys, sizeof *s->cache.heat_seed);
    for (size_t k = 0; k < s->nkeys && sum > 0; k++) {
      double v = prior->count[k] / (sum / (double)s->nkeys);
      s->cache.heat_seed[k] = (float)(v > 8 ? 8 : v);
    }
  }
  s->cache.kscore = df_xcalloc(s->nkeys, sizeof *s->cache.kscore);
  s->cache.ktick = df_xcalloc(s->nkeys, sizeof *s->cache.ktick);
  for (size_t k = 0; k < s->nkeys && s->cache.heat_seed; k++)
    s->cache.kscore[k] = s->cache.heat_seed[k];
  s->cache.heat.first_layer = s->first_layer;
  s->cache.heat.n_layers = s->cfg->n_layers;
  s->cache.heat.n_experts = s->n_experts;
  s->cache.heat.count = df_xcalloc(s->nkeys, sizeof(float));
}

void df_cache_free_all(df_store *s) {
  while (s->cache.resident_head) {
    s->cache.resident_head->refs = 0;
    s->cache.n_unref++;
    df_cache_entry_free(s, s->cache.resident_head);
  }
  size_t bytes = (size_t)s->cache.slots_per_chunk * s->slot_bytes;
  for (int i = 0; i < s->cache.n_chunks; i++) {
    if (s->cache.buf_unfn) s->cache.buf_unfn(s->cache.buf_ud, s->cache.slot_chunks[i], bytes);
    free(s->cache.slot_chunks[i]);
  }
  free(s->cache.slot_chunks);
  free(s->cache.free_slots);
}

/* `deltafin bench --model DIR`: prefill and decode through the engine API,
 * per-phase numbers from the expert store's own statistics, and the storage
 * ceiling (see bench_ceiling.c).
 *
 * Each repeat is a fresh session: prefill P prompt tokens (one batch, or
 * chunks of --prefill-chunk), then N greedy decode steps. The store's
 * counters (bytes read, requests, cache hits, time the model waited on
 * experts) are read before and after each phase, so every phase number is a
 * difference of the store's own totals, not an estimate. Medians and the
 * min..max spread are over the repeats. A warm-up (a short prefill and two
 * decode steps) runs first so one-time costs (page faults of the spine,
 * buffer allocation, thread start) are not counted. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "bench/bench.h"
#include "bench/bench_int.h"
#include "engine/engine.h"
#include "model/k3.h"
#include "store/pack.h"
#include "trace/report.h"

/* ---- store counters ---- */

typedef struct snap {
  double bytes, req, hits, wait;
} snap;

static double jnum(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_number(v) ? json_number_value(v) : 0.0;
}

static json_t *store_json(df_engine *en) {
  char *s = df_engine_stats_json(en);
  json_t *o = s ? json_loads(s, 0, NULL) : NULL;
  free(s);
  json_t *st = o ? json_object_get(o, "store") : NULL;
  if (st) json_incref(st);
  json_decref(o);
  return st;
}

/* The engine's compute by part so far: {"prefill_compute": ..., "decode_compute": ...}. */
static json_t *compute_now(df_engine *en) {
  char *s = df_engine_stats_json(en);
  json_t *o = s ? json_loads(s, 0, NULL) : NULL, *c = json_object();
  free(s);
  for (int i = 0; i < 2; i++) {
    const char *k = i ? "decode_compute" : "prefill_compute";
    json_t *v = o ? json_object_get(o, k) : NULL;
    json_object_set(c, k, v ? v : json_null());
  }
  json_decref(o);
  return c;
}

/* b less a, part by part (seconds, counts, milliseconds each), as JSON text. */
static char *compute_diff(json_t *a, json_t *b) {
  json_t *d = json_object();
  const char *phase;
  json_t *pb;
  json_object_foreach(b, phase, pb) {
    json_t *pa = json_object_get(a, phase), *pd = json_object();
    const char *part;
    json_t *vb;
    json_object_foreach(pb, part, vb) {
      json_t *va = json_object_get(pa, part);
      if (json_is_number(vb)) {
        json_object_set_new(pd, part, json_real(json_number_value(vb) - jnum(pa, part)));
        continue;
      }
      double sec = jnum(vb, "s") - jnum(va, "s"), n = jnum(vb, "n") - jnum(va, "n");
      json_t *k = json_object();
      json_object_set_new(k, "s", json_real(sec));
      json_object_set_new(k, "n", json_integer((json_int_t)n));
      json_object_set_new(k, "ms_each", json_real(n > 0 ? 1e3 * sec / n : 0));
      json_object_set_new(pd, part, k);
    }
    json_object_set_new(d, phase, pd);
  }
  char *txt = json_dumps(d, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(d);
  return txt;
}

static void take_snap(df_engine *en, snap *sn) {
  json_t *st = store_json(en);
  memset(sn, 0, sizeof *sn);
  sn->bytes = (double)df_engine_expert_bytes(en);
  if (st) {
    sn->req = jnum(st, "expert_requests");
    sn->hits = jnum(st, "cache_hits");
    sn->wait = jnum(st, "wait_seconds");
  }
  json_decref(st);
}

/* ---- statistics over repeats ---- */

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static void spread(const double *v, int n, df_bench_stat *s) {
  double *t = df_xmalloc((size_t)n * sizeof *t);
  memcpy(t, v, (size_t)n * sizeof *t);
  qsort(t, (size_t)n, sizeof *t, cmp_d);
  s->min = t[0];
  s->max = t[n - 1];
  s->median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  free(t);
}

enum { M_SPT, M_TPS, M_BPT, M_GBPS, M_WAIT, M_COMP, M_HIT, M_AMP, M_USE, NM };

static void phase_metrics(double dt, int tokens, const snap *a, const snap *b, double rec,
                          double *m) {
  double bytes = b->bytes - a->bytes, req = b->req - a->req, hits = b->hits - a->hits;
  double wait = b->wait - a->wait;
  m[M_SPT] = dt / tokens;
  m[M_TPS] = tokens / dt;
  m[M_BPT] = bytes / tokens;
  m[M_GBPS] = bytes / dt / 1e9;
  m[M_WAIT] = wait / dt;
  m[M_COMP] = (dt - wait) / tokens;
  m[M_HIT] = req > 0 ? hits / req : 0;
  /* bytes read over the bytes of the experts the batches needed (each
   * request is one unique expert of one layer batch) */
  m[M_AMP] = req > 0 && rec > 0 ? bytes / (req * rec) : 0;
  m[M_USE] = req > 0 && rec > 0 ? req * rec / dt / 1e9 : m[M_GBPS];
}

/* st: the store whose trace gets the generation marks (as df_generate's:
 * "gen" before the prompt, "token" as each id is picked). */
static int prefill(df_session *s, df_store *st, const int *ids, int n, int chunk, float *logits, df_err *e) {
  df_store_trace_mark(st, "gen", n);
  if (chunk <= 0) chunk = n;
  for (int off = 0; off < n; off += chunk) {
    int m = n - off < chunk ? n - off : chunk;
    if (df_session_forward(s, ids + off, m, off + m == n ? logits : NULL, NULL, e)) return -1;
  }
  return 0;
}

/* Where the prefill ends inside one df_generate (its on_prefill callback):
 * the time, the store's counters and the spine stream's bytes then. */
typedef struct phase_mark {
  df_engine *en;
  df_store *store;
  int P;
  double t1, sp0, sw0;
  snap b;
  size_t dec0;
} phase_mark;

static void mark_prefill_end(void *ud, int done) {
  phase_mark *m = ud;
  if (done < m->P) return;
  m->t1 = df_now();
  take_snap(m->en, &m->b);
  m->dec0 = df_store_reads_logged(m->store);
  m->sp0 = (double)df_engine_spine_stream_bytes(m->en, &m->sw0);
}

/* One generation's speculation counts into the bench's result. */
static void add_spec(df_bench_result *res, const df_gen_stats *gs, int nout) {
  res->spec_verify += gs->n_verify, res->spec_drafted += gs->n_drafted;
  res->spec_accepted += gs->n_accepted, res->spec_passes += gs->n_passes;
  res->spec_tokens += nout;
  for (int k = 1; k <= 16 && k <= DF_DRAFT_MAX; k++) {
    res->spec_block_len[k - 1] += gs->block_len[k];
    res->spec_acc_at[k - 1] += gs->acc_at[k - 1];
  }
  if (gs->draft_src) snprintf(res->draft, sizeof res->draft, "%s", gs->draft_src);
}

/* With the engine's --draft the prompt and the decode run as one
 * df_generate: a draft that reads the target's hidden states (DSpark) must
 * see the prompt's, so its prefill cannot be run apart; m gets the prefill's
 * end. The counts go to res as decode()'s do. */
static int gen_phases(df_session *s, const int *ids, int P, int N, int chunk, phase_mark *m,
                      df_bench_result *res, df_err *e) {
  df_gen_opts go;
  df_gen_opts_default(&go);
  go.max_new = N;
  go.prefill_chunk = chunk > 0 ? chunk : P;
  go.on_prefill = mark_prefill_end;
  go.ud = m;
  int *out, nout;
  df_gen_stats gs;
  if (df_generate(s, ids, P, &go, &out, &nout, &gs, e)) return -1;
  free(out);
  add_spec(res, &gs, nout);
  return 0;
}

/* With the engine's --draft, decoding is df_generate's (speculative blocks,
 * the same ids); its counts go to res. */
static int decode(df_session *s, df_store *st, const int *prompt, int np, int n, float *logits,
                  int vocab, df_bench_result *res, df_err *e) {
  df_engine *en = df_session_engine(s);
  if (strcmp(df_engine_draft(en, NULL), "off")) {
    df_gen_opts go;
    df_gen_opts_default(&go);
    go.max_new = n;
    go.prefill_chunk = 0;
    go.history = prompt; /* what the session holds: the drafts look at it */
    go.nhistory = np;
    int *out, nout;
    df_gen_stats gs;
    if (df_generate(s, NULL, 0, &go, &out, &nout, &gs, e)) return -1;
    free(out);
    if (res) add_spec(res, &gs, nout);
    return 0;
  }
  for (int i = 0; i < n; i++) {
    int id = df_argmax(logits, vocab);
    df_store_trace_mark(st, "token", i + 1);
    if (df_session_forward(s, &id, 1, logits, NULL, e)) return -1;
  }
  return 0;
}

static void fill_phase(df_bench_phase *p, double (*v)[NM], int R) {
  double *col = df_xmalloc((size_t)R * sizeof *col);
  df_bench_stat *dst[NM] = {&p->s_per_token, &p->tokens_per_s, &p->expert_bytes_per_token,
                            &p->read_gbps,   &p->io_wait_frac, &p->compute_s_per_token,
                            &p->cache_hit_rate, &p->amplification, &p->useful_gbps};
  for (int k = 0; k < NM; k++) {
    for (int r = 0; r < R; r++) col[r] = v[r][k];
    spread(col, R, dst[k]);
  }
  free(col);
}

/* The spine stream's reads of one pass, as reads to replay: every chunk,
 * the short last one of a unit included (the ceiling sums each read's bytes). */
typedef struct spine_rd {
  df_bench_reads rd;
} spine_rd;

static void spine_read_cb(void *ud, const char *path, int drive, uint64_t off, uint32_t len) {
  df_bench_reads *rd = &((spine_rd *)ud)->rd;
  int f = 0;
  while (f < rd->nfiles && strcmp(rd->files[f], path)) f++;
  if (f == rd->nfiles) {
    rd->files = df_xrealloc(rd->files, (size_t)(f + 1) * sizeof *rd->files);
    rd->drive = df_xrealloc(rd->drive, (size_t)(f + 1) * sizeof *rd->drive);
    rd->files[f] = df_xstrdup(path);
    rd->drive[f] = drive; /* the store drive the real read is queued on */
    rd->nfiles = f + 1;
  }
  if (drive + 1 > rd->ndrives) rd->ndrives = drive + 1;
  if (len > rd->len) rd->len = len;
  rd->r = df_xrealloc(rd->r, (size_t)(rd->n + 1) * sizeof *rd->r);
  rd->r[rd->n++] = (df_bench_read){f, off, len, len};
}

/* One configuration: open, warm up, repeat, measure the ceiling. */
static int bench_one(const df_bench_mopts *o, const char *manifest, df_bench_result *res,
                     df_err *e) {
  memset(res, 0, sizeof *res);

  df_engine_opts eo = o->engine;
  eo.store.manifest = manifest;
  /* the largest batch it runs, for the memory plan (as run does) */
  if (eo.max_rows <= 0) eo.max_rows = o->prefill_chunk > 0 ? o->prefill_chunk : o->prompt_tokens;
  df_engine *en = NULL;
  json_t *comp0 = NULL; /* the compute by part after the warm-up */
  if (df_engine_open(&en, &eo, e)) return -1;
  df_store *store = df_engine_store(en);
  /* the ceiling replays the decode phase's reads: the store logs them */
  if (!o->no_ceiling) df_store_log_reads(store, 1);
  const df_config *c = df_engine_config(en);
  int vocab = c->vocab, P = o->prompt_tokens, N = o->new_tokens, R = o->repeat;
  /* a fixed pseudo-random prompt over ordinary (non-special) ids */
  int span = vocab > 512 ? vocab - 256 : vocab;
  int *ids = df_xmalloc((size_t)P * sizeof *ids);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < P; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    ids[i] = (int)((x >> 33) % (uint64_t)span);
  }
  float *logits = df_xmalloc((size_t)vocab * sizeof *logits);
  int rc = -1;
  double(*pm)[NM] = df_xcalloc((size_t)R, sizeof *pm);
  double(*dm)[NM] = df_xcalloc((size_t)R, sizeof *dm);
  size_t *dec0 = df_xcalloc((size_t)R, sizeof *dec0), *dec1 = df_xcalloc((size_t)R, sizeof *dec1);
  json_t *st0 = store_json(en);
  double rec = st0 ? jnum(st0, "record_bytes") : 0;
  res->queue_depth = st0 ? (int)jnum(st0, "queue_depth") : 0;
  snprintf(res->io, sizeof res->io, "%s",
           st0 && json_is_string(json_object_get(st0, "io")) ? json_string_value(json_object_get(st0, "io")) : "?");
  res->o_direct = st0 ? json_is_true(json_object_get(st0, "o_direct")) : 0;
  /* the emulation as the store parsed it: the replays run on the same drives */
  const df_io_emu emu = df_store_iocfg_of(df_engine_store(en))->emu;
  json_decref(st0);
  res->record_bytes = rec;
  snprintf(res->kernels, sizeof res->kernels, "%s", df_engine_kernels(en));
  res->threads = df_engine_threads(en);
  {
    json_t *st = store_json(en);
    const char *src = st ? json_string_value(json_object_get(st, "source")) : NULL;
    const char *loc = st ? json_string_value(json_object_get(st, "location")) : NULL;
    json_t *drv = st ? json_object_get(st, "drives") : NULL;
    res->ndrives = drv ? (int)json_array_size(drv) : 0;
    snprintf(res->source, sizeof res->source, "%s %s", src ? src : "?", loc ? loc : "?");
    json_decref(st);
  }

  snprintf(res->draft, sizeof res->draft, "%s", df_engine_draft(en, &res->draft_max));
  res->draft_auto = !strcmp(res->draft, "auto");
  /* warm-up */
  {
    df_session *s = df_session_new(en);
    int wp = P < 8 ? P : 8;
    if (prefill(s, store, ids, wp, 0, logits, e) || decode(s, store, ids, wp, 2, logits, vocab, NULL, e)) {
      df_session_free(s);
      goto out;
    }
    df_session_free(s);
  }
  int drafting = strcmp(df_engine_draft(en, NULL), "off") != 0;
  comp0 = compute_now(en);
  for (int r = 0; r < R; r++) {
    df_session *s = df_session_new(en);
    snap a, b, d;
    take_snap(en, &a);
    double t0 = df_now(), t1, t2, sw0 = 0, sw1 = 0, sp0;
    if (drafting) {
      phase_mark m = {.en = en, .store = store, .P = P};
      if (gen_phases(s, ids, P, N, o->prefill_chunk, &m, res, e)) {
        df_session_free(s);
        goto out;
      }
      t1 = t2 = m.t1, b = m.b, dec0[r] = m.dec0, sp0 = m.sp0, sw0 = m.sw0;
    } else {
      if (prefill(s, store, ids, P, o->prefill_chunk, logits, e)) {
        df_session_free(s);
        goto out;
      }
      t1 = df_now();
      take_snap(en, &b);
      dec0[r] = df_store_reads_logged(store);
      sp0 = (double)df_engine_spine_stream_bytes(en, &sw0);
      t2 = df_now();
      if (decode(s, store, ids, P, N, logits, vocab, res, e)) {
        df_session_free(s);
        goto out;
      }
    }
    double t3 = df_now();
    res->spine_decode_bytes += (double)df_engine_spine_stream_bytes(en, &sw1) - sp0;
    res->spine_decode_wait += sw1 - sw0;
    res->decode_seconds += t3 - t2;
    take_snap(en, &d);
    dec1[r] = df_store_reads_logged(store);
    df_session_free(s);
    phase_metrics(t1 - t0, P, &a, &b, rec, pm[r]);
    phase_metrics(t3 - t2, N, &b, &d, rec, dm[r]);
    res->decode_bytes += d.bytes - b.bytes;
    if (!o->json)
      fprintf(stderr, "repeat %d/%d: prefill %.4f s/token, decode %.4f s/token, %.2f GB/s expert reads\n",
              r + 1, R, pm[r][M_SPT], dm[r][M_SPT], dm[r][M_GBPS]);
  }
  fill_phase(&res->prefill, pm, R);
  fill_phase(&res->decode, dm, R);
  res->prompt_tokens = P;
  res->new_tokens = N;
  res->repeat = R;
  {
    json_t *st = store_json(en);
    json_t *drv = st ? json_object_get(st, "drives") : NULL;
    res->drives_json = drv ? json_dumps(drv, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(st);
    res->device_json = df_engine_device_json(en);
    snprintf(res->device, sizeof res->device, "%s", df_engine_device(en));
    json_t *comp1 = compute_now(en);
    res->compute_json = compute_diff(comp0, comp1);
    json_decref(comp1);
  }
  rc = 0;
  /* the ceiling: the decode phases' reads, in order (up to 4 GB, at least
   * one repeat's), located by the store before the engine (and its cache)
   * goes away */
  df_bench_reads rd = {0};
  if (!o->no_ceiling) {
    size_t cap = 0, ns = 0;
    for (int r = 0; r < R; r++) cap += dec1[r] - dec0[r];
    df_store_read *sel = df_xmalloc((cap ? cap : 1) * sizeof *sel);
    for (int r = 0; r < R; r++) {
      if (r > 0 && (double)ns * rec >= 4e9) break;
      ns += df_store_read_log(store, dec0[r], dec1[r] - dec0[r], sel + ns);
    }
    if (ns == 0) {
      /* nothing to replay, and nothing the drives were waited on for */
      df_log_warn("storage ceiling not measured: the decode phases read no experts (each came "
                  "from the RAM cache%s)", strcmp(df_engine_device(en), "cpu") ? " or the GPU's tier" : "");
      rd.n = 0;
    } else if (df_bench_reads_from_store(&rd, store, sel, ns, e) < 0) {
      df_log_warn("storage ceiling not measured: %s", e->msg);
      rd.n = 0;
    }
    free(sel);
  }
  spine_rd srd = {{0}};
  int sqd = df_engine_spine_reads(en, spine_read_cb, &srd);
  res->spine_units = sqd > 0;
  res->spine_qd = sqd;
  const char *ssrc = df_engine_spine_source(en, &res->spine_drives);
  snprintf(res->spine_source, sizeof res->spine_source, "%s", ssrc ? ssrc : "");
  df_engine_close(en);
  en = NULL;
  if (!o->no_ceiling && srd.rd.n > 0) {
    /* the spine's drives: its reads replayed through the same engine and
     * emulation, each on the drive the real read goes to, with as many in
     * flight per drive as the store lets spine reads have (queue depth - 1,
     * rank.h), two passes' worth */
    df_bench_ceiling_opts co = {.io = res->io, .qd = sqd, .emu = emu,
                                .max_bytes = 2.0 * srd.rd.n * (double)srd.rd.len};
    if (df_bench_ceiling(&srd.rd, &co, &res->spine_ceiling, e) == 0) res->have_spine_ceiling = 1;
    else df_log_warn("spine ceiling not measured: %s", e->msg);
  }
  df_bench_reads_free(&srd.rd);
  if (!o->no_ceiling && rd.n > 0) {
    df_bench_ceiling_opts co = {.io = res->io, .qd = res->queue_depth, .emu = emu};
    if (df_bench_ceiling(&rd, &co, &res->ceiling, e) == 0) res->have_ceiling = 1;
    else df_log_warn("storage ceiling not measured: %s", e->msg);
    df_bench_fio(&rd, res->queue_depth, res->ceiling.bytes, o->engine.store.emulate_drives != NULL, &res->fio);
  }
  df_bench_reads_free(&rd);
out:
  json_decref(comp0);
  if (en) df_engine_close(en);
  free(ids);
  free(logits);
  free(pm);
  free(dm);
  free(dec0);
  free(dec1);
  return rc;
}

/* ---- printing ---- */

static void print_stat_row(FILE *out, const char *name, const df_bench_phase *p) {
  fprintf(out, "%-8s %9.4f [%.4f..%.4f] %9.2f %11.1f %9.3f %6.0f%% %9.4f %8.1f%% %6.2f\n", name,
          p->s_per_token.median, p->s_per_token.min, p->s_per_token.max, p->tokens_per_s.median,
          p->expert_bytes_per_token.median / 1e6, p->read_gbps.median, 100 * p->io_wait_frac.median,
          p->compute_s_per_token.median, 100 * p->cache_hit_rate.median, p->amplification.median);
}

/* The longest block length that occurred (block_lengths/accepted_at run 1..it). */
static int spec_top(const df_bench_result *r) {
  int top = 0;
  for (int k = 0; k < 16; k++)
    if (r->spec_block_len[k]) top = k + 1;
  return top;
}

static void print_text(FILE *out, const df_bench_mopts *o, const df_bench_result *r) {
  fprintf(out, "experts from %s (%d drive%s%s), io %s qd %d%s, cache %ld MB; kernels %s, %d threads\n",
          r->source, r->ndrives, r->ndrives == 1 ? "" : "s", o->engine.store.emulate_drives ? ", EMULATED" : "", r->io,
          r->queue_depth, r->o_direct ? " O_DIRECT" : " (page cache!)", o->engine.store.cache_mb, r->kernels, r->threads);
  if (r->device_json) {
    json_t *d = json_loads(r->device_json, 0, NULL);
    fprintf(out, "device %s (%s): %.0f products on the GPU, %.0f on the CPU, %.3f s; weight tier %.1f MB, "
                 "%.0f hits, %.0f misses; weights in %.1f MB in %.3f s\n",
            r->device, json_string_value(json_object_get(d, "name")), jnum(d, "products"),
            jnum(d, "fallbacks"), jnum(d, "compute_s"), jnum(d, "tier_bytes") / 1e6, jnum(d, "tier_hits"),
            jnum(d, "tier_misses"), jnum(d, "weight_h2d_bytes") / 1e6, jnum(d, "weight_h2d_s"));
    json_decref(d);
  }
  fprintf(out, "prompt %d tokens (%s), %d new tokens, %d repeat%s after a warm-up; median [min..max]\n",
          r->prompt_tokens, o->prefill_chunk > 0 ? "chunked" : "one batch", r->new_tokens, r->repeat,
          r->repeat == 1 ? "" : "s");
  fprintf(out, "%-8s %27s %9s %11s %9s %7s %9s %9s %6s\n", "phase", "s/token", "tok/s", "expert MB/t",
          "read GB/s", "IOwait", "compute/t", "cache hit", "ampl");
  print_stat_row(out, "prefill", &r->prefill);
  print_stat_row(out, "decode", &r->decode);
  if (r->have_ceiling) {
    fprintf(out, "storage ceiling: the store's I/O engine (%s, qd %d per drive%s) replaying the decode phase's %d expert reads (%.2f GB) in order, no compute: %.3f GB/s%s\n",
            r->io, r->queue_depth, r->ceiling.registered ? ", registered buffers" : "", r->ceiling.reads,
            r->ceiling.bytes / 1e9, r->ceiling.gbps, o->engine.store.emulate_drives ? " (EMULATED drives)" : "");
    double eff = r->decode.read_gbps.median / r->ceiling.gbps;
    fprintf(out, "storage efficiency (decode expert-read GB/s / ceiling): %.1f%%\n", 100 * eff);
    fprintf(out, "useful storage efficiency (decode GB/s of the experts its tokens needed, %.3f, / ceiling; "
                 "unused prefetches not counted): %.1f%%\n",
            r->decode.useful_gbps.median, 100 * r->decode.useful_gbps.median / r->ceiling.gbps);
    if (eff > 1.05)
      fprintf(out, "warning: decode read faster than the replay of its own reads: a cache below deltafin "
                   "(drive, RAID or a VM host) served part of them, or other traffic slowed the replay; "
                   "this is not a storage efficiency (repeat on a quiet machine, or with a model larger "
                   "than that cache)\n");
    double read_t = r->decode.expert_bytes_per_token.median / (r->ceiling.gbps * 1e9);
    double comp = r->decode.compute_s_per_token.median;
    if (r->spine_units && r->new_tokens > 0 && r->repeat > 0) {
      /* the store's compute figure still holds the spine's waits: take
       * them out, and put the spine's bytes into the reading side */
      double ntok = (double)r->new_tokens * r->repeat;
      comp -= r->spine_decode_wait / ntok;
      if (comp < 0) comp = 0;
      read_t += r->spine_decode_bytes / ntok / (r->ceiling.gbps * 1e9);
    }
    fprintf(out, "decode per token: compute (not waiting on experts%s) %.4f s vs reading its experts%s at the ceiling %.4f s: %s\n",
            r->spine_units ? " or the spine" : "", comp, r->spine_units ? " and streamed spine" : "",
            read_t, comp < read_t ? "I/O-bound" : "compute-bound");
  } else if (!o->no_ceiling) {
    fprintf(out, "storage ceiling: not measured (see the warning above)\n");
  }
  if (r->spec_tokens)
    fprintf(out, "speculation: --draft %s, K %d: %.0f%% of %ld drafts accepted, %.2f tokens per target pass "
                 "(%ld blocks), %.2f MB of experts per token\n",
            r->draft, r->draft_max, r->spec_drafted ? 100.0 * r->spec_accepted / r->spec_drafted : 0.0,
            r->spec_drafted, (double)r->spec_tokens / (double)r->spec_passes, r->spec_verify,
            r->decode_bytes / (double)r->spec_tokens / 1e6);
  if (r->spec_verify) {
    int top = spec_top(r);
    fprintf(out, "speculation: %sblocks by length:", r->draft_auto ? "(--draft auto) " : "");
    for (int k = 0; k < top; k++) fprintf(out, " %ld", r->spec_block_len[k]);
    fprintf(out, "; accepted by position:");
    for (int k = 0; k < top; k++) fprintf(out, " %ld", r->spec_acc_at[k]);
    fprintf(out, "\n");
  }
  if (r->spine_units && r->decode_seconds > 0) {
    double sg = r->spine_decode_bytes / r->decode_seconds / 1e9;
    double eg = r->decode_bytes / r->decode_seconds / 1e9;
    int from_pack = !strcmp(r->spine_source, "pack");
    fprintf(out, "spine stream (decode): %.1f MB per token, %.3f GB/s from %s (%d drive%s)%s\n",
            r->spine_decode_bytes / (r->new_tokens * (double)r->repeat) / 1e6, sg,
            from_pack ? "the pack's spine section" : "the shards", r->spine_drives,
            r->spine_drives == 1 ? "" : "s", o->engine.store.emulate_drives ? " (EMULATED)" : "");
    if (r->have_spine_ceiling) {
      fprintf(out, "spine ceiling: its %d reads of up to %u MiB replayed on their drives (%s, qd %d per drive: "
                   "the spine reads the store keeps in flight, its queue depth - 1), no compute: "
                   "%.3f GB/s; spine efficiency %.1f%%\n",
              r->spine_ceiling.reads, DF_K3_STREAM_CHUNK >> 20, r->io, r->spine_qd, r->spine_ceiling.gbps,
              100 * sg / r->spine_ceiling.gbps);
      if (r->have_ceiling && o->engine.store.emulate_drives)
        fprintf(out, "total streamed (spine + experts) %.3f GB/s vs the drives' ceiling %.3f GB/s: %.1f%% "
                     "(EMULATED: %s)\n",
                sg + eg, r->ceiling.gbps, 100 * (sg + eg) / r->ceiling.gbps,
                from_pack ? "the pack's spine section shares the emulated drives with the experts"
                          : "the spine's shards share emulated drive 0 with the experts");
      else if (r->have_ceiling)
        fprintf(out, "total streamed (spine + experts) %.3f GB/s; expert ceiling %.3f GB/s, spine ceiling "
                     "%.3f GB/s (real drives: whether they share one is not known here)\n",
                sg + eg, r->ceiling.gbps, r->spine_ceiling.gbps);
    }
  }
  if (r->fio.ran)
    fprintf(out, "fio (%s, %s, bs %u KiB, iodepth %d, O_DIRECT, %s): %.3f GB/s%s\n", r->fio.engine,
            r->fio.file, r->fio.bs >> 10, r->fio.iodepth, r->fio.pattern, r->fio.gbps,
            r->have_ceiling ? "" : "");
  else if (r->fio.why[0])
    fprintf(out, "fio: %s\n", r->fio.why);
  if (r->decode.s_per_token.median > 0)
    fprintf(out, "prefill s/token over decode s/token: %.3f\n",
            r->prefill.s_per_token.median / r->decode.s_per_token.median);
}

static json_t *stat_json(const df_bench_stat *s) {
  json_t *o = json_object();
  json_object_set_new(o, "median", json_real(s->median));
  json_object_set_new(o, "min", json_real(s->min));
  json_object_set_new(o, "max", json_real(s->max));
  return o;
}

static json_t *phase_json(const df_bench_phase *p) {
  json_t *o = json_object();
  json_object_set_new(o, "s_per_token", stat_json(&p->s_per_token));
  json_object_set_new(o, "tokens_per_s", stat_json(&p->tokens_per_s));
  json_object_set_new(o, "expert_bytes_per_token", stat_json(&p->expert_bytes_per_token));
  json_object_set_new(o, "read_gbps", stat_json(&p->read_gbps));
  json_object_set_new(o, "io_wait_fraction", stat_json(&p->io_wait_frac));
  json_object_set_new(o, "compute_s_per_token", stat_json(&p->compute_s_per_token));
  json_object_set_new(o, "cache_hit_rate", stat_json(&p->cache_hit_rate));
  json_object_set_new(o, "read_amplification", stat_json(&p->amplification));
  json_object_set_new(o, "useful_read_gbps", stat_json(&p->useful_gbps));
  return o;
}

/* Speculation's figures (null without --draft). */
static json_t *spec_json(const df_bench_result *r) {
  if (!r->spec_tokens) return json_null();
  json_t *o = json_object();
  json_object_set_new(o, "draft", json_string(r->draft));
  json_object_set_new(o, "auto", json_boolean(r->draft_auto));
  json_object_set_new(o, "drafted", json_integer(r->spec_drafted));
  json_object_set_new(o, "accepted", json_integer(r->spec_accepted));
  json_t *bl = json_array(), *aa = json_array();
  for (int k = 0, top = spec_top(r); k < top; k++) {
    json_array_append_new(bl, json_integer(r->spec_block_len[k]));
    json_array_append_new(aa, json_integer(r->spec_acc_at[k]));
  }
  json_object_set_new(o, "block_lengths", bl);
  json_object_set_new(o, "accepted_at", aa);
  json_object_set_new(o, "draft_max", json_integer(r->draft_max));
  json_object_set_new(o, "verify_blocks", json_integer(r->spec_verify));
  json_object_set_new(o, "acceptance", r->spec_drafted ? json_real((double)r->spec_accepted / (double)r->spec_drafted) : json_null());
  json_object_set_new(o, "tokens_per_target_pass", json_real((double)r->spec_tokens / (double)r->spec_passes));
  json_object_set_new(o, "expert_bytes_per_token", json_real(r->decode_bytes / (double)r->spec_tokens));
  return o;
}

static json_t *result_json(const df_bench_mopts *o, const df_bench_result *r) {
  json_t *j = json_object();
  json_object_set_new(j, "decode_s_per_token", json_real(r->decode.s_per_token.median));
  json_object_set_new(j, "prefill_s_per_token", json_real(r->prefill.s_per_token.median));
  json_object_set_new(j, "expert_read_gbps", json_real(r->decode.read_gbps.median));
  json_object_set_new(j, "ceiling_gbps", r->have_ceiling ? json_real(r->ceiling.gbps) : json_null());
  json_object_set_new(j, "storage_efficiency",
                      r->have_ceiling ? json_real(r->decode.read_gbps.median / r->ceiling.gbps) : json_null());
  json_object_set_new(j, "useful_storage_efficiency",
                      r->have_ceiling ? json_real(r->decode.useful_gbps.median / r->ceiling.gbps) : json_null());
  json_object_set_new(j, "prefill_read_amplification", json_real(r->prefill.amplification.median));
  json_object_set_new(j, "fio_gbps", r->fio.ran ? json_real(r->fio.gbps) : json_null());
  json_object_set_new(j, "speculation", spec_json(r));
  json_object_set_new(j, "emulated", o->engine.store.emulate_drives ? json_string(o->engine.store.emulate_drives) : json_null());
  json_object_set_new(j, "source", json_string(r->source));
  json_object_set_new(j, "drives", json_integer(r->ndrives));
  json_object_set_new(j, "io", json_string(r->io));
  json_object_set_new(j, "queue_depth", json_integer(r->queue_depth));
  json_object_set_new(j, "cache_mb", json_integer(o->engine.store.cache_mb));
  json_object_set_new(j, "kernels", json_string(r->kernels));
  json_object_set_new(j, "threads", json_integer(r->threads));
  json_object_set_new(j, "device_name", json_string(r->device));
  json_t *dv = r->device_json ? json_loads(r->device_json, 0, NULL) : NULL;
  json_object_set_new(j, "device", dv ? dv : json_null());
  json_object_set_new(j, "prompt_tokens", json_integer(r->prompt_tokens));
  json_object_set_new(j, "new_tokens", json_integer(r->new_tokens));
  json_object_set_new(j, "prefill_chunk", json_integer(o->prefill_chunk));
  json_object_set_new(j, "repeat", json_integer(r->repeat));
  json_object_set_new(j, "prefill", phase_json(&r->prefill));
  json_object_set_new(j, "decode", phase_json(&r->decode));
  json_t *cj = r->compute_json ? json_loads(r->compute_json, 0, NULL) : NULL;
  json_object_set_new(j, "compute_repeats", cj ? cj : json_null());
  if (r->have_ceiling) {
    json_t *c = json_object();
    json_object_set_new(c, "gbps", json_real(r->ceiling.gbps));
    json_object_set_new(c, "bytes", json_real(r->ceiling.bytes));
    json_object_set_new(c, "reads", json_integer(r->ceiling.reads));
    json_object_set_new(c, "seconds", json_real(r->ceiling.seconds));
    json_object_set_new(c, "registered_buffers", json_boolean(r->ceiling.registered));
    json_object_set_new(j, "ceiling", c);
  }
  if (r->spine_units && r->decode_seconds > 0) {
    json_t *sp = json_object();
    double sg = r->spine_decode_bytes / r->decode_seconds / 1e9;
    json_object_set_new(sp, "decode_bytes", json_real(r->spine_decode_bytes));
    json_object_set_new(sp, "source", json_string(r->spine_source));
    json_object_set_new(sp, "drives", json_integer(r->spine_drives));
    json_object_set_new(sp, "replay_qd", json_integer(r->spine_qd));
    json_object_set_new(sp, "decode_gbps", json_real(sg));
    json_object_set_new(sp, "expert_decode_gbps", json_real(r->decode_bytes / r->decode_seconds / 1e9));
    json_object_set_new(sp, "ceiling_gbps", r->have_spine_ceiling ? json_real(r->spine_ceiling.gbps) : json_null());
    json_object_set_new(sp, "efficiency",
                        r->have_spine_ceiling ? json_real(sg / r->spine_ceiling.gbps) : json_null());
    double tg = sg + r->decode_bytes / r->decode_seconds / 1e9;
    json_object_set_new(sp, "total_gbps", json_real(tg));
    json_object_set_new(sp, "total_efficiency", r->have_ceiling && o->engine.store.emulate_drives
                                                    ? json_real(tg / r->ceiling.gbps)
                                                    : json_null());
    json_object_set_new(j, "spine_stream", sp);
  }
  json_t *dr = r->drives_json ? json_loads(r->drives_json, 0, NULL) : NULL;
  json_object_set_new(j, "store_drives", dr ? dr : json_null());
  return j;
}

/* ---- drives and the ladder ---- */

static int split_list(const char *s, char ***out) {
  int n = 0;
  char **v = NULL;
  char *dup = df_xstrdup(s), *save = NULL;
  for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    v = df_xrealloc(v, (size_t)(n + 1) * sizeof *v);
    v[n++] = df_xstrdup(t);
  }
  free(dup);
  *out = v;
  return n;
}

/* Packs the model onto k drives (subfolders deltafin-bench-<k> of each, so
 * the packs of a ladder do not overwrite each other and a re-run resumes
 * them); *manifest gets the manifest path (caller frees). */
static int pack_k(const df_bench_mopts *o, char **drives, int k, int quiet, char **manifest,
                  df_err *e) {
  char sub[64];
  snprintf(sub, sizeof sub, "deltafin-bench-%d", k);
  /* the drive folders themselves follow pack's rule (only the last
   * component is created), the bench subfolders inside them are pack's */
  for (int i = 0; i < k; i++)
    if (df_pack_make_drive_dir(drives[i], e)) return -1;
  char **dirs = df_xcalloc((size_t)k, sizeof *dirs);
  for (int i = 0; i < k; i++) dirs[i] = df_path_join(drives[i], sub);
  char *mf = df_path_join(dirs[0], "manifest.json");
  df_pack_opts po = {.model_dir = o->engine.model_dir, .ndrives = k, .drives = (const char *const *)dirs,
                     .heat_path = "", .manifest_out = mf, .progress = !quiet};
  if (!quiet) fprintf(stderr, "packing the experts onto %d drive%s (%s%s)...\n", k, k == 1 ? "" : "s", dirs[0], k > 1 ? ", ..." : "");
  int rc = df_pack(&po, e);
  for (int i = 0; i < k; i++) free(dirs[i]);
  free(dirs);
  if (rc) {
    free(mf);
    return -1;
  }
  *manifest = mf;
  return 0;
}

/* The report path of ladder step k (of nres): REPORT, or REPORT with
 * "-<k>drives" before its extension. */
static char *report_path(const char *rep, int k, int nres) {
  size_t n = strlen(rep) + 32;
  char *p = df_xmalloc(n);
  if (nres <= 1) {
    snprintf(p, n, "%s", rep);
    return p;
  }
  const char *dot = strrchr(rep, '.'), *sl = strrchr(rep, '/');
  if (!dot || (sl && dot < sl)) dot = rep + strlen(rep);
  snprintf(p, n, "%.*s-%ddrives%s", (int)(dot - rep), rep, k, dot);
  return p;
}

/* One configuration's trace report: the HTML and the JSON next to it. */
static int write_report(const char *html, const char *trace, FILE *msg, df_err *e) {
  size_t n = strlen(html) + 8;
  char *js = df_xmalloc(n);
  snprintf(js, n, "%s.json", html);
  df_trace_out to = {.html = html, .json = js};
  char *buf = NULL;
  size_t len = 0;
  FILE *sink = open_memstream(&buf, &len);
  int rc = sink ? df_trace_report(trace, sink, &to, e) : df_err_errno(e, "report");
  if (sink) fclose(sink);
  free(buf);
  if (!rc) fprintf(msg, "report: %s (series %s, trace %s)\n", html, js, trace);
  free(js);
  return rc;
}

int df_bench_model(const df_bench_mopts *o, FILE *out, df_err *e) {
  char **drives = NULL;
  int nd = 0;
  if (o->drives) nd = split_list(o->drives, &drives);
  if (o->ladder && nd == 0) {
    if (!o->engine.store.emulate_drives)
      return df_err_set(e, "--ladder needs --drives D1,D2,... (real drives) or --emulate-drives BW "
                           "(then 4 emulated drives are packed under %s/bench-drives)", o->engine.model_dir);
    nd = 4;
    drives = df_xcalloc(4, sizeof *drives);
    char *base = df_path_join(o->engine.model_dir, "bench-drives");
    for (int i = 0; i < 4; i++) {
      char nm[16];
      snprintf(nm, sizeof nm, "d%d", i + 1);
      drives[i] = df_path_join(base, nm);
    }
    free(base);
  }
  if ((o->engine.store.manifest || o->engine.store.no_pack) && nd > 0) {
    for (int i = 0; i < nd; i++) free(drives[i]);
    free(drives);
    return df_err_set(e, "--drives/--ladder pack the experts themselves: drop --store/--no-pack");
  }
  int k0 = o->ladder ? 1 : nd, k1 = nd;
  int nres = nd > 0 ? k1 - k0 + 1 : 1;
  df_bench_result *res = df_xcalloc((size_t)nres, sizeof *res);
  int rc = 0;
  for (int i = 0; i < nres; i++) {
    char *mf = NULL;
    if (nd > 0 && pack_k(o, drives, k0 + i, o->json, &mf, e)) {
      rc = -1;
      nres = i;
      break;
    }
    df_bench_mopts oi = *o;
    char *rep = NULL, *trace = NULL;
    if (o->report) {
      rep = report_path(o->report, k0 + i, nres);
      size_t n = strlen(rep) + 16;
      trace = df_xmalloc(n);
      snprintf(trace, n, "%s.trace.jsonl", rep);
      oi.engine.store.trace_path = trace;
    }
    if (bench_one(&oi, mf ? mf : o->engine.store.manifest, &res[i], e) ||
        (rep && write_report(rep, trace, o->json ? stderr : out, e))) {
      free(mf);
      free(rep);
      free(trace);
      rc = -1;
      nres = i;
      break;
    }
    free(mf);
    free(rep);
    free(trace);
    if (!o->json) {
      if (nd > 0) fprintf(out, "== %d drive%s ==\n", k0 + i, k0 + i == 1 ? "" : "s");
      print_text(out, o, &res[i]);
    }
  }
  if (rc == 0 && o->ladder && !o->json) {
    fprintf(out, "\ndrive ladder%s: drives, decode s/token, tok/s, expert read GB/s, ceiling GB/s, efficiency, speed-up vs 1 drive\n",
            o->engine.store.emulate_drives ? " (EMULATED drives)" : "");
    for (int i = 0; i < nres; i++) {
      const df_bench_result *r = &res[i];
      fprintf(out, "%6d %10.4f %8.2f %10.3f %10.3f %9.1f%% %8.2fx\n", k0 + i, r->decode.s_per_token.median,
              r->decode.tokens_per_s.median, r->decode.read_gbps.median, r->have_ceiling ? r->ceiling.gbps : 0,
              r->have_ceiling ? 100 * r->decode.read_gbps.median / r->ceiling.gbps : 0,
              r->decode.tokens_per_s.median / res[0].decode.tokens_per_s.median);
    }
  }
  if (rc == 0 && o->json) {
    json_t *j = result_json(o, &res[nres - 1]);
    if (o->ladder) {
      json_t *l = json_array();
      for (int i = 0; i < nres; i++) {
        json_t *x = result_json(o, &res[i]);
        json_object_set_new(x, "drives", json_integer(k0 + i));
        json_array_append_new(l, x);
      }
      json_object_set_new(j, "ladder", l);
    }
    json_dumpf(j, out, JSON_COMPACT | JSON_PRESERVE_ORDER);
    fputc('\n', out);
    json_decref(j);
  }
  for (int i = 0; i < nres; i++)
    free(res[i].drives_json), free(res[i].device_json), free(res[i].compute_json);
  free(res);
  for (int i = 0; i < nd; i++) free(drives[i]);
  free(drives);
  return rc;
}

/* The trace report (see report.h): parse, summarise, chart. */
#include "trace/report.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "base/util.h"

#define PUSH(arr, n, cap, v)                                                                 \
  do {                                                                                       \
    if ((n) == (cap)) (arr) = df_xrealloc((arr), ((cap) = (cap) ? (cap) * 2 : 256) * sizeof *(arr)); \
    (arr)[(n)++] = (v);                                                                      \
  } while (0)

static double getd(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }
static long long geti(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

void df_trace_data_free(df_trace_data *d) {
  for (int i = 0; i < d->ndrives; i++) free(d->drive_paths[i]);
  free(d->drive_paths);
  free(d->emulated);
  free(d->io);
  free(d->command);
  free(d->host);
  free(d->reads);
  free(d->samples);
  free(d->batches);
  free(d->marks);
  free(d->waste);
  for (int i = 0; i < d->nrecall; i++) free(d->recall[i].pred), free(d->recall[i].r);
  free(d->recall);
  free(d->rate);
  memset(d, 0, sizeof *d);
}

/* The head record: the drives, the emulation and the I/O engine. */
static int parse_head(df_trace_data *d, json_t *o, const char *name, int lineno, df_err *e) {
  if (d->drive_paths) return df_err_set(e, "trace %s line %d: a second head record", name, lineno);
  json_t *dr = json_object_get(o, "drives");
  d->ndrives = (int)json_array_size(dr);
  d->drive_paths = df_xcalloc((size_t)d->ndrives + 1, sizeof *d->drive_paths);
  for (int i = 0; i < d->ndrives; i++) {
    const char *p = json_string_value(json_array_get(dr, (size_t)i));
    d->drive_paths[i] = df_xstrdup(p ? p : "?");
  }
  const char *em = json_string_value(json_object_get(o, "emulated"));
  d->emulated = em ? df_xstrdup(em) : NULL;
  const char *io = json_string_value(json_object_get(o, "io"));
  d->io = df_xstrdup(io ? io : "?");
  json_t *c = json_object_get(o, "command");
  if (json_is_array(c)) {
    size_t n = 1;
    for (size_t i = 0; i < json_array_size(c); i++) {
      const char *a = json_string_value(json_array_get(c, i));
      n += (a ? strlen(a) : 0) + 3;
    }
    d->command = df_xcalloc(n, 1);
    for (size_t i = 0; i < json_array_size(c); i++) {
      const char *a = json_string_value(json_array_get(c, i));
      if (!a) continue;
      if (i) strcat(d->command, " ");
      int q = !*a || strpbrk(a, " \t'\"") != NULL;
      if (q) strcat(d->command, "'");
      strcat(d->command, a);
      if (q) strcat(d->command, "'");
    }
  }
  json_t *h = json_object_get(o, "host");
  if (json_is_object(h)) {
    const char *cpu = json_string_value(json_object_get(h, "cpu"));
    const char *k = json_string_value(json_object_get(h, "kernel"));
    char buf[512];
    snprintf(buf, sizeof buf, "%s, %lld cores, %.1f GB memory, Linux %s", cpu ? cpu : "?",
             geti(h, "cores"), (double)geti(h, "mem_bytes") / 1e9, k ? k : "?");
    d->host = df_xstrdup(buf);
  }
  return 0;
}

/* A finite time (fuzzed traces hold anything). */
static double gett(json_t *o, const char *k) {
  double v = getd(o, k);
  return isfinite(v) && v > -1e12 && v < 1e12 ? v : 0;
}

static void parse_recall(df_trace_data *d, json_t *o) {
  const char *p = json_string_value(json_object_get(o, "pred"));
  json_t *a = json_object_get(o, "per_layer");
  if (!p || !json_is_array(a) || d->nrecall >= 8) return;
  d->recall = df_xrealloc(d->recall, (size_t)(d->nrecall + 1) * sizeof *d->recall);
  df_trace_recall *r = &d->recall[d->nrecall++];
  r->pred = df_xstrdup(p);
  r->n = (int)(json_array_size(a) < 4096 ? json_array_size(a) : 4096);
  r->r = df_xcalloc((size_t)r->n + 1, sizeof *r->r);
  for (int l = 0; l < r->n; l++) {
    json_t *v = json_array_get(a, (size_t)l);
    double x = json_is_number(v) ? json_number_value(v) : -1;
    r->r[l] = x >= 0 && x <= 1 ? x : -1;
  }
}

static void parse_end(df_trace_data *d, json_t *o) {
  json_t *a = json_object_get(o, "rate");
  if (!json_is_array(a) || d->rate) return;
  d->rate = df_xcalloc((size_t)d->ndrives + 1, sizeof *d->rate);
  for (int i = 0; i < d->ndrives && i < (int)json_array_size(a); i++) {
    double v = json_number_value(json_array_get(a, (size_t)i));
    d->rate[i] = isfinite(v) && v > 0 ? v : 0;
  }
}

typedef struct wkey {
  int layer, expert;
  double t;
  size_t idx;
} wkey;

static int cmp_wkey(const void *a, const void *b) {
  const wkey *x = a, *y = b;
  if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
  if (x->expert != y->expert) return x->expert < y->expert ? -1 : 1;
  return x->t < y->t ? -1 : x->t > y->t;
}

/* Each "wasted" record names the latest speculative read of its record
 * that completed before it (and is not named by another). */
static void mark_wasted(df_trace_data *d) {
  if (!d->nwaste) return;
  wkey *k = df_xmalloc((d->nreads + 1) * sizeof *k);
  size_t n = 0;
  for (size_t i = 0; i < d->nreads; i++)
    if (!d->reads[i].demand && d->reads[i].expert >= 0)
      k[n++] = (wkey){d->reads[i].layer, d->reads[i].expert, d->reads[i].t, i};
  qsort(k, n, sizeof *k, cmp_wkey);
  for (size_t w = 0; w < d->nwaste; w++) {
    wkey q = {d->waste[w].layer, d->waste[w].expert, d->waste[w].t, 0};
    size_t lo = 0, hi = n; /* first key > q */
    while (lo < hi) {
      size_t m = (lo + hi) / 2;
      if (cmp_wkey(&k[m], &q) <= 0) lo = m + 1;
      else hi = m;
    }
    while (lo > 0) {
      wkey *c = &k[--lo];
      if (c->layer != q.layer || c->expert != q.expert) break;
      if (!d->reads[c->idx].wasted) {
        d->reads[c->idx].wasted = 1;
        break;
      }
    }
  }
  free(k);
}

int df_trace_parse(df_trace_data *d, FILE *f, const char *name, df_err *e) {
  memset(d, 0, sizeof *d);
  size_t cr = 0, cs = 0, cb = 0, cm = 0, cw = 0;
  int lineno = 0, rc = 0;
  char *line = NULL;
  size_t lcap = 0;
  ssize_t ll;
  while (!rc && (ll = getline(&line, &lcap, f)) > 0) {
    lineno++;
    json_error_t je;
    json_t *o = json_loadb(line, (size_t)ll, 0, &je);
    if (!o || !json_is_object(o)) {
      json_decref(o);
      if (line[ll - 1] != '\n') break; /* a torn last line (killed run): ignore */
      rc = df_err_set(e, "trace %s line %d: not a JSON object", name, lineno);
      break;
    }
    const char *k = json_string_value(json_object_get(o, "k"));
    if (!k) k = "";
    if (!strcmp(k, "head")) {
      rc = parse_head(d, o, name, lineno, e);
    } else if (!d->drive_paths) {
      rc = df_err_set(e, "trace %s line %d: a record before the head record", name, lineno);
    } else if (!strcmp(k, "read")) {
      df_trace_rd x = {0};
      x.t = gett(o, "t");
      x.service = gett(o, "service");
      if (x.service < 0) x.service = 0;
      x.start = json_object_get(o, "start") ? gett(o, "start") : x.t - x.service;
      json_t *xf = json_object_get(o, "xfer");
      if (json_array_size(xf) == 2) {
        x.x0 = json_number_value(json_array_get(xf, 0));
        x.x1 = json_number_value(json_array_get(xf, 1));
        if (!(isfinite(x.x0) && isfinite(x.x1) && x.x1 >= x.x0 && x.x1 > 0 && x.x1 < 1e12)) x.x0 = x.x1 = 0;
      }
      x.layer = (int)geti(o, "layer");
      x.expert = (int)geti(o, "expert");
      x.drive = (int)geti(o, "drive");
      x.demand = (int)geti(o, "demand");
      x.ok = (int)geti(o, "ok");
      x.bytes = (uint64_t)geti(o, "bytes");
      x.dev = json_object_get(o, "dev") ? (uint64_t)geti(o, "dev") : x.bytes;
      if (x.bytes > (1ull << 50)) x.bytes = 0;
      if (x.dev > (1ull << 50)) x.dev = 0;
      const char *cls = json_string_value(json_object_get(o, "class"));
      if (cls && !strcmp(cls, "spine")) x.expert = -1;
      if (x.drive < 0 || x.drive >= d->ndrives)
        rc = df_err_set(e, "trace %s line %d: drive %d not in the head record", name, lineno, x.drive);
      else PUSH(d->reads, d->nreads, cr, x);
    } else if (!strcmp(k, "sample")) {
      df_trace_smp x = {gett(o, "t"), (int)geti(o, "drive"), (uint64_t)geti(o, "bytes")};
      if (x.drive >= 0 && x.drive < d->ndrives) PUSH(d->samples, d->nsamples, cs, x);
    } else if (!strcmp(k, "batch")) {
      df_trace_bat x = {gett(o, "t"), gett(o, "wait"), (int)geti(o, "layer"), (int)geti(o, "n"),
                        json_object_get(o, "pass") ? (long)geti(o, "pass") : -1, (int)geti(o, "rows"),
                        (uint64_t)geti(o, "hits"), (uint64_t)geti(o, "requests"),
                        (uint64_t)geti(o, "resident")};
      if (x.wait < 0) x.wait = 0;
      PUSH(d->batches, d->nbatches, cb, x);
    } else if (!strcmp(k, "gen") || !strcmp(k, "token")) {
      int gen = !strcmp(k, "gen");
      df_trace_mk x = {gett(o, "t"), (int)geti(o, gen ? "prompt" : "i"), gen};
      PUSH(d->marks, d->nmarks, cm, x);
    } else if (!strcmp(k, "wasted")) {
      df_trace_waste x = {gett(o, "t"), (int)geti(o, "layer"), (int)geti(o, "expert")};
      PUSH(d->waste, d->nwaste, cw, x);
    } else if (!strcmp(k, "recall")) {
      parse_recall(d, o);
    } else if (!strcmp(k, "end")) {
      parse_end(d, o);
    }
    json_decref(o);
  }
  free(line);
  if (!rc && !d->drive_paths)
    rc = df_err_set(e, "trace %s: no head record (not a deltafin trace?)", name);
  if (rc) df_trace_data_free(d);
  else mark_wasted(d);
  return rc;
}

static int cmp_iv(const void *a, const void *b) {
  const double *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Busy time of drive dr: the union of its reads' [start, end] intervals
 * (iv: scratch of 2 * nreads). */
static double busy_time(const df_trace_data *d, int dr, double *iv) {
  size_t n = 0;
  for (size_t i = 0; i < d->nreads; i++)
    if (d->reads[i].drive == dr) {
      iv[2 * n] = d->reads[i].t - d->reads[i].service;
      iv[2 * n + 1] = d->reads[i].t;
      n++;
    }
  qsort(iv, n, 2 * sizeof *iv, cmp_iv);
  double busy = 0, cs0 = 0, ce = -1;
  for (size_t i = 0; i < n; i++) {
    if (iv[2 * i] > ce) {
      if (ce > cs0) busy += ce - cs0;
      cs0 = iv[2 * i];
      ce = iv[2 * i + 1];
    } else if (iv[2 * i + 1] > ce) {
      ce = iv[2 * i + 1];
    }
  }
  if (ce > cs0) busy += ce - cs0;
  return busy;
}

/* Per drive: reads, share of the bytes, MB, rate while busy, busy time, errors. */
static void summary_drives(const df_trace_data *d, const char *name, FILE *out) {
  const df_trace_rd *r = d->reads;
  size_t nr = d->nreads;
  int nd = d->ndrives;
  double t0 = 1e300, t1 = 0;
  for (size_t i = 0; i < nr; i++) {
    if (r[i].t - r[i].service < t0) t0 = r[i].t - r[i].service;
    if (r[i].t > t1) t1 = r[i].t;
  }
  double span = nr ? t1 - t0 : 0;
  uint64_t total = 0, dem = 0;
  uint64_t *db = df_xcalloc((size_t)nd + 1, sizeof *db);
  uint64_t *dn = df_xcalloc((size_t)nd + 1, sizeof *dn);
  uint64_t *derr = df_xcalloc((size_t)nd + 1, sizeof *derr);
  double *iv = df_xmalloc((nr ? nr : 1) * 2 * sizeof *iv);
  for (size_t i = 0; i < nr; i++) {
    if (!r[i].ok) {
      derr[r[i].drive]++;
      continue;
    }
    total += r[i].bytes;
    if (r[i].demand) dem += r[i].bytes;
    db[r[i].drive] += r[i].bytes;
    dn[r[i].drive]++;
  }
  fprintf(out, "trace %s: %zu reads, %.1f MB in %.3f s (%.1f MB/s)%s%s, io %s\n", name, nr,
          (double)total / 1e6, span, span > 0 ? (double)total / 1e6 / span : 0.0,
          d->emulated ? ", EMULATED drives " : "", d->emulated ? d->emulated : "", d->io);
  fprintf(out, "demand %.1f MB, prefetch %.1f MB\n", (double)dem / 1e6, (double)(total - dem) / 1e6);
  fprintf(out, "%-4s %-40s %8s %7s %10s %10s %8s %6s\n", "dr", "path", "reads", "share", "MB",
          "MB/s busy", "busy s", "errors");
  for (int dr = 0; dr < nd; dr++) {
    double busy = busy_time(d, dr, iv);
    fprintf(out, "%-4d %-40s %8llu %6.1f%% %10.1f %10.1f %8.3f %6llu\n", dr, d->drive_paths[dr],
            (unsigned long long)dn[dr], total ? 100.0 * (double)db[dr] / (double)total : 0.0,
            (double)db[dr] / 1e6, busy > 0 ? (double)db[dr] / 1e6 / busy : 0.0, busy,
            (unsigned long long)derr[dr]);
  }
  free(db);
  free(dn);
  free(derr);
  free(iv);
}

/* The longest barrier wait and its layer. */
static double max_wait(const df_trace_data *d, int *layer) {
  double wmax = 0;
  *layer = -1;
  for (size_t i = 0; i < d->nbatches; i++)
    if (d->batches[i].wait > wmax) wmax = d->batches[i].wait, *layer = d->batches[i].layer;
  return wmax;
}

/* Barrier waits, and which drive finished last in each layer batch: the
 * demand reads that completed between the previous batch record and this
 * one belong to it. */
static void summary_batches(const df_trace_data *d, FILE *out) {
  const df_trace_rd *r = d->reads;
  double wsum = 0;
  int wmax_layer;
  double wmax = max_wait(d, &wmax_layer);
  uint64_t *last = df_xcalloc((size_t)d->ndrives + 1, sizeof *last);
  size_t ri = 0;
  double prev_t = -1;
  for (size_t i = 0; i < d->nbatches; i++) {
    const df_trace_bat *b = &d->batches[i];
    wsum += b->wait;
    double lt = -1;
    int ld = -1;
    for (; ri < d->nreads && r[ri].t <= b->t; ri++)
      if (r[ri].demand && r[ri].ok && r[ri].t > prev_t && r[ri].t >= lt) lt = r[ri].t, ld = r[ri].drive;
    if (ld >= 0) last[ld]++;
    prev_t = b->t;
  }
  size_t nb = d->nbatches;
  fprintf(out, "layer batches: %zu, waited %.3f s in all (mean %.3f ms, max %.3f ms at layer %d)\n",
          nb, wsum, nb ? wsum / (double)nb * 1e3 : 0.0, wmax * 1e3, wmax_layer);
  uint64_t nlast = 0;
  for (int dr = 0; dr < d->ndrives; dr++) nlast += last[dr];
  if (nlast) {
    fprintf(out, "drive that finished last per layer batch:");
    for (int dr = 0; dr < d->ndrives; dr++)
      fprintf(out, " %d: %.0f%%", dr, 100.0 * (double)last[dr] / (double)nlast);
    fputc('\n', out);
  }
  free(last);
}

void df_trace_summary(const df_trace_data *d, const char *name, FILE *out) {
  summary_drives(d, name, out);
  summary_batches(d, out);
}

/* The spine stream's trace next to a store trace (PATH.spine.jsonl), parsed
 * into sp: 1 when there is one, 0 when not, -1 when it does not parse. */
static int load_spine(const char *path, df_trace_data *sp, df_err *e) {
  size_t n = strlen(path) + 16;
  char *sp_path = df_xmalloc(n);
  snprintf(sp_path, n, "%s.spine.jsonl", path);
  FILE *f = fopen(sp_path, "r");
  int rc = 0;
  if (f) {
    rc = df_trace_parse(sp, f, sp_path, e) ? -1 : 1;
    fclose(f);
  }
  free(sp_path);
  return rc;
}

/* Per drive: the highest binned rate against its ceiling; per phase: the
 * tokens' times; the cache; the predictors. */
static void summary_series(const df_trace_data *d, const df_trace_series *s, FILE *out) {
  for (int dr = 0; dr < s->ndrives; dr++) {
    fprintf(out, "drive %d: highest %.0f ms bin %.1f MB/s", dr, s->bin * 1e3, s->peak[dr]);
    if (s->ceiling[dr] > 0)
      fprintf(out, " (%.0f%% of the %s %.1f MB/s)", 100.0 * s->peak[dr] / s->ceiling[dr],
              s->ceiling_emulated ? "EMULATED ceiling" : "store's rate estimate", s->ceiling[dr]);
    uint64_t *cb = &s->cat_bytes[dr * DF_TR_NCAT];
    fprintf(out, "; device MB demand %.1f, prefetch %.1f, wasted prefetch %.1f%s", (double)cb[0] / 1e6,
            (double)cb[1] / 1e6, (double)cb[2] / 1e6, s->has_spine ? "" : "\n");
    if (s->has_spine) fprintf(out, ", spine %.1f\n", (double)cb[3] / 1e6);
  }
  if (s->ntok) {
    double pd = 0, dd = 0, de = 0, ds = 0, dc = 0;
    size_t np = 0, nd = 0;
    for (size_t i = 0; i < s->ntok; i++) {
      const df_trace_tok *t = &s->tok[i];
      if (t->prefill) pd += t->dur, np++;
      else dd += t->dur, de += t->expert_wait, ds += t->spine_wait, dc += t->compute, nd++;
    }
    fprintf(out, "tokens: %zu (%zu after a prefill, %.3f s); decode %zu in %.3f s", s->ntok, np, pd, nd, dd);
    if (nd && dd > 0)
      fprintf(out, " (%.3f s/token: compute %.0f%%, waiting on experts %.0f%%%s", dd / (double)nd,
              100 * dc / dd, 100 * de / dd, s->has_spine ? "" : ")");
    if (nd && dd > 0 && s->has_spine) fprintf(out, ", on the spine %.0f%%)", 100 * ds / dd);
    fputc('\n', out);
  }
  if (s->ncache) {
    const df_trace_cpt *c = &s->cache[s->ncache - 1];
    fprintf(out, "cache: %zu forward passes, last pass hit rate %.1f%%, resident %.1f MB at the end\n",
            s->ncache, 100 * c->hit_rate, (double)c->resident / 1e6);
  }
  for (int p = 0; p < d->nrecall; p++) {
    fprintf(out, "predictor %s recall per layer:", d->recall[p].pred);
    for (int l = 0; l < d->recall[p].n; l++)
      if (d->recall[p].r[l] >= 0) fprintf(out, " %d:%.2f", l, d->recall[p].r[l]);
      else fprintf(out, " %d:-", l);
    fputc('\n', out);
  }
}

typedef void (*writer_fn)(const df_trace_data *, const df_trace_data *, const df_trace_series *,
                          const char *, FILE *);

static void svg_w(const df_trace_data *d, const df_trace_data *sp, const df_trace_series *s,
                  const char *name, FILE *g) {
  (void)name;
  df_trace_svg_write(d, sp, s, g);
}

/* One output file, written to a temp name and renamed. */
static int write_out(const char *path, writer_fn fn, const df_trace_data *d, const df_trace_data *sp,
                     const df_trace_series *s, const char *name, df_err *e) {
  char *buf = NULL;
  size_t len = 0;
  FILE *g = open_memstream(&buf, &len);
  if (!g) return df_err_errno(e, "%s", path);
  fn(d, sp, s, name, g);
  fclose(g);
  int rc = df_file_write_atomic(path, buf, len, e);
  free(buf);
  return rc;
}

int df_trace_report(const char *path, FILE *out, const df_trace_out *o, df_err *e) {
  FILE *f = fopen(path, "r");
  if (!f) return df_err_errno(e, "trace %s", path);
  df_trace_data d;
  int rc = df_trace_parse(&d, f, path, e);
  fclose(f);
  if (rc) return -1;
  df_trace_summary(&d, path, out);
  df_trace_data sp;
  int has_sp = load_spine(path, &sp, e);
  if (has_sp < 0) {
    df_trace_data_free(&d);
    return -1;
  }
  if (has_sp) {
    uint64_t b = 0;
    size_t nr = 0;
    for (size_t i = 0; i < sp.nreads; i++)
      if (sp.reads[i].ok) b += sp.reads[i].bytes, nr++;
    fprintf(out, "spine stream (%s.spine.jsonl): %zu reads, %.1f MB\n", path, nr, (double)b / 1e6);
  }
  df_trace_series s;
  df_trace_series_build(&s, &d, has_sp ? &sp : NULL, o && o->bin_s > 0 ? o->bin_s : DF_TRACE_DEFAULT_BIN);
  summary_series(&d, &s, out);
  const df_trace_data *spp = has_sp ? &sp : NULL;
  if (o && o->svg && !rc) {
    rc = write_out(o->svg, svg_w, &d, spp, &s, path, e);
    if (!rc) fprintf(out, "chart written to %s%s\n", o->svg, has_sp ? " (expert and spine reads)" : "");
  }
  if (o && o->html && !rc) {
    rc = write_out(o->html, df_trace_html_write, &d, spp, &s, path, e);
    if (!rc) fprintf(out, "report written to %s\n", o->html);
  }
  if (o && o->json && !rc) {
    rc = write_out(o->json, df_trace_json_write, &d, spp, &s, path, e);
    if (!rc) fprintf(out, "series written to %s\n", o->json);
  }
  df_trace_series_free(&s);
  if (has_sp) df_trace_data_free(&sp);
  df_trace_data_free(&d);
  return rc;
}

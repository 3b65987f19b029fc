/* The trace report (see report.h): parse, summarise, chart. */
#include "trace/report.h"

#include <jansson.h>
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
  free(d->reads);
  free(d->samples);
  free(d->batches);
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
  return 0;
}

int df_trace_parse(df_trace_data *d, FILE *f, const char *name, df_err *e) {
  memset(d, 0, sizeof *d);
  size_t cr = 0, cs = 0, cb = 0;
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
    } else if (!strcmp(k, "read")) {
      df_trace_rd x = {getd(o, "t"), getd(o, "service"), (int)geti(o, "layer"), (int)geti(o, "drive"),
                       (int)geti(o, "demand"), (int)geti(o, "ok"), (uint64_t)geti(o, "bytes")};
      if (x.drive < 0 || x.drive >= d->ndrives)
        rc = df_err_set(e, "trace %s line %d: drive %d not in the head record", name, lineno, x.drive);
      else PUSH(d->reads, d->nreads, cr, x);
    } else if (!strcmp(k, "sample")) {
      df_trace_smp x = {getd(o, "t"), (int)geti(o, "drive"), (uint64_t)geti(o, "bytes")};
      if (x.drive >= 0 && x.drive < d->ndrives) PUSH(d->samples, d->nsamples, cs, x);
    } else if (!strcmp(k, "batch")) {
      df_trace_bat x = {getd(o, "t"), getd(o, "wait"), (int)geti(o, "layer"), (int)geti(o, "n")};
      PUSH(d->batches, d->nbatches, cb, x);
    }
    json_decref(o);
  }
  free(line);
  if (!rc && !d->drive_paths)
    rc = df_err_set(e, "trace %s: no head record (not a deltafin trace?)", name);
  if (rc) df_trace_data_free(d);
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

/* MB/s of sample i since the previous sample p of the same series. */
static double smp_rate(const df_trace_smp *sm, size_t p, size_t i) {
  return (double)(sm[i].bytes - sm[p].bytes) / (sm[i].t - sm[p].t) / 1e6;
}

/* The chart: per-drive MB/s of expert reads between consecutive samples on
 * top, with the spine stream's MB/s (sp, its trace; NULL = none) as its own
 * dashed series on the same axes, barrier waits as bars below, on one time
 * axis (both traces use the store's clock). */
static void svg_write(const df_trace_data *d, const df_trace_data *sp, FILE *g) {
  const df_trace_smp *sm = d->samples;
  const df_trace_bat *b = d->batches;
  size_t ns = d->nsamples, nb = d->nbatches;
  const int W = 900, H = 360, L = 60, R = 20, T = 30, B = 40, HW = 80;
  double ts0 = 1e300, ts1 = 0, ymax = 1;
  for (size_t i = 0; i < ns; i++) {
    if (sm[i].t < ts0) ts0 = sm[i].t;
    if (sm[i].t > ts1) ts1 = sm[i].t;
  }
  for (size_t i = 0; i < nb; i++) {
    if (b[i].t < ts0) ts0 = b[i].t;
    if (b[i].t > ts1) ts1 = b[i].t;
  }
  if (ts1 <= ts0) ts1 = ts0 + 1;
  size_t *lastk = df_xcalloc((size_t)d->ndrives + 1, sizeof *lastk);
  for (int dr = 0; dr < d->ndrives; dr++) lastk[dr] = (size_t)-1;
  for (size_t i = 0; i < ns; i++) {
    size_t p = lastk[sm[i].drive];
    if (p != (size_t)-1 && sm[i].t > sm[p].t) {
      double v = (double)(sm[i].bytes - sm[p].bytes) / (sm[i].t - sm[p].t) / 1e6;
      if (v > ymax) ymax = v;
    }
    lastk[sm[i].drive] = i;
  }
  free(lastk);
  /* the spine's samples: one series whatever drive they name */
  size_t nsp = sp ? sp->nsamples : 0;
  for (size_t i = 0; i < nsp; i++) {
    const df_trace_smp *q = &sp->samples[i];
    if (q->t < ts0) ts0 = q->t;
    if (q->t > ts1) ts1 = q->t;
    if (i && q->t > sp->samples[i - 1].t) {
      double v = smp_rate(sp->samples, i - 1, i);
      if (v > ymax) ymax = v;
    }
  }
  if (ts1 <= ts0) ts1 = ts0 + 1;
  int wl;
  double wmax = max_wait(d, &wl);
  double wm = wmax > 0 ? wmax : 1e-3;
  int ph = H - T - B - HW - 10;
  const char *emu = d->emulated;
  fprintf(g,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" "
          "fill=\"white\"/>\n<text x=\"%d\" y=\"18\">expert reads per drive%s (MB/s)%s%s</text>\n",
          W, H, L, sp ? ", spine reads dashed" : "", emu ? " - EMULATED drives " : "", emu ? emu : "");
  fprintf(g, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", L, T + ph, W - R,
          T + ph);
  fprintf(g, "<text x=\"4\" y=\"%d\">%.0f</text><text x=\"4\" y=\"%d\">0</text>\n", T + 8, ymax,
          T + ph);
  static const char *col[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd",
                              "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"};
  for (int dr = 0; dr < d->ndrives; dr++) {
    fprintf(g, "<polyline fill=\"none\" stroke=\"%s\" points=\"", col[dr % 8]);
    size_t p = (size_t)-1;
    for (size_t i = 0; i < ns; i++) {
      if (sm[i].drive != dr) continue;
      if (p != (size_t)-1 && sm[i].t > sm[p].t) {
        double v = (double)(sm[i].bytes - sm[p].bytes) / (sm[i].t - sm[p].t) / 1e6;
        double x = L + (sm[i].t - ts0) / (ts1 - ts0) * (W - L - R);
        double y = T + ph - v / ymax * ph;
        fprintf(g, "%.1f,%.1f ", x, y);
      }
      p = i;
    }
    fprintf(g, "\"/>\n<text x=\"%d\" y=\"%d\" fill=\"%s\">drive %d%s</text>\n", W - R - 200,
            T + 12 + 12 * dr, col[dr % 8], dr, sp ? " experts" : "");
  }
  if (sp) {
    fprintf(g, "<polyline class=\"spine\" fill=\"none\" stroke=\"black\" stroke-dasharray=\"4,3\" "
               "points=\"");
    for (size_t i = 1; i < nsp; i++) {
      const df_trace_smp *q = &sp->samples[i];
      if (!(q->t > sp->samples[i - 1].t)) continue;
      double x = L + (q->t - ts0) / (ts1 - ts0) * (W - L - R);
      double y = T + ph - smp_rate(sp->samples, i - 1, i) / ymax * ph;
      fprintf(g, "%.1f,%.1f ", x, y);
    }
    fprintf(g, "\"/>\n<text x=\"%d\" y=\"%d\">spine stream (dashed)</text>\n", W - R - 200,
            T + 12 + 12 * d->ndrives);
  }
  int by = H - B;
  fprintf(g, "<text x=\"%d\" y=\"%d\">layer barrier waits (max %.2f ms)</text>\n", L, by - HW - 2,
          wm * 1e3);
  for (size_t i = 0; i < nb; i++) {
    double x = L + (b[i].t - ts0) / (ts1 - ts0) * (W - L - R);
    double h = b[i].wait / wm * HW;
    fprintf(g, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\"/>\n", x, by,
            x, by - h);
  }
  fprintf(g, "<text x=\"%d\" y=\"%d\">time (s): %.3f .. %.3f</text>\n</svg>\n", L, H - 10, ts0, ts1);
}

int df_trace_svg(const df_trace_data *d, const df_trace_data *spine, const char *path, df_err *e) {
  char *buf = NULL;
  size_t len = 0;
  FILE *g = open_memstream(&buf, &len);
  if (!g) return df_err_errno(e, "--svg %s", path);
  svg_write(d, spine, g);
  fclose(g);
  int rc = df_file_write_atomic(path, buf, len, e);
  free(buf);
  return rc;
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

int df_trace_report(const char *path, FILE *out, const char *svg_path, df_err *e) {
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
  if (svg_path) {
    rc = df_trace_svg(&d, has_sp ? &sp : NULL, svg_path, e);
    if (!rc) fprintf(out, "chart written to %s%s\n", svg_path, has_sp ? " (expert and spine reads)" : "");
  }
  if (has_sp) df_trace_data_free(&sp);
  df_trace_data_free(&d);
  return rc;
}

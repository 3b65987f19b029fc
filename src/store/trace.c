#include "store/trace.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

struct df_trace {
  FILE *f;
  pthread_mutex_t mu;
};

df_trace *df_trace_open(const char *path, int ndrives, char *const *drive_paths,
                        const char *emulated, const char *io, df_err *e) {
  FILE *f = fopen(path, "w");
  if (!f) {
    df_err_errno(e, "--trace %s", path);
    return NULL;
  }
  df_trace *t = df_xcalloc(1, sizeof *t);
  t->f = f;
  pthread_mutex_init(&t->mu, NULL);
  json_t *h = json_object(), *d = json_array();
  json_object_set_new(h, "k", json_string("head"));
  json_object_set_new(h, "version", json_integer(1));
  for (int i = 0; i < ndrives; i++) json_array_append_new(d, json_string(drive_paths[i]));
  json_object_set_new(h, "drives", d);
  json_object_set_new(h, "emulated", emulated ? json_string(emulated) : json_null());
  json_object_set_new(h, "io", json_string(io));
  json_dumpf(h, f, JSON_COMPACT | JSON_PRESERVE_ORDER);
  fputc('\n', f);
  json_decref(h);
  return t;
}

void df_trace_read(df_trace *t, double ts, int layer, int expert, int drive, uint64_t bytes,
                   int demand, double wait, double service, int ok) {
  pthread_mutex_lock(&t->mu);
  fprintf(t->f,
          "{\"k\":\"read\",\"t\":%.6f,\"layer\":%d,\"expert\":%d,\"drive\":%d,\"bytes\":%llu,"
          "\"demand\":%d,\"wait\":%.6f,\"service\":%.6f,\"ok\":%d}\n",
          ts, layer, expert, drive, (unsigned long long)bytes, demand, wait, service, ok);
  pthread_mutex_unlock(&t->mu);
}

void df_trace_sample(df_trace *t, double ts, int drive, uint64_t bytes, uint64_t reads,
                     int inflight, int queued) {
  pthread_mutex_lock(&t->mu);
  fprintf(t->f,
          "{\"k\":\"sample\",\"t\":%.6f,\"drive\":%d,\"bytes\":%llu,\"reads\":%llu,"
          "\"inflight\":%d,\"queued\":%d}\n",
          ts, drive, (unsigned long long)bytes, (unsigned long long)reads, inflight, queued);
  pthread_mutex_unlock(&t->mu);
}

void df_trace_batch(df_trace *t, double ts, int layer, int n, double wait) {
  pthread_mutex_lock(&t->mu);
  fprintf(t->f, "{\"k\":\"batch\",\"t\":%.6f,\"layer\":%d,\"n\":%d,\"wait\":%.6f}\n", ts, layer, n,
          wait);
  pthread_mutex_unlock(&t->mu);
}

void df_trace_close(df_trace *t) {
  if (!t) return;
  fclose(t->f);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

/* ---- report ---- */

typedef struct rd {
  double t, service;
  int layer, drive, demand, ok;
  uint64_t bytes;
} rd;
typedef struct smp {
  double t;
  int drive;
  uint64_t bytes;
} smp;
typedef struct bat {
  double t, wait;
  int layer, n;
} bat;

#define PUSH(arr, n, cap, v)                                   \
  do {                                                         \
    if ((n) == (cap)) (arr) = df_xrealloc((arr), ((cap) = (cap) ? (cap) * 2 : 256) * sizeof *(arr)); \
    (arr)[(n)++] = (v);                                        \
  } while (0)

static int cmp_iv(const void *a, const void *b) {
  const double *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

static double getd(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }
static long long geti(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

int df_trace_report(const char *path, FILE *out, const char *svg_path, df_err *e) {
  FILE *f = fopen(path, "r");
  if (!f) return df_err_errno(e, "trace %s", path);
  rd *r = NULL;
  smp *sm = NULL;
  bat *b = NULL;
  size_t nr = 0, cr = 0, ns = 0, cs = 0, nb = 0, cb = 0;
  int ndrives = 0, lineno = 0, rc = 0;
  char **dpath = NULL;
  char *emu = NULL, *io = NULL;
  char *line = NULL;
  size_t lcap = 0;
  ssize_t ll;
  while ((ll = getline(&line, &lcap, f)) > 0) {
    lineno++;
    json_error_t je;
    json_t *o = json_loadb(line, (size_t)ll, 0, &je);
    if (!o || !json_is_object(o)) {
      json_decref(o);
      if (ll > 0 && line[ll - 1] != '\n') break; /* a torn last line (killed run): ignore */
      rc = df_err_set(e, "trace %s line %d: not a JSON object", path, lineno);
      break;
    }
    const char *k = json_string_value(json_object_get(o, "k"));
    if (!k) k = "";
    if (!strcmp(k, "head")) {
      json_t *d = json_object_get(o, "drives");
      ndrives = (int)json_array_size(d);
      dpath = df_xcalloc((size_t)ndrives + 1, sizeof *dpath);
      for (int i = 0; i < ndrives; i++) {
        const char *p = json_string_value(json_array_get(d, (size_t)i));
        dpath[i] = df_xstrdup(p ? p : "?");
      }
      const char *em = json_string_value(json_object_get(o, "emulated"));
      emu = em ? df_xstrdup(em) : NULL;
      const char *i = json_string_value(json_object_get(o, "io"));
      io = df_xstrdup(i ? i : "?");
    } else if (!strcmp(k, "read")) {
      rd x = {getd(o, "t"), getd(o, "service"), (int)geti(o, "layer"), (int)geti(o, "drive"),
              (int)geti(o, "demand"), (int)geti(o, "ok"), (uint64_t)geti(o, "bytes")};
      if (x.drive < 0 || x.drive >= ndrives) {
        json_decref(o);
        rc = df_err_set(e, "trace %s line %d: drive %d not in the head record", path, lineno,
                        x.drive);
        break;
      }
      PUSH(r, nr, cr, x);
    } else if (!strcmp(k, "sample")) {
      smp x = {getd(o, "t"), (int)geti(o, "drive"), (uint64_t)geti(o, "bytes")};
      if (x.drive >= 0 && x.drive < ndrives) PUSH(sm, ns, cs, x);
    } else if (!strcmp(k, "batch")) {
      bat x = {getd(o, "t"), getd(o, "wait"), (int)geti(o, "layer"), (int)geti(o, "n")};
      PUSH(b, nb, cb, x);
    }
    json_decref(o);
  }
  free(line);
  fclose(f);
  if (!rc && !dpath) rc = df_err_set(e, "trace %s: no head record (not a deltafin trace?)", path);
  if (rc) goto done;

  double t0 = 1e300, t1 = 0;
  for (size_t i = 0; i < nr; i++) {
    if (r[i].t - r[i].service < t0) t0 = r[i].t - r[i].service;
    if (r[i].t > t1) t1 = r[i].t;
  }
  double span = nr ? t1 - t0 : 0;
  uint64_t total = 0, dem = 0;
  uint64_t *db = df_xcalloc((size_t)ndrives, sizeof *db);
  uint64_t *dn = df_xcalloc((size_t)ndrives, sizeof *dn);
  uint64_t *derr = df_xcalloc((size_t)ndrives, sizeof *derr);
  double *busy = df_xcalloc((size_t)ndrives, sizeof *busy);
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
  /* Busy time per drive: the union of its reads' [start, end] intervals. */
  for (int d = 0; d < ndrives; d++) {
    size_t n = 0;
    for (size_t i = 0; i < nr; i++)
      if (r[i].drive == d) {
        iv[2 * n] = r[i].t - r[i].service;
        iv[2 * n + 1] = r[i].t;
        n++;
      }
    qsort(iv, n, 2 * sizeof *iv, cmp_iv);
    double cs0 = 0, ce = -1;
    for (size_t i = 0; i < n; i++) {
      if (iv[2 * i] > ce) {
        if (ce > cs0) busy[d] += ce - cs0;
        cs0 = iv[2 * i];
        ce = iv[2 * i + 1];
      } else if (iv[2 * i + 1] > ce) {
        ce = iv[2 * i + 1];
      }
    }
    if (ce > cs0) busy[d] += ce - cs0;
  }
  fprintf(out, "trace %s: %zu reads, %.1f MB in %.3f s (%.1f MB/s)%s%s, io %s\n", path, nr,
          (double)total / 1e6, span, span > 0 ? (double)total / 1e6 / span : 0.0,
          emu ? ", EMULATED drives " : "", emu ? emu : "", io);
  fprintf(out, "demand %.1f MB, prefetch %.1f MB\n", (double)dem / 1e6,
          (double)(total - dem) / 1e6);
  fprintf(out, "%-4s %-40s %8s %7s %10s %10s %8s %6s\n", "dr", "path", "reads", "share", "MB",
          "MB/s busy", "busy s", "errors");
  for (int d = 0; d < ndrives; d++)
    fprintf(out, "%-4d %-40s %8llu %6.1f%% %10.1f %10.1f %8.3f %6llu\n", d, dpath[d],
            (unsigned long long)dn[d], total ? 100.0 * (double)db[d] / (double)total : 0.0,
            (double)db[d] / 1e6, busy[d] > 0 ? (double)db[d] / 1e6 / busy[d] : 0.0, busy[d],
            (unsigned long long)derr[d]);
  /* Barrier waits and which drive finished last in each layer batch: the
   * demand reads that completed between the previous batch record and this
   * one belong to it. */
  double wsum = 0, wmax = 0;
  int wmax_layer = -1;
  uint64_t *last = df_xcalloc((size_t)ndrives, sizeof *last);
  size_t ri = 0;
  double prev_t = -1;
  for (size_t i = 0; i < nb; i++) {
    wsum += b[i].wait;
    if (b[i].wait > wmax) wmax = b[i].wait, wmax_layer = b[i].layer;
    double lt = -1;
    int ld = -1;
    for (; ri < nr && r[ri].t <= b[i].t; ri++)
      if (r[ri].demand && r[ri].ok && r[ri].t > prev_t && r[ri].t >= lt) lt = r[ri].t, ld = r[ri].drive;
    if (ld >= 0) last[ld]++;
    prev_t = b[i].t;
  }
  fprintf(out, "layer batches: %zu, waited %.3f s in all (mean %.3f ms, max %.3f ms at layer %d)\n",
          nb, wsum, nb ? wsum / (double)nb * 1e3 : 0.0, wmax * 1e3, wmax_layer);
  uint64_t nlast = 0;
  for (int d = 0; d < ndrives; d++) nlast += last[d];
  if (nlast) {
    fprintf(out, "drive that finished last per layer batch:");
    for (int d = 0; d < ndrives; d++)
      fprintf(out, " %d: %.0f%%", d, 100.0 * (double)last[d] / (double)nlast);
    fputc('\n', out);
  }

  if (svg_path) {
    FILE *g = fopen(svg_path, "w");
    if (!g) {
      rc = df_err_errno(e, "--svg %s", svg_path);
    } else {
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
      /* throughput per drive between consecutive samples */
      size_t *lastk = df_xcalloc((size_t)ndrives, sizeof *lastk);
      for (int d = 0; d < ndrives; d++) lastk[d] = (size_t)-1;
      for (size_t i = 0; i < ns; i++) {
        size_t p = lastk[sm[i].drive];
        if (p != (size_t)-1 && sm[i].t > sm[p].t) {
          double v = (double)(sm[i].bytes - sm[p].bytes) / (sm[i].t - sm[p].t) / 1e6;
          if (v > ymax) ymax = v;
        }
        lastk[sm[i].drive] = i;
      }
      double wm = wmax > 0 ? wmax : 1e-3;
      int ph = H - T - B - HW - 10;
      fprintf(g,
              "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
              "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" "
              "fill=\"white\"/>\n<text x=\"%d\" y=\"18\">expert reads per drive (MB/s)%s%s</text>\n",
              W, H, L, emu ? " - EMULATED drives " : "", emu ? emu : "");
      fprintf(g, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", L, T + ph, W - R,
              T + ph);
      fprintf(g, "<text x=\"4\" y=\"%d\">%.0f</text><text x=\"4\" y=\"%d\">0</text>\n", T + 8, ymax,
              T + ph);
      static const char *col[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"};
      for (int d = 0; d < ndrives; d++) {
        fprintf(g, "<polyline fill=\"none\" stroke=\"%s\" points=\"", col[d % 8]);
        size_t p = (size_t)-1;
        for (size_t i = 0; i < ns; i++) {
          if (sm[i].drive != d) continue;
          if (p != (size_t)-1 && sm[i].t > sm[p].t) {
            double v = (double)(sm[i].bytes - sm[p].bytes) / (sm[i].t - sm[p].t) / 1e6;
            double x = L + (sm[i].t - ts0) / (ts1 - ts0) * (W - L - R);
            double y = T + ph - v / ymax * ph;
            fprintf(g, "%.1f,%.1f ", x, y);
          }
          p = i;
        }
        fprintf(g, "\"/>\n<text x=\"%d\" y=\"%d\" fill=\"%s\">drive %d</text>\n",
                W - R - 200 + 0, T + 12 + 12 * d, col[d % 8], d);
      }
      int by = H - B;
      fprintf(g, "<text x=\"%d\" y=\"%d\">layer barrier waits (max %.2f ms)</text>\n", L,
              by - HW - 2, wm * 1e3);
      for (size_t i = 0; i < nb; i++) {
        double x = L + (b[i].t - ts0) / (ts1 - ts0) * (W - L - R);
        double h = b[i].wait / wm * HW;
        fprintf(g, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\"/>\n", x,
                by, x, by - h);
      }
      fprintf(g, "<text x=\"%d\" y=\"%d\">time (s): %.3f .. %.3f</text>\n</svg>\n", L, H - 10,
              ts0, ts1);
      fclose(g);
      free(lastk);
      fprintf(out, "chart written to %s\n", svg_path);
    }
  }
  free(last);
  free(db);
  free(dn);
  free(derr);
  free(busy);
  free(iv);
done:
  for (int i = 0; i < ndrives; i++) free(dpath[i]);
  free(dpath);
  free(emu);
  free(io);
  free(r);
  free(sm);
  free(b);
  return rc;
}

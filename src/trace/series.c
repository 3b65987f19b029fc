/* The trace report's binned series (report.h): per-drive device bytes over
 * time by class, the tokens' compute and waits, the barrier waits with the
 * drive that finished last, the cache per forward pass.
 *
 * A read's bytes are spread over the time the drive spent moving them. On
 * an EMULATED drive that is the transfer interval the emulation gave the
 * read on its one timeline (the trace's "xfer"), so a bin shows exactly
 * what the emulated drive delivered in it, never more than its bandwidth.
 * A real drive is known only by its reads' starts and completions: there
 * the report draws the least the drive must have delivered (taut_spread).
 * Rates between single completions (the old chart) are never used. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "store/io.h"
#include "trace/report.h"

#define MAX_BINS 20000

typedef struct item {
  double a, b; /* [a, b]: when the drive moved the bytes (not exact: its start and completion) */
  double bytes;
  int cat, exact;
} item;

static int cmp_item(const void *x, const void *y) {
  const item *p = x, *q = y;
  return p->b < q->b ? -1 : p->b > q->b;
}

static int cat_of(const df_trace_rd *r, int spine) {
  if (spine || r->expert < 0) return DF_TR_SPINE;
  if (r->demand) return DF_TR_DEMAND;
  return r->wasted ? DF_TR_WASTED : DF_TR_PREFETCH;
}

static void add_reads(item **it, size_t *n, size_t *cap, const df_trace_data *d, int dr, int spine) {
  for (size_t i = 0; i < d->nreads; i++) {
    const df_trace_rd *r = &d->reads[i];
    int rd = r->drive;
    if (rd != dr || !r->ok || !r->dev) continue;
    if (*n == *cap) *it = df_xrealloc(*it, (*cap = *cap ? *cap * 2 : 256) * sizeof **it);
    item x = {r->start, r->start + r->service, (double)r->dev, cat_of(r, spine), r->x1 > 0};
    if (x.exact) x.a = r->x0, x.b = r->x1;
    (*it)[(*n)++] = x;
  }
}

/* bytes over [a, b] into the bins of row (bins of width w from t0) */
static void spread(double *row, int nb, double t0, double w, double a, double b, double bytes) {
  double fa = (a - t0) / w, fb = (b - t0) / w;
  if (!(fa >= 0)) fa = 0;
  if (!(fb >= 0)) fb = 0;
  if (fa > nb) fa = nb;
  if (fb > nb) fb = nb;
  if (fb - fa < 1e-9) {
    int k = (int)fb;
    if (k >= nb) k = nb - 1;
    row[k] += bytes;
    return;
  }
  double per = bytes / (fb - fa);
  for (int k = (int)fa; k < nb && k < fb; k++) {
    double lo = fa > k ? fa : k, hi = fb < k + 1 ? fb : k + 1;
    if (hi > lo) row[k] += per * (hi - lo);
  }
}

static int cmp_dbl_pair(const void *a, const void *b) {
  const double *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

typedef struct cpt {
  double t, y;
  int lower; /* 1: the curve must reach y by t (completions); 0: it cannot pass y before t (starts) */
} cpt;

static int cmp_cpt(const void *x, const void *y) {
  const cpt *p = x, *q = y;
  if (p->t != q->t) return p->t < q->t ? -1 : 1;
  if (p->lower != q->lower) return p->lower - q->lower; /* at one instant: starts, then completions */
  return p->y < q->y ? -1 : p->y > q->y;
}

/* A real drive's delivered bytes over time, from its reads' start and
 * completion times only: by each completion it must have delivered every
 * byte of the reads completed so far, and before each start no more than
 * the bytes of the reads started so far. Of the curves between those two
 * bounds the taut string (the shortest) has the lowest highest rate, so
 * what it shows is the least the drive must have done: a burst of
 * completions after a long shared wait is spread over that wait, not
 * drawn as a spike. Its segments go into tot (bins of width w from t0). */
static void taut_spread(const item *it, size_t n, double *tot, int nb, double t0, double w) {
  if (!n) return;
  cpt *c = df_xmalloc(2 * n * sizeof *c);
  /* lower points: completed bytes at each completion (it[] is sorted by b) */
  double cum = 0;
  for (size_t i = 0; i < n; i++) cum += it[i].bytes, c[i] = (cpt){it[i].b, cum, 1};
  /* upper points: bytes started before each start */
  double *st = df_xmalloc(2 * n * sizeof *st);
  for (size_t i = 0; i < n; i++) st[2 * i] = it[i].a, st[2 * i + 1] = it[i].bytes;
  qsort(st, n, 2 * sizeof *st, cmp_dbl_pair);
  cum = 0;
  for (size_t i = 0; i < n; i++) c[n + i] = (cpt){st[2 * i], cum, 0}, cum += st[2 * i + 1];
  free(st);
  qsort(c, 2 * n, sizeof *c, cmp_cpt);
  size_t m = 2 * n;
  double pt = c[0].t, pyv = 0; /* the string's last vertex */
  size_t i = 0;
  while (i < m) {
    double smin = 0, smax = 1e300;
    size_t jmin = (size_t)-1, jmax = (size_t)-1, j;
    int bent = 0;
    for (j = i; j < m; j++) {
      double dt = c[j].t - pt;
      if (dt < 1e-9) dt = 1e-9;
      double sl = (c[j].y - pyv) / dt;
      if (c[j].lower) {
        if (sl > smax) { /* bends down at the upper point that set smax */
          bent = 1;
          break;
        }
        if (sl >= smin) smin = sl, jmin = j;
      } else {
        if (sl < smin) { /* bends up at the lower point that set smin */
          bent = 2;
          break;
        }
        if (sl <= smax) smax = sl, jmax = j;
      }
    }
    size_t v;
    if (bent == 1) v = jmax;
    else if (bent == 2) v = jmin;
    else v = jmin; /* the end: the last completion holds every byte */
    if (v == (size_t)-1) break;
    double nt = c[v].t, ny = c[v].y;
    if (ny > pyv) spread(tot, nb, t0, w, pt, nt, ny - pyv);
    if (nt > pt || ny > pyv) pt = nt > pt ? nt : pt, pyv = ny > pyv ? ny : pyv;
    i = v + 1;
  }
  free(c);
}

static void range(double *t0, double *t1, double v) {
  if (v < *t0) *t0 = v;
  if (v > *t1) *t1 = v;
}

static void time_range(const df_trace_data *d, double *t0, double *t1) {
  for (size_t i = 0; i < d->nreads; i++) {
    const df_trace_rd *r = &d->reads[i];
    range(t0, t1, r->x1 > 0 ? r->x0 : r->start);
    range(t0, t1, r->x1 > 0 ? r->x1 : r->start + r->service);
  }
  for (size_t i = 0; i < d->nmarks; i++) range(t0, t1, d->marks[i].t);
  for (size_t i = 0; i < d->nbatches; i++) range(t0, t1, d->batches[i].t);
}

static int cmp_dbl(const void *a, const void *b) {
  const double *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Waits of d's batches as (t, wait) pairs sorted by t, with a running sum
 * in the second slot. */
static double *wait_prefix(const df_trace_data *d, size_t *n) {
  *n = d ? d->nbatches : 0;
  double *p = df_xmalloc((*n + 1) * 2 * sizeof *p);
  for (size_t i = 0; i < *n; i++) p[2 * i] = d->batches[i].t, p[2 * i + 1] = d->batches[i].wait;
  qsort(p, *n, 2 * sizeof *p, cmp_dbl);
  for (size_t i = 1; i < *n; i++) p[2 * i + 1] += p[2 * i - 1];
  return p;
}

/* The summed waits of batches with t <= x. */
static double wait_upto(const double *p, size_t n, double x) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t m = (lo + hi) / 2;
    if (p[2 * m] <= x) lo = m + 1;
    else hi = m;
  }
  return lo ? p[2 * lo - 1] : 0;
}

static void build_tokens(df_trace_series *s, const df_trace_data *d, const df_trace_data *sp) {
  size_t ne, ns;
  double *pe = wait_prefix(d, &ne), *ps = wait_prefix(sp, &ns);
  s->tok = df_xcalloc(d->nmarks + 1, sizeof *s->tok);
  s->gen = df_xcalloc(d->nmarks + 1, sizeof *s->gen);
  double prev = s->t0;
  for (size_t i = 0; i < d->nmarks; i++) {
    const df_trace_mk *m = &d->marks[i];
    if (m->gen) {
      s->gen[s->ngen++] = *m;
      prev = m->t;
      continue;
    }
    df_trace_tok *t = &s->tok[s->ntok++];
    t->i = m->i;
    t->prefill = m->i == 1;
    t->t = m->t;
    t->dur = m->t > prev ? m->t - prev : 0;
    t->expert_wait = wait_upto(pe, ne, m->t) - wait_upto(pe, ne, prev);
    t->spine_wait = wait_upto(ps, ns, m->t) - wait_upto(ps, ns, prev);
    t->compute = t->dur - t->expert_wait - t->spine_wait;
    if (t->compute < 0) t->compute = 0;
    prev = m->t;
  }
  free(pe);
  free(ps);
}

/* Barrier waits, each with the drive whose demand read finished last among
 * those that completed since the previous batch. */
static void build_barriers(df_trace_series *s, const df_trace_data *d) {
  s->bw = df_xcalloc(d->nbatches + 1, sizeof *s->bw);
  size_t ri = 0;
  double prev_t = -1e300;
  for (size_t i = 0; i < d->nbatches; i++) {
    const df_trace_bat *b = &d->batches[i];
    double lt = -1e300;
    int ld = -1;
    for (; ri < d->nreads && d->reads[ri].t <= b->t; ri++) {
      const df_trace_rd *r = &d->reads[ri];
      if (r->demand && r->ok && r->t > prev_t && r->t >= lt) lt = r->t, ld = r->drive;
    }
    s->bw[s->nbw++] = (df_trace_bw){b->t, b->wait, b->layer, ld};
    prev_t = b->t;
  }
}

static void build_cache(df_trace_series *s, const df_trace_data *d) {
  s->cache = df_xcalloc(d->nbatches + 1, sizeof *s->cache);
  uint64_t h0 = 0, q0 = 0;
  for (size_t i = 0; i < d->nbatches; i++) {
    const df_trace_bat *b = &d->batches[i];
    if (b->pass < 0) continue;
    int last = i + 1 == d->nbatches || d->batches[i + 1].pass != b->pass;
    if (!last) continue;
    uint64_t dq = b->requests > q0 ? b->requests - q0 : 0, dh = b->hits > h0 ? b->hits - h0 : 0;
    if (dh > dq) dh = dq;
    s->cache[s->ncache++] = (df_trace_cpt){b->t, dq ? (double)dh / (double)dq : 0, b->resident, b->rows > 1};
    h0 = b->hits;
    q0 = b->requests;
  }
}

void df_trace_series_build(df_trace_series *s, const df_trace_data *d, const df_trace_data *sp,
                           double bin_s) {
  memset(s, 0, sizeof *s);
  s->ndrives = d->ndrives;
  s->has_spine = sp != NULL;
  double t0 = 1e300, t1 = -1e300;
  time_range(d, &t0, &t1);
  if (sp) time_range(sp, &t0, &t1);
  if (t1 < t0) t0 = t1 = 0;
  if (!(bin_s > 0) || !isfinite(bin_s)) bin_s = DF_TRACE_DEFAULT_BIN;
  double span = t1 - t0;
  if (span / bin_s > MAX_BINS) bin_s = span / MAX_BINS;
  s->t0 = t0;
  s->bin = bin_s;
  s->nbins = (int)ceil(span / bin_s);
  if (s->nbins < 1) s->nbins = 1;
  if (s->nbins > MAX_BINS) s->nbins = MAX_BINS;
  s->t1 = t0 + s->nbins * bin_s;
  int nd = d->ndrives, nb = s->nbins;
  s->mbps = df_xcalloc((size_t)(nd > 0 ? nd : 1) * DF_TR_NCAT * (size_t)nb, sizeof *s->mbps);
  s->peak = df_xcalloc((size_t)nd + 1, sizeof *s->peak);
  s->ceiling = df_xcalloc((size_t)nd + 1, sizeof *s->ceiling);
  s->cat_bytes = df_xcalloc((size_t)(nd + 1) * DF_TR_NCAT, sizeof *s->cat_bytes);
  df_io_emu emu;
  df_err e;
  if (d->emulated && !df_io_parse_emu(d->emulated, &emu, &e) && emu.bw > 0) {
    s->ceiling_emulated = 1;
    for (int dr = 0; dr < nd; dr++) s->ceiling[dr] = emu.bw / 1e6;
  } else if (d->rate) {
    for (int dr = 0; dr < nd; dr++) s->ceiling[dr] = d->rate[dr] / 1e6;
  }
  s->exact = 1;
  item *it = NULL;
  size_t cap = 0;
  for (int dr = 0; dr < nd; dr++) {
    size_t n = 0;
    add_reads(&it, &n, &cap, d, dr, 0);
    if (sp) add_reads(&it, &n, &cap, sp, dr, 1);
    if (n) qsort(it, n, sizeof *it, cmp_item);
    int exact = 1;
    for (size_t i = 0; i < n; i++) exact &= it[i].exact;
    if (!exact) s->exact = 0;
    for (size_t i = 0; i < n; i++) {
      item *x = &it[i];
      double *row = &s->mbps[((size_t)dr * DF_TR_NCAT + (size_t)x->cat) * (size_t)nb];
      spread(row, nb, t0, bin_s, x->a, x->b, x->bytes);
      s->cat_bytes[dr * DF_TR_NCAT + x->cat] += (uint64_t)x->bytes;
    }
    if (!exact) {
      /* the rows above hold each read spread over its own start..completion
       * (overlapping reads add up, so a row can claim more than the drive
       * did); the taut string gives the total per bin, and the classes share
       * it as they share those rows */
      double *tot = df_xcalloc((size_t)nb, sizeof *tot);
      taut_spread(it, n, tot, nb, t0, bin_s);
      for (int k = 0; k < nb; k++) {
        double sum = 0;
        for (int c = 0; c < DF_TR_NCAT; c++) sum += s->mbps[((size_t)dr * DF_TR_NCAT + (size_t)c) * (size_t)nb + (size_t)k];
        for (int c = 0; c < DF_TR_NCAT; c++) {
          double *v = &s->mbps[((size_t)dr * DF_TR_NCAT + (size_t)c) * (size_t)nb + (size_t)k];
          *v = sum > 0 ? *v / sum * tot[k] : 0;
        }
        if (sum <= 0 && tot[k] > 0) /* the string passed a bin no read spans: the demand's */
          s->mbps[((size_t)dr * DF_TR_NCAT) * (size_t)nb + (size_t)k] = tot[k];
      }
      free(tot);
    }
    for (int c = 0; c < DF_TR_NCAT; c++) {
      double *row = &s->mbps[((size_t)dr * DF_TR_NCAT + (size_t)c) * (size_t)nb];
      for (int k = 0; k < nb; k++) row[k] = row[k] / bin_s / 1e6;
    }
    for (int k = 0; k < nb; k++) {
      double tot = 0;
      for (int c = 0; c < DF_TR_NCAT; c++) tot += s->mbps[((size_t)dr * DF_TR_NCAT + (size_t)c) * (size_t)nb + (size_t)k];
      if (tot > s->peak[dr]) s->peak[dr] = tot;
    }
  }
  free(it);
  build_tokens(s, d, sp);
  build_barriers(s, d);
  build_cache(s, d);
}

void df_trace_series_free(df_trace_series *s) {
  free(s->mbps);
  free(s->peak);
  free(s->ceiling);
  free(s->cat_bytes);
  free(s->tok);
  free(s->gen);
  free(s->bw);
  free(s->cache);
  memset(s, 0, sizeof *s);
}

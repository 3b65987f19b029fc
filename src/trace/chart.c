/* The trace report's outputs (report.h): one SVG of stacked panels on one
 * time axis (per-drive throughput by class with the drive's ceiling, the
 * tokens, the barrier waits, the cache), then the per-token and per-layer
 * panels; the HTML page around it; the JSON of the same series.
 *
 * Colours are the Okabe-Ito palette (safe for the common colour-vision
 * deficiencies); every series also differs by position or label, never by
 * colour alone. Labels are placed by an estimate of their width (0.6 em per
 * character) so that ticks and legends keep apart. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "trace/report.h"

#define W 960
#define L 72 /* left margin: y tick labels */
#define R 24
#define PW (W - L - R)
#define FS 11 /* font size */

static const char *const cat_col[DF_TR_NCAT] = {"#0072B2", "#56B4E9", "#D55E00", "#009E73"};
static const char *const cat_name[DF_TR_NCAT] = {"demand", "prefetch", "prefetch, wasted", "spine"};
static const char *const cat_key[DF_TR_NCAT] = {"demand", "prefetch", "wasted", "spine"};
/* drives, in the barrier panel */
static const char *const drv_col[8] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7",
                                       "#56B4E9", "#D55E00", "#F0E442", "#000000"};
#define COL_COMPUTE "#E69F00"
#define COL_EXPERT "#0072B2"
#define COL_SPINE "#009E73"

static double text_w(const char *s, int fs) { return 0.6 * fs * (double)strlen(s); }

static void esc(FILE *g, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", g); break;
    case '>': fputs("&gt;", g); break;
    case '&': fputs("&amp;", g); break;
    case '"': fputs("&quot;", g); break;
    default: fputc(*s, g);
    }
  }
}

/* A step of 1, 2 or 5 x 10^k giving at most n intervals over [0, span]. */
static double nice_step(double span, int n) {
  if (!(span > 0)) return 1;
  double raw = span / n, p = pow(10, floor(log10(raw))), f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

/* The 1, 2 or 5 x 10^k step nearest to span / n intervals (y axes: at
 * least two ticks, as the labels stack vertically). */
static double near_step(double span, int n) {
  if (!(span > 0)) return 1;
  double raw = span / n, p = pow(10, floor(log10(raw))), f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void fmt_tick(char *b, size_t n, double v, double step) {
  int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
  if (dec > 6) dec = 6;
  snprintf(b, n, "%.*f", dec, fabs(v) < step * 1e-6 ? 0.0 : v);
}

typedef struct panel {
  double x0, x1; /* data range on x */
  double ymax;
  int top, h;    /* pixels */
} panel;

static double px(const panel *p, double x) { return L + (x - p->x0) / (p->x1 - p->x0) * PW; }
static double py(const panel *p, double y) { return p->top + p->h - y / p->ymax * p->h; }

static void label(FILE *g, double x, double y, const char *anchor, const char *cls, const char *txt) {
  fprintf(g, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s%s%s>", x, y, anchor, cls ? " class=\"" : "",
          cls ? cls : "", cls ? "\"" : "");
  esc(g, txt);
  fputs("</text>\n", g);
}

/* y axis: ticks, labels, gridlines; the frame */
static void y_axis(FILE *g, const panel *p, const char *unit) {
  int n = p->h >= 100 ? 4 : 2;
  double st = near_step(p->ymax, n);
  if (p->ymax / st > n + 1.01) st = nice_step(p->ymax, n); /* not more than n + 1 intervals */
  fprintf(g, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", L,
          p->top, PW, p->h);
  for (int i = 0; i <= 50 && i * st <= p->ymax * (1 + 1e-9); i++) {
    double v = i * st, y = py(p, v);
    char b[64];
    fmt_tick(b, sizeof b, v, st);
    if (unit && v + st > p->ymax * (1 + 1e-9)) snprintf(b + strlen(b), sizeof b - strlen(b), " %s", unit);
    fprintf(g, "<g class=\"ytick\"><line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
               "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>",
            L, L + PW, y, y, L - 4, L, y, y);
    label(g, L - 6, y + 4, "end", NULL, b);
    fputs("</g>\n", g);
  }
}

/* x gridlines at the time ticks; labels under the panel when labels != 0 */
static void x_axis(FILE *g, const panel *p, int labels, const char *title) {
  char probe[64];
  fmt_tick(probe, sizeof probe, p->x1, nice_step(p->x1 - p->x0, 10));
  int n = (int)(PW / (text_w(probe, FS) + 24));
  if (n < 2) n = 2;
  if (n > 12) n = 12;
  double st = nice_step(p->x1 - p->x0, n);
  double k0 = ceil(p->x0 / st);
  for (int i = 0; i <= 50 && (k0 + i) * st <= p->x1 + st * 1e-9; i++) {
    double v = (k0 + i) * st, x = px(p, v);
    fprintf(g, "<g class=\"xtick\"><line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#e4e4e4\"/>", x, x,
            p->top, p->top + p->h);
    if (labels) {
      char b[64];
      fmt_tick(b, sizeof b, v, st);
      fprintf(g, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#888\"/>", x, x, p->top + p->h,
              p->top + p->h + 4);
      label(g, x, p->top + p->h + 15, "middle", NULL, b);
    }
    fputs("</g>\n", g);
  }
  if (labels && title) label(g, L + PW / 2.0, p->top + p->h + 30, "middle", "axis-title", title);
}

/* A title on the left above the panel, then legend swatches after it. */
static double title_at(FILE *g, int y, const char *t) {
  fprintf(g, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">", L, y);
  esc(g, t);
  fputs("</text>\n", g);
  return L + text_w(t, FS) * 1.1 + 16;
}

static double legend(FILE *g, double x, int y, const char *col, const char *name, int dashed) {
  if (dashed)
    fprintf(g, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\" "
               "stroke-dasharray=\"5,3\"/>",
            x, x + 16, y - 4, y - 4, col);
  else
    fprintf(g, "<rect x=\"%.1f\" y=\"%d\" width=\"12\" height=\"10\" fill=\"%s\" stroke=\"#333\" "
               "stroke-width=\"0.5\"/>",
            x, y - 9, col);
  label(g, x + (dashed ? 20 : 16), y, "start", "legend", name);
  return x + (dashed ? 20 : 16) + text_w(name, FS) + 14;
}

/* One drive's panel: stacked classes per bin, the total's outline, the ceiling. */
static void drive_panel(FILE *g, const df_trace_data *d, const df_trace_series *s, int dr, panel *p) {
  int nb = s->nbins;
  double ymax = s->peak[dr];
  if (s->ceiling[dr] > ymax) ymax = s->ceiling[dr];
  p->ymax = ymax > 0 ? ymax * 1.2 : 1;
  char t[600];
  snprintf(t, sizeof t, "drive %d: %.200s", dr, d->drive_paths[dr]);
  if (strlen(t) > 60) strcpy(t + 57, "...");
  fprintf(g, "<g class=\"drive-panel\" data-drive=\"%d\" data-peak-mbps=\"%.3f\" data-ceiling-mbps=\"%.3f\">\n",
          dr, s->peak[dr], s->ceiling[dr]);
  double lx = title_at(g, p->top - 6, t);
  if (dr == 0) {
    for (int c = 0; c < DF_TR_NCAT; c++) {
      int any = 0;
      for (int k = 0; k < d->ndrives; k++) any |= s->cat_bytes[k * DF_TR_NCAT + c] > 0;
      if (any || c == DF_TR_DEMAND) lx = legend(g, lx, p->top - 6, cat_col[c], cat_name[c], 0);
    }
  }
  y_axis(g, p, "MB/s");
  x_axis(g, p, 0, NULL);
  double bw = (double)PW / nb;
  double *base = df_xcalloc((size_t)nb + 1, sizeof *base);
  for (int c = 0; c < DF_TR_NCAT; c++) {
    const double *row = &s->mbps[((size_t)dr * DF_TR_NCAT + (size_t)c) * (size_t)nb];
    int any = 0;
    for (int k = 0; k < nb; k++) any |= row[k] > 0;
    if (!any) continue;
    fprintf(g, "<path class=\"cls-%s\" fill=\"%s\" stroke=\"none\" d=\"", cat_key[c], cat_col[c]);
    fprintf(g, "M%.2f,%.2f", (double)L, py(p, base[0]));
    for (int k = 0; k < nb; k++)
      fprintf(g, "V%.2fH%.2f", py(p, base[k] + row[k]), L + (k + 1) * bw);
    for (int k = nb - 1; k >= 0; k--) fprintf(g, "V%.2fH%.2f", py(p, base[k]), L + k * bw);
    fputs("Z\"/>\n", g);
    for (int k = 0; k < nb; k++) base[k] += row[k];
  }
  /* the total: what the drive delivered per bin (outlined where bins are
   * wide enough for an outline to help; the path is there either way) */
  fprintf(g, "<path class=\"total\" fill=\"none\" stroke=\"%s\" stroke-width=\"0.8\" d=\"M%d,%.2f",
          bw >= 3 ? "#000" : "none", L, py(p, base[0]));
  for (int k = 0; k < nb; k++) fprintf(g, "V%.2fH%.2f", py(p, base[k]), L + (k + 1) * bw);
  fputs("\"/>\n", g);
  free(base);
  if (s->ceiling[dr] > 0) {
    double y = py(p, s->ceiling[dr]);
    fprintf(g, "<line class=\"ceiling\" data-mbps=\"%.3f\" x1=\"%d\" x2=\"%d\" y1=\"%.2f\" y2=\"%.2f\" "
               "stroke=\"#000\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n",
            s->ceiling[dr], L, L + PW, y, y);
    char b[128];
    snprintf(b, sizeof b, "%s %.*f MB/s", s->ceiling_emulated ? "EMULATED ceiling" : "store's rate estimate",
             s->ceiling[dr] >= 100 ? 0 : s->ceiling[dr] >= 1 ? 1 : 3, s->ceiling[dr]);
    double w = text_w(b, FS), x = L + PW - w - 22;
    if (x > lx) { /* in the title row, as a legend entry: nothing drawn is covered */
      fprintf(g, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#000\" stroke-width=\"1.5\" "
                 "stroke-dasharray=\"6,4\"/>",
              x, x + 18, p->top - 10, p->top - 10);
      label(g, L + PW, p->top - 6, "end", "ceiling-label", b);
    } else {
      fprintf(g, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"13\" fill=\"white\"/>", L + PW - w - 8,
              y - 15, w + 6);
      label(g, L + PW - 4, y - 4, "end", "ceiling-label", b);
    }
  }
  fputs("</g>\n", g);
}

/* The tokens on the time axis: the prefill band of each generation and a
 * mark per token, numbered where there is room. */
static void token_strip(FILE *g, const df_trace_series *s, panel *p) {
  title_at(g, p->top - 6, "tokens (the prompt's prefill shaded, a mark per generated token)");
  fprintf(g, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", L, p->top,
          PW, p->h);
  x_axis(g, p, 1, "time (s, since the store opened)");
  for (size_t i = 0; i < s->ngen; i++) {
    double a = px(p, s->gen[i].t), b = a;
    for (size_t k = 0; k < s->ntok; k++)
      if (s->tok[k].prefill && s->tok[k].t >= s->gen[i].t) {
        b = px(p, s->tok[k].t);
        break;
      }
    fprintf(g, "<rect class=\"prefill\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#F0E442\" "
               "opacity=\"0.6\"/>\n",
            a, p->top, b - a > 1 ? b - a : 1, p->h);
    char t[64];
    snprintf(t, sizeof t, "prefill, %d prompt tokens", s->gen[i].i);
    if (b - a > text_w(t, FS) + 6) label(g, (a + b) / 2, p->top + p->h - 4, "middle", "prefill-label", t);
  }
  double last_lab = -1e9;
  for (size_t k = 0; k < s->ntok; k++) {
    double x = px(p, s->tok[k].t);
    fprintf(g, "<line class=\"tok-mark\" data-i=\"%d\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#000\"/>\n",
            s->tok[k].i, x, x, p->top, p->top + 12);
    char t[16];
    snprintf(t, sizeof t, "%d", s->tok[k].i);
    if (x - last_lab > text_w(t, 9) + 8 + text_w("0000", 9) / 2 && x + text_w(t, 9) / 2 < L + PW) {
      fprintf(g, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"9\" class=\"tok-label\">%s</text>\n",
              x, p->top + 22, t);
      last_lab = x;
    }
  }
}

static void barrier_panel(FILE *g, const df_trace_data *d, const df_trace_series *s, panel *p) {
  double wmax = 0;
  for (size_t i = 0; i < s->nbw; i++)
    if (s->bw[i].wait > wmax) wmax = s->bw[i].wait;
  p->ymax = wmax > 0 ? wmax * 1e3 * 1.1 : 1;
  double lx = title_at(g, p->top - 6, "layer-barrier waits, by the drive that finished last");
  for (int dr = 0; dr < d->ndrives && dr < 8; dr++) {
    char b[32];
    snprintf(b, sizeof b, "drive %d", dr);
    lx = legend(g, lx, p->top - 6, drv_col[dr], b, 0);
  }
  y_axis(g, p, "ms");
  x_axis(g, p, 0, NULL);
  for (size_t i = 0; i < s->nbw; i++) {
    if (!(s->bw[i].wait > 0)) continue;
    double x = px(p, s->bw[i].t), y = py(p, s->bw[i].wait * 1e3);
    int ld = s->bw[i].last;
    fprintf(g, "<line class=\"barrier\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.1f\" stroke=\"%s\" "
               "stroke-width=\"1.5\"/>\n",
            x, x, p->top + p->h, y, ld >= 0 ? drv_col[ld % 8] : "#888");
  }
}

static void cache_panels(FILE *g, const df_trace_series *s, panel *ph, panel *pr) {
  ph->ymax = 100;
  title_at(g, ph->top - 6, "cache hit rate per forward pass");
  y_axis(g, ph, "%");
  x_axis(g, ph, 0, NULL);
  uint64_t rmax = 0;
  for (size_t i = 0; i < s->ncache; i++)
    if (s->cache[i].resident > rmax) rmax = s->cache[i].resident;
  pr->ymax = rmax > 0 ? (double)rmax / 1e6 * 1.1 : 1;
  title_at(g, pr->top - 6, "expert bytes resident in the cache");
  y_axis(g, pr, "MB");
  for (int k = 0; k < 2; k++) {
    panel *p = k ? pr : ph;
    fprintf(g, "<path class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" d=\"", k ? "resident" : "hitrate",
            k ? "#CC79A7" : "#0072B2");
    double prev = s->t0;
    for (size_t i = 0; i < s->ncache; i++) {
      double v = k ? (double)s->cache[i].resident / 1e6 : s->cache[i].hit_rate * 100;
      fprintf(g, "%c%.1f,%.1fH%.1f", i ? 'L' : 'M', px(p, prev), py(p, v), px(p, s->cache[i].t));
      prev = s->cache[i].t;
    }
    fputs("\"/>\n", g);
  }
}

/* Per token: compute, waiting on experts, waiting on the spine (ms), stacked. */
static void token_panel(FILE *g, const df_trace_series *s, panel *p) {
  double m = 0;
  for (size_t i = 0; i < s->ntok; i++)
    if (s->tok[i].dur > m) m = s->tok[i].dur;
  p->ymax = m > 0 ? m * 1e3 * 1.1 : 1;
  double lx = title_at(g, p->top - 6, "time per token");
  lx = legend(g, lx, p->top - 6, COL_COMPUTE, "compute and the rest", 0);
  lx = legend(g, lx, p->top - 6, COL_EXPERT, "waiting on experts", 0);
  if (s->has_spine) legend(g, lx, p->top - 6, COL_SPINE, "waiting on the spine", 0);
  y_axis(g, p, "ms");
  size_t n = s->ntok ? s->ntok : 1;
  double bw = (double)PW / (double)n;
  for (size_t i = 0; i < s->ntok; i++) {
    const df_trace_tok *t = &s->tok[i];
    double x = L + bw * (double)i + (bw > 3 ? bw * 0.1 : 0), w = bw > 3 ? bw * 0.8 : bw;
    double v[3] = {t->expert_wait * 1e3, t->spine_wait * 1e3, t->compute * 1e3};
    const char *c[3] = {COL_EXPERT, COL_SPINE, COL_COMPUTE};
    double b = 0;
    fprintf(g, "<g class=\"tok-bar\" data-i=\"%d\">", t->i);
    for (int k = 0; k < 3; k++) {
      if (v[k] <= 0) continue;
      fprintf(g, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>", x, py(p, b + v[k]), w,
              py(p, b) - py(p, b + v[k]), c[k]);
      b += v[k];
    }
    fputs("</g>\n", g);
  }
  /* token numbers under the bars where there is room */
  int every = 1;
  while (bw * every < text_w("0000", FS) + 6) every = every < 5 ? every + 1 : every * 2;
  for (size_t i = 0; i < s->ntok; i += (size_t)every) {
    char b[16];
    snprintf(b, sizeof b, "%d", s->tok[i].i);
    fprintf(g, "<g class=\"xtick\">");
    label(g, L + bw * ((double)i + 0.5), p->top + p->h + 15, "middle", NULL, b);
    fputs("</g>\n", g);
  }
  label(g, L + PW / 2.0, p->top + p->h + 30, "middle", "axis-title",
        "token (1 = the first, sampled after the prompt's prefill)");
}

static void recall_panel(FILE *g, const df_trace_data *d, panel *p) {
  int nl = 0;
  for (int k = 0; k < d->nrecall; k++)
    if (d->recall[k].n > nl) nl = d->recall[k].n;
  p->ymax = 100;
  double lx = title_at(g, p->top - 6, "predictor recall per MoE layer");
  static const char *const pc[4] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7"};
  for (int k = 0; k < d->nrecall && k < 4; k++) lx = legend(g, lx, p->top - 6, pc[k], d->recall[k].pred, 0);
  y_axis(g, p, "%");
  if (!nl) return;
  double gw = (double)PW / nl, bw = gw * 0.8 / (d->nrecall < 4 ? d->nrecall : 4);
  int every = 1;
  while (gw * every < text_w("000", FS) + 6) every++;
  for (int l = 0; l < nl; l++) {
    for (int k = 0; k < d->nrecall && k < 4; k++) {
      double v = l < d->recall[k].n ? d->recall[k].r[l] : -1;
      if (v < 0) continue;
      fprintf(g, "<rect class=\"recall\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n",
              L + gw * l + gw * 0.1 + bw * k, py(p, v * 100), bw, py(p, 0) - py(p, v * 100), pc[k]);
    }
    if (l % every == 0) {
      char b[16];
      snprintf(b, sizeof b, "%d", l);
      fprintf(g, "<g class=\"xtick\">");
      label(g, L + gw * (l + 0.5), p->top + p->h + 15, "middle", NULL, b);
      fputs("</g>\n", g);
    }
  }
  label(g, L + PW / 2.0, p->top + p->h + 30, "middle", "axis-title",
        "MoE layer (0 = the first; '-' layers were never measured)");
}

void df_trace_svg_write(const df_trace_data *d, const df_trace_data *sp, const df_trace_series *s, FILE *g) {
  (void)sp;
  int nd = d->ndrives;
  int dh = nd > 4 ? 80 : 110, gap = 30;
  int y = 58;
  panel dp[64];
  int nshow = nd < 64 ? nd : 64;
  for (int i = 0; i < nshow; i++) {
    dp[i] = (panel){s->t0, s->t1, 1, y, dh};
    y += dh + gap;
  }
  y += 6;
  panel tk = {s->t0, s->t1, 1, y, 26};
  y += 26 + 50;
  panel br = {s->t0, s->t1, 1, y, 90};
  y += 90 + gap;
  int has_cache = s->ncache > 0;
  panel ch = {s->t0, s->t1, 100, y, 60}, cr = {s->t0, s->t1, 1, y + 60 + gap, 60};
  if (has_cache) y += 2 * (60 + gap);
  y += 24;
  panel tp = {0, 1, 1, y, 110};
  if (s->ntok) y += 110 + 64;
  panel rp = {0, 1, 100, y, 90};
  if (d->nrecall) y += 90 + 54;
  int H = y;
  fprintf(g, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"df-trace\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"%d\">\n"
             "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          W, H, W, H, FS);
  char t[256];
  snprintf(t, sizeof t, "Where the time and the bytes went: %d drive%s%s%s, bins of %.3g ms", nd, nd == 1 ? "" : "s",
           d->emulated ? ", EMULATED " : " (real drives)", d->emulated ? d->emulated : "", s->bin * 1e3);
  fprintf(g, "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">", L);
  esc(g, t);
  fputs("</text>\n", g);
  fprintf(g, "<text x=\"%d\" y=\"36\" fill=\"#444\">device MB/s per drive: %s</text>\n", L,
          s->exact ? "each read's bytes spread over the time the emulated drive moved them"
                   : "the least each drive must have delivered, from its reads' starts and completions");
  for (int i = 0; i < nshow; i++) drive_panel(g, d, s, i, &dp[i]);
  if (nshow) x_axis(g, &dp[nshow - 1], 1, NULL);
  token_strip(g, s, &tk);
  barrier_panel(g, d, s, &br);
  x_axis(g, &br, !has_cache, has_cache ? NULL : "time (s)");
  if (has_cache) {
    cache_panels(g, s, &ch, &cr);
    x_axis(g, &cr, 1, "time (s)");
  }
  if (s->ntok) token_panel(g, s, &tp);
  if (d->nrecall) recall_panel(g, d, &rp);
  fputs("</svg>\n", g);
}

/* ---- HTML ---- */

static void td(FILE *g, const char *fmt, double v) {
  fputs("<td>", g);
  fprintf(g, fmt, v);
  fputs("</td>", g);
}

void df_trace_html_write(const df_trace_data *d, const df_trace_data *sp, const df_trace_series *s,
                         const char *name, FILE *g) {
  fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>deltafin trace report: ", g);
  esc(g, name);
  fputs("</title>\n<style>body{font-family:'DejaVu Sans',Arial,sans-serif;margin:24px;color:#111;max-width:1000px}"
        "table{border-collapse:collapse;margin:8px 0 18px}td,th{border:1px solid #bbb;padding:3px 8px;"
        "text-align:right}th{background:#f1f1f1}td:first-child,th:first-child{text-align:left}"
        ".warn{background:#fff3c4;border:1px solid #d9b100;padding:6px 10px}pre{background:#f6f6f6;"
        "padding:8px;overflow-x:auto;white-space:pre-wrap}h2{margin-top:28px}td.path{text-align:left}"
        "figure{margin:0}</style></head><body>\n",
        g);
  fputs("<h1>deltafin trace report</h1>\n<p>trace <code>", g);
  esc(g, name);
  fprintf(g, "</code>, I/O engine %s.</p>\n", d->io);
  if (d->emulated) {
    fputs("<p class=\"warn\" id=\"emulated\">EMULATED drives (", g);
    esc(g, d->emulated);
    fputs(" each, throttled in the store): the storage figures are the emulation's, not the disks'.</p>\n", g);
  }
  fputs("<h2>Command and machine</h2>\n<pre id=\"command\">", g);
  esc(g, d->command ? d->command : "(not recorded in this trace)");
  fputs("</pre>\n<p id=\"machine\">", g);
  esc(g, d->host ? d->host : "machine not recorded in this trace");
  fputs("</p>\n<h2>Drives</h2>\n<table id=\"drives\"><tr><th>drive</th><th>path</th><th>reads</th>"
        "<th>device MB</th><th>demand MB</th><th>prefetch MB</th><th>wasted MB</th>",
        g);
  if (sp) fputs("<th>spine MB</th>", g);
  fprintf(g, "<th>highest %.3g ms bin, MB/s</th><th>ceiling, MB/s</th></tr>\n", s->bin * 1e3);
  for (int dr = 0; dr < d->ndrives; dr++) {
    size_t nr = 0;
    for (size_t i = 0; i < d->nreads; i++) nr += d->reads[i].drive == dr && d->reads[i].ok;
    uint64_t *cb = &s->cat_bytes[dr * DF_TR_NCAT], tot = cb[0] + cb[1] + cb[2] + cb[3];
    fprintf(g, "<tr><td>%d</td><td class=\"path\">", dr);
    esc(g, d->drive_paths[dr]);
    fprintf(g, "</td><td>%zu</td>", nr);
    for (int c = -1; c < (sp ? 4 : 3); c++) td(g, "%.1f", (double)(c < 0 ? tot : cb[c]) / 1e6);
    td(g, "%.1f", s->peak[dr]);
    if (s->ceiling[dr] > 0) {
      fprintf(g, "<td>%.1f (%s)</td>", s->ceiling[dr], s->ceiling_emulated ? "EMULATED" : "store's estimate");
    } else {
      fputs("<td>not known</td>", g);
    }
    fputs("</tr>\n", g);
  }
  fputs("</table>\n", g);
  /* phases */
  double pd = 0, dd = 0, de = 0, ds = 0, dc = 0;
  size_t np = 0, nd = 0;
  for (size_t i = 0; i < s->ntok; i++) {
    const df_trace_tok *t = &s->tok[i];
    if (t->prefill) pd += t->dur, np++;
    else dd += t->dur, de += t->expert_wait, ds += t->spine_wait, dc += t->compute, nd++;
  }
  fprintf(g, "<h2>Tokens</h2>\n<table id=\"phases\"><tr><th>phase</th><th>tokens</th><th>seconds</th>"
             "<th>s/token</th><th>tokens/s</th><th>compute</th><th>waiting on experts</th>%s</tr>\n",
          sp ? "<th>waiting on the spine</th>" : "");
  fprintf(g, "<tr><td>prefill (to the first token)</td><td>%zu</td>", np);
  td(g, "%.3f", pd);
  fputs("<td>-</td><td>-</td><td>-</td><td>-</td>", g);
  if (sp) fputs("<td>-</td>", g);
  fprintf(g, "</tr>\n<tr><td>decode</td><td>%zu</td>", nd);
  td(g, "%.3f", dd);
  td(g, "%.4f", nd ? dd / (double)nd : 0);
  td(g, "%.2f", dd > 0 ? (double)nd / dd : 0);
  td(g, "%.0f%%", dd > 0 ? 100 * dc / dd : 0);
  td(g, "%.0f%%", dd > 0 ? 100 * de / dd : 0);
  if (sp) td(g, "%.0f%%", dd > 0 ? 100 * ds / dd : 0);
  fputs("</tr>\n</table>\n", g);
  fputs("<h2>Charts</h2>\n<figure>\n", g);
  df_trace_svg_write(d, sp, s, g);
  fputs("</figure>\n", g);
  if (d->nrecall) {
    fputs("<h2>Predictors</h2>\n<table id=\"recall\"><tr><th>predictor</th>", g);
    int nl = 0;
    for (int k = 0; k < d->nrecall; k++)
      if (d->recall[k].n > nl) nl = d->recall[k].n;
    for (int l = 0; l < nl; l++) fprintf(g, "<th>layer %d</th>", l);
    fputs("</tr>\n", g);
    for (int k = 0; k < d->nrecall; k++) {
      fputs("<tr><td>", g);
      esc(g, d->recall[k].pred);
      fputs("</td>", g);
      for (int l = 0; l < nl; l++)
        if (l < d->recall[k].n && d->recall[k].r[l] >= 0) td(g, "%.0f%%", 100 * d->recall[k].r[l]);
        else fputs("<td>-</td>", g);
      fputs("</tr>\n", g);
    }
    fputs("</table>\n", g);
  }
  fputs("<h2>Summary</h2>\n<pre id=\"summary\">", g);
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (m) {
    df_trace_summary(d, name, m);
    fclose(m);
    esc(g, buf);
    free(buf);
  }
  fputs("</pre>\n<details><summary>every token</summary>\n<table id=\"tokens\"><tr><th>token</th><th>t, s</th>"
        "<th>ms</th><th>compute ms</th><th>experts ms</th><th>spine ms</th></tr>\n",
        g);
  for (size_t i = 0; i < s->ntok; i++) {
    const df_trace_tok *t = &s->tok[i];
    fprintf(g, "<tr><td>%d%s</td>", t->i, t->prefill ? " (prefill)" : "");
    td(g, "%.4f", t->t);
    td(g, "%.2f", t->dur * 1e3);
    td(g, "%.2f", t->compute * 1e3);
    td(g, "%.2f", t->expert_wait * 1e3);
    td(g, "%.2f", t->spine_wait * 1e3);
    fputs("</tr>\n", g);
  }
  fputs("</table></details>\n<p>Written by <code>deltafin trace report</code>; colours: the Okabe-Ito palette.</p>\n"
        "</body></html>\n",
        g);
}

/* ---- JSON ---- */

static json_t *jarr(const double *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, json_real(round(v[i] * 1e3) / 1e3));
  return a;
}

void df_trace_json_write(const df_trace_data *d, const df_trace_data *sp, const df_trace_series *s,
                         const char *name, FILE *g) {
  json_t *o = json_object();
  json_object_set_new(o, "trace", json_string(name));
  json_object_set_new(o, "emulated", d->emulated ? json_string(d->emulated) : json_null());
  json_object_set_new(o, "command", d->command ? json_string(d->command) : json_null());
  json_object_set_new(o, "host", d->host ? json_string(d->host) : json_null());
  json_object_set_new(o, "t0", json_real(s->t0));
  json_object_set_new(o, "bin_s", json_real(s->bin));
  json_object_set_new(o, "nbins", json_integer(s->nbins));
  json_object_set_new(o, "exact_transfer_times", json_boolean(s->exact));
  json_t *dr = json_array();
  for (int i = 0; i < d->ndrives; i++) {
    json_t *x = json_object();
    json_object_set_new(x, "path", json_string(d->drive_paths[i]));
    json_object_set_new(x, "ceiling_mbps", s->ceiling[i] > 0 ? json_real(s->ceiling[i]) : json_null());
    json_object_set_new(x, "ceiling_kind", json_string(s->ceiling[i] <= 0 ? "none"
                                                       : s->ceiling_emulated ? "emulated"
                                                                             : "rate_estimate"));
    json_object_set_new(x, "peak_mbps", json_real(s->peak[i]));
    for (int c = 0; c < DF_TR_NCAT; c++) {
      if (c == DF_TR_SPINE && !sp) continue;
      char k[32];
      snprintf(k, sizeof k, "%s_mbps", cat_key[c]);
      json_object_set_new(x, k, jarr(&s->mbps[((size_t)i * DF_TR_NCAT + (size_t)c) * (size_t)s->nbins], s->nbins));
      snprintf(k, sizeof k, "%s_bytes", cat_key[c]);
      json_object_set_new(x, k, json_integer((json_int_t)s->cat_bytes[i * DF_TR_NCAT + c]));
    }
    json_array_append_new(dr, x);
  }
  json_object_set_new(o, "drives", dr);
  json_t *tk = json_array();
  for (size_t i = 0; i < s->ntok; i++) {
    const df_trace_tok *t = &s->tok[i];
    json_t *x = json_object();
    json_object_set_new(x, "i", json_integer(t->i));
    json_object_set_new(x, "phase", json_string(t->prefill ? "prefill" : "decode"));
    json_object_set_new(x, "t", json_real(t->t));
    json_object_set_new(x, "seconds", json_real(t->dur));
    json_object_set_new(x, "compute_s", json_real(t->compute));
    json_object_set_new(x, "expert_wait_s", json_real(t->expert_wait));
    json_object_set_new(x, "spine_wait_s", json_real(t->spine_wait));
    json_array_append_new(tk, x);
  }
  json_object_set_new(o, "tokens", tk);
  json_t *gs = json_array();
  for (size_t i = 0; i < s->ngen; i++) {
    json_t *x = json_object();
    json_object_set_new(x, "t", json_real(s->gen[i].t));
    json_object_set_new(x, "prompt_tokens", json_integer(s->gen[i].i));
    json_array_append_new(gs, x);
  }
  json_object_set_new(o, "generations", gs);
  json_t *bw = json_array();
  for (size_t i = 0; i < s->nbw; i++) {
    json_t *x = json_object();
    json_object_set_new(x, "t", json_real(s->bw[i].t));
    json_object_set_new(x, "layer", json_integer(s->bw[i].layer));
    json_object_set_new(x, "wait_s", json_real(s->bw[i].wait));
    json_object_set_new(x, "last_drive", s->bw[i].last >= 0 ? json_integer(s->bw[i].last) : json_null());
    json_array_append_new(bw, x);
  }
  json_object_set_new(o, "barriers", bw);
  json_t *ca = json_array();
  for (size_t i = 0; i < s->ncache; i++) {
    json_t *x = json_object();
    json_object_set_new(x, "t", json_real(s->cache[i].t));
    json_object_set_new(x, "hit_rate", json_real(s->cache[i].hit_rate));
    json_object_set_new(x, "resident_bytes", json_integer((json_int_t)s->cache[i].resident));
    json_object_set_new(x, "prefill", json_boolean(s->cache[i].prefill));
    json_array_append_new(ca, x);
  }
  json_object_set_new(o, "cache", ca);
  json_t *rc = json_object();
  for (int k = 0; k < d->nrecall; k++) {
    json_t *a = json_array();
    for (int l = 0; l < d->recall[k].n; l++)
      json_array_append_new(a, d->recall[k].r[l] >= 0 ? json_real(d->recall[k].r[l]) : json_null());
    json_object_set_new(rc, d->recall[k].pred, a);
  }
  json_object_set_new(o, "recall_per_layer", rc);
  json_dumpf(o, g, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  fputc('\n', g);
  json_decref(o);
}

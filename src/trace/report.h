/* `deltafin trace report`: reads a store trace (format: store/trace.h) and
 * summarises it: bytes, rates and busy time per drive, layer-batch barrier
 * waits and which drive finished last, per-token compute and waits, the
 * cache and the predictors. It bins the reads over time (series.c) and
 * draws them (chart.c: one SVG, a self-contained HTML page, a JSON file of
 * the same binned series). The spine stream's trace next to the file
 * (PATH.spine.jsonl) is read with it, on the same clock. */
#ifndef DF_TRACE_REPORT_H
#define DF_TRACE_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

/* read classes as the report counts them */
enum { DF_TR_DEMAND = 0, DF_TR_PREFETCH, DF_TR_WASTED, DF_TR_SPINE, DF_TR_NCAT };

typedef struct df_trace_rd {
  double t, service; /* when the store saw it complete, time at the drive */
  double start;      /* when the drive took it (t - service where the trace lacks it) */
  double x0, x1;     /* an emulated drive's transfer interval; x1 = 0: not known */
  int layer, expert, drive, demand, ok;
  int wasted;        /* a speculative read evicted unused (a "wasted" record names it) */
  uint64_t bytes;    /* record bytes */
  uint64_t dev;      /* bytes the drive read (alignment included); = bytes where unknown */
} df_trace_rd;

typedef struct df_trace_smp {
  double t;
  int drive;
  uint64_t bytes; /* cumulative */
} df_trace_smp;

typedef struct df_trace_bat {
  double t, wait;
  int layer, n;
  long pass;       /* -1 = not in the trace (older traces, the spine's) */
  int rows;
  uint64_t hits, requests, resident;
} df_trace_bat;

typedef struct df_trace_mk {
  double t;
  int i;     /* gen: the prompt's length; token: its number, 1-based */
  int gen;   /* 1 = a generation began, 0 = a token */
} df_trace_mk;

typedef struct df_trace_waste {
  double t;
  int layer, expert;
} df_trace_waste;

typedef struct df_trace_recall {
  char *pred;
  double *r; /* per MoE layer, < 0 = not measured */
  int n;
} df_trace_recall;

/* A parsed trace. */
typedef struct df_trace_data {
  int ndrives;
  char **drive_paths;
  char *emulated; /* NULL = real drives */
  char *io;
  char *command;  /* the command line, NULL = not recorded */
  char *host;     /* "CPU, N cores, M GB, kernel K", NULL = not recorded */
  df_trace_rd *reads;
  size_t nreads;
  df_trace_smp *samples;
  size_t nsamples;
  df_trace_bat *batches;
  size_t nbatches;
  df_trace_mk *marks;
  size_t nmarks;
  df_trace_waste *waste;
  size_t nwaste;
  df_trace_recall *recall;
  int nrecall;
  double *rate; /* per drive, bytes/s (the store's estimate at close); NULL = none */
} df_trace_data;

/* Parses a trace from f (name for messages); a torn last line (a killed
 * run) is ignored; so are kinds and fields it does not know. */
int df_trace_parse(df_trace_data *d, FILE *f, const char *name, df_err *e);
void df_trace_data_free(df_trace_data *d);

/* ---- the binned series (series.c) ---- */

typedef struct df_trace_tok {
  int i, prefill;        /* number (1-based); the first token of a generation (its prefill) */
  double t, dur;         /* when sampled; since the previous token (or the generation's start) */
  double expert_wait, spine_wait, compute; /* of dur: compute = the rest */
} df_trace_tok;

typedef struct df_trace_bw {
  double t, wait;
  int layer, last; /* last: the drive whose demand read finished last, -1 = none */
} df_trace_bw;

typedef struct df_trace_cpt {
  double t, hit_rate; /* one forward pass: its hits / its requests */
  uint64_t resident;  /* record bytes in the cache at its end */
  int prefill;
} df_trace_cpt;

typedef struct df_trace_series {
  double t0, t1, bin; /* time range (s, the store's clock) and bin width */
  int nbins, ndrives;
  double *mbps;       /* [(drive * DF_TR_NCAT + cat) * nbins + bin], MB/s of device bytes */
  double *peak;       /* per drive: the highest binned total */
  double *ceiling;    /* per drive: MB/s, 0 = not known */
  int ceiling_emulated; /* 1: the emulation's bandwidth, 0: the store's rate estimate */
  int exact;          /* every read had the emulated drive's transfer interval */
  uint64_t *cat_bytes; /* [drive * DF_TR_NCAT + cat]: device bytes */
  df_trace_tok *tok;
  size_t ntok;
  df_trace_mk *gen;   /* the generations' starts */
  size_t ngen;
  df_trace_bw *bw;
  size_t nbw;
  df_trace_cpt *cache;
  size_t ncache;
  int has_spine;
} df_trace_series;

#define DF_TRACE_DEFAULT_BIN 0.010
/* Bins d (and its spine trace sp, NULL = none) into bins of bin_s seconds
 * (widened, and said so in s->bin, where it would need more than 20,000). */
void df_trace_series_build(df_trace_series *s, const df_trace_data *d, const df_trace_data *sp,
                           double bin_s);
void df_trace_series_free(df_trace_series *s);

/* ---- output ---- */

/* The text summary of d to out (name: the trace's path). */
void df_trace_summary(const df_trace_data *d, const char *name, FILE *out);
/* The charts as one SVG document (chart.c). */
void df_trace_svg_write(const df_trace_data *d, const df_trace_data *sp, const df_trace_series *s,
                        FILE *g);
/* The self-contained HTML report: the charts inline, the tables, the command
 * and the machine. name: the trace's path. */
void df_trace_html_write(const df_trace_data *d, const df_trace_data *sp, const df_trace_series *s,
                         const char *name, FILE *g);
/* The binned series and the summary as JSON. */
void df_trace_json_write(const df_trace_data *d, const df_trace_data *sp, const df_trace_series *s,
                         const char *name, FILE *g);

typedef struct df_trace_out {
  const char *svg, *html, *json; /* NULL = not wanted */
  double bin_s;                  /* 0 = DF_TRACE_DEFAULT_BIN */
} df_trace_out;

/* Parse + summary to out + the files o asks for (each written to a temp
 * name and renamed); a spine trace next to path (PATH.spine.jsonl) is
 * summarised and charted with it. */
int df_trace_report(const char *path, FILE *out, const df_trace_out *o, df_err *e);

#endif

/* `deltafin trace report`: reads a store trace (format: store/trace.h) and
 * summarises it: bytes, rates and busy time per drive, layer-batch barrier
 * waits and which drive finished last, and optionally an SVG chart of the
 * per-drive read rate over time (and the spine stream's, when its trace
 * lies next to the file) with the barrier waits below it. */
#ifndef DF_TRACE_REPORT_H
#define DF_TRACE_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

typedef struct df_trace_rd {
  double t, service; /* completion time, time at the drive */
  int layer, drive, demand, ok;
  uint64_t bytes;
} df_trace_rd;

typedef struct df_trace_smp {
  double t;
  int drive;
  uint64_t bytes; /* cumulative */
} df_trace_smp;

typedef struct df_trace_bat {
  double t, wait;
  int layer, n;
} df_trace_bat;

/* A parsed trace. */
typedef struct df_trace_data {
  int ndrives;
  char **drive_paths;
  char *emulated; /* NULL = real drives */
  char *io;
  df_trace_rd *reads;
  size_t nreads;
  df_trace_smp *samples;
  size_t nsamples;
  df_trace_bat *batches;
  size_t nbatches;
} df_trace_data;

/* Parses a trace from f (name for messages); a torn last line (a killed
 * run) is ignored. */
int df_trace_parse(df_trace_data *d, FILE *f, const char *name, df_err *e);
void df_trace_data_free(df_trace_data *d);

/* The text summary of d to out (name: the trace's path). */
void df_trace_summary(const df_trace_data *d, const char *name, FILE *out);
/* The SVG chart of d, written to path (temp name, renamed when complete);
 * spine (the spine stream's trace, NULL = none) is drawn on the same axes
 * as its own series. */
int df_trace_svg(const df_trace_data *d, const df_trace_data *spine, const char *path, df_err *e);

/* Parse + summary + (svg_path != NULL) chart; a spine trace next to path
 * (PATH.spine.jsonl) is summarised and charted with it. */
int df_trace_report(const char *path, FILE *out, const char *svg_path, df_err *e);

#endif

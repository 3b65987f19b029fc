/* Measurement: `deltafin bench kernels` (kernel throughput next to the
 * machine's memory read bandwidth) and `deltafin bench --model DIR` (prefill
 * and decode through the engine API, the expert store's statistics, and the
 * storage ceiling measured with the store's own I/O engine).
 *
 * Benchmarks report; they never decide anything the engine computes. Every
 * number printed says what it is and how it was measured. */
#ifndef DF_BENCH_BENCH_H
#define DF_BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "engine/engine.h"

/* Streaming read bandwidth (bytes/s) of `bytes` of RAM with `threads`
 * threads, each reading its own slice; best of passes run for >= min_s. */
double df_bench_membw(int threads, size_t bytes, double min_s);

typedef struct df_bench_kopts {
  const char *tables;  /* comma list (scalar,avx2,avx512,neon); NULL = scalar + every SIMD table here */
  const char *threads; /* comma list of thread counts; NULL = 1..cores */
  const char *only;    /* substring filter on kernel names; NULL = all */
  long pool_mb;        /* weights cycled through, so reads come from RAM not cache (default 256) */
  double min_s;        /* time per measurement (default 0.3 s) */
  int json;
} df_bench_kopts;

int df_bench_kernels(const df_bench_kopts *o, FILE *out, df_err *e);

typedef struct df_bench_mopts {
  df_engine_opts engine; /* the engine and store options, as for run (store.manifest is replaced
                          * by the pack of each ladder step when drives are given) */
  int prompt_tokens;   /* default 64 */
  int new_tokens;      /* default 8 */
  int prefill_chunk;   /* <= 0: the whole prompt in one batch */
  int repeat;          /* default 3 */
  const char *drives;  /* comma list of drive directories to pack onto (ladder/--drives) */
  int ladder;          /* 1..N drives of `drives` (or 1..4 emulated copies when drives is NULL) */
  int no_ceiling;
  int json;
  /* the trace report of each configuration (trace/report.h): REPORT (HTML),
   * REPORT.json (the binned series) and the trace REPORT.trace.jsonl; a
   * ladder's step of k drives inserts "-<k>drives" before the extension.
   * NULL = none. */
  const char *report;
} df_bench_mopts;

int df_bench_model(const df_bench_mopts *o, FILE *out, df_err *e);

#endif

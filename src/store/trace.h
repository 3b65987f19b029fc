/* Store traces: one JSON object per line.
 *   {"k":"head","version":1,"drives":["/d0",...],"emulated":"800MB/s,0.2ms"|null,"io":"uring"}
 *   {"k":"read","t":s,"layer":L,"expert":E,"drive":D,"bytes":B,"demand":0|1,"wait":s,"service":s,
 *    "class":"demand"|"spine"|"prefetch","queued":s,"start":s,"ok":0|1}
 *      (class: the queue the drive took it from (store/rank.h); queued: when
 *      it joined that queue (a prefetch promoted to demand: when promoted);
 *      start: when the drive took it (under the scheduler's lock, so these
 *      order reads exactly); wait: since it was first queued; an EMULATED
 *      drive's read also has "xfer":[s0,s1], when the emulated drive moved
 *      its bytes on its one timeline, before the latency; "dev": the bytes
 *      the drive read for it, O_DIRECT alignment included)
 *   {"k":"sample","t":s,"drive":D,"bytes":B,"reads":N,"inflight":N,"queued":N}   (cumulative bytes/reads)
 *   {"k":"batch","t":s,"layer":L,"n":N,"wait":s,"pass":P,"rows":R,"hits":H,"requests":Q,"resident":B}
 *      (wait: time the model waited on this layer batch; pass: the forward
 *      pass it belongs to; rows: its positions (1 = decode, > 1 = a prefill
 *      chunk); hits/requests: the store's cache hits and expert requests so
 *      far; resident: record bytes in the cache now. Older traces lack the
 *      fields after "wait".)
 *   {"k":"gen","t":s,"prompt":N}     a generation began (its prompt's prefill)
 *   {"k":"token","t":s,"i":N,"phase":"prefill"|"decode"}   token N (1-based) was
 *      sampled: the first one after the prompt's prefill, the rest each after a decode step
 *      (a speculative block's accepted ids come together, one mark each)
 *   {"k":"wasted","t":s,"layer":L,"expert":E,"bytes":B}   a speculative read's record was
 *      evicted before any batch asked for it (the stats' prefetch_wasted_bytes)
 *   {"k":"recall","pred":"gate"|"prev","per_layer":[r|null,...]}   at close: each
 *      predictor's recall per MoE layer (null: never measured)
 *   {"k":"end","t":s,"rate":[bytes/s,...]}   at close: each drive's measured rate estimate
 * The head record also carries "command" (the command line, when the CLI
 * set it: df_trace_set_command) and "host" {"cpu","cores","mem_bytes","kernel"}.
 * Times are seconds since the store opened (the spine stream's trace,
 * TRACE.spine.jsonl, uses the same clock: expert -1, layer = the unit,
 * drive 0 = its one drive, which is the store drive df_store_spine_drive
 * chose). `deltafin trace report` reads it
 * (src/trace/report.h). */
#ifndef DF_STORE_TRACE_H
#define DF_STORE_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

typedef struct df_trace df_trace;

/* Where a read waited: cls is the rank class it was taken in (0 demand,
 * 1 spine, 2 prefetch: store/rank.h), times on the trace's clock. */
typedef struct df_trace_when {
  int cls;
  double queued, start;
  double xfer0, xfer1; /* an emulated drive moved the bytes then (both 0: a real drive) */
  uint64_t dev_bytes;  /* bytes the drive read for it (alignment included); 0 = not known */
} df_trace_when;

df_trace *df_trace_open(const char *path, int ndrives, char *const *drive_paths,
                        const char *emulated, const char *io, df_err *e);
void df_trace_read(df_trace *t, double ts, int layer, int expert, int drive, uint64_t bytes,
                   int demand, double wait, double service, const df_trace_when *w, int ok);
void df_trace_sample(df_trace *t, double ts, int drive, uint64_t bytes, uint64_t reads,
                     int inflight, int queued);
/* A layer batch ended (pass, rows, hits, requests, resident: see the format
 * above; pass < 0 writes only the first four fields, as the spine stream does). */
void df_trace_batch(df_trace *t, double ts, int layer, int n, double wait);
void df_trace_batch_ex(df_trace *t, double ts, int layer, int n, double wait, long pass, int rows,
                       uint64_t hits, uint64_t requests, uint64_t resident);
/* The generation marks: kind "gen" (i = the prompt's length) or "token"
 * (i = the token's number, 1-based; phase "prefill" for the first). */
void df_trace_mark(df_trace *t, double ts, const char *kind, int i);
/* A --draft auto decision: {"k":"draft","t","K","tpp","why"}: the block size
 * from now on (0: drafts off), the tokens per verify block it was decided
 * on, and why ("grow", "shrink", "off", "probe"). */
void df_trace_draft(df_trace *t, double ts, int K, double tpp, const char *why);
void df_trace_wasted(df_trace *t, double ts, int layer, int expert, uint64_t bytes);
/* At close: one predictor's recall per layer (r[l] < 0 = not measured), and
 * the drives' rate estimates. */
void df_trace_recall(df_trace *t, const char *pred, const double *r, int n);
void df_trace_end(df_trace *t, double ts, const double *rate, int ndrives);
/* The command line the head record of later traces names (the CLI calls it
 * once; the strings must outlive the traces). */
void df_trace_set_command(int argc, char **argv);
void df_trace_close(df_trace *t);

#endif

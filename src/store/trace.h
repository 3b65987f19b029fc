/* Store traces: one JSON object per line.
 *   {"k":"head","version":1,"drives":["/d0",...],"emulated":"800MB/s,0.2ms"|null,"io":"uring"}
 *   {"k":"read","t":s,"layer":L,"expert":E,"drive":D,"bytes":B,"demand":0|1,"wait":s,"service":s,
 *    "class":"demand"|"spine"|"prefetch","queued":s,"start":s,"ok":0|1}
 *      (class: the queue the drive took it from (store/rank.h); queued: when
 *      it joined that queue (a prefetch promoted to demand: when promoted);
 *      start: when the drive took it (under the scheduler's lock, so these
 *      order reads exactly); wait: since it was first queued)
 *   {"k":"sample","t":s,"drive":D,"bytes":B,"reads":N,"inflight":N,"queued":N}   (cumulative bytes/reads)
 *   {"k":"batch","t":s,"layer":L,"n":N,"wait":s}    (time the model waited on this layer batch)
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
} df_trace_when;

df_trace *df_trace_open(const char *path, int ndrives, char *const *drive_paths,
                        const char *emulated, const char *io, df_err *e);
void df_trace_read(df_trace *t, double ts, int layer, int expert, int drive, uint64_t bytes,
                   int demand, double wait, double service, const df_trace_when *w, int ok);
void df_trace_sample(df_trace *t, double ts, int drive, uint64_t bytes, uint64_t reads,
                     int inflight, int queued);
void df_trace_batch(df_trace *t, double ts, int layer, int n, double wait);
void df_trace_close(df_trace *t);

#endif

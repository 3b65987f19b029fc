/* Store traces: one JSON object per line.
 *   {"k":"head","version":1,"drives":["/d0",...],"emulated":"800MB/s,0.2ms"|null,"io":"uring"}
 *   {"k":"read","t":s,"layer":L,"expert":E,"drive":D,"bytes":B,"demand":0|1,"wait":s,"service":s,"ok":0|1}
 *   {"k":"sample","t":s,"drive":D,"bytes":B,"reads":N,"inflight":N,"queued":N}   (cumulative bytes/reads)
 *   {"k":"batch","t":s,"layer":L,"n":N,"wait":s}    (time the model waited on this layer batch)
 * Times are seconds since the store opened. `deltafin trace report` reads it
 * (src/trace/report.h). */
#ifndef DF_STORE_TRACE_H
#define DF_STORE_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

typedef struct df_trace df_trace;

df_trace *df_trace_open(const char *path, int ndrives, char *const *drive_paths,
                        const char *emulated, const char *io, df_err *e);
void df_trace_read(df_trace *t, double ts, int layer, int expert, int drive, uint64_t bytes,
                   int demand, double wait, double service, int ok);
void df_trace_sample(df_trace *t, double ts, int drive, uint64_t bytes, uint64_t reads,
                     int inflight, int queued);
void df_trace_batch(df_trace *t, double ts, int layer, int n, double wait);
void df_trace_close(df_trace *t);

#endif

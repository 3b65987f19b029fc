/* libFuzzer target: the store-trace parser of `deltafin trace report` must
 * reject or accept any input without crashing, and whatever it accepts must
 * summarise without crashing (reads only name drives of the head record). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "trace/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fmemopen((void *)data, size, "r");
  if (!f) return 0;
  df_trace_data d;
  df_err e;
  int rc = df_trace_parse(&d, f, "fuzz", &e);
  fclose(f);
  if (rc) return 0;
  for (size_t i = 0; i < d.nreads; i++)
    if (d.reads[i].drive < 0 || d.reads[i].drive >= d.ndrives) abort();
  FILE *out = fopen("/dev/null", "w");
  if (out) {
    df_trace_summary(&d, "fuzz", out);
    fclose(out);
  }
  df_trace_data_free(&d);
  return 0;
}

/* libFuzzer target: the store-trace parser of `deltafin trace report` must
 * reject or accept any input without crashing, and whatever it accepts must
 * summarise, bin and draw (SVG, HTML, JSON) without crashing: reads only
 * name drives of the head record, the bins stay within their bound and
 * never go negative. The input is used twice, as the trace and as its
 * spine trace. */
#include <math.h>
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
    df_trace_series s;
    df_trace_series_build(&s, &d, size & 1 ? &d : NULL, 0.010);
    if (s.nbins < 1 || s.nbins > 20000) abort();
    for (size_t k = 0; k < (size_t)s.ndrives * DF_TR_NCAT * (size_t)s.nbins; k++)
      if (!(s.mbps[k] >= 0) || isinf(s.mbps[k])) abort();
    df_trace_svg_write(&d, NULL, &s, out);
    df_trace_html_write(&d, size & 1 ? &d : NULL, &s, "fuzz", out);
    df_trace_json_write(&d, NULL, &s, "fuzz", out);
    df_trace_series_free(&s);
    fclose(out);
  }
  df_trace_data_free(&d);
  return 0;
}

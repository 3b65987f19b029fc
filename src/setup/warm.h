/* `deltafin warm`: from a recorded store trace (run/serve --trace FILE),
 * the routed experts it needed that a stream install still lacks, ranked by
 * how often they were used, and optionally fetched (idle-time warm-up).
 * Uses are the trace's demand reads; record it with --prefetch off and
 * --cache-mb 0 to count every use (with a cache, a hit is not a read). */
#ifndef DF_SETUP_WARM_H
#define DF_SETUP_WARM_H

#include <stdint.h>

#include "base/err.h"

typedef struct df_warm_item {
  int layer, expert;
  uint64_t uses;
} df_warm_item;

/* Counts demand reads per (layer, expert) in a trace file; *out sorted by
 * uses descending, then layer, then expert. */
int df_warm_trace_uses(const char *trace_path, df_warm_item **out, int *n, df_err *e);

typedef struct df_warm_report {
  int needed;          /* distinct experts the trace used */
  int missing;         /* of which not local */
  int fetched;
  uint64_t bytes;
  double seconds;
} df_warm_report;

/* Lists the missing experts (ranked) into *missing (caller frees) and
 * fetches the first `fetch` of them (0 = list only). */
int df_warm_run(const char *model_dir, const char *trace_path, int fetch, int progress,
                df_warm_item **missing, df_warm_report *rep, df_err *e);

#endif

/* deltafin trace report: summarise a store trace written by --trace. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "trace/report.h"

void df_cmd_trace_help(void) {
  printf(
      "usage: deltafin trace report FILE [--svg OUT] [--html OUT] [--json OUT] [--bin MS]\n"
      "\n"
      "Summarises a trace written by run/serve/bench --trace FILE: bytes and throughput per\n"
      "drive (by class: demand, prefetch, wasted prefetch, spine), the highest binned rate\n"
      "against the drive's ceiling (the emulation's, or the store's rate estimate), the\n"
      "tokens' compute time and waits, the layer-barrier waits and which drive finished\n"
      "last, the cache and the predictors' recall. The spine stream's trace next to FILE\n"
      "(FILE.spine.jsonl) is read with it.\n"
      "\n"
      "  --svg OUT    the charts as one SVG: per-drive MB/s binned over time, stacked by\n"
      "               class, with the ceiling; the prefill and every token; barrier waits;\n"
      "               cache hit rate and bytes resident; time per token; recall per layer\n"
      "  --html OUT   one self-contained page: the charts inline, the tables, the command\n"
      "               and the machine (no network needed)\n"
      "  --json OUT   the same binned series for scripts\n"
      "  --bin MS     bin width in milliseconds (default 10)\n");
}

int df_cmd_trace(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "report"))
    return df_cli_fail("trace: expected 'trace report FILE [--svg OUT] [--html OUT] [--json OUT] [--bin MS]'");
  const char *file = NULL;
  df_trace_out o = {0};
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--svg") && i + 1 < argc) o.svg = argv[++i];
    else if (!strcmp(argv[i], "--html") && i + 1 < argc) o.html = argv[++i];
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) o.json = argv[++i];
    else if (!strcmp(argv[i], "--bin") && i + 1 < argc) {
      char *end;
      double ms = strtod(argv[++i], &end);
      if (*end || !(ms >= 0.01 && ms <= 600000) || !isfinite(ms))
        return df_cli_fail("trace report: --bin '%s' is not a width in milliseconds (0.01 to 600000)", argv[i]);
      o.bin_s = ms / 1e3;
    } else if (argv[i][0] != '-' && !file) file = argv[i];
    else return df_cli_fail("trace report: unexpected '%s'", argv[i]);
  }
  if (!file) return df_cli_fail("trace report: FILE is required");
  df_err e;
  if (df_trace_report(file, stdout, &o, &e)) return df_cli_fail("%s", e.msg);
  return 0;
}

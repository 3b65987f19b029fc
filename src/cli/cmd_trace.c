/* deltafin trace report: summarise a store trace written by --trace. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "trace/report.h"

void df_cmd_trace_help(void) {
  printf(
      "usage: deltafin trace report FILE [--svg OUT]\n"
      "\n"
      "Summarises a trace written by run/serve/bench --trace FILE: bytes and throughput per\n"
      "drive, demand and prefetch bytes, time the model waited at each layer barrier and\n"
      "which drive finished last. --svg writes a chart of per-drive throughput over time\n"
      "with the barrier waits.\n");
}

int df_cmd_trace(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "report"))
    return df_cli_fail("trace: expected 'trace report FILE [--svg OUT]'");
  const char *file = NULL, *svg = NULL;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--svg") && i + 1 < argc) svg = argv[++i];
    else if (argv[i][0] != '-' && !file) file = argv[i];
    else return df_cli_fail("trace report: unexpected '%s'", argv[i]);
  }
  if (!file) return df_cli_fail("trace report: FILE is required");
  df_err e;
  if (df_trace_report(file, stdout, svg, &e)) return df_cli_fail("%s", e.msg);
  return 0;
}

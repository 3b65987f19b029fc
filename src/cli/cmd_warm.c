/* deltafin warm: fetch the experts a recorded trace needed, while idle. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cli/cli.h"
#include "setup/warm.h"

void df_cmd_warm_help(void) {
  printf(
      "usage: deltafin warm --model DIR --trace FILE [--fetch N] [--json]\n"
      "\n"
      "For a stream install (deltafin setup --stream): lists the routed experts that a\n"
      "recorded store trace (run/serve --trace FILE) read on demand and that are not\n"
      "local yet, most used first (ties: lower layer, then lower expert), and with\n"
      "--fetch N fetches the first N of them, so the next run does not wait on the\n"
      "network. Record the trace with --prefetch off --cache-mb 0 to count every use.\n"
      "\n"
      "options:\n"
      "  --model DIR    the stream install\n"
      "  --trace FILE   a trace written by --trace\n"
      "  --fetch N      fetch the N most used missing experts (default 0: list only)\n"
      "  --json         print the list and the report as JSON\n"
      "  -q, --quiet    no progress output\n");
}

int df_cmd_warm(int argc, char **argv) {
  const char *model = NULL, *trace = NULL;
  long fetch = 0;
  int json = 0, progress = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) progress = 0, df_log_verbose = 0;
    else if (!strcmp(a, "--model") && v) model = v, i++;
    else if (!strcmp(a, "--trace") && v) trace = v, i++;
    else if (!strcmp(a, "--fetch") && v) {
      if (df_cli_int(a, v, 0, 100000000, &fetch)) return 1;
      i++;
    } else return df_cli_fail("warm: unknown or incomplete option '%s' (see deltafin warm --help)", a);
  }
  if (!model) return df_cli_fail("warm: --model DIR is required");
  if (!trace) return df_cli_fail("warm: --trace FILE is required");
  df_warm_item *miss;
  df_warm_report r;
  df_err e;
  if (df_warm_run(model, trace, (int)fetch, progress, &miss, &r, &e)) {
    free(miss);
    return df_cli_fail("warm: %s", e.msg);
  }
  if (json) {
    printf("{\"needed\":%d,\"missing\":%d,\"fetched\":%d,\"bytes_fetched\":%llu,\"seconds\":%.3f,"
           "\"ranked\":[",
           r.needed, r.missing, r.fetched, (unsigned long long)r.bytes, r.seconds);
    for (int i = 0; i < r.missing; i++)
      printf("%s{\"layer\":%d,\"expert\":%d,\"uses\":%llu,\"fetched\":%s}", i ? "," : "",
             miss[i].layer, miss[i].expert, (unsigned long long)miss[i].uses,
             i < r.fetched ? "true" : "false");
    printf("]}\n");
  } else {
    printf("%d experts used by the trace, %d not local\n", r.needed, r.missing);
    if (r.missing) printf("rank  layer  expert  uses\n");
    for (int i = 0; i < r.missing; i++)
      printf("%4d  %5d  %6d  %4llu%s\n", i + 1, miss[i].layer, miss[i].expert,
             (unsigned long long)miss[i].uses, i < r.fetched ? "  fetched" : "");
    if (r.fetched)
      fprintf(stderr, "deltafin: warm: fetched %d experts (%.1f MB) in %.2f s\n", r.fetched,
              (double)r.bytes / 1e6, r.seconds);
  }
  free(miss);
  return 0;
}

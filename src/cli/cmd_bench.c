/* Placeholder until the owning component lands; replaced by the real command. */
#include <stdio.h>

#include "cli/cli.h"

void df_cmd_bench_help(void) { printf("usage: deltafin bench (not built yet)\n"); }

int df_cmd_bench(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return df_cli_fail("'bench' is not built yet");
}

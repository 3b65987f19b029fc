/* Placeholder until the owning component lands; replaced by the real command. */
#include <stdio.h>

#include "cli/cli.h"

void df_cmd_trace_help(void) { printf("usage: deltafin trace (not built yet)\n"); }

int df_cmd_trace(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return df_cli_fail("'trace' is not built yet");
}

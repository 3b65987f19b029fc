/* Placeholder until the owning component lands; replaced by the real command. */
#include <stdio.h>

#include "cli/cli.h"

void df_cmd_run_help(void) { printf("usage: deltafin run (not built yet)\n"); }

int df_cmd_run(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return df_cli_fail("'run' is not built yet");
}

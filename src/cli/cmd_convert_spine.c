/* Placeholder until the owning component lands; replaced by the real command. */
#include <stdio.h>

#include "cli/cli.h"

void df_cmd_convert_spine_help(void) { printf("usage: deltafin convert-spine (not built yet)\n"); }

int df_cmd_convert_spine(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return df_cli_fail("'convert-spine' is not built yet");
}

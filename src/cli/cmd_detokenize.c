/* Placeholder until the owning component lands; replaced by the real command. */
#include <stdio.h>

#include "cli/cli.h"

void df_cmd_detokenize_help(void) { printf("usage: deltafin detokenize (not built yet)\n"); }

int df_cmd_detokenize(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return df_cli_fail("'detokenize' is not built yet");
}

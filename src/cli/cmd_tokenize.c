/* Placeholder until the owning component lands; replaced by the real command. */
#include <stdio.h>

#include "cli/cli.h"

void df_cmd_tokenize_help(void) { printf("usage: deltafin tokenize (not built yet)\n"); }

int df_cmd_tokenize(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return df_cli_fail("'tokenize' is not built yet");
}

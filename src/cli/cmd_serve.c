/* Placeholder until the owning component lands; replaced by the real command. */
#include <stdio.h>

#include "cli/cli.h"

void df_cmd_serve_help(void) { printf("usage: deltafin serve (not built yet)\n"); }

int df_cmd_serve(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return df_cli_fail("'serve' is not built yet");
}

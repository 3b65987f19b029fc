/* Placeholder until the owning component lands; replaced by the real command. */
#include <stdio.h>

#include "cli/cli.h"

void df_cmd_make_model_help(void) { printf("usage: deltafin make-model (not built yet)\n"); }

int df_cmd_make_model(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return df_cli_fail("'make-model' is not built yet");
}

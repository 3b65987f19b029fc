/* Placeholder until the owning component lands; replaced by the real command. */
#include <stdio.h>

#include "cli/cli.h"

void df_cmd_inspect_help(void) { printf("usage: deltafin inspect (not built yet)\n"); }

int df_cmd_inspect(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return df_cli_fail("'inspect' is not built yet");
}

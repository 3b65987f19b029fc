/* Placeholder until the owning component lands; replaced by the real command. */
#include <stdio.h>

#include "cli/cli.h"

void df_cmd_pack_help(void) { printf("usage: deltafin pack (not built yet)\n"); }

int df_cmd_pack(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return df_cli_fail("'pack' is not built yet");
}

/* Placeholder until the owning component lands; replaced by the real command. */
#include <stdio.h>

#include "cli/cli.h"

void df_cmd_doctor_help(void) { printf("usage: deltafin doctor (not built yet)\n"); }

int df_cmd_doctor(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return df_cli_fail("'doctor' is not built yet");
}

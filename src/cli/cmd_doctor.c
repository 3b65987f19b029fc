/* deltafin doctor: verify every record of a packed expert store. */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "cli/cli.h"
#include "store/pack.h"

void df_cmd_doctor_help(void) {
  printf(
      "usage: deltafin doctor --model DIR [--store MANIFEST] [-q]\n"
      "\n"
      "Reads every copy of every expert record of the pack (O_DIRECT) and checks its\n"
      "xxh3-64 checksum; reports missing drives, truncated pack files and corrupt copies,\n"
      "and whether every expert still has a good copy. With a spine section (pack\n"
      "--spine) every spine chunk is checked the same way.\n"
      "\n"
      "options:\n"
      "  --model DIR       the checkpoint folder\n"
      "  --store MANIFEST  the pack manifest to check (default DIR/deltafin-pack.json)\n"
      "  -q, --quiet       no progress output\n"
      "\n"
      "Exit status: 0 all good, 1 problems found (or no pack), 2 experts without a good copy\n"
      "or a bad spine chunk (its unit has no other copy in the pack).\n");
}

int df_cmd_doctor(int argc, char **argv) {
  const char *model = NULL, *manifest = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--model") && v) model = v, i++;
    else if (!strcmp(a, "--store") && v) manifest = v, i++;
    else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) df_log_verbose = 0;
    else return df_cli_fail("doctor: unknown or incomplete option '%s' (see deltafin doctor --help)", a);
  }
  if (!model) return df_cli_fail("doctor: --model DIR is required");
  df_err e;
  df_doctor_report r;
  if (df_doctor(model, manifest, stdout, df_log_verbose > 0, &r, &e)) return df_cli_fail("%s", e.msg);
  if (r.lost || r.spine_corrupt || r.spine_missing) return 2;
  return r.corrupt || r.missing ? 1 : 0;
}

/* deltafin convert-spine: write the row-int8 copy of the spine. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "model/k3.h"

void df_cmd_convert_spine_help(void) {
  printf(
      "usage: deltafin convert-spine --model DIR [--out DIR2] [--threads N] [--force] [-q]\n"
      "\n"
      "Writes DIR/" DF_SPINE_INT8_DIR "/: every bf16 spine matrix (all 2-D weights except\n"
      "the routed experts and the MoE routers, which stay as stored) as row-int8\n"
      "(`<name>` I8 plus `<name>.scale` F32, scale = row absmax / 127), one file per\n"
      "source shard, then an index. `deltafin run --spine int8` reads it.\n"
      "Resumable: files already converted from the same source are kept; each\n"
      "file is written under a temporary name and renamed when complete.\n"
      "\n"
      "options:\n"
      "  --model DIR    model directory\n"
      "  --out DIR2     write the copy to DIR2 instead of DIR/" DF_SPINE_INT8_DIR " (a read-only\n"
      "                 model folder, another drive); run with --spine int8 --spine-dir DIR2\n"
      "  -q, --quiet    no progress\n"
      "  --threads N    worker threads (default: all cores)\n"
      "  --force        convert every shard again\n");
}

int df_cmd_convert_spine(int argc, char **argv) {
  const char *model = NULL;
  int force = 0, quiet = 0;
  const char *out = NULL;
  long threads = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--force")) force = 1;
    else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = 1;
    else if (!strcmp(a, "--model") || !strcmp(a, "--threads") || !strcmp(a, "--out")) {
      if (i + 1 >= argc) return df_cli_fail("%s needs a value", a);
      const char *v = argv[++i];
      if (a[2] == 'm') model = v;
      else if (a[2] == 'o') out = v;
      else if (df_cli_int(a, v, 1, 4096, &threads)) return 1;
    } else {
      return df_cli_fail("convert-spine: unknown argument '%s' (see --help)", a);
    }
  }
  if (!model) return df_cli_fail("convert-spine needs --model DIR");
  df_err e;
  if (df_k3_convert_spine_to(model, out, (int)threads, force, !quiet, &e))
    return df_cli_fail("%s", e.msg);
  if (!quiet) {
    if (out) fprintf(stderr, "deltafin: row-int8 spine written to %s\n", out);
    else fprintf(stderr, "deltafin: row-int8 spine written to %s/%s\n", model, DF_SPINE_INT8_DIR);
  }
  return 0;
}

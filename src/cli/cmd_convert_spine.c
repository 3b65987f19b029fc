/* deltafin convert-spine: write the row-int8 copy of the spine. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "model/k3.h"

void df_cmd_convert_spine_help(void) {
  printf(
      "usage: deltafin convert-spine --model DIR [--threads N] [--force]\n"
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
      "  --threads N    worker threads (default: all cores)\n"
      "  --force        convert every shard again\n");
}

int df_cmd_convert_spine(int argc, char **argv) {
  const char *model = NULL;
  int force = 0;
  long threads = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--force")) force = 1;
    else if (!strcmp(a, "--model") || !strcmp(a, "--threads")) {
      if (i + 1 >= argc) return df_cli_fail("%s needs a value", a);
      const char *v = argv[++i];
      if (a[2] == 'm') model = v;
      else if (df_cli_int(a, v, 1, 4096, &threads)) return 1;
    } else {
      return df_cli_fail("convert-spine: unknown argument '%s' (see --help)", a);
    }
  }
  if (!model) return df_cli_fail("convert-spine needs --model DIR");
  df_err e;
  if (df_k3_convert_spine(model, (int)threads, force, &e)) return df_cli_fail("%s", e.msg);
  fprintf(stderr, "deltafin: row-int8 spine written to %s/%s\n", model, DF_SPINE_INT8_DIR);
  return 0;
}

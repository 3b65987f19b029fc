/* deltafin pack: lay the routed experts out on one or more drives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "cli/cli.h"
#include "store/io.h"
#include "store/manifest.h"
#include "store/pack.h"

void df_cmd_pack_help(void) {
  printf(
      "usage: deltafin pack --model DIR --drives PATH[@BW][,PATH[@BW]...] [options]\n"
      "\n"
      "Writes every routed expert as one 4 KiB-aligned record (its six upstream tensors,\n"
      "verbatim, with an xxh3-64 checksum) into a pack file per drive, placing the hottest\n"
      "experts first on the drive with the most spare bandwidth, and records the manifest\n"
      "in DIR/deltafin-pack.json. run, serve and bench then use it automatically\n"
      "(--no-pack reads the shards, --store MANIFEST points elsewhere).\n"
      "Safe to interrupt: run the same command again to resume.\n"
      "\n"
      "options:\n"
      "  --model DIR          the checkpoint folder\n"
      "  --drives LIST        comma-separated directories, one per drive (the last folder is\n"
      "                       created, its parent must exist); PATH@2GB/s declares\n"
      "                       a drive's read bandwidth (all or none)\n"
      "  --measure            measure each drive's bandwidth (256 MB O_DIRECT test)\n"
      "  --replicas-hot PCT   a second copy of the hottest PCT%% of experts on another drive\n"
      "  --heat FILE          heat file to place by (default DIR/deltafin.heat if present;\n"
      "                       uniform without one)\n"
      "  --manifest FILE      write the manifest here instead of DIR/deltafin-pack.json\n"
      "  --max-rate RATE      write at most RATE (e.g. 200MB/s)\n"
      "  -q, --quiet          no progress output\n");
}

int df_cmd_pack(int argc, char **argv) {
  df_pack_opts o = {0};
  const char *drives = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--model") && v) o.model_dir = v, i++;
    else if (!strcmp(a, "--drives") && v) drives = v, i++;
    else if (!strcmp(a, "--replicas-hot") && v) {
      char *end;
      o.replicas_hot = strtod(v, &end);
      if (*end || !(o.replicas_hot >= 0 && o.replicas_hot <= 100))
        return df_cli_fail("--replicas-hot: '%s' is not a percentage in [0, 100]", v);
      i++;
    } else if (!strcmp(a, "--heat") && v) o.heat_path = v, i++;
    else if (!strcmp(a, "--manifest") && v) o.manifest_out = v, i++;
    else if (!strcmp(a, "--max-rate") && v) {
      if (df_io_parse_rate(v, &o.max_rate)) return df_cli_fail("--max-rate: '%s' is not like 200MB/s", v);
      i++;
    } else if (!strcmp(a, "--measure")) o.measure = 1;
    else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) df_log_verbose = 0;
    else return df_cli_fail("pack: unknown or incomplete option '%s' (see deltafin pack --help)", a);
  }
  if (!o.model_dir) return df_cli_fail("pack: --model DIR is required");
  if (!drives || !*drives) return df_cli_fail("pack: --drives PATH[,PATH...] is required");
  char *dl = df_xstrdup(drives);
  const char *paths[DF_MF_MAX_DRIVES];
  double bw[DF_MF_MAX_DRIVES];
  int n = 0, rc = 0;
  for (char *tok = strtok(dl, ","); tok; tok = strtok(NULL, ",")) {
    if (n == DF_MF_MAX_DRIVES) {
      rc = df_cli_fail("pack: at most %d drives", DF_MF_MAX_DRIVES);
      break;
    }
    char *at = strrchr(tok, '@');
    bw[n] = 0;
    if (at) {
      *at = 0;
      if (df_io_parse_rate(at + 1, &bw[n])) {
        rc = df_cli_fail("pack: drive %s: bandwidth '%s' is not like 2GB/s", tok, at + 1);
        break;
      }
    }
    if (!*tok) {
      rc = df_cli_fail("pack: --drives has an empty path");
      break;
    }
    paths[n++] = tok;
  }
  if (!rc) {
    o.ndrives = n;
    o.drives = paths;
    o.bandwidth = bw;
    o.progress = df_log_verbose > 0;
    df_err e;
    if (df_pack(&o, &e)) rc = df_cli_fail("%s", e.msg);
  }
  free(dl);
  return rc;
}

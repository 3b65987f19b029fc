/* deltafin pack: lay the routed experts out on one or more drives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "cli/cli.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "model/k3.h"
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
      "  --spine bf16|int8    also write the spine section: every spine unit that can stream\n"
      "                       (layers, then the head) after the experts on the same drives,\n"
      "                       cut into 4 KiB-aligned chunks balanced over them, one xxh3-64\n"
      "                       each; run/serve/bench with the same --spine then stream\n"
      "                       non-resident units from it on every drive at once\n"
      "  --spine-dir DIR      with --spine int8: the row-int8 spine (default DIR/spine-int8,\n"
      "                       made by deltafin convert-spine)\n"
      "  -q, --quiet          no progress output\n");
}

/* The spine section's source: the model loaded as a run would (its units
 * and their extents), kept open while the pack copies from its files. */
typedef struct spine_src {
  df_config cfg;
  df_st_set set;
  df_k3 *m;
  df_pack_spine sp;
} spine_src;

static int spine_open(spine_src *ss, const char *model, const char *kind, const char *dir,
                      df_err *e) {
  memset(ss, 0, sizeof *ss);
  int rc = df_config_load_dir(&ss->cfg, model, e);
  if (rc || df_st_set_open(&ss->set, model, e)) return -1;
  int int8 = !strcmp(kind, "int8");
  if (df_k3_load_from(&ss->m, &ss->set, &ss->cfg, int8, model, dir, e))
    return df_err_prefix(e, "pack --spine %s: ", kind);
  if (df_k3_spine_layout(ss->m, &ss->sp) < 1)
    return df_err_set(e, "pack --spine: %s has no spine unit that can stream", model);
  return 0;
}

static void spine_close(spine_src *ss) {
  df_k3_spine_layout_free(&ss->sp);
  if (ss->m) df_k3_free(ss->m);
  df_st_set_close(&ss->set);
}

int df_cmd_pack(int argc, char **argv) {
  df_pack_opts o = {0};
  const char *drives = NULL, *spine = NULL, *spine_dir = NULL;
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
    } else if (!strcmp(a, "--spine") && v) {
      if (strcmp(v, "bf16") && strcmp(v, "int8")) return df_cli_fail("--spine: '%s' is not bf16 or int8", v);
      spine = v, i++;
    } else if (!strcmp(a, "--spine-dir") && v) spine_dir = v, i++;
    else if (!strcmp(a, "--measure")) o.measure = 1;
    else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) df_log_verbose = 0;
    else return df_cli_fail("pack: unknown or incomplete option '%s' (see deltafin pack --help)", a);
  }
  if (!o.model_dir) return df_cli_fail("pack: --model DIR is required");
  if (!drives || !*drives) return df_cli_fail("pack: --drives PATH[,PATH...] is required");
  if (spine_dir && (!spine || strcmp(spine, "int8")))
    return df_cli_fail("pack: --spine-dir goes with --spine int8");
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
    spine_src ss;
    int have = 0;
    if (spine) {
      if (spine_open(&ss, o.model_dir, spine, spine_dir, &e)) rc = df_cli_fail("%s", e.msg);
      else o.spine = &ss.sp;
      have = 1;
    }
    if (!rc && df_pack(&o, &e)) rc = df_cli_fail("%s", e.msg);
    if (have) spine_close(&ss);
  }
  free(dl);
  return rc;
}

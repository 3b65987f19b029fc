/* deltafin record-sums: a sha256 per routed-expert record of a verified
 * model folder, for stream installs of the same revision (recsums.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cli/cli.h"
#include "setup/recsums.h"

void df_cmd_record_sums_help(void) {
  printf(
      "usage: deltafin record-sums --model DIR --out FILE [--threads N] [--json]\n"
      "\n"
      "Hashes every shard of a model folder whose shards are complete (a full install\n"
      "made by deltafin setup --full, checked here against the hub's sha256 it recorded;\n"
      "or any folder holding the release's files, whose shard sha256s are computed and\n"
      "listed) and writes a JSON document with each shard's name, size and sha256 and\n"
      "each routed-expert record's layer, expert, offset, length and sha256. Give it to\n"
      "deltafin setup --stream --record-sums FILE|URL: a stream install then checks\n"
      "every expert it fetches before using it (a server or proxy that serves a wrong\n"
      "byte is caught at once, not when the whole shard is local).\n"
      "\n"
      "options:\n"
      "  --model DIR    the model folder\n"
      "  --out FILE     where the document goes (written to a temporary name, renamed)\n"
      "  --threads N    shards hashed at once (default: one per core)\n"
      "  --json         print a JSON report on stdout\n"
      "  -q, --quiet    no progress output\n");
}

int df_cmd_record_sums(int argc, char **argv) {
  const char *model = NULL, *out = NULL;
  long threads = 0;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) df_log_verbose = 0;
    else if (!strcmp(a, "--model") && v) model = v, i++;
    else if (!strcmp(a, "--out") && v) out = v, i++;
    else if (!strcmp(a, "--threads") && v) {
      if (df_cli_int(a, v, 1, 4096, &threads)) return 1;
      i++;
    } else
      return df_cli_fail("record-sums: unknown or incomplete option '%s' (see deltafin record-sums --help)", a);
  }
  if (!model) return df_cli_fail("record-sums: --model DIR is required");
  if (!out) return df_cli_fail("record-sums: --out FILE is required");
  df_recsums_report r;
  df_err e;
  if (df_recsums_build(model, out, (int)threads, &r, &e)) return df_cli_fail("record-sums: %s", e.msg);
  if (json)
    printf("{\"shards\":%d,\"records\":%d,\"bytes\":%llu,\"seconds\":%.3f}\n", r.shards, r.records,
           (unsigned long long)r.bytes, r.seconds);
  df_log_info("record sums of %d records in %d shards (%.1f MB hashed in %.2f s) written to %s",
              r.records, r.shards, (double)r.bytes / 1e6, r.seconds, out);
  return 0;
}

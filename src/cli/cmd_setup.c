/* deltafin setup: install a model from a Hugging Face endpoint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "cli/cli.h"
#include "remote/hub.h"
#include "setup/install.h"
#include "remote/sverify.h"
#include "dspark/dspark.h"
#include "format/config.h"
#include "qwen3/qwen3.h"
#include "tokenizer/hf_bpe.h"
#include "store/io.h"

void df_cmd_setup_help(void) {
  printf(
      "usage: deltafin setup (--full | --stream | --draft qwen3|dspark) --repo OWNER/NAME\n"
      "                      [--revision REV]\n"
      "                      --model-root DIR [options]\n"
      "\n"
      "Installs a model from a Hugging Face endpoint (HF_ENDPOINT, default\n"
      "https://huggingface.co; HF_TOKEN or the hub's token file for private or gated\n"
      "repositories: sent as a Bearer header, never logged or written).\n"
      "A branch or tag is resolved to its commit once and recorded in\n"
      "DIR/" DF_SETUP_STATE "; every file is checked against the hub's sha256\n"
      "(git blob id for small files). Safe to interrupt at any point: run the same\n"
      "command again to continue.\n"
      "\n"
      "  --draft qwen3\n"
      "             a draft model for speculative decoding (run/serve --draft DIR): every\n"
      "             file of a Qwen3 checkpoint as published (e.g. Qwen/Qwen3-0.6B), then\n"
      "             loaded once to check it is one\n"
      "  --draft dspark\n"
      "             K3's own drafter (docs/DSPARK.md) next to the K3 installed in\n"
      "             --model-root DIR: into DIR/dspark (where run/serve --draft auto finds\n"
      "             it), then checked against that K3's dimensions\n"
      "  --full     download every file, then convert the spine (--spine int8) and\n"
      "             pack the experts (--drives); fully offline afterwards. On a\n"
      "             stream install it downloads only what is still missing.\n"
      "  --stream   download config, tokenizer, index, shard headers and the spine\n"
      "             only; run and serve fetch each routed expert by range request\n"
      "             the first time the router needs it and keep it locally.\n"
      "\n"
      "options:\n"
      "  --repo OWNER/NAME     repository id\n"
      "  --revision REV        commit sha (recommended) or branch/tag (default main;\n"
      "                        a branch is resolved once and recorded)\n"
      "  --endpoint URL        instead of HF_ENDPOINT\n"
      "  --model-root DIR      where the model goes (created)\n"
      "  --from DIR            reuse verified files from a local folder (the hub cache\n"
      "                        under HF_HOME is always looked at)\n"
      "  --drives D1,D2,...    pack the experts onto these directories (--full)\n"
      "  --replicas-hot PCT    second copy of the hottest PCT%% of experts\n"
      "  --pack-max-rate RATE  pack writes at most RATE (e.g. 200MB/s)\n"
      "  --spine int8          also write the row-int8 spine (--full)\n"
      "  --connections N       parallel connections (default 4)\n"
      "  --chunk-kb N          bytes per range request, in KiB (default 16384)\n"
      "  --retries N           retries per request (default 8)\n"
      "  --retry-wait-ms N     first backoff (default 200, doubling up to 5 s)\n"
      "  --stall-s N           abort and retry a transfer stalled this long (default\n"
      "                        HF_HUB_DOWNLOAD_TIMEOUT, else 30)\n"
      "  --max-wait T          total time to wait on rate limits (429/503 with\n"
      "                        Retry-After or RateLimit), e.g. 90s, 30m, 6h (default 6h)\n"
      "  --include GLOB        only files matching GLOB (fnmatch, repeatable; replaces\n"
      "                        the default set below, sub-folders included)\n"
      "  --exclude GLOB        leave out files matching GLOB (repeatable); a shard the\n"
      "                        index needs cannot be left out\n"
      "  --dry-run             list what would be downloaded, reused, found present\n"
      "                        and skipped, with sizes; writes nothing\n"
      "  --hf-cache            also put every complete file into the hub cache's\n"
      "                        layout (blobs, snapshot links, refs) for hf download,\n"
      "                        transformers and huggingface.js to reuse (hard links\n"
      "                        where the cache shares the model root's filesystem)\n"
      "  --offline             send no request at all (also HF_HUB_OFFLINE=1): install\n"
      "                        from an earlier install, --from or the hub cache, or say\n"
      "                        which files are missing\n"
      "  --threads N           spine conversion threads\n"
      "  --with-vision         also download shards that hold only vision tensors\n"
      "                        (by default only their header: the text model never\n"
      "                        reads them)\n"
      "  --record-sums F|URL   (--stream) a sha256 per expert record (made by deltafin\n"
      "                        record-sums from a verified full install): each fetched\n"
      "                        expert is checked before it is used; checked against\n"
      "                        this revision's model info. Also adds them to an\n"
      "                        existing stream install.\n"
      "  --stream-verify P     (--stream) record (needs record sums), shard (an expert's\n"
      "                        whole shard is fetched and checked against the hub's\n"
      "                        sha256 before it is used) or arrival (unverified:\n"
      "                        wrong bytes served give wrong tokens). Default: record\n"
      "                        with record sums, else arrival (with a warning).\n"
      "  --no-space-check      skip the free-space check\n"
      "  --json                print a JSON report on stdout\n"
      "  -q, --quiet           no progress output (HF_HUB_DISABLE_PROGRESS_BARS=1: no\n"
      "                        progress bar, messages stay)\n"
      "\n"
      "Files fetched: the repository's top-level files except *.md, images (png, jpg,\n"
      "jpeg, gif, svg), pdf and .gitattributes; sub-folders are skipped. The hub\n"
      "cache (HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, HF_HOME\n"
      "defaulting to XDG_CACHE_HOME/huggingface or ~/.cache/huggingface) is looked at\n"
      "by commit and by blob (sha256 or git blob id), so files any revision brought\n"
      "there are reused. Token: HF_TOKEN, else HUGGING_FACE_HUB_TOKEN, else the file\n"
      "HF_TOKEN_PATH (default HF_HOME/token); none with HF_HUB_DISABLE_IMPLICIT_TOKEN=1.\n");
}

/* "90", "90s", "30m", "6h" -> seconds; -1 when it is none of those. */
static double parse_duration(const char *v) {
  char *end;
  double d = strtod(v, &end);
  if (end == v || !(d > 0)) return -1;
  if (!strcmp(end, "") || !strcmp(end, "s")) return d;
  if (!strcmp(end, "m")) return d * 60;
  if (!strcmp(end, "h")) return d * 3600;
  return -1;
}

/* An installed draft is one this build runs: a DSpark for the K3 whose
 * config is tc (NULL: a Qwen3 draft). 0, or 1 with the reason printed. */
static int check_draft(const char *dir, const df_config *tc) {
  df_err e;
  if (tc) {
    if (df_dspark_check(dir, tc, &e))
      return df_cli_fail("setup --draft dspark: %s holds the repository's files, but they are not "
                         "a DSpark draft for this K3: %s", dir, e.msg);
    fprintf(stderr, "deltafin: draft ready: %s; used by --draft auto, or --draft dspark:%s\n", dir,
            dir);
    return 0;
  }
  df_qwen3 *q = NULL;
  df_hftok *t = NULL;
  if (df_qwen3_load(&q, dir, &e) || df_hftok_load(&t, dir, &e)) {
    df_qwen3_free(q);
    return df_cli_fail("setup --draft: %s holds the repository's files, but they are not a "
                       "Qwen3 draft deltafin can run: %s", dir, e.msg);
  }
  fprintf(stderr, "deltafin: draft ready: %s (vocabulary %d); use it with --draft %s\n", dir,
          df_qwen3_vocab(q), dir);
  df_qwen3_free(q);
  df_hftok_free(t);
  return 0;
}

int df_cmd_setup(int argc, char **argv) {
  df_setup_opts o = {0};
  o.progress = 1;
  int full = 0, stream = 0, json = 0;
  const char *draft = NULL;
  const char *drives = NULL;
  df_stream_verify sv;
  const char *inc[64], *exc[64];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    long n;
    if (!strcmp(a, "--full")) full = 1;
    else if (!strcmp(a, "--stream")) stream = 1;
    else if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "--no-space-check")) o.no_space_check = 1;
    else if (!strcmp(a, "--with-vision")) o.with_vision = 1;
    else if (!strcmp(a, "--offline")) o.offline = 1;
    else if (!strcmp(a, "--dry-run")) o.dry_run = 1;
    else if (!strcmp(a, "--hf-cache")) o.hf_cache = 1;
    else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) df_log_verbose = 0, o.progress = 0;
    else if (!v) return df_cli_fail("setup: unknown or incomplete option '%s' (see --help)", a);
    else if (!strcmp(a, "--draft")) {
      if (strcmp(v, "qwen3") && strcmp(v, "dspark"))
        return df_cli_fail("setup --draft: '%s' is not qwen3 or dspark", v);
      draft = v, full = 1, i++;
    }
    else if (!strcmp(a, "--repo")) o.repo = v, i++;
    else if (!strcmp(a, "--revision")) o.revision = v, i++;
    else if (!strcmp(a, "--endpoint")) o.endpoint = v, i++;
    else if (!strcmp(a, "--model-root")) o.model_root = v, i++;
    else if (!strcmp(a, "--from")) o.from_dir = v, i++;
    else if (!strcmp(a, "--include") || !strcmp(a, "--exclude")) {
      int ex = a[2] == 'e';
      if ((ex ? o.nexclude : o.ninclude) == 64) return df_cli_fail("setup: at most 64 %s patterns", a);
      if (!*v) return df_cli_fail("setup: %s needs a pattern", a);
      if (ex) exc[o.nexclude++] = v;
      else inc[o.ninclude++] = v;
      o.include = inc, o.exclude = exc, i++;
    }
    else if (!strcmp(a, "--drives")) drives = v, i++;
    else if (!strcmp(a, "--record-sums")) o.record_sums = v, i++;
    else if (!strcmp(a, "--stream-verify")) {
      if (df_sverify_parse(v, &sv))
        return df_cli_fail("--stream-verify: '%s' is not record, shard or arrival", v);
      o.stream_verify = v, i++;
    }
    else if (!strcmp(a, "--spine")) {
      if (strcmp(v, "int8") && strcmp(v, "bf16"))
        return df_cli_fail("--spine: '%s' is not int8 or bf16", v);
      o.spine = strcmp(v, "int8") ? NULL : "int8";
      i++;
    } else if (!strcmp(a, "--replicas-hot")) {
      char *end;
      o.replicas_hot = strtod(v, &end);
      if (*end || !(o.replicas_hot >= 0 && o.replicas_hot <= 100))
        return df_cli_fail("--replicas-hot: '%s' is not a percentage in [0, 100]", v);
      i++;
    } else if (!strcmp(a, "--pack-max-rate")) {
      if (df_io_parse_rate(v, &o.pack_max_rate))
        return df_cli_fail("--pack-max-rate: '%s' is not like 200MB/s", v);
      i++;
    } else if (!strcmp(a, "--connections")) {
      if (df_cli_int(a, v, 1, 64, &n)) return 1;
      o.connections = (int)n, i++;
    } else if (!strcmp(a, "--chunk-kb")) {
      if (df_cli_int(a, v, 4, 1 << 22, &n)) return 1;
      o.chunk = (uint64_t)n << 10, i++;
    } else if (!strcmp(a, "--retries")) {
      if (df_cli_int(a, v, 1, 1000, &n)) return 1;
      o.retries = (int)n, i++;
    } else if (!strcmp(a, "--retry-wait-ms")) {
      if (df_cli_int(a, v, 1, 60000, &n)) return 1;
      o.backoff_s = (double)n / 1000.0, i++;
    } else if (!strcmp(a, "--stall-s")) {
      if (df_cli_int(a, v, 1, 3600, &n)) return 1;
      o.stall_s = n, i++;
    } else if (!strcmp(a, "--max-wait")) {
      if ((o.max_wait_s = parse_duration(v)) < 0)
        return df_cli_fail("--max-wait: '%s' is not a duration like 90s, 30m or 6h", v);
      i++;
    } else if (!strcmp(a, "--threads")) {
      if (df_cli_int(a, v, 1, 4096, &n)) return 1;
      o.threads = (int)n, i++;
    } else return df_cli_fail("setup: unknown option '%s' (see deltafin setup --help)", a);
  }
  if (full == stream) return df_cli_fail("setup: give exactly one of --full, --stream or --draft");
  if (draft && (drives || o.spine))
    return df_cli_fail("setup --draft: --drives and --spine are for the K3 model, not a draft");
  if (!o.repo) return df_cli_fail("setup: --repo OWNER/NAME is required");
  if (df_hub_env_bool("HF_HUB_DISABLE_PROGRESS_BARS")) o.progress = 0;
  if (!o.model_root) return df_cli_fail("setup: --model-root DIR is required");
  o.stream = stream;
  if (!stream && (o.record_sums || o.stream_verify))
    return df_cli_fail("setup: --record-sums and --stream-verify are for --stream installs");
  char *dl = NULL;
  const char *paths[64];
  if (drives) {
    if (stream) return df_cli_fail("setup: --drives packs experts and needs --full");
    dl = df_xstrdup(drives);
    for (char *t = strtok(dl, ","); t; t = strtok(NULL, ",")) {
      if (o.ndrives == 64) return free(dl), df_cli_fail("setup: at most 64 drives");
      paths[o.ndrives++] = t;
    }
    if (!o.ndrives) return free(dl), df_cli_fail("setup: --drives has no path");
    o.drives = paths;
  }
  if (stream && o.spine) {
    free(dl);
    return df_cli_fail("setup: --spine int8 converts a complete spine and needs --full");
  }
  df_setup_report r;
  df_err e;
  df_config tc;
  char *dsdir = NULL;
  if (draft && !strcmp(draft, "dspark")) { /* beside the K3 it drafts for, checked against it */
    if (df_config_load_dir(&tc, o.model_root, &e)) {
      free(dl);
      return df_cli_fail("setup --draft dspark: --model-root %s must hold the installed K3 the "
                         "draft is for: %s", o.model_root, e.msg);
    }
    o.model_root = dsdir = df_path_join(o.model_root, "dspark");
  }
  int rc = df_setup_run(&o, &r, &e);
  free(dl);
  if (rc) return free(dsdir), df_cli_fail("setup: %s", e.msg);
  if (o.dry_run) return free(dsdir), 0;
  if (draft && check_draft(o.model_root, dsdir ? &tc : NULL)) return free(dsdir), 1;
  free(dsdir);
  if (json)
    printf("{\"mode\":\"%s\",\"files\":%d,\"files_downloaded\":%d,\"files_reused\":%d,"
           "\"bytes_net\":%llu,\"bytes_reused\":%llu,\"bytes_present\":%llu,\"requests\":%llu,"
           "\"retries\":%llu,\"rate_limited\":%llu,\"rate_wait_s\":%.3f,\"seconds\":%.3f}\n",
           stream ? "stream" : "full", r.files_total, r.files_downloaded, r.files_reused,
           (unsigned long long)r.bytes_net, (unsigned long long)r.bytes_reused,
           (unsigned long long)r.bytes_present, (unsigned long long)r.requests,
           (unsigned long long)r.retries, (unsigned long long)r.rate_limited, r.rate_wait_s,
           r.seconds);
  char z1[24], z2[24], z3[24];
  fprintf(stderr,
          "deltafin: setup %s done in %s: %s downloaded (%llu requests, %llu retries), "
          "%s reused, %s already verified\n",
          stream ? "--stream" : "--full", o.model_root, df_setup_fmt_size(r.bytes_net, z1),
          (unsigned long long)r.requests, (unsigned long long)r.retries,
          df_setup_fmt_size(r.bytes_reused, z2), df_setup_fmt_size(r.bytes_present, z3));
  if (r.rate_limited)
    fprintf(stderr, "deltafin: rate limited %llu times; %.0f s spent waiting as told\n",
            (unsigned long long)r.rate_limited, r.rate_wait_s);
  return 0;
}

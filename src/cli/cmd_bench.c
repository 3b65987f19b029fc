/* `deltafin bench kernels` and `deltafin bench --model DIR`: see bench/bench.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "cli/opt_table.h"
#include "cli/engine_opts.h"

void df_cmd_bench_help(void) {
  printf(
      "usage: deltafin bench kernels [--tables LIST] [--threads LIST] [--only NAME] [--pool-mb N]\n"
      "                              [--min-time S] [--json]\n"
      "       deltafin bench --model DIR [--prompt-tokens P] [--new-tokens N] [--cache-mb M]\n"
      "                      [--drives D1,D2,...] [--repeat R] [--ladder] [--report FILE] [--json]\n"
      "                      [options]\n"
      "\n"
      "bench kernels: weights streamed (GB/s) and GFLOP/s of each kernel (MXFP4, bf16, int8,\n"
      "f32 GEMV/GEMM, the KDA step) per kernel table and thread count, next to the memory\n"
      "read bandwidth measured with a streaming read of the same buffer.\n"
      "  --tables LIST     kernel tables (default: scalar and every SIMD table this CPU runs)\n"
      "  --threads LIST    thread counts (default 1..cores)\n"
      "  --only NAME       only kernels whose name contains NAME (e.g. mxfp4)\n"
      "  --pool-mb N       weights cycled through (default 256, or 2x the L3 size up to 1024;\n"
      "                    at least 16)\n"
      "  --min-time S      seconds per measurement (default 0.3)\n"
      "\n"
      "bench --model: a warm-up, then R repeats of a fresh session prefilling P prompt tokens\n"
      "and decoding N tokens; per phase the median and spread of s/token, tokens/s, expert\n"
      "bytes/token, read throughput, I/O wait vs compute, cache hit rate and prefill read\n"
      "amplification; then the storage ceiling: the store's own I/O engine reading the same\n"
      "expert records at the same queue depth with no compute (and fio, when installed), and\n"
      "storage efficiency = decode expert-read throughput / ceiling.\n"
      "  --prompt-tokens P   prompt length (default 64)\n"
      "  --new-tokens N      decoded tokens per repeat (default 8)\n"
      "  --prefill-chunk C   positions per prefill batch (default 0 = the whole prompt)\n"
      "  --repeat R          repeats (default 3)\n"
      "  --cache-mb M        expert RAM cache (bench default 0: every expert from the drives)\n"
      "  --drives LIST       pack the experts onto these directories first (uses deltafin pack)\n"
      "  --ladder            run 1..N of --drives (or 1..4 emulated drives) and print the ladder\n"
      "  --no-ceiling        skip the storage ceiling measurement\n"
      "  --report FILE       trace each configuration and write its report: FILE (one\n"
      "                      self-contained HTML page, as `trace report --html`), FILE.json\n"
      "                      (the binned series) and FILE.trace.jsonl; a --ladder step of k\n"
      "                      drives writes FILE-<k>drives.html and so on\n"
      "  --json              one JSON object (decode_s_per_token, prefill_s_per_token,\n"
      "                      expert_read_gbps, ceiling_gbps, storage_efficiency, ...)\n"
      "\n");
  df_cli_engine_help(stdout);
}

/* --prefill-chunk's one row (opt_table.h), shared with run, chat, eval, logits. */
static const df_opt chunk_row = DF_OPT_PREFILL_CHUNK(DF_OPT_INT, 0, NULL);

static int opt_val(int argc, char **argv, int *i, const char **val) {
  if (*i + 1 >= argc) return df_cli_fail("%s needs a value", argv[*i]);
  *val = argv[++*i];
  return 0;
}

static int cmd_kernels(int argc, char **argv) {
  df_bench_kopts o = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    long n;
    if (!strcmp(a, "--json")) {
      o.json = 1;
      continue;
    }
    if (!strcmp(a, "--tables") || !strcmp(a, "--threads") || !strcmp(a, "--only") ||
        !strcmp(a, "--pool-mb") || !strcmp(a, "--min-time")) {
      if (opt_val(argc, argv, &i, &v)) return 1;
    } else {
      return df_cli_fail("bench kernels: unknown option '%s' (see deltafin bench --help)", a);
    }
    if (!strcmp(a, "--tables")) o.tables = v;
    else if (!strcmp(a, "--threads")) o.threads = v;
    else if (!strcmp(a, "--only")) o.only = v;
    else if (!strcmp(a, "--pool-mb")) {
      if (df_cli_int(a, v, 16, 1 << 20, &n)) return 1;
      o.pool_mb = n;
    } else {
      char *end;
      o.min_s = strtod(v, &end);
      if (*end || !(o.min_s > 0 && o.min_s <= 600)) return df_cli_fail("--min-time: '%s' is not a number of seconds in (0, 600]", v);
    }
  }
  df_err e;
  if (df_bench_kernels(&o, stdout, &e)) return df_cli_fail("%s", e.msg);
  return 0;
}

int df_cmd_bench(int argc, char **argv) {
  if (df_cli_wants_help(argc, argv)) {
    df_cmd_bench_help();
    return 0;
  }
  if (argc >= 2 && !strcmp(argv[1], "kernels")) return cmd_kernels(argc - 1, argv + 1);
  df_bench_mopts o = {.prompt_tokens = 64, .new_tokens = 8, .repeat = 3};
  df_engine_opts_default(&o.engine);
  o.engine.store.cache_mb = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    long n;
    int r = df_cli_engine_opt(&o.engine, "bench", argc, argv, &i);
    if (r < 0) return 1;
    if (r > 0) continue;
    if (!strcmp(a, "--json")) o.json = 1;
    else if (!strcmp(a, "--ladder")) o.ladder = 1;
    else if (!strcmp(a, "--no-ceiling")) o.no_ceiling = 1;
    else if (!strncmp(a, "--", 2)) {
      if (opt_val(argc, argv, &i, &v)) return 1;
      if (!strcmp(a, "--prompt-tokens")) {
        if (df_cli_int(a, v, 1, 1 << 20, &n)) return 1;
        o.prompt_tokens = (int)n;
      } else if (!strcmp(a, "--new-tokens")) {
        if (df_cli_int(a, v, 1, 1 << 20, &n)) return 1;
        o.new_tokens = (int)n;
      } else if (!strcmp(a, "--prefill-chunk")) {
        if (df_opt_value(&chunk_row, &o.prefill_chunk, v)) return 1;
      } else if (!strcmp(a, "--repeat")) {
        if (df_cli_int(a, v, 1, 1000, &n)) return 1;
        o.repeat = (int)n;
      } else if (!strcmp(a, "--drives")) o.drives = v;
      else if (!strcmp(a, "--report")) o.report = v;
      else return df_cli_fail("bench: unknown option '%s' (see deltafin bench --help)", a);
    } else {
      return df_cli_fail("bench: unexpected argument '%s' (did you mean 'bench kernels'?)", a);
    }
  }
  if (!o.engine.model_dir) return df_cli_fail("bench: --model DIR is required (or 'deltafin bench kernels')");
  df_err e;
  if (df_bench_model(&o, stdout, &e)) return df_cli_fail("%s", e.msg);
  return 0;
}

/* deltafin make-model: writes a synthetic checkpoint in the exact K3 layout. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "cli/cli.h"
#include "dspark/dspark_make.h"
#include "synth/synth.h"

void df_cmd_make_model_help(void) {
  printf(
      "usage: deltafin make-model --preset NAME --out DIR [--seed N] [options]\n"
      "\n"
      "Writes a checkpoint with K3's tensor names, dtypes, MXFP4 experts, sharded\n"
      "safetensors + index, config.json (nested kimi_k3), generation_config.json,\n"
      "tiktoken.model and tokenizer_config.json. The same preset and seed give\n"
      "byte-identical files on every machine.\n"
      "\n"
      "presets:\n"
      "  tiny       hidden 64, 8 layers (MLA at 4 and 8, KDA elsewhere), 32 experts top-4;\n"
      "             about 2 MB, milliseconds per token\n"
      "  small      hidden 512, 16 layers, 128 experts top-8; about 300 MB\n"
      "  k3-shaped  K3's real expert shapes (latent 3584, moe_inter 3072, 17,547,264 bytes\n"
      "             each, top-16) on a small trunk; GBs\n"
      "  k3-trunk   K3's real trunk (hidden 7168, KDA 96x128, MLA, dense 33792, shared\n"
      "             6144) and vocabulary 163840, --layers N of the release pattern,\n"
      "             --experts E real-shape experts; ~1.2 GB spine per layer + 4.7 GB\n"
      "  dspark     a random DSpark draft (docs/DSPARK.md: config.json + model.safetensors)\n"
      "             for the K3 model in --target DIR: its MLA dims, --layers N draft layers\n"
      "             (default 2), --taps L,L,.. tapped target layers (default: nano's\n"
      "             1,3,4,6,7 for 8 layers, else five spread over the target)\n"
      "\n"
      "options:\n"
      "  --preset NAME     tiny | small | k3-shaped | k3-trunk\n"
      "  --seed N          weights seed (default 1)\n"
      "  --out DIR         output directory (created)\n"
      "  --moe-layers L    k3-shaped: MoE layers (default 4; one dense layer is added)\n"
      "  --experts E       k3-shaped/k3-trunk: routed experts per layer (default 64 / 16, >= 16)\n"
      "  --layers N        k3-trunk: layers (default 4); dspark: draft layers (default 2)\n"
      "  --target DIR      dspark: the target model whose dimensions the draft takes\n"
      "  --taps LIST       dspark: comma-separated 0-based target layers to tap\n"
      "  --spine bf16|int8 bf16 (default): the spine as the release stores it; int8: the spine\n"
      "                    matrices only as their row-int8 copy (the bytes convert-spine would\n"
      "                    write) in DIR/spine-int8, their bf16 ranges left as holes (sparse:\n"
      "                    no disk), every other tensor written; run it with --spine int8.\n"
      "                    For a trunk whose bf16 spine does not fit (93 layers: 113 GB vs 56)\n"
      "  --spine-dir DIR2  --spine int8: write the int8 copy to DIR2 (another file system);\n"
      "                    run with --spine int8 --spine-dir DIR2\n"
      "  --threads N       generating threads (default: all cores; the bytes do not depend on it)\n"
      "  --force           replace a model already in DIR\n"
      "  --dry-run         print the size and config, write nothing\n"
      "  -q, --quiet       no progress bar\n");
}

/* --taps 1,3,4: up to 64 layer indices. */
static int parse_taps(const char *v, int *taps, int *n) {
  *n = 0;
  for (const char *p = v; *p;) {
    char *end;
    long x = strtol(p, &end, 10);
    if (end == p || x < 0 || x > 4096 || *n == 64 || (*end && *end != ','))
      return df_cli_fail("--taps: '%s' is not a list of layer indices like 1,3,4,6,7", v);
    taps[(*n)++] = (int)x;
    p = *end ? end + 1 : end;
  }
  return *n ? 0 : df_cli_fail("--taps: empty list");
}

static int make_dspark(const df_synth_opts *o, const char *target, const int *taps, int ntaps,
                       int quiet) {
  if (!target) return df_cli_fail("make-model --preset dspark: --target DIR (the K3 model) is required");
  if (!o->out_dir) return df_cli_fail("make-model: --out DIR is required");
  df_dspark_make_opts d = {.target_dir = target, .out_dir = o->out_dir, .seed = o->seed,
                           .layers = o->layers > 0 ? o->layers : 2, .ntaps = ntaps, .taps = taps};
  df_err e = {{0}};
  if (df_dspark_make(&d, &e)) return df_cli_fail("make-model: %s", e.msg);
  if (!quiet)
    fprintf(stderr, "deltafin: wrote %s (DSpark for %s, %d layers, seed %" PRIu64 ")\n",
            o->out_dir, target, d.layers, o->seed);
  return 0;
}

int df_cmd_make_model(int argc, char **argv) {
  if (df_cli_wants_help(argc, argv)) {
    df_cmd_make_model_help();
    return 0;
  }
  df_synth_opts o = {.seed = 1, .progress = 1};
  int dry = 0, quiet = 0, taps[64], ntaps = 0;
  const char *target = NULL;
  long v;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--preset") && val) {
      o.preset = val;
      i++;
    } else if (!strcmp(a, "--seed") && val) {
      char *end = NULL;
      unsigned long long s = strtoull(val, &end, 10);
      if (!*val || *end || val[0] == '-') return df_cli_fail("--seed: '%s' is not a non-negative integer", val);
      o.seed = s;
      i++;
    } else if (!strcmp(a, "--out") && val) {
      o.out_dir = val;
      i++;
    } else if (!strcmp(a, "--moe-layers") && val) {
      if (df_cli_int(a, val, 1, 255, &v)) return 1;
      o.moe_layers = (int)v;
      i++;
    } else if (!strcmp(a, "--layers") && val) {
      if (df_cli_int(a, val, 2, 255, &v)) return 1;
      o.layers = (int)v;
      i++;
    } else if (!strcmp(a, "--experts") && val) {
      if (df_cli_int(a, val, 1, 65536, &v)) return 1;
      o.experts = (int)v;
      i++;
    } else if (!strcmp(a, "--spine") && val) {
      if (strcmp(val, "bf16") && strcmp(val, "int8")) return df_cli_fail("--spine: '%s' is not bf16 or int8", val);
      o.spine_int8 = !strcmp(val, "int8");
      i++;
    } else if (!strcmp(a, "--spine-dir") && val) {
      o.spine_dir = val;
      i++;
    } else if (!strcmp(a, "--threads") && val) {
      if (df_cli_int(a, val, 1, 4096, &v)) return 1;
      o.threads = (int)v;
      i++;
    } else if (!strcmp(a, "--target") && val) {
      target = val;
      i++;
    } else if (!strcmp(a, "--taps") && val) {
      if (parse_taps(val, taps, &ntaps)) return 1;
      i++;
    } else if (!strcmp(a, "--force")) {
      o.force = 1;
    } else if (!strcmp(a, "--dry-run")) {
      dry = 1;
    } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
      o.progress = 0;
      quiet = 1;
    } else if (!strncmp(a, "--", 2) && !val &&
               (!strcmp(a, "--preset") || !strcmp(a, "--seed") || !strcmp(a, "--out") ||
                !strcmp(a, "--moe-layers") || !strcmp(a, "--experts") || !strcmp(a, "--layers") ||
                !strcmp(a, "--target") || !strcmp(a, "--taps") || !strcmp(a, "--spine") ||
                !strcmp(a, "--spine-dir") || !strcmp(a, "--threads"))) {
      return df_cli_fail("%s needs a value", a);
    } else {
      return df_cli_fail("make-model: unknown argument '%s' (see deltafin make-model --help)", a);
    }
  }
  if (!o.preset) return df_cli_fail("make-model: --preset is required (tiny, small, k3-shaped, k3-trunk)");
  if (o.spine_dir && !o.spine_int8) return df_cli_fail("make-model: --spine-dir goes with --spine int8");
  if (!strcmp(o.preset, "dspark")) {
    if (o.spine_int8) return df_cli_fail("make-model: --spine int8 applies to K3 presets, not dspark");
    return make_dspark(&o, target, taps, ntaps, quiet);
  }
  if (!o.out_dir && !dry) return df_cli_fail("make-model: --out DIR is required");
  df_err e = {{0}};
  uint64_t model_bytes, int8_bytes;
  df_config c;
  if (df_synth_config(&o, &c, &e) || df_synth_sizes(&o, &model_bytes, &int8_bytes, &e))
    return df_cli_fail("%s", e.msg);
  uint64_t bytes = model_bytes + int8_bytes;
  if (dry) {
    printf("preset %s seed %" PRIu64 ": %d layers (%d KDA, %d MLA), hidden %d, vocab %d, "
           "%d experts top-%d per MoE layer, %.3f GB",
           o.preset, o.seed, c.n_layers, c.n_kda, c.n_mla, c.hidden, c.vocab, c.n_experts, c.top_k,
           (double)bytes / 1e9);
    if (o.spine_int8)
      printf(" (shards %.3f GB on disk, bf16 spine as holes; int8 spine %.3f GB)",
             (double)model_bytes / 1e9, (double)int8_bytes / 1e9);
    printf("\n");
    return 0;
  }
  if (bytes < (64ull << 20)) o.progress = 0; /* a bar for big presets only */
  double t0 = df_now();
  if (df_synth_make_model(&o, &e)) return df_cli_fail("%s", e.msg);
  double dt = df_now() - t0;
  if (!quiet)
    fprintf(stderr, "deltafin: wrote %s (preset %s, seed %" PRIu64 ", %.3f GB%s; %.1f s, %.2f GB/s)\n",
            o.out_dir, o.preset, o.seed, (double)bytes / 1e9,
            o.spine_int8 ? ", spine as row-int8 only, its bf16 ranges holes" : "", dt,
            dt > 0 ? (double)bytes / 1e9 / dt : 0.0);
  return 0;
}

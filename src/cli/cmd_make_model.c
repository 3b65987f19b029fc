/* deltafin make-model: writes a synthetic checkpoint in the exact K3 layout. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "cli/cli.h"
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
      "\n"
      "options:\n"
      "  --preset NAME     tiny | small | k3-shaped | k3-trunk\n"
      "  --seed N          weights seed (default 1)\n"
      "  --out DIR         output directory (created)\n"
      "  --moe-layers L    k3-shaped: MoE layers (default 4; one dense layer is added)\n"
      "  --experts E       k3-shaped/k3-trunk: routed experts per layer (default 64 / 16, >= 16)\n"
      "  --layers N        k3-trunk: layers (default 4)\n"
      "  --force           replace a model already in DIR\n"
      "  --dry-run         print the size and config, write nothing\n"
      "  -q, --quiet       no progress bar\n");
}

int df_cmd_make_model(int argc, char **argv) {
  if (df_cli_wants_help(argc, argv)) {
    df_cmd_make_model_help();
    return 0;
  }
  df_synth_opts o = {.seed = 1, .progress = 1};
  int dry = 0, quiet = 0;
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
    } else if (!strcmp(a, "--force")) {
      o.force = 1;
    } else if (!strcmp(a, "--dry-run")) {
      dry = 1;
    } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
      o.progress = 0;
      quiet = 1;
    } else if (!strncmp(a, "--", 2) && !val &&
               (!strcmp(a, "--preset") || !strcmp(a, "--seed") || !strcmp(a, "--out") ||
                !strcmp(a, "--moe-layers") || !strcmp(a, "--experts") || !strcmp(a, "--layers"))) {
      return df_cli_fail("%s needs a value", a);
    } else {
      return df_cli_fail("make-model: unknown argument '%s' (see deltafin make-model --help)", a);
    }
  }
  if (!o.preset) return df_cli_fail("make-model: --preset is required (tiny, small, k3-shaped, k3-trunk)");
  if (!o.out_dir && !dry) return df_cli_fail("make-model: --out DIR is required");
  df_err e = {{0}};
  uint64_t bytes;
  df_config c;
  if (df_synth_config(&o, &c, &e) || df_synth_size(&o, &bytes, &e)) return df_cli_fail("%s", e.msg);
  if (dry) {
    printf("preset %s seed %" PRIu64 ": %d layers (%d KDA, %d MLA), hidden %d, vocab %d, "
           "%d experts top-%d per MoE layer, %.3f GB\n",
           o.preset, o.seed, c.n_layers, c.n_kda, c.n_mla, c.hidden, c.vocab, c.n_experts, c.top_k,
           (double)bytes / 1e9);
    return 0;
  }
  if (bytes < (64ull << 20)) o.progress = 0; /* a bar for big presets only */
  if (df_synth_make_model(&o, &e)) return df_cli_fail("%s", e.msg);
  if (!quiet)
    fprintf(stderr, "deltafin: wrote %s (preset %s, seed %" PRIu64 ", %.3f GB)\n", o.out_dir, o.preset,
          o.seed, (double)bytes / 1e9);
  return 0;
}

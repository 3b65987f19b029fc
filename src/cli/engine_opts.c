/* One table of engine options: spelling, value, help line and parser. */
#include "cli/engine_opts.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#include "cli/cli.h"
#include "cli/opt_table.h"
#include "kernels/kdevice.h"

typedef enum {
  K_MODEL, K_THREADS, K_SPINE, K_KERNELS, K_GATE, K_STORE, K_NO_PACK, K_CACHE, K_IO, K_PREFETCH,
  K_SPLIT, K_EMU, K_TRACE, K_PIN, K_QD, K_HEAT, K_MEM, K_CTX, K_SPINE_DIR,
  K_FETCH_AHEAD,
  K_STREAM_VERIFY, K_PRECISION, K_DRAFT, K_DRAFT_MAX, K_DRAFT_ROLLBACK, K_DEVICE, K_GPU_MEM,
  K_GPU_STATE
} opt_key;

typedef struct opt_def {
  const char *flag;
  const char *arg; /* value placeholder; NULL = a switch */
  opt_key key;
  const char *help;
} opt_def;

static const opt_def defs[] = {
    {"--model", "DIR", K_MODEL, "model directory (config.json, shards, tokenizer)"},
    {"--threads", "N", K_THREADS, "worker threads (default 0: all cores)"},
    {"--spine", "bf16|int8", K_SPINE,
     "bf16 as stored (default), or the row-int8 copy from `deltafin convert-spine`"},
    {"--kernels", "auto|scalar", K_KERNELS, "kernel table (default auto: the fastest this CPU runs; scalar = the reference kernels)"},
    {"--device", "cpu|cuda[:N]", K_DEVICE,
     "where the layers' matrix products run: cpu (default; the environment's DF_DEVICE, if set, "
     "is the default instead), or CUDA device N (a -DDF_CUDA=ON "
     "build): the weights kept in GPU memory, the KDA recurrence and MLA attention run there, "
     "the same results bit for bit; the norms, AttnRes and routing stay on the CPU"},
    {"--gpu-mem", "SIZE", K_GPU_MEM,
     "--device cuda: GPU memory for the weight tier (spine matrices and routed experts kept "
     "there; default: the free memory less a sixteenth of the device, at least 2 GiB)"},
    {"--gpu-state", "keep|copy", K_GPU_STATE,
     "--device cuda: keep (default) the KDA states and MLA caches in GPU memory between passes, "
     "so a token moves only its new rows (a device that dies holding a state ends that "
     "sequence with an error); copy: in and out every pass, the host's copy always current "
     "(the same results)"},
    {"--precision", "f32|f64", K_PRECISION,
     "activations: f32 (default) or f64, float64 on the scalar kernels (several times slower, "
     "state x2): the reference's answer where fp32 rounding meets a near-tie"},
    {"--draft", "SRC", K_DRAFT,
     "speculative decoding, same ids as without: off (default), ngram (prompt lookup), auto "
     "(with a DSpark in DIR/dspark: it for chat prompts, blocks cut by its confidence head, and ngram "
     "for raw text; else ngram; the block size "
     "adapted and switched off when it does not pay), DIR (a Qwen3 draft model's folder, e.g. "
     "models/nano-draft, or a DSpark's), dspark:DIR (K3's own drafter), self (the model as its own draft: a test "
     "of the machinery)"},
    {"--draft-max", "K", K_DRAFT_MAX, "drafts per verify block (default 4, at most 16)"},
    {"--draft-rollback", "recompute|rows", K_DRAFT_ROLLBACK,
     "undoing a rejected block: recompute (default: one saved recurrent state, the accepted "
     "rows run again) or rows (a saved state per block row, no recompute, --draft-max times "
     "the memory; same ids)"},
    {"--cache-mb", "N", K_CACHE, "expert RAM cache budget in MiB (default: a quarter of RAM, within the memory plan; 0 = only the reads in flight)"},
    {"--store", "FILE", K_STORE, "pack manifest to read experts from (default: the model's pack)"},
    {"--no-pack", NULL, K_NO_PACK, "read experts from the shards even if a pack exists"},
    {"--io", "uring|pread", K_IO, "I/O engine (default uring)"},
    {"--prefetch", "MODE", K_PREFETCH, "off, gate, prev or auto (default)"},
    {"--emulate-drives", "BW[,LAT]", K_EMU, "emulate drive bandwidth/latency (figures are EMULATED)"},
    {"--split-reads", "MODE", K_SPLIT, "auto (default: large records over two idle copies), off, always"},
    {"--gate-input", "IN", K_GATE, "gate-ahead predictor input: x (default) or x+shared"},
    {"--trace", "FILE", K_TRACE, "write a per-read trace"},
    {"--pin-mb", "N", K_PIN, "keep the hottest experts (by the heat file) resident"},
    {"--queue-depth", "N", K_QD, "reads in flight per drive (default 8)"},
    {"--heat", "FILE", K_HEAT,
     "heat file (default DIR/deltafin.heat; a read-only DIR: none, said once; \"\" = none)"},
    {"--mem-limit", "SIZE", K_MEM,
     "memory to plan for (48G, 512M; default MemAvailable or the cgroup limit): spine layers "
     "beyond it stream every token"},
    {"--ctx", "N", K_CTX, "context positions to admit (default: the memory plan's)"},
    {"--spine-dir", "DIR", K_SPINE_DIR,
     "where `convert-spine --out` wrote the int8 spine (default DIR/spine-int8)"},
    {"--fetch-ahead", "on|off", K_FETCH_AHEAD,
     "stream installs: let the prefetch predictors fetch experts that are not local over the "
     "network in the background, below demand fetches (default off: only what a batch needs "
     "is fetched)"},
    {"--stream-verify", "POLICY", K_STREAM_VERIFY,
     "stream installs: record (each fetched expert against the record sums), shard (an expert's "
     "whole shard fetched and checked against the hub's sha256 first) or arrival (unverified); "
     "default: as `setup --stream` recorded it"},
};
#define NDEFS (sizeof defs / sizeof defs[0])

/* --mem-limit's value: a size row of the option tables (opt_table.h). */
static const df_opt mem_limit_row = {"--mem-limit", "SIZE", DF_OPT_SIZE, 0, 0, 0, 0, NULL, NULL};
static const df_opt gpu_mem_row = {"--gpu-mem", "SIZE", DF_OPT_SIZE, 0, 0, 0, 0, NULL, NULL};

/* A draft model's folder is recognised by its config.json. */
static int has_config(const char *dir) {
  char *p = df_path_join(dir, "config.json");
  int ok = df_file_exists(p);
  free(p);
  return ok;
}

static int set(df_engine_opts *o, const char *cmd, opt_key k, const char *a, const char *v) {
  long n;
  switch (k) {
  case K_MODEL: o->model_dir = v; return 0;
  case K_THREADS:
    if (df_cli_int(a, v, 0, 4096, &n)) return -1;
    o->threads = (int)n;
    return 0;
  case K_SPINE:
    if (!strcmp(v, "bf16")) o->spine = DF_SPINE_BF16;
    else if (!strcmp(v, "int8")) o->spine = DF_SPINE_INT8;
    else return df_cli_fail("--spine: '%s' is not bf16 or int8", v), -1;
    return 0;
  case K_KERNELS:
    if (!strcmp(v, "auto")) o->kernels_scalar = 0;
    else if (!strcmp(v, "scalar")) o->kernels_scalar = 1;
    else return df_cli_fail("--kernels: '%s' is not auto or scalar", v), -1;
    return 0;
  case K_DEVICE: {
    char err[256];
    int dev = DF_DEVICE_UNSET;
    /* plan only plans for the device: a machine without it (or a build
     * without CUDA) can still plan for it, from --gpu-mem */
    if (df_kern_device_parse(v, &dev, err, sizeof err) && (strcmp(cmd, "plan") || dev < 0))
      return df_cli_fail("--device: %s", err), -1;
    o->device = dev;
    return 0;
  }
  case K_GPU_MEM:
    if (df_opt_value(&gpu_mem_row, &o->gpu_mem, v)) return -1;
    if (o->gpu_mem < 1000000) return df_cli_fail("--gpu-mem: %s is below 1M", v), -1;
    return 0;
  case K_GPU_STATE:
    if (!strcmp(v, "keep")) o->gpu_state_copy = 0;
    else if (!strcmp(v, "copy")) o->gpu_state_copy = 1;
    else return df_cli_fail("--gpu-state: '%s' is not keep or copy", v), -1;
    return 0;
  case K_PRECISION:
    if (!strcmp(v, "f32")) o->f64 = 0;
    else if (!strcmp(v, "f64")) o->f64 = 1;
    else return df_cli_fail("--precision: '%s' is not f32 or f64", v), -1;
    return 0;
  case K_DRAFT:
    if (strcmp(v, "off") && strcmp(v, "ngram") && strcmp(v, "auto") && strcmp(v, "self") &&
        !has_config(strncmp(v, "dspark:", 7) ? v : v + 7))
      return df_cli_fail("--draft: '%s' is not off, ngram, auto, self, dspark:DIR or a draft "
                         "model's folder (config.json, safetensors, tokenizer.json)", v), -1;
    o->draft = v;
    return 0;
  case K_DRAFT_MAX:
    if (df_cli_int(a, v, 1, 16, &n)) return -1;
    o->draft_max = (int)n;
    return 0;
  case K_DRAFT_ROLLBACK:
    if (!strcmp(v, "recompute")) o->draft_rows = 0;
    else if (!strcmp(v, "rows")) o->draft_rows = 1;
    else return df_cli_fail("--draft-rollback: '%s' is not recompute or rows", v), -1;
    return 0;
  case K_GATE:
    if (!strcmp(v, "x")) o->gate_input = DF_GATE_INPUT_X;
    else if (!strcmp(v, "x+shared")) o->gate_input = DF_GATE_INPUT_X_SHARED;
    else return df_cli_fail("--gate-input: '%s' is not x or x+shared", v), -1;
    return 0;
  case K_STORE: o->store.manifest = v; return 0;
  case K_NO_PACK: o->store.no_pack = 1; return 0;
  case K_CACHE:
    if (df_cli_int(a, v, 0, 1L << 40, &n)) return -1;
    o->store.cache_mb = n;
    return 0;
  case K_IO:
    if (df_store_io_parse(v, &o->store.io))
      return df_cli_fail("--io: '%s' is not uring or pread", v), -1;
    return 0;
  case K_PREFETCH:
    if (df_store_prefetch_parse(v, &o->store.prefetch))
      return df_cli_fail("--prefetch: '%s' is not off, gate, prev or auto", v), -1;
    return 0;
  case K_SPLIT:
    if (df_store_split_parse(v, &o->store.split_reads))
      return df_cli_fail("--split-reads: '%s' is not auto, off or always", v), -1;
    return 0;
  case K_EMU: o->store.emulate_drives = v; return 0;
  case K_TRACE: o->store.trace_path = v; return 0;
  case K_PIN:
    if (df_cli_int(a, v, 0, 1L << 40, &n)) return -1;
    o->store.pin_mb = n;
    return 0;
  case K_QD:
    if (df_cli_int(a, v, 1, 4096, &n)) return -1;
    o->store.queue_depth = (int)n;
    return 0;
  case K_HEAT: o->store.heat_path = v; return 0;
  case K_MEM: return df_opt_value(&mem_limit_row, &o->mem_limit, v); /* as inspect's, plan's --mem */
  case K_SPINE_DIR: o->spine_dir = v; return 0;
  case K_FETCH_AHEAD:
    if (!strcmp(v, "on")) o->store.fetch_ahead = 1;
    else if (!strcmp(v, "off")) o->store.fetch_ahead = 0;
    else return df_cli_fail("--fetch-ahead: '%s' is not on or off", v), -1;
    return 0;
  case K_STREAM_VERIFY:
    if (df_sverify_parse(v, &o->store.stream_verify))
      return df_cli_fail("--stream-verify: '%s' is not record, shard or arrival", v), -1;
    return 0;
  case K_CTX:
    if (df_cli_int(a, v, 1, 1 << 30, &n)) return -1;
    o->ctx = (int)n;
    return 0;
  }
  return -1;
}

int df_cli_engine_opt(df_engine_opts *o, const char *cmd, int argc, char **argv, int *i) {
  const char *a = argv[*i];
  for (size_t d = 0; d < NDEFS; d++) {
    if (strcmp(a, defs[d].flag)) continue;
    const char *v = NULL;
    if (defs[d].arg) {
      if (*i + 1 >= argc) return df_cli_fail("%s needs a value (see deltafin %s --help)", a, cmd), -1;
      v = argv[++*i];
    }
    return set(o, cmd, defs[d].key, a, v) ? -1 : 1;
  }
  return 0;
}

void df_cli_engine_help(FILE *out) {
  fprintf(out, "engine and expert store (the same for every command that runs the model):\n");
  for (size_t d = 0; d < NDEFS; d++) {
    char lhs[64];
    snprintf(lhs, sizeof lhs, "%s%s%s", defs[d].flag, defs[d].arg ? " " : "",
             defs[d].arg ? defs[d].arg : "");
    if (strlen(lhs) <= 18) fprintf(out, "  %-18s %s\n", lhs, defs[d].help);
    else fprintf(out, "  %s\n  %-18s %s\n", lhs, "", defs[d].help);
  }
}

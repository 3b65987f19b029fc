/* deltafin plan: the memory planner's decisions for a machine (memory,
 * drives) and a PROJECTION of one decode token: bytes per token from each
 * tier, read time at the drives' bandwidth, and, given per-part compute
 * measured by `deltafin run --json` on a model with K3's trunk (k3-trunk),
 * the compute per token. Without --model it plans full K3 from its config. */
#include <inttypes.h>
#include <stddef.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "cli/opt_table.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "kernels/kgpu.h"
#include "model/k3.h"
#include "model/model.h"
#include "plan/plan.h"
#include "store/io.h"
#include "store/manifest.h"
#include "store/store.h"
#include "synth/synth.h"

#define PLAN_GPU_ROWS 64 /* the engine's default largest batch (engine.h's max_rows) */

void df_cmd_plan_help(void) {
  printf(
      "usage: deltafin plan [--mem SIZE] [--drives SPEC] [--model DIR] [--spine bf16|int8]\n"
      "                     [--ctx N] [--compute FILE] [--expert-hit F] [--reuse-mb N]\n"
      "                     [--spine-from pack|shards] [--device cuda[:N]] [--gpu-mem SIZE]\n"
      "                     [--json]\n"
      "\n"
      "Prints what the memory planner keeps resident and what streams for a machine\n"
      "with SIZE of memory for deltafin, and a PROJECTION of one decode token: the\n"
      "spine and expert bytes it reads from the drives, the read time at their total\n"
      "bandwidth and, with --compute, the compute per token from per-part times\n"
      "measured on this machine (`deltafin run --json` on a k3-trunk model: its\n"
      "stats.decode_compute). Without --model the model is full K3 (93 layers, 896\n"
      "experts, from its config).\n"
      "\n"
      "options:\n"
      "  --mem SIZE        memory deltafin may use (64G, 128G, ...; default: this machine's)\n"
      "  --drives SPEC     4x7.5GB/s, or 7.4GB/s, or a list 7GB/s,7GB/s (default 1x7GB/s)\n"
      "  --model DIR       plan this checkpoint instead of full K3\n"
      "  --spine KIND      bf16 (as released) or int8 (the convert-spine copy; default int8)\n"
      "  --ctx N           context positions to admit (default: the planner's)\n"
      "  --compute FILE    `deltafin run --json` output with stats.decode_compute\n"
      "  --expert-hit F    fraction of routed experts served from the RAM cache (default:\n"
      "                    the cache's share of all experts, i.e. uniform routing)\n"
      "  --reuse-mb N      budget serve's kept conversation states (serve --reuse-mb)\n"
      "  --spine-from SRC  pack: the spine streams from a pack's spine section (pack --spine),\n"
      "                    balanced across the drives with the experts; shards: from the\n"
      "                    checkpoint's shards on one drive (default: pack for full K3; for\n"
      "                    --model, pack when its pack has a spine section of this kind)\n"
      "  --device cuda[:N] also plan GPU memory (needs no GPU with --gpu-mem): which spine\n"
      "                    units the weight tier keeps, the routed experts' share of it (in\n"
      "                    records) and the per-use buffers of a %d-row batch, as `run\n"
      "                    --device cuda` plans them (its --stats and stats.plan.gpu)\n"
      "  --gpu-mem SIZE    the weight tier's size, as run's --gpu-mem (default: the device's\n"
      "                    free memory less a sixteenth of it, at least 2 GiB, which needs\n"
      "                    the device)\n"
      "  --json            one JSON object\n", PLAN_GPU_ROWS);
}

static int parse_drives(const char *s, int *n, double *total) {
  const char *x = strchr(s, 'x');
  double r;
  if (x && x > s) {
    char *end;
    long k = strtol(s, &end, 10);
    if (end != x || k < 1 || k > 64 || df_io_parse_rate(x + 1, &r)) return -1;
    *n = (int)k;
    *total = (double)k * r;
    return 0;
  }
  *n = 0;
  *total = 0;
  char *dup = df_xstrdup(s), *save = NULL;
  for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (df_io_parse_rate(t, &r)) {
      free(dup);
      return -1;
    }
    (*n)++;
    *total += r;
  }
  free(dup);
  return *n ? 0 : -1;
}

static double part_ms(json_t *dc, const char *k) {
  json_t *o = json_object_get(dc, k);
  json_t *v = o ? json_object_get(o, "ms_each") : NULL;
  return json_is_number(v) ? json_number_value(v) : -1;
}

/* The command line, parsed by one option table (cli/opt_table.h). */
typedef struct plan_args {
  const char *model, *drives, *compute;
  int spine_from; /* -1: by the model's pack; 0 pack, 1 shards */
  int int8;       /* --spine: 0 bf16, 1 int8 */
  int as_json, ctx;
  uint64_t mem, reuse;
  double hit;     /* -1: the cache's share */
  df_engine_opts eo; /* --device and --gpu-mem, parsed by the engine's table */
} plan_args;

#define PA(f) offsetof(plan_args, f)
static const df_opt plan_rows[] = {
    {"--json", NULL, DF_OPT_SWITCH, PA(as_json), 0, 0, 0, NULL, NULL},
    {"--mem", "SIZE", DF_OPT_SIZE, PA(mem), 0, 0, 0, NULL, NULL},
    {"--drives", "SPEC", DF_OPT_STR, PA(drives), 0, 0, 0, NULL, NULL},
    {"--model", "DIR", DF_OPT_STR, PA(model), 0, 0, 0, NULL, NULL},
    {"--compute", "FILE", DF_OPT_STR, PA(compute), 0, 0, 0, NULL, NULL},
    {"--spine-from", "pack|shards", DF_OPT_CHOICE, PA(spine_from), 0, 0, 0, NULL, NULL},
    {"--reuse-mb", "N", DF_OPT_MB, PA(reuse), 0, 1 << 30, 0, NULL, NULL},
    {"--spine", "bf16|int8", DF_OPT_CHOICE, PA(int8), 0, 0, 0, NULL, NULL},
    {"--ctx", "N", DF_OPT_INT, PA(ctx), 1, 1 << 30, 0, NULL, NULL},
    {"--expert-hit", "F", DF_OPT_DOUBLE, PA(hit), 0, 1, 0, NULL, NULL},
};

/* 0, or 1 after printing why. */
static int plan_parse(plan_args *a, int argc, char **argv) {
  *a = (plan_args){.drives = "1x7GB/s", .spine_from = -1, .int8 = 1, .hit = -1};
  df_engine_opts_default(&a->eo);
  for (int i = 1; i < argc; i++) {
    int r = !strcmp(argv[i], "--device") || !strcmp(argv[i], "--gpu-mem")
                ? df_cli_engine_opt(&a->eo, "plan", argc, argv, &i)
                : df_opt_take(plan_rows, sizeof plan_rows / sizeof plan_rows[0], a, "plan", argc,
                              argv, &i);
    if (r < 0) return 1;
    if (!r) return df_cli_fail("plan: unknown option '%s' (see deltafin plan --help)", argv[i]);
  }
  return 0;
}

/* The measured per-part decode times of a `run --json` output: 0, or 1 said. */
static int plan_read_compute(const char *compute, double *parts) {
  char *buf;
  size_t len;
  if (df_cli_read_input(compute, &buf, &len)) return 1;
  json_error_t je;
  json_t *j = json_loadb(buf, len, 0, &je);
  free(buf);
  if (!j)
    return df_cli_fail("--compute %s: invalid JSON at line %d column %d: %s (use `deltafin run --json` output)",
                       compute, je.line, je.column, je.text);
  json_t *dc = json_object_get(json_object_get(j, "stats"), "decode_compute");
  if (!dc) dc = json_object_get(j, "decode_compute");
  if (!dc) {
    json_decref(j);
    return df_cli_fail("--compute %s: no stats.decode_compute (use `deltafin run --json` output)", compute);
  }
  int ok = 1;
  for (int k = 0; k < DF_K3_T_N; k++) {
    parts[k] = part_ms(dc, df_k3_compute_names[k]) / 1e3;
    if (parts[k] < 0) ok = 0;
  }
  json_decref(j);
  if (!ok) return df_cli_fail("--compute %s: a part is missing (decode at least one token)", compute);
  return 0;
}

/* The projection's figures, for the two outputs. */
typedef struct projection {
  const char *what, *memsrc, *spine_from;
  int int8, ndrives, balanced, nmoe, have_comp;
  double bw, hit, spine_b, exp_b, io_s, comp_s, parts[DF_K3_T_N];
  const char *compute;
  uint64_t rec_bytes;
} projection;

/* The GPU's part of the plan (plan.h's df_plan_gpu): with --device cuda,
 * or --gpu-mem alone. */
typedef struct gpu_section {
  int want, made;
  char src[96];  /* where the budget came from */
  char why[400]; /* why there is none */
  df_plan_gpu g;
} gpu_section;

typedef struct gpu_open_ctx {
  gpu_section *gs;
  df_plan_gpu_in *in;
} gpu_open_ctx;

/* Planned by df_kgpu_open as `run` plans it: the tier it would make, the
 * device's free memory beyond it. */
static uint64_t plan_gpu_at_open(void *ud, uint64_t tier_bytes, uint64_t free_bytes) {
  gpu_open_ctx *x = ud;
  x->in->budget = tier_bytes;
  x->in->outside = free_bytes > tier_bytes ? free_bytes - tier_bytes : 0;
  df_plan_gpu_make(&x->gs->g, x->in);
  x->gs->made = 1;
  return x->gs->g.keep_cap;
}

static void plan_gpu(gpu_section *gs, const df_engine_opts *eo, const df_config *cfg, int int8,
                     uint64_t record, int ctx) {
  int dev = eo->device;
  gs->want = dev >= 0 || (dev == DF_DEVICE_UNSET && eo->gpu_mem);
  if (!gs->want) return;
  if (dev < 0) dev = 0;
  int nu = cfg->n_layers + 1;
  uint64_t *ub = df_xcalloc((size_t)nu, sizeof *ub), *ul = df_xcalloc((size_t)nu, sizeof *ul);
  df_plan_gpu_units(cfg, int8, ub, ul);
  df_plan_gpu_in in = {.cfg = cfg, .nunits = nu, .unit_bytes = ub, .unit_largest = ul,
                       .expert_record_bytes = record,
                       .expert_total_bytes = record * (uint64_t)cfg->n_experts *
                                             (uint64_t)(cfg->n_layers - cfg->first_k_dense),
                       .budget = eo->gpu_mem, .outside = DF_PLAN_GPU_UNKNOWN,
                       .max_rows = PLAN_GPU_ROWS,
                       /* one sequence at the planned context, as `run` keeps it there */
                       .state_bytes = eo->gpu_state_copy ? 0 : df_plan_gpu_state_bytes(cfg, ctx, 0, 0)};
  if (eo->gpu_mem) {
    df_plan_gpu_make(&gs->g, &in);
    gs->made = 1;
    snprintf(gs->src, sizeof gs->src, "--gpu-mem");
  } else {
    char err[256];
    gpu_open_ctx x = {gs, &in};
    df_kgpu *k = df_kgpu_open(dev, 0, plan_gpu_at_open, &x, err, sizeof err);
    if (k) {
      df_kgpu_close(k);
      snprintf(gs->src, sizeof gs->src, "cuda:%d's free memory less its reserve", dev);
    } else {
      snprintf(gs->why, sizeof gs->why,
               "the GPU section needs --gpu-mem SIZE or a device (cuda:%d: %s)", dev, err);
    }
  }
  free(ub);
  free(ul);
}

static void plan_print_json(const df_plan *p, const projection *q, const df_config *cfg,
                            const gpu_section *gs) {
  char *pj = df_plan_json(p);
  json_t *o = json_object();
  json_object_set_new(o, "model", json_string(q->what));
  json_object_set_new(o, "spine", json_string(q->int8 ? "int8" : "bf16"));
  json_object_set_new(o, "memory_source", json_string(q->memsrc));
  json_object_set_new(o, "plan", json_loads(pj, 0, NULL));
  free(pj);
  char *sj = df_plan_state_json(cfg, 0);
  json_t *sv = json_loads(sj, 0, NULL);
  free(sj);
  if (sv) json_object_set_new(o, "sequence_state", sv);
  if (gs->made) {
    char *gj = df_plan_gpu_json(&gs->g);
    json_t *gv = json_loads(gj, 0, NULL);
    free(gj);
    if (gv) {
      json_object_set_new(gv, "budget_source", json_string(gs->src));
      json_object_set_new(o, "gpu", gv);
    }
  } else if (gs->want) {
    json_object_set_new(o, "gpu", json_pack("{s:s}", "error", gs->why));
  }
  json_t *pr = json_object();
  json_object_set_new(pr, "label", json_string("PROJECTION"));
  json_object_set_new(pr, "drives", json_integer(q->ndrives));
  json_object_set_new(pr, "drive_bytes_per_s", json_real(q->bw));
  json_object_set_new(pr, "spine_source", json_string(q->spine_from));
  json_object_set_new(pr, "spine_balanced", json_boolean(q->balanced));
  json_object_set_new(pr, "expert_hit", json_real(q->hit));
  json_object_set_new(pr, "spine_bytes_per_token", json_real(q->spine_b));
  json_object_set_new(pr, "expert_bytes_per_token", json_real(q->exp_b));
  json_object_set_new(pr, "read_s_per_token", json_real(q->io_s));
  json_object_set_new(pr, "compute_s_per_token", q->have_comp ? json_real(q->comp_s) : json_null());
  json_object_set_new(pr, "s_per_token_overlapped",
                      q->have_comp ? json_real(q->comp_s > q->io_s ? q->comp_s : q->io_s) : json_null());
  json_object_set_new(pr, "s_per_token_serial", q->have_comp ? json_real(q->comp_s + q->io_s) : json_null());
  json_object_set_new(o, "projection", pr);
  char *t = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  puts(t);
  free(t);
  json_decref(o);
}

static void plan_print_text(const df_plan *p, const projection *q, const df_config *cfg,
                            const gpu_section *gs) {
  int ndrives = q->ndrives;
  double bw = q->bw, io_s = q->io_s, comp_s = q->comp_s;
  const double *parts = q->parts;
  printf("model    %s, %s spine\n", q->what, q->int8 ? "int8" : "bf16");
  char *t = df_plan_text(p);
  fputs(t, stdout);
  free(t);
  t = df_plan_state_text(cfg, 0);
  fputs(t, stdout);
  free(t);
  if (gs->made) {
    t = df_plan_gpu_text(&gs->g);
    printf("gpu      budget %.1f MB from %s\n", gs->g.budget / 1e6, gs->src);
    fputs(t, stdout);
    free(t);
  } else if (gs->want) {
    printf("gpu      %s\n", gs->why);
  }
  printf("PROJECTION (not a measurement) of one decode token on %d drive%s, %.1f GB/s together:\n",
         ndrives, ndrives == 1 ? "" : "s", bw / 1e9);
  printf("  spine streamed   %8.2f GB (non-resident layers, one embedding row), %s\n", q->spine_b / 1e9,
         !strcmp(q->spine_from, "pack")
             ? (ndrives > 1 ? "from the pack's spine section, read balanced across the drives"
                            : "from the pack's spine section")
             : ndrives > 1 ? "from the checkpoint shards, all on one drive (not balanced: pack "
                             "--spine spreads it)"
                           : "from the checkpoint shards");
  printf("  routed experts   %8.2f GB (%d MoE layers x top-%d x %.1f MB, %.1f%% from the RAM cache)\n",
         q->exp_b / 1e9, q->nmoe, cfg->top_k, q->rec_bytes / 1e6, 100 * q->hit);
  if (q->balanced)
    printf("  reading          %8.2f s at %.1f GB/s\n", io_s, bw / 1e9);
  else
    printf("  reading          %8.2f s (the spine's drive at %.1f GB/s reads the spine and its share "
           "of the experts)\n", io_s, bw / ndrives / 1e9);
  if (q->have_comp) {
    int nmoe = q->nmoe;
    printf("  compute          %8.2f s (%d KDA x %.1f ms, %d MLA x %.1f ms, %d dense FFN x %.1f ms,\n"
           "                              %d MoE trunks x %.1f ms + %d x %d experts x %.2f ms, head %.1f ms;\n"
           "                              measured by --compute %s)\n",
           comp_s, cfg->n_kda, 1e3 * parts[DF_K3_T_KDA], cfg->n_mla, 1e3 * parts[DF_K3_T_MLA],
           cfg->first_k_dense, 1e3 * parts[DF_K3_T_DENSE], nmoe, 1e3 * parts[DF_K3_T_MOE_TRUNK], nmoe,
           cfg->top_k, 1e3 * parts[DF_K3_T_EXPERTS], 1e3 * parts[DF_K3_T_HEAD], q->compute);
    printf("  per token        %8.2f s if reads fully overlap compute, %.2f s if they never do\n",
           comp_s > io_s ? comp_s : io_s, comp_s + io_s);
  } else {
    printf("  compute          not given (--compute FILE from `deltafin run --json` on k3-trunk)\n");
  }
}

int df_cmd_plan(int argc, char **argv) {
  if (df_cli_wants_help(argc, argv)) {
    df_cmd_plan_help();
    return 0;
  }
  plan_args pa;
  if (plan_parse(&pa, argc, argv)) return 1;
  const char *model = pa.model, *drives = pa.drives, *compute = pa.compute;
  const char *spine_from = pa.spine_from < 0 ? NULL : pa.spine_from ? "shards" : "pack";
  uint64_t reuse = pa.reuse, mem = pa.mem;
  int int8 = pa.int8, ctx = pa.ctx;
  double hit = pa.hit;
  int ndrives;
  double bw;
  if (parse_drives(drives, &ndrives, &bw))
    return df_cli_fail("--drives: '%s' is not like 4x7.5GB/s or 7GB/s,7GB/s", drives);
  df_err e;
  char memsrc[256] = "--mem";
  if (!mem && df_plan_mem_detect(&mem, memsrc, sizeof memsrc, &e)) return df_cli_fail("%s", e.msg);

  df_config cfg;
  df_st_set set;
  int set_open = 0;
  df_model *m = NULL;
  const char *what;
  char what_buf[600];
  if (model) {
    int rc = df_config_load_dir(&cfg, model, &e);
    if (rc || df_st_set_open(&set, model, &e)) return df_cli_fail("%s", e.msg);
    set_open = 1;
    if (df_model_open_k3(&m, &set, &cfg, int8, model, NULL, 32, &e)) {
      df_st_set_close(&set);
      return df_cli_fail("%s", e.msg);
    }
    snprintf(what_buf, sizeof what_buf, "%s", model);
    what = what_buf;
  } else {
    df_synth_opts so = {.preset = "k3-trunk", .layers = 93, .experts = 896};
    if (df_synth_config(&so, &cfg, &e)) return df_cli_fail("%s", e.msg);
    m = df_model_plan_only_k3(&cfg, int8);
    what = "full K3 (93 layers, 896 experts, from its config)";
  }
  df_plan_in in;
  df_model_plan_req rq = {.mem_limit = mem, .cache_req = -1, .cache_default = -1, .ctx = ctx,
                          .max_rows = 1 /* decode */, .reuse_bytes = reuse,
                          .reuse_states = reuse ? DF_PLAN_SERVE_KEPT : 0};
  df_model_plan_in(m, &rq, &in);
  df_expert_layout lay;
  df_expert_layout_of(&cfg, &lay);
  int nmoe = cfg.n_layers - cfg.first_k_dense;
  /* where the spine streams from decides whether its reads are spread over
   * the drives: a pack's spine section is; the shards sit on one drive */
  if (!spine_from) {
    spine_from = "pack";
    if (model) {
      char *mp = df_path_join(model, DF_PACK_MANIFEST_NAME);
      df_manifest mf;
      df_err me;
      spine_from = "shards";
      if (df_file_exists(mp) && !df_manifest_load(&mf, mp, &me)) {
        if (mf.has_spine && !strcmp(mf.spine.kind, int8 ? "int8" : "bf16")) spine_from = "pack";
        df_manifest_free(&mf);
      }
      free(mp);
    }
  }
  int balanced = !strcmp(spine_from, "pack") || ndrives == 1;
  df_plan p;
  int rc = df_plan_make(&p, &in, &e);
  if (rc) {
    df_cli_fail("%s", e.msg);
    goto out;
  }
  if (hit < 0) hit = (double)p.cache_bytes / (double)in.expert_total_bytes;
  double spine_b = (double)p.streamed_per_token + (double)p.embed_row_bytes;
  double exp_b = (double)nmoe * cfg.top_k * (double)lay.total * (1 - hit);
  /* balanced: every drive reads its share of both; else the spine's drive
   * reads the whole spine and its share of the experts (equal drives) */
  double io_s = balanced ? (spine_b + exp_b) / bw
                         : (spine_b + exp_b / ndrives) / (bw / ndrives);
  /* compute per token from measured parts */
  projection q = {.what = what, .memsrc = memsrc, .spine_from = spine_from, .int8 = int8,
                  .ndrives = ndrives, .balanced = balanced, .nmoe = nmoe, .bw = bw, .hit = hit,
                  .spine_b = spine_b, .exp_b = exp_b, .io_s = io_s, .comp_s = -1,
                  .compute = compute, .rec_bytes = lay.total};
  if (compute) {
    if (plan_read_compute(compute, q.parts)) {
      rc = 1;
      goto out;
    }
    q.have_comp = 1;
    const double *parts = q.parts;
    q.comp_s = cfg.n_kda * parts[DF_K3_T_KDA] + cfg.n_mla * parts[DF_K3_T_MLA] +
               cfg.first_k_dense * parts[DF_K3_T_DENSE] +
               nmoe * (parts[DF_K3_T_MOE_TRUNK] + cfg.top_k * parts[DF_K3_T_EXPERTS]) +
               parts[DF_K3_T_HEAD];
  }
  gpu_section gs = {0};
  plan_gpu(&gs, &pa.eo, &cfg, int8, lay.total, p.ctx);
  if (pa.as_json) plan_print_json(&p, &q, &cfg, &gs);
  else plan_print_text(&p, &q, &cfg, &gs);
  df_plan_gpu_free(&gs.g);
  rc = 0;
out:
  df_plan_free(&p);
  df_model_free(m);
  if (set_open) df_st_set_close(&set);
  return rc;
}

/* deltafin plan: the memory planner's decisions for a machine (memory,
 * drives) and a PROJECTION of one decode token: bytes per token from each
 * tier, read time at the drives' bandwidth, and, given per-part compute
 * measured by `deltafin run --json` on a model with K3's trunk (k3-trunk),
 * the compute per token. Without --model it plans full K3 from its config. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "model/k3.h"
#include "model/model.h"
#include "plan/plan.h"
#include "store/io.h"
#include "store/manifest.h"
#include "store/store.h"
#include "synth/synth.h"

void df_cmd_plan_help(void) {
  printf(
      "usage: deltafin plan [--mem SIZE] [--drives SPEC] [--model DIR] [--spine bf16|int8]\n"
      "                     [--ctx N] [--compute FILE] [--expert-hit F] [--reuse-mb N]\n"
      "                     [--spine-from pack|shards] [--json]\n"
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
      "  --json            one JSON object\n");
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

int df_cmd_plan(int argc, char **argv) {
  if (df_cli_wants_help(argc, argv)) {
    df_cmd_plan_help();
    return 0;
  }
  const char *model = NULL, *drives = "1x7GB/s", *compute = NULL, *spine_from = NULL;
  uint64_t reuse = 0;
  uint64_t mem = 0;
  int int8 = 1, as_json = 0, ctx = 0;
  double hit = -1;
  long v;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) {
      as_json = 1;
      continue;
    }
    if (i + 1 >= argc) return df_cli_fail("plan: %s needs a value (see deltafin plan --help)", a);
    const char *val = argv[++i];
    if (!strcmp(a, "--mem")) {
      if (df_plan_parse_size(val, &mem) || !mem) return df_cli_fail("--mem: '%s' is not a size like 64G", val);
    } else if (!strcmp(a, "--drives")) drives = val;
    else if (!strcmp(a, "--model")) model = val;
    else if (!strcmp(a, "--compute")) compute = val;
    else if (!strcmp(a, "--spine-from")) {
      if (strcmp(val, "pack") && strcmp(val, "shards"))
        return df_cli_fail("--spine-from: '%s' is not pack or shards", val);
      spine_from = val;
    } else if (!strcmp(a, "--reuse-mb")) {
      if (df_cli_int(a, val, 0, 1 << 30, &v)) return 1;
      reuse = (uint64_t)v << 20;
    }
    else if (!strcmp(a, "--spine")) {
      if (!strcmp(val, "bf16")) int8 = 0;
      else if (!strcmp(val, "int8")) int8 = 1;
      else return df_cli_fail("--spine: '%s' is not bf16 or int8", val);
    } else if (!strcmp(a, "--ctx")) {
      if (df_cli_int(a, val, 1, 1 << 30, &v)) return 1;
      ctx = (int)v;
    } else if (!strcmp(a, "--expert-hit")) {
      char *end;
      hit = strtod(val, &end);
      if (*end || !(hit >= 0 && hit <= 1)) return df_cli_fail("--expert-hit: '%s' is not in [0, 1]", val);
    } else {
      return df_cli_fail("plan: unknown option '%s' (see deltafin plan --help)", a);
    }
  }
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
  double comp_s = -1, parts[DF_K3_T_N];
  int have_comp = 0;
  if (compute) {
    char *buf;
    size_t len;
    if (df_cli_read_input(compute, &buf, &len)) {
      rc = 1;
      goto out;
    }
    json_error_t je;
    json_t *j = json_loadb(buf, len, 0, &je);
    free(buf);
    if (!j) {
      rc = df_cli_fail("--compute %s: invalid JSON at line %d column %d: %s (use `deltafin run --json` output)",
                       compute, je.line, je.column, je.text);
      goto out;
    }
    json_t *dc = j ? json_object_get(json_object_get(j, "stats"), "decode_compute") : NULL;
    if (!dc) dc = j ? json_object_get(j, "decode_compute") : NULL;
    if (!dc) {
      json_decref(j);
      rc = df_cli_fail("--compute %s: no stats.decode_compute (use `deltafin run --json` output)", compute);
      goto out;
    }
    have_comp = 1;
    for (int k = 0; k < DF_K3_T_N; k++) {
      parts[k] = part_ms(dc, df_k3_compute_names[k]) / 1e3;
      if (parts[k] < 0) have_comp = 0;
    }
    json_decref(j);
    if (!have_comp) {
      rc = df_cli_fail("--compute %s: a part is missing (decode at least one token)", compute);
      goto out;
    }
    int ndense = cfg.first_k_dense;
    comp_s = cfg.n_kda * parts[DF_K3_T_KDA] + cfg.n_mla * parts[DF_K3_T_MLA] +
             ndense * parts[DF_K3_T_DENSE] +
             nmoe * (parts[DF_K3_T_MOE_TRUNK] + cfg.top_k * parts[DF_K3_T_EXPERTS]) +
             parts[DF_K3_T_HEAD];
  }
  if (as_json) {
    char *pj = df_plan_json(&p);
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(what));
    json_object_set_new(o, "spine", json_string(int8 ? "int8" : "bf16"));
    json_object_set_new(o, "memory_source", json_string(memsrc));
    json_object_set_new(o, "plan", json_loads(pj, 0, NULL));
    free(pj);
    char *sj = df_plan_state_json(&cfg, 0);
    json_t *sv = json_loads(sj, 0, NULL);
    free(sj);
    if (sv) json_object_set_new(o, "sequence_state", sv);
    json_t *pr = json_object();
    json_object_set_new(pr, "label", json_string("PROJECTION"));
    json_object_set_new(pr, "drives", json_integer(ndrives));
    json_object_set_new(pr, "drive_bytes_per_s", json_real(bw));
    json_object_set_new(pr, "spine_source", json_string(spine_from));
    json_object_set_new(pr, "spine_balanced", json_boolean(balanced));
    json_object_set_new(pr, "expert_hit", json_real(hit));
    json_object_set_new(pr, "spine_bytes_per_token", json_real(spine_b));
    json_object_set_new(pr, "expert_bytes_per_token", json_real(exp_b));
    json_object_set_new(pr, "read_s_per_token", json_real(io_s));
    json_object_set_new(pr, "compute_s_per_token", have_comp ? json_real(comp_s) : json_null());
    json_object_set_new(pr, "s_per_token_overlapped",
                        have_comp ? json_real(comp_s > io_s ? comp_s : io_s) : json_null());
    json_object_set_new(pr, "s_per_token_serial", have_comp ? json_real(comp_s + io_s) : json_null());
    json_object_set_new(o, "projection", pr);
    char *t = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    puts(t);
    free(t);
    json_decref(o);
  } else {
    printf("model    %s, %s spine\n", what, int8 ? "int8" : "bf16");
    char *t = df_plan_text(&p);
    fputs(t, stdout);
    free(t);
    t = df_plan_state_text(&cfg, 0);
    fputs(t, stdout);
    free(t);
    printf("PROJECTION (not a measurement) of one decode token on %d drive%s, %.1f GB/s together:\n",
           ndrives, ndrives == 1 ? "" : "s", bw / 1e9);
    printf("  spine streamed   %8.2f GB (non-resident layers, one embedding row), %s\n", spine_b / 1e9,
           !strcmp(spine_from, "pack")
               ? (ndrives > 1 ? "from the pack's spine section, read balanced across the drives"
                              : "from the pack's spine section")
               : ndrives > 1 ? "from the checkpoint shards, all on one drive (not balanced: pack "
                               "--spine spreads it)"
                             : "from the checkpoint shards");
    printf("  routed experts   %8.2f GB (%d MoE layers x top-%d x %.1f MB, %.1f%% from the RAM cache)\n",
           exp_b / 1e9, nmoe, cfg.top_k, lay.total / 1e6, 100 * hit);
    if (balanced)
      printf("  reading          %8.2f s at %.1f GB/s\n", io_s, bw / 1e9);
    else
      printf("  reading          %8.2f s (the spine's drive at %.1f GB/s reads the spine and its share "
             "of the experts)\n", io_s, bw / ndrives / 1e9);
    if (have_comp) {
      printf("  compute          %8.2f s (%d KDA x %.1f ms, %d MLA x %.1f ms, %d dense FFN x %.1f ms,\n"
             "                              %d MoE trunks x %.1f ms + %d x %d experts x %.2f ms, head %.1f ms;\n"
             "                              measured by --compute %s)\n",
             comp_s, cfg.n_kda, 1e3 * parts[DF_K3_T_KDA], cfg.n_mla, 1e3 * parts[DF_K3_T_MLA],
             cfg.first_k_dense, 1e3 * parts[DF_K3_T_DENSE], nmoe, 1e3 * parts[DF_K3_T_MOE_TRUNK], nmoe,
             cfg.top_k, 1e3 * parts[DF_K3_T_EXPERTS], 1e3 * parts[DF_K3_T_HEAD], compute);
      printf("  per token        %8.2f s if reads fully overlap compute, %.2f s if they never do\n",
             comp_s > io_s ? comp_s : io_s, comp_s + io_s);
    } else {
      printf("  compute          not given (--compute FILE from `deltafin run --json` on k3-trunk)\n");
    }
  }
  rc = 0;
out:
  df_plan_free(&p);
  df_model_free(m);
  if (set_open) df_st_set_close(&set);
  return rc;
}

/* deltafin inspect: a checkpoint as the engine understands it: the config,
 * tensor counts and bytes by kind, what one decode token reads, and every
 * problem found against the K3 roster. */
#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "cli/cli.h"
#include "cli/opt_table.h"
#include "format/config.h"
#include "format/roster.h"
#include "format/safetensors.h"
#include "cli/inspect_plan.h"
#include "plan/plan.h"
#include "store/store.h"

void df_cmd_inspect_help(void) {
  printf(
      "usage: deltafin inspect --model DIR [--json] [--full-scan] [--mem-limit SIZE] [--progress]\n"
      "\n"
      "Shows DIR as the engine understands it: config.json, tensor counts and\n"
      "bytes (spine bf16/f32, the row-int8 spine copy in DIR/spine-int8/ if\n"
      "present, routed experts, ignored vision tensors), the bytes one decode\n"
      "token reads when nothing is cached, and problems: tensors missing from or\n"
      "unexpected in the K3 roster for this config, wrong shapes or dtypes, expert\n"
      "records that are not contiguous, and (with --full-scan) E8M0 scale bytes\n"
      "of 255. A DIR holding only config.json shows the config and reports the\n"
      "missing weights.\n"
      "\n"
      "options:\n"
      "  --model DIR   checkpoint directory (config.json + safetensors)\n"
      "  --json        one JSON object on stdout instead of text\n"
      "  --mem-limit SIZE  plan memory for SIZE instead of this machine's (the\n"
      "                memory plan, bf16 spine, is printed last)\n"
      "  --full-scan   also read every expert scale byte (on the full K3 release\n"
      "                that is 85 GB, so it is not the default)\n"
      "  --progress    report the scan's progress on stderr (the default when\n"
      "                stderr is a terminal)\n"
      "  --quick       the default (headers, roster and layout only); kept for\n"
      "                scripts written before --full-scan\n"
      "\n"
      "exit status: 0 no problems, 1 fatal error (one line on stderr),\n"
      "             3 problems found (listed on stdout)\n");
}

typedef struct tally {
  long tensors;
  uint64_t bytes;
} tally;

typedef struct report {
  json_t *plan_json; /* the memory plan (inspect_plan.c), NULL = none */
  char *plan_text;
  const char *dir;
  df_config cfg;
  df_st_set set;
  uint64_t file_bytes;
  tally spine, spine_dt[DF_DT_COUNT], experts, ignored, other;
  long expert_records; /* tensors named ...experts.E.w1.weight_packed */
  int have_int8;
  long int8_files;
  tally int8;
  df_expert_layout lay;
  long moe_layers, expected_records;
  uint64_t embed_bytes, embed_row_bytes;
  uint64_t tok_spine, tok_experts;
  df_roster_report roster;
  int scales_scanned;
  int no_weights; /* config.json only: no index, no model.safetensors */
  char **extra; /* problems found outside the roster check */
  int n_extra;
} report;

static void add_extra(report *r, const char *msg) {
  r->extra = df_xrealloc(r->extra, (size_t)(r->n_extra + 1) * sizeof *r->extra);
  r->extra[r->n_extra++] = df_xstrdup(msg);
}

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

/* DIR/spine-int8/: a future row-int8 copy of the spine; only counted here. */
static void scan_int8(report *r) {
  char *d = df_path_join(r->dir, "spine-int8");
  struct stat st;
  if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode)) {
    free(d);
    return;
  }
  r->have_int8 = 1;
  DIR *dh = opendir(d);
  if (!dh) {
    char msg[600];
    snprintf(msg, sizeof msg, "%.500s: cannot be read", d);
    add_extra(r, msg);
    free(d);
    return;
  }
  struct dirent *de;
  while ((de = readdir(dh))) {
    if (!ends_with(de->d_name, ".safetensors")) continue;
    char *p = df_path_join(d, de->d_name);
    df_st_file f;
    df_err e;
    if (df_st_open(&f, p, &e) != 0) {
      add_extra(r, e.msg);
    } else {
      r->int8_files++;
      for (int i = 0; i < f.ntensors; i++) {
        r->int8.tensors++;
        r->int8.bytes += f.tensors[i].nbytes;
      }
      df_st_close(&f);
    }
    free(p);
  }
  closedir(dh);
  free(d);
}

static void tally_set(report *r) {
  for (int i = 0; i < r->set.nfiles; i++) r->file_bytes += r->set.files[i].size;
  for (int i = 0; i < r->set.ntensors; i++) {
    const df_tensor *t = r->set.all[i];
    tally *k;
    switch (df_roster_classify(t->name)) {
      case DF_TC_SPINE:
        k = &r->spine;
        r->spine_dt[t->dtype].tensors++;
        r->spine_dt[t->dtype].bytes += t->nbytes;
        break;
      case DF_TC_EXPERT: {
        k = &r->experts;
        int l, x, p;
        if (df_roster_parse_expert(t->name, &l, &x, &p) == 0 && p == 0) r->expert_records++;
        break;
      }
      case DF_TC_IGNORED: k = &r->ignored; break;
      default: k = &r->other; break;
    }
    k->tensors++;
    k->bytes += t->nbytes;
  }
  const df_tensor *emb = df_st_set_find(&r->set, "language_model.model.embed_tokens.weight");
  if (emb && emb->ndim == 2 && emb->shape[0] > 0) {
    r->embed_bytes = emb->nbytes;
    r->embed_row_bytes = emb->nbytes / (uint64_t)emb->shape[0];
  }
  /* Decode reads every spine tensor once per token except the embedding
   * table, of which it reads one row. */
  r->tok_spine = r->spine.bytes - r->embed_bytes + r->embed_row_bytes;
  df_expert_layout_of(&r->cfg, &r->lay);
  r->moe_layers = r->cfg.n_layers - r->cfg.first_k_dense;
  r->expected_records = r->moe_layers * r->cfg.n_experts;
  r->tok_experts = (uint64_t)r->cfg.top_k * (uint64_t)r->moe_layers * r->lay.total;
}

static const char *human(uint64_t b, char *buf, size_t n) {
  const char *u[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1000 && i < 5) {
    v /= 1000;
    i++;
  }
  snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", v, u[i]);
  return buf;
}

static long n_problems(const report *r) { return r->roster.n_problems + r->n_extra; }

static void print_text(const report *r) {
  char h1[32], h2[32], h3[32];
  printf("model             %s\n", r->dir);
  df_config_print(&r->cfg, stdout);
  if (r->no_weights) {
    printf("\ncheckpoint        no weights (neither model.safetensors.index.json nor "
           "model.safetensors)\n");
    printf("\nproblems          %d\n", r->n_extra);
    for (int i = 0; i < r->n_extra; i++) printf("  %s\n", r->extra[i]);
    return;
  }
  printf("\ncheckpoint        %d safetensors file%s, %s\n", r->set.nfiles,
         r->set.nfiles == 1 ? "" : "s", human(r->file_bytes, h1, sizeof h1));
  printf("spine             %ld tensors, %s", r->spine.tensors, human(r->spine.bytes, h1, sizeof h1));
  const char *sep = " (";
  for (int d = 0; d < DF_DT_COUNT; d++)
    if (r->spine_dt[d].tensors) {
      printf("%s%s: %ld, %s", sep, df_dtype_name((df_dtype)d), r->spine_dt[d].tensors,
             human(r->spine_dt[d].bytes, h2, sizeof h2));
      sep = "; ";
    }
  printf("%s\n", r->spine.tensors ? ")" : "");
  if (r->have_int8)
    printf("spine int8        %ld files, %ld tensors, %s\n", r->int8_files, r->int8.tensors,
           human(r->int8.bytes, h1, sizeof h1));
  else
    printf("spine int8        none (no spine-int8/)\n");
  printf("routed experts    %ld tensors, %s; %ld of %ld expert records, %" PRIu64 " bytes each\n",
         r->experts.tensors, human(r->experts.bytes, h1, sizeof h1), r->expert_records,
         r->expected_records, r->lay.total);
  printf("ignored           %ld tensors (vision_tower.*, mm_projector.*), %s\n",
         r->ignored.tensors, human(r->ignored.bytes, h1, sizeof h1));
  if (r->set.nskipped)
    printf("absent            %d vision-only shard%s (not needed: the engine runs the text model)\n",
           r->set.nskipped, r->set.nskipped == 1 ? "" : "s");
  if (r->other.tensors) printf("other             %ld tensors, %s\n", r->other.tensors,
                               human(r->other.bytes, h1, sizeof h1));
  printf("\none decode token reads (nothing cached):\n");
  printf("  spine           %s (every spine tensor; one %" PRIu64 "-byte embedding row)\n",
         human(r->tok_spine, h1, sizeof h1), r->embed_row_bytes);
  printf("  experts         %s (top %d x %ld MoE layers = %ld records x %" PRIu64 " bytes)\n",
         human(r->tok_experts, h2, sizeof h2), r->cfg.top_k, r->moe_layers,
         (long)r->cfg.top_k * r->moe_layers, r->lay.total);
  printf("  total           %s\n", human(r->tok_spine + r->tok_experts, h3, sizeof h3));

  long np = n_problems(r);
  if (!np) {
    printf("\nproblems          none (%ld roster tensors checked%s)\n", r->roster.n_expected,
           r->scales_scanned ? ", every expert scale read"
                             : "; expert scales not read: --full-scan reads them");
    return;
  }
  const df_roster_report *q = &r->roster;
  printf("\nproblems          %ld (missing %ld, wrong dtype %ld, wrong shape %ld, not contiguous "
         "%ld, unexpected %ld, bad scales %ld, other %d)\n",
         np, q->n_missing, q->n_bad_dtype, q->n_bad_shape, q->n_bad_layout, q->n_unexpected,
         q->n_bad_scales, r->n_extra);
  for (int i = 0; i < r->n_extra; i++) printf("  %s\n", r->extra[i]);
  for (int i = 0; i < q->n_lines; i++) printf("  %s\n", q->lines[i]);
  if (q->n_problems > q->n_lines)
    printf("  ... and %ld more\n", q->n_problems - q->n_lines);
}

static json_t *jtally(const tally *t) {
  return json_pack("{s:I, s:I}", "tensors", (json_int_t)t->tensors, "bytes", (json_int_t)t->bytes);
}

static void print_json(const report *r) {
  json_t *o = json_object();
  json_object_set_new(o, "model_dir", json_string(r->dir));
  char *cj = df_config_to_json(&r->cfg);
  json_object_set_new(o, "config", cj ? json_loads(cj, 0, NULL) : json_null());
  free(cj);
  json_object_set_new(o, "files", json_integer(r->set.nfiles));
  json_object_set_new(o, "file_bytes", json_integer((json_int_t)r->file_bytes));
  json_t *sp = jtally(&r->spine), *bd = json_object();
  for (int d = 0; d < DF_DT_COUNT; d++)
    if (r->spine_dt[d].tensors) json_object_set_new(bd, df_dtype_name((df_dtype)d), jtally(&r->spine_dt[d]));
  json_object_set_new(sp, "by_dtype", bd);
  json_object_set_new(o, "spine", sp);
  if (r->have_int8) {
    json_t *i8 = jtally(&r->int8);
    json_object_set_new(i8, "files", json_integer(r->int8_files));
    json_object_set_new(o, "spine_int8", i8);
  } else {
    json_object_set_new(o, "spine_int8", json_null());
  }
  json_t *ex = jtally(&r->experts);
  json_object_set_new(ex, "records", json_integer(r->expert_records));
  json_object_set_new(ex, "expected_records", json_integer(r->expected_records));
  json_object_set_new(ex, "record_bytes", json_integer((json_int_t)r->lay.total));
  json_object_set_new(o, "experts", ex);
  json_object_set_new(o, "ignored", jtally(&r->ignored));
  json_t *sk = json_array();
  for (int i = 0; i < r->set.nskipped; i++) json_array_append_new(sk, json_string(r->set.skipped[i]));
  json_object_set_new(o, "absent_vision_shards", sk);
  json_object_set_new(o, "other", jtally(&r->other));
  json_object_set_new(
      o, "per_token",
      json_pack("{s:I, s:I, s:I, s:I, s:I}", "spine_bytes", (json_int_t)r->tok_spine,
                "embed_row_bytes", (json_int_t)r->embed_row_bytes, "expert_records",
                (json_int_t)((long)r->cfg.top_k * r->moe_layers), "expert_bytes",
                (json_int_t)r->tok_experts, "total_bytes",
                (json_int_t)(r->tok_spine + r->tok_experts)));
  const df_roster_report *q = &r->roster;
  json_t *pr = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "count",
                         (json_int_t)n_problems(r), "roster_tensors", (json_int_t)q->n_expected,
                         "missing", (json_int_t)q->n_missing, "bad_dtype",
                         (json_int_t)q->n_bad_dtype, "bad_shape", (json_int_t)q->n_bad_shape,
                         "not_contiguous", (json_int_t)q->n_bad_layout, "unexpected",
                         (json_int_t)q->n_unexpected, "bad_scales", (json_int_t)q->n_bad_scales,
                         "other", (json_int_t)r->n_extra);
  json_t *lines = json_array();
  for (int i = 0; i < r->n_extra; i++) json_array_append_new(lines, json_string(r->extra[i]));
  for (int i = 0; i < q->n_lines; i++) json_array_append_new(lines, json_string(q->lines[i]));
  json_object_set_new(pr, "lines", lines);
  json_object_set_new(pr, "lines_truncated", json_boolean(q->n_problems > q->n_lines));
  json_object_set_new(o, "problems", pr);
  json_object_set_new(o, "scales_scanned", json_boolean(r->scales_scanned));
  if (r->plan_json) json_object_set(o, "plan", r->plan_json);
  char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
  json_decref(o);
  if (s) puts(s);
  free(s);
}

/* --full-scan progress on stderr: a line per whole percent, so a log stays
 * short and a terminal shows it moving. */
typedef struct scan_progress {
  uint64_t total;
  int shown; /* last percent printed, +1 */
} scan_progress;

static void show_progress(uint64_t done, void *ctx) {
  scan_progress *p = ctx;
  int pct = p->total ? (int)(done * 100 / p->total) : 100;
  if (pct + 1 <= p->shown) return;
  p->shown = pct + 1;
  char h1[32], h2[32];
  fprintf(stderr, "deltafin: inspect: expert scales %3d%% (%s of %s)\n", pct,
          human(done, h1, sizeof h1), human(p->total, h2, sizeof h2));
}

/* The command line, parsed by one option table (cli/opt_table.h). */
typedef struct inspect_args {
  const char *dir;
  int as_json, full, progress;
  uint64_t mem_limit; /* --mem-limit: bytes; 0 = this machine's */
} inspect_args;

#define IA(f) offsetof(inspect_args, f)
static const df_opt inspect_rows[] = {
    {"--model", "DIR", DF_OPT_STR, IA(dir), 0, 0, 0, NULL, NULL},
    {"--mem-limit", "SIZE", DF_OPT_SIZE, IA(mem_limit), 0, 0, 0, NULL, NULL},
    {"--json", NULL, DF_OPT_SWITCH, IA(as_json), 0, 0, 0, NULL, NULL},
    {"--quick", NULL, DF_OPT_CLEAR, IA(full), 0, 0, 0, NULL, NULL},
    {"--full-scan", NULL, DF_OPT_SWITCH, IA(full), 0, 0, 0, NULL, NULL},
    {"--progress", NULL, DF_OPT_SWITCH, IA(progress), 0, 0, 0, NULL, NULL},
};

int df_cmd_inspect(int argc, char **argv) {
  if (df_cli_wants_help(argc, argv)) {
    df_cmd_inspect_help();
    return 0;
  }
  inspect_args ia = {.progress = isatty(2)};
  for (int i = 1; i < argc; i++) {
    int r = df_opt_take(inspect_rows, sizeof inspect_rows / sizeof inspect_rows[0], &ia,
                        "inspect", argc, argv, &i);
    if (r < 0) return 1;
    if (!r)
      return df_cli_fail("inspect: unknown argument '%s' (see deltafin inspect --help)", argv[i]);
  }
  const char *dir = ia.dir;
  int as_json = ia.as_json, full = ia.full, progress = ia.progress;
  uint64_t mem_limit = ia.mem_limit;
  if (!dir) return df_cli_fail("inspect needs --model DIR");

  report *r = df_xcalloc(1, sizeof *r);
  r->dir = dir;
  df_err e;
  int rc = df_config_load_dir(&r->cfg, dir, &e);
  if (rc != 0) {
    free(r);
    return df_cli_fail("%s", e.msg);
  }
  char *ip = df_path_join(dir, DF_ST_INDEX), *sp = df_path_join(dir, DF_ST_SINGLE);
  r->no_weights = !df_file_exists(ip) && !df_file_exists(sp);
  free(ip);
  free(sp);
  if (r->no_weights) {
    /* Still worth showing: the config is what the engine would run. */
    add_extra(r, "no weights: add the safetensors shards and model.safetensors.index.json "
                 "next to config.json");
    if (as_json) print_json(r);
    else print_text(r);
    fprintf(stderr, "deltafin: inspect: %s has config.json but no weights\n", dir);
    for (int i = 0; i < r->n_extra; i++) free(r->extra[i]);
    free(r->extra);
    free(r);
    return 3;
  }
  if (df_st_set_open(&r->set, dir, &e) != 0) {
    free(r);
    return df_cli_fail("%s", e.msg);
  }
  tally_set(r);
  scan_int8(r);
  r->scales_scanned = full;
  scan_progress pg = {0};
  for (int i = 0; full && i < r->set.ntensors; i++)
    if (df_roster_classify(r->set.all[i]->name) == DF_TC_EXPERT &&
        ends_with(r->set.all[i]->name, ".weight_scale"))
      pg.total += r->set.all[i]->nbytes;
  if (df_roster_check_progress(&r->set, &r->cfg, full ? DF_ROSTER_SCAN_SCALES : 0, &r->roster,
                               full && progress ? show_progress : NULL, &pg, &e) != 0) {
    df_st_set_close(&r->set);
    free(r);
    return df_cli_fail("%s", e.msg);
  }
  r->plan_text = df_cli_inspect_plan(&r->set, &r->cfg, dir, mem_limit, &r->plan_json);
  if (as_json) print_json(r);
  else {
    print_text(r);
    fputs(r->plan_text, stdout);
  }
  free(r->plan_text);
  json_decref(r->plan_json);
  long np = n_problems(r);
  if (np) fprintf(stderr, "deltafin: inspect: %ld problem%s in %s\n", np, np == 1 ? "" : "s", dir);
  df_roster_report_free(&r->roster);
  for (int i = 0; i < r->n_extra; i++) free(r->extra[i]);
  free(r->extra);
  df_st_set_close(&r->set);
  free(r);
  return np ? 3 : 0;
}

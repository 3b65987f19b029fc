/* deltafin eval: perplexity of a model on a text file.
 *
 * The text is encoded as ordinary text (no BOS) and cut into consecutive
 * windows of --window tokens; each window is scored from a fresh session
 * (position 0, empty state), every position predicting the next token of its
 * window. The windows make the figure independent of the model's trained
 * context length and let a float64 reference (tools/train/ref_ppl.py) score
 * the same ids window by window. The log-softmax is taken in double over the
 * engine's fp32 logits. */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "cli/cli.h"
#include "cli/opt_table.h"
#include "cli/engine_opts.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

void df_cmd_eval_help(void) {
  printf(
      "usage: deltafin eval --model DIR --file PATH [options]\n"
      "\n"
      "Scores PATH ('-' = standard input) with the model: the mean negative\n"
      "log-likelihood per predicted token (nats), its perplexity, and bits per\n"
      "byte. The text is cut into windows of --window tokens, each scored from\n"
      "a fresh session.\n"
      "\n"
      "options:\n"
      "  --model DIR          model directory (config.json, shards, tiktoken.model)\n"
      "  --file PATH          text to score\n"
      "  --window N           tokens per window (default 128)\n"
      "  --max-tokens N       score only the first N tokens of the text (default 0 = all)\n"
      "  --prefill-chunk N    positions per forward batch (default 64; 0 = the whole window)\n"
      "  --ids-out FILE       write the scored ids, comma-separated, to FILE\n"
      "  --json               one JSON object instead of text\n"
      "  --progress           report progress on stderr (the default when stderr is a\n"
      "                       terminal)\n"
      "  -q, --quiet          no progress\n"
      "\n");
  df_cli_engine_help(stdout);
}

/* Scoring a long text takes minutes: a line on stderr, redrawn on a
 * terminal, at most every 0.2 s there (5 s in a log). */
typedef struct eval_progress {
  int on, tty;
  double t0, last;
} eval_progress;

static void eval_progress_show(eval_progress *p, size_t done, size_t total, int final) {
  if (!p->on) return;
  double now = df_now();
  if (!final && now - p->last < (p->tty ? 0.2 : 5.0)) return;
  p->last = now;
  double el = now - p->t0, rate = el > 0 ? (double)done / el : 0;
  double eta = rate > 0 ? (double)(total - done) / rate : 0;
  fprintf(stderr, "%seval: %zu of %zu tokens (%.1f%%, %.1f tok/s, ETA %.0fs)%s", p->tty ? "\r" : "",
          done, total, total ? 100.0 * (double)done / (double)total : 100.0, rate, eta,
          p->tty && !final ? "" : "\n");
  fflush(stderr);
}

/* FNV-1a over the greedy (argmax) prediction at every scored position: equal
 * digests mean the same ids, so runs with other threads, caches or drives
 * can be compared by one number. */
static uint64_t fnv(uint64_t h, uint32_t v) {
  for (int i = 0; i < 4; i++) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ULL;
  }
  return h;
}

static int write_ids(const char *path, const int *ids, size_t n) {
  char *tmp = df_xmalloc(strlen(path) + 5);
  sprintf(tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    free(tmp);
    return df_cli_fail("--ids-out: cannot write %s", path);
  }
  for (size_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : "", ids[i]);
  fputc('\n', f);
  int bad = ferror(f);
  bad |= fclose(f);
  if (bad || rename(tmp, path)) {
    remove(tmp);
    free(tmp);
    return df_cli_fail("--ids-out: writing %s failed", path);
  }
  free(tmp);
  return 0;
}

/* The command line: the engine's table, then eval's own (cli/opt_table.h). */
typedef struct eval_args {
  const char *file, *ids_out;
  long window, max_tokens;
  int chunk, json, progress;
} eval_args;

#define EA(f) offsetof(eval_args, f)
static const df_opt eval_rows[] = {
    {"--json", NULL, DF_OPT_SWITCH, EA(json), 0, 0, 0, NULL, NULL},
    {"--progress", NULL, DF_OPT_SWITCH, EA(progress), 0, 0, 0, NULL, NULL},
    {"-q", NULL, DF_OPT_CLEAR, EA(progress), 0, 0, 0, NULL, NULL},
    {"--quiet", NULL, DF_OPT_CLEAR, EA(progress), 0, 0, 0, NULL, NULL},
    {"--file", "PATH", DF_OPT_STR, EA(file), 0, 0, 0, NULL, NULL},
    {"--ids-out", "FILE", DF_OPT_STR, EA(ids_out), 0, 0, 0, NULL, NULL},
    {"--window", "N", DF_OPT_LONG, EA(window), 2, 1 << 20, 0, NULL, NULL},
    {"--max-tokens", "N", DF_OPT_LONG, EA(max_tokens), 0, 1L << 40, 0, NULL, NULL},
    DF_OPT_PREFILL_CHUNK(DF_OPT_INT, EA(chunk), NULL),
};

/* 0, or 1 after printing why. */
static int eval_parse(eval_args *ea, df_engine_opts *eo, int argc, char **argv) {
  *ea = (eval_args){.window = 128, .chunk = 64, .progress = isatty(2)};
  df_engine_opts_default(eo);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = df_cli_engine_opt(eo, "eval", argc, argv, &i);
    if (!r) r = df_opt_take(eval_rows, sizeof eval_rows / sizeof eval_rows[0], ea, "eval", argc,
                            argv, &i);
    if (r < 0) return 1;
    if (r) continue;
    if (a[0] == '-') return df_cli_fail("eval: unknown option '%s' (see deltafin eval --help)", a);
    return df_cli_fail("eval: unexpected argument '%s' (the text goes in --file)", a);
  }
  if (!eo->model_dir) return df_cli_fail("eval needs --model DIR");
  if (!ea->file) return df_cli_fail("eval needs --file PATH (the text to score)");
  /* 0 = the whole window; a batch longer than the window is never run */
  if (ea->chunk <= 0 || ea->chunk > ea->window) ea->chunk = (int)ea->window;
  return 0;
}

/* What scoring found, for the two outputs. */
typedef struct eval_result {
  size_t n, bytes;
  long windows, scored, top1;
  double nll;
  uint64_t digest;
} eval_result;

static int eval_print(const eval_args *ea, const eval_result *r) {
  double mean = r->nll / (double)r->scored;
  double bpb = r->nll / log(2.0) / (double)(r->bytes ? r->bytes : 1);
  char dg[17];
  snprintf(dg, sizeof dg, "%016llx", (unsigned long long)r->digest);
  if (ea->json) {
    json_t *o = json_object();
    json_object_set_new(o, "file", json_string(ea->file));
    json_object_set_new(o, "tokens", json_integer((json_int_t)r->n));
    json_object_set_new(o, "bytes", json_integer((json_int_t)r->bytes));
    json_object_set_new(o, "window", json_integer(ea->window));
    json_object_set_new(o, "windows", json_integer(r->windows));
    json_object_set_new(o, "scored", json_integer(r->scored));
    json_object_set_new(o, "nll_sum", json_real(r->nll));
    json_object_set_new(o, "mean_nll", json_real(mean));
    json_object_set_new(o, "perplexity", json_real(exp(mean)));
    json_object_set_new(o, "bits_per_byte", json_real(bpb));
    json_object_set_new(o, "top1", json_real((double)r->top1 / (double)r->scored));
    json_object_set_new(o, "argmax_digest", json_string(dg));
    char *t = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (!t) return df_cli_fail("could not encode the result as JSON");
    puts(t);
    free(t);
    return 0;
  }
  printf("tokens      %zu (%zu bytes), %ld windows of %ld, %ld predictions\n", r->n, r->bytes,
         r->windows, ea->window, r->scored);
  printf("mean nll    %.6f nats/token\n", mean);
  printf("perplexity  %.4f\n", exp(mean));
  printf("bits/byte   %.4f\n", bpb);
  printf("top-1       %.2f%%\n", 100.0 * (double)r->top1 / (double)r->scored);
  printf("argmax      %s (digest of the greedy prediction at every position)\n", dg);
  return 0;
}

/* Adds one chunk's predictions (lg: cn rows of V logits for positions c0..
 * of the window starting at ids[w0], wn long) to r. */
static void eval_chunk(eval_result *r, const int *ids, size_t w0, size_t wn, size_t c0, int cn,
                       const float *lg, int V) {
  for (int j = 0; j < cn; j++) {
    size_t p = c0 + (size_t)j; /* position in the window */
    if (p + 1 >= wn) break;
    const float *row = lg + (size_t)j * (size_t)V;
    int best = 0;
    double mx = row[0];
    for (int k = 1; k < V; k++)
      if (row[k] > mx) mx = row[k], best = k;
    double se = 0;
    for (int k = 0; k < V; k++) se += exp((double)row[k] - mx);
    int next = ids[w0 + p + 1];
    r->nll += mx + log(se) - (double)row[next];
    r->scored++;
    r->top1 += best == next;
    r->digest = fnv(r->digest, (uint32_t)best);
  }
}

int df_cmd_eval(int argc, char **argv) {
  df_engine_opts eo;
  eval_args ea;
  if (eval_parse(&ea, &eo, argc, argv)) return 1;
  const char *file = ea.file, *ids_out = ea.ids_out;
  long window = ea.window, max_tokens = ea.max_tokens, chunk = ea.chunk;
  eval_progress prog = {.on = ea.progress, .tty = isatty(2)};
  char *text = NULL;
  size_t tlen = 0;
  if (df_cli_read_input(file, &text, &tlen)) return 1;
  if (eo.max_rows <= 0 || eo.max_rows < chunk) eo.max_rows = (int)chunk;
  if (eo.ctx <= 0 || eo.ctx < window) eo.ctx = (int)window;

  df_err e;
  df_engine *en;
  if (df_engine_open(&en, &eo, &e)) {
    free(text);
    return df_cli_fail("%s", e.msg);
  }
  int rc = 1;
  int *ids = NULL;
  size_t n = 0, cap = 0;
  float *lg = NULL;
  df_session *s = NULL;
  const df_tok *tok = df_engine_tok(en);
  const df_config *cfg = df_engine_config(en);
  if (!tok) {
    df_cli_fail("%s: no tokenizer (tiktoken.model): eval needs one to encode %s", eo.model_dir, file);
    goto out;
  }
  if (df_tok_encode(tok, text, tlen, &ids, &n, &cap, &e)) {
    df_cli_fail("%s: %s", file, e.msg);
    goto out;
  }
  if (max_tokens > 0 && n > (size_t)max_tokens) n = (size_t)max_tokens;
  if (n < 2) {
    df_cli_fail("%s: %zu tokens, nothing to score (need at least 2)", file, n);
    goto out;
  }
  if (ids_out && write_ids(ids_out, ids, n)) goto out;
  eval_result res = {.n = n, .digest = 0xcbf29ce484222325ULL};
  {
    size_t dl = 0; /* bytes of the scored text (for bits per byte) */
    char *dec = df_tok_decode(tok, ids, n, &dl);
    res.bytes = dec ? dl : tlen;
    free(dec);
  }
  int V = cfg->vocab;
  lg = df_xmalloc(sizeof(float) * (size_t)chunk * (size_t)V);
  s = df_session_new(en);
  prog.t0 = prog.last = df_now();
  for (size_t w0 = 0; w0 + 1 < n; w0 += (size_t)window) {
    eval_progress_show(&prog, w0, n, 0);
    size_t wn = n - w0 < (size_t)window ? n - w0 : (size_t)window;
    if (wn < 2) break;
    df_session_reset(s);
    res.windows++;
    for (size_t c0 = 0; c0 < wn; c0 += (size_t)chunk) {
      int cn = (int)(wn - c0 < (size_t)chunk ? wn - c0 : (size_t)chunk);
      if (df_session_forward(s, ids + w0 + c0, cn, NULL, lg, &e)) {
        df_cli_fail("%s", e.msg);
        goto out;
      }
      eval_chunk(&res, ids, w0, wn, c0, cn, lg, V);
    }
  }
  eval_progress_show(&prog, n, n, 1);
  if (eval_print(&ea, &res)) goto out;
  rc = 0;
out:
  free(lg);
  free(ids);
  free(text);
  df_session_free(s);
  df_engine_close(en);
  return rc;
}

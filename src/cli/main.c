#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"
#include "kernels/kdevice.h"
#include "kernels/kernels.h"
#include "store/trace.h"

static const df_cmd cmds[] = {
    {"tokenize", "encode text (or a chat) to token ids", df_cmd_tokenize, df_cmd_tokenize_help},
    {"detokenize", "decode token ids to text", df_cmd_detokenize, df_cmd_detokenize_help},
    {"template", "show the prompt text and ids a conversation renders to", df_cmd_template,
     df_cmd_template_help},
    {"inspect", "show a checkpoint as the engine understands it", df_cmd_inspect,
     df_cmd_inspect_help},
    {"make-model", "generate a K3-layout checkpoint from a seed", df_cmd_make_model,
     df_cmd_make_model_help},
    {"run", "generate text", df_cmd_run, df_cmd_run_help},
    {"chat", "a multi-turn conversation in the terminal", df_cmd_chat, df_cmd_chat_help},
    {"eval", "perplexity of a model on a text file", df_cmd_eval, df_cmd_eval_help},
    {"logits", "every position's logits (and hidden states, routes) to a safetensors file",
     df_cmd_logits, df_cmd_logits_help},
    {"convert-spine", "write the row-int8 copy of the spine", df_cmd_convert_spine,
     df_cmd_convert_spine_help},
    {"serve", "OpenAI-compatible HTTP server", df_cmd_serve, df_cmd_serve_help},
    {"pack", "lay experts out on one or more drives", df_cmd_pack, df_cmd_pack_help},
    {"doctor", "verify a packed expert store", df_cmd_doctor, df_cmd_doctor_help},
    {"bench", "measure speed against the storage ceiling", df_cmd_bench, df_cmd_bench_help},
    {"trace", "summarise a read trace (trace report FILE)", df_cmd_trace, df_cmd_trace_help},
    {"setup", "install a model from a Hugging Face endpoint", df_cmd_setup, df_cmd_setup_help},
    {"warm", "fetch the experts a recorded trace needs (stream installs)", df_cmd_warm,
     df_cmd_warm_help},
    {"record-sums", "a sha256 per expert record, to verify stream installs", df_cmd_record_sums,
     df_cmd_record_sums_help},
    {"plan", "memory plan and a projected decode token for a machine", df_cmd_plan,
     df_cmd_plan_help},
    {"draft-run", "run a Qwen3 draft checkpoint alone (greedy)", df_cmd_draft_run,
     df_cmd_draft_run_help},
    {"draft-tokenize", "encode text with a Hugging Face tokenizer.json", df_cmd_draft_tokenize,
     df_cmd_draft_tokenize_help},
};
#define NCMDS (sizeof cmds / sizeof cmds[0])

static void usage(FILE *f) {
  fprintf(f,
          "deltafin %s: runs Kimi K3-family models, streaming routed experts from SSDs\n\n"
          "usage: deltafin <command> [options]\n       deltafin <command> --help\n\n"
          "commands:\n",
          DF_VERSION);
  for (size_t i = 0; i < NCMDS; i++) fprintf(f, "  %-14s %s\n", cmds[i].name, cmds[i].summary);
  fprintf(f, "\noptions:\n  -h, --help     this text\n  --version      version and build features\n");
}

static void version(void) {
  printf("deltafin %s\n", DF_VERSION);
  /* Kernel tables are chosen at run time: list what this binary has and what this CPU runs. */
  printf("kernels: scalar");
  const char *simd[] = {"avx2", "avx512", "neon"};
  for (size_t i = 0; i < sizeof simd / sizeof simd[0]; i++)
    if (df_kern_by_name(simd[i])) printf(" %s", simd[i]);
  printf(" (selected: %s)\n", df_kern_select(0)->name);
  printf("features: io_uring+O_DIRECT expert store, pread fallback, MXFP4 experts, bf16/row-int8 spine,"
         " OpenAI-compatible server (SSE)\n");
  printf("compiler: %s\n", __VERSION__);
  if (df_kern_cuda_build()) {
    char d[320];
    int n = df_kern_cuda_devices();
    df_kern_cuda_describe(0, d, sizeof d);
    printf("cuda: %s; %d device%s%s%s\n", df_kern_cuda_build(), n, n == 1 ? "" : "s",
           n ? ", cuda:0 = " : "", n ? d : "");
  } else
    printf("cuda: not built (configure with -DDF_CUDA=ON)\n");
}

int df_cli_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("deltafin: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

int df_cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--")) break;
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
  }
  return 0;
}

int df_cli_int(const char *opt, const char *val, long lo, long hi, long *out) {
  char *end = NULL;
  if (!val || !*val) return df_cli_fail("%s needs a number", opt), -1;
  long v = strtol(val, &end, 10);
  if (*end || v < lo || v > hi)
    return df_cli_fail("%s: '%s' is not a number in [%ld, %ld]", opt, val, lo, hi), -1;
  *out = v;
  return 0;
}

int df_cli_parse_ids(const char *cmd, const char *s, int **ids, size_t *n, size_t *cap) {
  const char *p = s;
  for (;;) {
    while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (!*p) return 0;
    const char *q = p;
    long long v = 0;
    while (*q >= '0' && *q <= '9') {
      v = v * 10 + (*q - '0');
      if (v > 0x7fffffff) break;
      q++;
    }
    if (q == p || (*q && *q != ',' && *q != ' ' && *q != '\t' && *q != '\n' && *q != '\r')) {
      int l = 0;
      while (p[l] && p[l] != ',' && p[l] != ' ' && p[l] != '\n' && l < 40) l++;
      return df_cli_fail("%s: '%.*s' is not a token id", cmd, l, p);
    }
    if (*n == *cap) *ids = df_xrealloc(*ids, (*cap = *cap ? *cap * 2 : 64) * sizeof **ids);
    (*ids)[(*n)++] = (int)v;
    p = q;
  }
}

int df_cli_read_input(const char *path, char **buf, size_t *len) {
  df_err e;
  int rc = strcmp(path, "-") ? df_file_read(path, buf, len, &e)
                             : df_stream_read(stdin, "standard input", buf, len, &e);
  return rc ? df_cli_fail("%s", e.msg) : 0;
}

int main(int argc, char **argv) {
  df_trace_set_command(argc, argv);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
    if (argc > 2)
      for (size_t i = 0; i < NCMDS; i++)
        if (!strcmp(argv[2], cmds[i].name)) {
          cmds[i].help();
          return 0;
        }
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
    version();
    return 0;
  }
  for (size_t i = 0; i < NCMDS; i++) {
    if (strcmp(argv[1], cmds[i].name)) continue;
    if (df_cli_wants_help(argc - 1, argv + 1)) {
      cmds[i].help();
      return 0;
    }
    return cmds[i].run(argc - 1, argv + 1);
  }
  fprintf(stderr, "deltafin: unknown command '%s' (see deltafin --help)\n", argv[1]);
  return 2;
}

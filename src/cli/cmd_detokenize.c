/* deltafin detokenize: token ids to text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

void df_cmd_detokenize_help(void) {
  printf(
      "usage: deltafin detokenize --model DIR IDS...\n"
      "       deltafin detokenize --model DIR --file PATH\n"
      "\n"
      "Decodes token ids (separated by commas and/or spaces, in one or more\n"
      "arguments) with the model's tokenizer and writes the bytes they stand\n"
      "for to standard output, exactly: no newline is added, and special\n"
      "tokens are written as their text (\"<|open|>\").\n"
      "\n"
      "options:\n"
      "  --model DIR     model directory (DIR/tiktoken.model, DIR/tokenizer_config.json)\n"
      "  --file PATH     read the ids from PATH ('-' = standard input)\n"
      "\n"
      "advanced:\n"
      "  --ranks FILE    a tiktoken rank file instead of --model\n"
      "  --tokcfg FILE   a tokenizer_config.json for the specials (with --ranks)\n");
}

int df_cmd_detokenize(int argc, char **argv) {
  const char *model = NULL, *ranks = NULL, *tokcfg = NULL, *file = NULL;
  int *ids = NULL;
  size_t n = 0, cap = 0;
  int rc = 0, nargs = 0;
  for (int i = 1; i < argc && !rc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--model") || !strcmp(a, "--ranks") || !strcmp(a, "--tokcfg") ||
        !strcmp(a, "--file")) {
      if (i + 1 >= argc) {
        rc = df_cli_fail("%s needs a value", a);
        break;
      }
      const char **dst = !strcmp(a, "--model")   ? &model
                         : !strcmp(a, "--ranks") ? &ranks
                         : !strcmp(a, "--file")  ? &file
                                                 : &tokcfg;
      *dst = argv[++i];
    } else if (a[0] == '-' && a[1] && a[1] != '-' && !(a[1] >= '0' && a[1] <= '9')) {
      rc = df_cli_fail("detokenize: unknown option '%s' (see deltafin detokenize --help)", a);
    } else if (a[0] == '-' && a[1] == '-') {
      rc = df_cli_fail("detokenize: unknown option '%s' (see deltafin detokenize --help)", a);
    } else {
      nargs++;
      rc = df_cli_parse_ids("detokenize", a, &ids, &n, &cap);
    }
  }
  if (rc) goto out;
  if (file) {
    if (nargs) {
      rc = df_cli_fail("detokenize takes ids either as arguments or from --file, not both");
      goto out;
    }
    char *buf;
    size_t len;
    if (df_cli_read_input(file, &buf, &len)) {
      rc = 1;
      goto out;
    }
    if (strlen(buf) != len) {
      rc = df_cli_fail("%s: contains a NUL byte", file);
    } else {
      nargs = 1;
      rc = df_cli_parse_ids("detokenize", buf, &ids, &n, &cap);
    }
    free(buf);
    if (rc) goto out;
  }
  if (model && (ranks || tokcfg)) {
    rc = df_cli_fail("--model cannot be combined with --ranks or --tokcfg");
    goto out;
  }
  if (!model && !ranks) {
    rc = df_cli_fail("detokenize needs --model DIR");
    goto out;
  }
  if (!nargs) {
    rc = df_cli_fail("detokenize needs the ids to decode");
    goto out;
  }
  df_tok *t;
  df_err e;
  if (model ? df_tok_load(&t, model, &e) : df_tok_load_files(&t, ranks, tokcfg, NULL, &e)) {
    rc = df_cli_fail("%s", e.msg);
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    size_t l;
    if (!df_tok_piece(t, ids[i], &l)) {
      rc = df_cli_fail("detokenize: token id %d is not in the vocabulary (0..%d)", ids[i],
                       df_tok_vocab_size(t) - 1);
      break;
    }
  }
  if (!rc) {
    size_t len;
    char *text = df_tok_decode(t, ids, n, &len);
    if (fwrite(text, 1, len, stdout) != len || fflush(stdout))
      rc = df_cli_fail("writing the text failed");
    free(text);
  }
  df_tok_free(t);
out:
  free(ids);
  return rc;
}

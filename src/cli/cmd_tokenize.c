/* deltafin tokenize: text (or one chat turn) to token ids. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

void df_cmd_tokenize_help(void) {
  printf(
      "usage: deltafin tokenize --model DIR [options] TEXT\n"
      "\n"
      "Encodes TEXT with the model's tokenizer (DIR/tiktoken.model and\n"
      "DIR/tokenizer_config.json) and prints the ids, comma-separated.\n"
      "TEXT is ordinary text: a special-token string typed in it (\"<|open|>\")\n"
      "is encoded as ordinary tokens, never as the special id.\n"
      "\n"
      "options:\n"
      "  --model DIR        model directory (tokenizer files)\n"
      "  --chat             wrap TEXT as one user message after the thinking-effort\n"
      "                     system message, and add the assistant generation prompt\n"
      "  --effort LEVEL     thinking effort for --chat: low, high, max (default max; the\n"
      "                     release refuses medium)\n"
      "  --verbose          one line per token: the id and its piece, escaped\n"
      "  --file PATH        read the text from PATH ('-' = standard input) instead of TEXT\n"
      "\n"
      "advanced (tests and other vocabularies):\n"
      "  --ranks FILE       a tiktoken rank file instead of DIR/tiktoken.model\n"
      "  --tokcfg FILE      a tokenizer_config.json for the specials (with --ranks)\n"
      "  --pattern REGEX    a PCRE2 pre-tokenizer pattern instead of K3's (with --ranks)\n"
      "  --specials         recognise special-token strings in the text (trusted text only)\n"
      "  --batch FILE       FILE is a JSON array of strings: print one line of ids per string\n");
}

/* Where the tokenizer comes from: --model DIR, or --ranks/--tokcfg/--pattern. */
typedef struct tok_src {
  const char *model, *ranks, *tokcfg, *pattern;
} tok_src;

/* Consumes argv[*i] (and its value) if it is a tokenizer-source option:
 * 1 = consumed, 0 = not ours, -1 = error (printed). */
static int tok_src_parse(tok_src *s, int argc, char **argv, int *i) {
  static const char *names[] = {"--model", "--ranks", "--tokcfg", "--pattern"};
  const char **dst[] = {&s->model, &s->ranks, &s->tokcfg, &s->pattern};
  for (int k = 0; k < 4; k++) {
    if (strcmp(argv[*i], names[k])) continue;
    if (*i + 1 >= argc) return df_cli_fail("%s needs a value", names[k]), -1;
    *dst[k] = argv[++*i];
    return 1;
  }
  return 0;
}

static int tok_src_load(const tok_src *s, df_tok **t) {
  df_err e;
  if (s->model && (s->ranks || s->tokcfg || s->pattern))
    return df_cli_fail("--model cannot be combined with --ranks, --tokcfg or --pattern");
  if (!s->model && !s->ranks) return df_cli_fail("tokenize needs --model DIR");
  int rc = s->model ? df_tok_load(t, s->model, &e)
                    : df_tok_load_files(t, s->ranks, s->tokcfg, s->pattern, &e);
  return rc ? df_cli_fail("%s", e.msg) : 0;
}

static int print_ids(const int *ids, size_t n) {
  for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
  putchar('\n');
  return 0;
}

static void print_verbose(const df_tok *t, const int *ids, size_t n) {
  for (size_t i = 0; i < n; i++) {
    size_t l;
    const uint8_t *p = df_tok_piece(t, ids[i], &l);
    char *esc = df_tok_escape_piece(p, l);
    printf("%d\t%s%s\n", ids[i], esc, df_tok_is_special(t, ids[i]) ? "\t(special)" : "");
    free(esc);
  }
}

static int encode_text(const df_tok *t, const char *text, size_t len, int specials, int **ids,
                       size_t *n, size_t *cap, df_err *e) {
  return specials ? df_tok_encode_with_specials(t, text, len, ids, n, cap, e)
                  : df_tok_encode(t, text, len, ids, n, cap, e);
}

static int run_batch(const df_tok *t, const char *path, int specials) {
  /* read the file first: a missing or unreadable file is its own error,
   * not a JSON parse error at "line -1" */
  char *buf;
  size_t len;
  if (df_cli_read_input(path, &buf, &len)) return 1;
  json_error_t je;
  json_t *arr = json_loadb(buf, len, 0, &je);
  free(buf);
  if (!arr)
    return df_cli_fail("%s: invalid JSON at line %d column %d: %s", path, je.line, je.column,
                       je.text);
  if (!json_is_array(arr)) {
    json_decref(arr);
    return df_cli_fail("%s: expected a JSON array of strings", path);
  }
  int *ids = NULL;
  size_t cap = 0, i;
  json_t *v;
  int rc = 0;
  json_array_foreach(arr, i, v) {
    if (!json_is_string(v)) {
      rc = df_cli_fail("%s: element %zu is not a string", path, i);
      break;
    }
    size_t n = 0;
    df_err e;
    if (encode_text(t, json_string_value(v), json_string_length(v), specials, &ids, &n, &cap,
                    &e)) {
      rc = df_cli_fail("%s: element %zu: %s", path, i, e.msg);
      break;
    }
    print_ids(ids, n);
  }
  free(ids);
  json_decref(arr);
  return rc;
}

int df_cmd_tokenize(int argc, char **argv) {
  tok_src src = {0};
  const char *text = NULL, *file = NULL, *batch = NULL, *effort_s = "max";
  int chat = 0, verbose = 0, specials = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = tok_src_parse(&src, argc, argv, &i);
    if (r < 0) return 1;
    if (r > 0) continue;
    if (!strcmp(a, "--chat")) {
      chat = 1;
    } else if (!strcmp(a, "--verbose")) {
      verbose = 1;
    } else if (!strcmp(a, "--specials")) {
      specials = 1;
    } else if (!strcmp(a, "--effort") || !strcmp(a, "--file") || !strcmp(a, "--batch")) {
      if (i + 1 >= argc) return df_cli_fail("%s needs a value", a);
      const char *v = argv[++i];
      if (!strcmp(a, "--effort")) effort_s = v;
      else if (!strcmp(a, "--file")) file = v;
      else batch = v;
    } else if (!strcmp(a, "--")) {
      if (i + 1 < argc) {
        if (text || i + 2 < argc) return df_cli_fail("tokenize takes one TEXT argument (quote it)");
        text = argv[++i];
      }
      break;
    } else if (a[0] == '-' && a[1]) {
      return df_cli_fail("tokenize: unknown option '%s' (see deltafin tokenize --help)", a);
    } else {
      if (text) return df_cli_fail("tokenize takes one TEXT argument (quote it)");
      text = a;
    }
  }
  if (!df_chat_effort_valid(effort_s))
    return df_cli_fail("--effort: '%s' is not one the release accepts (low, high, max)",
                       effort_s);
  if (!!text + !!file + !!batch != 1)
    return df_cli_fail("tokenize needs exactly one of TEXT, --file PATH or --batch FILE");
  if (chat && specials) return df_cli_fail("--chat and --specials cannot be combined");
  if (batch && (chat || verbose))
    return df_cli_fail("--batch cannot be combined with --chat or --verbose");

  df_tok *t;
  if (tok_src_load(&src, &t)) return 1;
  int rc = 0;
  if (batch) {
    rc = run_batch(t, batch, specials);
    df_tok_free(t);
    return rc;
  }
  char *buf = NULL;
  size_t len = 0;
  if (file) {
    if (df_cli_read_input(file, &buf, &len)) {
      df_tok_free(t);
      return 1;
    }
    text = buf;
  } else {
    len = strlen(text);
  }
  int *ids = NULL;
  size_t n = 0, cap = 0;
  df_err e;
  int erc;
  if (chat) {
    /* the release's encoder, one user message (deltafin template does whole chats) */
    df_chat_msg m = {.role = DF_ROLE_USER, .content = text, .content_len = len};
    df_chat_opts o = df_chat_opts_default();
    o.effort = effort_s;
    df_chat_prompt p;
    erc = df_chat_render(t, &m, 1, &o, &p, &e);
    if (!erc) {
      ids = p.ids, n = p.n;
      free(p.text);
    }
  } else {
    erc = encode_text(t, text, len, specials, &ids, &n, &cap, &e);
  }
  if (erc) {
    rc = df_cli_fail("%s", e.msg);
  } else if (verbose) {
    print_verbose(t, ids, n);
  } else {
    print_ids(ids, n);
  }
  if (fflush(stdout)) rc = df_cli_fail("writing the ids failed");
  free(ids);
  free(buf);
  df_tok_free(t);
  return rc;
}

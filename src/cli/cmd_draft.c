/* deltafin draft-run / draft-tokenize: the Qwen3 draft model and its
 * tokenizer on their own, for tests and for users checking a draft folder
 * before handing it to run/serve. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "base/util.h"
#include "cli/cli.h"
#include "kernels/kernels.h"
#include "qwen3/qwen3.h"
#include "tokenizer/hf_bpe.h"

void df_cmd_draft_run_help(void) {
  printf(
      "usage: deltafin draft-run --model DIR (--prompt TEXT | --prompt-ids LIST) [options]\n"
      "\n"
      "Runs a Qwen3 checkpoint folder (config.json, safetensors, tokenizer.json)\n"
      "alone: prefills the prompt and decodes greedily, printing the text.\n"
      "\n"
      "options:\n"
      "  --model DIR         the Hugging Face checkpoint folder\n"
      "  --prompt TEXT       prompt text (encoded with DIR/tokenizer.json; added\n"
      "                      tokens such as <|im_start|> are recognised)\n"
      "  --prompt-ids LIST   prompt ids, comma-separated (no tokenizer needed)\n"
      "  --max-new N         tokens to generate (default 16); stops early at eos\n"
      "                      unless --ignore-eos\n"
      "  --ignore-eos        keep going past the eos id\n"
      "  --json              print {\"prompt_ids\", \"ids\", \"text\"} instead of text\n"
      "  --threads N         threads (default 1: a small draft gains little from more)\n"
      "  --kernels NAME      scalar, avx2, avx512, neon or auto (default auto)\n"
      "  --int8              row-int8 copies of the projections and lm_head\n"
      "  --chunk K           prefill the prompt K ids per forward call (default all)\n"
      "  --dump-logits FILE  write every fed position's logits as raw little-endian\n"
      "                      float32, one vocab-sized row per position (prompt rows,\n"
      "                      then one per generated id fed back)\n");
}

void df_cmd_draft_tokenize_help(void) {
  printf(
      "usage: deltafin draft-tokenize (--model DIR | --tokenizer FILE) [options] [TEXT]\n"
      "\n"
      "Encodes TEXT with a Hugging Face tokenizer.json and prints the ids,\n"
      "comma-separated. Added tokens in the text (<|im_start|>) become their ids\n"
      "unless --no-added.\n"
      "\n"
      "options:\n"
      "  --model DIR         DIR/tokenizer.json\n"
      "  --tokenizer FILE    a tokenizer.json by path\n"
      "  --no-added          encode added-token strings as ordinary text\n"
      "  --batch FILE        FILE is a JSON array of strings: one line per string\n"
      "  --with-text         after the ids, a tab and the decoded ids as a JSON string\n"
      "  --decode LIST       print the bytes of comma-separated ids instead\n");
}

static int parse_id_list(const char *s, int **ids, size_t *n, size_t *capp) {
  size_t cap = *capp;
  *n = 0;
  for (const char *p = s; *p;) {
    while (*p == ',' || *p == ' ') p++;
    if (!*p) break;
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v > 0x7fffffff || (*end && *end != ',' && *end != ' '))
      return df_cli_fail("'%s' is not a list of token ids", s);
    if (*n == cap) *ids = df_xrealloc(*ids, (cap = cap ? cap * 2 : 64) * sizeof **ids);
    *capp = cap;
    (*ids)[(*n)++] = (int)v;
    p = end;
  }
  if (!*n) return df_cli_fail("the id list is empty");
  return 0;
}

/* The generated ids (ids[P..n)) as JSON, text or an id list. */
static void draft_print(const df_hftok *tok, const int *ids, size_t P, size_t n, int json) {
  size_t tl = 0;
  char *text = tok ? df_hftok_decode(tok, ids + P, n - P, &tl) : NULL;
  if (json) {
    json_t *o = json_object(), *a = json_array(), *b = json_array();
    for (size_t i = 0; i < P; i++) json_array_append_new(a, json_integer(ids[i]));
    for (size_t i = P; i < n; i++) json_array_append_new(b, json_integer(ids[i]));
    json_object_set_new(o, "prompt_ids", a);
    json_object_set_new(o, "ids", b);
    if (text) json_object_set_new(o, "text", json_stringn_nocheck(text, tl));
    char *js = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    printf("%s\n", js);
    free(js);
    json_decref(o);
  } else if (text) {
    fwrite(text, 1, tl, stdout);
    printf("\n");
  } else {
    for (size_t i = P; i < n; i++) printf("%s%d", i > P ? "," : "", ids[i]);
    printf("\n");
  }
  free(text);
}

int df_cmd_draft_run(int argc, char **argv) {
  const char *dir = NULL, *prompt = NULL, *pids = NULL, *kern = NULL, *dump = NULL;
  long max_new = 16, threads = 1, chunk = 0;
  int json = 0, ignore_eos = 0, int8 = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "--int8")) int8 = 1;
    else if (!strcmp(a, "--ignore-eos")) ignore_eos = 1;
    else if (i + 1 < argc && !strcmp(a, "--model")) dir = argv[++i];
    else if (i + 1 < argc && !strcmp(a, "--prompt")) prompt = argv[++i];
    else if (i + 1 < argc && !strcmp(a, "--prompt-ids")) pids = argv[++i];
    else if (i + 1 < argc && !strcmp(a, "--kernels")) kern = argv[++i];
    else if (i + 1 < argc && !strcmp(a, "--dump-logits")) dump = argv[++i];
    else if (i + 1 < argc && !strcmp(a, "--max-new")) {
      if (df_cli_int(a, argv[++i], 0, 1 << 20, &max_new)) return 1;
    } else if (i + 1 < argc && !strcmp(a, "--threads")) {
      if (df_cli_int(a, argv[++i], 1, 1024, &threads)) return 1;
    } else if (i + 1 < argc && !strcmp(a, "--chunk")) {
      if (df_cli_int(a, argv[++i], 1, 1 << 30, &chunk)) return 1;
    } else
      return df_cli_fail("draft-run: unknown option or missing value '%s' (see --help)", a);
  }
  if (!dir) return df_cli_fail("draft-run: --model DIR is required");
  if (!prompt == !pids) return df_cli_fail("draft-run: give exactly one of --prompt, --prompt-ids");
  df_err e;
  df_qwen3 *m = NULL;
  df_hftok *tok = NULL;
  if (df_qwen3_load(&m, dir, &e)) return df_cli_fail("%s", e.msg);
  if (int8) df_qwen3_quantize_int8(m);
  int *ids = NULL, rc = 1;
  size_t n = 0, cap = 0;
  char *tp = df_path_join(dir, "tokenizer.json");
  int have_tok = df_file_exists(tp);
  free(tp);
  if (have_tok && df_hftok_load(&tok, dir, &e)) {
    df_qwen3_free(m);
    return df_cli_fail("%s", e.msg);
  }
  if (prompt) {
    if (!tok) {
      df_qwen3_free(m);
      return df_cli_fail("draft-run: --prompt needs %s/tokenizer.json (or use --prompt-ids)", dir);
    }
    if (df_hftok_encode(tok, prompt, strlen(prompt), 1, &ids, &n, &cap, &e)) {
      df_cli_fail("%s", e.msg);
      goto out;
    }
    if (!n) {
      df_cli_fail("draft-run: the prompt encodes to no ids");
      goto out;
    }
  } else if (parse_id_list(pids, &ids, &n, &cap)) {
    goto out;
  }
  const df_kern *k = kern ? df_kern_by_name(kern) : df_kern_select(0);
  if (!k) {
    df_cli_fail("draft-run: kernels '%s' are not available here", kern);
    goto out;
  }
  df_pool *pool = threads == 1 ? NULL : df_pool_create((int)threads);
  df_kctx kc = {.k = k, .pool = pool};
  df_qwen3_state *s = df_qwen3_state_new(m);
  int V = df_qwen3_vocab(m), eos = df_qwen3_eos(m);
  float *last = df_xmalloc((size_t)V * sizeof *last);
  size_t P = n;
  size_t step = chunk ? (size_t)chunk : P;
  float *all = dump ? df_xmalloc(step * (size_t)V * sizeof *all) : NULL;
  FILE *df = NULL;
  char *dtmp = NULL;
  if (dump) {
    dtmp = df_xmalloc(strlen(dump) + 8);
    sprintf(dtmp, "%s.tmp", dump);
    df = fopen(dtmp, "wb");
    if (!df) {
      df_cli_fail("draft-run: cannot write %s", dtmp);
      goto done;
    }
  }
  for (size_t at = 0; at < P; at += step) {
    int T = (int)(P - at < step ? P - at : step);
    if (df_qwen3_forward(m, &kc, s, ids + at, T, last, all, &e)) {
      df_cli_fail("%s", e.msg);
      goto done;
    }
    if (df && fwrite(all, sizeof *all, (size_t)T * V, df) != (size_t)T * V) {
      df_cli_fail("draft-run: writing %s failed", dtmp);
      goto done;
    }
  }
  for (long g = 0; g < max_new; g++) {
    int id = df_argmax(last, V);
    if (n == cap) ids = df_xrealloc(ids, (cap = cap * 2 + 16) * sizeof *ids);
    ids[n++] = id;
    if ((id == eos && !ignore_eos) || g + 1 == max_new) break;
    if (df_qwen3_forward(m, &kc, s, &id, 1, last, NULL, &e)) {
      df_cli_fail("%s", e.msg);
      goto done;
    }
    if (df && fwrite(last, sizeof *last, (size_t)V, df) != (size_t)V) {
      df_cli_fail("draft-run: writing %s failed", dtmp);
      goto done;
    }
  }
  if (df) {
    int bad = fflush(df) != 0;
    bad |= fclose(df) != 0;
    df = NULL;
    if (bad || rename(dtmp, dump)) {
      df_cli_fail("draft-run: writing %s failed", dump);
      goto done;
    }
  }
  draft_print(tok, ids, P, n, json);
  rc = 0;
done:
  if (df) {
    fclose(df);
    remove(dtmp);
  }
  free(dtmp);
  free(all);
  free(last);
  df_qwen3_state_free(s);
  df_pool_destroy(pool);
out:
  free(ids);
  df_hftok_free(tok);
  df_qwen3_free(m);
  return rc;
}

static void print_ids(const df_hftok *t, const int *ids, size_t n, int with_text) {
  for (size_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
  if (with_text) {
    size_t l;
    char *s = df_hftok_decode(t, ids, n, &l);
    json_t *j = json_stringn_nocheck(s, l);
    char *js = json_dumps(j, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
    printf("\t%s", js ? js : "null");
    free(js);
    json_decref(j);
    free(s);
  }
  printf("\n");
}

int df_cmd_draft_tokenize(int argc, char **argv) {
  const char *dir = NULL, *file = NULL, *batch = NULL, *decode = NULL, *text = NULL;
  int added = 1, with_text = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--no-added")) added = 0;
    else if (!strcmp(a, "--with-text")) with_text = 1;
    else if (i + 1 < argc && !strcmp(a, "--model")) dir = argv[++i];
    else if (i + 1 < argc && !strcmp(a, "--tokenizer")) file = argv[++i];
    else if (i + 1 < argc && !strcmp(a, "--batch")) batch = argv[++i];
    else if (i + 1 < argc && !strcmp(a, "--decode")) decode = argv[++i];
    else if (a[0] == '-' && a[1] == '-')
      return df_cli_fail("draft-tokenize: unknown option or missing value '%s' (see --help)", a);
    else if (!text) text = a;
    else return df_cli_fail("draft-tokenize: one TEXT argument only");
  }
  if (!dir == !file) return df_cli_fail("draft-tokenize: give exactly one of --model, --tokenizer");
  df_err e;
  df_hftok *t;
  if ((dir ? df_hftok_load(&t, dir, &e) : df_hftok_load_file(&t, file, &e)))
    return df_cli_fail("%s", e.msg);
  int rc = 0, *ids = NULL;
  size_t n = 0, cap = 0;
  if (decode) {
    if (parse_id_list(decode, &ids, &n, &cap)) rc = 1;
    else {
      size_t l;
      char *s = df_hftok_decode(t, ids, n, &l);
      fwrite(s, 1, l, stdout);
      free(s);
    }
  } else if (batch) {
    json_error_t je;
    json_t *arr = json_load_file(batch, JSON_ALLOW_NUL, &je);
    if (!json_is_array(arr)) {
      rc = df_cli_fail("draft-tokenize: %s: not a JSON array of strings (%s)", batch, je.text);
    } else {
      size_t i;
      json_t *x;
      json_array_foreach(arr, i, x) {
        if (!json_is_string(x)) {
          rc = df_cli_fail("draft-tokenize: %s: entry %zu is not a string", batch, i);
          break;
        }
        n = 0;
        if (df_hftok_encode(t, json_string_value(x), json_string_length(x), added, &ids, &n, &cap,
                            &e)) {
          rc = df_cli_fail("entry %zu: %s", i, e.msg);
          break;
        }
        print_ids(t, ids, n, with_text);
      }
    }
    json_decref(arr);
  } else if (text) {
    if (df_hftok_encode(t, text, strlen(text), added, &ids, &n, &cap, &e))
      rc = df_cli_fail("%s", e.msg);
    else
      print_ids(t, ids, n, with_text);
  } else {
    rc = df_cli_fail("draft-tokenize: nothing to encode (TEXT, --batch or --decode)");
  }
  free(ids);
  df_hftok_free(t);
  return rc;
}

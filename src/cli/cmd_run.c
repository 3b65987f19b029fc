/* deltafin run: generate from a prompt, streaming text as it is produced. */
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sbuf.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/opt_table.h"
#include "cli/engine_opts.h"
#include "cli/gen_opts.h"
#include "engine/engine.h"
#include "engine/sample.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

void df_cmd_run_help(void) {
  printf(
      "usage: deltafin run --model DIR (--prompt TEXT | --prompt-ids 1,2,3 | --chat --messages FILE)\n"
      "                    [options]\n"
      "\n"
      "Runs the exact forward pass and decodes greedily (the default), streaming\n"
      "the text to stdout. Plain prompts are continued as they are (no BOS) until\n"
      "--max-new or a --stop id; --chat wraps the prompt as a user message and\n"
      "stops at <|end_of_msg|>.\n"
      "\n"
      "options:\n"
      "  --prompt TEXT        prompt text (needs the model's tokenizer)\n"
      "  --prompt-ids LIST    prompt as comma-separated token ids\n"
      "  --chat               chat format: thinking-effort system message, user\n"
      "                       message, assistant generation prompt\n"
      "  --messages FILE      with --chat: a whole conversation instead of --prompt: OpenAI\n"
      "                       messages JSON, or an object with \"messages\" and \"tools\" (as\n"
      "                       `deltafin template` reads and `chat /save` writes)\n"
      "  --effort LEVEL       low, high or max (default max; with --chat; the release\n"
      "                       refuses medium)\n"
      "  --no-reasoning       do not print the think channel (with --chat)\n"
      "  --parse-special      special-token spellings in a plain --prompt (\"<|open|>\")\n"
      "                       become their special ids, for a prompt rendered by the\n"
      "                       caller; without it they are ordinary text (never with --chat)\n"
      "  --stop LIST          extra stop ids, comma-separated\n"
      "  --stats              print a timing and I/O summary to stderr\n"
      "  --json               print one JSON object at the end instead of streaming\n");
  df_cli_gen_help(stdout, 256);
  printf("\n");
  df_cli_engine_help(stdout);
}

static int parse_ids(const char *opt, const char *s, int **ids, int *n) {
  int cap = 16;
  *ids = df_xmalloc(sizeof(int) * cap);
  *n = 0;
  const char *p = s;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v > 0x7fffffff) {
      free(*ids);
      return df_cli_fail("%s: '%s' is not a comma-separated list of token ids", opt, s);
    }
    if (*n == cap) *ids = df_xrealloc(*ids, sizeof(int) * (cap *= 2));
    (*ids)[(*n)++] = (int)v;
    p = end;
    while (*p == ' ') p++;
    if (*p == ',') p++;
    else if (*p) {
      free(*ids);
      return df_cli_fail("%s: '%s' is not a comma-separated list of token ids", opt, s);
    }
  }
  if (*n == 0) {
    free(*ids);
    return df_cli_fail("%s: no ids given", opt);
  }
  return 0;
}

typedef struct out_state {
  const df_tok *tok;
  int chat, json, no_reasoning, tty, dim_on;
  df_tok_stream stream;
  df_chat_split split;
  /* collected text (valid UTF-8: the stream decoders hold back partial
   * characters and flush them as U+FFFD) */
  df_sbuf text[2]; /* [0] response / plain, [1] reasoning */
} out_state;

static void collect(out_state *o, int which, const char *p, size_t n) {
  if (!n) return;
  df_sbuf_add(&o->text[which], p, n);
}

static json_t *text_json(const df_sbuf *b) { return json_stringn(b->p ? b->p : "", b->n); }

static void emit(out_state *o, int reasoning, const char *p, size_t n) {
  collect(o, reasoning, p, n);
  if (o->json || !n) return;
  if (reasoning && o->no_reasoning) return;
  if (o->tty && reasoning != o->dim_on) {
    fputs(reasoning ? "\033[2m" : "\033[0m", stdout);
    o->dim_on = reasoning;
  }
  fwrite(p, 1, n, stdout);
  fflush(stdout);
}

static int on_token(void *ud, int id) {
  out_state *o = ud;
  if (!o->tok) return 0;
  char buf[4096];
  if (o->chat) {
    df_channel ch;
    int n = df_chat_split_push(&o->split, id, buf, sizeof buf, &ch);
    if (n > 0 && (ch == DF_CH_REASONING || ch == DF_CH_RESPONSE))
      emit(o, ch == DF_CH_REASONING, buf, (size_t)n);
  } else {
    int n = df_tok_stream_push(&o->stream, id, buf, sizeof buf);
    if (n > 0) emit(o, 0, buf, (size_t)n);
  }
  return 0;
}

static void finish_text(out_state *o) {
  if (!o->tok) return;
  char buf[64];
  if (o->chat) {
    df_channel was = o->split.ch;
    int n = df_tok_stream_flush(&o->split.stream, buf, sizeof buf);
    if (n > 0) emit(o, was == DF_CH_REASONING, buf, (size_t)n);
  } else {
    int n = df_tok_stream_flush(&o->stream, buf, sizeof buf);
    if (n > 0) emit(o, 0, buf, (size_t)n);
  }
  if (o->dim_on) fputs("\033[0m", stdout), o->dim_on = 0;
  if (!o->json) {
    putchar('\n');
    fflush(stdout);
  }
}

static json_t *ids_json(const int *ids, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
  return a;
}

static const char *finish_name(df_finish f) {
  return f == DF_FINISH_STOP ? "stop" : f == DF_FINISH_CANCEL ? "cancel" : "length";
}

/* What speculation did (all zero without a draft). */
static json_t *spec_json(const df_engine *en, const df_gen_stats *st) {
  int kmax;
  const char *src = df_engine_draft(en, &kmax);
  json_t *o = json_object();
  /* the source that ran (--draft auto: dspark for a chat prompt, else ngram) */
  json_object_set_new(o, "draft", json_string(st->draft_src ? st->draft_src : src));
  json_object_set_new(o, "auto", json_boolean(!strcmp(src, "auto")));
  json_object_set_new(o, "draft_max", json_integer(kmax));
  json_object_set_new(o, "k_final", json_integer(st->draft_k));
  json_object_set_new(o, "verify_blocks", json_integer(st->n_verify));
  json_object_set_new(o, "drafted", json_integer(st->n_drafted));
  json_object_set_new(o, "accepted", json_integer(st->n_accepted));
  json_object_set_new(o, "acceptance",
                      st->n_drafted ? json_real((double)st->n_accepted / st->n_drafted) : json_null());
  json_object_set_new(o, "rollbacks", json_integer(st->n_rollback));
  json_object_set_new(o, "decode_passes", json_integer(st->n_passes));
  json_object_set_new(o, "k_changes", json_integer(st->draft_changes));
  json_object_set_new(o, "switched_off", json_integer(st->draft_offs));
  /* block_lengths[k-1]: blocks of k drafts; accepted_at[j]: drafts accepted
   * at position j; confidence_mean[j]: the draft's own estimate there (null
   * for sources without one) */
  json_t *bl = json_array(), *aa = json_array(), *cm = json_array();
  int top = 0;
  for (int k = 1; k <= DF_DRAFT_MAX; k++)
    if (st->block_len[k]) top = k;
  for (int k = 1; k <= top; k++) {
    json_array_append_new(bl, json_integer(st->block_len[k]));
    json_array_append_new(aa, json_integer(st->acc_at[k - 1]));
    json_array_append_new(cm, st->conf_n[k - 1] ? json_real(st->conf_sum[k - 1] / st->conf_n[k - 1])
                                                : json_null());
  }
  json_object_set_new(o, "block_lengths", bl);
  json_object_set_new(o, "accepted_at", aa);
  json_object_set_new(o, "confidence_mean", cm);
  return o;
}

static void spec_text(const df_engine *en, const df_gen_stats *st) {
  int kmax;
  const char *src = df_engine_draft(en, &kmax);
  if (!strcmp(src, "off")) return;
  fprintf(stderr,
          "draft    %s%s, K %d (at the end %d): %d blocks, %d of %d drafts accepted (%.0f%%), "
          "%d rollbacks, %d decode passes for %d tokens%s\n",
          st->draft_src ? st->draft_src : "none", !strcmp(src, "auto") ? " (auto)" : "", kmax, st->draft_k, st->n_verify, st->n_accepted, st->n_drafted,
          st->n_drafted ? 100.0 * st->n_accepted / st->n_drafted : 0.0, st->n_rollback,
          st->n_passes, st->n_gen, st->draft_offs ? "; switched off when it did not pay" : "");
  int top = 0;
  for (int k = 1; k <= DF_DRAFT_MAX; k++)
    if (st->block_len[k]) top = k;
  if (!top) return;
  fprintf(stderr, "draft    blocks by length:");
  for (int k = 1; k <= top; k++) fprintf(stderr, " %d", st->block_len[k]);
  fprintf(stderr, "; accepted by position:");
  for (int k = 1; k <= top; k++) fprintf(stderr, " %d", st->acc_at[k - 1]);
  if (st->conf_n[0]) {
    fprintf(stderr, "; mean confidence by position:");
    for (int k = 1; k <= top && st->conf_n[k - 1]; k++)
      fprintf(stderr, " %.2f", st->conf_sum[k - 1] / st->conf_n[k - 1]);
  }
  fprintf(stderr, "\n");
}

/* The command line: the engine's and the generation options' tables, then
 * run's own (cli/opt_table.h). */
typedef struct run_args {
  const char *prompt, *prompt_ids, *messages, *effort_s, *stop_s;
  int chat, stats, json, no_reasoning, parse_special;
} run_args;

#define RA(f) offsetof(run_args, f)
static const df_opt run_rows[] = {
    {"--chat", NULL, DF_OPT_SWITCH, RA(chat), 0, 0, 0, NULL, NULL},
    {"--stats", NULL, DF_OPT_SWITCH, RA(stats), 0, 0, 0, NULL, NULL},
    {"--json", NULL, DF_OPT_SWITCH, RA(json), 0, 0, 0, NULL, NULL},
    {"--no-reasoning", NULL, DF_OPT_SWITCH, RA(no_reasoning), 0, 0, 0, NULL, NULL},
    {"--parse-special", NULL, DF_OPT_SWITCH, RA(parse_special), 0, 0, 0, NULL, NULL},
    {"--prompt", "TEXT", DF_OPT_STR, RA(prompt), 0, 0, 0, NULL, NULL},
    {"--prompt-ids", "LIST", DF_OPT_STR, RA(prompt_ids), 0, 0, 0, NULL, NULL},
    {"--messages", "FILE", DF_OPT_STR, RA(messages), 0, 0, 0, NULL, NULL},
    {"--effort", "LEVEL", DF_OPT_STR, RA(effort_s), 0, 0, 0, NULL, NULL},
    {"--stop", "LIST", DF_OPT_STR, RA(stop_s), 0, 0, 0, NULL, NULL},
};

/* Parses and checks the combination: 0, or 1 after printing why. */
static int run_parse(run_args *ra, df_engine_opts *eo, df_gen_opts *go, df_sample_opts *so,
                     int argc, char **argv) {
  *ra = (run_args){.effort_s = "max"};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = df_cli_engine_opt(eo, "run", argc, argv, &i);
    if (!r) r = df_cli_gen_opt(go, so, "run", argc, argv, &i);
    if (!r) r = df_opt_take(run_rows, sizeof run_rows / sizeof run_rows[0], ra, "run", argc, argv, &i);
    if (r < 0) return 1;
    if (r) continue;
    if (a[0] == '-' && a[1] == '-')
      return df_cli_fail("run: unknown option '%s' (see deltafin run --help)", a);
    return df_cli_fail("run: unexpected argument '%s' (the prompt goes after --prompt)", a);
  }
  if (!eo->model_dir) return df_cli_fail("run needs --model DIR");
  if (!!ra->prompt + !!ra->prompt_ids + !!ra->messages != 1)
    return df_cli_fail("run needs exactly one of --prompt TEXT, --prompt-ids LIST or --messages "
                       "FILE");
  if (ra->chat && ra->prompt_ids)
    return df_cli_fail("--chat needs --prompt TEXT or --messages FILE, not --prompt-ids");
  if (ra->messages && !ra->chat) return df_cli_fail("--messages needs --chat");
  if (ra->parse_special && (ra->chat || !ra->prompt))
    return df_cli_fail("--parse-special applies to a plain --prompt only (chat message content "
                       "is never read as special tokens)");
  if (!df_chat_effort_valid(ra->effort_s))
    return df_cli_fail("--effort: '%s' is not one the release accepts (low, high, max)",
                       ra->effort_s);
  return df_cli_gen_check(go, so);
}

/* What one run did, for the two reports. */
typedef struct run_report {
  df_engine *en;
  const df_gen_stats *st;
  const int *ids, *out;
  int nids, nout, chunk, chat;
  const out_state *os;
  uint64_t spine_read;
  double pre_tps, dec_tps;
  const char *spine;
} run_report;

/* The --json object (0, or 1 said). */
static int run_print_json(const run_report *r) {
  df_engine *en = r->en;
  const df_gen_stats *st = r->st;
  json_t *o = json_object();
  json_object_set_new(o, "prompt_ids", ids_json(r->ids, r->nids));
  json_object_set_new(o, "output_ids", ids_json(r->out, r->nout));
  if (r->os->tok && !r->chat) json_object_set_new(o, "text", text_json(&r->os->text[0]));
  else if (r->os->tok) {
    json_object_set_new(o, "text", text_json(&r->os->text[0]));
    json_object_set_new(o, "reasoning", text_json(&r->os->text[1]));
  } else
    json_object_set_new(o, "text", json_null());
  json_object_set_new(o, "finish_reason", json_string(finish_name(st->finish)));
  json_t *js = json_object();
  json_object_set_new(js, "n_prompt", json_integer(r->nids));
  json_object_set_new(js, "n_gen", json_integer(r->nout));
  json_object_set_new(js, "prefill_s", json_real(st->prefill_s));
  json_object_set_new(js, "decode_s", json_real(st->decode_s));
  json_object_set_new(js, "prefill_tok_s", json_real(r->pre_tps));
  json_object_set_new(js, "decode_tok_s", json_real(r->dec_tps));
  json_object_set_new(js, "spine", json_string(r->spine));
  json_object_set_new(js, "kernels", json_string(df_engine_kernels(en)));
  json_object_set_new(js, "threads", json_integer(df_engine_threads(en)));
  json_object_set_new(js, "spine_bytes_per_token", json_integer((json_int_t)st->spine_bytes_per_token));
  json_object_set_new(js, "spine_bytes_read", json_integer((json_int_t)r->spine_read));
  json_object_set_new(js, "expert_bytes_read", json_integer((json_int_t)st->expert_bytes_read));
  json_object_set_new(js, "weight_bytes_read",
                      json_integer((json_int_t)(r->spine_read + st->expert_bytes_read)));
  char *ej = df_engine_stats_json(en);
  json_t *ev = ej ? json_loads(ej, 0, NULL) : NULL;
  free(ej);
  json_t *store = ev ? json_object_get(ev, "store") : NULL;
  json_object_set(js, "store", store ? store : json_null());
  json_t *dc = ev ? json_object_get(ev, "decode_compute") : NULL;
  json_object_set(js, "decode_compute", dc ? dc : json_null());
  json_t *pc = ev ? json_object_get(ev, "prefill_compute") : NULL;
  json_object_set(js, "prefill_compute", pc ? pc : json_null());
  json_t *plan = ev ? json_object_get(ev, "plan") : NULL;
  json_object_set(js, "plan", plan ? plan : json_null());
  json_object_set_new(js, "device_name", json_string(df_engine_device(en)));
  json_t *dev = ev ? json_object_get(ev, "device") : NULL;
  json_object_set(js, "device", dev ? dev : json_null());
  json_object_set_new(js, "spine_stream_bytes",
                      json_integer((json_int_t)df_engine_spine_stream_bytes(en, NULL)));
  json_decref(ev);
  json_object_set_new(js, "speculation", spec_json(en, st));
  json_object_set_new(o, "stats", js);
  char *txt = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!txt) return df_cli_fail("could not encode the result as JSON");
  puts(txt);
  free(txt);
  return 0;
}

/* The --stats summary on stderr. */
static void run_print_stats(const run_report *r) {
  df_engine *en = r->en;
  const df_gen_stats *st = r->st;
  fprintf(stderr,
          "prompt   %d tokens in %.3f s (%.2f tok/s, chunks of %d)\n"
          "decode   %d tokens in %.3f s (%.2f tok/s), finish: %s\n"
          "spine    %s, %.1f MB per token, %.1f MB read; kernels %s, %d threads\n"
          "experts  %.1f MB read\n",
          r->nids, st->prefill_s, r->pre_tps, r->chunk, r->nout, st->decode_s, r->dec_tps,
          finish_name(st->finish), r->spine, st->spine_bytes_per_token / 1e6, r->spine_read / 1e6,
          df_engine_kernels(en), df_engine_threads(en), st->expert_bytes_read / 1e6);
  spec_text(en, st);
  char *ct = df_engine_compute_text(en);
  fprintf(stderr, "%s", ct);
  free(ct);
  char *dt = df_engine_device_text(en);
  fprintf(stderr, "%s", dt);
  free(dt);
  char *pt = df_engine_plan_text(en);
  fprintf(stderr, "%s", pt);
  free(pt);
  char *t = df_engine_store_text(en);
  if (t) fprintf(stderr, "%s%s", t, t[0] && t[strlen(t) - 1] != '\n' ? "\n" : "");
  free(t);
}

int df_cmd_run(int argc, char **argv) {
  df_engine_opts eo;
  df_engine_opts_default(&eo);
  df_gen_opts go;
  df_gen_opts_default(&go);
  df_sample_opts so; /* the sampler's own options; go's temperature/top-p copy them */
  df_sample_opts_default(&so);
  run_args ra;
  if (run_parse(&ra, &eo, &go, &so, argc, argv)) return 1;
  const char *prompt = ra.prompt, *prompt_ids = ra.prompt_ids, *messages = ra.messages,
             *effort_s = ra.effort_s, *stop_s = ra.stop_s;
  int chat = ra.chat, stats = ra.stats, json = ra.json, no_reasoning = ra.no_reasoning,
      parse_special = ra.parse_special;
  int *ids = NULL, nids = 0, *stops = NULL, nstops = 0;
  if (prompt_ids && parse_ids("--prompt-ids", prompt_ids, &ids, &nids)) return 1;
  if (stop_s && parse_ids("--stop", stop_s, &stops, &nstops)) {
    free(ids);
    return 1;
  }

  df_err e;
  df_engine *en;
  eo.max_rows = go.prefill_chunk > 0 ? go.prefill_chunk : nids;
  if (df_engine_open(&en, &eo, &e)) {
    free(ids), free(stops);
    return df_cli_fail("%s", e.msg);
  }
  const df_config *cfg = df_engine_config(en);
  const df_tok *tok = df_engine_tok(en);
  int rc = 1;
  df_session *s = NULL;
  int *out = NULL, nout = 0;
  out_state os = {.tok = tok, .chat = chat, .json = json, .no_reasoning = no_reasoning,
                  .tty = isatty(1)};
  if (prompt || messages) {
    if (!tok) {
      df_cli_fail("%s: no tokenizer (tiktoken.model); use --prompt-ids", eo.model_dir);
      goto out;
    }
    size_t n = 0, cap = 0;
    int r;
    if (messages) {
      /* the whole conversation rendered at once: what `chat` must match
       * however much of it a kept state already covers */
      char *buf, *mj = NULL, *tj = NULL;
      size_t len;
      if (df_cli_read_input(messages, &buf, &len)) goto out;
      df_chat_opts co = df_chat_opts_default();
      co.effort = effort_s;
      /* a request object as `template` and chat's /save write it: messages and tools */
      json_t *req = json_loadb(buf, len, 0, NULL);
      if (json_is_object(req)) {
        const json_t *tools = json_object_get(req, "tools");
        mj = json_dumps(json_object_get(req, "messages"), JSON_ENCODE_ANY);
        if (json_is_array(tools)) tj = json_dumps(tools, 0);
        co.tools_json = tj;
        co.tools_len = tj ? strlen(tj) : 0;
      }
      json_decref(req);
      df_chat_prompt cp;
      r = df_chat_render_json(tok, mj ? mj : buf, mj ? strlen(mj) : len, &co, &cp, &e);
      free(buf), free(mj), free(tj);
      if (!r) {
        free(ids);
        ids = cp.ids, n = cp.n;
        free(cp.text);
      }
    } else if (chat) {
      /* the release's encoder: effort message, the user message, think opened */
      df_chat_msg m = {.role = DF_ROLE_USER, .content = prompt, .content_len = strlen(prompt)};
      df_chat_opts co = df_chat_opts_default();
      co.effort = effort_s;
      df_chat_prompt cp;
      r = df_chat_render(tok, &m, 1, &co, &cp, &e);
      if (!r) {
        free(ids);
        ids = cp.ids, n = cp.n;
        free(cp.text);
      }
    } else if (parse_special) {
      r = df_tok_encode_with_specials(tok, prompt, strlen(prompt), &ids, &n, &cap, &e);
    } else {
      r = df_tok_encode(tok, prompt, strlen(prompt), &ids, &n, &cap, &e);
    }
    if (r) {
      df_cli_fail("%s: %s", messages ? messages : "--prompt", e.msg);
      goto out;
    }
    nids = (int)n;
    if (nids == 0) {
      df_cli_fail("--prompt: the text encodes to no tokens");
      goto out;
    }
  }
  for (int i = 0; i < nids; i++)
    if (ids[i] >= cfg->vocab) {
      df_cli_fail("--prompt-ids: id %d is outside the vocabulary (vocab_size %d)", ids[i],
                  cfg->vocab);
      goto out;
    }
  if (chat) {
    int eom = df_tok_special_id(tok, "<|end_of_msg|>");
    stops = df_xrealloc(stops, sizeof(int) * (size_t)(nstops + 1));
    stops[nstops++] = eom >= 0 ? eom : cfg->eos_id;
  }
  if (tok) {
    df_tok_stream_init(&os.stream, tok);
    if (chat) df_chat_split_init(&os.split, tok);
  }
  go.stop_ids = stops;
  go.nstop = nstops;
  go.on_token = on_token;
  go.ud = &os;
  s = df_session_new(en);
  df_gen_stats st;
  if (df_generate(s, ids, nids, &go, &out, &nout, &st, &e)) {
    finish_text(&os);
    df_cli_fail("%s", e.msg);
    goto out;
  }
  finish_text(&os);
  int chunk = go.prefill_chunk > 0 ? go.prefill_chunk : nids;
  uint64_t forwards = (uint64_t)((nids + chunk - 1) / chunk) + (uint64_t)st.n_passes;
  uint64_t spine_read = st.spine_bytes_per_token * forwards;
  double pre_tps = st.prefill_s > 0 ? nids / st.prefill_s : 0;
  double dec_tps = st.decode_s > 0 ? nout / st.decode_s : 0;
  const char *spine = df_engine_spine(en) == DF_SPINE_INT8 ? "int8" : "bf16";
  run_report rep = {.en = en, .st = &st, .ids = ids, .out = out, .nids = nids, .nout = nout,
                    .chunk = chunk, .chat = chat, .os = &os, .spine_read = spine_read,
                    .pre_tps = pre_tps, .dec_tps = dec_tps, .spine = spine};
  if (json && run_print_json(&rep)) goto out;
  if (stats) run_print_stats(&rep);
  rc = 0;
out:
  free(out);
  free(ids);
  free(stops);
  df_sbuf_free(&os.text[0]);
  df_sbuf_free(&os.text[1]);
  df_session_free(s);
  df_engine_close(en);
  return rc;
}

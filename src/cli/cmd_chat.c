/* deltafin chat: a multi-turn conversation in the terminal. The conversation
 * and its kept sequence state are chat_convo.c's; this file is the terminal:
 * line editing (libedit), the reply's display, commands and Ctrl-C. */
#include <errno.h>
#include <histedit.h>
#include <jansson.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sbuf.h"
#include "base/util.h"
#include "cli/chat_convo.h"
#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "cli/gen_opts.h"
#include "engine/engine.h"
#include "tokenizer/chat.h"

#define CHAT_MAX_NEW 4096

void df_cmd_chat_help(void) {
  printf(
      "usage: deltafin chat --model DIR [--system TEXT] [--effort E] [--no-thinking] [options]\n"
      "\n"
      "A conversation in the terminal: type a message, the reply streams as it is\n"
      "generated, then the next prompt. Each turn continues from the sequence state\n"
      "the last one left, so a follow-up prefills only its new tokens. The think\n"
      "channel is folded to one line with its token count (--show-reasoning prints it\n"
      "whole, dimmed on a terminal).\n"
      "\n"
      "Input: a trailing backslash continues the message on the next line; a paste\n"
      "of several lines is one message. Ctrl-C stops a reply (the part written so\n"
      "far stays in the conversation; stopped while the prompt is read, the message\n"
      "is dropped); Ctrl-C at an empty prompt twice, Ctrl-D or /quit exits.\n"
      "Without a terminal it reads one message (or command) per line and prints\n"
      "plain text: the folded think line, then the answer. With --draft auto (an\n"
      "engine option) replies are speculated as run and serve do, the same ids.\n"
      "\n"
      "commands:\n"
      "  /reset          start over (the system prompt stays)\n"
      "  /system TEXT    set the system prompt (no TEXT: remove it)\n"
      "  /effort E       thinking effort: low, high or max\n"
      "  /save FILE      the conversation as OpenAI messages JSON (`deltafin template\n"
      "                  --messages`, the server and /load read it)\n"
      "  /load FILE      continue a saved conversation (tools included)\n"
      "  /stats          the last turn: tokens (reused, prefilled), time, bytes, cache\n"
      "  /help, /quit\n"
      "\n"
      "options:\n"
      "  --system TEXT        system prompt\n"
      "  --effort LEVEL       low, high or max (default max; the release refuses medium)\n"
      "  --no-thinking        instruct mode: the reply opens the response channel\n"
      "  --show-reasoning     print the think channel whole\n"
      "  --history FILE       line history (default ~/.deltafin_history; \"\" = none)\n");
  df_cli_gen_help(stdout, CHAT_MAX_NEW);
  printf("\n");
  df_cli_engine_help(stdout);
}

/* ------------------------------------------------------------ signals */

static volatile sig_atomic_t g_sigint, g_winch;

static void on_sigint(int sig) {
  (void)sig;
  g_sigint = 1;
}

static void on_winch(int sig) {
  (void)sig;
  g_winch = 1;
}

/* Ctrl-C only sets a flag: the engine's cancel hook polls it during a reply.
 * At the prompt it must also end the read (EINTR, so no SA_RESTART); during
 * a reply every other system call it lands in is restarted, so the engine's
 * reads and waits see nothing of it. */
static void catch_signals(int at_prompt) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = at_prompt ? 0 : SA_RESTART;
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, NULL);
  sa.sa_flags = SA_RESTART;
  sa.sa_handler = on_winch;
  sigaction(SIGWINCH, &sa, NULL);
}

/* ------------------------------------------------------------- display */

typedef struct view {
  df_chat_parser *parser;
  int tty, show;
  int in_think;  /* the reply is still in its think block */
  int nthink;    /* ids before the think block closed */
  int status;    /* a status line (prompt progress, thinking count) is on screen */
  int dim;       /* the dim attribute is on */
  int wrote;     /* text of the current section was written */
  int last_nl;   /* the last byte written was a newline */
  int close_id;
} view;

static void out(view *v, const char *p, size_t n) {
  if (!n) return;
  fwrite(p, 1, n, stdout);
  v->last_nl = p[n - 1] == '\n';
  v->wrote = 1;
}

static void set_dim(view *v, int on) {
  if (!v->tty || v->dim == on) return;
  fputs(on ? "\033[2m" : "\033[0m", stdout);
  v->dim = on;
}

static void clear_status(view *v) {
  if (!v->status) return;
  fputs("\r\033[K", stdout);
  v->status = 0;
}

/* The think block is over (or the reply ended inside it): its one line. */
static void end_think(view *v) {
  if (!v->in_think) return;
  v->in_think = 0;
  clear_status(v);
  if (v->show && v->wrote) out(v, "\n", 1);
  set_dim(v, 1);
  char line[64];
  int n = snprintf(line, sizeof line, "[thought for %d tokens]", v->nthink);
  out(v, line, (size_t)n);
  set_dim(v, 0);
  out(v, "\n", 1);
  v->wrote = 0;
}

static void on_event(const df_chat_event *ev, void *ud) {
  view *v = ud;
  switch (ev->kind) {
  case DF_CHAT_EV_REASONING:
    if (!v->show) return;
    clear_status(v);
    set_dim(v, 1);
    out(v, ev->text, ev->len);
    return;
  case DF_CHAT_EV_CONTENT:
    end_think(v);
    clear_status(v); /* instruct mode: the prompt's progress line */
    out(v, ev->text, ev->len);
    return;
  case DF_CHAT_EV_CALL_BEGIN:
    end_think(v);
    clear_status(v);
    if (v->wrote && !v->last_nl) out(v, "\n", 1);
    set_dim(v, 1);
    out(v, "[tool call] ", 12);
    set_dim(v, 0);
    out(v, ev->text, ev->len);
    out(v, " ", 1);
    return;
  case DF_CHAT_EV_CALL_ARGS: out(v, ev->text, ev->len); return;
  case DF_CHAT_EV_CALL_END: out(v, "\n", 1); v->wrote = 0; return;
  case DF_CHAT_EV_END: return;
  }
}

static int view_token(void *ud, int id) {
  view *v = ud;
  int closing = v->in_think && id == v->close_id;
  if (v->in_think && !closing) v->nthink++;
  df_chat_parser_push(v->parser, id, on_event, v); /* may flush reasoning bytes first */
  if (closing) end_think(v);
  if (v->tty && v->in_think && !v->show) {
    /* folded: a live count, so a long think is visibly progressing */
    printf("\r\033[2m[thinking: %d tokens]\033[0m\033[K", v->nthink);
    v->status = 1;
  }
  fflush(stdout);
  return 0;
}

static void view_prefill(void *ud, int done) {
  view *v = ud;
  if (!v->tty) return;
  printf("\r\033[2m[prompt: %d tokens read]\033[0m\033[K", done);
  v->status = 1;
  fflush(stdout);
}

static int view_cancel(void *ud) {
  (void)ud;
  return g_sigint != 0;
}

static void view_finish(view *v) {
  df_chat_parser_finish(v->parser, on_event, v);
  end_think(v);
  clear_status(v);
  set_dim(v, 0);
  out(v, "\n", 1);
  fflush(stdout);
}

/* --------------------------------------------------------------- input */

typedef struct input {
  int tty;
  EditLine *el;
  History *hist;
  const char *hist_path;
  int cont; /* the prompt shows a continuation */
} input;

static char *prompt_fn(EditLine *el) {
  input *in;
  el_get(el, EL_CLIENTDATA, &in);
  return in->cont ? "... " : ">>> ";
}

static void input_open(input *in, const char *hist_path) {
  if (!in->tty) return;
  /* the prompt and the line being edited belong on the terminal, also when
   * the replies go to a file */
  in->el = el_init("deltafin", stdin, isatty(1) ? stdout : stderr, stderr);
  el_set(in->el, EL_CLIENTDATA, in);
  el_set(in->el, EL_PROMPT, prompt_fn);
  el_set(in->el, EL_EDITOR, "emacs");
  /* our handler only sets a flag: libedit must not take SIGINT over */
  el_set(in->el, EL_SIGNAL, 0);
  in->hist = history_init();
  HistEvent ev;
  history(in->hist, &ev, H_SETSIZE, 1000);
  history(in->hist, &ev, H_SETUNIQUE, 1);
  el_set(in->el, EL_HIST, history, in->hist);
  el_source(in->el, NULL); /* ~/.editrc: the user's bindings (vi mode, ...) */
  in->hist_path = hist_path && *hist_path ? hist_path : NULL;
  if (in->hist_path) history(in->hist, &ev, H_LOAD, in->hist_path);
}

static void input_close(input *in) {
  if (!in->el) return;
  el_end(in->el);
  history_end(in->hist);
}

static void input_remember(input *in, const char *msg) {
  if (!in->hist || !*msg) return;
  HistEvent ev;
  history(in->hist, &ev, H_ENTER, msg);
  if (in->hist_path) history(in->hist, &ev, H_SAVE, in->hist_path);
}

/* A paste arrives faster than anyone types: more input already waiting
 * right after a line means the line was one of several pasted at once. */
static int input_pending(void) {
  struct pollfd p = {.fd = 0, .events = POLLIN};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

typedef enum { IN_LINE, IN_EOF, IN_INTERRUPT, IN_INTERRUPT_EMPTY } in_kind;

/* One physical line into *line (without its newline). */
static in_kind read_line(input *in, df_sbuf *line) {
  line->n = 0;
  if (!in->tty) {
    char *p = NULL;
    size_t cap = 0;
    errno = 0;
    ssize_t n = getline(&p, &cap, stdin);
    if (n < 0) {
      free(p);
      return g_sigint ? IN_INTERRUPT_EMPTY : IN_EOF;
    }
    if (n && p[n - 1] == '\n') n--;
    if (n && p[n - 1] == '\r') n--;
    df_sbuf_add(line, p, (size_t)n);
    free(p);
    return IN_LINE;
  }
  if (g_winch) {
    g_winch = 0;
    el_resize(in->el);
  }
  g_sigint = 0;
  int n;
  const char *s = el_gets(in->el, &n);
  if (!s) {
    if (!g_sigint) return IN_EOF;
    const LineInfo *li = el_line(in->el);
    int empty = li->lastchar == li->buffer;
    g_sigint = 0;
    return empty ? IN_INTERRUPT_EMPTY : IN_INTERRUPT;
  }
  if (n && s[n - 1] == '\n') n--;
  df_sbuf_add(line, s, (size_t)n);
  return IN_LINE;
}

/* One message: lines joined while they end in a backslash or a paste goes on. */
static in_kind read_message(input *in, df_sbuf *msg) {
  msg->n = 0;
  df_sbuf line = {0};
  in_kind k;
  in->cont = 0;
  for (;;) {
    k = read_line(in, &line);
    if (k != IN_LINE) {
      /* Ctrl-D inside a continued message sends what was typed */
      if (k == IN_EOF && msg->n) k = IN_LINE;
      break;
    }
    int more = line.n && line.p[line.n - 1] == '\\';
    if (more) line.n--;
    df_sbuf_add(msg, line.p ? line.p : "", line.n);
    if (!more && !(in->tty && input_pending())) break;
    df_sbuf_add(msg, "\n", 1);
    in->cont = 1;
  }
  in->cont = 0;
  df_sbuf_add(msg, "", 1); /* NUL, not counted */
  msg->n--;
  df_sbuf_free(&line);
  return k;
}

/* ------------------------------------------------------------ commands */

static void print_stats(df_engine *en, const df_convo_turn *t, int have) {
  if (!have) {
    printf("no turn yet\n");
    return;
  }
  static const char *const fin[] = {"stop", "length", "interrupted"};
  double pre = t->prefill_s > 0 ? t->n_prefilled / t->prefill_s : 0;
  double dec = t->decode_s > 0 ? t->n_gen / t->decode_s : 0;
  printf("tokens   prompt %d = %d reused + %d prefilled; reply %d (%d thinking), finish %s\n",
         t->n_prompt, t->n_reused, t->n_prefilled, t->n_gen, t->n_reasoning,
         t->dropped ? "dropped" : fin[t->finish]);
  printf("time     prefill %.3f s (%.1f tok/s), reply %.3f s (%.1f tok/s)\n", t->prefill_s, pre,
         t->decode_s, dec);
  printf("experts  %.1f MB read; cache %llu hits of %llu requests (%.1f%%)\n",
         t->expert_bytes / 1e6, (unsigned long long)t->cache_hits,
         (unsigned long long)t->cache_requests,
         t->cache_requests ? 100.0 * (double)t->cache_hits / (double)t->cache_requests : 0.0);
  printf("spine    %.1f MB touched, %.1f MB streamed from the drives\n", t->spine_bytes / 1e6,
         t->spine_stream_bytes / 1e6);
  int kmax;
  const char *draft = df_engine_draft(en, &kmax);
  if (strcmp(draft, "off"))
    printf("draft    %s, K %d: %d blocks, %d of %d drafts accepted, %d rollbacks, %d decode "
           "passes for %d tokens\n", draft, kmax, t->n_verify, t->n_accepted, t->n_drafted,
           t->n_rollback, t->n_passes, t->n_gen);
  printf("context  %d positions held\n", t->positions);
}

static void print_help(void) {
  printf("/reset            start over (the system prompt stays)\n"
         "/system TEXT      set the system prompt (no TEXT: remove it)\n"
         "/effort E         thinking effort: low, high or max\n"
         "/save FILE        write the conversation (OpenAI messages JSON)\n"
         "/load FILE        continue a saved conversation\n"
         "/stats            the last turn's tokens, time, bytes and cache hits\n"
         "/quit             exit (also Ctrl-D, or Ctrl-C twice at an empty prompt)\n"
         "a trailing \\ continues a message on the next line; //text sends /text\n");
}

static const char *arg_of(const char *msg, const char *cmd) {
  size_t n = strlen(cmd);
  if (strncmp(msg, cmd, n) || (msg[n] && msg[n] != ' ')) return NULL;
  msg += n;
  while (*msg == ' ') msg++;
  return msg;
}

/* 1: quit; 0: handled. Messages about the command go to stderr, what the
 * user asked to see (help, stats) to stdout. */
static int command(df_engine *en, df_convo *c, const char *msg, const df_convo_turn *last,
                   int have_last) {
  const char *a;
  df_err e;
  if (!strcmp(msg, "/quit") || !strcmp(msg, "/exit")) return 1;
  if (!strcmp(msg, "/help") || !strcmp(msg, "/?")) print_help();
  else if (!strcmp(msg, "/stats")) print_stats(en, last, have_last);
  else if (!strcmp(msg, "/reset")) {
    df_convo_clear(c);
    fprintf(stderr, "[conversation cleared]\n");
  } else if ((a = arg_of(msg, "/system"))) {
    df_convo_set_system(c, a);
    fprintf(stderr, *a ? "[system prompt set]\n" : "[system prompt removed]\n");
  } else if ((a = arg_of(msg, "/effort"))) {
    if (df_convo_set_effort(c, a, &e)) fprintf(stderr, "deltafin: /effort: %s\n", e.msg);
    else if (!df_convo_thinking(c))
      fprintf(stderr, "[effort %s; it applies only with thinking, which --no-thinking turned "
                      "off]\n", a);
    else fprintf(stderr, "[effort %s]\n", a);
  } else if ((a = arg_of(msg, "/save"))) {
    if (!*a) fprintf(stderr, "deltafin: /save needs a FILE\n");
    else if (df_convo_save(c, a, &e)) fprintf(stderr, "deltafin: /save: %s\n", e.msg);
    else fprintf(stderr, "[saved %zu messages to %s]\n", df_convo_nmsgs(c), a);
  } else if ((a = arg_of(msg, "/load"))) {
    if (!*a) fprintf(stderr, "deltafin: /load needs a FILE\n");
    else if (df_convo_load(c, a, &e)) fprintf(stderr, "deltafin: /load: %s\n", e.msg);
    else fprintf(stderr, "[loaded %zu messages from %s]\n", df_convo_nmsgs(c), a);
  } else {
    fprintf(stderr, "deltafin: unknown command '%s' (/help lists them; //text sends /text)\n",
            msg);
  }
  fflush(stdout);
  return 0;
}

/* ---------------------------------------------------------------- main */

int df_cmd_chat(int argc, char **argv) {
  df_engine_opts eo;
  df_engine_opts_default(&eo);
  df_gen_opts go;
  df_gen_opts_default(&go);
  go.max_new = CHAT_MAX_NEW;
  df_sample_opts so;
  df_sample_opts_default(&so);
  const char *system = NULL, *effort = "max", *hist = NULL;
  int thinking = 1, show = 0, r;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--no-thinking")) thinking = 0;
    else if (!strcmp(a, "--show-reasoning")) show = 1;
    else if ((r = df_cli_engine_opt(&eo, "chat", argc, argv, &i)) != 0) {
      if (r < 0) return 1;
    } else if ((r = df_cli_gen_opt(&go, &so, "chat", argc, argv, &i)) != 0) {
      if (r < 0) return 1;
    } else if (!strcmp(a, "--system") || !strcmp(a, "--effort") || !strcmp(a, "--history")) {
      if (i + 1 >= argc) return df_cli_fail("%s needs a value (see deltafin chat --help)", a);
      const char *v = argv[++i];
      if (a[2] == 's') system = v;
      else if (a[2] == 'e') effort = v;
      else hist = v;
    } else {
      return df_cli_fail("chat: unknown argument '%s' (see deltafin chat --help)", a);
    }
  }
  if (!eo.model_dir) return df_cli_fail("chat needs --model DIR");
  if (!df_chat_effort_valid(effort))
    return df_cli_fail("--effort: '%s' is not one the release accepts (low, high, max)", effort);
  if (df_cli_gen_check(&go, &so)) return 1;
  setlocale(LC_CTYPE, ""); /* libedit edits characters, not bytes */

  df_err e;
  df_engine *en;
  eo.max_rows = go.prefill_chunk;
  if (df_engine_open(&en, &eo, &e)) return df_cli_fail("%s", e.msg);
  const df_tok *tok = df_engine_tok(en);
  if (!tok) {
    df_engine_close(en);
    return df_cli_fail("%s: no tokenizer (tiktoken.model): chat needs one", eo.model_dir);
  }
  df_convo *c = df_convo_new(en, effort, thinking);
  if (system) df_convo_set_system(c, system);

  input in = {.tty = isatty(0)};
  char *hist_default = NULL;
  if (!hist && getenv("HOME")) hist = hist_default = df_path_join(getenv("HOME"), ".deltafin_history");
  input_open(&in, hist);
  view v = {.tty = isatty(1), .show = show, .close_id = df_tok_special_id(tok, "<|close|>")};
  FILE *term = isatty(1) ? stdout : stderr; /* where the prompt is */
  if (in.tty)
    fprintf(term, "deltafin chat: %s (%s). /help for commands, Ctrl-D to quit.\n",
            df_engine_model_id(en), thinking ? "thinking" : "no thinking");
  df_convo_turn last;
  memset(&last, 0, sizeof last);
  int have_last = 0, interrupted = 0, rc = 0;
  df_sbuf msg = {0};
  for (;;) {
    fflush(stdout);
    catch_signals(1);
    in_kind k = read_message(&in, &msg);
    catch_signals(0);
    if (k == IN_EOF) {
      if (in.tty) fputc('\n', term);
      break;
    }
    if (k == IN_INTERRUPT || k == IN_INTERRUPT_EMPTY) {
      if (in.tty) fputc('\n', term);
      if (!in.tty || (k == IN_INTERRUPT_EMPTY && interrupted)) break;
      if (k == IN_INTERRUPT_EMPTY)
        fprintf(stderr, "[Ctrl-C again, Ctrl-D or /quit to exit]\n");
      interrupted = k == IN_INTERRUPT_EMPTY;
      continue;
    }
    interrupted = 0;
    const char *text = msg.p ? msg.p : "";
    if (!*text) continue;
    input_remember(&in, text);
    if (text[0] == '/' && text[1] != '/') {
      if (command(en, c, text, &last, have_last)) break;
      continue;
    }
    if (text[0] == '/') text++;
    v.parser = df_chat_parser_new(tok, thinking);
    v.in_think = thinking;
    v.nthink = 0;
    v.wrote = 0;
    v.last_nl = 1;
    df_gen_opts o = go;
    o.on_token = view_token;
    o.on_prefill = view_prefill;
    o.cancel = view_cancel;
    o.ud = &v;
    g_sigint = 0;
    df_convo_turn t;
    int bad = df_convo_say(c, text, strlen(text), &o, &t, &e);
    if (!t.dropped && !bad) {
      view_finish(&v);
    } else { /* nothing to fold or end: only leave the terminal tidy */
      clear_status(&v);
      set_dim(&v, 0);
      if (!v.last_nl) out(&v, "\n", 1);
      fflush(stdout);
    }
    df_chat_parser_free(v.parser);
    v.parser = NULL;
    if (bad) {
      fprintf(stderr, "deltafin: %s (the message was not added)\n", e.msg);
      if (!in.tty) {
        rc = 1;
        break;
      }
      continue;
    }
    last = t;
    have_last = 1;
    if (t.dropped) {
      fprintf(stderr, "[interrupted while reading the prompt: the message was dropped]\n");
      interrupted = 1;
    } else if (t.finish == DF_FINISH_CANCEL) {
      fprintf(stderr, "[interrupted: the %d tokens written so far are kept]\n", t.n_gen);
      interrupted = 1;
    } else if (t.finish == DF_FINISH_LENGTH) {
      fprintf(stderr, "[the reply stopped at %d tokens (--max-new or the context)]\n", t.n_gen);
    }
    g_sigint = 0;
  }
  df_sbuf_free(&msg);
  input_close(&in);
  free(hist_default);
  df_convo_free(c);
  df_engine_close(en);
  return rc;
}

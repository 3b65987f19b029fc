/* The model's side of the K3 chat format, back to OpenAI's shape: the think
 * channel is reasoning, the response channel content, and each
 *   <|open|>call tool="NAME" index="N"<|sep|>
 *     <|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|> ...
 *     (or <|open|>json type="object"<|sep|>{...}<|close|>json<|sep|>)
 *   <|close|>call<|sep|>
 * inside <|open|>tools<|sep|> ... <|close|>tools<|sep|> one tool call whose
 * arguments become a JSON object string (a string argument is its raw text,
 * any other type is JSON text already). Token by token, for streaming. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sbuf.h"
#include "base/util.h"
#include "tokenizer/chat.h"
#include "tokenizer/pyjson.h"

enum { P_THINK, P_RESP, P_TOP, P_TOOLS, P_CALL, P_ARG, P_JSON, P_END };
enum { TAG_NONE, TAG_OPEN, TAG_CLOSE };
#define TAG_MAX 4096 /* longer is not markup: the bytes go back to the text */

struct df_chat_parser {
  const df_tok *t;
  int open, close, sep, eom;
  int mode;
  int tag;
  df_sbuf tagbuf;
  df_tok_stream stream;
  df_sbuf scratch; /* stream output */
  int ncalls;
  int call_open, call_nargs, call_json;
  int arg_string;
  df_sbuf argval; /* a non-string argument's text, checked when it closes */
  df_sbuf out;    /* event text being built */
  int ended;
};

df_chat_parser *df_chat_parser_new(const df_tok *t, int thinking) {
  df_chat_parser *p = df_xcalloc(1, sizeof *p);
  p->t = t;
  p->open = df_tok_special_id(t, "<|open|>");
  p->close = df_tok_special_id(t, "<|close|>");
  p->sep = df_tok_special_id(t, "<|sep|>");
  p->eom = df_tok_special_id(t, "<|end_of_msg|>");
  p->mode = thinking ? P_THINK : P_RESP;
  df_tok_stream_init(&p->stream, t);
  return p;
}

void df_chat_parser_free(df_chat_parser *p) {
  if (!p) return;
  free(p->tagbuf.p);
  free(p->scratch.p);
  free(p->argval.p);
  free(p->out.p);
  free(p);
}

int df_chat_parser_ended(const df_chat_parser *p) { return p->ended; }

static void emit(df_chat_event_fn fn, void *ctx, df_chat_ev_kind k, int call, const char *s,
                 size_t n) {
  if ((k == DF_CHAT_EV_REASONING || k == DF_CHAT_EV_CONTENT || k == DF_CHAT_EV_CALL_ARGS) && !n)
    return;
  df_chat_event ev = {k, call, s ? s : "", n};
  fn(&ev, ctx);
}

/* JSON string body (no quotes) of valid UTF-8. */
static void json_escape(df_sbuf *b, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char u[8];
    switch (c) {
      case '"': df_sbuf_addstr(b, "\\\""); break;
      case '\\': df_sbuf_addstr(b, "\\\\"); break;
      case '\n': df_sbuf_addstr(b, "\\n"); break;
      case '\r': df_sbuf_addstr(b, "\\r"); break;
      case '\t': df_sbuf_addstr(b, "\\t"); break;
      case '\b': df_sbuf_addstr(b, "\\b"); break;
      case '\f': df_sbuf_addstr(b, "\\f"); break;
      default:
        if (c < 0x20) {
          snprintf(u, sizeof u, "\\u%04x", c);
          df_sbuf_addstr(b, u);
        } else {
          df_sbuf_add(b, &s[i], 1);
        }
    }
  }
}

/* Complete UTF-8 of bytes (or, with flush, of what is held back). */
static const char *utf8(df_chat_parser *p, const uint8_t *s, size_t n, int flush, size_t *len) {
  size_t need = n * 3 + 32;
  if (p->scratch.cap < need) {
    p->scratch.cap = need;
    p->scratch.p = df_xrealloc(p->scratch.p, need);
  }
  int r = flush ? df_tok_stream_flush(&p->stream, p->scratch.p, p->scratch.cap)
                : df_tok_stream_push_bytes(&p->stream, s, n, p->scratch.p, p->scratch.cap);
  *len = r > 0 ? (size_t)r : 0;
  return p->scratch.p;
}

/* Text in the current mode. */
static void route(df_chat_parser *p, const char *s, size_t n, df_chat_event_fn fn, void *ctx) {
  if (!n) return;
  switch (p->mode) {
    case P_THINK: emit(fn, ctx, DF_CHAT_EV_REASONING, -1, s, n); break;
    case P_RESP: emit(fn, ctx, DF_CHAT_EV_CONTENT, -1, s, n); break;
    case P_TOP: {
      size_t k = 0;
      while (k < n && (s[k] == ' ' || s[k] == '\n' || s[k] == '\r' || s[k] == '\t')) k++;
      if (k == n) return; /* layout between blocks */
      p->mode = P_RESP;   /* text outside any block: a model that skipped the tag */
      emit(fn, ctx, DF_CHAT_EV_CONTENT, -1, s + k, n - k);
      break;
    }
    case P_ARG:
      if (p->arg_string) {
        p->out.n = 0;
        json_escape(&p->out, s, n);
        emit(fn, ctx, DF_CHAT_EV_CALL_ARGS, p->ncalls - 1, p->out.p, p->out.n);
      } else {
        df_sbuf_add(&p->argval, s, n);
      }
      break;
    case P_JSON: df_sbuf_add(&p->argval, s, n); break; /* checked whole when the element closes */
    default: break; /* between calls and arguments: nothing belongs there */
  }
}

static void text_bytes(df_chat_parser *p, const uint8_t *s, size_t n, df_chat_event_fn fn,
                       void *ctx) {
  size_t len;
  const char *u = utf8(p, s, n, 0, &len);
  route(p, u, len, fn, ctx);
}

static void flush_text(df_chat_parser *p, df_chat_event_fn fn, void *ctx) {
  size_t len;
  const char *u = utf8(p, NULL, 0, 1, &len);
  route(p, u, len, fn, ctx);
}

/* ---- tags ---- */

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Valid UTF-8 of s[0..n): each byte that starts no valid character becomes
 * U+FFFD (tag text comes from ordinary tokens, which may split characters). */
static void put_utf8(df_sbuf *b, const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int l = df_py_utf8_next((const uint8_t *)s + i, n - i, &cp);
    if (l > 0 && df_utf8_valid(s + i, (size_t)l)) {
      df_sbuf_add(b, s + i, (size_t)l);
      i += (size_t)l;
    } else {
      df_sbuf_addstr(b, "\xEF\xBF\xBD");
      i++;
    }
  }
}

/* The value of attribute `key` in the tag text, entity-decoded, valid UTF-8;
 * NULL if absent. */
static char *tag_attr(const char *t, size_t n, const char *key) {
  size_t kl = strlen(key);
  for (size_t i = 0; i + kl + 2 <= n; i++) {
    if (i == 0 || !is_ws(t[i - 1])) continue;
    if (memcmp(t + i, key, kl) || t[i + kl] != '=' || t[i + kl + 1] != '"') continue;
    size_t a = i + kl + 2, b = a;
    while (b < n && t[b] != '"') b++;
    df_sbuf raw = {0}, v = {0};
    df_sbuf_add(&raw, "", 0);
    df_sbuf_add(&v, "", 0);
    for (size_t k = a; k < b; k++) {
      if (k + 6 <= b && !memcmp(t + k, "&quot;", 6)) {
        df_sbuf_addstr(&raw, "\"");
        k += 5;
      } else if (k + 5 <= b && !memcmp(t + k, "&amp;", 5)) {
        df_sbuf_addstr(&raw, "&");
        k += 4;
      } else {
        df_sbuf_add(&raw, t + k, 1);
      }
    }
    put_utf8(&v, raw.p, raw.n);
    free(raw.p);
    return v.p;
  }
  return NULL;
}

static int tag_is(const char *t, size_t n, const char *name) {
  size_t a = 0;
  while (a < n && is_ws(t[a])) a++;
  size_t l = strlen(name);
  return n - a >= l && !memcmp(t + a, name, l) && (n - a == l || is_ws(t[a + l]));
}

static void finish_arg(df_chat_parser *p, df_chat_event_fn fn, void *ctx) {
  if (p->arg_string) {
    emit(fn, ctx, DF_CHAT_EV_CALL_ARGS, p->ncalls - 1, "\"", 1);
  } else {
    /* JSON text already, if the model wrote it well; else keep it as a string */
    json_t *v = json_loadb(p->argval.p ? p->argval.p : "", p->argval.n, JSON_DECODE_ANY, NULL);
    p->out.n = 0;
    if (v) {
      size_t a = 0, b = p->argval.n;
      while (a < b && is_ws(p->argval.p[a])) a++;
      while (b > a && is_ws(p->argval.p[b - 1])) b--;
      df_sbuf_add(&p->out, p->argval.p + a, b - a);
      json_decref(v);
    } else {
      df_sbuf_addstr(&p->out, "\"");
      json_escape(&p->out, p->argval.p ? p->argval.p : "", p->argval.n);
      df_sbuf_addstr(&p->out, "\"");
    }
    emit(fn, ctx, DF_CHAT_EV_CALL_ARGS, p->ncalls - 1, p->out.p, p->out.n);
  }
  p->argval.n = 0;
  p->mode = P_CALL;
}

/* A json element's text is the arguments if it is a JSON object; anything
 * else would hand clients an arguments string they cannot parse, so it
 * becomes {} (the text is the model's mistake, not a call's arguments). */
static void finish_json(df_chat_parser *p, df_chat_event_fn fn, void *ctx) {
  json_t *v = json_loadb(p->argval.p ? p->argval.p : "", p->argval.n, 0, NULL);
  if (json_is_object(v)) emit(fn, ctx, DF_CHAT_EV_CALL_ARGS, p->ncalls - 1, p->argval.p, p->argval.n);
  else emit(fn, ctx, DF_CHAT_EV_CALL_ARGS, p->ncalls - 1, "{}", 2);
  json_decref(v);
  p->argval.n = 0;
  p->mode = P_CALL;
}

static void finish_call(df_chat_parser *p, df_chat_event_fn fn, void *ctx) {
  if (!p->call_open) return;
  if (p->mode == P_ARG) finish_arg(p, fn, ctx);
  if (p->mode == P_JSON) finish_json(p, fn, ctx);
  int c = p->ncalls - 1;
  if (!p->call_json) emit(fn, ctx, DF_CHAT_EV_CALL_ARGS, c, p->call_nargs ? "}" : "{}",
                          p->call_nargs ? 1 : 2);
  emit(fn, ctx, DF_CHAT_EV_CALL_END, c, NULL, 0);
  p->call_open = 0;
}

static void apply_tag(df_chat_parser *p, df_chat_event_fn fn, void *ctx) {
  const char *t = p->tagbuf.p ? p->tagbuf.p : "";
  size_t n = p->tagbuf.n;
  int open = p->tag == TAG_OPEN;
  p->tag = TAG_NONE;
  if (open) {
    if (tag_is(t, n, "think") && p->mode != P_ARG && p->mode != P_JSON) {
      finish_call(p, fn, ctx);
      p->mode = P_THINK;
    } else if (tag_is(t, n, "response") && p->mode != P_ARG && p->mode != P_JSON) {
      finish_call(p, fn, ctx);
      p->mode = P_RESP;
    } else if (tag_is(t, n, "tools")) {
      finish_call(p, fn, ctx);
      p->mode = P_TOOLS;
    } else if (tag_is(t, n, "call")) {
      finish_call(p, fn, ctx);
      char *name = tag_attr(t, n, "tool");
      p->ncalls++;
      p->call_open = 1;
      p->call_nargs = 0;
      p->call_json = 0;
      emit(fn, ctx, DF_CHAT_EV_CALL_BEGIN, p->ncalls - 1, name ? name : "",
           name ? strlen(name) : 0);
      free(name);
      p->mode = P_CALL;
    } else if (tag_is(t, n, "argument") && p->mode == P_CALL && !p->call_json) {
      char *key = tag_attr(t, n, "key"), *type = tag_attr(t, n, "type");
      p->arg_string = !type || !strcmp(type, "string");
      p->out.n = 0;
      df_sbuf_addstr(&p->out, p->call_nargs ? ", \"" : "{\"");
      json_escape(&p->out, key ? key : "", key ? strlen(key) : 0);
      df_sbuf_addstr(&p->out, p->arg_string ? "\": \"" : "\": ");
      emit(fn, ctx, DF_CHAT_EV_CALL_ARGS, p->ncalls - 1, p->out.p, p->out.n);
      p->call_nargs++;
      free(key);
      free(type);
      p->argval.n = 0;
      p->mode = P_ARG;
    } else if (tag_is(t, n, "json") && p->mode == P_CALL && !p->call_nargs && !p->call_json) {
      p->call_json = 1;
      p->argval.n = 0;
      p->mode = P_JSON;
    }
    return; /* "message" and unknown names change nothing */
  }
  if (tag_is(t, n, "argument") && p->mode == P_ARG) {
    finish_arg(p, fn, ctx);
  } else if (tag_is(t, n, "json") && p->mode == P_JSON) {
    finish_json(p, fn, ctx);
  } else if (tag_is(t, n, "call")) {
    finish_call(p, fn, ctx);
    p->mode = P_TOOLS;
  } else if (tag_is(t, n, "tools") || tag_is(t, n, "message")) {
    finish_call(p, fn, ctx);
    p->mode = P_TOP;
  } else if ((tag_is(t, n, "think") || tag_is(t, n, "response")) &&
             (p->mode == P_THINK || p->mode == P_RESP)) {
    p->mode = P_TOP;
  }
}

static void end_message(df_chat_parser *p, df_chat_event_fn fn, void *ctx) {
  flush_text(p, fn, ctx);
  if (p->tag != TAG_NONE) { /* an unfinished tag: its text was not markup */
    p->tag = TAG_NONE;
  }
  finish_call(p, fn, ctx);
}

void df_chat_parser_push(df_chat_parser *p, int id, df_chat_event_fn fn, void *ctx) {
  if (p->ended) return;
  size_t len;
  const uint8_t *piece = df_tok_piece(p->t, id, &len);
  if (!piece) return; /* an unknown id decodes to nothing */
  if (df_tok_is_special(p->t, id)) {
    flush_text(p, fn, ctx);
    if (id == p->eom) {
      end_message(p, fn, ctx);
      p->ended = 1;
      p->mode = P_END;
      emit(fn, ctx, DF_CHAT_EV_END, -1, NULL, 0);
    } else if (id == p->open || id == p->close) {
      p->tag = id == p->open ? TAG_OPEN : TAG_CLOSE;
      p->tagbuf.n = 0;
    } else if (id == p->sep) {
      if (p->tag != TAG_NONE) apply_tag(p, fn, ctx);
    } else {
      p->tag = TAG_NONE; /* another special abandons a tag and writes no text */
    }
    return;
  }
  if (p->tag != TAG_NONE) {
    if (p->tagbuf.n + len <= TAG_MAX) {
      df_sbuf_add(&p->tagbuf, piece, len);
      return;
    }
    /* far too long for a tag: it was text after all (the markup special is dropped) */
    p->tag = TAG_NONE;
    df_sbuf b = {0};
    df_sbuf_add(&b, p->tagbuf.p, p->tagbuf.n);
    df_sbuf_add(&b, piece, len);
    text_bytes(p, (const uint8_t *)b.p, b.n, fn, ctx);
    free(b.p);
    return;
  }
  text_bytes(p, piece, len, fn, ctx);
}

void df_chat_parser_finish(df_chat_parser *p, df_chat_event_fn fn, void *ctx) {
  if (p->ended) return;
  end_message(p, fn, ctx);
}

/* ---- whole output ---- */

typedef struct acc {
  df_sbuf r, c;
  df_chat_parsed *out;
  df_sbuf *args; /* per call */
  size_t cap;
} acc;

static void on_event(const df_chat_event *ev, void *vctx) {
  acc *a = vctx;
  df_chat_parsed *o = a->out;
  switch (ev->kind) {
    case DF_CHAT_EV_REASONING: df_sbuf_add(&a->r, ev->text, ev->len); break;
    case DF_CHAT_EV_CONTENT: df_sbuf_add(&a->c, ev->text, ev->len); break;
    case DF_CHAT_EV_CALL_BEGIN:
      o->calls = df_xrealloc(o->calls, (o->ncalls + 1) * sizeof *o->calls);
      a->args = df_xrealloc(a->args, (o->ncalls + 1) * sizeof *a->args);
      memset(&a->args[o->ncalls], 0, sizeof *a->args);
      df_sbuf_add(&a->args[o->ncalls], "", 0);
      o->calls[o->ncalls].name = df_xmalloc(ev->len + 1);
      memcpy(o->calls[o->ncalls].name, ev->text, ev->len);
      o->calls[o->ncalls].name[ev->len] = 0;
      o->calls[o->ncalls].arguments = NULL;
      o->ncalls++;
      break;
    case DF_CHAT_EV_CALL_ARGS:
      if (ev->call >= 0 && (size_t)ev->call < o->ncalls)
        df_sbuf_add(&a->args[ev->call], ev->text, ev->len);
      break;
    case DF_CHAT_EV_CALL_END: break;
    case DF_CHAT_EV_END: o->ended = 1; break;
  }
}

void df_chat_parse_ids(const df_tok *t, const int *ids, size_t n, int thinking,
                       df_chat_parsed *out) {
  memset(out, 0, sizeof *out);
  acc a = {.out = out};
  df_sbuf_add(&a.r, "", 0);
  df_sbuf_add(&a.c, "", 0);
  df_chat_parser *p = df_chat_parser_new(t, thinking);
  for (size_t i = 0; i < n; i++) df_chat_parser_push(p, ids[i], on_event, &a);
  df_chat_parser_finish(p, on_event, &a);
  df_chat_parser_free(p);
  out->reasoning = a.r.p;
  out->reasoning_len = a.r.n;
  out->content = a.c.p;
  out->content_len = a.c.n;
  for (size_t i = 0; i < out->ncalls; i++) out->calls[i].arguments = a.args[i].p;
  free(a.args);
}

void df_chat_parsed_free(df_chat_parsed *p) {
  if (!p) return;
  free(p->reasoning);
  free(p->content);
  for (size_t i = 0; i < p->ncalls; i++) {
    free(p->calls[i].name);
    free(p->calls[i].arguments);
  }
  free(p->calls);
  memset(p, 0, sizeof *p);
}

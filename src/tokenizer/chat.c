/* The K3 chat format (kimi-k3.md section 7) and the splitter that turns the
 * generated ids back into reasoning and response text. */
#include "tokenizer/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sbuf.h"
#include "base/util.h"

static const char *const effort_names[] = {"low", "medium", "high", "max"};

int df_effort_parse(const char *s, df_effort *out) {
  for (int i = 0; i < 4; i++)
    if (s && !strcmp(s, effort_names[i])) {
      *out = (df_effort)i;
      return 0;
    }
  return -1;
}

/* ---- encoding ---- */

typedef struct enc {
  const df_tok *t;
  int **ids;
  size_t *n, *cap;
  int open, close, sep, eom;
  df_err *e;
} enc;

static void put(enc *c, int id) {
  if (*c->n == *c->cap) {
    *c->cap = *c->cap ? *c->cap * 2 : 256;
    *c->ids = df_xrealloc(*c->ids, *c->cap * sizeof **c->ids);
  }
  (*c->ids)[(*c->n)++] = id;
}

/* Ordinary text: tag names, attributes and every content. */
static int text(enc *c, const char *s, size_t len) {
  if (!len) return 0;
  return df_tok_encode(c->t, s, len, c->ids, c->n, c->cap, c->e);
}

static int textz(enc *c, const char *s) { return text(c, s, strlen(s)); }

/* An attribute value: & and " escaped, as in XML. */
static void sb_attr(df_sbuf *b, const char *name, const char *val) {
  df_sbuf_addstr(b, " ");
  df_sbuf_addstr(b, name);
  df_sbuf_addstr(b, "=\"");
  for (const char *p = val; *p; p++) {
    if (*p == '&') df_sbuf_addstr(b, "&amp;");
    else if (*p == '"') df_sbuf_addstr(b, "&quot;");
    else df_sbuf_add(b, p, 1);
  }
  df_sbuf_addstr(b, "\"");
}

/* <|open|>HEADER<|sep|> */
static int open_tag(enc *c, const char *header) {
  put(c, c->open);
  if (textz(c, header)) return -1;
  put(c, c->sep);
  return 0;
}

/* <|close|>NAME<|sep|> */
static int close_tag(enc *c, const char *name) {
  put(c, c->close);
  if (textz(c, name)) return -1;
  put(c, c->sep);
  return 0;
}

static const char *const role_names[] = {"system", "user", "assistant", "tool"};

static const char effort_text_fmt[] =
    "`thinking_effort` guides on how much to think in your thinking channel (not including the "
    "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
    "Now the system is invoked with `thinking_effort=%s`.";

static int message(enc *c, const char *header, const df_chat_msg *m) {
  if (open_tag(c, header)) return -1;
  const char *content = m->content ? m->content : "";
  size_t clen = m->content ? m->content_len : 0;
  if (m->role == DF_ROLE_ASSISTANT) {
    if (open_tag(c, "think")) return -1;
    if (m->reasoning && text(c, m->reasoning, m->reasoning_len)) return -1;
    if (close_tag(c, "think") || open_tag(c, "response")) return -1;
    if (text(c, content, clen) || close_tag(c, "response")) return -1;
  } else if (text(c, content, clen)) {
    return -1;
  }
  if (close_tag(c, "message")) return -1;
  put(c, c->eom);
  return 0;
}

int df_chat_encode(const df_tok *t, const df_chat_msg *msgs, size_t nmsgs, df_effort effort,
                   int add_generation_prompt, int **ids, size_t *n, size_t *cap, df_err *e) {
  enc c = {t, ids, n, cap, 0, 0, 0, 0, e};
  static const char *const need[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
  int *dst[] = {&c.open, &c.close, &c.sep, &c.eom};
  for (int i = 0; i < 4; i++)
    if ((*dst[i] = df_tok_special_id(t, need[i])) < 0)
      return df_err_set(e, "chat: the tokenizer has no %s special token", need[i]);
  if ((unsigned)effort > DF_EFFORT_MAX) return df_err_set(e, "chat: invalid thinking effort");
  size_t n0 = *n;
  char etext[512];
  snprintf(etext, sizeof etext, effort_text_fmt, effort_names[effort]);
  df_chat_msg em = {.role = DF_ROLE_SYSTEM, .content = etext, .content_len = strlen(etext)};
  if (message(&c, "message role=\"system\" type=\"thinking-effort\"", &em)) goto fail;
  df_sbuf h = {0};
  for (size_t i = 0; i < nmsgs; i++) {
    const df_chat_msg *m = &msgs[i];
    if ((unsigned)m->role > DF_ROLE_TOOL) {
      free(h.p);
      df_err_set(e, "chat: message %zu: invalid role", i);
      goto fail;
    }
    h.n = 0;
    df_sbuf_addstr(&h, "message");
    sb_attr(&h, "role", role_names[m->role]);
    if (m->role == DF_ROLE_TOOL) {
      char idx[32];
      snprintf(idx, sizeof idx, "%d", m->tool_index);
      if (m->tool_name) sb_attr(&h, "tool", m->tool_name);
      sb_attr(&h, "index", idx);
    }
    if (message(&c, h.p, m)) {
      free(h.p);
      df_err_prefix(e, "chat: message %zu (%s): ", i, role_names[m->role]);
      goto fail;
    }
  }
  free(h.p);
  if (add_generation_prompt) {
    if (open_tag(&c, "message role=\"assistant\"") || open_tag(&c, "think")) goto fail;
  }
  return 0;
fail:
  *n = n0;
  return -1;
}

/* ---- splitting generated ids ---- */

enum { M_REASONING, M_RESPONSE, M_BETWEEN, M_END };
enum { TAG_NONE, TAG_OPEN, TAG_CLOSE };

static df_channel mode_channel(int mode) {
  switch (mode) {
  case M_REASONING: return DF_CH_REASONING;
  case M_RESPONSE: return DF_CH_RESPONSE;
  case M_END: return DF_CH_END;
  default: return DF_CH_CONTROL;
  }
}

void df_chat_split_init(df_chat_split *s, const df_tok *t) {
  memset(s, 0, sizeof *s);
  s->tok = t;
  s->mode = M_REASONING;
  s->ch = DF_CH_REASONING;
  s->state = TAG_NONE;
  df_tok_stream_init(&s->stream, t);
}

static int is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Ordinary bytes outside markup go to the current channel. */
static int route_text(df_chat_split *s, const uint8_t *p, size_t n, char *out, size_t outcap,
                      df_channel *ch) {
  int mode = s->mode;
  if (mode == M_BETWEEN) {
    size_t k = 0;
    while (k < n && is_space(p[k])) k++;
    if (k == n) { /* white space between blocks is layout */
      *ch = DF_CH_CONTROL;
      return 0;
    }
    p += k, n -= k;
    mode = M_RESPONSE;
  }
  int r = df_tok_stream_push_bytes(&s->stream, p, n, out, outcap);
  if (r < 0) return -1;
  s->mode = mode;
  s->ch = mode_channel(mode);
  *ch = s->ch;
  return r;
}

/* The tag name: the collected text up to the first white space. */
static int tag_is(const df_chat_split *s, const char *name) {
  int a = 0, b;
  while (a < s->ntag && is_space((uint8_t)s->tag[a])) a++;
  for (b = a; b < s->ntag && !is_space((uint8_t)s->tag[b]);) b++;
  size_t l = strlen(name);
  return (size_t)(b - a) == l && !memcmp(s->tag + a, name, l);
}

static void apply_tag(df_chat_split *s) {
  if (s->state == TAG_OPEN) {
    if (tag_is(s, "think")) s->mode = M_REASONING;
    else if (tag_is(s, "response")) s->mode = M_RESPONSE;
    else if (tag_is(s, "message")) s->mode = M_BETWEEN;
  } else if (s->state == TAG_CLOSE) {
    if (tag_is(s, "think") || tag_is(s, "response") || tag_is(s, "message")) s->mode = M_BETWEEN;
  }
  s->state = TAG_NONE;
  s->ntag = 0;
}

int df_chat_split_push(df_chat_split *s, int id, char *out, size_t outcap, df_channel *ch) {
  if (s->ended) {
    *ch = DF_CH_END;
    return 0;
  }
  size_t len;
  const uint8_t *piece = df_tok_piece(s->tok, id, &len);
  if (!piece) { /* unknown id */
    *ch = s->state == TAG_NONE ? s->ch : DF_CH_CONTROL;
    return 0;
  }
  if (df_tok_is_special(s->tok, id)) {
    /* A dangling partial character of the current channel ends here. */
    df_channel was = mode_channel(s->mode);
    int r = df_tok_stream_flush(&s->stream, out, outcap);
    if (r < 0) return -1;
    const char *name = (const char *)piece;
#define IS(lit) (len == sizeof(lit) - 1 && !memcmp(name, lit, len))
    if (IS("<|end_of_msg|>")) {
      s->ended = 1;
      s->mode = M_END;
      s->state = TAG_NONE;
    } else if (IS("<|open|>")) {
      s->state = TAG_OPEN;
      s->ntag = 0;
    } else if (IS("<|close|>")) {
      s->state = TAG_CLOSE;
      s->ntag = 0;
    } else if (IS("<|sep|>")) {
      apply_tag(s); /* a stray <|sep|> (no tag open) changes nothing */
    } else {
      s->state = TAG_NONE; /* any other special abandons a tag, produces no text */
      s->ntag = 0;
    }
#undef IS
    s->ch = mode_channel(s->mode);
    if (r > 0) {
      *ch = was;
      return r;
    }
    *ch = s->ended ? DF_CH_END : DF_CH_CONTROL;
    return 0;
  }
  if (s->state != TAG_NONE) {
    if (s->ntag + len <= sizeof s->tag) {
      memcpy(s->tag + s->ntag, piece, len);
      s->ntag += (int)len;
      *ch = DF_CH_CONTROL;
      return 0;
    }
    /* Far too long for a tag name: it was text after all (the markup
     * special itself is dropped). */
    size_t n = (size_t)s->ntag + len;
    uint8_t *buf = df_xmalloc(n);
    memcpy(buf, s->tag, (size_t)s->ntag);
    memcpy(buf + s->ntag, piece, len);
    int r = route_text(s, buf, n, out, outcap, ch);
    free(buf);
    if (r >= 0) {
      s->state = TAG_NONE;
      s->ntag = 0;
    }
    return r;
  }
  return route_text(s, piece, len, out, outcap, ch);
}

/* Thinking efforts, and the splitter that turns the generated ids back into
 * reasoning and response text (the encoder is chat_render.c). */
#include "tokenizer/chat.h"

#include <stdlib.h>
#include <string.h>

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

const char *df_chat_effort_name(df_effort e) {
  static const char *const release[] = {"low", "high", "high", "max"};
  return (unsigned)e <= DF_EFFORT_MAX ? release[e] : NULL;
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

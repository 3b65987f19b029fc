/* The matcher of toolgram.h. A forced reply is a fixed list of items
 * (specials, texts with alternatives, free text, a JSON document); free
 * writing runs under a guard that reads the tag names after <|open|> and
 * <|close|> to refuse or to notice markup. */
#include "serve/toolgram.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sbuf.h"
#include "base/util.h"

enum { I_SYM, I_TEXT, I_FREE, I_JSON, I_DIGITS, I_LOOP, I_END };

typedef struct item {
  int kind;
  df_tg_sym sym;
  char **alts; /* I_TEXT */
  int nalts;
  int call; /* the call tag: the alternative written names the tool */
  int to;   /* I_LOOP: <|open|> goes back to this item (another call) */
} item;

struct df_tg {
  int forbid, one_call;
  item *it;
  int n, cap;
  int start; /* -1: free writing under the guard first */
  int tail;  /* the items that close the message after a call */
  const df_jg *const *args;
  int nargs;
};

static item *add(df_tg *g, int kind, df_tg_sym sym) {
  if (g->n == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 32;
    g->it = df_xrealloc(g->it, (size_t)g->cap * sizeof *g->it);
  }
  item *t = &g->it[g->n++];
  memset(t, 0, sizeof *t);
  t->kind = kind;
  t->sym = sym;
  return t;
}

static void sym(df_tg *g, df_tg_sym s) { add(g, I_SYM, s); }

static void text(df_tg *g, const char *s) {
  item *t = add(g, I_TEXT, DF_TG_OTHER);
  t->alts = df_xmalloc(sizeof *t->alts);
  t->alts[0] = df_xstrdup(s);
  t->nalts = 1;
}

/* <|close|>NAME<|sep|> */
static void close_tag(df_tg *g, const char *name) {
  sym(g, DF_TG_CLOSE);
  text(g, name);
  sym(g, DF_TG_SEP);
}

/* A tag attribute value as the release writes it: & and " escaped. */
static char *attr_value(const char *v) {
  df_sbuf b = {0};
  for (const char *p = v; *p; p++) {
    if (*p == '&')
      df_sbuf_addstr(&b, "&amp;");
    else if (*p == '"')
      df_sbuf_addstr(&b, "&quot;");
    else
      df_sbuf_add(&b, p, 1);
  }
  df_sbuf_add(&b, "", 0);
  return b.p;
}

df_tg *df_tg_new(int forbid, int force, int one_call, int thinking,
                 const char *const *names, const df_jg *const *args, int n) {
  if (!forbid && !force && !one_call)
    return NULL;
  if (force && (n < 1 || n > DF_TG_MAX_TOOLS))
    return NULL;
  df_tg *g = df_xcalloc(1, sizeof *g);
  g->forbid = forbid && !force;
  g->one_call = one_call;
  g->args = args;
  g->nargs = n;
  g->start = -1;
  if (force) {
    g->start = 0;
    if (thinking) {
      /* think freely; only <|close|> (of think) ends it, then an empty response
       */
      add(g, I_FREE, DF_TG_OTHER);
      close_tag(g, "think");
      sym(g, DF_TG_OPEN);
      text(g, "response");
      sym(g, DF_TG_SEP);
    }
    close_tag(g, "response");
    sym(g, DF_TG_OPEN);
    text(g, "tools");
    sym(g, DF_TG_SEP);
    sym(g, DF_TG_OPEN);
    int call_at = g->n;
    item *c = add(g, I_TEXT, DF_TG_OTHER);
    c->alts = df_xmalloc((size_t)n * sizeof *c->alts);
    for (int i = 0; i < n; i++) {
      char *v = attr_value(names[i]);
      size_t len = strlen(v) + 32;
      c->alts[i] = df_xmalloc(len);
      snprintf(c->alts[i], len, "call tool=\"%s\" index=\"", v);
      free(v);
    }
    c->nalts = n;
    c->call = 1;
    add(g, I_DIGITS, DF_TG_OTHER);
    text(g, "\"");
    sym(g, DF_TG_SEP);
    sym(g, DF_TG_OPEN);
    text(g, "json type=\"object\"");
    sym(g, DF_TG_SEP);
    add(g, I_JSON, DF_TG_OTHER);
    close_tag(g, "json");
    close_tag(g, "call");
    if (!one_call)
      add(g, I_LOOP, DF_TG_OTHER)->to = call_at; /* another call, or the end */
  }
  g->tail = g->n;
  close_tag(g, "tools");
  close_tag(g, "message");
  sym(g, DF_TG_EOM);
  add(g, I_END, DF_TG_OTHER);
  return g;
}

void df_tg_free(df_tg *g) {
  if (!g)
    return;
  for (int i = 0; i < g->n; i++) {
    for (int k = 0; k < g->it[i].nalts; k++)
      free(g->it[i].alts[k]);
    free(g->it[i].alts);
  }
  free(g->it);
  free(g);
}

static uint64_t all_alts(const item *t) {
  return t->nalts >= 64 ? ~0ull : (1ull << t->nalts) - 1;
}

/* Enters item i (JSON items start their document). */
static void enter(df_tm *m, int i) {
  m->seq = i;
  m->off = 0;
  const item *t = &m->g->it[i];
  m->cand = t->kind == I_TEXT ? all_alts(t) : 0;
  if (t->kind == I_JSON)
    df_jm_init(&m->jm, m->g->args[m->chosen]);
}

void df_tm_init(df_tm *m, const df_tg *g) {
  memset(m, 0, sizeof *m);
  m->g = g;
  m->chosen = -1;
  m->seq = -1;
  if (g->start >= 0)
    enter(m, g->start);
}

/* A text item: takes bytes while some alternative still fits. Returns -1 if
 * none does, 0 if all n were taken and none is complete, else 1 + the bytes
 * taken when one became complete (*which says which). */
static long text_step(const item *t, uint64_t *cand, size_t *off,
                      const uint8_t *p, size_t n, int *which) {
  for (size_t i = 0; i < n; i++) {
    uint64_t keep = 0;
    for (int k = 0; k < t->nalts && k < 64; k++)
      if ((*cand >> k & 1) && (uint8_t)t->alts[k][*off] == p[i])
        keep |= 1ull << k;
    if (!keep)
      return -1;
    *cand = keep;
    ++*off;
    for (int k = 0; k < t->nalts && k < 64; k++)
      if ((keep >> k & 1) && t->alts[k][*off] == 0) {
        *which = k;
        return (long)i + 2;
      }
  }
  return 0;
}

/* ---- the guard (free writing) ---- */

static int is_allowed_open(const char *name, size_t n, int whole) {
  static const char *const ok[] = {"think", "response"};
  for (int i = 0; i < 2; i++)
    if (strlen(ok[i]) >= n && !memcmp(ok[i], name, n) &&
        (!whole || ok[i][n] == 0))
      return 1;
  return 0;
}

static int guard_bytes(df_tm *m, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!m->tag)
      continue;
    if (p[i] == ' ' || m->nname == DF_TM_TAG) {
      /* the name ended (attributes follow) or is longer than any we watch */
      if (m->tag == DF_TG_OPEN && m->g->forbid)
        return 0;
      m->tag = 0;
      continue;
    }
    m->name[m->nname++] = (char)p[i];
    if (m->tag == DF_TG_OPEN && m->g->forbid &&
        !is_allowed_open(m->name, (size_t)m->nname, 0))
      return 0;
  }
  return 1;
}

static int guard_sym(df_tm *m, df_tg_sym s) {
  int tag = m->tag;
  m->tag = 0;
  if (tag == DF_TG_OPEN && m->g->forbid) {
    /* only <|sep|> may end the name, and only a whole allowed one */
    if (s != DF_TG_SEP || !is_allowed_open(m->name, (size_t)m->nname, 1))
      return 0;
  }
  if (tag == DF_TG_CLOSE && s == DF_TG_SEP && m->nname == 4 &&
      !memcmp(m->name, "call", 4)) {
    m->ncalls++;
    if (m->g->one_call)
      enter(m, m->g->tail); /* the first call ends the message */
    return 1;
  }
  if (s == DF_TG_OPEN || s == DF_TG_CLOSE) {
    m->tag = s;
    m->nname = 0;
  }
  return 1;
}

/* ---- feeding ---- */

int df_tm_feed_bytes(df_tm *m, const uint8_t *p, size_t n) {
  while (n) {
    if (m->seq < 0)
      return guard_bytes(m, p, n);
    const item *t = &m->g->it[m->seq];
    switch (t->kind) {
    case I_FREE:
      return 1;
    case I_JSON:
      return df_jm_feed(&m->jm, p, n);
    case I_TEXT: {
      int which = -1;
      long r = text_step(t, &m->cand, &m->off, p, n, &which);
      if (r < 0)
        return 0;
      if (r == 0)
        return 1;
      if (t->call)
        m->chosen = which;
      size_t used = (size_t)(r - 1);
      p += used;
      n -= used;
      enter(m, m->seq + 1);
      continue;
    }
    case I_DIGITS: {
      /* one digit at least; the first other byte belongs to the next item */
      size_t k = 0;
      while (k < n && p[k] >= '0' && p[k] <= '9')
        k++;
      m->off += k;
      if (k == n)
        return 1;
      if (!m->off)
        return 0;
      p += k;
      n -= k;
      enter(m, m->seq + 1);
      continue;
    }
    default:
      return 0; /* a special must come next */
    }
  }
  return 1;
}

int df_tm_feed_sym(df_tm *m, df_tg_sym s) {
  if (m->seq < 0)
    return guard_sym(m, s);
  const item *t = &m->g->it[m->seq];
  const item *next = m->seq + 1 < m->g->n ? &m->g->it[m->seq + 1] : NULL;
  switch (t->kind) {
  case I_SYM:
    if (s != t->sym)
      return 0;
    if (s == DF_TG_EOM)
      m->done = 1;
    enter(m, m->seq + 1);
    return 1;
  case I_FREE:
    if (!next || next->kind != I_SYM || s != next->sym)
      return 0;
    enter(m, m->seq + 2);
    return 1;
  case I_JSON:
    if (!m->jm.done || !next || next->kind != I_SYM || s != next->sym)
      return 0;
    enter(m, m->seq + 2);
    return 1;
  case I_LOOP:
    /* after a call: <|open|> another (its tag follows), <|close|> the tools */
    if (s == DF_TG_OPEN)
      enter(m, t->to);
    else if (s == DF_TG_CLOSE)
      enter(m, m->g->tail + 1);
    else
      return 0;
    return 1;
  default:
    return 0;
  }
}

/* The checks copy the matcher only where a token could cross items; the
 * common cases (free text, JSON, one text item) are read in place. */
int df_tm_accepts_bytes(const df_tm *m, const uint8_t *p, size_t n) {
  if (m->seq < 0) {
    if (!m->tag)
      return 1;
  } else {
    const item *t = &m->g->it[m->seq];
    if (!n)
      return 0; /* an empty piece would not move a forced reply on */
    if (t->kind == I_FREE)
      return 1;
    if (t->kind == I_JSON)
      return df_jm_accepts(&m->jm, p, n);
    if (t->kind == I_SYM || t->kind == I_LOOP || t->kind == I_END)
      return 0;
    if (t->kind == I_TEXT) {
      uint64_t cand = m->cand;
      size_t off = m->off;
      int which;
      long r = text_step(t, &cand, &off, p, n, &which);
      if (r <= 0)
        return r == 0;
      if ((size_t)(r - 1) == n)
        return 1;
      if (m->g->it[m->seq + 1].kind == I_SYM)
        return 0;
    }
  }
  df_tm c = *m;
  return df_tm_feed_bytes(&c, p, n);
}

int df_tm_accepts_sym(const df_tm *m, df_tg_sym s) {
  if (m->seq >= 0 && m->g->it[m->seq].kind == I_JSON) {
    const item *next = &m->g->it[m->seq + 1];
    return m->jm.done && next->kind == I_SYM && s == next->sym;
  }
  df_tm c = *m;
  return df_tm_feed_sym(&c, s);
}

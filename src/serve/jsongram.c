/* The matcher of jsongram.h: a pushdown automaton over bytes. Each frame is
 * one JSON value being read (or a literal, a string, a number); a byte is
 * either taken by the top frame, refused, or ends the top frame without
 * being taken (a number ends at the byte after it) and goes to the parent. */
#include "serve/jsongram.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

enum { N_OBJ_ANY, N_OBJ, N_ARR, N_STR, N_NUM, N_INT, N_LITS, N_UNION };

typedef struct node {
  int kind;
  int *kids; /* N_OBJ: property values; N_ARR: [item]; N_UNION: alternatives */
  int nkids;
  char **lits; /* N_OBJ: the literal before each value ("{\"k\":", ",\"k2\":"); N_LITS: texts */
  int nlits;
} node;

struct df_jg {
  node *n;
  int nn, cap;
  int root;
  int any, str; /* shared nodes: any value, a string (object keys) */
};

static int add_node(df_jg *g, int kind) {
  if (g->nn == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 16;
    g->n = df_xrealloc(g->n, (size_t)g->cap * sizeof *g->n);
  }
  memset(&g->n[g->nn], 0, sizeof g->n[0]);
  g->n[g->nn].kind = kind;
  return g->nn++;
}

static void add_kid(df_jg *g, int parent, int kid) {
  node *p = &g->n[parent];
  p->kids = df_xrealloc(p->kids, (size_t)(p->nkids + 1) * sizeof *p->kids);
  p->kids[p->nkids++] = kid;
}

static void add_lit(df_jg *g, int parent, const char *s) {
  node *p = &g->n[parent];
  p->lits = df_xrealloc(p->lits, (size_t)(p->nlits + 1) * sizeof *p->lits);
  p->lits[p->nlits++] = df_xstrdup(s);
}

/* Every grammar holds "any value": a union of an object of any values, an
 * array of any values, a string, a number and the literals. */
static df_jg *base(void) {
  df_jg *g = df_xcalloc(1, sizeof *g);
  g->any = add_node(g, N_UNION);
  g->str = add_node(g, N_STR);
  int obj = add_node(g, N_OBJ_ANY);
  int arr = add_node(g, N_ARR);
  add_kid(g, arr, g->any);
  int num = add_node(g, N_NUM);
  int lit = add_node(g, N_LITS);
  add_lit(g, lit, "true");
  add_lit(g, lit, "false");
  add_lit(g, lit, "null");
  add_kid(g, g->any, obj);
  add_kid(g, g->any, arr);
  add_kid(g, g->any, g->str);
  add_kid(g, g->any, num);
  add_kid(g, g->any, lit);
  return g;
}

df_jg *df_jg_object(void) {
  df_jg *g = base();
  g->root = add_node(g, N_OBJ_ANY);
  return g;
}

void df_jg_free(df_jg *g) {
  if (!g) return;
  for (int i = 0; i < g->nn; i++) {
    free(g->n[i].kids);
    for (int k = 0; k < g->n[i].nlits; k++) free(g->n[i].lits[k]);
    free(g->n[i].lits);
  }
  free(g->n);
  free(g);
}

/* ---- schema compiler ---- */

static int compile(df_jg *g, const json_t *s, const char *path, char *err, size_t errlen, int depth);

static int lits_node(df_jg *g, const json_t *values, const char *path, char *err, size_t errlen) {
  if (json_array_size(values) == 0 || json_array_size(values) > 64) {
    snprintf(err, errlen, "%s: enum must have 1 to 64 values", path);
    return -1;
  }
  int id = add_node(g, N_LITS);
  size_t i;
  json_t *v;
  json_array_foreach(values, i, v) {
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    add_lit(g, id, t ? t : "null");
    free(t);
  }
  return id;
}

static int type_node(df_jg *g, const char *t, const json_t *s, const char *path, char *err,
                     size_t errlen, int depth) {
  char sub[256];
  if (!strcmp(t, "string")) return g->str;
  if (!strcmp(t, "number")) return add_node(g, N_NUM);
  if (!strcmp(t, "integer")) return add_node(g, N_INT);
  if (!strcmp(t, "boolean")) {
    int id = add_node(g, N_LITS);
    add_lit(g, id, "true");
    add_lit(g, id, "false");
    return id;
  }
  if (!strcmp(t, "null")) {
    int id = add_node(g, N_LITS);
    add_lit(g, id, "null");
    return id;
  }
  if (!strcmp(t, "array")) {
    const json_t *items = json_object_get(s, "items");
    int item = g->any;
    if (items) {
      snprintf(sub, sizeof sub, "%s.items", path);
      if ((item = compile(g, items, sub, err, errlen, depth + 1)) < 0) return -1;
    }
    int id = add_node(g, N_ARR);
    add_kid(g, id, item);
    return id;
  }
  if (!strcmp(t, "object")) {
    const json_t *props = json_object_get(s, "properties");
    if (!props) return add_node(g, N_OBJ_ANY);
    if (!json_is_object(props)) {
      snprintf(err, errlen, "%s.properties must be an object", path);
      return -1;
    }
    int id = add_node(g, N_OBJ);
    const char *k;
    json_t *v;
    int first = 1;
    json_object_foreach((json_t *)props, k, v) {
      json_t *key = json_string(k);
      char *kj = json_dumps(key, JSON_COMPACT | JSON_ENCODE_ANY);
      json_decref(key);
      char *lit = df_xmalloc(strlen(kj) + 3);
      sprintf(lit, "%s%s:", first ? "{" : ",", kj);
      free(kj);
      snprintf(sub, sizeof sub, "%s.properties.%.100s", path, k);
      int kid = compile(g, v, sub, err, errlen, depth + 1);
      if (kid < 0) {
        free(lit);
        return -1;
      }
      add_kid(g, id, kid);
      add_lit(g, id, lit);
      free(lit);
      first = 0;
    }
    return id;
  }
  snprintf(err, errlen, "%s: type '%s' is not supported", path, t);
  return -1;
}

static int compile(df_jg *g, const json_t *s, const char *path, char *err, size_t errlen, int depth) {
  if (depth > DF_JM_DEPTH / 2 - 2) {
    snprintf(err, errlen, "%s: the schema nests too deeply", path);
    return -1;
  }
  if (json_is_true(s)) return g->any;
  if (!json_is_object(s)) {
    snprintf(err, errlen, "%s must be a schema object", path);
    return -1;
  }
  static const char *const refused[] = {"$ref", "oneOf", "allOf", "not", "if", "pattern",
                                        "patternProperties", "format", NULL};
  for (const char *const *r = refused; *r; r++)
    if (json_object_get(s, *r)) {
      snprintf(err, errlen, "%s: '%s' is not supported by the constrained decoder", path, *r);
      return -1;
    }
  const json_t *e = json_object_get(s, "enum"), *c = json_object_get(s, "const");
  if (e) {
    if (!json_is_array(e)) {
      snprintf(err, errlen, "%s.enum must be an array", path);
      return -1;
    }
    return lits_node(g, e, path, err, errlen);
  }
  if (c) {
    json_t *one = json_array();
    json_array_append((json_t *)one, (json_t *)c);
    int id = lits_node(g, one, path, err, errlen);
    json_decref(one);
    return id;
  }
  const json_t *any = json_object_get(s, "anyOf");
  const json_t *t = json_object_get(s, "type");
  char sub[256];
  if (any || json_is_array(t)) {
    const json_t *alts = any ? any : t;
    if (!json_is_array(alts) || !json_array_size(alts)) {
      snprintf(err, errlen, "%s: anyOf / type lists must be non-empty arrays", path);
      return -1;
    }
    int id = add_node(g, N_UNION);
    size_t i;
    json_t *a;
    json_array_foreach(alts, i, a) {
      snprintf(sub, sizeof sub, "%s.%s[%zu]", path, any ? "anyOf" : "type", i);
      int kid = any ? compile(g, a, sub, err, errlen, depth + 1)
                    : (json_is_string(a) ? type_node(g, json_string_value(a), s, sub, err, errlen, depth)
                                         : -1);
      if (kid < 0) {
        if (!any && !json_is_string(a)) snprintf(err, errlen, "%s must be a type name", sub);
        return -1;
      }
      add_kid(g, id, kid);
    }
    return id;
  }
  if (!t) return g->any;
  if (!json_is_string(t)) {
    snprintf(err, errlen, "%s.type must be a string or an array of strings", path);
    return -1;
  }
  return type_node(g, json_string_value(t), s, path, err, errlen, depth);
}

df_jg *df_jg_schema(const char *schema_json, size_t len, char *err, size_t errlen) {
  json_error_t je;
  json_t *s = json_loadb(schema_json, len, 0, &je);
  if (!s) {
    snprintf(err, errlen, "schema: not JSON: %s", je.text);
    return NULL;
  }
  df_jg *g = base();
  g->root = compile(g, s, "schema", err, errlen, 0);
  json_decref(s);
  if (g->root < 0) {
    df_jg_free(g);
    return NULL;
  }
  /* the document is one object */
  int k = g->n[g->root].kind;
  if (k != N_OBJ && k != N_OBJ_ANY) {
    snprintf(err, errlen, "schema: the top level must be an object");
    df_jg_free(g);
    return NULL;
  }
  return g;
}

/* ---- matcher ---- */

void df_jm_init(df_jm *m, const df_jg *g) {
  memset(m, 0, sizeof *m);
  m->g = g;
  m->st[0].node = g->root;
  m->depth = 1;
}

static int push(df_jm *m, int node) {
  if (m->depth == DF_JM_DEPTH) return 0;
  df_jm_frame *f = &m->st[m->depth++];
  memset(f, 0, sizeof *f);
  f->node = node;
  return 1;
}

static int isdig(int c) { return c >= '0' && c <= '9'; }

/* first-byte test for union dispatch */
static int starts(const df_jg *g, int id, int c, int depth) {
  const node *n = &g->n[id];
  switch (n->kind) {
    case N_OBJ_ANY:
    case N_OBJ: return c == '{';
    case N_ARR: return c == '[';
    case N_STR: return c == '"';
    case N_NUM:
    case N_INT: return c == '-' || isdig(c);
    case N_LITS:
      for (int i = 0; i < n->nlits; i++)
        if ((unsigned char)n->lits[i][0] == c) return 1;
      return 0;
    case N_UNION:
      if (depth > 8) return 0;
      for (int i = 0; i < n->nkids; i++)
        if (starts(g, n->kids[i], c, depth + 1)) return 1;
      return 0;
  }
  return 0;
}

enum { TAKE, REFUSE, REFEED, END_TAKE, END_REFEED };

/* One byte for the top frame. REFEED: the frame changed (a union chose, a
 * value was pushed) and the byte goes to the new top. */
static int step(df_jm *m, int c) {
  const df_jg *g = m->g;
  df_jm_frame *f = &m->st[m->depth - 1];
  const node *n = &g->n[f->node];
  switch (n->kind) {
    case N_UNION:
      for (int i = 0; i < n->nkids; i++)
        if (starts(g, n->kids[i], c, 0)) {
          f->node = n->kids[i];
          f->phase = f->idx = 0;
          f->cand = 0;
          return REFEED;
        }
      return REFUSE;
    case N_STR:
      switch (f->phase) {
        case 0: return c == '"' ? (f->phase = 1, TAKE) : REFUSE;
        case 1:
          if (f->idx) { /* inside a UTF-8 character: idx continuation bytes to come */
            int lo = 0x80, hi = 0xBF;
            if (f->cand) { /* the first one after E0, ED, F0, F4: no overlongs, no surrogates */
              if (f->cand == 0xE0) lo = 0xA0;
              else if (f->cand == 0xED) hi = 0x9F;
              else if (f->cand == 0xF0) lo = 0x90;
              else if (f->cand == 0xF4) hi = 0x8F;
              f->cand = 0;
            }
            if (c < lo || c > hi) return REFUSE;
            f->idx--;
            return TAKE;
          }
          if (c == '"') return END_TAKE;
          if (c == '\\') return f->phase = 2, TAKE;
          if (c < 0x20) return REFUSE;
          if (c < 0x80) return TAKE;
          if (c >= 0xC2 && c <= 0xDF) f->idx = 1;
          else if (c >= 0xE0 && c <= 0xEF) f->idx = 2;
          else if (c >= 0xF0 && c <= 0xF4) f->idx = 3;
          else return REFUSE;
          f->cand = (c == 0xE0 || c == 0xED || c == 0xF0 || c == 0xF4) ? (uint64_t)c : 0;
          return TAKE;
        default:
          /* \uXXXX is left out (a model writes the character itself): no NUL
           * or lone surrogate can be spelled */
          return strchr("\"\\/bfnrt", c) && c ? (f->phase = 1, TAKE) : REFUSE;
      }
    case N_NUM:
    case N_INT: {
      int integer = n->kind == N_INT;
      switch (f->phase) {
        case 0:
          if (c == '-') return f->phase = 1, TAKE;
          /* fall through */
        case 1:
          if (c == '0') return f->phase = 3, TAKE;
          if (isdig(c)) return f->phase = 2, TAKE;
          return REFUSE;
        case 2:
          if (isdig(c)) return TAKE;
          /* fall through */
        case 3:
          if (!integer && c == '.') return f->phase = 4, TAKE;
          if (!integer && (c == 'e' || c == 'E')) return f->phase = 6, TAKE;
          return END_REFEED;
        case 4: return isdig(c) ? (f->phase = 5, TAKE) : REFUSE;
        case 5:
          if (isdig(c)) return TAKE;
          if (c == 'e' || c == 'E') return f->phase = 6, TAKE;
          return END_REFEED;
        case 6:
          if (c == '+' || c == '-') return f->phase = 7, TAKE;
          return isdig(c) ? (f->phase = 8, TAKE) : REFUSE;
        case 7: return isdig(c) ? (f->phase = 8, TAKE) : REFUSE;
        default: return isdig(c) ? TAKE : END_REFEED;
      }
    }
    case N_LITS: {
      if (f->phase == 0) {
        f->cand = n->nlits >= 64 ? ~0ull : ((1ull << n->nlits) - 1);
        f->phase = 1;
      }
      uint64_t keep = 0;
      int complete = 0;
      for (int i = 0; i < n->nlits; i++) {
        if (!(f->cand >> i & 1)) continue;
        const char *l = n->lits[i];
        if ((int)strlen(l) == f->idx) complete = 1; /* ended before this byte */
        else if ((unsigned char)l[f->idx] == c) keep |= 1ull << i;
      }
      if (!keep) return complete ? END_REFEED : REFUSE;
      f->cand = keep;
      f->idx++;
      /* one alternative left and finished: the value ends with this byte */
      int open = 0;
      for (int i = 0; i < n->nlits; i++)
        if ((keep >> i & 1) && (int)strlen(n->lits[i]) > f->idx) open = 1;
      return open ? TAKE : END_TAKE;
    }
    case N_OBJ_ANY:
      switch (f->phase) {
        case 0: return c == '{' ? (f->phase = 1, TAKE) : REFUSE;
        case 1: /* after '{' */
          if (c == '}') return END_TAKE;
          /* fall through */
        case 5: /* after ',' */
          if (c != '"') return REFUSE;
          f->phase = 2;
          if (!push(m, g->str)) return REFUSE;
          return REFEED;
        case 2: return c == ':' ? (f->phase = 3, TAKE) : REFUSE;
        case 3:
          f->phase = 4;
          return push(m, g->any) ? REFEED : REFUSE;
        default: /* 4: after a value */
          if (c == ',') return f->phase = 5, TAKE;
          return c == '}' ? END_TAKE : REFUSE;
      }
    case N_OBJ: {
      if (f->phase < 0) { /* after value idx */
        f->idx++;
        f->phase = 0;
      }
      if (f->idx == n->nkids) { /* all properties: the end (or an empty object) */
        if (n->nkids == 0 && f->phase == 0) return c == '{' ? (f->phase = 1, TAKE) : REFUSE;
        return c == '}' ? END_TAKE : REFUSE;
      }
      const char *lit = n->lits[f->idx];
      if ((unsigned char)lit[f->phase] != c) return REFUSE;
      if (lit[++f->phase]) return TAKE;
      f->phase = -1; /* the literal is done: the value follows */
      return push(m, n->kids[f->idx]) ? TAKE : REFUSE;
    }
    case N_ARR:
      switch (f->phase) {
        case 0: return c == '[' ? (f->phase = 1, TAKE) : REFUSE;
        case 1:
          if (c == ']') return END_TAKE;
          /* fall through */
        case 3:
          f->phase = 2;
          return push(m, n->kids[0]) ? REFEED : REFUSE;
        default: /* 2: after an item */
          if (c == ',') return f->phase = 3, TAKE;
          return c == ']' ? END_TAKE : REFUSE;
      }
  }
  return REFUSE;
}

static int feed1(df_jm *m, int c) {
  for (int guard = 0; guard < 4 * DF_JM_DEPTH; guard++) {
    if (m->done || m->depth == 0) return 0; /* nothing may follow the document */
    switch (step(m, c)) {
      case TAKE: return 1;
      case REFUSE: return 0;
      case REFEED: break;
      case END_TAKE:
        if (--m->depth == 0) m->done = 1;
        return 1;
      case END_REFEED:
        if (--m->depth == 0) {
          m->done = 1;
          return 0;
        }
        break;
    }
  }
  return 0;
}

int df_jm_feed(df_jm *m, const uint8_t *p, size_t n) {
  if (m->dead) return 0;
  for (size_t i = 0; i < n; i++)
    if (!feed1(m, p[i])) {
      m->dead = 1;
      return 0;
    }
  return 1;
}

int df_jm_accepts(const df_jm *m, const uint8_t *p, size_t n) {
  df_jm t = *m;
  return df_jm_feed(&t, p, n);
}

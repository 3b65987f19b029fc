/* The matcher of jsongram.h: a pushdown automaton over bytes. Each frame is
 * one JSON value being read (or a literal, a string, a number); a byte is
 * either taken by the top frame, refused, or ends the top frame without
 * being taken (a number ends at the byte after it) and goes to the parent. */
#include "serve/jsongram.h"

#include <jansson.h>
#include <math.h>
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
  long minc, maxc;  /* N_STR: characters, N_ARR: items (maxc -1: no limit) */
  int bounded;      /* N_NUM / N_INT: lo and hi hold (infinite when absent) */
  double lo, hi;
  int xlo, xhi;     /* the bound itself is excluded */
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
  g->n[g->nn].maxc = -1;
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

typedef struct cctx {
  df_jg *g;
  const json_t *root; /* the schema document: local $ref targets */
  char *err;
  size_t errlen;
  struct {
    char *ref;
    int id;
  } memo[64]; /* $ref targets already compiled (or being compiled: recursion) */
  int nmemo;
} cctx;

static int compile(cctx *c, const json_t *s, const char *path, int depth);

static int fail(cctx *c, const char *fmt, const char *path, const char *what) {
  snprintf(c->err, c->errlen, fmt, path, what);
  return -1;
}

static int lits_node(cctx *c, const json_t *values, const char *path) {
  if (json_array_size(values) == 0 || json_array_size(values) > 64)
    return fail(c, "%s: enum must have 1 to 64 values%s", path, "");
  int id = add_node(c->g, N_LITS);
  size_t i;
  json_t *v;
  json_array_foreach(values, i, v) {
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    add_lit(c->g, id, t ? t : "null");
    free(t);
  }
  return id;
}

/* Keywords that only describe: they constrain nothing the grammar writes. */
static int annotation(const char *k) {
  static const char *const a[] = {"title", "description", "default", "examples", "$schema", "$id",
                                  "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                  "definitions", "discriminator", NULL};
  for (const char *const *p = a; *p; p++)
    if (!strcmp(*p, k)) return 1;
  return 0;
}

/* The keywords each type enforces (besides type, enum, const, anyOf,
 * allOf, $ref and the annotations); a schema with any other is refused,
 * naming the keyword, so no constraint is dropped silently. */
static int enforced(const char *t, const char *k) {
  static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                    NULL};
  static const char *const str[] = {"minLength", "maxLength", NULL};
  static const char *const arr[] = {"items", "minItems", "maxItems", NULL};
  /* every listed property is written, so required holds; none other is */
  static const char *const obj[] = {"properties", "required", "additionalProperties", NULL};
  const char *const *l = NULL;
  if (!strcmp(t, "number") || !strcmp(t, "integer")) l = num;
  else if (!strcmp(t, "string")) l = str;
  else if (!strcmp(t, "array")) l = arr;
  else if (!strcmp(t, "object")) l = obj;
  for (; l && *l; l++)
    if (!strcmp(*l, k)) return 1;
  return 0;
}

static int count_kw(cctx *c, const json_t *s, const char *k, const char *path, long *out) {
  const json_t *v = json_object_get(s, k);
  if (!v) return 0;
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1L << 30))
    return fail(c, "%s.%s must be a non-negative integer", path, k);
  *out = (long)json_integer_value(v);
  return 0;
}

static int bounds(cctx *c, node *n, const json_t *s, const char *path, int integer) {
  double lo = -INFINITY, hi = INFINITY;
  int xlo = 0, xhi = 0;
  static const char *const kw[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
  for (int i = 0; i < 4; i++) {
    const json_t *v = json_object_get(s, kw[i]);
    if (!v) continue;
    if (i >= 2 && json_is_boolean(v)) { /* draft 4: a flag on minimum / maximum */
      if (json_is_true(v)) *(i == 2 ? &xlo : &xhi) = 1;
      continue;
    }
    if (!json_is_number(v)) return fail(c, "%s.%s must be a number", path, kw[i]);
    double x = json_number_value(v);
    if (i == 0 || i == 2) {
      if (x > lo || (x == lo && i == 2)) lo = x, xlo = i == 2;
    } else if (x < hi || (x == hi && i == 3)) {
      hi = x, xhi = i == 3;
    }
  }
  if (lo == -INFINITY && hi == INFINITY) return 0;
  if (integer) { /* the integer bounds, inclusive */
    lo = xlo ? floor(lo) + 1 : ceil(lo);
    hi = xhi ? ceil(hi) - 1 : floor(hi);
    xlo = xhi = 0;
  }
  if (lo > hi || (lo == hi && (xlo || xhi)))
    return fail(c, "%s: no %s satisfies its minimum and maximum", path, integer ? "integer" : "number");
  n->bounded = 1;
  n->lo = lo;
  n->hi = hi;
  n->xlo = xlo;
  n->xhi = xhi;
  return 0;
}

/* Every keyword of s must be an annotation or one that a type of the list
 * (one type, or a type list's) enforces. */
static int check_keywords(cctx *c, const json_t *s, const char *const *types, int ntypes,
                          const char *path) {
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)s, k, v) {
    if (annotation(k) || !strcmp(k, "type")) continue;
    int ok = 0;
    for (int i = 0; i < ntypes && !ok; i++) ok = enforced(types[i], k);
    if (!ok) return fail(c, "%s: '%s' is not enforced by the constrained decoder", path, k);
  }
  return 0;
}

static int type_node(cctx *c, const char *t, const json_t *s, const char *path, int depth) {
  df_jg *g = c->g;
  char sub[256];
  const char *k;
  json_t *v;
  if (!strcmp(t, "string")) {
    long mn = 0, mx = -1;
    if (count_kw(c, s, "minLength", path, &mn) || count_kw(c, s, "maxLength", path, &mx)) return -1;
    if (mx >= 0 && mn > mx) return fail(c, "%s: minLength is above maxLength%s", path, "");
    if (!mn && mx < 0) return g->str;
    int id = add_node(g, N_STR);
    g->n[id].minc = mn;
    g->n[id].maxc = mx;
    return id;
  }
  if (!strcmp(t, "number") || !strcmp(t, "integer")) {
    int id = add_node(g, !strcmp(t, "integer") ? N_INT : N_NUM);
    return bounds(c, &g->n[id], s, path, !strcmp(t, "integer")) ? -1 : id;
  }
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
    long mn = 0, mx = -1;
    if (count_kw(c, s, "minItems", path, &mn) || count_kw(c, s, "maxItems", path, &mx)) return -1;
    if (mx >= 0 && mn > mx) return fail(c, "%s: minItems is above maxItems%s", path, "");
    if (items) {
      snprintf(sub, sizeof sub, "%s.items", path);
      if (!json_is_object(items) && !json_is_true(items))
        return fail(c, "%s must be one schema (tuple forms are not enforced)%s", sub, "");
      if ((item = compile(c, items, sub, depth + 1)) < 0) return -1;
    }
    int id = add_node(g, N_ARR);
    add_kid(g, id, item);
    g->n[id].minc = mn;
    g->n[id].maxc = mx;
    return id;
  }
  if (!strcmp(t, "object")) {
    const json_t *props = json_object_get(s, "properties");
    const json_t *addl = json_object_get(s, "additionalProperties");
    const json_t *req = json_object_get(s, "required");
    if (req) {
      size_t i;
      json_t *r;
      if (!json_is_array(req)) return fail(c, "%s.required must be an array%s", path, "");
      json_array_foreach(req, i, r) {
        if (!json_is_string(r) || !json_object_get(props, json_string_value(r)))
          return fail(c, "%s.required names '%.100s', which is not in properties", path,
                      json_is_string(r) ? json_string_value(r) : "?");
      }
    }
    if (!props) {
      /* any object: its values would follow nothing but the schema's own
       * additionalProperties, which the grammar does not read */
      if (addl && !json_is_true(addl) && !(json_is_object(addl) && !json_object_size(addl)))
        return fail(c, "%s: 'additionalProperties' without properties is not enforced%s", path, "");
      return add_node(g, N_OBJ_ANY);
    }
    if (!json_is_object(props)) return fail(c, "%s.properties must be an object%s", path, "");
    int id = add_node(g, N_OBJ);
    int first = 1;
    json_object_foreach((json_t *)props, k, v) {
      json_t *key = json_string(k);
      char *kj = json_dumps(key, JSON_COMPACT | JSON_ENCODE_ANY);
      json_decref(key);
      char *lit = df_xmalloc(strlen(kj) + 3);
      sprintf(lit, "%s%s:", first ? "{" : ",", kj);
      free(kj);
      snprintf(sub, sizeof sub, "%s.properties.%.100s", path, k);
      int kid = compile(c, v, sub, depth + 1);
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
  return fail(c, "%s: type '%s' is not supported", path, t);
}

/* A local $ref: "#", "#/$defs/NAME" or "#/definitions/NAME". Each target is
 * compiled once; a union of one placeholder kid stands for it while it is
 * being compiled, so a recursive schema refers to itself. */
static int ref_node(cctx *c, const char *ref, const char *path, int depth) {
  for (int i = 0; i < c->nmemo; i++)
    if (!strcmp(c->memo[i].ref, ref)) return c->memo[i].id;
  const json_t *t = NULL;
  if (!strcmp(ref, "#")) t = c->root;
  else if (!strncmp(ref, "#/$defs/", 8)) t = json_object_get(json_object_get(c->root, "$defs"), ref + 8);
  else if (!strncmp(ref, "#/definitions/", 14))
    t = json_object_get(json_object_get(c->root, "definitions"), ref + 14);
  else return fail(c, "%s: '$ref' '%.100s' is not a local #/$defs/ or #/definitions/ reference", path, ref);
  if (!t) return fail(c, "%s: '$ref' '%.100s' names no definition", path, ref);
  if (c->nmemo == 64) return fail(c, "%s: more than 64 referenced definitions%s", path, "");
  int id = add_node(c->g, N_UNION);
  c->memo[c->nmemo].ref = df_xstrdup(ref);
  c->memo[c->nmemo++].id = id;
  char sub[256];
  snprintf(sub, sizeof sub, "%.200s", ref);
  int kid = compile(c, t, sub, depth + 1);
  if (kid < 0) return -1;
  add_kid(c->g, id, kid);
  return id;
}

static int compile(cctx *c, const json_t *s, const char *path, int depth) {
  df_jg *g = c->g;
  if (depth > DF_JM_DEPTH / 2 - 2) return fail(c, "%s: the schema nests too deeply%s", path, "");
  if (json_is_true(s)) return g->any;
  if (!json_is_object(s)) return fail(c, "%s must be a schema object%s", path, "");
  const json_t *nullable = json_object_get(s, "nullable");
  if (nullable) {
    /* OpenAPI's nullable (zod writes it for a nullable number): the schema
     * without it, or null */
    if (!json_is_boolean(nullable)) return fail(c, "%s.nullable must be a boolean%s", path, "");
    json_t *rest = json_copy((json_t *)s);
    json_object_del(rest, "nullable");
    int kid = compile(c, rest, path, depth + 1);
    json_decref(rest);
    if (kid < 0 || !json_is_true(nullable)) return kid;
    int id = add_node(g, N_UNION), null = add_node(g, N_LITS);
    add_lit(g, null, "null");
    add_kid(g, id, kid);
    add_kid(g, id, null);
    return id;
  }
  const json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
  const json_t *e = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
  const json_t *any = json_object_get(s, "anyOf");
  const json_t *t = json_object_get(s, "type");
  const char *k;
  json_t *v;
  if (ref || all || e || cn) {
    /* these stand for the whole value: beside them only annotations (and a
     * type, which an enum's or const's values already are) */
    json_object_foreach((json_t *)s, k, v) {
      if (annotation(k) || (v == ref || v == all || v == e || v == cn)) continue;
      if ((e || cn) && !ref && !all && !strcmp(k, "type")) continue;
      return fail(c, "%s: '%s' beside $ref, allOf, enum or const is not enforced", path, k);
    }
    if ((ref ? 1 : 0) + (all ? 1 : 0) + (e ? 1 : 0) + (cn ? 1 : 0) > 1)
      return fail(c, "%s: only one of $ref, allOf, enum and const may be given%s", path, "");
  }
  if (ref) {
    if (!json_is_string(ref)) return fail(c, "%s.$ref must be a string%s", path, "");
    return ref_node(c, json_string_value(ref), path, depth);
  }
  if (all) {
    char sub[256];
    if (!json_is_array(all) || json_array_size(all) != 1)
      return fail(c, "%s: 'allOf' is enforced with one schema only%s", path, "");
    snprintf(sub, sizeof sub, "%s.allOf[0]", path);
    return compile(c, json_array_get(all, 0), sub, depth + 1);
  }
  if (e) {
    if (!json_is_array(e)) return fail(c, "%s.enum must be an array%s", path, "");
    return lits_node(c, e, path);
  }
  if (cn) {
    json_t *one = json_array();
    json_array_append((json_t *)one, (json_t *)cn);
    int id = lits_node(c, one, path);
    json_decref(one);
    return id;
  }
  char sub[256];
  if (any) {
    json_object_foreach((json_t *)s, k, v) {
      if (annotation(k) || v == any) continue;
      return fail(c, "%s: '%s' beside anyOf is not enforced (put it in the alternatives)", path, k);
    }
    if (!json_is_array(any) || !json_array_size(any))
      return fail(c, "%s: anyOf must be a non-empty array%s", path, "");
    int id = add_node(g, N_UNION);
    size_t i;
    json_t *a;
    json_array_foreach(any, i, a) {
      snprintf(sub, sizeof sub, "%s.anyOf[%zu]", path, i);
      int kid = compile(c, a, sub, depth + 1);
      if (kid < 0) return -1;
      add_kid(g, id, kid);
    }
    return id;
  }
  if (json_is_array(t)) {
    if (!json_array_size(t) || json_array_size(t) > 8)
      return fail(c, "%s: the type list must have 1 to 8 names%s", path, "");
    const char *names[8];
    for (size_t i = 0; i < json_array_size(t); i++) {
      names[i] = json_string_value(json_array_get(t, i));
      if (!names[i]) return fail(c, "%s.type must list type names%s", path, "");
    }
    if (check_keywords(c, s, names, (int)json_array_size(t), path)) return -1;
    int id = add_node(g, N_UNION);
    size_t i;
    json_t *a;
    json_array_foreach(t, i, a) {
      snprintf(sub, sizeof sub, "%s.type[%zu]", path, i);
      if (!json_is_string(a)) return fail(c, "%s must be a type name%s", sub, "");
      int kid = type_node(c, json_string_value(a), s, sub, depth);
      if (kid < 0) return -1;
      add_kid(g, id, kid);
    }
    return id;
  }
  if (!t) {
    json_object_foreach((json_t *)s, k, v) {
      if (annotation(k)) continue;
      return fail(c, "%s: '%s' without a type is not enforced", path, k);
    }
    return g->any;
  }
  if (!json_is_string(t)) return fail(c, "%s.type must be a string or an array of strings%s", path, "");
  const char *one = json_string_value(t);
  if (check_keywords(c, s, &one, 1, path)) return -1;
  return type_node(c, one, s, path, depth);
}

df_jg *df_jg_schema(const char *schema_json, size_t len, char *err, size_t errlen) {
  json_error_t je;
  json_t *s = json_loadb(schema_json, len, 0, &je);
  if (!s) {
    snprintf(err, errlen, "schema: not JSON: %s", je.text);
    return NULL;
  }
  df_jg *g = base();
  cctx c = {.g = g, .root = s, .err = err, .errlen = errlen};
  g->root = compile(&c, s, "schema", 0);
  for (int i = 0; i < c.nmemo; i++) free(c.memo[i].ref);
  json_decref(s);
  if (g->root < 0) {
    df_jg_free(g);
    return NULL;
  }
  /* the document is one object (a $ref to one included) */
  int r = g->root;
  for (int hop = 0; hop < 64 && g->n[r].kind == N_UNION && g->n[r].nkids == 1; hop++)
    r = g->n[r].kids[0];
  int k = g->n[r].kind;
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

/* Bounded numbers. The digits so far are the mantissa x (exact below 2^53)
 * with idx of them after the point; phase as in step(). 1 if some way to
 * go on (or to end here) gives a value within the node's bounds. */
static int in_range(const node *n, double v) {
  if (v < n->lo || (n->xlo && v == n->lo)) return 0;
  if (v > n->hi || (n->xhi && v == n->hi)) return 0;
  return 1;
}

/* [L, H] (each end excluded if its flag is set) meets the node's bounds */
static int overlaps(const node *n, double L, int Lx, double H, int Hx) {
  double lo = L, hi = H;
  int lox = Lx, hix = Hx;
  if (n->lo > lo || (n->lo == lo && n->xlo)) lo = n->lo, lox = n->xlo || (n->lo == L && Lx);
  if (n->hi < hi || (n->hi == hi && n->xhi)) hi = n->hi, hix = n->xhi || (n->hi == H && Hx);
  return lo < hi || (lo == hi && !lox && !hix);
}

/* the magnitudes from a up to b (b excluded if bx), with the frame's sign */
static int meets(const node *n, double a, double b, int bx, int neg) {
  return neg ? overlaps(n, -b, bx, -a, 0) : overlaps(n, a, 0, b, bx);
}

static int num_feasible(const node *n, const df_jm_frame *f, int phase) {
  int integer = n->kind == N_INT;
  double x = f->x;
  switch (phase) {
    case 0: return 1;
    case 1: /* a minus sign: some negative value (or -0) must be allowed */
      return n->lo < 0 || (n->lo == 0 && !n->xlo);
    case 3: return integer ? in_range(n, 0) : meets(n, 0, 1, 1, f->neg);
    case 2: {
      /* more digits may follow: x * 10^k up to (x + 1) * 10^k */
      double top = f->neg ? -n->lo : n->hi; /* the largest magnitude allowed */
      if (top == INFINITY) return 1;
      for (double m = 1; x * m <= top && m < 1e300; m *= 10)
        if (integer ? meets(n, x * m, (x + 1) * m - 1, 0, f->neg) : meets(n, x * m, (x + 1) * m, 1, f->neg))
          return 1;
      return 0;
    }
    default: { /* after the point: idx fraction digits */
      double p = pow(10, f->idx);
      return meets(n, x / p, (x + 1) / p, 1, f->neg);
    }
  }
}

/* The value written, once the number ends. */
static double num_value(const df_jm_frame *f) {
  double v = f->x / pow(10, f->idx);
  return f->neg ? -v : v;
}

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
      if (f->phase == 1 && !f->idx && c != '"') {
        /* A character starts (an escape counts as one). JSON Schema counts
         * characters, JavaScript validators (zod) UTF-16 units, in which a
         * character past U+FFFF is two: maxLength holds for both counts,
         * minLength for characters (so for units too). */
        long w = c >= 0xF0 ? 2 : 1;
        if (n->maxc >= 0 && f->units + w > n->maxc) return REFUSE;
        f->count++;
        f->units += w;
      }
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
          if (c == '"') return f->count < n->minc ? REFUSE : END_TAKE;
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
      if (n->bounded) {
        /* the same steps on a copy; then the bounds decide */
        df_jm_frame t = *f;
        int r = REFUSE;
        int integer = n->kind == N_INT;
        switch (t.phase) {
          case 0:
            if (c == '-') {
              t.neg = 1;
              t.phase = 1;
              r = TAKE;
              break;
            }
            /* fall through */
          case 1:
            if (isdig(c)) t.x = c - '0', t.phase = c == '0' ? 3 : 2, r = TAKE;
            break;
          case 2:
            if (isdig(c)) {
              if (t.x >= 1e15) break; /* past what a double holds exactly */
              t.x = t.x * 10 + (c - '0');
              r = TAKE;
              break;
            }
            /* fall through */
          case 3:
            if (!integer && c == '.') t.phase = 4, r = TAKE;
            else r = in_range(n, num_value(&t)) ? END_REFEED : REFUSE;
            break;
          case 4:
          case 5:
            if (isdig(c) && t.x < 1e15) t.x = t.x * 10 + (c - '0'), t.idx++, t.phase = 5, r = TAKE;
            else if (!isdig(c) && t.phase == 5) r = in_range(n, num_value(&t)) ? END_REFEED : REFUSE;
            break;
        }
        if (r == TAKE && !num_feasible(n, &t, t.phase)) return REFUSE;
        *f = t;
        return r;
      }
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
          if (c == ']') return n->minc > 0 ? REFUSE : END_TAKE;
          /* fall through */
        case 3:
          if (n->maxc >= 0 && f->count >= n->maxc) return REFUSE;
          f->count++;
          f->phase = 2;
          return push(m, n->kids[0]) ? REFEED : REFUSE;
        default: /* 2: after an item */
          if (c == ',') return n->maxc >= 0 && f->count >= n->maxc ? REFUSE : (f->phase = 3, TAKE);
          return c == ']' && f->count >= n->minc ? END_TAKE : REFUSE;
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

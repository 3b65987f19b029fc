/* Python-compatible JSON text (see pyjson.h). */
#include "tokenizer/pyjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sbuf.h"
#include "base/util.h"

int df_py_isspace(uint32_t cp) {
  if (cp >= 0x09 && cp <= 0x0D) return 1;
  if (cp >= 0x1C && cp <= 0x20) return 1;
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return 1;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

int df_py_utf8_next(const uint8_t *p, size_t n, uint32_t *cp) {
  uint8_t c = p[0];
  int l = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (!l || (size_t)l > n) return 0;
  uint32_t v = l == 1 ? c : l == 2 ? (c & 0x1Fu) : l == 3 ? (c & 0x0Fu) : (c & 0x07u);
  for (int i = 1; i < l; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (p[i] & 0x3Fu);
  }
  *cp = v;
  return l;
}

static void put_string(df_sbuf *b, const char *s, size_t n) {
  df_sbuf_addstr(b, "\"");
  size_t run = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = NULL;
    char u[8];
    switch (c) {
      case '"': esc = "\\\""; break;
      case '\\': esc = "\\\\"; break;
      case '\n': esc = "\\n"; break;
      case '\r': esc = "\\r"; break;
      case '\t': esc = "\\t"; break;
      case '\b': esc = "\\b"; break;
      case '\f': esc = "\\f"; break;
      default:
        if (c < 0x20) {
          snprintf(u, sizeof u, "\\u%04x", c);
          esc = u;
        }
    }
    if (!esc) continue;
    df_sbuf_add(b, s + run, i - run);
    df_sbuf_addstr(b, esc);
    run = i + 1;
  }
  df_sbuf_add(b, s + run, n - run);
  df_sbuf_addstr(b, "\"");
}

/* float.__repr__: the shortest digits that read back, fixed notation when the
 * decimal exponent is in [-4, 16), else d.ddde+XX. */
static void put_real(df_sbuf *b, double v) {
  if (v == 0) {
    df_sbuf_addstr(b, signbit(v) ? "-0.0" : "0.0");
    return;
  }
  char t[40];
  int p;
  for (p = 1; p <= 17; p++) {
    snprintf(t, sizeof t, "%.*e", p - 1, v);
    if (strtod(t, NULL) == v) break;
  }
  if (p > 17) p = 17;
  snprintf(t, sizeof t, "%.*e", p - 1, v);
  /* t = [-]d[.ddd]e[+-]xx */
  const char *q = t;
  int neg = *q == '-';
  if (neg) q++;
  char dig[24];
  int nd = 0;
  for (; *q && *q != 'e'; q++)
    if (*q != '.') dig[nd++] = *q;
  dig[nd] = 0;
  int x = atoi(q + 1);
  while (nd > 1 && dig[nd - 1] == '0') dig[--nd] = 0;
  char out[64];
  size_t o = 0;
  if (neg) out[o++] = '-';
  if (x >= -4 && x < 16) {
    if (x >= 0) {
      for (int i = 0; i <= x; i++) out[o++] = i < nd ? dig[i] : '0';
      out[o++] = '.';
      if (nd > x + 1)
        for (int i = x + 1; i < nd; i++) out[o++] = dig[i];
      else
        out[o++] = '0';
    } else {
      out[o++] = '0';
      out[o++] = '.';
      for (int i = 0; i < -x - 1; i++) out[o++] = '0';
      for (int i = 0; i < nd; i++) out[o++] = dig[i];
    }
    out[o] = 0;
  } else {
    out[o++] = dig[0];
    if (nd > 1) {
      out[o++] = '.';
      for (int i = 1; i < nd; i++) out[o++] = dig[i];
    }
    snprintf(out + o, sizeof out - o, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
  }
  df_sbuf_addstr(b, out);
}

static int cmp_key(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void dump(df_sbuf *b, const json_t *v, int compact, int sort) {
  const char *isep = compact ? "," : ", ", *ksep = compact ? ":" : ": ";
  switch (json_typeof(v)) {
    case JSON_OBJECT: {
      size_t n = json_object_size(v), k = 0;
      const char **keys = df_xmalloc((n ? n : 1) * sizeof *keys);
      const char *key;
      json_t *val;
      json_object_foreach((json_t *)v, key, val) keys[k++] = key;
      if (sort) qsort(keys, n, sizeof *keys, cmp_key);
      df_sbuf_addstr(b, "{");
      for (size_t i = 0; i < n; i++) {
        if (i) df_sbuf_addstr(b, isep);
        put_string(b, keys[i], strlen(keys[i]));
        df_sbuf_addstr(b, ksep);
        dump(b, json_object_get(v, keys[i]), compact, sort);
      }
      df_sbuf_addstr(b, "}");
      free(keys);
      break;
    }
    case JSON_ARRAY: {
      df_sbuf_addstr(b, "[");
      for (size_t i = 0; i < json_array_size(v); i++) {
        if (i) df_sbuf_addstr(b, isep);
        dump(b, json_array_get(v, i), compact, sort);
      }
      df_sbuf_addstr(b, "]");
      break;
    }
    case JSON_STRING: put_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER: {
      char t[32];
      snprintf(t, sizeof t, "%lld", (long long)json_integer_value(v));
      df_sbuf_addstr(b, t);
      break;
    }
    case JSON_REAL: put_real(b, json_real_value(v)); break;
    case JSON_TRUE: df_sbuf_addstr(b, "true"); break;
    case JSON_FALSE: df_sbuf_addstr(b, "false"); break;
    case JSON_NULL: df_sbuf_addstr(b, "null"); break;
  }
}

char *df_pyjson_dumps(const json_t *v, int compact, int sort_keys, size_t *len) {
  df_sbuf b = {0};
  df_sbuf_add(&b, "", 0);
  dump(&b, v, compact, sort_keys);
  if (len) *len = b.n;
  return b.p;
}

/* The option-table walker (opt_table.h): one parser per value type, so every
 * table refuses a bad value the same way. */
#include "cli/opt_table.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "plan/plan.h"

/* "a|b|c" -> "a, b or c" for messages. */
static void choices_text(const char *arg, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (const char *p = arg; *p && k + 8 < n; p++) {
    if (*p != '|') {
      buf[k++] = *p;
      continue;
    }
    const char *rest = strchr(p + 1, '|');
    const char *sep = rest ? ", " : " or ";
    size_t l = strlen(sep);
    memcpy(buf + k, sep, l);
    k += l;
  }
  buf[k] = 0;
}

static int take_choice(const df_opt *o, const char *v, int *out) {
  const char *p = o->arg;
  size_t vl = strlen(v);
  for (int idx = 0; p; idx++) {
    const char *bar = strchr(p, '|');
    size_t l = bar ? (size_t)(bar - p) : strlen(p);
    if (l == vl && !strncmp(p, v, l)) {
      *out = idx;
      return 0;
    }
    p = bar ? bar + 1 : NULL;
  }
  char c[160];
  choices_text(o->arg, c, sizeof c);
  return df_cli_fail("%s: '%s' is not %s", o->flag, v, c), -1;
}

/* An integer in the row's range: a word is "not a number", a fraction or an
 * integer outside the range "not an integer in [lo, hi]". */
static int take_integer(const df_opt *o, const char *v, long *out) {
  char *end;
  double d = *v ? strtod(v, &end) : 0;
  long lo = (long)o->lo, hi = (long)o->hi;
  if (!*v || *end) return df_cli_fail("%s: '%s' is not a number in [%ld, %ld]", o->flag, v, lo, hi), -1;
  if (!(d >= o->lo && d <= o->hi) || d != (double)(long)d)
    return df_cli_fail("%s: '%s' is not an integer in [%ld, %ld]", o->flag, v, lo, hi), -1;
  *out = (long)d;
  return 0;
}

static int take_real(const df_opt *o, const char *v, double *out) {
  char *end;
  double d = *v ? strtod(v, &end) : 0;
  int low_ok = o->lo_open ? d > o->lo : d >= o->lo;
  if (!*v || *end || !(low_ok && d <= o->hi))
    return df_cli_fail("%s: '%s' is not a number in %c%g, %g]", o->flag, v, o->lo_open ? '(' : '[',
                       o->lo, o->hi), -1;
  *out = d;
  return 0;
}

static int take_value(const df_opt *o, void *dst, const char *v) {
  long n;
  double d;
  switch (o->type) {
  case DF_OPT_SWITCH: *(int *)dst = 1; return 0;
  case DF_OPT_CLEAR: *(int *)dst = 0; return 0;
  case DF_OPT_STR: *(const char **)dst = v; return 0;
  case DF_OPT_INT:
    if (take_integer(o, v, &n)) return -1;
    *(int *)dst = (int)n;
    return 0;
  case DF_OPT_LONG:
    if (take_integer(o, v, &n)) return -1;
    *(long *)dst = n;
    return 0;
  case DF_OPT_MB:
    if (take_integer(o, v, &n)) return -1;
    *(uint64_t *)dst = (uint64_t)n << 20;
    return 0;
  case DF_OPT_SIZE:
    if (df_plan_parse_size(v, (uint64_t *)dst) || !*(uint64_t *)dst)
      return df_cli_fail("%s: '%s' is not a size like 48G or 512M", o->flag, v), -1;
    return 0;
  case DF_OPT_FLOAT:
    if (take_real(o, v, &d)) return -1;
    *(float *)dst = (float)d;
    return 0;
  case DF_OPT_DOUBLE: return take_real(o, v, (double *)dst);
  case DF_OPT_U64: {
    char *end;
    unsigned long long u = *v && *v != '-' ? strtoull(v, &end, 10) : 0;
    if (!*v || *v == '-' || *end) return df_cli_fail("%s: '%s' is not a number", o->flag, v), -1;
    *(uint64_t *)dst = u;
    return 0;
  }
  case DF_OPT_CHOICE: return take_choice(o, v, (int *)dst);
  }
  return -1;
}

int df_opt_take(const df_opt *t, size_t n, void *base, const char *cmd, int argc, char **argv,
                int *i) {
  const char *a = argv[*i];
  for (size_t k = 0; k < n; k++) {
    if (strcmp(a, t[k].flag)) continue;
    const char *v = NULL;
    if (t[k].arg) {
      if (*i + 1 >= argc)
        return df_cli_fail("%s needs a value (see deltafin %s --help)", a, cmd), -1;
      v = argv[++*i];
    }
    return df_opt_value(&t[k], base, v) ? -1 : 1;
  }
  return 0;
}

int df_opt_value(const df_opt *o, void *base, const char *v) {
  return take_value(o, (char *)base + o->off, v);
}

void df_opt_help(const df_opt *t, size_t n, int width, FILE *out) {
  for (size_t k = 0; k < n; k++) {
    if (!t[k].help) continue;
    char lhs[96];
    if (t[k].lhs) snprintf(lhs, sizeof lhs, "%s", t[k].lhs);
    else
      snprintf(lhs, sizeof lhs, "%s%s%s", t[k].flag, t[k].arg ? " " : "", t[k].arg ? t[k].arg : "");
    if ((int)strlen(lhs) <= width) fprintf(out, "  %-*s %s\n", width, lhs, t[k].help);
    else fprintf(out, "  %s\n  %-*s %s\n", lhs, width, "", t[k].help);
  }
}

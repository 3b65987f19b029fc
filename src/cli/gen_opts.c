/* One table of the sampler's numeric options plus the few generation
 * options with their own syntax (seed, temperature, top-p). */
#include "cli/gen_opts.h"

#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* 1 taken, 0 not one of them, -1 a bad value (said). */
static int sample_opt(df_sample_opts *so, const char *a, const char *val) {
  static const struct {
    const char *name;
    double lo, hi;
    int integer;
  } t[] = {{"--top-k", 0, 1 << 24, 1},         {"--min-p", 0, 1, 0},
           {"--repeat-penalty", 1e-3, 100, 0}, {"--repeat-last-n", 0, 1 << 24, 1},
           {"--presence-penalty", -2, 2, 0},   {"--frequency-penalty", -2, 2, 0}};
  int k = 0, n = (int)(sizeof t / sizeof t[0]);
  while (k < n && strcmp(a, t[k].name)) k++;
  if (k == n) return 0;
  char *end;
  double d = strtod(val, &end);
  if (!*val || *end || !(d >= t[k].lo && d <= t[k].hi) || (t[k].integer && d != (double)(long)d)) {
    df_cli_fail("%s: '%s' is not %s in [%g, %g]", a, val, t[k].integer ? "an integer" : "a number",
                t[k].lo, t[k].hi);
    return -1;
  }
  switch (k) {
  case 0: so->top_k = (int)d; break;
  case 1: so->min_p = (float)d; break;
  case 2: so->repeat_penalty = (float)d; break;
  case 3: so->repeat_last_n = (int)d; break;
  case 4: so->presence_penalty = (float)d; break;
  default: so->frequency_penalty = (float)d; break;
  }
  return 1;
}

static const char *const names[] = {"--max-new",     "--prefill-chunk",  "--seed",
                                    "--temperature", "--top-p",          "--top-k",
                                    "--min-p",       "--repeat-penalty", "--repeat-last-n",
                                    "--presence-penalty", "--frequency-penalty"};

int df_cli_gen_opt(df_gen_opts *go, df_sample_opts *so, const char *cmd, int argc, char **argv,
                   int *i) {
  const char *a = argv[*i];
  size_t k = 0, n = sizeof names / sizeof names[0];
  while (k < n && strcmp(a, names[k])) k++;
  if (k == n) return 0;
  if (*i + 1 >= argc) return df_cli_fail("%s needs a value (see deltafin %s --help)", a, cmd), -1;
  const char *val = argv[++*i];
  long v;
  if (!strcmp(a, "--max-new")) {
    if (df_cli_int(a, val, 0, 1 << 24, &v)) return -1;
    go->max_new = (int)v;
  } else if (!strcmp(a, "--prefill-chunk")) {
    if (df_cli_int(a, val, 0, 1 << 20, &v)) return -1;
    go->prefill_chunk = (int)v;
  } else if (!strcmp(a, "--seed")) {
    char *end;
    unsigned long long s = strtoull(val, &end, 10);
    if (!*val || *end) return df_cli_fail("--seed: '%s' is not a number", val), -1;
    go->seed = s;
  } else if (!strcmp(a, "--temperature") || !strcmp(a, "--top-p")) {
    char *end;
    double d = strtod(val, &end);
    if (!*val || *end || !(d >= 0) || d > 100)
      return df_cli_fail("%s: '%s' is not a number in [0, 100]", a, val), -1;
    if (a[2] == 't' && a[3] == 'e') go->temperature = (float)d;
    else {
      if (!(d > 0 && d <= 1)) return df_cli_fail("--top-p: '%s' is not in (0, 1]", val), -1;
      go->top_p = (float)d;
    }
  } else if (sample_opt(so, a, val) < 0) {
    return -1;
  }
  return 1;
}

int df_cli_gen_check(df_gen_opts *go, df_sample_opts *so) {
  /* greedy decoding (the default) never looks at top-p: accepting it alone
   * would silently give a different decoding than the user asked for */
  if ((go->top_p < 1 || so->top_k > 0 || so->min_p > 0) && !(go->temperature > 0))
    return df_cli_fail("%s needs --temperature T > 0 (the default, temperature 0, is greedy "
                       "and ignores it)",
                       go->top_p < 1 ? "--top-p" : so->top_k > 0 ? "--top-k" : "--min-p");
  so->temperature = go->temperature;
  so->top_p = go->top_p;
  go->sampling = so;
  return 0;
}

void df_cli_gen_help(FILE *out, int max_new_default) {
  fprintf(out,
          "  --max-new N          new tokens at most (default %d)\n"
          "  --temperature T      sample with temperature T (default 0 = greedy, exact)\n"
          "  --top-p P            nucleus sampling, P in (0, 1] (default 1 = off; needs\n"
          "                       --temperature > 0)\n"
          "  --seed N             sampling seed (default 0)\n"
          "  --top-k K            keep the K most likely ids (default 0 = off; needs --temperature > 0)\n"
          "  --min-p P            keep ids with p >= P x the top p, P in [0, 1] (default 0 = off;\n"
          "                       needs --temperature > 0)\n"
          "  --repeat-penalty R   divide a positive logit (multiply a negative one) by R for each\n"
          "                       id among the last --repeat-last-n ids (default 1 = off; greedy too)\n"
          "  --repeat-last-n N    the repeat penalty's window (default 64)\n"
          "  --presence-penalty X, --frequency-penalty X\n"
          "                       OpenAI's penalties over the generated ids, X in [-2, 2]\n"
          "                       (default 0 = off; greedy too)\n"
          "  --prefill-chunk N    prompt positions per batch (default 64; 0 = whole prompt)\n",
          max_new_default);
}

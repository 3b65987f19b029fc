/* The generation options as two option tables (opt_table.h): the decode
 * loop's (df_gen_opts) and the sampler's (df_sample_opts). */
#include "cli/gen_opts.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opt_table.h"

#define G(f) offsetof(df_gen_opts, f)
#define S(f) offsetof(df_sample_opts, f)
#define CONT "\n                       " /* a help line's continuation, under the text */

/* In help order: these four, the sampler's, then --prefill-chunk. */
static const df_opt gen_rows[] = {
    {"--max-new", "N", DF_OPT_INT, G(max_new), 0, 1 << 24, 0, "new tokens at most (default %d)",
     NULL},
    {"--temperature", "T", DF_OPT_FLOAT, G(temperature), 0, 100, 0,
     "sample with temperature T (default 0 = greedy, exact)", NULL},
    {"--top-p", "P", DF_OPT_FLOAT, G(top_p), 0, 1, 1,
     "nucleus sampling, P in (0, 1] (default 1 = off; needs" CONT "--temperature > 0)", NULL},
    {"--seed", "N", DF_OPT_U64, G(seed), 0, 0, 0, "sampling seed (default 0)", NULL},
    DF_OPT_PREFILL_CHUNK(DF_OPT_INT, G(prefill_chunk),
                         "prompt positions per batch (default 64; 0 = whole prompt)"),
};
#define N_GEN_HEAD 4 /* the rows printed before the sampler's */

static const df_opt sample_rows[] = {
    {"--top-k", "K", DF_OPT_INT, S(top_k), 0, 1 << 24, 0,
     "keep the K most likely ids (default 0 = off; needs --temperature > 0)", NULL},
    {"--min-p", "P", DF_OPT_FLOAT, S(min_p), 0, 1, 0,
     "keep ids with p >= P x the top p, P in [0, 1] (default 0 = off;" CONT
     "needs --temperature > 0)", NULL},
    {"--repeat-penalty", "R", DF_OPT_FLOAT, S(repeat_penalty), 1e-3, 100, 0,
     "divide a positive logit (multiply a negative one) by R for each" CONT
     "id among the last --repeat-last-n ids (default 1 = off; greedy too)", NULL},
    {"--repeat-last-n", "N", DF_OPT_INT, S(repeat_last_n), 0, 1 << 24, 0,
     "the repeat penalty's window (default 64)", NULL},
    {"--presence-penalty", "X", DF_OPT_FLOAT, S(presence_penalty), -2, 2, 0,
     "OpenAI's penalties over the generated ids, X in [-2, 2]" CONT "(default 0 = off; greedy too)",
     "--presence-penalty X, --frequency-penalty X"},
    {"--frequency-penalty", "X", DF_OPT_FLOAT, S(frequency_penalty), -2, 2, 0, NULL, NULL},
};
#define NROWS(t) (sizeof t / sizeof t[0])

int df_cli_gen_opt(df_gen_opts *go, df_sample_opts *so, const char *cmd, int argc, char **argv,
                   int *i) {
  int r = df_opt_take(gen_rows, NROWS(gen_rows), go, cmd, argc, argv, i);
  return r ? r : df_opt_take(sample_rows, NROWS(sample_rows), so, cmd, argc, argv, i);
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
  df_opt head[N_GEN_HEAD];
  memcpy(head, gen_rows, sizeof head);
  char max_new[64];
  snprintf(max_new, sizeof max_new, "new tokens at most (default %d)", max_new_default);
  head[0].help = max_new; /* the command's default */
  df_opt_help(head, N_GEN_HEAD, 20, out);
  df_opt_help(sample_rows, NROWS(sample_rows), 20, out);
  df_opt_help(gen_rows + N_GEN_HEAD, NROWS(gen_rows) - N_GEN_HEAD, 20, out);
}

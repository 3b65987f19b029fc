/* The generation options (token budget, prefill batch, the sampler's policy)
 * as every command that generates text spells them (run, chat): one parser
 * and one help section, so the commands cannot drift apart. */
#ifndef DF_CLI_GEN_OPTS_H
#define DF_CLI_GEN_OPTS_H

#include <stdio.h>

#include "engine/engine.h"
#include "engine/sample.h"

/* Tries argv[*i] as a generation option: 1 taken (its value consumed, *i on
 * it), 0 not one, -1 after printing an error. cmd names the command. */
int df_cli_gen_opt(df_gen_opts *go, df_sample_opts *so, const char *cmd, int argc, char **argv,
                   int *i);
/* After parsing: refuses options greedy decoding would silently ignore, and
 * points go->sampling at so (which must outlive go). 0 or 1 (said). */
int df_cli_gen_check(df_gen_opts *go, df_sample_opts *so);
/* The help lines; max_new_default is the command's --max-new default. */
void df_cli_gen_help(FILE *out, int max_new_default);

#endif

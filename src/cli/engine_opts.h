/* The engine's command-line options: one parser and one help section for
 * every command that opens an engine (run, serve, bench --model, ...), so each
 * accepts the same spellings with the same validation. */
#ifndef DF_CLI_ENGINE_OPTS_H
#define DF_CLI_ENGINE_OPTS_H

#include <stdio.h>

#include "engine/engine.h"

/* An engine option a command cannot honour, and why (said to the user). */
typedef struct df_cli_refuse {
  const char *flag; /* e.g. "--trace" */
  const char *why;  /* e.g. "the bench records its own reads" */
} df_cli_refuse;

/* Tries argv[*i] as an engine option. Returns 1 when it was one (its value
 * is consumed: *i then points at the value), 0 when it is not an engine
 * option (the command parses it itself), -1 after printing an error (bad
 * value, missing value, or an option listed in refuse, a {NULL, NULL}
 * terminated list or NULL). cmd names the command in messages. */
int df_cli_engine_opt(df_engine_opts *o, const char *cmd, const df_cli_refuse *refuse, int argc,
                      char **argv, int *i);

/* Prints the engine options' help section (same text for every command);
 * options in refuse are left out. */
void df_cli_engine_help(FILE *out, const df_cli_refuse *refuse);

#endif

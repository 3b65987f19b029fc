/* The engine's command-line options: one parser and one help section for
 * every command that opens an engine (run, serve, bench --model, ...), so each
 * accepts the same spellings with the same validation. */
#ifndef DF_CLI_ENGINE_OPTS_H
#define DF_CLI_ENGINE_OPTS_H

#include <stdio.h>

#include "engine/engine.h"

/* Tries argv[*i] as an engine option. Returns 1 when it was one (its value
 * is consumed: *i then points at the value), 0 when it is not an engine
 * option (the command parses it itself), -1 after printing an error (bad or
 * missing value). cmd names the command in messages. */
int df_cli_engine_opt(df_engine_opts *o, const char *cmd, int argc, char **argv, int *i);

/* Prints the engine options' help section (the same text for every command). */
void df_cli_engine_help(FILE *out);

#endif

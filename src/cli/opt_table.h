/* Option tables: a command's options as rows (spelling, value placeholder,
 * typed destination with its range, help line), parsed and printed by one
 * walker, so a value is checked once, with one message naming the option and
 * its range, wherever it is accepted. engine_opts.c is the engine's table;
 * gen_opts.c the generation options'; plan, inspect, serve, bench, eval and
 * logits keep their own rows the same way. */
#ifndef DF_CLI_OPT_TABLE_H
#define DF_CLI_OPT_TABLE_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
  DF_OPT_SWITCH, /* int = 1 */
  DF_OPT_CLEAR,  /* int = 0 (a switch that undoes another) */
  DF_OPT_STR,    /* const char * = the value */
  DF_OPT_INT,    /* int in [lo, hi] */
  DF_OPT_LONG,   /* long in [lo, hi] */
  DF_OPT_MB,     /* uint64_t bytes from a MiB count in [lo, hi] */
  DF_OPT_SIZE,   /* uint64_t bytes from a size like 48G or 512M (not 0) */
  DF_OPT_FLOAT,  /* float in [lo, hi] ((lo, hi] with lo_open) */
  DF_OPT_DOUBLE, /* double, the same */
  DF_OPT_U64,    /* uint64_t, any decimal */
  DF_OPT_CHOICE, /* int = the index of the value among arg's "a|b|c" */
} df_opt_type;

typedef struct df_opt {
  const char *flag;
  const char *arg;  /* value placeholder; NULL for a switch */
  df_opt_type type;
  size_t off;       /* where the value goes in the command's options struct */
  double lo, hi;
  int lo_open;      /* the range excludes lo */
  const char *help; /* NULL: not listed (described by the row before) */
  const char *lhs;  /* the help's left column when not "flag arg" */
} df_opt;

/* --prefill-chunk, one row for every command that has it (run, chat, bench,
 * eval, logits): positions per forward batch, 0 = the whole prompt. */
#define DF_OPT_PREFILL_CHUNK(type_, off_, help_) \
  {"--prefill-chunk", "N", (type_), (off_), 0, 1 << 20, 0, (help_), NULL}

/* Tries argv[*i] against the table: 1 taken (a value consumed, *i on it), 0
 * not in the table, -1 after printing an error (bad or missing value). base
 * is the struct the rows' offsets point into; cmd names the command. */
int df_opt_take(const df_opt *t, size_t n, void *base, const char *cmd, int argc, char **argv,
                int *i);
/* Parses v as row o's value into base (for a command whose loop has already
 * taken the value): 0, or -1 after printing the error. */
int df_opt_value(const df_opt *o, void *base, const char *v);
/* The rows' help lines, the left column `width` wide ("  %-*s %s"); a left
 * column wider than that gets a line of its own. */
void df_opt_help(const df_opt *t, size_t n, int width, FILE *out);

#endif

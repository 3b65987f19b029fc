/* Subcommands: one file each (cmd_<name>.c), dispatched by main.c. */
#ifndef DF_CLI_CLI_H
#define DF_CLI_CLI_H

#include <stddef.h>

typedef struct df_cmd {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv); /* argv[0] is the command name */
  void (*help)(void);
} df_cmd;

#define DF_CMD_DECL(n) \
  int df_cmd_##n(int argc, char **argv); \
  void df_cmd_##n##_help(void);

DF_CMD_DECL(tokenize)
DF_CMD_DECL(detokenize)
DF_CMD_DECL(template)
DF_CMD_DECL(inspect)
DF_CMD_DECL(make_model)
DF_CMD_DECL(run)
DF_CMD_DECL(chat)
DF_CMD_DECL(convert_spine)
DF_CMD_DECL(serve)
DF_CMD_DECL(pack)
DF_CMD_DECL(doctor)
DF_CMD_DECL(bench)
DF_CMD_DECL(trace)
DF_CMD_DECL(setup)
DF_CMD_DECL(warm)
DF_CMD_DECL(record_sums)
DF_CMD_DECL(plan)
DF_CMD_DECL(eval)
DF_CMD_DECL(draft_run)
DF_CMD_DECL(draft_tokenize)
DF_CMD_DECL(logits)

/* Prints "deltafin: <msg>" on stderr and returns 1 (the exit status). */
int df_cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* True if argv contains -h or --help. */
int df_cli_wants_help(int argc, char **argv);
/* Parses a non-negative integer option value or fails with a clear message. */
int df_cli_int(const char *opt, const char *val, long lo, long hi, long *out);

/* Appends the token ids in s (separated by commas and/or whitespace) to *ids
 * (*n used of *cap, grown as needed); a bad one fails naming cmd and it. */
int df_cli_parse_ids(const char *cmd, const char *s, int **ids, size_t *n, size_t *cap);

/* Reads a whole input file, or standard input for "-"; prints the error itself. */
int df_cli_read_input(const char *path, char **buf, size_t *len);

#endif

/* Errors: every fallible function takes a df_err* and returns 0 or -1.
 * The message is one line that names the file, tensor or field at fault,
 * so the CLI can print it as-is. */
#ifndef DF_BASE_ERR_H
#define DF_BASE_ERR_H

#include <stddef.h>

typedef struct df_err {
  char msg[1024];
} df_err;

/* Sets the message (printf-style) and returns -1, so `return df_err_set(...)` works. */
int df_err_set(df_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends context ("loading shard x: " + old message); returns -1. */
int df_err_prefix(df_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sets message from errno: "<what>: <strerror>"; returns -1. */
int df_err_errno(df_err *e, const char *what, ...) __attribute__((format(printf, 2, 3)));

#endif

#include "base/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int df_err_set(df_err *e, const char *fmt, ...) {
  if (!e) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return -1;
}

int df_err_prefix(df_err *e, const char *fmt, ...) {
  if (!e) return -1;
  char pre[512], old[sizeof e->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  memcpy(old, e->msg, sizeof old);
  /* Truncation is acceptable for an over-long message; it stays one line. */
  size_t pl = strlen(pre);
  if (pl >= sizeof e->msg) pl = sizeof e->msg - 1;
  memcpy(e->msg, pre, pl);
  size_t ol = strnlen(old, sizeof old - 1);
  if (ol > sizeof e->msg - 1 - pl) ol = sizeof e->msg - 1 - pl;
  memcpy(e->msg + pl, old, ol);
  e->msg[pl + ol] = 0;
  return -1;
}

int df_err_errno(df_err *e, const char *what, ...) {
  int saved = errno;
  if (!e) return -1;
  char w[768];
  va_list ap;
  va_start(ap, what);
  vsnprintf(w, sizeof w, what, ap);
  va_end(ap);
  const char *why = strerror(saved);
  size_t wl = strnlen(w, sizeof w), yl = strlen(why);
  if (wl > sizeof e->msg - 4 - yl) wl = sizeof e->msg > 4 + yl ? sizeof e->msg - 4 - yl : 0;
  memcpy(e->msg, w, wl);
  memcpy(e->msg + wl, ": ", 2);
  memcpy(e->msg + wl + 2, why, yl + 1);
  return -1;
}

/* Logging to stderr and progress reporting for long work.
 * Progress draws a bar with rate and ETA on a terminal and prints plain
 * periodic lines when stderr is not a terminal. */
#ifndef DF_BASE_LOG_H
#define DF_BASE_LOG_H

#include <stdint.h>

extern int df_log_verbose; /* 0 quiet, 1 normal, 2 debug */

void df_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void df_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void df_log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

typedef struct df_progress {
  const char *label;
  uint64_t total, done;
  double t_start, t_last;
  int tty;
} df_progress;

void df_progress_begin(df_progress *p, const char *label, uint64_t total);
void df_progress_update(df_progress *p, uint64_t done); /* rate-limited redraw */
void df_progress_end(df_progress *p);
/* Ends at done, not at the total (the work stopped, e.g. failed). */
void df_progress_stop(df_progress *p, uint64_t done);

#endif

#include "base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "base/util.h"

int df_log_verbose = 1;

/* A progress bar drawn on a terminal without its newline yet: a message
 * clears that line first, the next redraw puts the bar back under it. */
static _Atomic int g_bar_open;

static void vlog(const char *tag, const char *fmt, va_list ap) {
  flockfile(stderr); /* one message, not interleaved with a redraw from another thread */
  if (atomic_exchange(&g_bar_open, 0)) fputs("\r\033[K", stderr);
  fprintf(stderr, "deltafin: %s", tag);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  funlockfile(stderr);
}

void df_log_info(const char *fmt, ...) {
  if (df_log_verbose < 1) return;
  va_list ap;
  va_start(ap, fmt);
  vlog("", fmt, ap);
  va_end(ap);
}

void df_log_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog("warning: ", fmt, ap);
  va_end(ap);
}

void df_log_debug(const char *fmt, ...) {
  if (df_log_verbose < 2) return;
  va_list ap;
  va_start(ap, fmt);
  vlog("debug: ", fmt, ap);
  va_end(ap);
}

void df_progress_begin(df_progress *p, const char *label, uint64_t total) {
  p->label = label;
  p->total = total;
  p->done = 0;
  p->t_start = p->t_last = df_now();
  p->tty = isatty(2);
}

static void draw(df_progress *p, int final) {
  double el = df_now() - p->t_start;
  double rate = el > 0 ? (double)p->done / el : 0;
  double eta = rate > 0 && p->total > p->done ? (double)(p->total - p->done) / rate : 0;
  double frac = p->total ? (double)p->done / (double)p->total : 1.0;
  if (p->tty) {
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    flockfile(stderr);
    /* \033[K: a shorter line must not leave the end of a longer one */
    fprintf(stderr, "\r%s [%s] %5.1f%% %8.1f MB/s ETA %5.0fs\033[K", p->label, bar, frac * 100,
            rate / 1e6, eta);
    if (final) fputc('\n', stderr);
    atomic_store(&g_bar_open, !final);
    funlockfile(stderr);
  } else {
    fprintf(stderr, "%s: %.1f%% (%.1f MB/s, ETA %.0fs)\n", p->label, frac * 100, rate / 1e6, eta);
  }
  fflush(stderr);
}

void df_progress_update(df_progress *p, uint64_t done) {
  p->done = done;
  double now = df_now();
  double every = p->tty ? 0.2 : 5.0;
  if (df_log_verbose < 1 || now - p->t_last < every) return;
  p->t_last = now;
  draw(p, 0);
}

void df_progress_end(df_progress *p) {
  p->done = p->total;
  if (df_log_verbose >= 1 && (p->tty || df_now() - p->t_start > 1.0)) draw(p, 1);
}

void df_progress_stop(df_progress *p, uint64_t done) {
  p->done = done < p->total ? done : p->total;
  if (df_log_verbose >= 1 && (p->tty || df_now() - p->t_start > 1.0)) draw(p, 1);
}

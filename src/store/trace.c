/* The store's trace writer (the format is in trace.h; the report that
 * reads it is the trace tool's, src/trace). */
#include "store/trace.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

struct df_trace {
  FILE *f;
  pthread_mutex_t mu;
};

df_trace *df_trace_open(const char *path, int ndrives, char *const *drive_paths,
                        const char *emulated, const char *io, df_err *e) {
  FILE *f = fopen(path, "w");
  if (!f) {
    df_err_errno(e, "--trace %s", path);
    return NULL;
  }
  df_trace *t = df_xcalloc(1, sizeof *t);
  t->f = f;
  pthread_mutex_init(&t->mu, NULL);
  json_t *h = json_object(), *d = json_array();
  json_object_set_new(h, "k", json_string("head"));
  json_object_set_new(h, "version", json_integer(1));
  for (int i = 0; i < ndrives; i++) json_array_append_new(d, json_string(drive_paths[i]));
  json_object_set_new(h, "drives", d);
  json_object_set_new(h, "emulated", emulated ? json_string(emulated) : json_null());
  json_object_set_new(h, "io", json_string(io));
  json_dumpf(h, f, JSON_COMPACT | JSON_PRESERVE_ORDER);
  fputc('\n', f);
  json_decref(h);
  return t;
}

void df_trace_read(df_trace *t, double ts, int layer, int expert, int drive, uint64_t bytes,
                   int demand, double wait, double service, const df_trace_when *w, int ok) {
  static const char *const cls[] = {"demand", "spine", "prefetch"};
  pthread_mutex_lock(&t->mu);
  fprintf(t->f,
          "{\"k\":\"read\",\"t\":%.6f,\"layer\":%d,\"expert\":%d,\"drive\":%d,\"bytes\":%llu,"
          "\"demand\":%d,\"wait\":%.6f,\"service\":%.6f,\"class\":\"%s\",\"queued\":%.6f,"
          "\"start\":%.6f,\"ok\":%d}\n",
          ts, layer, expert, drive, (unsigned long long)bytes, demand, wait, service,
          cls[w->cls >= 0 && w->cls < 3 ? w->cls : 0], w->queued, w->start, ok);
  pthread_mutex_unlock(&t->mu);
}

void df_trace_sample(df_trace *t, double ts, int drive, uint64_t bytes, uint64_t reads,
                     int inflight, int queued) {
  pthread_mutex_lock(&t->mu);
  fprintf(t->f,
          "{\"k\":\"sample\",\"t\":%.6f,\"drive\":%d,\"bytes\":%llu,\"reads\":%llu,"
          "\"inflight\":%d,\"queued\":%d}\n",
          ts, drive, (unsigned long long)bytes, (unsigned long long)reads, inflight, queued);
  pthread_mutex_unlock(&t->mu);
}

void df_trace_batch(df_trace *t, double ts, int layer, int n, double wait) {
  pthread_mutex_lock(&t->mu);
  fprintf(t->f, "{\"k\":\"batch\",\"t\":%.6f,\"layer\":%d,\"n\":%d,\"wait\":%.6f}\n", ts, layer, n,
          wait);
  pthread_mutex_unlock(&t->mu);
}

void df_trace_close(df_trace *t) {
  if (!t) return;
  fclose(t->f);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

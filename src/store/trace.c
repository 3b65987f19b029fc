/* The store's trace writer (the format is in trace.h; the report that
 * reads it is the trace tool's, src/trace). */
#include "store/trace.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "base/util.h"

struct df_trace {
  FILE *f;
  pthread_mutex_t mu;
};

static int cmd_argc;
static char **cmd_argv;

void df_trace_set_command(int argc, char **argv) {
  cmd_argc = argc;
  cmd_argv = argv;
}

/* The machine the trace is written on: CPU model, cores, memory, kernel. */
static json_t *host_json(void) {
  json_t *h = json_object();
  char cpu[256] = "?";
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f)) {
      char *c = strchr(line, ':');
      if (strncmp(line, "model name", 10) || !c) continue;
      c++;
      while (*c == ' ' || *c == '\t') c++;
      snprintf(cpu, sizeof cpu, "%s", c);
      cpu[strcspn(cpu, "\n")] = 0;
      break;
    }
    fclose(f);
  }
  json_object_set_new(h, "cpu", json_string(cpu));
  json_object_set_new(h, "cores", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  json_object_set_new(h, "mem_bytes", json_integer(pages > 0 && psz > 0 ? (json_int_t)pages * psz : 0));
  struct utsname u;
  json_object_set_new(h, "kernel", uname(&u) ? json_null() : json_string(u.release));
  return h;
}

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
  if (cmd_argv) {
    json_t *c = json_array();
    for (int i = 0; i < cmd_argc; i++) json_array_append_new(c, json_string(cmd_argv[i]));
    json_object_set_new(h, "command", c);
  }
  json_object_set_new(h, "host", host_json());
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
          "\"start\":%.6f,\"ok\":%d",
          ts, layer, expert, drive, (unsigned long long)bytes, demand, wait, service,
          cls[w->cls >= 0 && w->cls < 3 ? w->cls : 0], w->queued, w->start, ok);
  if (w->dev_bytes) fprintf(t->f, ",\"dev\":%llu", (unsigned long long)w->dev_bytes);
  if (w->xfer1 > 0) fprintf(t->f, ",\"xfer\":[%.9f,%.9f]", w->xfer0, w->xfer1);
  fputs("}\n", t->f);
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

void df_trace_batch_ex(df_trace *t, double ts, int layer, int n, double wait, long pass, int rows,
                       uint64_t hits, uint64_t requests, uint64_t resident) {
  pthread_mutex_lock(&t->mu);
  fprintf(t->f,
          "{\"k\":\"batch\",\"t\":%.6f,\"layer\":%d,\"n\":%d,\"wait\":%.6f,\"pass\":%ld,\"rows\":%d,"
          "\"hits\":%llu,\"requests\":%llu,\"resident\":%llu}\n",
          ts, layer, n, wait, pass, rows, (unsigned long long)hits, (unsigned long long)requests,
          (unsigned long long)resident);
  pthread_mutex_unlock(&t->mu);
}

void df_trace_mark(df_trace *t, double ts, const char *kind, int i) {
  pthread_mutex_lock(&t->mu);
  if (!strcmp(kind, "gen"))
    fprintf(t->f, "{\"k\":\"gen\",\"t\":%.6f,\"prompt\":%d}\n", ts, i);
  else
    fprintf(t->f, "{\"k\":\"token\",\"t\":%.6f,\"i\":%d,\"phase\":\"%s\"}\n", ts, i,
            i == 1 ? "prefill" : "decode");
  pthread_mutex_unlock(&t->mu);
}

void df_trace_draft(df_trace *t, double ts, int K, double tpp, const char *why) {
  pthread_mutex_lock(&t->mu);
  fprintf(t->f, "{\"k\":\"draft\",\"t\":%.6f,\"K\":%d,\"tpp\":%.3f,\"why\":\"%s\"}\n", ts, K,
          tpp, why);
  pthread_mutex_unlock(&t->mu);
}

void df_trace_wasted(df_trace *t, double ts, int layer, int expert, uint64_t bytes) {
  pthread_mutex_lock(&t->mu);
  fprintf(t->f, "{\"k\":\"wasted\",\"t\":%.6f,\"layer\":%d,\"expert\":%d,\"bytes\":%llu}\n", ts,
          layer, expert, (unsigned long long)bytes);
  pthread_mutex_unlock(&t->mu);
}

void df_trace_recall(df_trace *t, const char *pred, const double *r, int n) {
  pthread_mutex_lock(&t->mu);
  fprintf(t->f, "{\"k\":\"recall\",\"pred\":\"%s\",\"per_layer\":[", pred);
  for (int l = 0; l < n; l++) {
    if (r[l] >= 0) fprintf(t->f, "%s%.6f", l ? "," : "", r[l]);
    else fprintf(t->f, "%snull", l ? "," : "");
  }
  fprintf(t->f, "]}\n");
  pthread_mutex_unlock(&t->mu);
}

void df_trace_end(df_trace *t, double ts, const double *rate, int ndrives) {
  pthread_mutex_lock(&t->mu);
  fprintf(t->f, "{\"k\":\"end\",\"t\":%.6f,\"rate\":[", ts);
  for (int i = 0; i < ndrives; i++) fprintf(t->f, "%s%.0f", i ? "," : "", rate[i]);
  fprintf(t->f, "]}\n");
  pthread_mutex_unlock(&t->mu);
}

void df_trace_close(df_trace *t) {
  if (!t) return;
  fclose(t->f);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

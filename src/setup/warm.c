#include "setup/warm.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "remote/fetcher.h"
#include "store/source.h"
#include "store/store.h"

static int cmp_item(const void *a, const void *b) {
  const df_warm_item *x = a, *y = b;
  if (x->uses != y->uses) return x->uses > y->uses ? -1 : 1;
  if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
  return (x->expert > y->expert) - (x->expert < y->expert);
}

int df_warm_trace_uses(const char *path, df_warm_item **out, int *n, df_err *e) {
  char *buf;
  size_t len;
  if (df_file_read(path, &buf, &len, e)) return -1;
  df_warm_item *v = NULL;
  int nv = 0, cap = 0, lineno = 0;
  int rc = 0;
  for (char *line = buf; line < buf + len && !rc;) {
    char *nl = memchr(line, '\n', (size_t)(buf + len - line));
    size_t ll = nl ? (size_t)(nl - line) : (size_t)(buf + len - line);
    lineno++;
    if (ll) {
      json_error_t je;
      json_t *o = json_loadb(line, ll, 0, &je);
      if (!o) {
        rc = df_err_set(e, "%s: line %d is not JSON (%s); is it a trace from run/serve --trace?",
                        path, lineno, je.text);
        break;
      }
      const char *k = json_string_value(json_object_get(o, "k"));
      if (k && !strcmp(k, "read") && json_integer_value(json_object_get(o, "demand")) == 1 &&
          json_integer_value(json_object_get(o, "ok")) == 1) {
        json_t *jl = json_object_get(o, "layer"), *jx = json_object_get(o, "expert");
        if (!json_is_integer(jl) || !json_is_integer(jx)) {
          json_decref(o);
          rc = df_err_set(e, "%s: line %d: a read without integer layer and expert", path, lineno);
          break;
        }
        int L = (int)json_integer_value(jl), X = (int)json_integer_value(jx);
        int found = 0;
        for (int i = 0; i < nv && !found; i++)
          if (v[i].layer == L && v[i].expert == X) v[i].uses++, found = 1;
        if (!found) {
          if (nv == cap) cap = cap ? 2 * cap : 256, v = df_xrealloc(v, (size_t)cap * sizeof *v);
          v[nv++] = (df_warm_item){L, X, 1};
        }
      }
      json_decref(o);
    }
    line = nl ? nl + 1 : buf + len;
  }
  free(buf);
  if (rc) {
    free(v);
    return -1;
  }
  if (nv) qsort(v, (size_t)nv, sizeof *v, cmp_item);
  *out = v;
  *n = nv;
  return 0;
}

int df_warm_run(const char *dir, const char *trace_path, int fetch, int progress,
                df_warm_item **missing, df_warm_report *rep, df_err *e) {
  memset(rep, 0, sizeof *rep);
  *missing = NULL;
  double t0 = df_now();
  df_warm_item *used = NULL;
  int nused = 0;
  if (df_warm_trace_uses(trace_path, &used, &nused, e)) return -1;
  rep->needed = nused;
  df_config c;
  df_st_set set;
  memset(&set, 0, sizeof set);
  int rc = df_config_load_dir(&c, dir, e);
  if (rc) {
    free(used);
    return -1;
  }
  if (df_st_set_open(&set, dir, e)) {
    free(used);
    return -1;
  }
  df_fetcher *f = NULL;
  df_src_loc *loc = NULL;
  df_fetch_req *q = NULL;
  rc = -1;
  int nk = (c.n_layers - c.first_k_dense) * c.n_experts;
  if (nk <= 0) {
    df_err_set(e, "%s: the model has no routed experts", dir);
    goto out;
  }
  loc = df_xmalloc((size_t)nk * sizeof *loc);
  if (df_src_locate(&set, &c, loc, e)) goto out;
  int fo = df_fetcher_open(&f, dir, &set, e);
  if (fo < 0) goto out;
  if (f && df_fetcher_set_verify(f, DF_SVERIFY_AUTO, 1, e)) goto out;
  df_expert_layout lay;
  df_expert_layout_of(&c, &lay);
  df_warm_item *miss = df_xmalloc((size_t)(nused ? nused : 1) * sizeof *miss);
  q = df_xmalloc((size_t)(nused ? nused : 1) * sizeof *q);
  int nm = 0;
  for (int i = 0; i < nused; i++) {
    int L = used[i].layer, X = used[i].expert;
    if (L < c.first_k_dense || L >= c.n_layers || X < 0 || X >= c.n_experts) {
      free(miss);
      df_err_set(e, "%s: layer %d expert %d is not a routed expert of %s (a trace of another model?)",
                 trace_path, L, X, dir);
      goto out;
    }
    const df_src_loc *l = &loc[(L - c.first_k_dense) * c.n_experts + X];
    uint64_t xxh;
    if (f && !df_fetcher_local(f, l->file, l->off, lay.total, &xxh)) {
      q[nm] = (df_fetch_req){l->file, l->off, lay.total, L, X};
      miss[nm++] = used[i];
    }
  }
  rep->missing = nm;
  *missing = miss;
  int take = fetch < nm ? fetch : nm;
  if (take > 0) {
    df_progress pr;
    df_progress_begin(&pr, "warm", (uint64_t)take * lay.total);
    if (!progress) pr.tty = 0;
    /* batches of 16 records: progress moves, and adjacent ones still coalesce */
    for (int i = 0; i < take; i += 16) {
      int k = take - i < 16 ? take - i : 16;
      if (df_fetcher_fetch(f, q + i, k, e)) goto out;
      rep->fetched += k;
      rep->bytes += (uint64_t)k * lay.total;
      df_progress_update(&pr, rep->bytes);
    }
    df_progress_end(&pr);
  }
  rc = 0;
out:
  rep->seconds = df_now() - t0;
  df_fetcher_close(f);
  free(q);
  free(loc);
  free(used);
  df_st_set_close(&set);
  return rc;
}

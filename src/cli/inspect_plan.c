/* The memory plan `inspect` shows: the checkpoint's spine loaded (mapped,
 * checked, nothing read) and planned for this machine's memory or
 * --mem-limit, decode-sized (one row per pass). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/inspect_plan.h"
#include "model/k3.h"
#include "plan/plan.h"
#include "store/store.h"

char *df_cli_inspect_plan(const df_st_set *set, const df_config *c, const char *dir,
                          uint64_t mem_limit, json_t **json_out) {
  *json_out = NULL;
  df_err e;
  char src[256] = "--mem-limit";
  if (!mem_limit && df_plan_mem_detect(&mem_limit, src, sizeof src, &e)) {
    *json_out = json_pack("{s:s}", "error", e.msg);
    return df_xstrdup(e.msg);
  }
  df_k3 *m = NULL;
  if (df_k3_load(&m, set, c, 0, dir, &e)) {
    char *t = df_xmalloc(sizeof e.msg + 64);
    snprintf(t, sizeof e.msg + 64, "plan     not available: %s\n", e.msg);
    *json_out = json_pack("{s:s}", "error", e.msg);
    return t;
  }
  df_plan_in in;
  df_k3_plan_input(m, &in);
  df_expert_layout lay;
  df_expert_layout_of(c, &lay);
  in.expert_record_bytes = DF_IO_ROUND_UP(lay.total);
  in.expert_total_bytes =
      in.expert_record_bytes * (uint64_t)c->n_experts * (uint64_t)(c->n_layers - c->first_k_dense);
  in.mem_limit = mem_limit;
  in.cache_req = -1;
  in.cache_default = (int64_t)in.expert_total_bytes;
  in.max_rows = 1;
  df_plan p;
  char *t;
  if (df_plan_make(&p, &in, &e)) {
    t = df_xmalloc(sizeof e.msg + 64);
    snprintf(t, sizeof e.msg + 64, "plan     %s\n", e.msg);
    *json_out = json_pack("{s:s}", "error", e.msg);
  } else {
    t = df_plan_text(&p);
    char *j = df_plan_json(&p);
    *json_out = json_loads(j, 0, NULL);
    free(j);
    if (*json_out) json_object_set_new(*json_out, "memory_source", json_string(src));
  }
  df_plan_free(&p);
  df_k3_free(m);
  return t;
}

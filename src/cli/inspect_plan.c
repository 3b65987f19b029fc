/* The memory plan `inspect` shows: the checkpoint's spine loaded (mapped,
 * checked, nothing read) and planned for this machine's memory or
 * --mem-limit, decode-sized (one row per pass). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/inspect_plan.h"
#include "model/model.h"
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
  df_model *m = NULL;
  if (df_model_open_k3(&m, set, c, 0, dir, NULL, 32, &e)) {
    char *t = df_xmalloc(sizeof e.msg + 64);
    snprintf(t, sizeof e.msg + 64, "plan     not available: %s\n", e.msg);
    *json_out = json_pack("{s:s}", "error", e.msg);
    return t;
  }
  df_plan_in in;
  df_model_plan_req rq = {.mem_limit = mem_limit, .cache_req = -1, .cache_default = -1, .max_rows = 1};
  df_model_plan_in(m, &rq, &in);
  df_plan p;
  char *t;
  if (df_plan_make(&p, &in, &e)) {
    t = df_xmalloc(sizeof e.msg + 64);
    snprintf(t, sizeof e.msg + 64, "plan     %s\n", e.msg);
    *json_out = json_pack("{s:s}", "error", e.msg);
  } else {
    char *pt = df_plan_text(&p), *st = df_plan_state_text(c, 0);
    t = df_xmalloc(strlen(pt) + strlen(st) + 1);
    strcpy(t, pt);
    strcat(t, st);
    free(pt);
    free(st);
    char *j = df_plan_json(&p), *sj = df_plan_state_json(c, 0);
    *json_out = json_loads(j, 0, NULL);
    free(j);
    if (*json_out) {
      json_object_set_new(*json_out, "memory_source", json_string(src));
      json_t *sv = json_loads(sj, 0, NULL);
      if (sv) json_object_set_new(*json_out, "sequence_state", sv);
    }
    free(sj);
  }
  df_plan_free(&p);
  df_model_free(m);
  return t;
}

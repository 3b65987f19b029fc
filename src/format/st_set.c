/* A checkpoint folder as one set of safetensors shards: the index
 * (model.safetensors.index.json) or the single file, every tensor found by
 * name across the shards, each name in exactly one shard. */
#include "format/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

/* --------------------------------------------------------------------- set */


static int cmp_tensor_pp_name(const void *a, const void *b) {
  return strcmp((*(const df_tensor *const *)a)->name, (*(const df_tensor *const *)b)->name);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Shard names come from a file we did not write: keep them inside dir. */
static int shard_name_ok(const char *s) {
  return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

int df_st_is_vision_name(const char *n) {
  return !strncmp(n, "vision_tower.", 13) || !strncmp(n, "mm_projector.", 13);
}

static int set_index_files(df_st_set *s, const json_t *wm, const char *ipath, df_err *e) {
  size_t n = json_object_size(wm);
  const char **names = df_xcalloc(n ? n : 1, sizeof *names);
  size_t k = 0;
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)wm, key, v) {
    if (!json_is_string(v)) {
      free(names);
      return df_err_set(e, "%s: weight_map entry '%s' is not a string", ipath, key);
    }
    if (!shard_name_ok(json_string_value(v))) {
      free(names);
      return df_err_set(e, "%s: weight_map entry '%s' names shard '%.200s', not a file name in "
                        "the model directory", ipath, key, json_string_value(v));
    }
    names[k++] = json_string_value(v);
  }
  qsort(names, k, sizeof *names, cmp_str);
  size_t u = 0;
  for (size_t i = 0; i < k; i++)
    if (!u || strcmp(names[u - 1], names[i])) names[u++] = names[i];
  /* a shard is needed when some text tensor is in it; remember one for messages */
  const char **text_of = df_xcalloc(u ? u : 1, sizeof *text_of);
  json_object_foreach((json_t *)wm, key, v) {
    if (df_st_is_vision_name(key)) continue;
    const char *sh = json_string_value(v);
    const char **hit = bsearch(&sh, names, u, sizeof *names, cmp_str);
    if (hit && !text_of[hit - names]) text_of[hit - names] = key;
  }
  s->files = df_xcalloc(u ? u : 1, sizeof *s->files);
  for (size_t i = 0; i < u; i++) s->files[i].fd = -1;
  int rc = 0;
  for (size_t i = 0; i < u && rc == 0; i++) {
    char *p = df_path_join(s->dir, names[i]);
    if (!df_file_exists(p)) {
      if (!text_of[i]) { /* vision only: not needed by a text-only engine */
        s->skipped = df_xrealloc(s->skipped, (size_t)(s->nskipped + 1) * sizeof *s->skipped);
        s->skipped[s->nskipped++] = df_xstrdup(names[i]);
      } else {
        rc = df_err_set(e, "%s: shard %s is missing; it holds text tensors (e.g. %.200s), "
                        "download it", ipath, names[i], text_of[i]);
      }
      free(p);
      continue;
    }
    rc = df_st_open(&s->files[s->nfiles], p, e);
    free(p);
    if (rc == 0) s->nfiles++;
  }
  free(text_of);
  free(names);
  return rc;
}

/* 1 if shard was left out because it holds only vision tensors and is absent. */
static int set_skipped(const df_st_set *s, const char *shard) {
  for (int i = 0; i < s->nskipped; i++)
    if (!strcmp(s->skipped[i], shard)) return 1;
  return 0;
}

/* files[] were opened in sorted order of their shard names: binary search
 * (a K3 index has ~500k entries over 96 shards). */
static int set_file_index(const df_st_set *s, const char *shard) {
  int lo = 0, hi = s->nfiles - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    const char *b = strrchr(s->files[mid].path, '/');
    b = b ? b + 1 : s->files[mid].path;
    int c = strcmp(b, shard);
    if (c == 0) return mid;
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

int df_st_set_open(df_st_set *s, const char *dir, df_err *e) {
  memset(s, 0, sizeof *s);
  s->dir = df_xstrdup(dir);
  char *ipath = df_path_join(dir, DF_ST_INDEX);
  json_t *root = NULL;
  if (df_file_exists(ipath)) {
    json_error_t je;
    root = json_load_file(ipath, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
      df_err_set(e, "%s: invalid JSON at line %d: %s", ipath, je.line, je.text);
      goto fail;
    }
    const json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(root) || !json_is_object(wm)) {
      df_err_set(e, "%s: no weight_map object", ipath);
      goto fail;
    }
    if (set_index_files(s, wm, ipath, e) != 0) goto fail;
    const json_t *meta = json_object_get(root, "metadata");
    if (json_is_object(meta)) s->index_metadata_json = json_dumps(meta, JSON_COMPACT);
    /* Every index entry must be in the shard it names... */
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)wm, key, v) {
      int fi = set_file_index(s, json_string_value(v));
      if (fi < 0 && set_skipped(s, json_string_value(v))) continue;
      if (fi < 0 || !df_st_file_find(&s->files[fi], key)) {
        df_err_set(e, "%s: tensor '%s' is not in shard %s, where the index puts it", ipath, key,
                   json_string_value(v));
        goto fail;
      }
    }
    /* ...and every tensor of a shard must be indexed to that shard. */
    for (int i = 0; i < s->nfiles; i++) {
      const char *b = strrchr(s->files[i].path, '/');
      b = b ? b + 1 : s->files[i].path;
      for (int t = 0; t < s->files[i].ntensors; t++) {
        const char *nm = s->files[i].tensors[t].name;
        const json_t *sh = json_object_get(wm, nm);
        if (!sh) {
          df_err_set(e, "%s: tensor '%s' is not in the index %s", s->files[i].path, nm, ipath);
          goto fail;
        }
        if (strcmp(json_string_value(sh), b)) {
          df_err_set(e, "%s: tensor '%s' is in this shard, but the index puts it in %s",
                     s->files[i].path, nm, json_string_value(sh));
          goto fail;
        }
      }
    }
  } else {
    char *p = df_path_join(dir, DF_ST_SINGLE);
    if (!df_file_exists(p)) {
      df_err_set(e, "%s: neither %s nor %s found", dir, DF_ST_INDEX, DF_ST_SINGLE);
      free(p);
      goto fail;
    }
    s->files = df_xcalloc(1, sizeof *s->files);
    int rc = df_st_open(&s->files[0], p, e);
    free(p);
    if (rc != 0) goto fail;
    s->nfiles = 1;
  }

  size_t total = 0;
  for (int i = 0; i < s->nfiles; i++) total += (size_t)s->files[i].ntensors;
  s->all = df_xcalloc(total ? total : 1, sizeof *s->all);
  for (int i = 0; i < s->nfiles; i++)
    for (int t = 0; t < s->files[i].ntensors; t++) {
      s->files[i].tensors[t].file = i;
      s->all[s->ntensors++] = &s->files[i].tensors[t];
    }
  qsort(s->all, (size_t)s->ntensors, sizeof *s->all, cmp_tensor_pp_name);
  for (int i = 1; i < s->ntensors; i++)
    if (!strcmp(s->all[i]->name, s->all[i - 1]->name)) {
      df_err_set(e, "%s: tensor '%s' is in both %s and %s", dir, s->all[i]->name,
                 s->files[s->all[i - 1]->file].path, s->files[s->all[i]->file].path);
      goto fail;
    }
  json_decref(root);
  free(ipath);
  return 0;

fail:
  json_decref(root);
  free(ipath);
  df_st_set_close(s);
  return -1;
}

void df_st_set_close(df_st_set *s) {
  if (!s) return;
  for (int i = 0; i < s->nfiles; i++) df_st_close(&s->files[i]);
  for (int i = 0; i < s->nskipped; i++) free(s->skipped[i]);
  free(s->skipped);
  free(s->index_metadata_json);
  free(s->files);
  free(s->all);
  free(s->dir);
  memset(s, 0, sizeof *s);
}

const df_tensor *df_st_set_find(const df_st_set *s, const char *name) {
  int lo = 0, hi = s->ntensors - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    int c = strcmp(s->all[mid]->name, name);
    if (c == 0) return s->all[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return NULL;
}

const char *df_st_set_file_path(const df_st_set *s, int file) {
  return file >= 0 && file < s->nfiles ? s->files[file].path : NULL;
}


/* `convert-spine`: the row-int8 copy of the spine in DIR/spine-int8/.
 *
 * One output file per source shard (same base name) holding that shard's
 * eligible matrices as `<name>` I8 [rows, cols] and `<name>.scale` F32
 * [rows] (df_int8_quant_row: scale = absmax/127, round half to even). Each
 * file is written through the safetensors writer (temporary name, rename),
 * so a file that exists is complete; its metadata records the source shard's
 * size so a changed source is converted again. The index is written last:
 * the engine loads the int8 spine only when the index exists. The layout and
 * the index are also make-model --spine int8's (spine_int8.h), which writes
 * the same files straight from the generator. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/pool.h"
#include "base/util.h"
#include "format/codec.h"
#include "model/k3.h"
#include "model/spine_int8.h"

#define ROWS_PER_STEP 256

typedef struct {
  const uint8_t *src; /* bf16 rows */
  int cols, r0, nrows;
  int8_t *q;
  float *scale; /* whole tensor's scales */
  float *tmp;   /* nth x cols */
} q_job;

static void q_task(void *ctx, int task, int thread) {
  const q_job *j = ctx;
  int r = j->r0 + task;
  if (task >= j->nrows) return;
  float *x = j->tmp + (size_t)thread * j->cols;
  const uint8_t *row = j->src + (size_t)r * j->cols * 2;
  for (int c = 0; c < j->cols; c++) {
    uint16_t h;
    memcpy(&h, row + 2 * (size_t)c, 2);
    x[c] = df_bf16_to_f32(h);
  }
  df_int8_quant_row(x, j->cols, j->q + (size_t)task * j->cols, &j->scale[r]);
}

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* A previous output is reusable if it names this source size and holds every
 * expected tensor with the right shape. */
static int output_ok(const char *path, uint64_t src_size, const df_tensor **ts, int n) {
  if (!df_file_exists(path)) return 0;
  df_st_file f;
  df_err e;
  if (df_st_open(&f, path, &e)) return 0;
  int ok = 0;
  char want[32];
  snprintf(want, sizeof want, "%" PRIu64, src_size);
  if (f.metadata_json) {
    json_t *m = json_loads(f.metadata_json, 0, NULL);
    const char *v = m ? json_string_value(json_object_get(m, "source_size")) : NULL;
    ok = v && !strcmp(v, want);
    json_decref(m);
  }
  char sname[512];
  for (int i = 0; ok && i < n; i++) {
    const df_tensor *q = df_st_file_find(&f, ts[i]->name);
    snprintf(sname, sizeof sname, "%s.scale", ts[i]->name);
    const df_tensor *s = df_st_file_find(&f, sname);
    ok = q && s && q->dtype == DF_DT_I8 && s->dtype == DF_DT_F32 && q->ndim == 2 &&
         q->shape[0] == ts[i]->shape[0] && q->shape[1] == ts[i]->shape[1] &&
         s->nelem == (uint64_t)ts[i]->shape[0];
  }
  df_st_close(&f);
  return ok;
}

/* Converted rows [off, off+len) of t need not stay mapped or cached: with
 * this, memory stays at a step of rows whatever the shard or tensor size
 * (whole pages inside the range only; the hints may be ignored). */
static void drop_pages(int fd, const df_tensor *t, uint64_t off, uint64_t len) {
  uintptr_t a = ((uintptr_t)t->data + off + 4095) & ~(uintptr_t)4095;
  uintptr_t b = ((uintptr_t)t->data + off + len) & ~(uintptr_t)4095;
  if (b > a) madvise((void *)a, (size_t)(b - a), MADV_DONTNEED);
  posix_fadvise(fd, (off_t)(t->offset + off), (off_t)len, POSIX_FADV_DONTNEED);
}

df_st_writer *df_k3_int8_file_new(const char *out, const char *src_name, uint64_t src_size,
                                  const df_tensor *const *ts, int n, df_err *e) {
  df_st_writer *w = df_st_writer_new(out);
  df_st_writer_set_align(w, 64);
  char sz[32];
  snprintf(sz, sizeof sz, "%" PRIu64, src_size);
  df_st_writer_set_metadata(w, "format", "deltafin-spine-int8");
  df_st_writer_set_metadata(w, "source", src_name);
  df_st_writer_set_metadata(w, "source_size", sz);
  char sname[512];
  for (int i = 0; i < n; i++) {
    snprintf(sname, sizeof sname, "%s.scale", ts[i]->name);
    if (df_st_writer_declare(w, ts[i]->name, DF_DT_I8, 2, ts[i]->shape, e) ||
        df_st_writer_declare(w, sname, DF_DT_F32, 1, ts[i]->shape, e)) {
      df_st_writer_free(w);
      return NULL;
    }
  }
  return w;
}

void df_k3_int8_index_add(json_t *wm, const char *bn, const df_tensor *const *ts, int n) {
  char sname[512];
  for (int i = 0; i < n; i++) {
    json_object_set_new(wm, ts[i]->name, json_string(bn));
    snprintf(sname, sizeof sname, "%s.scale", ts[i]->name);
    json_object_set_new(wm, sname, json_string(bn));
  }
}

int df_k3_int8_index_write(const char *dir, json_t *wm, df_err *e) {
  char *idx = df_path_join(dir, "model.safetensors.index.json");
  json_t *root = json_object();
  json_t *meta = json_object();
  json_object_set_new(meta, "format", json_string("deltafin-spine-int8"));
  json_object_set_new(root, "metadata", meta);
  json_object_set(root, "weight_map", wm);
  char *text = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
  json_decref(root);
  int rc = df_file_write_atomic(idx, text, strlen(text), e);
  free(text);
  free(idx);
  return rc;
}

int df_k3_spine_is_holes(const df_st_set *set) {
  if (!set->index_metadata_json) return 0;
  json_t *m = json_loads(set->index_metadata_json, 0, NULL);
  const char *v = json_string_value(json_object_get(m, DF_K3_HOLES_KEY));
  int holes = v && !strcmp(v, DF_K3_HOLES_VALUE);
  json_decref(m);
  return holes;
}

int df_k3_spine_holes_check(const df_st_set *set, int int8, const char *what, df_err *e) {
  if (int8 || !df_k3_spine_is_holes(set)) return 0;
  json_t *m = json_loads(set->index_metadata_json, 0, NULL);
  const char *dir = json_string_value(json_object_get(m, DF_K3_HOLES_DIR_KEY));
  df_err_set(e,
             "%s: %s was written by `make-model --spine int8`: its bf16 spine matrices are "
             "holes (no data, they read as zeros), only the row-int8 copy%s%s holds them; run "
             "it with --spine int8%s%s",
             what, set->dir, dir ? " in " : "", dir ? dir : "", dir ? " --spine-dir " : "",
             dir ? dir : "");
  json_decref(m);
  return -1;
}

static int write_shard(const char *out, const char *src_name, uint64_t src_size, int src_fd,
                       const df_tensor **ts, int n, df_pool *pool, df_progress *pr,
                       uint64_t *done, df_err *e) {
  df_st_writer *w = df_k3_int8_file_new(out, src_name, src_size, ts, n, e);
  if (!w) return df_err_prefix(e, "%s: ", out);
  if (df_st_writer_begin(w, e)) goto fail;
  int nth = df_pool_size(pool);
  for (int i = 0; i < n; i++) {
    int rows = (int)ts[i]->shape[0], cols = (int)ts[i]->shape[1];
    float *scale = df_xmalloc(sizeof(float) * (size_t)rows);
    float *tmp = df_xmalloc(sizeof(float) * (size_t)cols * nth);
    int8_t *q = df_xmalloc((size_t)cols * ROWS_PER_STEP);
    int rc = 0;
    for (int r = 0; r < rows && !rc; r += ROWS_PER_STEP) {
      q_job j = {.src = ts[i]->data, .cols = cols, .r0 = r, .q = q, .scale = scale, .tmp = tmp};
      j.nrows = rows - r < ROWS_PER_STEP ? rows - r : ROWS_PER_STEP;
      df_pool_run(pool, j.nrows, q_task, &j);
      rc = df_st_writer_write(w, q, (size_t)j.nrows * cols, e);
      *done += (uint64_t)j.nrows * cols * 2;
      if (pr) df_progress_update(pr, *done);
      drop_pages(src_fd, ts[i], (uint64_t)r * cols * 2, (uint64_t)j.nrows * cols * 2);
    }
    if (!rc) rc = df_st_writer_write(w, scale, sizeof(float) * (size_t)rows, e);
    free(scale), free(tmp), free(q);
    if (rc) goto fail;
  }
  if (df_st_writer_finish(w, e)) goto fail;
  df_st_writer_free(w);
  return 0;
fail:
  df_st_writer_free(w);
  return df_err_prefix(e, "%s: ", out);
}

int df_k3_convert_spine(const char *model_dir, int threads, int force, df_err *e) {
  return df_k3_convert_spine_to(model_dir, NULL, threads, force, 1, e);
}

int df_k3_convert_spine_to(const char *model_dir, const char *out_dir, int threads, int force,
                           int progress, df_err *e) {
  df_st_set set;
  if (df_st_set_open(&set, model_dir, e)) return -1;
  if (df_k3_spine_holes_check(&set, 0, "convert-spine", e)) {
    df_st_set_close(&set);
    return -1;
  }
  char *dir = out_dir ? df_xstrdup(out_dir) : df_path_join(model_dir, DF_SPINE_INT8_DIR);
  char *idx = df_path_join(dir, "model.safetensors.index.json");
  int rc = -1;
  df_pool *pool = NULL;
  const df_tensor **ts = df_xmalloc(sizeof *ts * (size_t)(set.ntensors ? set.ntensors : 1));
  json_t *wm = json_object();
  if (df_mkdir_last(dir, "convert-spine: output folder", e)) goto out;
  uint64_t total = 0, done = 0;
  for (int i = 0; i < set.ntensors; i++)
    if (df_k3_int8_eligible(set.all[i])) total += set.all[i]->nbytes;
  if (total == 0) {
    df_err_set(e, "%s: no bf16 spine matrices to convert", model_dir);
    goto out;
  }
  pool = df_pool_create(threads);
  df_progress prs, *pr = progress ? &prs : NULL;
  if (pr) df_progress_begin(pr, "convert-spine", total);
  int removed_index = 0;
  for (int f = 0; f < set.nfiles; f++) {
    const df_st_file *sf = &set.files[f];
    int n = 0;
    uint64_t bytes = 0;
    for (int i = 0; i < sf->ntensors; i++)
      if (df_k3_int8_eligible(&sf->tensors[i])) {
        ts[n++] = &sf->tensors[i];
        bytes += sf->tensors[i].nbytes;
      }
    if (!n) continue;
    const char *bn = base_name(sf->path);
    char *out = df_path_join(dir, bn);
    df_k3_int8_index_add(wm, bn, ts, n);
    if (!force && output_ok(out, sf->size, ts, n)) {
      df_log_debug("%s: up to date", out);
      done += bytes;
      if (pr) df_progress_update(pr, done);
      free(out);
      continue;
    }
    if (!removed_index) {
      /* from here on the copy is incomplete until the index is rewritten */
      if (unlink(idx) && df_file_exists(idx)) {
        df_err_errno(e, "%s", idx);
        free(out);
        if (pr) df_progress_end(pr);
        goto out;
      }
      removed_index = 1;
    }
    int wr = write_shard(out, bn, sf->size, sf->fd, ts, n, pool, pr, &done, e);
    free(out);
    if (wr) {
      if (pr) df_progress_end(pr);
      goto out;
    }
  }
  if (pr) df_progress_end(pr);
  if (df_k3_int8_index_write(dir, wm, e)) goto out;
  rc = 0;
out:
  json_decref(wm);
  df_pool_destroy(pool);
  free(ts);
  free(idx);
  free(dir);
  df_st_set_close(&set);
  return rc;
}

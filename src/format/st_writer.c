/* The two-phase safetensors writer: declare every tensor, then write their
 * bytes in order; written to a temp name and renamed when complete. */
#include "format/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

/* ------------------------------------------------------------------ writer */

typedef struct wr_tensor {
  char *name;
  df_dtype dtype;
  int ndim;
  int64_t shape[DF_ST_MAX_DIMS];
  uint64_t nbytes, begin; /* begin relative to the data start */
} wr_tensor;

enum { WR_DECLARING, WR_WRITING, WR_DONE, WR_FAILED };

struct df_st_writer {
  char *path, *tmp;
  uint64_t align;
  int bad_align;
  json_t *meta;
  wr_tensor *t;
  int n, cap;
  int state;
  int fd;
  int cur;       /* tensor being written */
  uint64_t pos;  /* bytes of the data region written so far (incl. padding) */
  uint64_t data_end;
  uint64_t data_start; /* file offset of the data region (8 + padded header) */
  /* positional mode: threads write concurrently, so only these change */
  atomic_int positional;
  atomic_int pfailed;
  _Atomic uint64_t pbytes; /* bytes written by pwrite plus the holes' */
};

df_st_writer *df_st_writer_new(const char *path) {
  df_st_writer *w = df_xcalloc(1, sizeof *w);
  w->path = df_xstrdup(path);
  size_t pl = strlen(path) + 32;
  w->tmp = df_xmalloc(pl);
  snprintf(w->tmp, pl, "%s.tmp.%ld", path, (long)getpid());
  w->align = 1;
  w->meta = json_object();
  w->fd = -1;
  return w;
}

void df_st_writer_set_align(df_st_writer *w, uint64_t align) {
  /* Checked in begin(): this function has no error channel. */
  if (align == 1 || (align >= 8 && align % 8 == 0 && align <= (1u << 30))) {
    w->align = align;
    w->bad_align = 0;
  } else {
    w->bad_align = 1;
  }
}

void df_st_writer_set_metadata(df_st_writer *w, const char *key, const char *value) {
  json_object_set_new(w->meta, key, json_string(value));
}

int df_st_writer_declare(df_st_writer *w, const char *name, df_dtype dt, int ndim,
                         const int64_t *shape, df_err *e) {
  if (w->state != WR_DECLARING)
    return df_err_set(e, "%s: tensor '%s' declared after writing began", w->path, name);
  if (!*name || !strcmp(name, "__metadata__") || !df_utf8_valid(name, strlen(name)))
    return df_err_set(e, "%s: invalid tensor name '%s'", w->path, name);
  if ((unsigned)dt >= DF_DT_COUNT)
    return df_err_set(e, "%s: tensor '%s': invalid dtype", w->path, name);
  if (ndim < 0 || ndim > DF_ST_MAX_DIMS)
    return df_err_set(e, "%s: tensor '%s': %d dimensions", w->path, name, ndim);
  uint64_t nelem = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return df_err_set(e, "%s: tensor '%s': negative shape[%d]", w->path, name, i);
    uint64_t d = (uint64_t)shape[i];
    if (d && nelem > (uint64_t)INT64_MAX / d)
      return df_err_set(e, "%s: tensor '%s': shape size overflows", w->path, name);
    nelem *= d;
  }
  uint64_t es = df_dtype_size(dt);
  if (nelem > (uint64_t)INT64_MAX / es)
    return df_err_set(e, "%s: tensor '%s': shape size overflows", w->path, name);
  for (int i = 0; i < w->n; i++)
    if (!strcmp(w->t[i].name, name))
      return df_err_set(e, "%s: tensor '%s' declared twice", w->path, name);
  if (w->n == w->cap) {
    w->cap = w->cap ? w->cap * 2 : 64;
    w->t = df_xrealloc(w->t, (size_t)w->cap * sizeof *w->t);
  }
  wr_tensor *t = &w->t[w->n++];
  memset(t, 0, sizeof *t);
  t->name = df_xstrdup(name);
  t->dtype = dt;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
  t->nbytes = nelem * es;
  return 0;
}

static int write_all(int fd, const void *data, size_t n) {
  const uint8_t *p = data;
  while (n) {
    ssize_t r = write(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static int write_zeros(int fd, uint64_t n) {
  static const uint8_t zeros[4096];
  while (n) {
    size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
    if (write_all(fd, zeros, k) != 0) return -1;
    n -= k;
  }
  return 0;
}

int df_st_writer_begin(df_st_writer *w, df_err *e) {
  if (w->state != WR_DECLARING) return df_err_set(e, "%s: writer already begun", w->path);
  if (w->bad_align) {
    w->state = WR_FAILED;
    return df_err_set(e, "%s: alignment must be 1 or a multiple of 8", w->path);
  }
  uint64_t pos = 0;
  for (int i = 0; i < w->n; i++) {
    uint64_t b = (pos + w->align - 1) / w->align * w->align;
    if (b < pos || w->t[i].nbytes > UINT64_MAX / 2 - b) {
      w->state = WR_FAILED;
      return df_err_set(e, "%s: total size overflows at tensor '%s'", w->path, w->t[i].name);
    }
    w->t[i].begin = b;
    pos = b + w->t[i].nbytes;
  }
  w->data_end = pos;

  json_t *root = json_object();
  if (json_object_size(w->meta)) json_object_set(root, "__metadata__", w->meta);
  for (int i = 0; i < w->n; i++) {
    const wr_tensor *t = &w->t[i];
    json_t *sh = json_array();
    for (int d = 0; d < t->ndim; d++) json_array_append_new(sh, json_integer(t->shape[d]));
    json_t *o = json_pack("{s:s, s:o, s:[I,I]}", "dtype", df_dtype_name(t->dtype), "shape", sh,
                          "data_offsets", (json_int_t)t->begin,
                          (json_int_t)(t->begin + t->nbytes));
    json_object_set_new(root, t->name, o);
  }
  char *js = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!js) {
    w->state = WR_FAILED;
    return df_err_set(e, "%s: cannot serialise the header", w->path);
  }
  /* Pad with spaces (valid JSON whitespace) so the data starts on an
   * `align` boundary (at least 8) in the file: then tensor offsets that are
   * multiples of align are aligned in the file too. */
  uint64_t a = w->align < 8 ? 8 : w->align;
  uint64_t len = strlen(js);
  uint64_t padded = (8 + len + a - 1) / a * a - 8;
  if (padded > DF_ST_MAX_HEADER) {
    free(js);
    w->state = WR_FAILED;
    return df_err_set(e, "%s: header of %" PRIu64 " bytes exceeds the limit", w->path, padded);
  }
  uint8_t lenb[8];
  for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)(padded >> (8 * i));
  w->data_start = 8 + padded;

  w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd < 0) {
    free(js);
    w->state = WR_FAILED;
    return df_err_errno(e, "%s", w->tmp);
  }
  w->state = WR_WRITING; /* from here on free() must remove the tmp file */
  int rc = write_all(w->fd, lenb, 8);
  if (!rc) rc = write_all(w->fd, js, (size_t)len);
  free(js);
  if (!rc) {
    char sp[256];
    memset(sp, ' ', sizeof sp);
    for (uint64_t k = padded - len; !rc && k;) {
      size_t c = k < sizeof sp ? (size_t)k : sizeof sp;
      rc = write_all(w->fd, sp, c);
      k -= c;
    }
  }
  if (rc) {
    w->state = WR_FAILED;
    return df_err_errno(e, "writing %s", w->tmp);
  }
  return 0;
}

/* Skips finished and empty tensors, writing the alignment padding before the
 * next one. */
static int advance(df_st_writer *w) {
  while (w->cur < w->n && w->pos >= w->t[w->cur].begin + w->t[w->cur].nbytes) w->cur++;
  if (w->cur < w->n && w->pos < w->t[w->cur].begin) {
    if (write_zeros(w->fd, w->t[w->cur].begin - w->pos) != 0) return -1;
    w->pos = w->t[w->cur].begin;
  }
  return 0;
}

int df_st_writer_write(df_st_writer *w, const void *data, size_t n, df_err *e) {
  if (w->state != WR_WRITING)
    return df_err_set(e, "%s: write outside begin/finish", w->path);
  if (atomic_load(&w->positional))
    return df_err_set(e, "%s: sequential write to a positionally written file", w->path);
  const uint8_t *p = data;
  while (n) {
    if (advance(w) != 0) {
      w->state = WR_FAILED;
      return df_err_errno(e, "writing %s", w->tmp);
    }
    if (w->cur >= w->n) {
      w->state = WR_FAILED;
      return df_err_set(e, "%s: %zu bytes written beyond the declared tensors", w->path, n);
    }
    const wr_tensor *t = &w->t[w->cur];
    uint64_t left = t->begin + t->nbytes - w->pos;
    size_t k = n < left ? n : (size_t)left;
    if (write_all(w->fd, p, k) != 0) {
      w->state = WR_FAILED;
      return df_err_errno(e, "writing %s (tensor '%s')", w->tmp, t->name);
    }
    w->pos += k;
    p += k;
    n -= k;
  }
  return 0;
}

/* The positional counterpart of the checks below: the count cannot see an
 * overlap, but a producer that forgot a tensor (or wrote one twice) is off. */
static int finish_positional(df_st_writer *w, df_err *e) {
  uint64_t want = 0;
  for (int i = 0; i < w->n; i++) want += w->t[i].nbytes;
  uint64_t got = atomic_load(&w->pbytes);
  if (atomic_load(&w->pfailed) || got != want) {
    w->state = WR_FAILED;
    return df_err_set(e, "%s: %" PRIu64 " of %" PRIu64 " declared bytes written or left as holes",
                      w->path, got, want);
  }
  /* the length makes every unwritten range (holes, padding) read as zeros */
  if (ftruncate(w->fd, (off_t)(w->data_start + w->data_end)) != 0) {
    w->state = WR_FAILED;
    return df_err_errno(e, "setting the length of %s", w->tmp);
  }
  return 0;
}

int df_st_writer_finish(df_st_writer *w, df_err *e) {
  if (w->state != WR_WRITING) return df_err_set(e, "%s: finish without a successful begin", w->path);
  if (atomic_load(&w->positional)) {
    if (finish_positional(w, e)) return -1;
  } else if (advance(w) != 0) {
    w->state = WR_FAILED;
    return df_err_errno(e, "writing %s", w->tmp);
  }
  if (!atomic_load(&w->positional) && w->cur < w->n) {
    const wr_tensor *t = &w->t[w->cur];
    w->state = WR_FAILED;
    return df_err_set(e, "%s: tensor '%s' has %" PRIu64 " of %" PRIu64 " bytes written", w->path,
                      t->name, w->pos - t->begin, t->nbytes);
  }
  /* Trailing empty tensors may sit past the last byte written. */
  if (!atomic_load(&w->positional) && w->pos < w->data_end &&
      write_zeros(w->fd, w->data_end - w->pos) != 0) {
    w->state = WR_FAILED;
    return df_err_errno(e, "writing %s", w->tmp);
  }
  if (fsync(w->fd) != 0) {
    w->state = WR_FAILED;
    return df_err_errno(e, "fsync %s", w->tmp);
  }
  int rc = close(w->fd);
  w->fd = -1;
  if (rc != 0) {
    w->state = WR_FAILED;
    return df_err_errno(e, "close %s", w->tmp);
  }
  if (rename(w->tmp, w->path) != 0) {
    w->state = WR_FAILED;
    return df_err_errno(e, "rename %s -> %s", w->tmp, w->path);
  }
  w->state = WR_DONE;
  /* Make the rename durable too; failure here leaves a complete file. */
  char *dir = df_xstrdup(w->path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  int dfd = open(slash ? (*dir ? dir : "/") : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  free(dir);
  return 0;
}

void df_st_writer_free(df_st_writer *w) {
  if (!w) return;
  if (w->fd >= 0) close(w->fd);
  if (w->state == WR_WRITING || w->state == WR_FAILED) unlink(w->tmp);
  for (int i = 0; i < w->n; i++) free(w->t[i].name);
  free(w->t);
  json_decref(w->meta);
  free(w->tmp);
  free(w->path);
  free(w);
}

/* ------------------------------------------------------- positional writes */

static int positional_ok(df_st_writer *w, int tensor, df_err *e) {
  if (w->state != WR_WRITING || w->pos > 0) {
    atomic_store(&w->pfailed, 1);
    return df_err_set(e, "%s: positional write outside begin/finish or after sequential writes",
                      w->path);
  }
  if (tensor < 0 || tensor >= w->n) {
    atomic_store(&w->pfailed, 1);
    return df_err_set(e, "%s: no tensor #%d (%d declared)", w->path, tensor, w->n);
  }
  atomic_store(&w->positional, 1);
  return 0;
}

int df_st_writer_pwrite(df_st_writer *w, int tensor, uint64_t off, const void *data, size_t n,
                        df_err *e) {
  if (positional_ok(w, tensor, e)) return -1;
  const wr_tensor *t = &w->t[tensor];
  if (off > t->nbytes || n > t->nbytes - off) {
    atomic_store(&w->pfailed, 1);
    return df_err_set(e, "%s: bytes [%" PRIu64 ", %" PRIu64 ") outside tensor '%s' (%" PRIu64
                      " bytes)", w->path, off, off + n, t->name, t->nbytes);
  }
  const uint8_t *p = data;
  uint64_t at = w->data_start + t->begin + off;
  for (size_t left = n; left;) {
    ssize_t r = pwrite(w->fd, p, left, (off_t)at);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      atomic_store(&w->pfailed, 1);
      return df_err_errno(e, "writing %s (tensor '%s')", w->tmp, t->name);
    }
    p += r;
    at += (uint64_t)r;
    left -= (size_t)r;
  }
  atomic_fetch_add(&w->pbytes, (uint64_t)n);
  return 0;
}

int df_st_writer_hole(df_st_writer *w, int tensor, df_err *e) {
  if (positional_ok(w, tensor, e)) return -1;
  atomic_fetch_add(&w->pbytes, w->t[tensor].nbytes);
  return 0;
}

uint64_t df_st_writer_file_size(const df_st_writer *w) { return w->data_start + w->data_end; }

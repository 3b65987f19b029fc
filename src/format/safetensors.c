/* safetensors reader (strict): one file. The shard set is st_set.c, the
 * two-phase writer st_writer.c.
 *
 * The reader trusts nothing in a header: every size is checked for overflow
 * before use, and any inconsistency is an error naming the file and tensor,
 * because a wrong byte here becomes a silently wrong token later. */
#include "format/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

/* ------------------------------------------------------------------ dtypes */

static const struct {
  const char *name;
  size_t size;
} dtype_info[DF_DT_COUNT] = {
    [DF_DT_BF16] = {"BF16", 2}, [DF_DT_F16] = {"F16", 2}, [DF_DT_F32] = {"F32", 4},
    [DF_DT_F64] = {"F64", 8},   [DF_DT_U8] = {"U8", 1},   [DF_DT_I8] = {"I8", 1},
    [DF_DT_I32] = {"I32", 4},   [DF_DT_I64] = {"I64", 8},
};

size_t df_dtype_size(df_dtype t) {
  return (unsigned)t < DF_DT_COUNT ? dtype_info[t].size : 0;
}

const char *df_dtype_name(df_dtype t) {
  return (unsigned)t < DF_DT_COUNT ? dtype_info[t].name : "?";
}

int df_dtype_parse(const char *name, df_dtype *out) {
  for (int i = 0; i < DF_DT_COUNT; i++)
    if (!strcmp(name, dtype_info[i].name)) {
      *out = (df_dtype)i;
      return 0;
    }
  return -1;
}

/* ------------------------------------------------------------------ parser */

static uint64_t rd_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static int cmp_tensor_name(const void *a, const void *b) {
  return strcmp(((const df_tensor *)a)->name, ((const df_tensor *)b)->name);
}

static int cmp_tensor_ptr_offset(const void *a, const void *b) {
  const df_tensor *x = *(const df_tensor *const *)a, *y = *(const df_tensor *const *)b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* ---- naming a duplicate key ----
 * jansson's JSON_REJECT_DUPLICATES says only "duplicate object key", so on
 * that error the header (valid JSON up to the duplicate) is scanned again to
 * find the top-level name that repeats, or the entry holding the duplicate. */

static size_t skip_ws(const char *s, size_t n, size_t i) {
  while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
  return i;
}

/* s[i] == '"'; returns the index after the closing quote, or n. */
static size_t skip_string(const char *s, size_t n, size_t i) {
  for (i++; i < n; i++) {
    if (s[i] == '\\') i++;
    else if (s[i] == '"') return i + 1;
  }
  return n;
}

static size_t skip_value(const char *s, size_t n, size_t i) {
  if (i >= n) return n;
  if (s[i] == '"') return skip_string(s, n, i);
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    while (i < n) {
      char c = s[i];
      if (c == '"') {
        i = skip_string(s, n, i);
        continue;
      }
      if (c == '{' || c == '[') depth++;
      else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
      i++;
    }
    return n;
  }
  while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']') i++;
  return i;
}

typedef struct raw_key {
  char *name;
  size_t vbeg, vend;
} raw_key;

static int cmp_raw_key(const void *a, const void *b) {
  return strcmp(((const raw_key *)a)->name, ((const raw_key *)b)->name);
}

static char *decode_key(const char *s, size_t b, size_t en) {
  json_t *j = json_loadb(s + b, en - b, JSON_DECODE_ANY, NULL);
  char *r = df_xstrdup(json_is_string(j) ? json_string_value(j) : "?");
  json_decref(j);
  return r;
}

/* Writes "tensor 'x' appears twice" or "duplicate key inside tensor 'x'". */
static void name_duplicate(const char *s, size_t n, size_t err_pos, char *out, size_t outlen) {
  raw_key *k = NULL;
  size_t nk = 0, cap = 0;
  size_t i = skip_ws(s, n, 0);
  snprintf(out, outlen, "duplicate key at byte %zu", err_pos);
  if (i >= n || s[i] != '{') return;
  i = skip_ws(s, n, i + 1);
  while (i < n && s[i] == '"') {
    size_t kb = i;
    i = skip_string(s, n, i);
    size_t ke = i;
    i = skip_ws(s, n, i);
    if (i >= n || s[i] != ':') break;
    i = skip_ws(s, n, i + 1);
    size_t vb = i;
    i = skip_value(s, n, i);
    if (nk == cap) k = df_xrealloc(k, (cap = cap ? cap * 2 : 64) * sizeof *k);
    k[nk].name = decode_key(s, kb, ke);
    k[nk].vbeg = vb;
    k[nk].vend = i;
    nk++;
    i = skip_ws(s, n, i);
    if (i >= n || s[i] != ',') break;
    i = skip_ws(s, n, i + 1);
  }
  /* A duplicate inside an entry comes first in the text, before any later
   * top-level repeat, so look for it by position first. */
  int found = 0;
  for (size_t j = 0; j < nk && !found; j++)
    if (err_pos > k[j].vbeg && err_pos <= k[j].vend) {
      snprintf(out, outlen, "duplicate key inside the entry of tensor '%s'", k[j].name);
      found = 1;
    }
  if (!found) {
    qsort(k, nk, sizeof *k, cmp_raw_key);
    for (size_t j = 1; j < nk && !found; j++)
      if (!strcmp(k[j].name, k[j - 1].name)) {
        snprintf(out, outlen, "tensor '%s' appears twice", k[j].name);
        found = 1;
      }
  }
  for (size_t j = 0; j < nk; j++) free(k[j].name);
  free(k);
}

static void free_tensors(df_tensor *t, int n) {
  if (!t) return;
  for (int i = 0; i < n; i++) free(t[i].name);
  free(t);
}

/* A JSON integer in [0, INT64_MAX]; jansson rejects integers beyond long long. */
static int get_u64(const json_t *v, uint64_t *out) {
  if (!json_is_integer(v)) return -1;
  json_int_t x = json_integer_value(v);
  if (x < 0) return -1;
  *out = (uint64_t)x;
  return 0;
}

/* Parses one entry of the header into t; data_start = 8 + N. */
static int parse_entry(df_tensor *t, const char *name, const json_t *v, uint64_t data_start,
                       uint64_t file_size, const char *label, df_err *e) {
  if (!json_is_object(v))
    return df_err_set(e, "%s: tensor '%s': entry is not a JSON object", label, name);
  const json_t *jd = json_object_get(v, "dtype");
  const json_t *js = json_object_get(v, "shape");
  const json_t *jo = json_object_get(v, "data_offsets");
  if (!jd || !js || !jo)
    return df_err_set(e, "%s: tensor '%s': missing %s", label, name,
                      !jd ? "dtype" : !js ? "shape" : "data_offsets");
  if (!json_is_string(jd))
    return df_err_set(e, "%s: tensor '%s': dtype is not a string", label, name);
  if (df_dtype_parse(json_string_value(jd), &t->dtype) != 0)
    return df_err_set(e, "%s: tensor '%s': unknown dtype '%.32s'", label, name,
                      json_string_value(jd));
  if (!json_is_array(js))
    return df_err_set(e, "%s: tensor '%s': shape is not an array", label, name);
  size_t nd = json_array_size(js);
  if (nd > DF_ST_MAX_DIMS)
    return df_err_set(e, "%s: tensor '%s': %zu dimensions, at most %d supported", label, name,
                      nd, DF_ST_MAX_DIMS);
  t->ndim = (int)nd;
  int zero = 0;
  for (size_t i = 0; i < nd; i++) {
    uint64_t d;
    if (get_u64(json_array_get(js, i), &d) != 0)
      return df_err_set(e, "%s: tensor '%s': shape[%zu] is not a non-negative integer", label,
                        name, i);
    t->shape[i] = (int64_t)d;
    zero |= d == 0;
  }
  /* A zero dimension makes the product 0 whatever the others are. */
  uint64_t nelem = zero ? 0 : 1;
  size_t es = df_dtype_size(t->dtype);
  for (size_t i = 0; i < nd && nelem; i++) {
    uint64_t d = (uint64_t)t->shape[i];
    if (nelem > UINT64_MAX / d)
      return df_err_set(e, "%s: tensor '%s': shape size overflows", label, name);
    nelem *= d;
  }
  if (nelem > UINT64_MAX / es)
    return df_err_set(e, "%s: tensor '%s': shape size overflows", label, name);
  t->nelem = nelem;
  t->nbytes = nelem * es;

  if (!json_is_array(jo) || json_array_size(jo) != 2)
    return df_err_set(e, "%s: tensor '%s': data_offsets is not a [begin, end] array", label,
                      name);
  uint64_t b, en;
  if (get_u64(json_array_get(jo, 0), &b) != 0 || get_u64(json_array_get(jo, 1), &en) != 0)
    return df_err_set(e, "%s: tensor '%s': data_offsets are not non-negative integers", label,
                      name);
  if (b > en)
    return df_err_set(e, "%s: tensor '%s': data_offsets begin %" PRIu64 " > end %" PRIu64, label,
                      name, b, en);
  if (en - b != t->nbytes)
    return df_err_set(e,
                      "%s: tensor '%s': data_offsets span %" PRIu64 " bytes but %s shape needs "
                      "%" PRIu64,
                      label, name, en - b, df_dtype_name(t->dtype), t->nbytes);
  if (en > file_size - data_start)
    return df_err_set(e,
                      "%s: tensor '%s': data ends at file offset %" PRIu64 " + %" PRIu64
                      ", beyond the file size %" PRIu64,
                      label, name, data_start, en, file_size);
  t->offset = data_start + b;
  return 0;
}

static int parse_metadata(df_st_file *out, const json_t *v, const char *label, df_err *e) {
  if (!json_is_object(v)) return df_err_set(e, "%s: __metadata__ is not an object", label);
  const char *k;
  const json_t *x;
  json_object_foreach((json_t *)v, k, x) {
    if (!json_is_string(x))
      return df_err_set(e, "%s: __metadata__ value of '%.200s' is not a string", label, k);
  }
  out->metadata_json = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
  if (!out->metadata_json) return df_err_set(e, "%s: cannot serialise __metadata__", label);
  return 0;
}

int df_st_parse(df_st_file *out, const uint8_t *buf, size_t buflen, uint64_t file_size,
                const char *label, df_err *e) {
  memset(out, 0, sizeof *out);
  out->fd = -1;
  if (!label) label = "safetensors";
  if (file_size < 8 || buflen < 8)
    return df_err_set(e, "%s: %" PRIu64 " bytes, too short for the 8-byte header length", label,
                      file_size < buflen ? file_size : (uint64_t)buflen);
  uint64_t n = rd_le64(buf);
  if (n > DF_ST_MAX_HEADER)
    return df_err_set(e, "%s: header length %" PRIu64 " exceeds the %u byte limit", label, n,
                      DF_ST_MAX_HEADER);
  if (n > file_size - 8)
    return df_err_set(e, "%s: header length %" PRIu64 " runs past the end of the file (%" PRIu64
                      " bytes)", label, n, file_size);
  if (n > buflen - 8)
    return df_err_set(e, "%s: only %zu of the %" PRIu64 " header bytes are available", label,
                      buflen - 8, n);
  const char *hdr = (const char *)buf + 8;
  if (n == 0 || hdr[0] != '{')
    return df_err_set(e, "%s: header is not a JSON object", label);
  if (!df_utf8_valid(hdr, (size_t)n))
    return df_err_set(e, "%s: header is not valid UTF-8", label);
  /* JSON_REJECT_DUPLICATES: jansson would otherwise keep the last of two
   * entries with the same name, hiding a corrupt or forged header. */
  json_error_t je;
  json_t *root = json_loadb(hdr, (size_t)n, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    if (json_error_code(&je) == json_error_duplicate_key) {
      char what[600];
      name_duplicate(hdr, (size_t)n, (size_t)je.position, what, sizeof what);
      return df_err_set(e, "%s: header: %s", label, what);
    }
    return df_err_set(e, "%s: header JSON invalid at byte %d: %s", label, je.position, je.text);
  }
  if (!json_is_object(root)) {
    json_decref(root);
    return df_err_set(e, "%s: header is not a JSON object", label);
  }
  const uint64_t data_start = 8 + n;
  size_t cap = json_object_size(root);
  df_tensor *ts = df_xcalloc(cap ? cap : 1, sizeof *ts);
  df_tensor **byoff = NULL;
  int nt = 0;
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    if (!strcmp(key, "__metadata__")) {
      if (parse_metadata(out, val, label, e) != 0) goto fail;
      continue;
    }
    df_tensor *t = &ts[nt];
    memset(t, 0, sizeof *t);
    if (parse_entry(t, key, val, data_start, file_size, label, e) != 0) goto fail;
    t->name = df_xstrdup(key);
    t->file = 0;
    t->data = (t->offset <= buflen && t->nbytes <= buflen - t->offset) ? buf + t->offset : NULL;
    nt++;
  }
  json_decref(root);
  root = NULL;

  /* Overlap: sorted by begin, each non-empty tensor must start at or after
   * the furthest end seen so far. Gaps are allowed (aligned writers). */
  byoff = df_xcalloc(nt ? (size_t)nt : 1, sizeof *byoff);
  for (int i = 0; i < nt; i++) byoff[i] = &ts[i];
  qsort(byoff, (size_t)nt, sizeof *byoff, cmp_tensor_ptr_offset);
  const df_tensor *far = NULL;
  for (int i = 0; i < nt; i++) {
    const df_tensor *t = byoff[i];
    if (t->nbytes == 0) continue;
    if (far && t->offset < far->offset + far->nbytes) {
      df_err_set(e, "%s: tensor '%s' overlaps tensor '%s'", label, t->name, far->name);
      goto fail;
    }
    if (!far || t->offset + t->nbytes > far->offset + far->nbytes) far = t;
  }
  free(byoff);
  byoff = NULL;

  qsort(ts, (size_t)nt, sizeof *ts, cmp_tensor_name);
  out->tensors = ts;
  out->ntensors = nt;
  out->size = file_size;
  return 0;

fail:
  if (root) json_decref(root);
  free(byoff);
  free_tensors(ts, nt);
  free(out->metadata_json);
  memset(out, 0, sizeof *out);
  out->fd = -1;
  return -1;
}

int df_st_open(df_st_file *f, const char *path, df_err *e) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return df_err_errno(e, "%s", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    df_err_errno(e, "%s", path);
    close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return df_err_set(e, "%s: not a regular file", path);
  }
  uint64_t size = (uint64_t)st.st_size;
  if (size < 8) {
    close(fd);
    return df_err_set(e, "%s: %" PRIu64 " bytes, too short for the 8-byte header length", path,
                      size);
  }
  if (size > SIZE_MAX) {
    close(fd);
    return df_err_set(e, "%s: too large to map on this machine", path);
  }
  void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    df_err_errno(e, "mmap %s", path);
    close(fd);
    return -1;
  }
  if (df_st_parse(f, map, (size_t)size, size, path, e) != 0) {
    munmap(map, (size_t)size);
    close(fd);
    return -1;
  }
  f->path = df_xstrdup(path);
  f->fd = fd;
  f->map = map;
  f->size = size;
  return 0;
}

void df_st_close(df_st_file *f) {
  if (!f) return;
  if (f->map) munmap((void *)f->map, (size_t)f->size);
  if (f->fd >= 0) close(f->fd);
  free_tensors(f->tensors, f->ntensors);
  free(f->metadata_json);
  free(f->path);
  memset(f, 0, sizeof *f);
  f->fd = -1;
}

const df_tensor *df_st_file_find(const df_st_file *f, const char *name) {
  int lo = 0, hi = f->ntensors - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    int c = strcmp(f->tensors[mid].name, name);
    if (c == 0) return &f->tensors[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return NULL;
}


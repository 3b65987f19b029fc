/* safetensors reader (strict) and two-phase writer.
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
  s->files = df_xcalloc(u ? u : 1, sizeof *s->files);
  for (size_t i = 0; i < u; i++) s->files[i].fd = -1;
  for (size_t i = 0; i < u; i++) {
    char *p = df_path_join(s->dir, names[i]);
    int rc = df_st_open(&s->files[i], p, e);
    free(p);
    if (rc != 0) {
      free(names);
      return -1;
    }
    s->nfiles = (int)i + 1;
  }
  free(names);
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
    /* Every index entry must be in the shard it names... */
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)wm, key, v) {
      int fi = set_file_index(s, json_string_value(v));
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

int df_st_writer_finish(df_st_writer *w, df_err *e) {
  if (w->state != WR_WRITING) return df_err_set(e, "%s: finish without a successful begin", w->path);
  if (advance(w) != 0) {
    w->state = WR_FAILED;
    return df_err_errno(e, "writing %s", w->tmp);
  }
  if (w->cur < w->n) {
    const wr_tensor *t = &w->t[w->cur];
    w->state = WR_FAILED;
    return df_err_set(e, "%s: tensor '%s' has %" PRIu64 " of %" PRIu64 " bytes written", w->path,
                      t->name, w->pos - t->begin, t->nbytes);
  }
  /* Trailing empty tensors may sit past the last byte written. */
  if (w->pos < w->data_end && write_zeros(w->fd, w->data_end - w->pos) != 0) {
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

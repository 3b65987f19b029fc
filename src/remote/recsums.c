#include "remote/recsums.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

struct df_recsums {
  df_recsum_shard *sh;
  char **names, **shas; /* owned storage behind sh[] */
  df_recsum_span **spans;
  char ***span_names;
  int nsh;
  df_recsum *rec; /* sorted by (shard, off) */
  int nrec;
};

static int hex_val(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* 64 lowercase hex digits -> 32 bytes; -1 otherwise. */
static int parse_sha(const char *s, uint8_t out[32]) {
  if (!s || strlen(s) != 64) return -1;
  for (int i = 0; i < 32; i++) {
    int a = hex_val(s[2 * i]), b = hex_val(s[2 * i + 1]);
    if (a < 0 || b < 0) return -1;
    out[i] = (uint8_t)(a << 4 | b);
  }
  return 0;
}

static int get_u64(const json_t *o, const char *k, uint64_t *v) {
  const json_t *x = json_object_get(o, k);
  if (!json_is_integer(x) || json_integer_value(x) < 0) return -1;
  *v = (uint64_t)json_integer_value(x);
  return 0;
}

static int cmp_span(const void *a, const void *b) {
  const df_recsum_span *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* shards[i].spans: optional; each inside the shard, disjoint. */
static int parse_spans(df_recsums *r, int i, const json_t *sp, const char *label, df_err *e) {
  if (!sp) return 0;
  const char *nm = r->names[i];
  if (!json_is_array(sp) || json_array_size(sp) > (1u << 20))
    return df_err_set(e, "%s: shards[%d] (%s): 'spans' must be an array", label, i, nm);
  int n = (int)json_array_size(sp);
  df_recsum_span *v = df_xcalloc((size_t)(n ? n : 1), sizeof *v);
  char **names = df_xcalloc((size_t)(n ? n : 1), sizeof *names);
  r->spans[i] = v, r->span_names[i] = names;
  r->sh[i].spans = v;
  uint64_t size = r->sh[i].size;
  for (int k = 0; k < n; k++) {
    const json_t *x = json_array_get(sp, (size_t)k);
    const char *t = json_string_value(json_object_get(x, "name"));
    if (!json_is_object(x) || !t || !*t || strlen(t) > 1024 || get_u64(x, "offset", &v[k].off) ||
        get_u64(x, "length", &v[k].len) ||
        parse_sha(json_string_value(json_object_get(x, "sha256")), v[k].sha256))
      return df_err_set(e,
                        "%s: shards[%d] (%s): spans[%d] needs name, offset, length and sha256",
                        label, i, nm, k);
    names[k] = df_xstrdup(t);
    v[k].name = names[k];
    r->sh[i].nspans = k + 1;
    if (!v[k].len || v[k].off > size || v[k].len > size - v[k].off)
      return df_err_set(e, "%s: shards[%d] (%s): span %s is not inside the shard", label, i, nm, t);
  }
  qsort(v, (size_t)n, sizeof *v, cmp_span);
  for (int k = 1; k < n; k++)
    if (v[k - 1].off + v[k - 1].len > v[k].off)
      return df_err_set(e, "%s: shards[%d] (%s): spans %s and %s overlap", label, i, nm,
                        v[k - 1].name, v[k].name);
  return 0;
}

static int cmp_rec(const void *a, const void *b) {
  const df_recsum *x = a, *y = b;
  if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
  return x->off < y->off ? -1 : x->off > y->off;
}

static int cmp_key(const void *a, const void *b) {
  const df_recsum *x = *(df_recsum *const *)a, *y = *(df_recsum *const *)b;
  if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
  return x->expert < y->expert ? -1 : x->expert > y->expert;
}

int df_recsums_parse(const char *buf, size_t len, const char *label, df_recsums **out, df_err *e) {
  *out = NULL;
  if (len > DF_RECSUMS_MAX_BYTES)
    return df_err_set(e, "%s: %zu bytes, more than record sums can be (%u)", label, len,
                      DF_RECSUMS_MAX_BYTES);
  json_error_t je;
  json_t *o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
  if (!o)
    return df_err_set(e, "%s: not JSON (line %d: %s); make it again with deltafin record-sums",
                      label, je.line, je.text);
  df_recsums *r = df_xcalloc(1, sizeof *r);
  int rc = -1;
  const char *fmt = json_string_value(json_object_get(o, "format"));
  const json_t *sh = json_object_get(o, "shards"), *rec = json_object_get(o, "records");
  if (!json_is_object(o) || !fmt || strcmp(fmt, DF_RECSUMS_FORMAT)) {
    df_err_set(e, "%s: 'format' is not \"%s\" (not record sums, or a newer version)", label,
               DF_RECSUMS_FORMAT);
    goto out;
  }
  if (!json_is_array(sh) || !json_array_size(sh) || json_array_size(sh) > 100000) {
    df_err_set(e, "%s: 'shards' must be a non-empty array", label);
    goto out;
  }
  if (!json_is_array(rec) || json_array_size(rec) > (1u << 24)) {
    df_err_set(e, "%s: 'records' must be an array", label);
    goto out;
  }
  r->nsh = (int)json_array_size(sh);
  r->sh = df_xcalloc((size_t)r->nsh, sizeof *r->sh);
  r->names = df_xcalloc((size_t)r->nsh, sizeof *r->names);
  r->shas = df_xcalloc((size_t)r->nsh, sizeof *r->shas);
  r->spans = df_xcalloc((size_t)r->nsh, sizeof *r->spans);
  r->span_names = df_xcalloc((size_t)r->nsh, sizeof *r->span_names);
  for (int i = 0; i < r->nsh; i++) {
    const json_t *s = json_array_get(sh, (size_t)i);
    const char *nm = json_string_value(json_object_get(s, "name"));
    const char *h = json_string_value(json_object_get(s, "sha256"));
    uint8_t d[32];
    if (!json_is_object(s) || !nm || !df_hub_name_valid(nm) || strchr(nm, '/')) {
      df_err_set(e, "%s: shards[%d]: 'name' missing or not a file name", label, i);
      goto out;
    }
    if (get_u64(s, "size", &r->sh[i].size)) {
      df_err_set(e, "%s: shards[%d] (%s): 'size' must be a non-negative integer", label, i, nm);
      goto out;
    }
    if (parse_sha(h, d)) {
      df_err_set(e, "%s: shards[%d] (%s): 'sha256' must be 64 lowercase hex digits", label, i, nm);
      goto out;
    }
    for (int k = 0; k < i; k++)
      if (!strcmp(r->names[k], nm)) {
        df_err_set(e, "%s: shards[%d]: '%s' is listed twice", label, i, nm);
        goto out;
      }
    r->sh[i].name = r->names[i] = df_xstrdup(nm);
    r->sh[i].sha256 = r->shas[i] = df_xstrdup(h);
    if (parse_spans(r, i, json_object_get(s, "spans"), label, e)) goto out;
  }
  r->nrec = (int)json_array_size(rec);
  r->rec = df_xcalloc((size_t)(r->nrec ? r->nrec : 1), sizeof *r->rec);
  for (int i = 0; i < r->nrec; i++) {
    const json_t *x = json_array_get(rec, (size_t)i);
    df_recsum *q = &r->rec[i];
    uint64_t L, X, S;
    if (!json_is_object(x) || get_u64(x, "layer", &L) || get_u64(x, "expert", &X) ||
        get_u64(x, "shard", &S) || get_u64(x, "offset", &q->off) || get_u64(x, "length", &q->len) ||
        parse_sha(json_string_value(json_object_get(x, "sha256")), q->sha256)) {
      df_err_set(e,
                 "%s: records[%d]: needs layer, expert, shard, offset, length (non-negative "
                 "integers) and sha256 (64 lowercase hex digits)",
                 label, i);
      goto out;
    }
    if (L > 1u << 20 || X > 1u << 20 || S >= (uint64_t)r->nsh) {
      df_err_set(e, "%s: records[%d]: layer %llu / expert %llu / shard %llu out of range", label, i,
                 (unsigned long long)L, (unsigned long long)X, (unsigned long long)S);
      goto out;
    }
    q->layer = (int)L, q->expert = (int)X, q->shard = (int)S;
    uint64_t size = r->sh[q->shard].size;
    if (!q->len || q->off > size || q->len > size - q->off) {
      df_err_set(e, "%s: records[%d] (layer %d expert %d): bytes %llu+%llu are not inside %s (%llu bytes)",
                 label, i, q->layer, q->expert, (unsigned long long)q->off,
                 (unsigned long long)q->len, r->sh[q->shard].name, (unsigned long long)size);
      goto out;
    }
  }
  qsort(r->rec, (size_t)r->nrec, sizeof *r->rec, cmp_rec);
  for (int i = 1; i < r->nrec; i++) {
    const df_recsum *a = &r->rec[i - 1], *b = &r->rec[i];
    if (a->shard == b->shard && a->off + a->len > b->off) {
      df_err_set(e, "%s: records of layer %d expert %d and layer %d expert %d overlap in %s", label,
                 a->layer, a->expert, b->layer, b->expert, r->sh[a->shard].name);
      goto out;
    }
  }
  if (r->nrec > 1) {
    df_recsum **k = df_xmalloc((size_t)r->nrec * sizeof *k);
    for (int i = 0; i < r->nrec; i++) k[i] = &r->rec[i];
    qsort(k, (size_t)r->nrec, sizeof *k, cmp_key);
    int dup = -1;
    for (int i = 1; i < r->nrec && dup < 0; i++)
      if (!cmp_key(&k[i - 1], &k[i])) dup = i;
    if (dup >= 0) df_err_set(e, "%s: layer %d expert %d is listed twice", label, k[dup]->layer, k[dup]->expert);
    free(k);
    if (dup >= 0) goto out;
  }
  rc = 0;
out:
  json_decref(o);
  if (rc) {
    df_recsums_free(r);
    return -1;
  }
  *out = r;
  return 0;
}

void df_recsums_free(df_recsums *r) {
  if (!r) return;
  for (int i = 0; i < r->nsh; i++) {
    free(r->names[i]);
    free(r->shas[i]);
    for (int k = 0; r->span_names[i] && k < r->sh[i].nspans; k++) free(r->span_names[i][k]);
    free(r->span_names[i]);
    free(r->spans[i]);
  }
  free(r->spans);
  free(r->span_names);
  free(r->names);
  free(r->shas);
  free(r->sh);
  free(r->rec);
  free(r);
}

int df_recsums_nshards(const df_recsums *r) { return r->nsh; }
const df_recsum_shard *df_recsums_shard(const df_recsums *r, int i) { return &r->sh[i]; }
int df_recsums_nrecords(const df_recsums *r) { return r->nrec; }
const df_recsum *df_recsums_record(const df_recsums *r, int i) { return &r->rec[i]; }

int df_recsums_find_shard(const df_recsums *r, const char *name) {
  for (int i = 0; i < r->nsh; i++)
    if (!strcmp(r->sh[i].name, name)) return i;
  return -1;
}

const df_recsum *df_recsums_lookup(const df_recsums *r, int shard, uint64_t off) {
  df_recsum key = {.shard = shard, .off = off};
  return bsearch(&key, r->rec, (size_t)r->nrec, sizeof *r->rec, cmp_rec);
}

int df_recsums_check_info(const df_recsums *r, const df_hub_info *info, const char *label,
                          df_err *e) {
  for (int i = 0; i < r->nsh; i++) {
    const df_recsum_shard *s = &r->sh[i];
    const df_hub_file *f = df_hub_info_find(info, s->name);
    const char *why = NULL;
    if (!f) why = "is not in the model info";
    else if (f->size != s->size) why = "has another size in the model info";
    else if (!f->lfs || strcmp(f->sha256, s->sha256)) why = "has another sha256 in the model info";
    if (why)
      return df_err_set(e,
                        "%s: record sums are for another revision/repo: shard %s %s of commit %s "
                        "(make them with deltafin record-sums from an install of this commit)",
                        label, s->name, why, info->commit);
  }
  return 0;
}

int df_recsums_check_bytes(const uint8_t sha[32], const void *data, uint64_t len) {
  uint8_t d[32];
  unsigned int n = 0;
  if (!EVP_Digest(data, (size_t)len, d, &n, EVP_sha256(), NULL) || n != 32) return -1;
  return memcmp(d, sha, 32) ? -1 : 0;
}

int df_recsums_verify(const df_recsum *rs, const void *data) {
  return df_recsums_check_bytes(rs->sha256, data, rs->len);
}

#include "store/manifest.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#define MAX_LAYERS 4096
#define MAX_EXPERTS 65536
#define MAX_RECORD_BYTES (1ull << 34)
#define MAX_FILE_BYTES (1ull << 52)
#define MAX_SPINE_CHUNKS (1 << 22)

void df_mf_spine_free(df_mf_spine *s) {
  if (!s) return;
  free(s->units);
  free(s->chunks);
  memset(s, 0, sizeof *s);
}

void df_manifest_take_spine(df_manifest *m, df_mf_spine *out) {
  *out = m->spine;
  memset(&m->spine, 0, sizeof m->spine);
  m->has_spine = 0;
}

const df_mf_spine_unit *df_manifest_spine_unit(const df_manifest *m, int unit) {
  if (!m->has_spine) return NULL;
  int lo = 0, hi = m->spine.nunits - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    int u = m->spine.units[mid].unit;
    if (u == unit) return &m->spine.units[mid];
    if (u < unit) lo = mid + 1;
    else hi = mid - 1;
  }
  return NULL;
}

void df_manifest_free(df_manifest *m) {
  if (!m) return;
  for (int i = 0; i < m->ndrives; i++) {
    free(m->drives[i].path);
    free(m->drives[i].file);
  }
  free(m->drives);
  free(m->recs);
  df_mf_spine_free(&m->spine);
  memset(m, 0, sizeof *m);
}

const df_mf_record *df_manifest_find(const df_manifest *m, int layer, int expert) {
  if (layer < m->first_layer || layer >= m->n_layers || expert < 0 || expert >= m->n_experts)
    return NULL;
  return &m->recs[(size_t)(layer - m->first_layer) * (size_t)m->n_experts + (size_t)expert];
}

char *df_manifest_file_path(const df_manifest *m, int drive) {
  return df_path_join(m->drives[drive].path, m->drives[drive].file);
}

/* Only these keys, the first nreq of them present. */
static int check_keys_opt(json_t *o, const char *const *keys, int n, int nreq, const char *where,
                          const char *label, df_err *e) {
  if (!json_is_object(o)) return df_err_set(e, "%s: %s must be an object", label, where);
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    int ok = 0;
    for (int i = 0; i < n; i++) ok |= !strcmp(k, keys[i]);
    if (!ok) return df_err_set(e, "%s: unknown field '%s' in %s", label, k, where);
  }
  for (int i = 0; i < nreq; i++)
    if (!json_object_get(o, keys[i]))
      return df_err_set(e, "%s: missing field '%s' in %s", label, keys[i], where);
  return 0;
}

/* Only these keys, each present. */
static int check_keys(json_t *o, const char *const *keys, int n, const char *where,
                      const char *label, df_err *e) {
  return check_keys_opt(o, keys, n, n, where, label, e);
}

static int get_u64(json_t *v, uint64_t lo, uint64_t hi, uint64_t *out, const char *field,
                   const char *label, df_err *e) {
  if (!json_is_integer(v)) return df_err_set(e, "%s: %s must be an integer", label, field);
  json_int_t x = json_integer_value(v);
  if (x < 0 || (uint64_t)x < lo || (uint64_t)x > hi)
    return df_err_set(e, "%s: %s = %lld is out of range [%llu, %llu]", label, field, (long long)x,
                      (unsigned long long)lo, (unsigned long long)hi);
  *out = (uint64_t)x;
  return 0;
}

static int get_int(json_t *v, int lo, int hi, int *out, const char *field, const char *label,
                   df_err *e) {
  uint64_t x = 0;
  if (lo < 0) return df_err_set(e, "%s: internal: negative bound for %s", label, field);
  if (get_u64(v, (uint64_t)lo, (uint64_t)hi, &x, field, label, e)) return -1;
  *out = (int)x;
  return 0;
}

static int parse_hex64(const char *s, uint64_t *out) {
  if (strlen(s) != 16) return -1;
  uint64_t v = 0;
  for (int i = 0; i < 16; i++) {
    char c = s[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v << 4 | (uint64_t)d;
  }
  *out = v;
  return 0;
}

static int get_hex(json_t *v, uint64_t *out, const char *field, const char *label, df_err *e) {
  if (!json_is_string(v) || parse_hex64(json_string_value(v), out))
    return df_err_set(e, "%s: %s must be 16 lowercase hex digits", label, field);
  return 0;
}

/* A byte range of a drive's file: record rec, or spine chunk -1 - rec. */
typedef struct span {
  uint64_t off, len;
  int rec;
} span;

static int cmp_span(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

static void span_name(char *buf, size_t n, int rec) {
  if (rec >= 0) snprintf(buf, n, "records[%d]", rec);
  else snprintf(buf, n, "spine chunk %d", -1 - rec);
}

static int kind_ok(const char *k) { return !strcmp(k, "bf16") || !strcmp(k, "int8"); }

/* The spine section alone: kinds, units in order, chunks aligned, inside
 * their drive's file, adding up to each unit's bytes. */
static int check_spine(const df_manifest *m, const char *label, df_err *e) {
  const df_mf_spine *sp = &m->spine;
  if (!kind_ok(sp->kind)) return df_err_set(e, "%s: spine.kind must be \"bf16\" or \"int8\"", label);
  if (sp->nunits < 1 || sp->nunits > MAX_LAYERS + 1)
    return df_err_set(e, "%s: spine.units must hold 1..%d units", label, MAX_LAYERS + 1);
  if (sp->nchunks < sp->nunits || sp->nchunks > MAX_SPINE_CHUNKS)
    return df_err_set(e, "%s: spine: %d chunks for %d units", label, sp->nchunks, sp->nunits);
  int next = 0;
  for (int i = 0; i < sp->nunits; i++) {
    const df_mf_spine_unit *u = &sp->units[i];
    if (u->unit < 0 || u->unit > MAX_LAYERS || (i > 0 && u->unit <= sp->units[i - 1].unit))
      return df_err_set(e, "%s: spine.units[%d]: unit %d is out of order (increasing, each once)",
                        label, i, u->unit);
    if (u->first != next || u->nchunks < 1 || u->nchunks > sp->nchunks - next)
      return df_err_set(e, "%s: spine.units[%d] (unit %d): chunks do not follow the previous unit's",
                        label, i, u->unit);
    next += u->nchunks;
    uint64_t sum = 0;
    for (int c = u->first; c < u->first + u->nchunks; c++) {
      const df_mf_chunk *ch = &sp->chunks[c];
      if (ch->drive < 0 || ch->drive >= m->ndrives)
        return df_err_set(e, "%s: spine unit %d chunk %d: drive %d does not exist", label, u->unit,
                          c - u->first, ch->drive);
      if (ch->len < 1 || ch->len % m->align || ch->offset % m->align)
        return df_err_set(e, "%s: spine unit %d chunk %d: offset and len must be non-empty "
                             "multiples of %u", label, u->unit, c - u->first, m->align);
      if (ch->offset > m->drives[ch->drive].bytes || m->drives[ch->drive].bytes - ch->offset < ch->len)
        return df_err_set(e, "%s: spine unit %d chunk %d ends past drives[%d].bytes", label, u->unit,
                          c - u->first, ch->drive);
      sum += ch->len;
      if (sum > MAX_FILE_BYTES)
        return df_err_set(e, "%s: spine unit %d is larger than any file", label, u->unit);
    }
    if (sum != u->bytes)
      return df_err_set(e, "%s: spine unit %d: its chunks hold %" PRIu64 " bytes, not %" PRIu64,
                        label, u->unit, sum, u->bytes);
  }
  if (next != sp->nchunks)
    return df_err_set(e, "%s: spine: %d chunks belong to no unit", label, sp->nchunks - next);
  return 0;
}

int df_manifest_check(const df_manifest *m, const char *label, df_err *e) {
  if (m->align != DF_MF_ALIGN) return df_err_set(e, "%s: align must be %d", label, DF_MF_ALIGN);
  if (m->first_layer < 0 || m->first_layer >= m->n_layers || m->n_layers > MAX_LAYERS)
    return df_err_set(e, "%s: model.first_layer/n_layers out of range", label);
  if (m->n_experts < 1 || m->n_experts > MAX_EXPERTS)
    return df_err_set(e, "%s: model.n_experts out of range", label);
  if (m->record_bytes < 1 || m->record_bytes > MAX_RECORD_BYTES)
    return df_err_set(e, "%s: model.record_bytes out of range", label);
  if (m->ndrives < 1 || m->ndrives > DF_MF_MAX_DRIVES)
    return df_err_set(e, "%s: drives must hold 1..%d entries", label, DF_MF_MAX_DRIVES);
  if (m->nrecs != (m->n_layers - m->first_layer) * m->n_experts)
    return df_err_set(e, "%s: records: %d entries, expected %d (every routed expert once)", label,
                      m->nrecs, (m->n_layers - m->first_layer) * m->n_experts);
  for (int d = 0; d < m->ndrives; d++) {
    const df_mf_drive *dr = &m->drives[d];
    if (!dr->path || !dr->path[0]) return df_err_set(e, "%s: drives[%d].path is empty", label, d);
    if (!dr->file || !dr->file[0] || strchr(dr->file, '/') || !strcmp(dr->file, ".") ||
        !strcmp(dr->file, ".."))
      return df_err_set(e, "%s: drives[%d].file must be a plain file name", label, d);
    if (dr->bytes % m->align || dr->bytes > MAX_FILE_BYTES)
      return df_err_set(e, "%s: drives[%d].bytes is not a multiple of %u", label, d, m->align);
    if (!(dr->bandwidth >= 0) || !isfinite(dr->bandwidth))
      return df_err_set(e, "%s: drives[%d].bandwidth must be >= 0", label, d);
    for (int d2 = 0; d2 < d; d2++)
      if (!strcmp(m->drives[d2].path, dr->path) && !strcmp(m->drives[d2].file, dr->file))
        return df_err_set(e, "%s: drives[%d] repeats drives[%d]", label, d, d2);
  }
  uint64_t padded = (m->record_bytes + m->align - 1) / m->align * m->align;
  size_t ncopies = 0;
  for (int i = 0; i < m->nrecs; i++) {
    const df_mf_record *r = &m->recs[i];
    int want_l = m->first_layer + i / m->n_experts, want_e = i % m->n_experts;
    if (r->layer != want_l || r->expert != want_e)
      return df_err_set(e,
                        "%s: records[%d] is (layer %d, expert %d), expected (%d, %d): records "
                        "must be complete and ordered by layer, expert",
                        label, i, r->layer, r->expert, want_l, want_e);
    if (r->ncopies < 1 || r->ncopies > DF_MF_MAX_COPIES)
      return df_err_set(e, "%s: records[%d] (layer %d, expert %d) has %d copies (1..%d)", label, i,
                        r->layer, r->expert, r->ncopies, DF_MF_MAX_COPIES);
    for (int c = 0; c < r->ncopies; c++) {
      const df_mf_copy *cp = &r->copies[c];
      if (cp->drive < 0 || cp->drive >= m->ndrives)
        return df_err_set(e, "%s: records[%d] copy %d: drive %d does not exist", label, i, c,
                          cp->drive);
      for (int c2 = 0; c2 < c; c2++)
        if (r->copies[c2].drive == cp->drive)
          return df_err_set(e, "%s: records[%d] has two copies on drive %d", label, i, cp->drive);
      if (cp->offset % m->align)
        return df_err_set(e, "%s: records[%d] copy %d: offset %" PRIu64 " is not %u-aligned",
                          label, i, c, cp->offset, m->align);
      if (cp->offset > m->drives[cp->drive].bytes ||
          m->drives[cp->drive].bytes - cp->offset < padded)
        return df_err_set(e, "%s: records[%d] copy %d ends past drives[%d].bytes", label, i, c,
                          cp->drive);
      ncopies++;
    }
  }
  if (m->has_spine && check_spine(m, label, e)) return -1;
  /* No overlaps: per drive, sorted by offset, each span ends before the next begins. */
  size_t nspan = ncopies + (m->has_spine ? (size_t)m->spine.nchunks : 0);
  span *sp = df_xmalloc((nspan ? nspan : 1) * sizeof *sp);
  int rc = 0;
  for (int d = 0; d < m->ndrives && !rc; d++) {
    size_t n = 0;
    for (int i = 0; i < m->nrecs; i++)
      for (int c = 0; c < m->recs[i].ncopies; c++)
        if (m->recs[i].copies[c].drive == d)
          sp[n++] = (span){m->recs[i].copies[c].offset, padded, i};
    for (int c = 0; m->has_spine && c < m->spine.nchunks; c++)
      if (m->spine.chunks[c].drive == d)
        sp[n++] = (span){m->spine.chunks[c].offset, m->spine.chunks[c].len, -1 - c};
    qsort(sp, n, sizeof *sp, cmp_span);
    for (size_t k = 1; k < n; k++)
      if (sp[k].off - sp[k - 1].off < sp[k - 1].len) {
        char a[48], b[48];
        span_name(a, sizeof a, sp[k - 1].rec);
        span_name(b, sizeof b, sp[k].rec);
        rc = df_err_set(e, "%s: %s and %s overlap on drive %d", label, a, b, d);
        break;
      }
  }
  free(sp);
  return rc;
}

static const char *const top_keys[] = {"format", "version", "model",  "align",
                                       "drives", "records", "spine"}; /* spine optional */
static const char *const spine_keys[] = {"kind", "layout", "units"};
static const char *const model_keys[] = {"fingerprint", "first_layer", "n_layers", "n_experts",
                                         "record_bytes"};
static const char *const drive_keys[] = {"path", "file", "bytes", "bandwidth"};

static int parse_spine(df_manifest *m, json_t *o, const char *label, df_err *e) {
  char field[96];
  df_mf_spine *sp = &m->spine;
  m->has_spine = 1;
  if (check_keys(o, spine_keys, 3, "spine", label, e)) return -1;
  json_t *k = json_object_get(o, "kind");
  if (!json_is_string(k) || !kind_ok(json_string_value(k)))
    return df_err_set(e, "%s: spine.kind must be \"bf16\" or \"int8\"", label);
  snprintf(sp->kind, sizeof sp->kind, "%s", json_string_value(k));
  if (get_hex(json_object_get(o, "layout"), &sp->layout, "spine.layout", label, e)) return -1;
  json_t *us = json_object_get(o, "units");
  if (!json_is_array(us) || json_array_size(us) < 1 || json_array_size(us) > MAX_LAYERS + 1)
    return df_err_set(e, "%s: spine.units must be an array of 1..%d units", label, MAX_LAYERS + 1);
  size_t total = 0;
  for (size_t i = 0; i < json_array_size(us); i++) {
    json_t *u = json_array_get(us, i), *cs = json_is_array(u) ? json_array_get(u, 2) : NULL;
    if (!json_is_array(u) || json_array_size(u) != 3 || !json_is_array(cs) ||
        json_array_size(cs) < 1)
      return df_err_set(e, "%s: spine.units[%zu] must be [unit, bytes, [chunks...]]", label, i);
    total += json_array_size(cs);
    if (total > MAX_SPINE_CHUNKS)
      return df_err_set(e, "%s: spine: more than %d chunks", label, MAX_SPINE_CHUNKS);
  }
  sp->nunits = (int)json_array_size(us);
  sp->units = df_xcalloc((size_t)sp->nunits, sizeof *sp->units);
  sp->nchunks = (int)total;
  sp->chunks = df_xcalloc(total, sizeof *sp->chunks);
  int c = 0;
  for (int i = 0; i < sp->nunits; i++) {
    json_t *u = json_array_get(us, (size_t)i), *cs = json_array_get(u, 2);
    df_mf_spine_unit *mu = &sp->units[i];
    snprintf(field, sizeof field, "spine.units[%d] unit", i);
    if (get_int(json_array_get(u, 0), 0, MAX_LAYERS, &mu->unit, field, label, e)) return -1;
    snprintf(field, sizeof field, "spine.units[%d] bytes", i);
    if (get_u64(json_array_get(u, 1), 1, MAX_FILE_BYTES, &mu->bytes, field, label, e)) return -1;
    mu->first = c;
    mu->nchunks = (int)json_array_size(cs);
    for (int j = 0; j < mu->nchunks; j++, c++) {
      json_t *ch = json_array_get(cs, (size_t)j);
      df_mf_chunk *mc = &sp->chunks[c];
      if (!json_is_array(ch) || json_array_size(ch) != 4)
        return df_err_set(e, "%s: spine.units[%d] chunk %d must be [drive, offset, len, xxh3]",
                          label, i, j);
      snprintf(field, sizeof field, "spine.units[%d] chunk %d drive", i, j);
      if (get_int(json_array_get(ch, 0), 0, DF_MF_MAX_DRIVES, &mc->drive, field, label, e))
        return -1;
      snprintf(field, sizeof field, "spine.units[%d] chunk %d offset", i, j);
      if (get_u64(json_array_get(ch, 1), 0, MAX_FILE_BYTES, &mc->offset, field, label, e)) return -1;
      snprintf(field, sizeof field, "spine.units[%d] chunk %d len", i, j);
      if (get_u64(json_array_get(ch, 2), 1, MAX_FILE_BYTES, &mc->len, field, label, e)) return -1;
      snprintf(field, sizeof field, "spine.units[%d] chunk %d xxh3", i, j);
      if (get_hex(json_array_get(ch, 3), &mc->xxh3, field, label, e)) return -1;
    }
  }
  return 0;
}

static int parse_obj(df_manifest *m, json_t *root, const char *label, df_err *e) {
  char field[96];
  if (check_keys_opt(root, top_keys, 7, 6, "the manifest", label, e)) return -1;
  json_t *fmt = json_object_get(root, "format");
  if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "deltafin-pack"))
    return df_err_set(e, "%s: format must be \"deltafin-pack\"", label);
  int ver;
  if (get_int(json_object_get(root, "version"), 1, 1, &ver, "version", label, e)) return -1;
  json_t *mo = json_object_get(root, "model");
  if (check_keys(mo, model_keys, 5, "model", label, e)) return -1;
  if (get_hex(json_object_get(mo, "fingerprint"), &m->fingerprint, "model.fingerprint", label, e))
    return -1;
  if (get_int(json_object_get(mo, "first_layer"), 0, MAX_LAYERS, &m->first_layer,
              "model.first_layer", label, e) ||
      get_int(json_object_get(mo, "n_layers"), 1, MAX_LAYERS, &m->n_layers, "model.n_layers",
              label, e) ||
      get_int(json_object_get(mo, "n_experts"), 1, MAX_EXPERTS, &m->n_experts, "model.n_experts",
              label, e) ||
      get_u64(json_object_get(mo, "record_bytes"), 1, MAX_RECORD_BYTES, &m->record_bytes,
              "model.record_bytes", label, e))
    return -1;
  if (m->first_layer >= m->n_layers)
    return df_err_set(e, "%s: model.first_layer must be below model.n_layers", label);
  uint64_t al;
  if (get_u64(json_object_get(root, "align"), DF_MF_ALIGN, DF_MF_ALIGN, &al, "align", label, e))
    return -1;
  m->align = (uint32_t)al;
  json_t *dr = json_object_get(root, "drives");
  if (!json_is_array(dr) || json_array_size(dr) < 1 || json_array_size(dr) > DF_MF_MAX_DRIVES)
    return df_err_set(e, "%s: drives must be an array of 1..%d drives", label, DF_MF_MAX_DRIVES);
  m->ndrives = (int)json_array_size(dr);
  m->drives = df_xcalloc((size_t)m->ndrives, sizeof *m->drives);
  for (int d = 0; d < m->ndrives; d++) {
    json_t *o = json_array_get(dr, (size_t)d);
    snprintf(field, sizeof field, "drives[%d]", d);
    if (check_keys(o, drive_keys, 4, field, label, e)) return -1;
    json_t *p = json_object_get(o, "path"), *f = json_object_get(o, "file");
    if (!json_is_string(p) || !json_is_string(f))
      return df_err_set(e, "%s: drives[%d].path and .file must be strings", label, d);
    m->drives[d].path = df_xstrdup(json_string_value(p));
    m->drives[d].file = df_xstrdup(json_string_value(f));
    snprintf(field, sizeof field, "drives[%d].bytes", d);
    if (get_u64(json_object_get(o, "bytes"), 0, MAX_FILE_BYTES, &m->drives[d].bytes, field, label,
                e))
      return -1;
    json_t *bw = json_object_get(o, "bandwidth");
    if (!json_is_number(bw) || json_number_value(bw) < 0)
      return df_err_set(e, "%s: drives[%d].bandwidth must be a number >= 0", label, d);
    m->drives[d].bandwidth = json_number_value(bw);
  }
  json_t *recs = json_object_get(root, "records");
  size_t want = (size_t)(m->n_layers - m->first_layer) * (size_t)m->n_experts;
  if (!json_is_array(recs) || json_array_size(recs) != want)
    return df_err_set(e, "%s: records must be an array of %zu entries (every routed expert once)",
                      label, want);
  m->nrecs = (int)want;
  m->recs = df_xcalloc(want, sizeof *m->recs);
  for (size_t i = 0; i < want; i++) {
    json_t *r = json_array_get(recs, i);
    df_mf_record *mr = &m->recs[i];
    if (!json_is_array(r) || json_array_size(r) != 3)
      return df_err_set(e, "%s: records[%zu] must be [layer, expert, copies]", label, i);
    snprintf(field, sizeof field, "records[%zu] layer", i);
    if (get_int(json_array_get(r, 0), 0, MAX_LAYERS, &mr->layer, field, label, e)) return -1;
    snprintf(field, sizeof field, "records[%zu] expert", i);
    if (get_int(json_array_get(r, 1), 0, MAX_EXPERTS, &mr->expert, field, label, e)) return -1;
    json_t *cs = json_array_get(r, 2);
    if (!json_is_array(cs) || json_array_size(cs) < 1 || json_array_size(cs) > DF_MF_MAX_COPIES)
      return df_err_set(e, "%s: records[%zu] copies must be an array of 1..%d", label, i,
                        DF_MF_MAX_COPIES);
    mr->ncopies = (int)json_array_size(cs);
    for (int c = 0; c < mr->ncopies; c++) {
      json_t *cp = json_array_get(cs, (size_t)c);
      if (!json_is_array(cp) || json_array_size(cp) != 3)
        return df_err_set(e, "%s: records[%zu] copy %d must be [drive, offset, xxh3]", label, i, c);
      snprintf(field, sizeof field, "records[%zu] copy %d drive", i, c);
      if (get_int(json_array_get(cp, 0), 0, DF_MF_MAX_DRIVES, &mr->copies[c].drive, field, label,
                  e))
        return -1;
      snprintf(field, sizeof field, "records[%zu] copy %d offset", i, c);
      if (get_u64(json_array_get(cp, 1), 0, MAX_FILE_BYTES, &mr->copies[c].offset, field, label,
                  e))
        return -1;
      snprintf(field, sizeof field, "records[%zu] copy %d xxh3", i, c);
      if (get_hex(json_array_get(cp, 2), &mr->copies[c].xxh3, field, label, e)) return -1;
    }
  }
  json_t *spj = json_object_get(root, "spine");
  if (spj && parse_spine(m, spj, label, e)) return -1;
  return df_manifest_check(m, label, e);
}

int df_manifest_parse(df_manifest *m, const char *json, size_t len, const char *label, df_err *e) {
  memset(m, 0, sizeof *m);
  if (!df_utf8_valid(json, len)) return df_err_set(e, "%s: not valid UTF-8", label);
  json_error_t je;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return df_err_set(e, "%s: invalid JSON at line %d column %d: %s", label, je.line, je.column,
                      je.text);
  int rc = parse_obj(m, root, label, e);
  json_decref(root);
  if (rc) df_manifest_free(m);
  return rc;
}

int df_manifest_load(df_manifest *m, const char *path, df_err *e) {
  char *buf;
  size_t len;
  if (df_file_read(path, &buf, &len, e)) return df_err_prefix(e, "pack manifest: ");
  int rc = df_manifest_parse(m, buf, len, path, e);
  free(buf);
  return rc;
}

char *df_manifest_to_json(const df_manifest *m) {
  json_t *root = json_object();
  json_object_set_new(root, "format", json_string("deltafin-pack"));
  json_object_set_new(root, "version", json_integer(1));
  json_t *mo = json_object();
  char hex[17];
  snprintf(hex, sizeof hex, "%016" PRIx64, m->fingerprint);
  json_object_set_new(mo, "fingerprint", json_string(hex));
  json_object_set_new(mo, "first_layer", json_integer(m->first_layer));
  json_object_set_new(mo, "n_layers", json_integer(m->n_layers));
  json_object_set_new(mo, "n_experts", json_integer(m->n_experts));
  json_object_set_new(mo, "record_bytes", json_integer((json_int_t)m->record_bytes));
  json_object_set_new(root, "model", mo);
  json_object_set_new(root, "align", json_integer(m->align));
  json_t *dr = json_array();
  for (int d = 0; d < m->ndrives; d++) {
    json_t *o = json_object();
    json_object_set_new(o, "path", json_string(m->drives[d].path));
    json_object_set_new(o, "file", json_string(m->drives[d].file));
    json_object_set_new(o, "bytes", json_integer((json_int_t)m->drives[d].bytes));
    json_object_set_new(o, "bandwidth", json_real(m->drives[d].bandwidth));
    json_array_append_new(dr, o);
  }
  json_object_set_new(root, "drives", dr);
  json_t *recs = json_array();
  for (int i = 0; i < m->nrecs; i++) {
    const df_mf_record *r = &m->recs[i];
    json_t *cs = json_array();
    for (int c = 0; c < r->ncopies; c++) {
      snprintf(hex, sizeof hex, "%016" PRIx64, r->copies[c].xxh3);
      json_array_append_new(cs, json_pack("[iIs]", r->copies[c].drive,
                                          (json_int_t)r->copies[c].offset, hex));
    }
    json_array_append_new(recs, json_pack("[iio]", r->layer, r->expert, cs));
  }
  json_object_set_new(root, "records", recs);
  if (m->has_spine) {
    const df_mf_spine *sp = &m->spine;
    json_t *so = json_object(), *us = json_array();
    json_object_set_new(so, "kind", json_string(sp->kind));
    snprintf(hex, sizeof hex, "%016" PRIx64, sp->layout);
    json_object_set_new(so, "layout", json_string(hex));
    for (int i = 0; i < sp->nunits; i++) {
      const df_mf_spine_unit *u = &sp->units[i];
      json_t *cs = json_array();
      for (int c = u->first; c < u->first + u->nchunks; c++) {
        const df_mf_chunk *ch = &sp->chunks[c];
        snprintf(hex, sizeof hex, "%016" PRIx64, ch->xxh3);
        json_array_append_new(cs, json_pack("[iIIs]", ch->drive, (json_int_t)ch->offset,
                                            (json_int_t)ch->len, hex));
      }
      json_array_append_new(us, json_pack("[iIo]", u->unit, (json_int_t)u->bytes, cs));
    }
    json_object_set_new(so, "units", us);
    json_object_set_new(root, "spine", so);
  }
  char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  char *out = df_xstrdup(s);
  free(s);
  return out;
}

/* Record sums in a stream install: loading them (file or URL), checking them
 * against the pinned revision and the install's layout, storing them, and
 * proving the records fetched before they were added. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "format/config.h"
#include "remote/download.h"
#include "remote/http.h"
#include "remote/ranges.h"
#include "setup/recsums.h"
#include "store/source.h"

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

int df_recsums_check_set(const df_recsums *r, const df_st_set *set, const df_config *c,
                         const char *label, df_err *e) {
  int nk = (c->n_layers - c->first_k_dense) * c->n_experts;
  if (nk <= 0) return 0;
  df_src_loc *loc = df_xmalloc((size_t)nk * sizeof *loc);
  int rc = df_src_locate(set, c, loc, e);
  df_expert_layout lay;
  df_expert_layout_of(c, &lay);
  int *map = df_xmalloc((size_t)(set->nfiles ? set->nfiles : 1) * sizeof *map);
  for (int i = 0; i < set->nfiles; i++) map[i] = df_recsums_find_shard(r, base_name(set->files[i].path));
  for (int k = 0; !rc && k < nk; k++) {
    int L = c->first_k_dense + k / c->n_experts, X = k % c->n_experts;
    const df_recsum *q = map[loc[k].file] < 0 ? NULL : df_recsums_lookup(r, map[loc[k].file], loc[k].off);
    if (!q || q->len != lay.total || q->layer != L || q->expert != X)
      rc = df_err_set(e,
                      "%s: record sums have no entry for layer %d expert %d (%s, offset %llu, %llu "
                      "bytes): they are for another checkpoint; make them with deltafin record-sums",
                      label, L, X, base_name(set->files[loc[k].file].path),
                      (unsigned long long)loc[k].off, (unsigned long long)lay.total);
  }
  free(map);
  free(loc);
  return rc;
}

static int is_url(const char *s) { return !strncmp(s, "http://", 7) || !strncmp(s, "https://", 8); }

int df_recsums_load(const char *src, const df_http_cfg *hc, const df_hub_info *info,
                    df_recsums **out, char **buf, size_t *len, df_err *e) {
  *out = NULL;
  *buf = NULL;
  *len = 0;
  int rc;
  if (is_url(src)) {
    df_http *h = df_http_new(hc);
    df_http_meta m;
    rc = df_http_get(h, src, DF_RECSUMS_MAX_BYTES, buf, len, &m, e);
    df_http_free(h);
    if (rc) df_err_prefix(e, "--record-sums: ");
  } else {
    rc = df_file_read(src, buf, len, e);
  }
  if (!rc) rc = df_recsums_parse(*buf, *len, src, out, e);
  if (!rc) rc = df_recsums_check_info(*out, info, src, e);
  if (rc) {
    df_recsums_free(*out);
    *out = NULL;
    free(*buf);
    *buf = NULL;
  }
  return rc;
}

/* The records journalled in one partial shard, checked against the sums;
 * failures are dropped (the journal rewritten atomically). */
static int prove_shard(const df_recsums *rs, int si, const char *path, int *checked, int *dropped,
                       df_err *e) {
  char *jp = df_dl_journal_path(path, 1), *buf = NULL;
  size_t len = 0, good;
  df_range *v = NULL;
  int n = 0, rc = df_file_read(jp, &buf, &len, e);
  if (!rc) rc = df_ranges_parse(buf, len, jp, &v, &n, &good, e);
  free(buf);
  int fd = rc ? -1 : open(path, O_RDONLY | O_CLOEXEC);
  if (!rc && fd < 0) rc = df_err_errno(e, "%s", path);
  int k = 0, bad = 0;
  uint8_t *tmp = NULL;
  size_t cap = 0;
  for (int i = 0; !rc && i < n; i++) {
    const df_recsum *q = si < 0 ? NULL : df_recsums_lookup(rs, si, v[i].begin);
    if (!q || q->off + q->len != v[i].end) {
      v[k++] = v[i]; /* not a record (header, spine, a chunk): the shard's sha256 proves it */
      continue;
    }
    if (q->len > cap) tmp = df_xrealloc(tmp, cap = (size_t)q->len);
    ssize_t got = pread(fd, tmp, (size_t)q->len, (off_t)q->off);
    (*checked)++;
    if (got == (ssize_t)q->len && !df_recsums_verify(q, tmp)) {
      v[k++] = v[i];
      continue;
    }
    df_log_warn("%s: layer %d expert %d (offset %llu) does not match the record sums: it was "
                "served or stored wrong; dropped, it is fetched again when needed",
                path, q->layer, q->expert, (unsigned long long)q->off);
    bad++;
  }
  free(tmp);
  if (fd >= 0) close(fd);
  if (!rc && bad) {
    char *out = df_xmalloc((size_t)k * 80 + 1);
    size_t off = 0;
    for (int i = 0; i < k; i++) off += (size_t)df_ranges_format(out + off, &v[i]);
    rc = df_file_write_atomic(jp, out, off, e);
    free(out);
    *dropped += bad;
  }
  free(v);
  free(jp);
  return rc;
}

int df_recsums_install(const char *root, const df_recsums *rs, const char *buf, size_t len,
                       const char *label, df_err *e) {
  df_config c;
  int rc = df_config_load_dir(&c, root, e);
  if (rc) return -1;
  df_st_set set;
  if (df_st_set_open(&set, root, e)) return -1;
  rc = df_recsums_check_set(rs, &set, &c, label, e);
  int checked = 0, dropped = 0;
  for (int i = 0; !rc && i < set.nfiles; i++) {
    char *jp = df_dl_journal_path(set.files[i].path, 1);
    int partial = df_file_exists(jp);
    free(jp);
    if (partial)
      rc = prove_shard(rs, df_recsums_find_shard(rs, base_name(set.files[i].path)),
                       set.files[i].path, &checked, &dropped, e);
  }
  df_st_set_close(&set);
  char *p = df_path_join(root, DF_RECSUMS_FILE);
  if (rc || df_file_write_atomic(p, buf, len, e)) {
    unlink(p); /* sums that do not describe this install are never left to be trusted */
    free(p);
    return -1;
  }
  free(p);
  if (!rc)
    df_log_info("record sums stored (%d records): every expert fetched is checked against them; "
                "%d already fetched checked, %d dropped",
                df_recsums_nrecords(rs), checked, dropped);
  return rc;
}

int df_recsums_check_spans(const char *root, const df_recsums *rs, const char *endpoint,
                           int *checked, df_err *e) {
  *checked = 0;
  int rc = 0;
  uint8_t *tmp = NULL;
  size_t cap = 0;
  for (int si = 0; !rc && si < df_recsums_nshards(rs); si++) {
    const df_recsum_shard *sh = df_recsums_shard(rs, si);
    char *path = df_path_join(root, sh->name), *jp = df_dl_journal_path(path, 1);
    df_ranges *rj = NULL;
    int fd = -1;
    /* a shard without a journal is complete and was verified whole */
    if (sh->nspans && df_file_exists(jp)) {
      rc = df_ranges_open(&rj, jp, e);
      if (!rc && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) rc = df_err_errno(e, "%s", path);
    }
    /* the header first: the spine ranges were planned from it */
    for (int k = 0; !rc && rj && k < sh->nspans; k++) {
      const df_recsum_span *sp = &sh->spans[k];
      if (!df_ranges_covered(rj, sp->off, sp->off + sp->len)) continue;
      if (sp->len > cap) tmp = df_xrealloc(tmp, cap = (size_t)sp->len);
      ssize_t got = pread(fd, tmp, (size_t)sp->len, (off_t)sp->off);
      (*checked)++;
      if (got == (ssize_t)sp->len && !df_recsums_check_bytes(sp->sha256, tmp, sp->len)) continue;
      /* nothing wrong stays behind: the data goes first, then its journal */
      close(fd);
      fd = -1;
      df_ranges_close(rj);
      rj = NULL;
      unlink(path);
      unlink(jp);
      rc = df_err_set(e,
                      "%s: %s (offset %llu, %llu bytes) as served by %s does not match the record "
                      "sums' sha256: a damaged mirror, proxy or cache; the shard was removed, run "
                      "deltafin setup --stream again to fetch it again",
                      path, sp->name, (unsigned long long)sp->off, (unsigned long long)sp->len,
                      endpoint);
    }
    if (fd >= 0) close(fd);
    df_ranges_close(rj);
    free(jp);
    free(path);
  }
  free(tmp);
  return rc;
}

/* Where each record lives: the pack's files (one per drive, copies and
 * checksums from its manifest) or the checkpoint shards, opened O_DIRECT
 * where the filesystem allows; and df_store_locate, the one answer to "where
 * is this record and how would the store read it". */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "store/source.h"
#include "store/store_int.h"

/* The O_DIRECT offset/length granularity of an open file (statx DIOALIGN
 * where the kernel reports it, else the page size the pack aligns to). */
static uint32_t dio_align_of(int fd) {
  int fl = fcntl(fd, F_GETFL);
  int direct = fl >= 0 && (fl & O_DIRECT);
  uint32_t g = direct ? DF_IO_ALIGN : 512;
#ifdef STATX_DIOALIGN
  struct statx sx;
  if (direct && statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
      (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align > 0) {
    g = sx.stx_dio_offset_align;
    if (sx.stx_dio_mem_align > g) g = sx.stx_dio_mem_align;
  }
#endif
  if (g < 512) g = 512;
  if (g > DF_IO_ALIGN || DF_IO_ALIGN % g) g = DF_IO_ALIGN;
  return g;
}

int df_store_open_pack(df_store *s, const df_st_set *set, const char *mpath, df_err *e) {
  df_manifest m;
  if (df_manifest_load(&m, mpath, e)) return -1;
  const df_config *c = s->cfg;
  if (m.first_layer != s->first_layer || m.n_layers != c->n_layers || m.n_experts != c->n_experts ||
      m.record_bytes != s->rec_bytes) {
    df_manifest_free(&m);
    return df_err_set(e,
                      "pack %s does not match this model's expert layout (re-run deltafin pack, "
                      "or use --no-pack)",
                      mpath);
  }
  uint64_t fp;
  if (df_src_fingerprint(set, &fp, e)) {
    df_manifest_free(&m);
    return -1;
  }
  if (fp != m.fingerprint) {
    df_manifest_free(&m);
    return df_err_set(e,
                      "pack %s was made from other checkpoint files than %s (re-run deltafin "
                      "pack, or use --no-pack)",
                      mpath, set->dir);
  }
  s->ndrives = m.ndrives;
  s->drive = df_xcalloc((size_t)m.ndrives, sizeof *s->drive);
  s->n_fds = m.ndrives;
  s->fds = df_xmalloc((size_t)m.ndrives * sizeof *s->fds);
  s->file_paths = df_xcalloc((size_t)m.ndrives, sizeof *s->file_paths);
  uint64_t *size = df_xcalloc((size_t)m.ndrives, sizeof *size);
  char **why = df_xcalloc((size_t)m.ndrives, sizeof *why);
  for (int i = 0; i < m.ndrives; i++) {
    char *p = df_manifest_file_path(&m, i);
    s->drive[i].path = df_xstrdup(m.drives[i].path);
    s->drive[i].rate = m.drives[i].bandwidth > 0 ? m.drives[i].bandwidth : 2e9;
    s->fds[i] = df_open_direct(p, 0, &s->o_direct);
    s->file_paths[i] = df_xstrdup(p);
    struct stat st;
    if (s->fds[i] < 0) {
      why[i] = df_xstrdup(strerror(errno));
      df_log_warn("pack drive %s: %s: %s", m.drives[i].path, p, why[i]);
    } else if (fstat(s->fds[i], &st) == 0) {
      size[i] = (uint64_t)st.st_size;
      if (size[i] < m.drives[i].bytes) {
        why[i] = df_xstrdup("pack file truncated");
        df_log_warn("pack drive %s: %s is %" PRIu64 " bytes, the manifest says %" PRIu64
                    " (truncated): records past the end are read from other copies",
                    m.drives[i].path, p, size[i], m.drives[i].bytes);
      }
    }
    s->drive[i].alive = s->fds[i] >= 0;
    s->drive[i].dio_align = s->fds[i] >= 0 ? dio_align_of(s->fds[i]) : DF_IO_ALIGN;
    free(p);
  }
  int rc = 0;
  uint64_t padded = DF_IO_ROUND_UP(s->rec_bytes);
  for (int k = 0; k < m.nrecs && !rc; k++) {
    const df_mf_record *mr = &m.recs[k];
    rec *r = &s->recs[k];
    r->ncopies = (uint8_t)mr->ncopies;
    int good = 0;
    for (int c = 0; c < mr->ncopies; c++) {
      int dr = mr->copies[c].drive;
      r->c[c] = (copyloc){dr, dr, s->fds[dr], mr->copies[c].offset, mr->copies[c].xxh3};
      if (s->fds[dr] < 0 || mr->copies[c].offset + padded > size[dr]) r->bad |= (uint8_t)(1u << c);
      else good++;
    }
    if (!good) {
      int dr = mr->copies[0].drive;
      rc = df_err_set(e,
                      "pack %s: expert (layer %d, expert %d) has no readable copy (drive %s: %s); "
                      "re-run deltafin pack or use --no-pack",
                      mpath, mr->layer, mr->expert, m.drives[dr].path,
                      why[dr] ? why[dr] : "record past the end of the file");
    }
  }
  for (int i = 0; i < m.ndrives; i++) free(why[i]);
  free(why);
  s->pack_size = size;
  s->has_spine = m.has_spine;
  if (m.has_spine) df_manifest_take_spine(&m, &s->spine);
  df_manifest_free(&m);
  return rc;
}

int df_store_open_shards(df_store *s, const df_st_set *set, df_err *e) {
  df_src_loc *loc = df_xmalloc(s->nkeys * sizeof *loc);
  if (df_src_locate(set, s->cfg, loc, e)) {
    free(loc);
    return -1;
  }
  s->ndrives = 1;
  s->drive = df_xcalloc(1, sizeof *s->drive);
  s->drive[0].path = df_xstrdup(set->dir);
  s->drive[0].rate = 2e9;
  s->drive[0].alive = 1;
  s->n_fds = set->nfiles;
  s->fds = df_xmalloc((size_t)set->nfiles * sizeof *s->fds);
  s->file_paths = df_xcalloc((size_t)set->nfiles, sizeof *s->file_paths);
  for (int i = 0; i < set->nfiles; i++) s->fds[i] = -1;
  for (int i = 0; i < set->nfiles; i++) {
    const char *p = df_st_set_file_path(set, i);
    s->fds[i] = df_open_direct(p, 0, &s->o_direct);
    s->file_paths[i] = df_xstrdup(p);
    if (s->fds[i] < 0) {
      free(loc);
      return df_err_errno(e, "%s", p);
    }
  }
  for (size_t k = 0; k < s->nkeys; k++) {
    s->recs[k].ncopies = 1;
    s->recs[k].c[0] = (copyloc){0, loc[k].file, s->fds[loc[k].file], loc[k].off, 0};
  }
  free(loc);
  /* a stream install: records already fetched carry the checksum their
   * reads are verified against */
  if (df_src_remote_open_verify(&s->remote, set, (df_stream_verify)s->stream_verify, e)) return -1;
  for (size_t k = 0; s->remote && k < s->nkeys; k++) {
    copyloc *c = &s->recs[k].c[0];
    df_src_remote_local(s->remote, c->file, c->off, s->rec_bytes, &c->xxh);
  }
  return 0;
}


const df_mf_spine *df_store_spine_section(const df_store *s) {
  return s && s->from_pack && s->has_spine ? &s->spine : NULL;
}

int df_store_pack_file(const df_store *s, int drive, const char **path, uint64_t *size) {
  if (!s || !s->from_pack || drive < 0 || drive >= s->n_fds) return -1;
  if (path) *path = s->file_paths[drive];
  if (size) *size = s->pack_size ? s->pack_size[drive] : 0;
  return s->fds[drive];
}

int df_store_o_direct(const df_store *s) { return s->o_direct; }

void df_store_close_files(df_store *s) {
  df_mf_spine_free(&s->spine);
  s->has_spine = 0;
  free(s->pack_size);
  s->pack_size = NULL;
  df_src_remote_close(s->remote);
  s->remote = NULL;
  for (int i = 0; i < s->n_fds; i++) {
    if (s->fds[i] >= 0) close(s->fds[i]);
    if (s->file_paths) free(s->file_paths[i]);
  }
  free(s->fds);
  free(s->file_paths);
  s->fds = NULL;
  s->file_paths = NULL;
  s->n_fds = 0;
}

static const rec *rec_of(const df_store *s, int layer, int expert) {
  if (!s || !s->nkeys || layer < s->first_layer || layer >= s->first_layer + s->n_layers ||
      expert < 0 || expert >= s->n_experts)
    return NULL;
  return &s->recs[(size_t)(layer - s->first_layer) * (size_t)s->n_experts + (size_t)expert];
}

int df_store_copies(const df_store *s, int layer, int expert) {
  const rec *r = rec_of(s, layer, expert);
  return r ? r->ncopies : 0;
}

int df_store_locate(const df_store *s, int layer, int expert, int copy, df_store_loc *out,
                    df_err *e) {
  const rec *r = rec_of(s, layer, expert);
  if (!r) return df_err_set(e, "store: no record for layer %d, expert %d", layer, expert);
  if (copy < 0 || copy >= r->ncopies)
    return df_err_set(e, "store: layer %d, expert %d has %d copies, not %d", layer, expert,
                      r->ncopies, copy + 1);
  const copyloc *c = &r->c[copy];
  /* a whole read as the scheduler issues it: from the aligned start below
   * the record to the aligned end above it */
  uint64_t head = c->off % DF_IO_ALIGN;
  *out = (df_store_loc){.path = s->file_paths[c->file],
                        .file = c->file,
                        .drive = c->drive,
                        .off = c->off,
                        .bytes = s->rec_bytes,
                        .read_off = c->off - head,
                        .read_len = (uint32_t)DF_IO_ROUND_UP(head + s->rec_bytes)};
  return 0;
}

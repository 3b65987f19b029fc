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
  s->sch.ndrives = m.ndrives;
  s->sch.drive = df_xcalloc((size_t)m.ndrives, sizeof *s->sch.drive);
  s->loc.n_fds = m.ndrives;
  s->loc.fds = df_xmalloc((size_t)m.ndrives * sizeof *s->loc.fds);
  s->loc.file_paths = df_xcalloc((size_t)m.ndrives, sizeof *s->loc.file_paths);
  uint64_t *size = df_xcalloc((size_t)m.ndrives, sizeof *size);
  char **why = df_xcalloc((size_t)m.ndrives, sizeof *why);
  for (int i = 0; i < m.ndrives; i++) {
    char *p = df_manifest_file_path(&m, i);
    s->sch.drive[i].path = df_xstrdup(m.drives[i].path);
    s->sch.drive[i].rate = m.drives[i].bandwidth > 0 ? m.drives[i].bandwidth : 2e9;
    s->loc.fds[i] = df_open_direct(p, 0, &s->loc.o_direct);
    s->loc.file_paths[i] = df_xstrdup(p);
    struct stat st;
    if (s->loc.fds[i] < 0) {
      why[i] = df_xstrdup(strerror(errno));
      df_log_warn("pack drive %s: %s: %s", m.drives[i].path, p, why[i]);
    } else if (fstat(s->loc.fds[i], &st) == 0) {
      size[i] = (uint64_t)st.st_size;
      if (size[i] < m.drives[i].bytes) {
        why[i] = df_xstrdup("pack file truncated");
        df_log_warn("pack drive %s: %s is %" PRIu64 " bytes, the manifest says %" PRIu64
                    " (truncated): records past the end are read from other copies",
                    m.drives[i].path, p, size[i], m.drives[i].bytes);
      }
    }
    s->sch.drive[i].alive = s->loc.fds[i] >= 0;
    s->sch.drive[i].dio_align = s->loc.fds[i] >= 0 ? dio_align_of(s->loc.fds[i]) : DF_IO_ALIGN;
    free(p);
  }
  int rc = 0;
  uint64_t padded = DF_IO_ROUND_UP(s->rec_bytes);
  for (int k = 0; k < m.nrecs && !rc; k++) {
    const df_mf_record *mr = &m.recs[k];
    rec *r = &s->loc.recs[k];
    r->ncopies = (uint8_t)mr->ncopies;
    int good = 0;
    for (int c = 0; c < mr->ncopies; c++) {
      int dr = mr->copies[c].drive;
      r->c[c] = (copyloc){dr, dr, s->loc.fds[dr], mr->copies[c].offset, mr->copies[c].xxh3};
      if (s->loc.fds[dr] < 0 || mr->copies[c].offset + padded > size[dr]) r->bad |= (uint8_t)(1u << c);
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
  s->loc.pack_size = size;
  s->loc.has_spine = m.has_spine;
  if (m.has_spine) df_manifest_take_spine(&m, &s->loc.spine);
  df_manifest_free(&m);
  return rc;
}

int df_store_open_shards(df_store *s, const df_st_set *set, df_err *e) {
  df_src_loc *loc = df_xmalloc(s->nkeys * sizeof *loc);
  if (df_src_locate(set, s->cfg, loc, e)) {
    free(loc);
    return -1;
  }
  s->sch.ndrives = 1;
  s->sch.drive = df_xcalloc(1, sizeof *s->sch.drive);
  s->sch.drive[0].path = df_xstrdup(set->dir);
  s->sch.drive[0].rate = 2e9;
  s->sch.drive[0].alive = 1;
  s->loc.n_fds = set->nfiles;
  s->loc.fds = df_xmalloc((size_t)set->nfiles * sizeof *s->loc.fds);
  s->loc.file_paths = df_xcalloc((size_t)set->nfiles, sizeof *s->loc.file_paths);
  for (int i = 0; i < set->nfiles; i++) s->loc.fds[i] = -1;
  for (int i = 0; i < set->nfiles; i++) {
    const char *p = df_st_set_file_path(set, i);
    s->loc.fds[i] = df_open_direct(p, 0, &s->loc.o_direct);
    s->loc.file_paths[i] = df_xstrdup(p);
    if (s->loc.fds[i] < 0) {
      free(loc);
      return df_err_errno(e, "%s", p);
    }
  }
  for (size_t k = 0; k < s->nkeys; k++) {
    s->loc.recs[k].ncopies = 1;
    s->loc.recs[k].c[0] = (copyloc){0, loc[k].file, s->loc.fds[loc[k].file], loc[k].off, 0};
  }
  free(loc);
  /* a stream install: records already fetched carry the checksum their
   * reads are verified against */
  if (df_src_remote_open_verify(&s->net.src, set, (df_stream_verify)s->net.stream_verify, e)) return -1;
  for (size_t k = 0; s->net.src && k < s->nkeys; k++) {
    copyloc *c = &s->loc.recs[k].c[0];
    df_src_remote_local(s->net.src, c->file, c->off, s->rec_bytes, &c->xxh);
  }
  return 0;
}


const df_mf_spine *df_store_spine_section(const df_store *s) {
  return s && s->loc.from_pack && s->loc.has_spine ? &s->loc.spine : NULL;
}

int df_store_pack_file(const df_store *s, int drive, const char **path, uint64_t *size) {
  if (!s || !s->loc.from_pack || drive < 0 || drive >= s->loc.n_fds) return -1;
  if (path) *path = s->loc.file_paths[drive];
  if (size) *size = s->loc.pack_size ? s->loc.pack_size[drive] : 0;
  return s->loc.fds[drive];
}

int df_store_o_direct(const df_store *s) { return s->loc.o_direct; }

void df_store_close_files(df_store *s) {
  df_mf_spine_free(&s->loc.spine);
  s->loc.has_spine = 0;
  free(s->loc.pack_size);
  s->loc.pack_size = NULL;
  df_src_remote_close(s->net.src);
  s->net.src = NULL;
  for (int i = 0; i < s->loc.n_fds; i++) {
    if (s->loc.fds[i] >= 0) close(s->loc.fds[i]);
    if (s->loc.file_paths) free(s->loc.file_paths[i]);
  }
  free(s->loc.fds);
  free(s->loc.file_paths);
  s->loc.fds = NULL;
  s->loc.file_paths = NULL;
  s->loc.n_fds = 0;
}

static const rec *rec_of(const df_store *s, int layer, int expert) {
  if (!s || !s->nkeys || layer < s->first_layer || layer >= s->first_layer + s->n_layers ||
      expert < 0 || expert >= s->n_experts)
    return NULL;
  return &s->loc.recs[(size_t)(layer - s->first_layer) * (size_t)s->n_experts + (size_t)expert];
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
  *out = (df_store_loc){.path = s->loc.file_paths[c->file],
                        .file = c->file,
                        .drive = c->drive,
                        .off = c->off,
                        .bytes = s->rec_bytes,
                        .read_off = c->off - head,
                        .read_len = (uint32_t)DF_IO_ROUND_UP(head + s->rec_bytes)};
  return 0;
}

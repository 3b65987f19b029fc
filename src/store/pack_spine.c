/* The pack's spine section: every streamable spine unit's bytes, cut into
 * 4 KiB-aligned chunks balanced over the drives (store/spine_place.h), each
 * journalled with its xxh3 like the expert records. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/log.h"
#include "base/util.h"
#include "store/pack_int.h"
#include "store/spine.h"
#include "store/spine_place.h"
#include "store/store.h"

#define SPINE_CHUNK DF_SPINE_CHUNK /* the spine stream's request size (spine.h) */

/* The spine section: after each drive's expert records, balanced by bytes. */
void df_pack_plan_spine(pack_job *j, const double *bw) {
  const df_pack_spine *ps = j->o->spine;
  df_manifest *m = &j->m;
  int nd = m->ndrives;
  int *ids = df_xmalloc((size_t)ps->nunits * sizeof *ids);
  uint64_t *bytes = df_xmalloc((size_t)ps->nunits * sizeof *bytes);
  uint64_t *base = df_xmalloc((size_t)nd * sizeof *base), *end = df_xmalloc((size_t)nd * sizeof *end);
  for (int u = 0; u < ps->nunits; u++) ids[u] = ps->units[u].unit, bytes[u] = ps->units[u].bytes;
  for (int d = 0; d < nd; d++) base[d] = m->drives[d].bytes;
  df_spine_place(&m->spine, ids, bytes, ps->nunits, nd, bw, SPINE_CHUNK, DF_IO_ALIGN, base, end);
  snprintf(m->spine.kind, sizeof m->spine.kind, "%s", ps->kind);
  m->spine.layout = ps->layout;
  m->has_spine = 1;
  for (int d = 0; d < nd; d++) m->drives[d].bytes = end[d];
  free(ids);
  free(bytes);
  free(base);
  free(end);
}

/* ---- the spine section ---- */

/* An open source file of the spine's extents (by path, opened once). */
typedef struct spine_src {
  const char *path;
  int fd;
} spine_src;

static int src_fd(spine_src *src, int *nsrc, const char *path, df_err *e) {
  for (int i = 0; i < *nsrc; i++)
    if (!strcmp(src[i].path, path)) return src[i].fd;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return df_err_errno(e, "pack: spine source %s", path);
  src[*nsrc] = (spine_src){path, fd};
  (*nsrc)++;
  return fd;
}

/* Bytes [boff, boff + len) of unit u's buffer image into buf (zeros past a
 * file's end, as the stream's buffer never uses them). */
static int spine_image(const df_pack_spine_unit *u, uint64_t boff, uint64_t len, uint8_t *buf,
                       spine_src *src, int *nsrc, df_err *e) {
  memset(buf, 0, (size_t)len);
  uint64_t xb = 0;
  for (int x = 0; x < u->nex && len; x++) {
    const df_pack_extent *ex = &u->ex[x];
    uint64_t lo = boff > xb ? boff : xb, hi = boff + len < xb + ex->len ? boff + len : xb + ex->len;
    if (lo < hi) {
      int fd = src_fd(src, nsrc, ex->path, e);
      if (fd < 0) return -1;
      int64_t got = df_pread_all(fd, buf + (lo - boff), (size_t)(hi - lo), ex->off + (lo - xb));
      if (got < 0) return df_err_errno(e, "pack: reading spine unit %d from %s", u->unit, ex->path);
    }
    xb += ex->len;
  }
  return 0;
}

/* Every spine chunk still to write: its image built from the source files,
 * hashed, written, made durable and journalled unit by unit. */
int df_pack_copy_spine(pack_job *j, df_err *e) {
  const df_manifest *m = &j->m;
  const df_pack_spine *ps = j->o->spine;
  if (!m->has_spine || !ps) return 0;
  uint64_t todo = 0, cmax = 0;
  for (int c = 0; c < m->spine.nchunks; c++) {
    if (!DONE(j, j->nk + (size_t)c, 0)) todo += m->spine.chunks[c].len;
    if (m->spine.chunks[c].len > cmax) cmax = m->spine.chunks[c].len;
  }
  if (!todo) return 0;
  uint8_t *buf = df_xaligned(DF_IO_ALIGN, (size_t)cmax);
  int nsrc = 0, capsrc = 0;
  for (int u = 0; u < ps->nunits; u++) capsrc += ps->units[u].nex;
  spine_src *src = df_xcalloc((size_t)capsrc + 1, sizeof *src);
  df_progress pr;
  df_progress_begin(&pr, "pack spine", todo);
  if (!j->o->progress) pr.tty = 0;
  uint64_t written = 0;
  double t_start = df_now();
  int rc = 0;
  for (int i = 0; i < m->spine.nunits && !rc; i++) {
    const df_mf_spine_unit *mu = &m->spine.units[i];
    const df_pack_spine_unit *u = &ps->units[i];
    if (mu->unit != u->unit || mu->bytes != u->bytes) {
      rc = df_err_set(e, "pack: the plan's spine unit %d does not match the model's (internal "
                         "error); delete %s and pack again", mu->unit, j->plan_path);
      break;
    }
    uint8_t touched[DF_MF_MAX_DRIVES] = {0};
    uint64_t boff = 0;
    for (int c = mu->first; c < mu->first + mu->nchunks && !rc; c++) {
      const df_mf_chunk *ch = &m->spine.chunks[c];
      size_t k = j->nk + (size_t)c;
      if (!DONE(j, k, 0)) {
        if (spine_image(u, boff, ch->len, buf, src, &nsrc, e)) rc = -1;
        else if (df_pwrite_all(j->fd[ch->drive], buf, (size_t)ch->len, ch->offset))
          rc = df_err_errno(e, "pack: writing %s/%s", j->dabs[ch->drive], j->fname);
        else {
          DONE_XXH(j, k, 0) = XXH3_64bits(buf, (size_t)ch->len);
          DONE(j, k, 0) = 2;
          touched[ch->drive] = 1;
          written += ch->len;
        }
      }
      boff += ch->len;
    }
    for (int d = 0; d < m->ndrives && !rc; d++)
      if (touched[d] && fdatasync(j->fd[d]))
        rc = df_err_errno(e, "pack: fdatasync %s/%s", j->dabs[d], j->fname);
    for (int c = mu->first; c < mu->first + mu->nchunks && !rc; c++) {
      size_t k = j->nk + (size_t)c;
      if (DONE(j, k, 0) != 2) continue;
      char line[96];
      df_pack_journal_line(line, sizeof line, (int)k, 0, DONE_XXH(j, k, 0));
      fputs(line, j->jf[m->spine.chunks[c].drive]);
      DONE(j, k, 0) = 1;
    }
    for (int d = 0; d < m->ndrives && !rc; d++)
      if (touched[d] && (fflush(j->jf[d]) || fdatasync(fileno(j->jf[d]))))
        rc = df_err_errno(e, "pack: %s", j->jpath[d]);
    df_progress_update(&pr, written);
    df_pack_throttle(j->o->max_rate, written, t_start);
  }
  if (!rc) df_progress_end(&pr);
  for (int i = 0; i < nsrc; i++) close(src[i].fd);
  free(src);
  free(buf);
  return rc;
}


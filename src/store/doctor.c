/* `deltafin doctor`: every copy of every record of a pack, and every chunk
 * of its spine section, read back (O_DIRECT) and checked against the
 * manifest's xxh3 (see pack.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/log.h"
#include "base/util.h"
#include "format/safetensors.h"
#include "store/manifest.h"
#include "store/pack.h"
#include "store/source.h"
#include "store/store.h"

/* The spine section's chunks (one copy each): a bad chunk leaves its unit
 * without a good source in the pack. */
static void check_spine(const df_manifest *m, const int *fd, FILE *out, df_doctor_report *rep) {
  if (!m->has_spine) return;
  const df_mf_spine *sp = &m->spine;
  uint64_t cmax = 0;
  for (int c = 0; c < sp->nchunks; c++)
    if (sp->chunks[c].len > cmax) cmax = sp->chunks[c].len;
  uint8_t *buf = df_xaligned(DF_IO_ALIGN, (size_t)cmax);
  for (int i = 0; i < sp->nunits; i++) {
    const df_mf_spine_unit *u = &sp->units[i];
    for (int c = u->first; c < u->first + u->nchunks; c++) {
      const df_mf_chunk *ch = &sp->chunks[c];
      rep->spine_chunks++;
      int64_t got = fd[ch->drive] < 0 ? -1 : df_pread_all(fd[ch->drive], buf, (size_t)ch->len, ch->offset);
      if (got < (int64_t)ch->len) {
        rep->spine_missing++;
        fprintf(out, "MISSING spine unit %d chunk %d of %d: drive %d (%s) offset %" PRIu64 ": %s\n",
                u->unit, c - u->first + 1, u->nchunks, ch->drive, m->drives[ch->drive].path,
                ch->offset, fd[ch->drive] < 0 ? "drive file missing"
                            : got < 0 ? strerror(errno) : "past the end of the file");
      } else if (XXH3_64bits(buf, (size_t)ch->len) != ch->xxh3) {
        rep->spine_corrupt++;
        fprintf(out, "CORRUPT spine unit %d chunk %d of %d: drive %d (%s) offset %" PRIu64
                     ": checksum mismatch\n",
                u->unit, c - u->first + 1, u->nchunks, ch->drive, m->drives[ch->drive].path,
                ch->offset);
      } else {
        rep->spine_ok++;
      }
    }
  }
  free(buf);
  fprintf(out, "spine section (%s): %d units, %" PRIu64 " chunks: %" PRIu64 " ok, %" PRIu64
               " corrupt, %" PRIu64 " missing%s\n",
          sp->kind, sp->nunits, rep->spine_chunks, rep->spine_ok, rep->spine_corrupt,
          rep->spine_missing,
          rep->spine_corrupt || rep->spine_missing
              ? "; re-run deltafin pack --spine (or run with --no-pack)"
              : "");
}

int df_doctor(const char *model_dir, const char *manifest, FILE *out, int progress,
              df_doctor_report *rep, df_err *e) {
  memset(rep, 0, sizeof *rep);
  char *mpath = manifest ? df_xstrdup(manifest) : df_path_join(model_dir, DF_PACK_MANIFEST_NAME);
  if (!df_file_exists(mpath)) {
    /* pack writes its plan (MANIFEST.plan) first and the manifest last: a
     * plan without a manifest is an interrupted pack, which resumes */
    char *plan = df_xmalloc(strlen(mpath) + 6);
    sprintf(plan, "%s.plan", mpath);
    if (df_file_exists(plan))
      df_err_set(e,
                 "doctor: %s: no pack manifest yet: a pack was interrupted (%s exists); run the same "
                 "deltafin pack command again to resume it",
                 mpath, plan);
    else
      df_err_set(e, "doctor: %s: no pack manifest (run deltafin pack --model %s --drives ...)", mpath,
                 model_dir);
    free(plan);
    free(mpath);
    return -1;
  }
  df_manifest m;
  if (df_manifest_load(&m, mpath, e)) {
    free(mpath);
    return -1;
  }
  int rc = 0;
  df_st_set set;
  memset(&set, 0, sizeof set);
  if (df_st_set_open(&set, model_dir, e) == 0) {
    uint64_t fp;
    if (df_src_fingerprint(&set, &fp, e) == 0 && fp != m.fingerprint)
      fprintf(out, "STALE the pack was made from other checkpoint files than %s; re-run deltafin pack\n",
              model_dir);
    df_st_set_close(&set);
  } else {
    fprintf(out, "note: cannot open the checkpoint (%s); checking the pack alone\n", e->msg);
  }
  int *fd = df_xmalloc((size_t)m.ndrives * sizeof *fd);
  uint64_t *size = df_xcalloc((size_t)m.ndrives, sizeof *size);
  for (int d = 0; d < m.ndrives; d++) {
    char *p = df_manifest_file_path(&m, d);
    fd[d] = df_open_direct(p, 0, NULL);
    struct stat st;
    if (fd[d] < 0) fprintf(out, "MISSING drive %d: %s: %s\n", d, p, strerror(errno));
    else if (fstat(fd[d], &st) == 0) {
      size[d] = (uint64_t)st.st_size;
      if (size[d] < m.drives[d].bytes)
        fprintf(out, "TRUNCATED drive %d: %s is %" PRIu64 " bytes, the manifest says %" PRIu64 "\n",
                d, p, size[d], m.drives[d].bytes);
    }
    free(p);
  }
  uint64_t padded = DF_IO_ROUND_UP(m.record_bytes);
  uint8_t *buf = df_xaligned(DF_IO_ALIGN, (size_t)padded);
  uint64_t total = 0;
  for (int k = 0; k < m.nrecs; k++) total += (uint64_t)m.recs[k].ncopies * m.record_bytes;
  df_progress pr;
  df_progress_begin(&pr, "doctor", total);
  if (!progress) pr.tty = 0;
  uint64_t seen = 0;
  rep->records = (uint64_t)m.nrecs;
  for (int k = 0; k < m.nrecs; k++) {
    const df_mf_record *r = &m.recs[k];
    int good = 0;
    for (int c = 0; c < r->ncopies; c++) {
      const df_mf_copy *cp = &r->copies[c];
      rep->copies++;
      seen += m.record_bytes;
      if (fd[cp->drive] < 0) {
        rep->missing++;
        continue;
      }
      int64_t got = df_pread_all(fd[cp->drive], buf, (size_t)padded, cp->offset);
      if (got < (int64_t)m.record_bytes) {
        rep->missing++;
        fprintf(out, "MISSING layer %d expert %d copy %d: drive %d offset %" PRIu64 ": %s\n",
                r->layer, r->expert, c, cp->drive, cp->offset,
                got < 0 ? strerror(errno) : "past the end of the file");
        continue;
      }
      if (XXH3_64bits(buf, m.record_bytes) != cp->xxh3) {
        rep->corrupt++;
        fprintf(out, "CORRUPT layer %d expert %d copy %d: drive %d (%s) offset %" PRIu64
                     ": checksum mismatch\n",
                r->layer, r->expert, c, cp->drive, m.drives[cp->drive].path, cp->offset);
        continue;
      }
      rep->ok++;
      good++;
    }
    if (!good) {
      rep->lost++;
      fprintf(out, "LOST layer %d expert %d: no good copy\n", r->layer, r->expert);
    }
    df_progress_update(&pr, seen);
  }
  df_progress_end(&pr);
  check_spine(&m, fd, out, rep);
  fprintf(out,
          "%s: %" PRIu64 " experts, %" PRIu64 " copies on %d drive%s: %" PRIu64 " ok, %" PRIu64
          " corrupt, %" PRIu64 " missing; %s\n",
          mpath, rep->records, rep->copies, m.ndrives, m.ndrives == 1 ? "" : "s", rep->ok,
          rep->corrupt, rep->missing,
          rep->lost ? "SOME EXPERTS HAVE NO GOOD COPY: re-run deltafin pack"
          : rep->corrupt || rep->missing ? "every expert still has a good copy"
          : rep->spine_corrupt || rep->spine_missing ? "every expert is good, the spine section is not"
                                                     : "all good");
  for (int d = 0; d < m.ndrives; d++)
    if (fd[d] >= 0) close(fd[d]);
  free(fd);
  free(size);
  free(buf);
  free(mpath);
  df_manifest_free(&m);
  return rc;
}

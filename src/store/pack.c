#include "store/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/log.h"
#include "base/util.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "store/heat.h"
#include "store/manifest.h"
#include "store/source.h"
#include "store/store.h"
#include "store/pack_int.h"

#define GROUP 8 /* experts read per batch while packing */

int df_pack_measure_drive(const char *dir, uint64_t bytes, double *rate, df_err *e) {
  char *p = df_path_join(dir, ".deltafin-measure.tmp");
  int direct = 1;
  int fd = df_open_direct(p, 1, &direct);
  if (fd < 0) {
    df_err_errno(e, "measuring %s", p);
    free(p);
    return -1;
  }
  const size_t blk = 4u << 20;
  uint8_t *buf = df_xaligned(DF_IO_ALIGN, blk);
  for (size_t i = 0; i < blk; i++) buf[i] = (uint8_t)(i * 131u);
  int rc = 0;
  uint64_t n = (bytes + blk - 1) / blk;
  for (uint64_t i = 0; i < n && !rc; i++)
    if (df_pwrite_all(fd, buf, blk, i * blk)) rc = df_err_errno(e, "measuring %s", p);
  if (!rc && fdatasync(fd)) rc = df_err_errno(e, "measuring %s", p);
  double t = df_now();
  for (uint64_t i = 0; i < n && !rc; i++)
    if (df_pread_all(fd, buf, blk, i * blk) != (int64_t)blk) rc = df_err_errno(e, "measuring %s", p);
  t = df_now() - t;
  close(fd);
  unlink(p);
  free(p);
  free(buf);
  if (!rc) *rate = t > 0 ? (double)(n * blk) / t : 1e9;
  return rc;
}

/* ---- placement ---- */

typedef struct hk {
  double h;
  int key;
} hk;

static int cmp_hk(const void *a, const void *b) {
  const hk *x = a, *y = b;
  if (x->h != y->h) return x->h > y->h ? -1 : 1;
  return x->key - y->key;
}

static int pick(const double *load, const double *bw, int nd, double add, int avoid) {
  int best = -1;
  double bv = 0;
  for (int d = 0; d < nd; d++) {
    if (d == avoid) continue;
    double v = (load[d] + add) / bw[d];
    if (best < 0 || v < bv - 1e-12 * bv) best = d, bv = v;
  }
  return best;
}

static void place(df_manifest *m, const float *heat, const double *bw, double pct) {
  size_t nk = (size_t)m->nrecs;
  int nd = m->ndrives;
  hk *o = df_xmalloc(nk * sizeof *o);
  for (size_t k = 0; k < nk; k++) o[k] = (hk){heat ? (double)heat[k] : 0.0, (int)k};
  qsort(o, nk, sizeof *o, cmp_hk);
  size_t nrep = nd > 1 ? (size_t)ceil(pct / 100.0 * (double)nk) : 0;
  if (nrep > nk) nrep = nk;
  double *load = df_xcalloc((size_t)nd, sizeof *load);
  /* expected load of an expert: its heat, never zero so cold experts still spread */
  for (size_t i = 0; i < nk; i++) {
    df_mf_record *r = &m->recs[o[i].key];
    double h = o[i].h + 1e-3;
    int rep = i < nrep;
    double share = rep ? h / 2 : h;
    int d0 = pick(load, bw, nd, share, -1);
    load[d0] += share;
    r->copies[0].drive = d0;
    r->ncopies = 1;
    if (rep) {
      int d1 = pick(load, bw, nd, share, d0);
      load[d1] += share;
      r->copies[1].drive = d1;
      r->ncopies = 2;
    }
  }
  /* offsets: records in (layer, expert) order within each drive */
  uint64_t padded = DF_IO_ROUND_UP(m->record_bytes);
  uint64_t *next = df_xcalloc((size_t)nd, sizeof *next);
  for (size_t k = 0; k < nk; k++)
    for (int c = 0; c < m->recs[k].ncopies; c++) {
      int d = m->recs[k].copies[c].drive;
      m->recs[k].copies[c].offset = next[d];
      m->recs[k].copies[c].xxh3 = 0;
      next[d] += padded;
    }
  for (int d = 0; d < nd; d++) m->drives[d].bytes = next[d];
  free(next);
  free(load);
  free(o);
}

/* ---- journal ---- */

void df_pack_journal_line(char *buf, size_t cap, int key, int copy, uint64_t xxh) {
  int n = snprintf(buf, cap, "%d %d %016" PRIx64, key, copy, xxh);
  uint32_t chk = (uint32_t)XXH3_64bits(buf, (size_t)n);
  snprintf(buf + n, cap - (size_t)n, " %08x\n", chk);
}

/* Reads the records a previous run finished on this drive. */
static void journal_load(const char *path, uint64_t plan_id, const df_manifest *m, int drive,
                         uint64_t *done_xxh, uint8_t *done) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[256], want[64];
  snprintf(want, sizeof want, "plan %016" PRIx64 "\n", plan_id);
  if (!fgets(line, sizeof line, f) || strcmp(line, want)) {
    fclose(f);
    return;
  }
  while (fgets(line, sizeof line, f)) {
    int key, copy;
    uint64_t xxh;
    unsigned chk;
    char again[128];
    if (sscanf(line, "%d %d %" SCNx64 " %x", &key, &copy, &xxh, &chk) != 4) break;
    /* items: records [0, nrecs), then spine chunks (one copy each) */
    int nchunks = m->has_spine ? m->spine.nchunks : 0;
    if (key < 0 || key >= m->nrecs + nchunks) break;
    if (key < m->nrecs ? copy < 0 || copy >= m->recs[key].ncopies ||
                             m->recs[key].copies[copy].drive != drive
                       : copy != 0 || m->spine.chunks[key - m->nrecs].drive != drive)
      break;
    df_pack_journal_line(again, sizeof again, key, copy, xxh);
    if (strcmp(again, line)) break; /* torn or foreign line: stop trusting the rest */
    done_xxh[(size_t)key * DF_MF_MAX_COPIES + (size_t)copy] = xxh;
    done[(size_t)key * DF_MF_MAX_COPIES + (size_t)copy] = 1;
  }
  fclose(f);
}

static char *model_id(const char *dir) {
  char rp[PATH_MAX];
  const char *p = realpath(dir, rp) ? rp : dir;
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/') n--;
  const char *b = p + n;
  while (b > p && b[-1] != '/') b--;
  char *id = df_xmalloc((size_t)(p + n - b) + 8);
  memcpy(id, b, (size_t)(p + n - b));
  strcpy(id + (p + n - b), ".dfpack");
  for (char *c = id; *c; c++)
    if (*c == ' ' || *c == '/') *c = '_';
  return id;
}

/* ---- df_pack, step by step ----
 * check the options -> open the model -> resolve the drives -> the plan
 * (resumed, or made: placement by heat and written first) -> the drives
 * (pack files sized, journals trusted and reopened) -> copy the records
 * (read through the store, written to every copy, fsynced, journalled) ->
 * the manifest, last and atomically. */


static int pack_check_opts(const df_pack_opts *o, df_err *e) {
  if (o->ndrives < 1 || o->ndrives > DF_MF_MAX_DRIVES)
    return df_err_set(e, "pack: --drives needs 1..%d directories", DF_MF_MAX_DRIVES);
  if (!(o->replicas_hot >= 0 && o->replicas_hot <= 100))
    return df_err_set(e, "pack: --replicas-hot must be a percentage in [0, 100]");
  if (o->replicas_hot > 0 && o->ndrives < 2)
    return df_err_set(e, "pack: --replicas-hot needs at least two drives (a copy on the same "
                         "drive protects against nothing)");
  const df_pack_spine *sp = o->spine;
  if (sp) {
    if (!sp->kind || (strcmp(sp->kind, "bf16") && strcmp(sp->kind, "int8")))
      return df_err_set(e, "pack: --spine must be bf16 or int8");
    if (sp->nunits < 1) return df_err_set(e, "pack: --spine: the model has no streamable spine unit");
    for (int u = 0; u < sp->nunits; u++) {
      uint64_t sum = 0;
      for (int x = 0; x < sp->units[u].nex; x++) sum += sp->units[u].ex[x].len;
      if (!sp->units[u].bytes || sp->units[u].bytes % DF_IO_ALIGN || sum != sp->units[u].bytes ||
          (u > 0 && sp->units[u].unit <= sp->units[u - 1].unit))
        return df_err_set(e, "pack: spine unit %d: inconsistent layout (internal error)",
                          sp->units[u].unit);
    }
  }
  return 0;
}

static void pack_job_init(pack_job *j, const df_pack_opts *o) {
  memset(j, 0, sizeof *j);
  j->o = o;
  j->mpath = o->manifest_out ? df_xstrdup(o->manifest_out)
                             : df_path_join(o->model_dir, DF_PACK_MANIFEST_NAME);
  size_t plen = strlen(j->mpath) + 8;
  j->plan_path = df_xmalloc(plen);
  snprintf(j->plan_path, plen, "%s.plan", j->mpath);
  j->fname = model_id(o->model_dir);
  j->dabs = df_xcalloc((size_t)o->ndrives, sizeof *j->dabs);
  j->jpath = df_xcalloc((size_t)o->ndrives, sizeof *j->jpath);
  j->fd = df_xmalloc((size_t)o->ndrives * sizeof *j->fd);
  j->jf = df_xcalloc((size_t)o->ndrives, sizeof *j->jf);
  j->bw = df_xcalloc((size_t)o->ndrives, sizeof *j->bw);
  for (int d = 0; d < o->ndrives; d++) j->fd[d] = -1;
}

static void pack_job_free(pack_job *j) {
  for (int d = 0; d < j->o->ndrives; d++) {
    if (j->fd[d] >= 0) close(j->fd[d]);
    if (j->jf[d]) fclose(j->jf[d]);
    free(j->dabs[d]);
    free(j->jpath[d]);
  }
  free(j->dabs);
  free(j->jpath);
  free(j->fd);
  free(j->jf);
  free(j->bw);
  free(j->done_xxh);
  free(j->done);
  free(j->plan_text);
  free(j->header);
  free(j->fname);
  free(j->plan_path);
  free(j->mpath);
  df_manifest_free(&j->m);
  df_st_set_close(&j->set);
}

/* config, shards, fingerprint; every expert record where it should be. */
static int pack_open_model(pack_job *j, df_err *e) {
  const char *dir = j->o->model_dir;
  int rc = df_config_load_dir(&j->cfg, dir, e);
  if (rc || df_st_set_open(&j->set, dir, e)) return -1;
  df_expert_layout_of(&j->cfg, &j->lay);
  if (j->cfg.n_layers <= j->cfg.first_k_dense)
    return df_err_set(e, "pack: %s has no MoE layers (nothing to pack)", dir);
  if (df_src_fingerprint(&j->set, &j->fingerprint, e)) return -1;
  df_src_loc *loc = df_xmalloc((size_t)(j->cfg.n_layers - j->cfg.first_k_dense) *
                               (size_t)j->cfg.n_experts * sizeof *loc);
  rc = df_src_locate(&j->set, &j->cfg, loc, e);
  /* a stream install's shards hold holes where experts were not fetched:
   * never pack those (the pack's checksums would vouch for zeros) */
  df_src_remote *rm = NULL;
  if (!rc) rc = df_src_remote_open(&rm, &j->set, e);
  size_t nk = (size_t)(j->cfg.n_layers - j->cfg.first_k_dense) * (size_t)j->cfg.n_experts;
  for (size_t k = 0; !rc && rm && k < nk; k++) {
    uint64_t xxh;
    if (!df_src_remote_local(rm, loc[k].file, loc[k].off, j->lay.total, &xxh))
      rc = df_err_set(e,
                      "pack: %s is a stream install and expert (layer %d, expert %d) is not local "
                      "yet; run deltafin setup --full first",
                      dir, j->cfg.first_k_dense + (int)(k / (size_t)j->cfg.n_experts),
                      (int)(k % (size_t)j->cfg.n_experts));
  }
  df_src_remote_close(rm);
  free(loc);
  return rc;
}

/* Creates a drive's folder, but only its last component: a mistyped or
 * unmounted drive path (/mnt/nvmme0/df) must fail here rather than fill
 * whatever file system holds its parent's parent. */
int df_pack_make_drive_dir(const char *path, df_err *e) {
  return df_mkdir_last(path, "pack: drive", e);
}

/* Drive folders created, made absolute, each given once. */
static int pack_resolve_drives(pack_job *j, df_err *e) {
  const df_pack_opts *o = j->o;
  for (int d = 0; d < o->ndrives; d++) {
    if (df_pack_make_drive_dir(o->drives[d], e)) return -1;
    char rp[PATH_MAX];
    if (!realpath(o->drives[d], rp)) return df_err_errno(e, "pack: drive %s", o->drives[d]);
    j->dabs[d] = df_xstrdup(rp);
    for (int d2 = 0; d2 < d; d2++)
      if (!strcmp(j->dabs[d2], j->dabs[d]))
        return df_err_set(e, "pack: drive %s is given twice", j->dabs[d]);
    j->bw[d] = o->bandwidth ? o->bandwidth[d] : 0;
  }
  return 0;
}

/* The plan's first line: a plan is reused only for the same model files,
 * drives and replica share. */
static void plan_header(pack_job *j) {
  size_t hl = 320;
  for (int d = 0; d < j->o->ndrives; d++) hl += strlen(j->dabs[d]) + 1;
  j->header = df_xmalloc(hl);
  int n = snprintf(j->header, hl, "deltafin-pack-plan 1 %016" PRIx64 " %.6g %s", j->fingerprint,
                   j->o->replicas_hot, j->fname);
  for (int d = 0; d < j->o->ndrives; d++) n += snprintf(j->header + n, hl - (size_t)n, " %s", j->dabs[d]);
  if (j->o->spine)
    n += snprintf(j->header + n, hl - (size_t)n, " spine %s %016" PRIx64, j->o->spine->kind,
                  j->o->spine->layout);
  snprintf(j->header + n, hl - (size_t)n, "\n");
}

/* 1 when an earlier run's plan matches and was loaded. */
static int plan_resume(pack_job *j) {
  if (!df_file_exists(j->plan_path)) return 0;
  char *txt;
  size_t tl;
  df_err pe;
  size_t hl = strlen(j->header);
  if (!df_file_read(j->plan_path, &txt, &tl, &pe)) {
    if (tl > hl && !strncmp(txt, j->header, hl) &&
        !df_manifest_parse(&j->m, txt + hl, tl - hl, j->plan_path, &pe)) {
      j->plan_text = txt;
      df_log_info("resuming the pack planned in %s", j->plan_path);
      return 1;
    }
    free(txt);
  }
  df_log_info("an older pack plan (%s) does not match: starting over", j->plan_path);
  return 0;
}

/* Bandwidths: declared, measured (--measure) or none at all. */
static int plan_bandwidths(pack_job *j, df_err *e) {
  int nd = j->o->ndrives;
  for (int d = 0; d < nd; d++)
    if (j->bw[d] <= 0 && j->o->measure) {
      if (df_pack_measure_drive(j->dabs[d], 256u << 20, &j->bw[d], e)) return -1;
      df_log_info("drive %s: measured %.0f MB/s", j->dabs[d], j->bw[d] / 1e6);
    }
  j->known = 0;
  for (int d = 0; d < nd; d++) j->known += j->bw[d] > 0;
  if (j->known && j->known < nd)
    return df_err_set(e, "pack: declare or measure the bandwidth of every drive, or of none");
  return 0;
}

/* The manifest's skeleton: model, drives, one record per expert, no copies yet. */
static void plan_skeleton(pack_job *j) {
  df_manifest *m = &j->m;
  m->fingerprint = j->fingerprint;
  m->first_layer = j->cfg.first_k_dense;
  m->n_layers = j->cfg.n_layers;
  m->n_experts = j->cfg.n_experts;
  m->record_bytes = j->lay.total;
  m->align = DF_IO_ALIGN;
  m->ndrives = j->o->ndrives;
  m->drives = df_xcalloc((size_t)m->ndrives, sizeof *m->drives);
  for (int d = 0; d < m->ndrives; d++) {
    m->drives[d].path = df_xstrdup(j->dabs[d]);
    m->drives[d].file = df_xstrdup(j->fname);
    m->drives[d].bandwidth = j->bw[d];
  }
  m->nrecs = (j->cfg.n_layers - j->cfg.first_k_dense) * j->cfg.n_experts;
  m->recs = df_xcalloc((size_t)m->nrecs, sizeof *m->recs);
  for (int k = 0; k < m->nrecs; k++) {
    m->recs[k].layer = m->first_layer + k / m->n_experts;
    m->recs[k].expert = k % m->n_experts;
  }
}

/* The heat placement goes by: --heat FILE (must exist), the model folder's
 * deltafin.heat if present, or none (""). *found = 0 without one. */
static int plan_heat(pack_job *j, df_heat *heat, int *found, df_err *e) {
  const char *hopt = j->o->heat_path;
  *found = 0;
  char *hp = hopt ? (*hopt ? df_xstrdup(hopt) : NULL) : df_path_join(j->o->model_dir, "deltafin.heat");
  if (!hp) return 0;
  int rc = 0;
  if (hopt && !df_file_exists(hp)) rc = df_err_set(e, "pack: --heat %s: no such file", hp);
  else if (df_heat_load(heat, hp, j->m.first_layer, j->m.n_layers, j->m.n_experts, found, e)) rc = -1;
  else if (*found) df_log_info("placing by heat from %s", hp);
  free(hp);
  return rc;
}

/* A new plan: skeleton, placement, checked, written before any record. */
static int plan_new(pack_job *j, df_err *e) {
  if (plan_bandwidths(j, e)) return -1;
  plan_skeleton(j);
  df_heat heat = {0};
  int found;
  if (plan_heat(j, &heat, &found, e)) {
    df_heat_free(&heat);
    return -1;
  }
  double *pbw = df_xmalloc((size_t)j->o->ndrives * sizeof *pbw);
  for (int d = 0; d < j->o->ndrives; d++) pbw[d] = j->known ? j->bw[d] : 1.0;
  place(&j->m, found ? heat.count : NULL, pbw, j->o->replicas_hot);
  if (j->o->spine) df_pack_plan_spine(j, j->known ? j->bw : NULL);
  free(pbw);
  df_heat_free(&heat);
  if (df_manifest_check(&j->m, "pack plan", e)) return -1;
  char *js = df_manifest_to_json(&j->m);
  size_t tl = strlen(j->header) + strlen(js);
  j->plan_text = df_xmalloc(tl + 1);
  strcpy(j->plan_text, j->header);
  strcat(j->plan_text, js);
  free(js);
  return df_file_write_atomic(j->plan_path, j->plan_text, tl, e);
}

static int pack_plan(pack_job *j, df_err *e) {
  plan_header(j);
  if (!plan_resume(j) && plan_new(j, e)) return -1;
  j->plan_id = XXH3_64bits(j->plan_text, strlen(j->plan_text));
  return 0;
}

/* Drive d's journal: only the lines of this plan it can trust, rewritten,
 * then opened for appending. */
static int drive_journal(pack_job *j, int d, df_err *e) {
  journal_load(j->jpath[d], j->plan_id, &j->m, d, j->done_xxh, j->done);
  char *tmp = df_xmalloc(64 + j->nitems * DF_MF_MAX_COPIES * 48);
  size_t tn = (size_t)sprintf(tmp, "plan %016" PRIx64 "\n", j->plan_id);
  for (size_t k = 0; k < j->nitems; k++)
    for (int c = 0; c < (k < j->nk ? j->m.recs[k].ncopies : 1); c++)
      if ((k < j->nk ? j->m.recs[k].copies[c].drive : j->m.spine.chunks[k - j->nk].drive) == d &&
          DONE(j, k, c)) {
        char l[96];
        df_pack_journal_line(l, sizeof l, (int)k, c, DONE_XXH(j, k, c));
        memcpy(tmp + tn, l, strlen(l));
        tn += strlen(l);
      }
  int wr = df_file_write_atomic(j->jpath[d], tmp, tn, e);
  free(tmp);
  if (wr) return -1;
  j->jf[d] = fopen(j->jpath[d], "a");
  if (!j->jf[d]) return df_err_errno(e, "pack: %s", j->jpath[d]);
  return 0;
}

/* Drive d's pack file: opened, room checked, sized. */
static int drive_file(pack_job *j, int d, int *direct, df_err *e) {
  char *p = df_manifest_file_path(&j->m, d);
  size_t jl = strlen(p) + 16;
  j->jpath[d] = df_xmalloc(jl);
  snprintf(j->jpath[d], jl, "%s.journal", p);
  int rc = 0;
  j->fd[d] = df_open_direct(p, 1, direct);
  if (j->fd[d] < 0) {
    rc = df_err_errno(e, "pack: %s", p);
  } else {
    struct stat st;
    fstat(j->fd[d], &st);
    struct statvfs vs;
    uint64_t have = (uint64_t)st.st_blocks * 512u, want = j->m.drives[d].bytes;
    if (statvfs(j->dabs[d], &vs) == 0 && want > have &&
        (uint64_t)vs.f_bavail * vs.f_frsize < want - have)
      rc = df_err_set(e, "pack: drive %s needs %.2f GB more, has %.2f GB free", j->dabs[d],
                      (double)(want - have) / 1e9, (double)vs.f_bavail * (double)vs.f_frsize / 1e9);
    else if ((uint64_t)st.st_size != want && ftruncate(j->fd[d], (off_t)want))
      rc = df_err_errno(e, "pack: sizing %s", p);
  }
  free(p);
  return rc;
}

static int pack_open_drives(pack_job *j, df_err *e) {
  j->nk = (size_t)j->m.nrecs;
  j->nitems = j->nk + (j->m.has_spine ? (size_t)j->m.spine.nchunks : 0);
  j->done_xxh = df_xcalloc(j->nitems * DF_MF_MAX_COPIES, sizeof *j->done_xxh);
  j->done = df_xcalloc(j->nitems * DF_MF_MAX_COPIES, 1);
  int direct = 1;
  for (int d = 0; d < j->m.ndrives; d++)
    if (drive_file(j, d, &direct, e) || drive_journal(j, d, e)) return -1;
  if (!direct) df_log_warn("pack: O_DIRECT not supported on a drive; writing through the page cache");
  return 0;
}

/* The copies a group of experts of layer l wrote are made durable, then journalled. */
static int group_commit(pack_job *j, int l, const int *list, int n, const uint8_t *touched,
                        df_err *e) {
  for (int d = 0; d < j->m.ndrives; d++)
    if (touched[d] && fdatasync(j->fd[d]))
      return df_err_errno(e, "pack: fdatasync %s/%s", j->dabs[d], j->fname);
  for (int i = 0; i < n; i++) {
    size_t k = (size_t)(l - j->m.first_layer) * (size_t)j->m.n_experts + (size_t)list[i];
    for (int c = 0; c < j->m.recs[k].ncopies; c++)
      if (DONE(j, k, c) == 2) {
        char line[96];
        df_pack_journal_line(line, sizeof line, (int)k, c, DONE_XXH(j, k, c));
        fputs(line, j->jf[j->m.recs[k].copies[c].drive]);
        DONE(j, k, c) = 1;
      }
  }
  for (int d = 0; d < j->m.ndrives; d++)
    if (touched[d] && (fflush(j->jf[d]) || fdatasync(fileno(j->jf[d]))))
      return df_err_errno(e, "pack: %s", j->jpath[d]);
  return 0;
}

/* One record handed out by the store: checked, written to each copy still to do. */
static int write_record(pack_job *j, int l, int expert, const uint8_t *bytes, uint8_t *wbuf,
                        uint64_t padded, uint8_t *touched, uint64_t *written, df_err *e) {
  size_t k = (size_t)(l - j->m.first_layer) * (size_t)j->m.n_experts + (size_t)expert;
  if (df_src_check_scales(&j->lay, bytes))
    return df_err_set(e, "pack: expert (layer %d, expert %d): an E8M0 scale is 255 (NaN); the "
                         "checkpoint is damaged", l, expert);
  uint64_t xxh = XXH3_64bits(bytes, j->lay.total);
  memcpy(wbuf, bytes, j->lay.total);
  memset(wbuf + j->lay.total, 0, padded - j->lay.total);
  for (int c = 0; c < j->m.recs[k].ncopies; c++) {
    if (DONE(j, k, c)) continue;
    int d = j->m.recs[k].copies[c].drive;
    if (df_pwrite_all(j->fd[d], wbuf, padded, j->m.recs[k].copies[c].offset))
      return df_err_errno(e, "pack: writing %s/%s", j->dabs[d], j->fname);
    DONE_XXH(j, k, c) = xxh;
    DONE(j, k, c) = 2; /* written, not yet durable */
    touched[d] = 1;
    *written += j->lay.total;
  }
  return 0;
}

/* --max-rate: sleeps while `written` bytes since t_start are ahead of the rate. */
void df_pack_throttle(double max_rate, uint64_t written, double t_start) {
  if (max_rate <= 0) return;
  double ahead = (double)written / max_rate - (df_now() - t_start);
  if (ahead > 0) {
    struct timespec ts = {(time_t)ahead, (long)((ahead - floor(ahead)) * 1e9)};
    nanosleep(&ts, NULL);
  }
}

/* Every record copy still to write, read through the store (shards, no
 * cache) in groups of GROUP experts of one layer. */
static int pack_copy_records(pack_job *j, df_err *e) {
  const df_pack_opts *o = j->o;
  const df_manifest *m = &j->m;
  uint64_t todo = 0, already = 0;
  for (size_t k = 0; k < j->nk; k++)
    for (int c = 0; c < m->recs[k].ncopies; c++) {
      if (DONE(j, k, c)) already++;
      else todo++;
    }
  if (already) df_log_info("pack: %" PRIu64 " record copies already written, %" PRIu64 " to go", already, todo);

  df_store_opts so = {.model_dir = o->model_dir, .no_pack = 1, .cache_mb = 0,
                      .prefetch = DF_PREFETCH_OFF, .heat_path = ""};
  df_store *src = NULL;
  if (df_store_open(&src, &j->set, &j->cfg, &so, e)) return -1;
  uint64_t padded = DF_IO_ROUND_UP(j->lay.total);
  uint8_t *wbuf = df_xaligned(DF_IO_ALIGN, (size_t)padded);
  int *list = df_xmalloc((size_t)j->cfg.n_experts * sizeof *list);
  df_progress pr;
  df_progress_begin(&pr, "pack", todo * j->lay.total);
  if (!o->progress) pr.tty = 0;
  uint64_t written = 0;
  double t_start = df_now();
  int rc = 0;
  for (int l = m->first_layer; l < m->n_layers && !rc; l++) {
    int x = 0;
    while (x < m->n_experts && !rc) {
      int n = 0;
      for (; x < m->n_experts && n < GROUP; x++) {
        size_t k = (size_t)(l - m->first_layer) * (size_t)m->n_experts + (size_t)x;
        int need = 0;
        for (int c = 0; c < m->recs[k].ncopies; c++) need |= !DONE(j, k, c);
        if (need) list[n++] = x;
      }
      if (!n) continue;
      if (df_store_begin(src, l, list, n, 1, e)) {
        rc = -1;
        break;
      }
      int idx, r;
      const uint8_t *bytes;
      uint8_t touched[DF_MF_MAX_DRIVES] = {0};
      while ((r = df_store_next(src, &idx, &bytes, e)) == 1)
        if (write_record(j, l, list[idx], bytes, wbuf, padded, touched, &written, e)) {
          r = -1;
          break;
        }
      df_store_end(src);
      if (r < 0 || group_commit(j, l, list, n, touched, e)) {
        rc = -1;
        break;
      }
      df_progress_update(&pr, written);
      df_pack_throttle(o->max_rate, written, t_start);
    }
  }
  if (!rc) df_progress_end(&pr);
  free(list);
  free(wbuf);
  df_store_close(src);
  return rc;
}

/* Every copy written: the manifest, last and atomically; journals and plan go. */
static int pack_finish(pack_job *j, df_err *e) {
  df_manifest *m = &j->m;
  for (size_t k = 0; k < j->nk; k++)
    for (int c = 0; c < m->recs[k].ncopies; c++) {
      m->recs[k].copies[c].xxh3 = DONE_XXH(j, k, c);
      if (DONE_XXH(j, k, c) != DONE_XXH(j, k, 0))
        return df_err_set(e, "pack: expert (layer %d, expert %d): copies differ (the checkpoint "
                             "changed during the pack?); delete %s and pack again",
                          m->recs[k].layer, m->recs[k].expert, j->plan_path);
    }
  for (int c = 0; m->has_spine && c < m->spine.nchunks; c++)
    m->spine.chunks[c].xxh3 = DONE_XXH(j, j->nk + (size_t)c, 0);
  char *js = df_manifest_to_json(m);
  int wr = df_file_write_atomic(j->mpath, js, strlen(js), e);
  free(js);
  if (wr) return -1;
  for (int d = 0; d < m->ndrives; d++) {
    fclose(j->jf[d]);
    j->jf[d] = NULL;
    unlink(j->jpath[d]);
  }
  unlink(j->plan_path);
  if (df_log_verbose > 0) {
    uint64_t nrep = 0;
    for (size_t k = 0; k < j->nk; k++) nrep += m->recs[k].ncopies > 1;
    printf("packed %zu experts (%.3f GB) onto %d drive%s, %" PRIu64 " with a second copy; manifest %s\n",
           j->nk, (double)j->nk * (double)j->lay.total / 1e9, m->ndrives, m->ndrives == 1 ? "" : "s",
           nrep, j->mpath);
    if (m->has_spine) {
      uint64_t sb = 0;
      for (int u = 0; u < m->spine.nunits; u++) sb += m->spine.units[u].bytes;
      printf("spine section (%s): %d units, %.3f GB in %d chunks\n", m->spine.kind,
             m->spine.nunits, (double)sb / 1e9, m->spine.nchunks);
    }
    for (int d = 0; d < m->ndrives; d++) {
      uint64_t sb = 0;
      for (int c = 0; m->has_spine && c < m->spine.nchunks; c++)
        if (m->spine.chunks[c].drive == d) sb += m->spine.chunks[c].len;
      printf("  drive %d %s: %.3f GB", d, m->drives[d].path, (double)m->drives[d].bytes / 1e9);
      if (m->has_spine) printf(" (spine %.3f GB)", (double)sb / 1e9);
      printf("\n");
    }
  }
  return 0;
}

int df_pack(const df_pack_opts *o, df_err *e) {
  if (pack_check_opts(o, e)) return -1;
  pack_job j;
  pack_job_init(&j, o);
  int rc = pack_open_model(&j, e) || pack_resolve_drives(&j, e) || pack_plan(&j, e) ||
                   pack_open_drives(&j, e) || pack_copy_records(&j, e) || df_pack_copy_spine(&j, e) ||
                   pack_finish(&j, e)
               ? -1
               : 0;
  pack_job_free(&j);
  return rc;
}


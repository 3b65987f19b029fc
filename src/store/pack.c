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

#define ALIGN 4096u
#define GROUP 8 /* experts read per batch while packing */

static int open_rw_direct(const char *path, int *direct) {
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0644);
  if (fd < 0 && errno == EINVAL) {
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    *direct = 0;
  }
  return fd;
}

static int open_ro_direct(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0 && errno == EINVAL) fd = open(path, O_RDONLY | O_CLOEXEC);
  return fd;
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off) {
  const char *p = buf;
  while (n) {
    ssize_t w = pwrite(fd, p, n, (off_t)off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
    off += (uint64_t)w;
  }
  return 0;
}

static int64_t pread_all(int fd, void *buf, size_t n, uint64_t off) {
  char *p = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, p + got, n - got, (off_t)(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  return (int64_t)got;
}

int df_pack_measure_drive(const char *dir, uint64_t bytes, double *rate, df_err *e) {
  char *p = df_path_join(dir, ".deltafin-measure.tmp");
  int direct = 1;
  int fd = open_rw_direct(p, &direct);
  if (fd < 0) {
    df_err_errno(e, "measuring %s", p);
    free(p);
    return -1;
  }
  const size_t blk = 4u << 20;
  uint8_t *buf = df_xaligned(ALIGN, blk);
  for (size_t i = 0; i < blk; i++) buf[i] = (uint8_t)(i * 131u);
  int rc = 0;
  uint64_t n = (bytes + blk - 1) / blk;
  for (uint64_t i = 0; i < n && !rc; i++)
    if (pwrite_all(fd, buf, blk, i * blk)) rc = df_err_errno(e, "measuring %s", p);
  if (!rc && fdatasync(fd)) rc = df_err_errno(e, "measuring %s", p);
  double t = df_now();
  for (uint64_t i = 0; i < n && !rc; i++)
    if (pread_all(fd, buf, blk, i * blk) != (int64_t)blk) rc = df_err_errno(e, "measuring %s", p);
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
  uint64_t padded = (m->record_bytes + ALIGN - 1) / ALIGN * ALIGN;
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

static void journal_line(char *buf, size_t cap, int key, int copy, uint64_t xxh) {
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
    if (key < 0 || key >= m->nrecs || copy < 0 || copy >= m->recs[key].ncopies ||
        m->recs[key].copies[copy].drive != drive)
      break;
    journal_line(again, sizeof again, key, copy, xxh);
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

int df_pack(const df_pack_opts *o, df_err *e) {
  if (o->ndrives < 1 || o->ndrives > DF_MF_MAX_DRIVES)
    return df_err_set(e, "pack: --drives needs 1..%d directories", DF_MF_MAX_DRIVES);
  if (!(o->replicas_hot >= 0 && o->replicas_hot <= 100))
    return df_err_set(e, "pack: --replicas-hot must be a percentage in [0, 100]");
  if (o->replicas_hot > 0 && o->ndrives < 2)
    return df_err_set(e, "pack: --replicas-hot needs at least two drives (a copy on the same "
                         "drive protects against nothing)");
  int rc = -1;
  df_config cfg;
  df_st_set set;
  memset(&set, 0, sizeof set);
  char *cpath = df_path_join(o->model_dir, "config.json");
  if (df_config_load(&cfg, cpath, e)) {
    free(cpath);
    return -1;
  }
  free(cpath);
  if (df_st_set_open(&set, o->model_dir, e)) return -1;

  df_manifest m;
  memset(&m, 0, sizeof m);
  df_expert_layout lay;
  df_expert_layout_of(&cfg, &lay);
  char *mpath = o->manifest_out ? df_xstrdup(o->manifest_out)
                                : df_path_join(o->model_dir, DF_PACK_MANIFEST_NAME);
  size_t plen = strlen(mpath) + 8;
  char *plan_path = df_xmalloc(plen);
  snprintf(plan_path, plen, "%s.plan", mpath);
  char *fname = model_id(o->model_dir);
  char **dabs = df_xcalloc((size_t)o->ndrives, sizeof *dabs);
  char **jpath = df_xcalloc((size_t)o->ndrives, sizeof *jpath);
  int *fd = df_xmalloc((size_t)o->ndrives * sizeof *fd);
  FILE **jf = df_xcalloc((size_t)o->ndrives, sizeof *jf);
  double *bw = df_xcalloc((size_t)o->ndrives, sizeof *bw);
  uint64_t *done_xxh = NULL;
  uint8_t *done = NULL, *wbuf = NULL;
  char *plan_text = NULL, *header = NULL;
  df_store *src = NULL;
  for (int d = 0; d < o->ndrives; d++) fd[d] = -1;
  if (cfg.n_layers <= cfg.first_k_dense) {
    df_err_set(e, "pack: %s has no MoE layers (nothing to pack)", o->model_dir);
    goto out;
  }

  uint64_t fp;
  if (df_src_fingerprint(&set, &fp, e)) goto out;
  {
    df_src_loc *loc = df_xmalloc((size_t)(cfg.n_layers - cfg.first_k_dense) *
                                 (size_t)cfg.n_experts * sizeof *loc);
    int lr = df_src_locate(&set, &cfg, loc, e);
    free(loc);
    if (lr) goto out;
  }
  for (int d = 0; d < o->ndrives; d++) {
    if (df_mkdir_p(o->drives[d], e)) goto out;
    char rp[PATH_MAX];
    if (!realpath(o->drives[d], rp)) {
      df_err_errno(e, "pack: drive %s", o->drives[d]);
      goto out;
    }
    dabs[d] = df_xstrdup(rp);
    for (int d2 = 0; d2 < d; d2++)
      if (!strcmp(dabs[d2], dabs[d])) {
        df_err_set(e, "pack: drive %s is given twice", dabs[d]);
        goto out;
      }
    bw[d] = o->bandwidth ? o->bandwidth[d] : 0;
  }

  /* The plan: reused as long as model, drives and replica share are the same. */
  {
    size_t hl = 256;
    for (int d = 0; d < o->ndrives; d++) hl += strlen(dabs[d]) + 1;
    header = df_xmalloc(hl);
    int n = snprintf(header, hl, "deltafin-pack-plan 1 %016" PRIx64 " %.6g %s", fp,
                     o->replicas_hot, fname);
    for (int d = 0; d < o->ndrives; d++) n += snprintf(header + n, hl - (size_t)n, " %s", dabs[d]);
    snprintf(header + n, hl - (size_t)n, "\n");
  }
  int have_plan = 0;
  if (df_file_exists(plan_path)) {
    char *txt;
    size_t tl;
    df_err pe;
    if (!df_file_read(plan_path, &txt, &tl, &pe) && tl > strlen(header) &&
        !strncmp(txt, header, strlen(header)) &&
        !df_manifest_parse(&m, txt + strlen(header), tl - strlen(header), plan_path, &pe)) {
      have_plan = 1;
      plan_text = txt;
      df_log_info("resuming the pack planned in %s", plan_path);
    } else {
      if (!df_file_read(plan_path, &txt, &tl, &pe)) free(txt);
      df_log_info("an older pack plan (%s) does not match: starting over", plan_path);
    }
  }
  if (!have_plan) {
    for (int d = 0; d < o->ndrives; d++)
      if (bw[d] <= 0 && o->measure) {
        if (df_pack_measure_drive(dabs[d], 256u << 20, &bw[d], e)) goto out;
        df_log_info("drive %s: measured %.0f MB/s", dabs[d], bw[d] / 1e6);
      }
    int known = 0;
    for (int d = 0; d < o->ndrives; d++) known += bw[d] > 0;
    if (known && known < o->ndrives) {
      df_err_set(e, "pack: declare or measure the bandwidth of every drive, or of none");
      goto out;
    }
    m.fingerprint = fp;
    m.first_layer = cfg.first_k_dense;
    m.n_layers = cfg.n_layers;
    m.n_experts = cfg.n_experts;
    m.record_bytes = lay.total;
    m.align = ALIGN;
    m.ndrives = o->ndrives;
    m.drives = df_xcalloc((size_t)o->ndrives, sizeof *m.drives);
    for (int d = 0; d < o->ndrives; d++) {
      m.drives[d].path = df_xstrdup(dabs[d]);
      m.drives[d].file = df_xstrdup(fname);
      m.drives[d].bandwidth = bw[d];
    }
    m.nrecs = (cfg.n_layers - cfg.first_k_dense) * cfg.n_experts;
    m.recs = df_xcalloc((size_t)m.nrecs, sizeof *m.recs);
    for (int k = 0; k < m.nrecs; k++) {
      m.recs[k].layer = m.first_layer + k / m.n_experts;
      m.recs[k].expert = k % m.n_experts;
    }
    /* heat */
    df_heat heat = {0};
    int found = 0;
    char *hp = o->heat_path ? (*o->heat_path ? df_xstrdup(o->heat_path) : NULL)
                            : df_path_join(o->model_dir, "deltafin.heat");
    if (hp) {
      if (o->heat_path && !df_file_exists(hp)) {
        df_err_set(e, "pack: --heat %s: no such file", hp);
        free(hp);
        goto out;
      }
      if (df_heat_load(&heat, hp, m.first_layer, m.n_layers, m.n_experts, &found, e)) {
        free(hp);
        goto out;
      }
      if (found) df_log_info("placing by heat from %s", hp);
      free(hp);
    }
    double *pbw = df_xmalloc((size_t)o->ndrives * sizeof *pbw);
    for (int d = 0; d < o->ndrives; d++) pbw[d] = known ? bw[d] : 1.0;
    place(&m, found ? heat.count : NULL, pbw, o->replicas_hot);
    free(pbw);
    df_heat_free(&heat);
    if (df_manifest_check(&m, "pack plan", e)) goto out;
    char *js = df_manifest_to_json(&m);
    size_t tl = strlen(header) + strlen(js);
    plan_text = df_xmalloc(tl + 1);
    strcpy(plan_text, header);
    strcat(plan_text, js);
    free(js);
    if (df_file_write_atomic(plan_path, plan_text, tl, e)) goto out;
  }
  uint64_t plan_id = XXH3_64bits(plan_text, strlen(plan_text));

  /* drives: pack files sized, journals read */
  size_t nk = (size_t)m.nrecs;
  done_xxh = df_xcalloc(nk * DF_MF_MAX_COPIES, sizeof *done_xxh);
  done = df_xcalloc(nk * DF_MF_MAX_COPIES, 1);
  int direct = 1;
  for (int d = 0; d < m.ndrives; d++) {
    char *p = df_manifest_file_path(&m, d);
    size_t jl = strlen(p) + 16;
    jpath[d] = df_xmalloc(jl);
    snprintf(jpath[d], jl, "%s.journal", p);
    fd[d] = open_rw_direct(p, &direct);
    if (fd[d] < 0) {
      df_err_errno(e, "pack: %s", p);
      free(p);
      goto out;
    }
    struct stat st;
    fstat(fd[d], &st);
    struct statvfs vs;
    uint64_t have = (uint64_t)st.st_blocks * 512u;
    if (statvfs(dabs[d], &vs) == 0 && m.drives[d].bytes > have &&
        (uint64_t)vs.f_bavail * vs.f_frsize < m.drives[d].bytes - have) {
      df_err_set(e, "pack: drive %s needs %.2f GB more, has %.2f GB free", dabs[d],
                 (double)(m.drives[d].bytes - have) / 1e9,
                 (double)vs.f_bavail * (double)vs.f_frsize / 1e9);
      free(p);
      goto out;
    }
    if ((uint64_t)st.st_size != m.drives[d].bytes && ftruncate(fd[d], (off_t)m.drives[d].bytes)) {
      df_err_errno(e, "pack: sizing %s", p);
      free(p);
      goto out;
    }
    free(p);
    journal_load(jpath[d], plan_id, &m, d, done_xxh, done);
    /* rewrite the journal with only the lines we trust, then append */
    char *tmp = df_xmalloc(64 + nk * 48);
    size_t tn = (size_t)sprintf(tmp, "plan %016" PRIx64 "\n", plan_id);
    for (size_t k = 0; k < nk; k++)
      for (int c = 0; c < m.recs[k].ncopies; c++)
        if (m.recs[k].copies[c].drive == d && done[k * DF_MF_MAX_COPIES + (size_t)c]) {
          char l[96];
          journal_line(l, sizeof l, (int)k, c, done_xxh[k * DF_MF_MAX_COPIES + (size_t)c]);
          memcpy(tmp + tn, l, strlen(l));
          tn += strlen(l);
        }
    int wr = df_file_write_atomic(jpath[d], tmp, tn, e);
    free(tmp);
    if (wr) goto out;
    jf[d] = fopen(jpath[d], "a");
    if (!jf[d]) {
      df_err_errno(e, "pack: %s", jpath[d]);
      goto out;
    }
  }
  if (!direct) df_log_warn("pack: O_DIRECT not supported on a drive; writing through the page cache");

  uint64_t todo = 0, already = 0;
  for (size_t k = 0; k < nk; k++)
    for (int c = 0; c < m.recs[k].ncopies; c++) {
      if (done[k * DF_MF_MAX_COPIES + (size_t)c]) already++;
      else todo++;
    }
  if (already) df_log_info("pack: %" PRIu64 " record copies already written, %" PRIu64 " to go", already, todo);

  df_store_opts so = {0};
  so.model_dir = o->model_dir;
  so.no_pack = 1;
  so.cache_mb = 0;
  so.prefetch = DF_PREFETCH_OFF;
  so.heat_path = "";
  if (df_store_open(&src, &set, &cfg, &so, e)) goto out;
  uint64_t padded = (lay.total + ALIGN - 1) / ALIGN * ALIGN;
  wbuf = df_xaligned(ALIGN, (size_t)padded);
  df_progress pr;
  df_progress_begin(&pr, "pack", todo * lay.total);
  if (!o->progress) pr.tty = 0;
  uint64_t written = 0;
  double t_start = df_now();
  int *list = df_xmalloc((size_t)cfg.n_experts * sizeof *list);
  for (int l = m.first_layer; l < m.n_layers; l++) {
    int x = 0;
    while (x < m.n_experts) {
      int n = 0;
      for (; x < m.n_experts && n < GROUP; x++) {
        size_t k = (size_t)(l - m.first_layer) * (size_t)m.n_experts + (size_t)x;
        int need = 0;
        for (int c = 0; c < m.recs[k].ncopies; c++) need |= !done[k * DF_MF_MAX_COPIES + (size_t)c];
        if (need) list[n++] = x;
      }
      if (!n) continue;
      if (df_store_begin(src, l, list, n, 1, e)) goto out_list;
      int idx;
      const uint8_t *bytes;
      int r;
      uint8_t touched[DF_MF_MAX_DRIVES] = {0};
      while ((r = df_store_next(src, &idx, &bytes, e)) == 1) {
        size_t k = (size_t)(l - m.first_layer) * (size_t)m.n_experts + (size_t)list[idx];
        if (df_src_check_scales(&lay, bytes)) {
          df_err_set(e, "pack: expert (layer %d, expert %d): an E8M0 scale is 255 (NaN); the "
                        "checkpoint is damaged",
                     l, list[idx]);
          r = -1;
          break;
        }
        uint64_t xxh = XXH3_64bits(bytes, lay.total);
        memcpy(wbuf, bytes, lay.total);
        memset(wbuf + lay.total, 0, padded - lay.total);
        for (int c = 0; c < m.recs[k].ncopies; c++) {
          if (done[k * DF_MF_MAX_COPIES + (size_t)c]) continue;
          int d = m.recs[k].copies[c].drive;
          if (pwrite_all(fd[d], wbuf, padded, m.recs[k].copies[c].offset)) {
            df_err_errno(e, "pack: writing %s/%s", dabs[d], fname);
            r = -1;
            break;
          }
          done_xxh[k * DF_MF_MAX_COPIES + (size_t)c] = xxh;
          done[k * DF_MF_MAX_COPIES + (size_t)c] = 2; /* written, not yet durable */
          touched[d] = 1;
          written += lay.total;
        }
        if (r < 0) break;
      }
      df_store_end(src);
      if (r < 0) goto out_list;
      /* data durable first, then the journal says so */
      for (int d = 0; d < m.ndrives; d++)
        if (touched[d] && fdatasync(fd[d])) {
          df_err_errno(e, "pack: fdatasync %s/%s", dabs[d], fname);
          goto out_list;
        }
      for (int i = 0; i < n; i++) {
        size_t k = (size_t)(l - m.first_layer) * (size_t)m.n_experts + (size_t)list[i];
        for (int c = 0; c < m.recs[k].ncopies; c++)
          if (done[k * DF_MF_MAX_COPIES + (size_t)c] == 2) {
            char line[96];
            journal_line(line, sizeof line, (int)k, c, done_xxh[k * DF_MF_MAX_COPIES + (size_t)c]);
            fputs(line, jf[m.recs[k].copies[c].drive]);
            done[k * DF_MF_MAX_COPIES + (size_t)c] = 1;
          }
      }
      for (int d = 0; d < m.ndrives; d++)
        if (touched[d] && (fflush(jf[d]) || fdatasync(fileno(jf[d])))) {
          df_err_errno(e, "pack: %s", jpath[d]);
          goto out_list;
        }
      df_progress_update(&pr, written);
      if (o->max_rate > 0) {
        double ahead = (double)written / o->max_rate - (df_now() - t_start);
        if (ahead > 0) {
          struct timespec ts = {(time_t)ahead, (long)((ahead - floor(ahead)) * 1e9)};
          nanosleep(&ts, NULL);
        }
      }
    }
  }
  df_progress_end(&pr);
  free(list);
  list = NULL;
  df_store_close(src);
  src = NULL;

  /* every copy written: the manifest, last and atomically */
  for (size_t k = 0; k < nk; k++)
    for (int c = 0; c < m.recs[k].ncopies; c++) {
      m.recs[k].copies[c].xxh3 = done_xxh[k * DF_MF_MAX_COPIES + (size_t)c];
      if (done_xxh[k * DF_MF_MAX_COPIES + (size_t)c] != done_xxh[k * DF_MF_MAX_COPIES]) {
        df_err_set(e, "pack: expert (layer %d, expert %d): copies differ (the checkpoint changed "
                      "during the pack?); delete %s and pack again",
                   m.recs[k].layer, m.recs[k].expert, plan_path);
        goto out;
      }
    }
  {
    char *js = df_manifest_to_json(&m);
    int wr = df_file_write_atomic(mpath, js, strlen(js), e);
    free(js);
    if (wr) goto out;
  }
  for (int d = 0; d < m.ndrives; d++) {
    fclose(jf[d]);
    jf[d] = NULL;
    unlink(jpath[d]);
  }
  unlink(plan_path);
  if (df_log_verbose > 0) {
    uint64_t nrep = 0;
    for (size_t k = 0; k < nk; k++) nrep += m.recs[k].ncopies > 1;
    printf("packed %zu experts (%.3f GB) onto %d drive%s, %" PRIu64 " with a second copy; manifest %s\n",
           nk, (double)nk * (double)lay.total / 1e9, m.ndrives, m.ndrives == 1 ? "" : "s", nrep,
           mpath);
    for (int d = 0; d < m.ndrives; d++)
      printf("  drive %d %s: %.3f GB%s\n", d, m.drives[d].path, (double)m.drives[d].bytes / 1e9,
             m.drives[d].bandwidth > 0 ? "" : "");
  }
  rc = 0;
  goto out;
out_list:
  free(list);
out:
  if (src) df_store_close(src);
  for (int d = 0; d < o->ndrives; d++) {
    if (fd[d] >= 0) close(fd[d]);
    if (jf[d]) fclose(jf[d]);
    free(dabs[d]);
    free(jpath[d]);
  }
  free(dabs);
  free(jpath);
  free(fd);
  free(jf);
  free(bw);
  free(done_xxh);
  free(done);
  free(wbuf);
  free(plan_text);
  free(header);
  free(fname);
  free(plan_path);
  free(mpath);
  df_manifest_free(&m);
  df_st_set_close(&set);
  return rc;
}

/* ---- doctor ---- */

int df_doctor(const char *model_dir, const char *manifest, FILE *out, int progress,
              df_doctor_report *rep, df_err *e) {
  memset(rep, 0, sizeof *rep);
  char *mpath = manifest ? df_xstrdup(manifest) : df_path_join(model_dir, DF_PACK_MANIFEST_NAME);
  if (!df_file_exists(mpath)) {
    df_err_set(e, "doctor: %s: no pack manifest (run deltafin pack --model %s --drives ...)", mpath,
               model_dir);
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
    fd[d] = open_ro_direct(p);
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
  uint64_t padded = (m.record_bytes + ALIGN - 1) / ALIGN * ALIGN;
  uint8_t *buf = df_xaligned(ALIGN, (size_t)padded);
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
      int64_t got = pread_all(fd[cp->drive], buf, (size_t)padded, cp->offset);
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
  fprintf(out,
          "%s: %" PRIu64 " experts, %" PRIu64 " copies on %d drive%s: %" PRIu64 " ok, %" PRIu64
          " corrupt, %" PRIu64 " missing; %s\n",
          mpath, rep->records, rep->copies, m.ndrives, m.ndrives == 1 ? "" : "s", rep->ok,
          rep->corrupt, rep->missing,
          rep->lost ? "SOME EXPERTS HAVE NO GOOD COPY: re-run deltafin pack"
                    : rep->corrupt || rep->missing ? "every expert still has a good copy"
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

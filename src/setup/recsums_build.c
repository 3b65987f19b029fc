/* deltafin record-sums: one pass over every shard gives both the shard's
 * sha256 (checked against the setup's model info when there is one) and the
 * sha256 of each routed-expert record in it. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "format/config.h"
#include "remote/download.h"
#include "setup/install.h"
#include "setup/recsums.h"
#include "setup/stream.h"
#include "store/source.h"

#define BUF_BYTES (8u << 20)

/* a piece of a shard to sum: a routed-expert record, or a span (the header,
 * a spine tensor: name set) */
typedef struct brec {
  int layer, expert;
  uint64_t off, len;
  const char *name;
  uint8_t sha[32];
} brec;

typedef struct bshard {
  const char *path;
  uint64_t size;
  brec *r; /* sorted by offset */
  int nr, cap;
  int skip; /* a header-only shard holding no records (vision-only in a full install) */
  char sha[65];
} bshard;

typedef struct bctx {
  bshard *sh;
  int n, next;
  pthread_mutex_t mu;
  int failed;
  df_err err;
} bctx;

static void hex(const uint8_t *d, char out[65]) {
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static int hash_shard(bshard *s, df_err *e) {
  int fd = open(s->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return df_err_errno(e, "%s", s->path);
  EVP_MD_CTX *all = EVP_MD_CTX_new(), *rc = EVP_MD_CTX_new();
  EVP_DigestInit_ex(all, EVP_sha256(), NULL);
  uint8_t *buf = df_xmalloc(BUF_BYTES);
  uint64_t pos = 0;
  int ri = 0, in_rec = 0, ret = 0;
  while (pos < s->size) {
    size_t want = s->size - pos < BUF_BYTES ? (size_t)(s->size - pos) : BUF_BYTES;
    ssize_t got = pread(fd, buf, want, (off_t)pos);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      ret = got < 0 ? df_err_errno(e, "reading %s", s->path)
                    : df_err_set(e, "%s: ends at %llu bytes, expected %llu", s->path,
                                 (unsigned long long)pos, (unsigned long long)s->size);
      break;
    }
    EVP_DigestUpdate(all, buf, (size_t)got);
    uint64_t c0 = pos, c1 = pos + (uint64_t)got;
    /* records are disjoint and sorted: at most one is open across chunks */
    while (ri < s->nr && s->r[ri].off < c1) {
      brec *q = &s->r[ri];
      uint64_t b = q->off > c0 ? q->off : c0, end = q->off + q->len;
      uint64_t x = end < c1 ? end : c1;
      if (!in_rec) EVP_DigestInit_ex(rc, EVP_sha256(), NULL), in_rec = 1;
      EVP_DigestUpdate(rc, buf + (b - c0), (size_t)(x - b));
      if (end > c1) break;
      unsigned int n = 0;
      EVP_DigestFinal_ex(rc, q->sha, &n);
      in_rec = 0;
      ri++;
    }
    pos = c1;
  }
  uint8_t d[32];
  unsigned int n = 0;
  EVP_DigestFinal_ex(all, d, &n);
  hex(d, s->sha);
  EVP_MD_CTX_free(all);
  EVP_MD_CTX_free(rc);
  free(buf);
  close(fd);
  return ret;
}

static void *worker(void *arg) {
  bctx *c = arg;
  for (;;) {
    pthread_mutex_lock(&c->mu);
    int i = c->failed ? c->n : c->next++;
    pthread_mutex_unlock(&c->mu);
    if (i >= c->n) break;
    if (c->sh[i].skip) continue;
    df_err e;
    if (hash_shard(&c->sh[i], &e)) {
      pthread_mutex_lock(&c->mu);
      if (!c->failed) c->err = e;
      c->failed = 1;
      pthread_mutex_unlock(&c->mu);
    }
  }
  return NULL;
}

static void add_piece(bshard *s, brec b) {
  if (s->nr == s->cap) s->r = df_xrealloc(s->r, (size_t)(s->cap = s->cap ? 2 * s->cap : 64) * sizeof *s->r);
  s->r[s->nr++] = b;
}

/* What else a stream install fetches from this shard: the header (its
 * length is the file's first 8 bytes) and every tensor that is neither a
 * routed expert nor a vision tensor. */
static int add_spans(bshard *s, const df_st_file *f, df_err *e) {
  uint8_t b[8];
  int fd = open(s->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return df_err_errno(e, "%s", s->path);
  ssize_t got = pread(fd, b, 8, 0);
  close(fd);
  if (got != 8) return df_err_set(e, "%s: cannot read its header length", s->path);
  uint64_t n = 0;
  for (int k = 7; k >= 0; k--) n = n << 8 | b[k];
  add_piece(s, (brec){-1, -1, 0, 8 + n, "header", {0}});
  for (int t = 0; t < f->ntensors; t++) {
    const df_tensor *x = &f->tensors[t];
    if (!x->nbytes || df_stream_is_expert_tensor(x->name) || df_st_is_vision_name(x->name)) continue;
    add_piece(s, (brec){-1, -1, x->offset, x->nbytes, x->name, {0}});
  }
  return 0;
}

static int cmp_brec(const void *a, const void *b) {
  const brec *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* The setup's record of this folder, when it has one: its model info (the
 * hub's sha256 per shard), repo and commit. */
static int load_setup(const char *dir, df_hub_info *info, int *have, char repo[256],
                      char commit[41], df_err *e) {
  *have = 0;
  char *sp = df_path_join(dir, DF_SETUP_STATE), *ip = df_path_join(dir, DF_SETUP_INFO);
  int rc = 0;
  if (df_file_exists(ip)) {
    char *buf = NULL;
    size_t len = 0;
    rc = df_file_read(ip, &buf, &len, e);
    if (!rc) rc = df_hub_info_parse(buf, len, ip, info, e);
    free(buf);
    if (!rc) {
      *have = 1;
      snprintf(commit, 41, "%s", info->commit);
      json_t *o = json_load_file(sp, 0, NULL);
      const char *r = json_string_value(json_object_get(o, "repo"));
      if (r) snprintf(repo, 256, "%s", r);
      json_decref(o);
    }
  }
  free(sp);
  free(ip);
  return rc;
}

int df_recsums_build(const char *dir, const char *out, int threads, df_recsums_report *rep,
                     df_err *e) {
  memset(rep, 0, sizeof *rep);
  double t0 = df_now();
  df_config c;
  int rc = df_config_load_dir(&c, dir, e);
  if (rc) return -1;
  df_st_set set;
  if (df_st_set_open(&set, dir, e)) return -1;
  df_hub_info info = {0};
  int have_info = 0;
  char repo[256] = "", commit[41] = "";
  df_src_loc *loc = NULL;
  bshard *sh = df_xcalloc((size_t)(set.nfiles ? set.nfiles : 1), sizeof *sh);
  rc = -1;
  if (load_setup(dir, &info, &have_info, repo, commit, e)) goto out;
  int nk = (c.n_layers - c.first_k_dense) * c.n_experts;
  if (nk <= 0) {
    df_err_set(e, "%s: the model has no routed experts: nothing to sum", dir);
    goto out;
  }
  loc = df_xmalloc((size_t)nk * sizeof *loc);
  if (df_src_locate(&set, &c, loc, e)) goto out;
  df_expert_layout lay;
  df_expert_layout_of(&c, &lay);
  for (int i = 0; i < set.nfiles; i++) {
    sh[i].path = set.files[i].path;
    sh[i].size = set.files[i].size;
  }
  for (int k = 0; k < nk; k++) {
    bshard *s = &sh[loc[k].file];
    add_piece(s, (brec){c.first_k_dense + k / c.n_experts, k % c.n_experts, loc[k].off,
                           lay.total, NULL, {0}});
  }
  for (int i = 0; i < set.nfiles; i++)
    if (add_spans(&sh[i], &set.files[i], e)) goto out;
  for (int i = 0; i < set.nfiles; i++) {
    bshard *s = &sh[i];
    qsort(s->r, (size_t)s->nr, sizeof *s->r, cmp_brec);
    char *jp = df_dl_journal_path(s->path, 1);
    int partial = df_file_exists(jp);
    free(jp);
    int nrec = 0;
    for (int k = 0; k < s->nr; k++) nrec += s->r[k].name == NULL;
    if (partial && nrec) {
      df_err_set(e,
                 "%s: not complete (a stream install?): record sums come from complete, verified "
                 "shards; run deltafin setup --full first",
                 s->path);
      goto out;
    }
    s->skip = partial;
  }
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int nw = threads > 0 ? threads : (int)(ncpu > 0 ? ncpu : 1);
  if (nw > set.nfiles) nw = set.nfiles;
  if (nw > 64) nw = 64;
  bctx bc = {.sh = sh, .n = set.nfiles};
  pthread_mutex_init(&bc.mu, NULL);
  pthread_t th[64];
  for (int i = 0; i < nw; i++) pthread_create(&th[i], NULL, worker, &bc);
  for (int i = 0; i < nw; i++) pthread_join(th[i], NULL);
  pthread_mutex_destroy(&bc.mu);
  if (bc.failed) {
    *e = bc.err;
    goto out;
  }
  json_t *jsh = json_array(), *jr = json_array();
  int idx = 0;
  for (int i = 0; i < set.nfiles; i++) {
    bshard *s = &sh[i];
    if (s->skip) continue;
    const char *nm = base_name(s->path);
    if (have_info) {
      const df_hub_file *f = df_hub_info_find(&info, nm);
      if (!f || !f->lfs || f->size != s->size || strcmp(f->sha256, s->sha)) {
        json_decref(jsh);
        json_decref(jr);
        df_err_set(e,
                   "%s: its sha256 %s is not the hub's (%s) for commit %s: the install is "
                   "damaged; run deltafin setup --full to repair it before making record sums",
                   s->path, s->sha, f && f->lfs ? f->sha256 : "not listed", info.commit);
        goto out;
      }
    }
    json_t *spans = json_array();
    for (int k = 0; k < s->nr; k++) {
      char h[65];
      hex(s->r[k].sha, h);
      if (s->r[k].name)
        json_array_append_new(spans, json_pack("{s:s,s:I,s:I,s:s}", "name", s->r[k].name, "offset",
                                               (json_int_t)s->r[k].off, "length",
                                               (json_int_t)s->r[k].len, "sha256", h));
    }
    json_array_append_new(jsh, json_pack("{s:s,s:I,s:s,s:o}", "name", nm, "size",
                                         (json_int_t)s->size, "sha256", s->sha, "spans", spans));
    int nrec = 0;
    for (int k = 0; k < s->nr; k++) {
      if (s->r[k].name) continue;
      nrec++;
      char h[65];
      hex(s->r[k].sha, h);
      json_array_append_new(jr, json_pack("{s:i,s:i,s:i,s:I,s:I,s:s}", "layer", s->r[k].layer,
                                          "expert", s->r[k].expert, "shard", idx, "offset",
                                          (json_int_t)s->r[k].off, "length", (json_int_t)lay.total,
                                          "sha256", h));
    }
    rep->shards++;
    rep->records += nrec;
    rep->bytes += s->size;
    idx++;
  }
  json_t *doc = json_pack("{s:s,s:o,s:o}", "format", DF_RECSUMS_FORMAT, "shards", jsh, "records", jr);
  if (*repo) json_object_set_new(doc, "repo", json_string(repo));
  if (*commit) json_object_set_new(doc, "commit", json_string(commit));
  char *txt = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(doc);
  size_t n = strlen(txt);
  txt = df_xrealloc(txt, n + 2);
  txt[n++] = '\n';
  rc = df_file_write_atomic(out, txt, n, e);
  free(txt);
out:
  for (int i = 0; i < set.nfiles; i++) free(sh[i].r);
  free(sh);
  free(loc);
  df_hub_info_free(&info);
  df_st_set_close(&set);
  rep->seconds = df_now() - t0;
  return rc;
}

#include "setup/stream.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "format/safetensors.h"

struct df_stream_plan {
  int n;
  df_dl_item *items; /* copies of the shard items, want filled */
  df_range **want;
  uint64_t missing, local;
};

int df_stream_is_expert_tensor(const char *name) {
  return strstr(name, ".block_sparse_moe.experts.") != NULL;
}


static void accumulate(df_dl_stats *ds, df_setup_report *rep) {
  rep->bytes_net += ds->bytes_net;
  rep->requests += ds->requests;
  rep->retries += ds->retries;
}

static int read_prefix(const char *path, uint64_t n, uint8_t **out, df_err *e) {
  *out = NULL; /* defined on every path: gcc -O3 cannot see that errors return nonzero */
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return df_err_errno(e, "%s", path);
  uint8_t *b = df_xmalloc(n ? n : 1);
  ssize_t r = pread(fd, b, n, 0);
  close(fd);
  if (r != (ssize_t)n) {
    free(b);
    return df_err_errno(e, "reading the header of %s", path);
  }
  *out = b;
  return 0;
}

int df_stream_plan_build(df_stream_plan **out, const char *root, const df_hub_info *info,
                         const df_dl_item *shards, int nshards, const df_dl_opts *dl,
                         df_setup_report *rep, df_err *e) {
  (void)root;
  (void)info;
  df_stream_plan *p = df_xcalloc(1, sizeof *p);
  p->n = nshards;
  p->items = df_xcalloc((size_t)(nshards ? nshards : 1), sizeof *p->items);
  p->want = df_xcalloc((size_t)(nshards ? nshards : 1), sizeof *p->want);
  df_range *w8 = df_xcalloc((size_t)(nshards ? nshards : 1), sizeof *w8);
  int rc = -1;
  df_dl_stats ds;
  /* Round 1: the 8-byte header lengths. */
  for (int i = 0; i < nshards; i++) {
    p->items[i] = shards[i];
    p->items[i].in_place = 1;
    w8[i] = (df_range){0, shards[i].file->size < 8 ? shards[i].file->size : 8, 0};
    p->items[i].want = &w8[i];
    p->items[i].nwant = 1;
  }
  df_dl_opts o = *dl;
  o.step = "stream: shard headers";
  if (df_dl_run(p->items, nshards, &o, &ds, e)) goto out;
  accumulate(&ds, rep);
  /* Round 2: the JSON headers. */
  df_range *wh = df_xcalloc((size_t)(nshards ? nshards : 1), sizeof *wh);
  for (int i = 0; i < nshards; i++) {
    uint8_t *b;
    if (shards[i].file->size < 8) {
      free(wh);
      df_err_set(e, "%s: %llu bytes, too short for a safetensors file", shards[i].file->name,
                 (unsigned long long)shards[i].file->size);
      goto out;
    }
    if (read_prefix(shards[i].dest, 8, &b, e)) {
      free(wh);
      goto out;
    }
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--) n = n << 8 | b[k];
    free(b);
    if (n > DF_ST_MAX_HEADER || n > shards[i].file->size - 8) {
      free(wh);
      df_err_set(e, "%s: header length %llu is impossible for a %llu-byte shard", shards[i].file->name,
                 (unsigned long long)n, (unsigned long long)shards[i].file->size);
      goto out;
    }
    wh[i] = (df_range){0, 8 + n, 0};
    p->items[i].want = &wh[i];
  }
  if (df_dl_run(p->items, nshards, &o, &ds, e)) {
    free(wh);
    goto out;
  }
  accumulate(&ds, rep);
  /* Round 3 (planned here, fetched by _fetch): header + spine tensors. */
  for (int i = 0; i < nshards; i++) {
    uint8_t *b;
    uint64_t hl = wh[i].end;
    if (read_prefix(shards[i].dest, hl, &b, e)) {
      free(wh);
      goto out;
    }
    df_st_file f;
    if (df_st_parse(&f, b, (size_t)hl, shards[i].file->size, shards[i].file->name, e)) {
      free(b);
      free(wh);
      df_st_close(&f);
      goto out;
    }
    df_range *v = df_xmalloc((size_t)(f.ntensors + 1) * sizeof *v);
    int k = 0;
    v[k++] = (df_range){0, hl, 0};
    /* Tensors sorted by offset so adjacent spine tensors merge into one range. */
    uint64_t *offs = df_xmalloc((size_t)(f.ntensors ? f.ntensors : 1) * 2 * sizeof *offs);
    int m = 0;
    for (int t = 0; t < f.ntensors; t++) {
      const df_tensor *x = &f.tensors[t];
      if (!x->nbytes || df_stream_is_expert_tensor(x->name) || df_st_is_vision_name(x->name)) continue;
      offs[2 * m] = x->offset;
      offs[2 * m + 1] = x->offset + x->nbytes;
      m++;
    }
    /* insertion sort by begin: a few thousand entries per shard at most */
    for (int a = 1; a < m; a++)
      for (int c = a; c > 0 && offs[2 * c] < offs[2 * (c - 1)]; c--) {
        uint64_t t0 = offs[2 * c], t1 = offs[2 * c + 1];
        offs[2 * c] = offs[2 * (c - 1)];
        offs[2 * c + 1] = offs[2 * (c - 1) + 1];
        offs[2 * (c - 1)] = t0;
        offs[2 * (c - 1) + 1] = t1;
      }
    for (int a = 0; a < m; a++) {
      if (offs[2 * a] <= v[k - 1].end) {
        if (offs[2 * a + 1] > v[k - 1].end) v[k - 1].end = offs[2 * a + 1];
      } else v[k++] = (df_range){offs[2 * a], offs[2 * a + 1], 0};
    }
    free(offs);
    free(b);
    df_st_close(&f);
    p->want[i] = v;
    p->items[i].want = v;
    p->items[i].nwant = k;
    uint64_t miss;
    if (df_dl_missing(&p->items[i], &miss, e)) {
      free(wh);
      goto out;
    }
    p->missing += miss;
    for (int a = 0; a < k; a++) p->local += v[a].end - v[a].begin;
  }
  free(wh);
  rc = 0;
out:
  free(w8);
  for (int i = 0; i < nshards; i++)
    if (!p->want[i]) p->items[i].want = NULL, p->items[i].nwant = 0;
  if (rc) {
    df_stream_plan_free(p);
    return -1;
  }
  *out = p;
  return 0;
}

uint64_t df_stream_plan_missing(const df_stream_plan *p) { return p ? p->missing : 0; }
uint64_t df_stream_plan_local_bytes(const df_stream_plan *p) { return p ? p->local : 0; }

int df_stream_plan_fetch(df_stream_plan *p, const df_dl_opts *dl, df_setup_report *rep, df_err *e) {
  df_dl_opts o = *dl;
  o.step = "stream: spine";
  df_dl_stats ds;
  if (df_dl_run(p->items, p->n, &o, &ds, e)) return -1;
  accumulate(&ds, rep);
  rep->files_downloaded += ds.files_completed;
  return 0;
}

void df_stream_plan_free(df_stream_plan *p) {
  if (!p) return;
  for (int i = 0; i < p->n; i++) free(p->want[i]);
  free(p->want);
  free(p->items);
  free(p);
}

/* The model's side of the spine stream: which units stream (the plan),
 * what a unit is (its pieces coalesced into aligned extents: gaps up to
 * GAP_MAX are read along), and the view the forward pass computes with (the
 * loaded struct with its streamed pointers into the unit's buffer). The
 * reading itself (files, drives, scheduling, checksums, trace) is the
 * store's: store/spine.h. Resident units are the mmapped tensors and never
 * pass through here. The bytes in a buffer are the shard's bytes, so results
 * do not depend on which units stream. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "model/k3_int.h"
#include "store/spine.h"

#define ALIGN 4096u
#define GAP_MAX (256u << 10) /* read a gap this small rather than issue another read */

/* A unit's view while it is held (one per unit: the forward pass holds one
 * at a time, but nothing here needs to rely on it). */
typedef union uview {
  df_k3_layer layer;
  df_wmat head;
} uview;

struct df_k3_stream {
  df_spine *sp; /* the store's stream; NULL until df_k3_stream_start */
  uview *views; /* per unit */
};

/* ------------------------------------------------------------ extents */

static int piece_cmp(const void *a, const void *b) {
  const df_k3_piece *x = a, *y = b;
  if (x->file != y->file) return x->file < y->file ? -1 : 1;
  return x->off < y->off ? -1 : x->off > y->off;
}

void df_k3_units_finish(df_k3 *m) {
  m->pl_bytes = df_xcalloc((size_t)m->nunits, sizeof *m->pl_bytes);
  m->pl_read = df_xcalloc((size_t)m->nunits, sizeof *m->pl_read);
  m->pl_must = df_xcalloc((size_t)m->nunits, 1);
  for (int u = 0; u < m->nunits; u++) {
    df_k3_unit *un = &m->units[u];
    qsort(un->pc, (size_t)un->npc, sizeof *un->pc, piece_cmp);
    un->ex = df_xcalloc((size_t)(un->npc ? un->npc : 1), sizeof *un->ex);
    un->nex = 0;
    uint64_t boff = 0;
    for (int i = 0; i < un->npc;) {
      df_k3_piece *p = &un->pc[i];
      uint64_t start = p->off / ALIGN * ALIGN, end = p->off + p->len;
      int j = i + 1;
      while (j < un->npc && un->pc[j].file == p->file && un->pc[j].off <= end + GAP_MAX) {
        uint64_t e2 = un->pc[j].off + un->pc[j].len;
        if (e2 > end) end = e2;
        j++;
      }
      end = (end + ALIGN - 1) / ALIGN * ALIGN;
      df_k3_extent *x = &un->ex[un->nex++];
      x->file = p->file;
      x->off = start;
      x->len = end - start;
      x->boff = boff;
      for (int k = i; k < j; k++) un->pc[k].boff = boff + (un->pc[k].off - start);
      boff += x->len;
      i = j;
    }
    un->read = boff;
    m->pl_bytes[u] = un->bytes;
    m->pl_read[u] = un->read;
    m->pl_must[u] = (uint8_t)un->misaligned;
    un->resident = 1;
  }
}

/* Resident units are used in place from the shards' mappings: ask the
 * kernel to read them in now (asynchronously), so the first token does not
 * fault them in page by page; the plan budgeted the memory they stay in. */
static void read_ahead(const df_k3 *m, const df_k3_unit *un) {
  long pg = sysconf(_SC_PAGESIZE);
  for (int i = 0; i < un->npc; i++) {
    const df_st_file *f = df_k3_file(m, un->pc[i].file);
    if (!f->map || un->pc[i].off + un->pc[i].len > f->size) continue;
    uintptr_t a = (uintptr_t)(f->map + un->pc[i].off), b = a + un->pc[i].len;
    a -= a % (uintptr_t)pg;
    (void)madvise((void *)a, (size_t)(b - a), MADV_WILLNEED); /* a hint: failure costs nothing */
  }
}

int df_k3_apply_plan(df_k3 *m, const df_plan *p, df_err *e) {
  if (p->nunits != m->nunits) return df_err_set(e, "memory plan: %d units, model has %d", p->nunits, m->nunits);
  m->ctx_limit = p->ctx;
  int nstream = 0;
  for (int u = 0; u < m->nunits; u++) {
    m->units[u].resident = p->resident[u] || m->units[u].npc == 0;
    nstream += !m->units[u].resident;
    if (m->units[u].resident) read_ahead(m, &m->units[u]);
  }
  if (!nstream) return 0;
  /* streamed routers would be read while the previous layer computes
   * (gate-ahead): they are copied out of the mapping once, here */
  for (int l = 0; l < m->cfg->n_layers; l++) {
    df_k3_layer *y = &m->layers[l];
    if (m->units[l].resident || !y->moe) continue;
    size_t nb = (size_t)y->router.rows * (size_t)y->router.cols * 2;
    void *c = df_xaligned(64, nb);
    memcpy(c, y->router.w, nb);
    if (m->nowned == m->capowned) {
      m->capowned = m->capowned ? 2 * m->capowned : 64;
      m->owned = df_xrealloc(m->owned, sizeof *m->owned * (size_t)m->capowned);
    }
    m->owned[m->nowned++] = c;
    y->router.w = c;
  }
  df_k3_stream *s = df_xcalloc(1, sizeof *s);
  s->views = df_xcalloc((size_t)m->nunits, sizeof *s->views);
  m->stream = s;
  return 0;
}

void df_k3_stream_close(df_k3_stream *s) {
  if (!s) return;
  df_spine_close(s->sp);
  free(s->views);
  free(s);
}

int df_k3_stream_start(df_k3 *m, df_store *st, df_err *e) {
  df_k3_stream *s = m->stream;
  if (!s || s->sp) return 0;
  df_spine_unit *units = df_xcalloc((size_t)m->nunits, sizeof *units);
  const char **paths = df_xcalloc((size_t)(m->nfiles ? m->nfiles : 1), sizeof *paths);
  for (int u = 0; u < m->nunits; u++) {
    const df_k3_unit *un = &m->units[u];
    units[u] = (df_spine_unit){.streamed = !un->resident, .bytes = un->bytes, .read = un->read,
                               .ex = un->ex, .nex = un->nex};
  }
  for (int f = 0; f < m->nfiles; f++) paths[f] = df_k3_file_path(m, f);
  df_spine_desc d = {.nunits = m->nunits, .n_layers = m->cfg->n_layers, .units = units,
                     .nfiles = m->nfiles, .paths = paths, .kind = m->int8 ? "int8" : "bf16",
                     .layout_id = df_k3_spine_layout_id(m),
                     .source = m->int8 ? "shards+int8" : "shards"};
  int rc = df_store_spine_open(st, &d, &s->sp, e);
  free(units);
  free(paths);
  return rc;
}

/* ------------------------------------------------------------ acquire/release */

static void *acquire(const df_k3 *m, int unit, int next, df_err *e) {
  df_k3_stream *s = m->stream;
  if (!s->sp) {
    df_err_set(e, "spine stream: unit %d taken before df_k3_stream_start (internal error)", unit);
    return NULL;
  }
  const uint8_t *buf = df_spine_acquire(s->sp, unit, next, e);
  if (!buf) return NULL;
  /* the view: the loaded struct with its streamed pointers into the buffer */
  const df_k3_unit *un = &m->units[unit];
  char *v = (char *)&s->views[unit];
  if (unit < m->cfg->n_layers) memcpy(v, &m->layers[unit], sizeof(df_k3_layer));
  else memcpy(v, &m->lm_head, sizeof(df_wmat));
  for (int i = 0; i < un->npc; i++) {
    const void *ptr = buf + un->pc[i].boff;
    memcpy(v + un->pc[i].field, &ptr, sizeof ptr);
  }
  return v;
}

const df_k3_layer *df_k3_acquire_layer(const df_k3 *m, int l, int next, df_err *e) {
  if (m->units[l].resident) return &m->layers[l];
  return acquire(m, l, next, e);
}

const df_wmat *df_k3_acquire_head(const df_k3 *m, int next, df_err *e) {
  int u = m->cfg->n_layers;
  if (m->units[u].resident) return &m->lm_head;
  return acquire(m, u, next, e);
}

void df_k3_release(const df_k3 *m, int unit) {
  if (m->units[unit].resident) return;
  df_spine_release(m->stream->sp, unit);
}

int df_k3_next_streamed(const df_k3 *m, int unit, int with_head) {
  if (!m->stream) return -1;
  int nl = m->cfg->n_layers;
  for (int u = unit + 1; u < nl; u++)
    if (!m->units[u].resident) return u;
  if (with_head && unit < nl && !m->units[nl].resident) return nl;
  /* the next pass: its first streamed layer (whether it computes the head
   * is not known yet) */
  for (int u = 0; u < nl; u++)
    if (!m->units[u].resident) return u;
  return m->units[nl].resident ? -1 : nl;
}

/* ------------------------------------------------------------ embedding */

int df_k3_embed_rows(const df_k3 *m, const int *ids, int T, float *out, df_err *e) {
  size_t H = (size_t)m->cfg->hidden;
  int i8 = m->embed.kind == DF_W_I8;
  for (int t = 0; t < T; t++) {
    uint64_t off = m->emb_off + (uint64_t)ids[t] * m->emb_row_bytes;
    ssize_t n = pread(m->emb_fd, m->emb_buf, m->emb_row_bytes, (off_t)off);
    float sc = 0;
    if (n == (ssize_t)m->emb_row_bytes && i8)
      n = pread(m->emb_fd, &sc, 4, (off_t)(m->emb_scale_off + (uint64_t)ids[t] * 4)) == 4 ? n : -1;
    if (n != (ssize_t)m->emb_row_bytes)
      return df_err_set(e, "embedding row %d: read failed (%s)", ids[t],
                        n < 0 ? strerror(errno) : "short read");
    df_wmat w = {.kind = m->embed.kind, .rows = 1, .cols = m->embed.cols, .w = m->emb_buf,
                 .scale = &sc};
    df_wmat_row(&w, 0, out + (size_t)t * H);
  }
  return 0;
}

/* ------------------------------------------------------------ stats */

static df_spine *spine_of(const df_k3 *m) { return m->stream ? m->stream->sp : NULL; }

void df_k3_stream_settle(const df_k3 *m) { df_spine_settle(spine_of(m)); }

void df_k3_stream_stats_get(const df_k3 *m, df_k3_stream_stats *st) {
  df_spine_stats_get(spine_of(m), st);
}

int df_k3_stream_reads(const df_k3 *m, df_k3_read_fn fn, void *ud) {
  return df_spine_reads(spine_of(m), fn, ud);
}

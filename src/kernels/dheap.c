/* The tier's device heap (dheap.h): free extents and live blocks in two
 * arrays kept in address order (a few thousand of each: the tier's
 * matrices), a reference count, a mapped flag and a handle per granule.
 * A mapped granule with no block over it is counted in st.empty. */
#include "kernels/dheap.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

typedef struct span {
  uint64_t off, len;
} span;

struct df_dheap {
  df_dheap_mem mem;
  uint64_t gran, align;
  span *fr; /* free extents, by offset, none empty, none touching */
  int nfr, capfr;
  span *bl; /* live blocks, by offset */
  int nbl, capbl;
  uint32_t *ref; /* blocks over each granule */
  uint8_t *mp;   /* 1 while the granule is mapped (with no block over it: empty) */
  uint64_t *hd;  /* each mapped granule's handle */
  uint64_t ngran;
  df_dheap_stats st;
};

df_dheap *df_dheap_new(uint64_t range, size_t granule, size_t align, df_dheap_mem mem) {
  df_dheap *h = df_xcalloc(1, sizeof *h);
  h->mem = mem;
  h->gran = granule;
  h->align = align;
  h->ngran = range / granule;
  h->ref = df_xcalloc(h->ngran ? h->ngran : 1, sizeof *h->ref);
  h->hd = df_xcalloc(h->ngran ? h->ngran : 1, sizeof *h->hd);
  h->mp = df_xcalloc(h->ngran ? h->ngran : 1, 1);
  h->capfr = h->capbl = 64;
  h->fr = df_xmalloc(sizeof(span) * (size_t)h->capfr);
  h->bl = df_xmalloc(sizeof(span) * (size_t)h->capbl);
  if (h->ngran) h->fr[h->nfr++] = (span){0, h->ngran * granule};
  return h;
}

void df_dheap_free(df_dheap *h) {
  if (!h) return;
  for (uint64_t g = 0; g < h->ngran; g++)
    if (h->mp[g]) h->mem.unmap(h->mem.ud, g * h->gran, h->hd[g]);
  free(h->ref);
  free(h->mp);
  free(h->hd);
  free(h->fr);
  free(h->bl);
  free(h);
}

static void span_insert(span **a, int *n, int *cap, int at, span s) {
  if (*n == *cap) {
    *cap *= 2;
    *a = df_xrealloc(*a, sizeof(span) * (size_t)*cap);
  }
  memmove(*a + at + 1, *a + at, sizeof(span) * (size_t)(*n - at));
  (*a)[at] = s;
  (*n)++;
}

static void span_remove(span *a, int *n, int at) {
  memmove(a + at, a + at + 1, sizeof(span) * (size_t)(*n - at - 1));
  (*n)--;
}

/* The first index of a whose offset is >= off. */
static int span_lower(const span *a, int n, uint64_t off) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (a[mid].off < off) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* 1 when every granule under [off, off + n) is mapped. */
static int all_mapped(const df_dheap *h, uint64_t off, uint64_t n) {
  for (uint64_t g = off / h->gran; g <= (off + n - 1) / h->gran; g++)
    if (!h->mp[g]) return 0;
  return 1;
}

/* Maps the unmapped granules under [off, off + n), in runs of consecutive
 * ones; on a failure, unmaps the runs this call made (marked MAPPING until
 * all are in). 0 or -1. */
#define MAPPING 2
static int map_under(df_dheap *h, uint64_t off, uint64_t n) {
  uint64_t g0 = off / h->gran, g1 = (off + n - 1) / h->gran;
  for (uint64_t g = g0; g <= g1;) {
    if (h->mp[g]) {
      g++;
      continue;
    }
    uint64_t e = g;
    while (e + 1 <= g1 && !h->mp[e + 1]) e++;
    if (h->mem.map(h->mem.ud, g * h->gran, (int)(e - g + 1), h->hd + g)) {
      for (uint64_t k = g0; k < g; k++)
        if (h->mp[k] == MAPPING) {
          h->mem.unmap(h->mem.ud, k * h->gran, h->hd[k]);
          h->mp[k] = 0;
        }
      return -1;
    }
    for (uint64_t k = g; k <= e; k++) h->mp[k] = MAPPING;
    g = e + 1;
  }
  for (uint64_t g = g0; g <= g1; g++)
    if (h->mp[g] == MAPPING) {
      h->mp[g] = 1;
      h->st.maps++;
      h->st.mapped += h->gran, h->st.empty += h->gran; /* until the block is counted */
    }
  return 0;
}

uint64_t df_dheap_trim(df_dheap *h) {
  uint64_t freed = 0;
  for (uint64_t g = 0; g < h->ngran && h->st.empty; g++)
    if (h->mp[g] && !h->ref[g]) {
      h->mem.unmap(h->mem.ud, g * h->gran, h->hd[g]);
      h->mp[g] = 0;
      h->st.unmaps++;
      h->st.mapped -= h->gran, h->st.empty -= h->gran;
      freed += h->gran;
    }
  return freed;
}

uint64_t df_dheap_alloc(df_dheap *h, size_t bytes) {
  uint64_t n = ((uint64_t)bytes + h->align - 1) / h->align * h->align;
  if (!n) n = h->align;
  int at = -1;
  for (int i = 0; i < h->nfr && at < 0; i++)
    if (h->fr[i].len >= n && all_mapped(h, h->fr[i].off, n)) at = i;
  for (int i = 0; i < h->nfr && at < 0; i++)
    if (h->fr[i].len >= n) at = i;
  if (at < 0) return DF_DHEAP_NONE;
  uint64_t off = h->fr[at].off;
  /* the empty granules elsewhere may be what the device is short of */
  if (map_under(h, off, n) && (!df_dheap_trim(h) || map_under(h, off, n))) {
    h->st.failed++;
    return DF_DHEAP_NONE;
  }
  for (uint64_t g = off / h->gran; g <= (off + n - 1) / h->gran; g++)
    if (!h->ref[g]++) h->st.empty -= h->gran;
  h->fr[at].off += n, h->fr[at].len -= n;
  if (!h->fr[at].len) span_remove(h->fr, &h->nfr, at);
  span_insert(&h->bl, &h->nbl, &h->capbl, span_lower(h->bl, h->nbl, off), (span){off, n});
  h->st.used += n;
  return off;
}

void df_dheap_release(df_dheap *h, uint64_t off) {
  int b = span_lower(h->bl, h->nbl, off);
  if (b >= h->nbl || h->bl[b].off != off) return; /* not a block: nothing to free */
  uint64_t n = h->bl[b].len;
  span_remove(h->bl, &h->nbl, b);
  h->st.used -= n;
  /* a granule left empty stays mapped for the next block (df_dheap_trim) */
  for (uint64_t g = off / h->gran; g <= (off + n - 1) / h->gran; g++)
    if (!--h->ref[g]) h->st.empty += h->gran;
  int i = span_lower(h->fr, h->nfr, off);
  int left = i > 0 && h->fr[i - 1].off + h->fr[i - 1].len == off;
  int right = i < h->nfr && off + n == h->fr[i].off;
  if (left && right) {
    h->fr[i - 1].len += n + h->fr[i].len;
    span_remove(h->fr, &h->nfr, i);
  } else if (left) {
    h->fr[i - 1].len += n;
  } else if (right) {
    h->fr[i].off = off, h->fr[i].len += n;
  } else {
    span_insert(&h->fr, &h->nfr, &h->capfr, i, (span){off, n});
  }
}

void df_dheap_stats_get(const df_dheap *h, df_dheap_stats *st) {
  *st = h->st;
  st->blocks = h->nbl;
  st->extents = h->nfr;
}

#include "store/spine_place.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void df_spine_place(df_mf_spine *sp, const int *unit_ids, const uint64_t *unit_bytes, int nunits,
                    int ndrives, const double *bw, uint64_t chunk_max, uint32_t align,
                    const uint64_t *base, uint64_t *end) {
  int equal = !bw;
  for (int d = 0; bw && d < ndrives; d++) equal |= !(bw[d] > 0);
  if (chunk_max < align) chunk_max = align;
  chunk_max -= chunk_max % align;
  /* chunk sizes first: the count is known before anything is placed */
  uint64_t *csize = df_xmalloc((size_t)(nunits ? nunits : 1) * sizeof *csize);
  size_t total = 0;
  for (int u = 0; u < nunits; u++) {
    /* rounded down, so a unit of at least ndrives pages has ndrives chunks */
    uint64_t share = unit_bytes[u] / (uint64_t)ndrives / align * align;
    if (share < align) share = align;
    csize[u] = share < chunk_max ? share : chunk_max;
    total += (size_t)((unit_bytes[u] + csize[u] - 1) / csize[u]);
  }
  memset(sp->kind, 0, sizeof sp->kind);
  sp->nunits = nunits;
  sp->units = df_xcalloc((size_t)(nunits ? nunits : 1), sizeof *sp->units);
  sp->nchunks = (int)total;
  sp->chunks = df_xcalloc(total ? total : 1, sizeof *sp->chunks);
  double *load = df_xcalloc((size_t)ndrives, sizeof *load);
  uint8_t *inround = df_xcalloc((size_t)ndrives, 1);
  for (int d = 0; d < ndrives; d++) end[d] = base[d];
  int c = 0;
  for (int u = 0; u < nunits; u++) {
    df_mf_spine_unit *su = &sp->units[u];
    su->unit = unit_ids[u];
    su->bytes = unit_bytes[u];
    su->first = c;
    /* a unit's first ndrives chunks go to distinct drives (least loaded
     * first), so a unit of ndrives chunks or more is on every drive; the
     * rest go to the least loaded drive */
    memset(inround, 0, (size_t)ndrives);
    int taken = 0;
    for (uint64_t o = 0; o < unit_bytes[u]; o += csize[u], c++) {
      uint64_t len = unit_bytes[u] - o < csize[u] ? unit_bytes[u] - o : csize[u];
      if (taken == ndrives) memset(inround, 0, (size_t)ndrives), taken = -1; /* no more rounds */
      int best = -1;
      double bv = 0;
      for (int d = 0; d < ndrives; d++) {
        if (inround[d]) continue;
        double v = ((double)load[d] + (double)len) / (equal ? 1.0 : bw[d]);
        if (best < 0 || v < bv) best = d, bv = v;
      }
      if (taken >= 0) inround[best] = 1, taken++;
      load[best] += (double)len;
      sp->chunks[c] = (df_mf_chunk){best, end[best], len, 0};
      end[best] += len;
    }
    su->nchunks = c - su->first;
  }
  free(inround);
  free(load);
  free(csize);
}

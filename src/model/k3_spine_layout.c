/* The spine's unit layout seen from outside the model: what `deltafin pack
 * --spine` copies into the pack (every unit that can stream, as the file
 * ranges of its stream buffer, k3_stream.c), and the id that ties a pack's
 * spine section to the layout a run computes. The id hashes, per streamable
 * unit, its index and buffer size and, per extent, the file's name and size,
 * offset and length: a section packed from other files, another spine kind
 * or another extent rule does not match, and the run streams from the
 * shards. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "base/util.h"
#include "model/k3_int.h"

static int streamable(const df_k3_unit *u) { return u->npc > 0 && !u->misaligned; }

static const char *base_name(const char *p) {
  const char *b = strrchr(p, '/');
  return b ? b + 1 : p;
}

uint64_t df_k3_spine_layout_id(const df_k3 *m) {
  size_t cap = 256, n = 0;
  char *t = df_xmalloc(cap);
  n += (size_t)snprintf(t, cap, "deltafin-spine-layout 1 %s\n", m->int8 ? "int8" : "bf16");
  for (int u = 0; u < m->nunits; u++) {
    const df_k3_unit *un = &m->units[u];
    if (!streamable(un)) continue;
    for (int x = -1; x < un->nex; x++) {
      char line[512];
      int k;
      if (x < 0) {
        k = snprintf(line, sizeof line, "unit %d %" PRIu64 " %d\n", u, un->read, un->nex);
      } else {
        const char *p = df_k3_file_path(m, un->ex[x].file);
        struct stat st;
        uint64_t sz = stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
        k = snprintf(line, sizeof line, " %s %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", base_name(p),
                     sz, un->ex[x].off, un->ex[x].len);
      }
      if (k < 0) continue;
      if ((size_t)k >= sizeof line) k = (int)sizeof line - 1;
      if (n + (size_t)k + 1 > cap) {
        while (n + (size_t)k + 1 > cap) cap *= 2;
        t = df_xrealloc(t, cap);
      }
      memcpy(t + n, line, (size_t)k);
      n += (size_t)k;
    }
  }
  uint64_t id = XXH3_64bits(t, n);
  free(t);
  return id;
}

int df_k3_spine_layout(const df_k3 *m, df_pack_spine *out) {
  memset(out, 0, sizeof *out);
  int n = 0;
  for (int u = 0; u < m->nunits; u++) n += streamable(&m->units[u]);
  if (!n) return 0;
  df_pack_spine_unit *us = df_xcalloc((size_t)n, sizeof *us);
  int k = 0;
  for (int u = 0; u < m->nunits; u++) {
    const df_k3_unit *un = &m->units[u];
    if (!streamable(un)) continue;
    df_pack_extent *ex = df_xcalloc((size_t)un->nex, sizeof *ex);
    for (int x = 0; x < un->nex; x++)
      ex[x] = (df_pack_extent){df_k3_file_path(m, un->ex[x].file), un->ex[x].off, un->ex[x].len};
    us[k++] = (df_pack_spine_unit){u, un->read, un->nex, ex};
  }
  out->kind = m->int8 ? "int8" : "bf16";
  out->layout = df_k3_spine_layout_id(m);
  out->nunits = n;
  out->units = us;
  return n;
}

void df_k3_spine_layout_free(df_pack_spine *sp) {
  for (int u = 0; u < sp->nunits; u++) free((void *)sp->units[u].ex);
  free((void *)sp->units);
  memset(sp, 0, sizeof *sp);
}

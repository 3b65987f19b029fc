/* libFuzzer target: the present-ranges journal parser never crashes; what it
 * accepts is non-empty ranges, sorted, within the good prefix, and each one
 * formats back to a line that parses to the same range. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "remote/ranges.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  df_range *v;
  int n;
  size_t good;
  df_err e;
  if (df_ranges_parse((const char *)data, size, "fuzz", &v, &n, &good, &e) != 0) return 0;
  if (good > size) abort();
  for (int i = 0; i < n; i++) {
    if (v[i].end <= v[i].begin) abort();
    if (i && v[i].begin < v[i - 1].begin) abort();
    char line[80];
    int l = df_ranges_format(line, &v[i]);
    df_range *w;
    int m;
    size_t g2;
    if (df_ranges_parse(line, (size_t)l, "again", &w, &m, &g2, &e) || m != 1 ||
        memcmp(&w[0], &v[i], sizeof *w))
      abort();
    free(w);
  }
  free(v);
  return 0;
}

#include "store/heat.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/util.h"

#define MAGIC "DFHEAT01"
#define HEAD 24

size_t df_heat_n(const df_heat *h) {
  return (size_t)(h->n_layers - h->first_layer) * (size_t)h->n_experts;
}

void df_heat_free(df_heat *h) {
  free(h->count);
  h->count = NULL;
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static uint32_t get32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

int df_heat_load(df_heat *h, const char *path, int first_layer, int n_layers, int n_experts,
                 int *found, df_err *e) {
  h->first_layer = first_layer;
  h->n_layers = n_layers;
  h->n_experts = n_experts;
  size_t n = df_heat_n(h);
  h->count = df_xcalloc(n, sizeof *h->count);
  *found = 0;
  if (!df_file_exists(path)) return 0;
  char *buf;
  size_t len;
  if (df_file_read(path, &buf, &len, e)) return df_err_prefix(e, "heat file: ");
  const uint8_t *p = (const uint8_t *)buf;
  int rc = 0;
  if (len != HEAD + n * 4 + 8 || memcmp(p, MAGIC, 8)) {
    rc = df_err_set(e, "heat file %s: not a heat file for this model (%d layers x %d experts); "
                       "delete it to start over",
                    path, n_layers - first_layer, n_experts);
  } else if ((int)get32(p + 8) != first_layer || (int)get32(p + 12) != n_layers ||
             (int)get32(p + 16) != n_experts) {
    rc = df_err_set(e, "heat file %s: made for another model shape; delete it to start over", path);
  } else {
    uint64_t want;
    memcpy(&want, p + HEAD + n * 4, 8);
    if (XXH3_64bits(p, HEAD + n * 4) != want) {
      rc = df_err_set(e, "heat file %s: checksum mismatch (corrupt); delete it to start over", path);
    } else {
      memcpy(h->count, p + HEAD, n * 4);
      for (size_t i = 0; i < n; i++)
        if (!(h->count[i] >= 0) || h->count[i] > 1e30f) h->count[i] = 0;
      *found = 1;
    }
  }
  free(buf);
  return rc;
}

int df_heat_merge_save(const df_heat *run, const char *path, df_err *e) {
  df_heat old;
  int found;
  df_err ig;
  size_t n = df_heat_n(run);
  if (df_heat_load(&old, path, run->first_layer, run->n_layers, run->n_experts, &found, &ig))
    found = 0; /* unreadable: replaced by this run's counts */
  size_t len = HEAD + n * 4 + 8;
  uint8_t *buf = df_xcalloc(len, 1);
  memcpy(buf, MAGIC, 8);
  put32(buf + 8, (uint32_t)run->first_layer);
  put32(buf + 12, (uint32_t)run->n_layers);
  put32(buf + 16, (uint32_t)run->n_experts);
  for (size_t i = 0; i < n; i++) {
    float v = run->count[i] + (found ? 0.75f * old.count[i] : 0.0f);
    memcpy(buf + HEAD + i * 4, &v, 4);
  }
  uint64_t x = XXH3_64bits(buf, HEAD + n * 4);
  memcpy(buf + HEAD + n * 4, &x, 8);
  int rc = df_file_write_atomic(path, buf, len, e);
  free(buf);
  df_heat_free(&old);
  return rc;
}

/* libFuzzer target: the pack manifest parser must reject or accept any
 * input without crashing, and whatever it accepts (the optional spine
 * section included) must pass its own checks and survive a serialise/parse
 * round trip unchanged. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  df_manifest m;
  df_err e;
  if (df_manifest_parse(&m, (const char *)data, size, "fuzz", &e) != 0) return 0;
  if (df_manifest_check(&m, "fuzz", &e) != 0) abort();
  char *js = df_manifest_to_json(&m);
  df_manifest m2;
  if (df_manifest_parse(&m2, js, strlen(js), "again", &e) != 0) abort();
  if (m2.nrecs != m.nrecs || m2.ndrives != m.ndrives || m2.fingerprint != m.fingerprint) abort();
  for (int i = 0; i < m.nrecs; i++)
    if (memcmp(&m.recs[i], &m2.recs[i], sizeof m.recs[i])) abort();
  if (m2.has_spine != m.has_spine) abort();
  if (m.has_spine) {
    const df_mf_spine *a = &m.spine, *b = &m2.spine;
    if (strcmp(a->kind, b->kind) || a->layout != b->layout || a->nunits != b->nunits ||
        a->nchunks != b->nchunks)
      abort();
    for (int i = 0; i < a->nunits; i++) {
      if (memcmp(&a->units[i], &b->units[i], sizeof a->units[i])) abort();
      if (df_manifest_spine_unit(&m, a->units[i].unit) != &a->units[i]) abort();
    }
    for (int i = 0; i < a->nchunks; i++)
      if (memcmp(&a->chunks[i], &b->chunks[i], sizeof a->chunks[i])) abort();
  }
  free(js);
  df_manifest_free(&m2);
  df_manifest_free(&m);
  return 0;
}

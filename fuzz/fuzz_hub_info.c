/* libFuzzer target: the model-info parser accepts or rejects any input
 * without crashing; whatever it accepts has safe names and a commit sha. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "remote/hub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  df_hub_info i;
  df_err e;
  if (df_hub_info_parse((const char *)data, size, "fuzz", &i, &e) != 0) return 0;
  if (!df_hub_is_commit(i.commit)) abort();
  for (int k = 0; k < i.nfiles; k++) {
    if (!df_hub_name_valid(i.files[k].name)) abort();
    if (i.files[k].lfs && strlen(i.files[k].sha256) != 64) abort();
  }
  df_hub_info_free(&i);
  return 0;
}

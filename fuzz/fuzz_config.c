/* libFuzzer: config.json parsing on arbitrary bytes. An accepted config must
 * satisfy the invariants the engine relies on, and survive to_json -> parse
 * unchanged. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  df_config c;
  df_err e;
  if (df_config_parse(&c, (const char *)data, size, &e) != 0) {
    if (!memchr(e.msg, 0, sizeof e.msg) || !strstr(e.msg, "config.json")) abort();
    return 0;
  }
  if (c.n_layers < 1 || c.n_layers > DF_MAX_LAYERS) abort();
  if (c.n_kda + c.n_mla != c.n_layers) abort();
  if (c.top_k < 1 || c.top_k > c.n_experts) abort();
  if (c.first_k_dense < 0 || c.first_k_dense > c.n_layers) abort();
  if (c.latent % c.expert_group || c.moe_inter % c.expert_group) abort();
  if (c.n_group != 1) abort();
  char *js = df_config_to_json(&c);
  if (!js) abort();
  df_config r;
  if (df_config_parse(&r, js, strlen(js), &e) != 0) abort();
  /* to_json always writes the nested K3 form */
  memset(c.model_type, 0, sizeof c.model_type);
  strcpy(c.model_type, "kimi_k3");
  c.nested = 1;
  if (memcmp(&c, &r, sizeof c)) abort();
  free(js);
  return 0;
}

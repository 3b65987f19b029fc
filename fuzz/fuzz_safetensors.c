/* libFuzzer: the safetensors header parser on arbitrary bytes (the input is
 * the whole file: file_size = input size). Accepted headers must describe
 * tensors that lie inside the input and do not overlap. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  df_st_file f;
  df_err e;
  if (df_st_parse(&f, data, size, size, "fuzz.safetensors", &e) != 0) {
    if (!memchr(e.msg, 0, sizeof e.msg) || !strstr(e.msg, "fuzz.safetensors")) abort();
    return 0;
  }
  uint64_t last_end = 0;
  for (int i = 0; i < f.ntensors; i++) {
    const df_tensor *t = &f.tensors[i];
    if (t->offset > size || t->nbytes > size - t->offset) abort();
    if (t->data != data + t->offset) abort();
    if (t->nbytes != t->nelem * df_dtype_size(t->dtype)) abort();
    if (i && strcmp(f.tensors[i - 1].name, t->name) >= 0) abort(); /* sorted, unique */
    if (df_st_file_find(&f, t->name) != t) abort();
    /* touch every byte so ASan sees any out-of-bounds pointer */
    const volatile uint8_t *p = t->data;
    for (uint64_t k = 0; k < t->nbytes; k += 4096) (void)p[k];
    if (t->nbytes) (void)p[t->nbytes - 1];
    last_end = last_end > t->offset + t->nbytes ? last_end : t->offset + t->nbytes;
  }
  (void)last_end;
  df_st_close(&f);
  return 0;
}

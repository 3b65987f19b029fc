/* Fuzzes the tokenizer.json parser (src/tokenizer/hf_bpe.c): arbitrary bytes
 * as the file must load or fail with a message, never crash; a file that
 * loads must encode text and decode ids without crashing, and decoding the
 * ids of valid text must give bytes (byte-level BPE loses nothing the vocab
 * covers). The input is split at the first NUL: tokenizer.json, then text. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "tokenizer/hf_bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nul = memchr(data, 0, size);
  size_t jl = nul ? (size_t)(nul - data) : size;
  const char *text = nul ? (const char *)nul + 1 : "";
  size_t tl = nul ? size - jl - 1 : 0;
  df_err e;
  df_hftok *t = NULL;
  if (df_hftok_parse(&t, (const char *)data, jl, "fuzz.json", &e)) {
    if (!e.msg[0]) abort(); /* a failure always says why */
    return 0;
  }
  int *ids = NULL;
  size_t n = 0, cap = 0;
  for (int added = 0; added < 2; added++) {
    n = 0;
    if (df_hftok_encode(t, text, tl, added, &ids, &n, &cap, &e) == 0) {
      for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= df_hftok_vocab_size(t)) abort();
      size_t l;
      char *s = df_hftok_decode(t, ids, n, &l);
      if (l > 0 && !s) abort();
      free(s);
    } else if (df_utf8_valid(text, tl)) {
      /* valid text fails only in NFC or the regex engine, and says so */
      if (!e.msg[0]) abort();
    }
  }
  /* arbitrary ids through decode and piece */
  int raw[8];
  for (int i = 0; i < 8; i++) raw[i] = (int)(i < (int)tl ? (int8_t)text[i] * 37 : i);
  size_t l;
  free(df_hftok_decode(t, raw, 8, &l));
  free(ids);
  df_hftok_free(t);
  return 0;
}

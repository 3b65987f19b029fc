/* libFuzzer target: the structured-output grammar (serve/jsongram.h).
 * Input: a schema, a NUL byte, then a document (no NUL: the document alone,
 * against "any object"). Compiling must never crash; a document the matcher
 * accepts whole must be valid JSON and an object, and feeding it byte by
 * byte must agree with feeding it at once. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/jsongram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nul = memchr(data, 0, size);
  char err[256];
  df_jg *g;
  const uint8_t *doc = data;
  size_t n = size;
  if (nul) {
    g = df_jg_schema((const char *)data, (size_t)(nul - data), err, sizeof err);
    doc = nul + 1;
    n = size - (size_t)(nul - data) - 1;
  } else {
    g = df_jg_object();
  }
  if (!g) return 0;
  df_jm a, b;
  df_jm_init(&a, g);
  df_jm_init(&b, g);
  int whole = df_jm_feed(&a, doc, n);
  int each = 1;
  for (size_t i = 0; i < n && each; i++) each = df_jm_feed(&b, doc + i, 1);
  if (whole != each || a.done != b.done) abort();
  if (whole && a.done) {
    json_error_t je;
    json_t *v = json_loadb((const char *)doc, n, 0, &je);
    /* RFC 8259 section 6 leaves the range of numbers to implementations:
     * jansson refuses one beyond a double (74e74721722) while JSON.parse and
     * Python read it as infinity. That is a range limit, not a syntax error;
     * every other refusal is a matcher bug. */
    if (!v && json_error_code(&je) == json_error_numeric_overflow) return df_jg_free(g), 0;
    if (!v || !json_is_object(v)) abort();
    json_decref(v);
  }
  df_jg_free(g);
  return 0;
}

/* libFuzzer target: Content-Range parsing never crashes, and what it accepts
 * is a well-formed range inside a known total that prints back the same. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint64_t a, b, t;
  if (df_http_parse_content_range((const char *)data, size, &a, &b, &t) != 0) return 0;
  if (a > b || b >= t) abort();
  char buf[96];
  int n = snprintf(buf, sizeof buf, "bytes %llu-%llu/%llu", (unsigned long long)a,
                   (unsigned long long)b, (unsigned long long)t);
  uint64_t a2, b2, t2;
  if (df_http_parse_content_range(buf, (size_t)n, &a2, &b2, &t2) || a2 != a || b2 != b || t2 != t)
    abort();
  return 0;
}

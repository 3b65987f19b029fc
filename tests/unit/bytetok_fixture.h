/* A byte-level test tokenizer shared by the chat and server-text tests:
 * 256 one-byte ranks (rank b = byte b, no merges, so ordinary text encodes to
 * its bytes) and the K3 control specials at 256..262. Expected layouts can
 * then be written out literally from kimi-k3.md section 7. */
#ifndef DF_TESTS_BYTETOK_FIXTURE_H
#define DF_TESTS_BYTETOK_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer/tokenizer.h"

enum { BT_BOS = 256, BT_EOS, BT_EOM, BT_OPEN, BT_CLOSE, BT_SEP, BT_RSV };

/* Writes the two files into a fresh temporary folder (its name goes to
 * dir, at least 64 bytes) and loads them. Returns NULL on failure. */
static inline df_tok *bytetok_load(char *dir, size_t dirlen, const char *tag) {
  snprintf(dir, dirlen, "/tmp/df-test-%s.XXXXXX", tag);
  if (!mkdtemp(dir)) return NULL;
  static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char path[128];
  snprintf(path, sizeof path, "%s/tiktoken.model", dir);
  FILE *f = fopen(path, "wb");
  if (!f) return NULL;
  for (int b = 0; b < 256; b++) fprintf(f, "%c%c== %d\n", a[b >> 2], a[(b & 3) << 4], b);
  fclose(f);
  snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
  if (!(f = fopen(path, "wb"))) return NULL;
  fputs("{\"added_tokens_decoder\": {"
        "\"256\": {\"content\": \"[BOS]\", \"special\": true},"
        "\"257\": {\"content\": \"[EOS]\", \"special\": true},"
        "\"258\": {\"content\": \"<|end_of_msg|>\", \"special\": true},"
        "\"259\": {\"content\": \"<|open|>\", \"special\": true},"
        "\"260\": {\"content\": \"<|close|>\", \"special\": true},"
        "\"261\": {\"content\": \"<|sep|>\", \"special\": true},"
        "\"262\": {\"content\": \"<|reserved_token_6|>\", \"special\": true}}}",
        f);
  fclose(f);
  df_tok *t;
  df_err e;
  if (df_tok_load(&t, dir, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return NULL;
  }
  return t;
}

static inline int bytetok_free(df_tok *t, const char *dir) {
  df_tok_free(t);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

#endif

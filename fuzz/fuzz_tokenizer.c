/* Fuzzes the tokenizer and the chat splitter with a small vocabulary written
 * once at start-up: arbitrary bytes as text (invalid UTF-8 must be an error,
 * valid text must decode back to itself), arbitrary ids through decode, the
 * stream decoder and the splitter (whose output must stay valid UTF-8). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

static df_tok *tok;

static void b64(const uint8_t *p, size_t n, char *out) {
  static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                 (i + 2 < n ? p[i + 2] : 0);
    out[o++] = a[w >> 18 & 63];
    out[o++] = a[w >> 12 & 63];
    out[o++] = i + 1 < n ? a[w >> 6 & 63] : '=';
    out[o++] = i + 2 < n ? a[w & 63] : '=';
  }
  out[o] = 0;
}

/* 256 bytes, then merges that make multi-byte and cross-character tokens. */
static const char *const merges[] = {
    "th", "he", "the", " t", " the", "in", "ing", "an", "er", "  ", "    ", "\n\n", "'s",
    "\xE4\xB8", "\xE4\xB8\xAD", "\xAD\xEF", "\xF0\x9F", "\xF0\x9F\x98", "\x98\x80", "\xBC\x8C",
    "<|", "|>", "op", "open", "re", "sp", "on", "se", "resp", "response", "think", "message",
    "12", "123", "\xC3\xA9", "e\xCC", "\xCC\x81", "ab", "bc", "abc",
};

static int init(void) {
  char dir[] = "/tmp/df-fuzz-tok.XXXXXX";
  if (!mkdtemp(dir)) return -1;
  char path[128], cfg[128], enc[64];
  snprintf(path, sizeof path, "%s/tiktoken.model", dir);
  snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int r = 0;
  for (int b = 0; b < 256; b++, r++) {
    uint8_t c = (uint8_t)b;
    b64(&c, 1, enc);
    fprintf(f, "%s %d\n", enc, r);
  }
  for (size_t i = 0; i < sizeof merges / sizeof merges[0]; i++, r++) {
    b64((const uint8_t *)merges[i], strlen(merges[i]), enc);
    fprintf(f, "%s %d\n", enc, r);
  }
  fclose(f);
  f = fopen(cfg, "wb");
  if (!f) return -1;
  static const char *const sp[] = {"[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>",
                                   "<|sep|>", "<|open|>x"};
  fprintf(f, "{\"added_tokens_decoder\": {");
  for (int i = 0; i < 7; i++)
    fprintf(f, "%s\"%d\": {\"content\": \"%s\", \"special\": true}", i ? "," : "", r + i + (i > 3),
            sp[i]);
  fprintf(f, "}}");
  fclose(f);
  df_err e;
  int rc = df_tok_load(&tok, dir, &e);
  unlink(path);
  unlink(cfg);
  rmdir(dir);
  if (rc) fprintf(stderr, "fuzz_tokenizer: %s\n", e.msg);
  return rc;
}

#define CHECK(c) \
  do {           \
    if (!(c)) __builtin_trap(); \
  } while (0)

static void encode_and_check(const uint8_t *data, size_t size, int specials) {
  int *ids = NULL;
  size_t n = 0, cap = 0;
  df_err e;
  const char *text = (const char *)data;
  int rc = specials ? df_tok_encode_with_specials(tok, text, size, &ids, &n, &cap, &e)
                    : df_tok_encode(tok, text, size, &ids, &n, &cap, &e);
  int valid = df_utf8_valid(text, size);
  CHECK(rc == (valid ? 0 : -1));
  if (rc == 0) {
    for (size_t i = 0; i < n; i++) {
      CHECK(ids[i] >= 0 && ids[i] < df_tok_vocab_size(tok));
      if (!specials) CHECK(!df_tok_is_special(tok, ids[i]));
    }
    size_t len;
    char *back = df_tok_decode(tok, ids, n, &len);
    CHECK(len == size && !memcmp(back, data, size));
    free(back);
  }
  free(ids);
}

static void ids_and_check(const uint8_t *data, size_t size) {
  size_t n = size / 2;
  int *ids = df_xmalloc((n ? n : 1) * sizeof *ids);
  int vocab = df_tok_vocab_size(tok);
  for (size_t i = 0; i < n; i++) ids[i] = (int)((data[2 * i] | data[2 * i + 1] << 8) % (vocab + 8)) - 4;
  size_t len;
  free(df_tok_decode(tok, ids, n, &len));

  df_tok_stream s;
  df_tok_stream_init(&s, tok);
  char out[256];
  for (size_t i = 0; i < n; i++) {
    int r = df_tok_stream_push(&s, ids[i], out, sizeof out);
    CHECK(r >= 0 && df_utf8_valid(out, (size_t)r));
  }
  int r = df_tok_stream_flush(&s, out, sizeof out);
  CHECK(r >= 0 && df_utf8_valid(out, (size_t)r));

  df_chat_split sp;
  df_chat_split_init(&sp, tok);
  for (size_t i = 0; i < n; i++) {
    df_channel ch;
    size_t cap = (data[2 * i] & 1) ? 4 : sizeof out; /* sometimes too small */
    r = df_chat_split_push(&sp, ids[i], out, cap, &ch);
    if (r < 0) r = df_chat_split_push(&sp, ids[i], out, sizeof out, &ch);
    CHECK(r >= 0 && df_utf8_valid(out, (size_t)r));
    CHECK(ch >= DF_CH_REASONING && ch <= DF_CH_END);
  }
  free(ids);
}

static void chat_and_check(const uint8_t *data, size_t size) {
  if (size < 1) return;
  df_chat_msg m[2] = {
      {.role = (df_role)(data[0] % 4), .content = (const char *)data + 1, .content_len = size - 1,
       .tool_name = "t\"&", .reasoning = (const char *)data + 1,
       .reasoning_len = (size - 1) / 2},
      {.role = DF_ROLE_USER, .content = "hi", .content_len = 2},
  };
  df_chat_opts o = df_chat_opts_default();
  o.effort = df_chat_effort_name((df_effort)(data[0] >> 6));
  o.add_generation_prompt = data[0] & 1;
  df_chat_prompt p;
  df_err e;
  int rc = df_chat_render(tok, m, 2, &o, &p, &e);
  int valid = df_utf8_valid(m[0].content, m[0].content_len) &&
              (m[0].role != DF_ROLE_ASSISTANT || df_utf8_valid(m[0].reasoning, m[0].reasoning_len));
  CHECK(rc == (valid ? 0 : -1));
  if (!rc) df_chat_prompt_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!tok && init()) abort();
  encode_and_check(data, size, 0);
  encode_and_check(data, size, 1);
  ids_and_check(data, size);
  chat_and_check(data, size);
  return 0;
}

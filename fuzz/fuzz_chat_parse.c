/* Fuzzes the K3 chat output parser (tool calls) and the renderer: the first
 * input byte picks the mode; for the parser the rest are ids (a byte b is
 * token b of a byte-level vocabulary, bytes 0xF8.. are the control specials,
 * so markup and text mix freely), pushed one by one; the text it reports must
 * be valid UTF-8 and every call's arguments one JSON object. For the renderer
 * the rest is an OpenAI messages array: it must render or fail cleanly, and a
 * rendered prompt's ids must decode to its text. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static df_tok *tok;

static int init(void) {
  char dir[] = "/tmp/df-fuzz-chat.XXXXXX";
  if (!mkdtemp(dir)) return -1;
  static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char path[128], cfg[128];
  snprintf(path, sizeof path, "%s/tiktoken.model", dir);
  snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  for (int b = 0; b < 256; b++) fprintf(f, "%c%c== %d\n", a[b >> 2], a[(b & 3) << 4], b);
  fclose(f);
  if (!(f = fopen(cfg, "wb"))) return -1;
  fputs("{\"added_tokens_decoder\": {\"256\": {\"content\": \"[BOS]\"}, \"258\": {\"content\": "
        "\"<|end_of_msg|>\"}, \"259\": {\"content\": \"<|open|>\"}, \"260\": {\"content\": "
        "\"<|close|>\"}, \"261\": {\"content\": \"<|sep|>\"}}}", f);
  fclose(f);
  df_err e;
  int rc = df_tok_load(&tok, dir, &e);
  unlink(path);
  unlink(cfg);
  rmdir(dir);
  return rc;
}

#define CHECK(c) \
  do {           \
    if (!(c)) __builtin_trap(); \
  } while (0)

typedef struct seen {
  size_t calls, args_open;
} seen;

static void on_ev(const df_chat_event *ev, void *ctx) {
  seen *s = ctx;
  CHECK(ev->len == 0 || ev->text);
  if (ev->kind == DF_CHAT_EV_REASONING || ev->kind == DF_CHAT_EV_CONTENT ||
      ev->kind == DF_CHAT_EV_CALL_BEGIN)
    CHECK(df_utf8_valid(ev->text, ev->len));
  if (ev->kind == DF_CHAT_EV_CALL_BEGIN) s->calls++;
  if (ev->kind == DF_CHAT_EV_CALL_ARGS || ev->kind == DF_CHAT_EV_CALL_END)
    CHECK(ev->call >= 0 && (size_t)ev->call + 1 == s->calls);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!tok && init()) __builtin_trap();
  if (size < 1) return 0;
  if (data[0] & 1) {
    int *ids = malloc((size ? size : 1) * sizeof *ids);
    for (size_t i = 1; i < size; i++) ids[i - 1] = data[i] >= 0xF8 ? 256 + (data[i] - 0xF8) : data[i];
    df_chat_parsed r;
    df_chat_parse_ids(tok, ids, size - 1, data[0] & 2, &r);
    CHECK(df_utf8_valid(r.reasoning, r.reasoning_len));
    CHECK(df_utf8_valid(r.content, r.content_len));
    for (size_t k = 0; k < r.ncalls; k++) {
      json_t *v = json_loads(r.calls[k].arguments, JSON_ALLOW_NUL, NULL);
      CHECK(json_is_object(v));
      json_decref(v);
    }
    seen s = {0};
    df_chat_parser *p = df_chat_parser_new(tok, data[0] & 2);
    for (size_t i = 0; i + 1 < size; i++) df_chat_parser_push(p, ids[i], on_ev, &s);
    df_chat_parser_finish(p, on_ev, &s);
    df_chat_parser_free(p);
    CHECK(s.calls == r.ncalls);
    df_chat_parsed_free(&r);
    free(ids);
    return 0;
  }
  df_chat_opts o = df_chat_opts_default();
  o.thinking = data[0] & 2;
  o.tool_choice = (df_tool_choice)((data[0] >> 2) % 3);
  static const char *const eff[] = {NULL, "low", "high", "max"};
  o.effort = eff[(data[0] >> 4) & 3];
  df_chat_prompt pr;
  df_err e;
  if (df_chat_render_json(tok, (const char *)data + 1, size - 1, &o, &pr, &e) == 0) {
    size_t dl;
    char *d = df_tok_decode(tok, pr.ids, pr.n, &dl);
    CHECK(dl == pr.text_len && !memcmp(d, pr.text, dl));
    free(d);
    df_chat_prompt_free(&pr);
  } else {
    CHECK(memchr(e.msg, 0, sizeof e.msg));
  }
  return 0;
}

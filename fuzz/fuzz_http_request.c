/* libFuzzer target: what `deltafin serve` does with an untrusted request
 * before any model work. Input: one selector byte (bit 0: chat or
 * completions), then an optional first line "METHOD PATH AUTH\n" when bit 1
 * is set, then the body bytes. Routing, the API-key check, the header
 * checks (Host, Content-Type, CORS origin, framing, log escaping: the line's
 * fields stand in for header values), body validation and the context check
 * must never crash, leak or read out of bounds, and an accepted request must
 * be internally consistent. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "serve/request.h"
#include "serve/route.h"

static void check_request_line(const char *line, size_t n) {
  char buf[512];
  if (n >= sizeof buf) n = sizeof buf - 1;
  memcpy(buf, line, n);
  buf[n] = 0;
  char *path = strchr(buf, ' ');
  if (!path) return;
  *path++ = 0;
  char *auth = strchr(path, ' ');
  if (auth) *auth++ = 0;
  const char *allow, *arg;
  df_route r = df_serve_route(buf, path, &allow, &arg);
  if ((r == DF_ROUTE_NOT_FOUND) != (allow == NULL)) abort();
  if ((r == DF_ROUTE_MODEL) != (arg != NULL)) abort();
  const char *allow_list[] = {"a.example"};
  df_serve_host_ok(path, "127.0.0.1", allow_list, 1);
  df_serve_ctype_json(path);
  df_serve_cors_ok(path, allow_list, 1);
  const char *cl[2] = {buf, path}, *why;
  int st = df_serve_framing(cl, auth ? 2 : 1, auth, &why);
  if (st && st != 400 && st != 501) abort();
  if (st && !why) abort();
  char esc[64];
  df_serve_log_escape(esc, sizeof esc, path);
  for (const char *q = esc; *q; q++)
    if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f) abort();
  if (strlen(esc) >= sizeof esc) abort();
  if (auth && df_serve_auth_ok(auth, "k")) {
    /* accepted: the scheme is Bearer and the token is exactly the key */
    if (strncasecmp(auth, "bearer ", 7)) abort();
    const char *t = auth + 7;
    while (*t == ' ') t++;
    size_t len = strlen(t);
    while (len && (t[len - 1] == ' ' || t[len - 1] == '\t')) len--;
    if (len != 1 || t[0] != 'k') abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  df_serve_kind kind = (data[0] & 1) ? DF_SERVE_COMPLETION : DF_SERVE_CHAT;
  const char *p = (const char *)data + 1;
  size_t n = size - 1;
  if (data[0] & 2) {
    const char *nl = memchr(p, '\n', n);
    if (!nl) return 0;
    check_request_line(p, (size_t)(nl - p));
    n -= (size_t)(nl - p) + 1;
    p = nl + 1;
  }
  {
    char *text;
    size_t tl, nid;
    int pieces, special, *ids;
    df_serve_err te;
    if (df_serve_parse_tokenize(p, n, &text, &tl, &pieces, &special, &te) == 0) free(text);
    if (df_serve_parse_detokenize(p, n, 5000, &ids, &nid, &te) == 0) {
      for (size_t i = 0; i < nid; i++)
        if (ids[i] < 0 || ids[i] >= 5000) abort();
      free(ids);
    }
  }
  df_serve_limits lim = {.model_id = (data[0] & 4) ? NULL : "m", .vocab = 5000};
  df_serve_req r;
  df_serve_err e;
  if (df_serve_parse(kind, p, n, &lim, &r, &e) == 0) {
    if (kind == DF_SERVE_CHAT && (r.nmsgs == 0 || !r.msgs)) abort();
    if (kind == DF_SERVE_COMPLETION && !r.prompt_is_ids && (!r.prompt || !r.prompt_len)) abort();
    for (size_t i = 0; i < r.nmsgs; i++)
      if (r.msgs[i].content_len && !r.msgs[i].content) abort();
    for (size_t i = 0; i < r.nprompt_ids; i++)
      if (r.prompt_ids[i] < 0 || r.prompt_ids[i] >= lim.vocab) abort();
    if (r.nstop < 0 || r.nstop > DF_SERVE_MAX_STOP) abort();
    if (!(r.temperature >= 0 && r.temperature <= 2) || !(r.top_p >= 0 && r.top_p <= 1)) abort();
    if (r.n < 1 || r.n > DF_SERVE_MAX_N) abort();
    if (r.top_logprobs < 0 || r.top_logprobs > DF_SERVE_MAX_TOP_LOGPROBS) abort();
    for (int i = 0; i < r.nbias; i++)
      if (r.bias[i].id < 0 || r.bias[i].id >= lim.vocab) abort();
    df_serve_check_context(&r, (long)n, 4096, &e);
    df_serve_req_free(&r);
  } else if ((e.status != 400 && e.status != 404) || !e.type || !e.msg[0]) {
    abort();
  }
  return 0;
}

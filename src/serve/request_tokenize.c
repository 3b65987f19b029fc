/* POST /tokenize and /detokenize bodies. */

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "serve/request_int.h"

/* ---- /tokenize, /detokenize ---- */

static json_t *load_object(const char *body, size_t len, df_serve_err *e) {
  if (!df_utf8_valid(body, len)) {
    BAD(e, NULL, "the request body is not valid UTF-8");
    return NULL;
  }
  json_error_t je;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    BAD(e, NULL, "the request body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
        je.column);
    return NULL;
  }
  if (!json_is_object(root)) {
    BAD(e, NULL, "the request body must be a JSON object, not %s", df_req_json_kind(root));
    json_decref(root);
    return NULL;
  }
  return root;
}

int df_serve_parse_tokenize(const char *body, size_t len, char **owned, size_t *text_len,
                            int *with_pieces, int *parse_special, df_serve_err *err) {
  *owned = NULL;
  *with_pieces = *parse_special = 0;
  json_t *root = load_object(body, len, err);
  if (!root) return -1;
  int rc = -1;
  const json_t *content = NULL;
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    if (!strcmp(k, "content")) {
      if (df_req_want_str(v, k, err)) goto done;
      content = v;
    } else if (!strcmp(k, "with_pieces")) {
      if (df_req_want_bool(v, k, with_pieces, err)) goto done;
    } else if (!strcmp(k, "parse_special")) {
      if (df_req_want_bool(v, k, parse_special, err)) goto done;
    } else if (!strcmp(k, "add_special")) {
      /* llama.cpp: add the BOS/EOS the tokenizer is configured to add. K3's
       * adds none (its prompts open with the chat markup), so either value
       * gives the same ids. */
      int b;
      if (df_req_want_bool(v, k, &b, err)) goto done;
    } else if (!strcmp(k, "model")) {
      if (df_req_want_str(v, k, err)) goto done; /* one model is served; llama-server ignores it */
    } else {
      BAD(err, k, "Unrecognized request argument supplied: %s", k);
      goto done;
    }
  }
  if (!content) {
    BAD(err, "content", "'content' is required");
    goto done;
  }
  *text_len = json_string_length(content);
  *owned = df_xmalloc(*text_len + 1);
  memcpy(*owned, json_string_value(content), *text_len);
  (*owned)[*text_len] = 0;
  rc = 0;
done:
  json_decref(root);
  return rc;
}

int df_serve_parse_detokenize(const char *body, size_t len, int vocab, int **ids, size_t *n,
                              df_serve_err *err) {
  *ids = NULL;
  *n = 0;
  json_t *root = load_object(body, len, err);
  if (!root) return -1;
  int rc = -1;
  const json_t *toks = NULL;
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    if (!strcmp(k, "tokens")) {
      toks = v;
    } else if (!strcmp(k, "model")) {
      if (df_req_want_str(v, k, err)) goto done;
    } else {
      BAD(err, k, "Unrecognized request argument supplied: %s", k);
      goto done;
    }
  }
  if (!toks || !json_is_array(toks)) {
    BAD(err, "tokens", "'tokens' must be an array of token ids");
    goto done;
  }
  size_t m = json_array_size(toks);
  *ids = df_xmalloc((m ? m : 1) * sizeof **ids);
  for (size_t i = 0; i < m; i++) {
    json_t *x = json_array_get(toks, i);
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= vocab) {
      BAD(err, "tokens", "tokens[%zu] is not a token id in [0, %d)", i, vocab);
      free(*ids);
      *ids = NULL;
      goto done;
    }
    (*ids)[i] = (int)json_integer_value(x);
  }
  *n = m;
  rc = 0;
done:
  json_decref(root);
  return rc;
}

/* The special-token table: added_tokens_decoder of tokenizer_config.json, ids
 * after the ranks, plus the ids a TikTokenTokenizer reserves but does not list. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "tokenizer/tok_int.h"

static int parse_id(const char *s, long *out) {
  if (!*s || strlen(s) > 9) return -1;
  long v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    v = v * 10 + (*s - '0');
  }
  *out = v;
  return 0;
}

int df_tok_specials_load(df_tok *t, const char *path, df_err *e) {
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) return df_err_set(e, "%s: line %d: %s", path, je.line, je.text);
  int rc = -1;
  json_t *dec = json_is_object(root) ? json_object_get(root, "added_tokens_decoder") : NULL;
  if (!json_is_object(dec)) {
    df_err_set(e, "%s: no added_tokens_decoder object", path);
    goto out;
  }
  /* Kimi's TikTokenTokenizer (tokenization_kimi.py) owns the 256 ids after the
   * ranks: the config lists some of them (the release: 16) and every other is
   * <|reserved_token_ID|> by position. Other configs define only what they list. */
  const json_t *cls = json_object_get(root, "tokenizer_class");
  int kimi = json_is_string(cls) && !strcmp(json_string_value(cls), "TikTokenTokenizer");
  size_t cnt = json_object_size(dec) + (kimi ? DF_TOK_RESERVED : 0);
  t->sp = df_xcalloc(cnt ? cnt : 1, sizeof *t->sp);
  const char *key;
  json_t *val;
  long maxid = t->n_ranks - 1;
  json_object_foreach(dec, key, val) {
    long id;
    if (parse_id(key, &id)) {
      df_err_set(e, "%s: added_tokens_decoder: key '%s' is not a token id", path, key);
      goto out;
    }
    json_t *c = json_is_object(val) ? json_object_get(val, "content") : NULL;
    if (!json_is_string(c) || json_string_length(c) == 0) {
      df_err_set(e, "%s: added_tokens_decoder[%s]: no content string", path, key);
      goto out;
    }
    if (id < t->n_ranks) {
      df_err_set(e, "%s: special token %ld '%s' collides with the ranks 0..%d", path, id,
                 json_string_value(c), t->n_ranks - 1);
      goto out;
    }
    if (kimi && id >= (long)t->n_ranks + DF_TOK_RESERVED) {
      df_err_set(e, "%s: special token %ld '%s' is outside the %d ids after the ranks that a "
                 "TikTokenTokenizer reserves (%d..%d)", path, id, json_string_value(c),
                 DF_TOK_RESERVED, t->n_ranks, t->n_ranks + DF_TOK_RESERVED - 1);
      goto out;
    }
    df_tok_special *s = &t->sp[t->nsp++];
    s->id = (int)id;
    s->len = json_string_length(c);
    s->text = df_xmalloc(s->len + 1);
    memcpy(s->text, json_string_value(c), s->len + 1);
    if (id > maxid) maxid = id;
  }
  if (kimi) {
    char listed[DF_TOK_RESERVED] = {0};
    for (int i = 0; i < t->nsp; i++) listed[t->sp[i].id - t->n_ranks] = 1;
    for (int k = 0; k < DF_TOK_RESERVED; k++) {
      if (listed[k]) continue;
      char name[48];
      int n = snprintf(name, sizeof name, "<|reserved_token_%d|>", t->n_ranks + k);
      df_tok_special *s = &t->sp[t->nsp++];
      s->id = t->n_ranks + k;
      s->len = (size_t)n;
      s->text = df_xstrdup(name);
    }
    maxid = t->n_ranks + DF_TOK_RESERVED - 1;
  }
  t->sp_span = (int)(maxid + 1 - t->n_ranks);
  t->sp_by_id = df_xmalloc((size_t)(t->sp_span ? t->sp_span : 1) * sizeof *t->sp_by_id);
  for (int i = 0; i < t->sp_span; i++) t->sp_by_id[i] = -1;
  for (int i = 0; i < t->nsp; i++) {
    df_tok_special *s = &t->sp[i];
    if (t->sp_by_id[s->id - t->n_ranks] >= 0) { /* JSON with a repeated key */
      df_err_set(e, "%s: token id %d is defined twice", path, s->id);
      goto out;
    }
    for (int j = 0; j < i; j++)
      if (t->sp[j].len == s->len && !memcmp(t->sp[j].text, s->text, s->len)) {
        df_err_set(e, "%s: '%s' is both token %d and %d", path, s->text, t->sp[j].id, s->id);
        goto out;
      }
    t->sp_by_id[s->id - t->n_ranks] = i;
    t->sp_first[(uint8_t)s->text[0]] = 1;
  }
  t->vocab = (int)maxid + 1;
  rc = 0;
out:
  json_decref(root);
  return rc;
}

int df_tok_special_id(const df_tok *t, const char *text) {
  size_t n = strlen(text);
  for (int i = 0; i < t->nsp; i++)
    if (t->sp[i].len == n && !memcmp(t->sp[i].text, text, n)) return t->sp[i].id;
  return -1;
}

const df_tok_special *df_tok_special_of(const df_tok *t, int id) {
  if (id < t->n_ranks || id >= t->n_ranks + t->sp_span) return NULL;
  int i = t->sp_by_id[id - t->n_ranks];
  return i < 0 ? NULL : &t->sp[i];
}

int df_tok_is_special(const df_tok *t, int id) { return df_tok_special_of(t, id) != NULL; }

/* Leftmost special at or after pos (the longest one if several start there). */
const df_tok_special *df_tok_special_find(const df_tok *t, const uint8_t *p, size_t len, size_t pos,
                                   size_t *at) {
  for (size_t i = pos; i < len; i++) {
    if (!t->sp_first[p[i]]) continue;
    const df_tok_special *best = NULL;
    for (int k = 0; k < t->nsp; k++) {
      const df_tok_special *s = &t->sp[k];
      if (s->len <= len - i && (!best || s->len > best->len) && !memcmp(p + i, s->text, s->len))
        best = s;
    }
    if (best) {
      *at = i;
      return best;
    }
  }
  return NULL;
}

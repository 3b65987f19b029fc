/* The encode calls: UTF-8 checked once, the release's pre-split, then each
 * piece through the pre-tokenizer and BPE, with or without specials. */
#include "tokenizer/tokenizer.h"

#include "base/util.h"
#include "tokenizer/tok_int.h"

int df_tok_encode(const df_tok *t, const char *text, size_t len, int **ids, size_t *n,
                  size_t *cap, df_err *e) {
  if (!df_utf8_valid(text, len)) return df_err_set(e, "tokenize: input is not valid UTF-8");
  df_tok_ids o = {ids, n, cap};
  df_tok_scratch s = {0};
  int rc = df_tok_presplit(t, (const uint8_t *)text, len, df_tok_pretok_encode, &s, &o, e);
  df_tok_scratch_free(&s);
  return rc;
}

/* One piece with its special-token spellings recognised (the release splits
 * first and recognises specials inside each piece). */
static int encode_specials_piece(const df_tok *t, const uint8_t *p, size_t len,
                                 df_tok_scratch *s, df_tok_ids *o, df_err *e) {
  int rc = 0;
  size_t pos = 0;
  while (pos < len && rc == 0) {
    size_t at;
    const df_tok_special *sp = t->nsp ? df_tok_special_find(t, p, len, pos, &at) : NULL;
    size_t stop = sp ? at : len;
    /* the text between specials stays valid UTF-8: specials are whole strings */
    rc = df_tok_pretok_encode(t, p + pos, stop - pos, s, o, e);
    if (!sp) break;
    df_tok_push_id(o, sp->id);
    pos = at + sp->len;
  }
  return rc;
}

int df_tok_encode_with_specials(const df_tok *t, const char *text, size_t len, int **ids,
                                size_t *n, size_t *cap, df_err *e) {
  if (!df_utf8_valid(text, len)) return df_err_set(e, "tokenize: input is not valid UTF-8");
  df_tok_ids o = {ids, n, cap};
  df_tok_scratch s = {0};
  int rc = df_tok_presplit(t, (const uint8_t *)text, len, encode_specials_piece, &s, &o, e);
  df_tok_scratch_free(&s);
  return rc;
}

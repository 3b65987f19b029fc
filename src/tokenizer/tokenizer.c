/* tiktoken-style byte-level BPE (kimi-k3.md section 6): loading, freeing and
 * the token table's accessors. The concerns live in their own files:
 *   tok_ranks.c     the tiktoken rank file and the bytes->rank table
 *   tok_specials.c  the special-token table from tokenizer_config.json
 *   tok_pretok.c    the PCRE2 pre-tokenizer and the release's pre-split
 *   tok_bpe.c       the merge of one pre-token
 *   tok_encode.c    encode calls (ordinary text, text with specials)
 *   tok_decode.c    decoding, UTF-8-safe streaming, display escapes
 *
 * Ranks live in one byte arena indexed by rank; a bytes->rank open-addressing
 * table (XXH3) serves the merge loop. Text is validated as UTF-8 once, split
 * into pre-tokens by the PCRE2 form of the K3 pattern, and each pre-token is
 * merged with tiktoken's rule: repeatedly merge the adjacent pair whose
 * concatenation has the lowest rank (leftmost on ties); a pre-token that is
 * itself a rank is one token. */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>

#include "base/util.h"
#include "tokenizer/tok_int.h"

int df_tok_load_files(df_tok **out, const char *ranks_path, const char *tokcfg_path,
                      const char *pattern, df_err *e) {
  *out = NULL;
  df_tok *t = df_xcalloc(1, sizeof *t);
  if (df_tok_ranks_load(t, ranks_path, e)) goto fail;
  t->vocab = t->n_ranks;
  if (tokcfg_path && df_tok_specials_load(t, tokcfg_path, e)) goto fail;
  if (df_tok_pattern_compile(t, pattern ? pattern : df_tok_k3_pattern(), e)) goto fail;
  *out = t;
  return 0;
fail:
  df_tok_free(t);
  return -1;
}

int df_tok_load(df_tok **out, const char *dir, df_err *e) {
  char *r = df_path_join(dir, "tiktoken.model");
  char *c = df_path_join(dir, "tokenizer_config.json");
  int rc = df_tok_load_files(out, r, c, NULL, e);
  free(r);
  free(c);
  return rc;
}

void df_tok_free(df_tok *t) {
  if (!t) return;
  free(t->arena);
  free(t->off);
  free(t->slot);
  free(t->slot_tag);
  for (int i = 0; i < t->nsp; i++) free(t->sp[i].text);
  free(t->sp);
  free(t->sp_by_id);
  if (t->re) pcre2_code_free(t->re);
  free(t);
}

int df_tok_vocab_size(const df_tok *t) { return t->vocab; }
int df_tok_n_ranks(const df_tok *t) { return t->n_ranks; }

const uint8_t *df_tok_piece(const df_tok *t, int id, size_t *len) {
  if (id >= 0 && id < t->n_ranks) {
    *len = t->off[id + 1] - t->off[id];
    return t->arena + t->off[id];
  }
  const df_tok_special *s = df_tok_special_of(t, id);
  if (!s) {
    *len = 0;
    return NULL;
  }
  *len = s->len;
  return (const uint8_t *)s->text;
}

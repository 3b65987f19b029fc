/* The tokenizer's internals shared by its files (not part of the API):
 * the df_tok layout, the rank lookup the merge loop and the loader share, the
 * output and scratch buffers of one encode call, and each step's entry point. */
#ifndef DF_TOKENIZER_TOK_INT_H
#define DF_TOKENIZER_TOK_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include "base/err.h"
#include "base/util.h"
#include "tokenizer/tokenizer.h"

typedef struct df_tok_special {
  int id;
  char *text;
  size_t len;
} df_tok_special;

struct df_tok {
  int n_ranks;
  int vocab; /* max id + 1 */
  uint8_t *arena;
  uint32_t *off; /* n_ranks + 1 offsets into arena */
  /* bytes -> rank: open addressing, linear probing; -1 = empty */
  int32_t *slot;
  uint32_t *slot_tag; /* high hash bits, to skip most memcmp calls */
  size_t mask;
  int32_t byte_rank[256];
  df_tok_special *sp;
  int nsp;
  int *sp_by_id; /* id - n_ranks -> index in sp, or -1 */
  int sp_span;
  uint8_t sp_first[256]; /* bytes that start some df_tok_special */
  pcre2_code *re;
  int jit;
};

/* ---- rank table (filled by tok_ranks.c) ---- */

/* The rank whose bytes are p[0..n), or -1. */
static inline int df_tok_rank_of(const df_tok *t, const uint8_t *p, size_t n) {
  uint64_t h = XXH3_64bits(p, n);
  uint32_t tag = (uint32_t)(h >> 32);
  for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
    int32_t r = t->slot[i];
    if (r < 0) return -1;
    if (t->slot_tag[i] == tag && t->off[r + 1] - t->off[r] == n &&
        !memcmp(t->arena + t->off[r], p, n))
      return r;
  }
}

/* Loads the tiktoken rank file into t (n_ranks, arena, table, byte ranks). */
int df_tok_ranks_load(df_tok *t, const char *path, df_err *e);

/* ---- specials (tok_specials.c) ---- */

/* Loads added_tokens_decoder from tokenizer_config.json (after the ranks). */
int df_tok_specials_load(df_tok *t, const char *path, df_err *e);
/* The special with this id, or NULL. */
const df_tok_special *df_tok_special_of(const df_tok *t, int id);
/* Leftmost special at or after pos (the longest one if several start there);
 * its offset goes to *at. */
const df_tok_special *df_tok_special_find(const df_tok *t, const uint8_t *p, size_t len, size_t pos,
                                   size_t *at);

/* ---- one encode call's buffers ---- */

/* The caller's id array, grown as ids are appended. */
typedef struct df_tok_ids {
  int **ids;
  size_t *n, *cap;
} df_tok_ids;

static inline void df_tok_push_id(df_tok_ids *o, int id) {
  if (*o->n == *o->cap) {
    *o->cap = *o->cap ? *o->cap * 2 : 64;
    *o->ids = df_xrealloc(*o->ids, *o->cap * sizeof **o->ids);
  }
  (*o->ids)[(*o->n)++] = id;
}

/* Scratch space reused across the pre-tokens of one call. */
typedef struct df_tok_scratch {
  size_t cap;
  uint32_t *start; /* part start offsets (small path) */
  int32_t *rank;   /* rank of the pair starting at each part */
  /* large path: linked list over byte positions + binary heap */
  int32_t *next, *prev;
  uint32_t *ver;
  uint64_t *heap; /* (rank << 32 | position); version kept alongside */
  uint32_t *hver;
  size_t nheap;
} df_tok_scratch;
void df_tok_scratch_free(df_tok_scratch *s);

/* ---- BPE merge (tok_bpe.c) ---- */

/* Appends the ids of one pre-token (tiktoken's merge rule). */
void df_tok_bpe_piece(const df_tok *t, const uint8_t *p, size_t len, df_tok_scratch *s,
                      df_tok_ids *o);

/* ---- pre-tokenizer and the release's pre-split (tok_pretok.c) ---- */

/* Compiles the pre-tokenizer pattern (UTF, UCP; JIT where available). */
int df_tok_pattern_compile(df_tok *t, const char *pattern, df_err *e);
/* Splits valid UTF-8 text into pre-tokens and merges each. */
int df_tok_pretok_encode(const df_tok *t, const uint8_t *text, size_t len, df_tok_scratch *s,
                         df_tok_ids *o, df_err *e);
/* Encodes one piece of the pre-split. */
typedef int (*df_tok_piece_fn)(const df_tok *t, const uint8_t *p, size_t n, df_tok_scratch *s,
                               df_tok_ids *o, df_err *e);
/* Cuts valid UTF-8 text as the release does before BPE and calls fn on each piece. */
int df_tok_presplit(const df_tok *t, const uint8_t *text, size_t len, df_tok_piece_fn fn,
                    df_tok_scratch *s, df_tok_ids *o, df_err *e);

#endif

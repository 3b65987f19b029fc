/* The merge of one pre-token with tiktoken's rule: repeatedly merge the
 * adjacent pair whose concatenation has the lowest rank (leftmost on ties);
 * a pre-token that is itself a rank is one token. Short pre-tokens take
 * tiktoken's quadratic scan, long ones a heap with the same merge order. */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "tokenizer/tok_int.h"

static void scratch_grow(df_tok_scratch *s, size_t n) {
  if (n <= s->cap) return;
  size_t c = s->cap ? s->cap : 256;
  while (c < n) c *= 2;
  s->start = df_xrealloc(s->start, c * sizeof *s->start);
  s->rank = df_xrealloc(s->rank, c * sizeof *s->rank);
  s->next = df_xrealloc(s->next, c * sizeof *s->next);
  s->prev = df_xrealloc(s->prev, c * sizeof *s->prev);
  s->ver = df_xrealloc(s->ver, c * sizeof *s->ver);
  /* each merge pushes at most two entries on top of the initial n */
  s->heap = df_xrealloc(s->heap, 3 * c * sizeof *s->heap);
  s->hver = df_xrealloc(s->hver, 3 * c * sizeof *s->hver);
  s->cap = c;
}

void df_tok_scratch_free(df_tok_scratch *s) {
  free(s->start);
  free(s->rank);
  free(s->next);
  free(s->prev);
  free(s->ver);
  free(s->heap);
  free(s->hver);
}

#define NO_RANK INT32_MAX

/* Small pre-tokens: tiktoken's quadratic scan, cheapest for short input. */
static void bpe_small(const df_tok *t, const uint8_t *p, size_t len, df_tok_scratch *s,
                      df_tok_ids *o) {
  uint32_t *st = s->start;
  int32_t *rk = s->rank;
  size_t np = len + 1; /* parts, the last one a sentinel at len */
  for (size_t i = 0; i < np; i++) st[i] = (uint32_t)i;
  for (size_t i = 0; i + 2 < np; i++) {
    int r = df_tok_rank_of(t, p + i, 2);
    rk[i] = r < 0 ? NO_RANK : r;
  }
  rk[np - 2] = NO_RANK;
  rk[np - 1] = NO_RANK;
  for (;;) {
    int32_t best = NO_RANK;
    size_t bi = 0;
    for (size_t i = 0; i + 2 < np; i++)
      if (rk[i] < best) best = rk[i], bi = i;
    if (best == NO_RANK) break;
    /* merge parts bi and bi+1; re-rank the pairs that now start at bi-1 and bi */
    if (bi > 0) {
      int r = df_tok_rank_of(t, p + st[bi - 1], st[bi + 2] - st[bi - 1]);
      rk[bi - 1] = r < 0 ? NO_RANK : r;
    }
    if (bi + 3 < np) {
      int r = df_tok_rank_of(t, p + st[bi], st[bi + 3] - st[bi]);
      rk[bi] = r < 0 ? NO_RANK : r;
    } else {
      rk[bi] = NO_RANK;
    }
    memmove(st + bi + 1, st + bi + 2, (np - bi - 2) * sizeof *st);
    memmove(rk + bi + 1, rk + bi + 2, (np - bi - 2) * sizeof *rk);
    np--;
  }
  for (size_t i = 0; i + 1 < np; i++)
    df_tok_push_id(o, df_tok_rank_of(t, p + st[i], st[i + 1] - st[i]));
}

static inline int heap_less(const df_tok_scratch *s, size_t a, size_t b) {
  return s->heap[a] < s->heap[b];
}

static void heap_swap(df_tok_scratch *s, size_t a, size_t b) {
  uint64_t k = s->heap[a];
  s->heap[a] = s->heap[b];
  s->heap[b] = k;
  uint32_t v = s->hver[a];
  s->hver[a] = s->hver[b];
  s->hver[b] = v;
}

static void heap_push(df_tok_scratch *s, int32_t rank, uint32_t pos, uint32_t ver) {
  size_t i = s->nheap++;
  s->heap[i] = (uint64_t)(uint32_t)rank << 32 | pos;
  s->hver[i] = ver;
  while (i > 0 && heap_less(s, i, (i - 1) / 2)) {
    heap_swap(s, i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
}

static void heap_pop(df_tok_scratch *s) {
  s->nheap--;
  if (!s->nheap) return;
  heap_swap(s, 0, s->nheap);
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < s->nheap && heap_less(s, l, m)) m = l;
    if (r < s->nheap && heap_less(s, r, m)) m = r;
    if (m == i) break;
    heap_swap(s, i, m);
    i = m;
  }
}

/* Rank of the pair of parts starting at position i, or NO_RANK. Parts are
 * identified by their start byte, so the heap order (rank, start) is exactly
 * tiktoken's "lowest rank, leftmost first". */
static int32_t pair_rank(const df_tok *t, const uint8_t *p, size_t len, const df_tok_scratch *s,
                         int32_t i) {
  int32_t j = s->next[i];
  if (j < 0) return NO_RANK;
  int32_t k = s->next[j];
  size_t end = k < 0 ? len : (size_t)k;
  int r = df_tok_rank_of(t, p + i, end - (size_t)i);
  return r < 0 ? NO_RANK : r;
}

/* Long pre-tokens (long runs of spaces, unbroken CJK or Thai text): the same
 * merge order through a heap with lazy invalidation, O(n log n). */
static void bpe_large(const df_tok *t, const uint8_t *p, size_t len, df_tok_scratch *s,
                      df_tok_ids *o) {
  s->nheap = 0;
  for (size_t i = 0; i < len; i++) {
    s->next[i] = i + 1 < len ? (int32_t)(i + 1) : -1;
    s->prev[i] = (int32_t)i - 1;
    s->ver[i] = 0;
  }
  for (size_t i = 0; i + 1 < len; i++) {
    int32_t r = pair_rank(t, p, len, s, (int32_t)i);
    if (r != NO_RANK) heap_push(s, r, (uint32_t)i, 0);
  }
  while (s->nheap) {
    uint32_t i = (uint32_t)s->heap[0];
    uint32_t v = s->hver[0];
    heap_pop(s);
    if (v != s->ver[i]) continue; /* stale: the pair at i changed since */
    /* merge i with its successor j */
    int32_t j = s->next[i];
    int32_t k = s->next[j];
    s->next[i] = k;
    if (k >= 0) s->prev[k] = (int32_t)i;
    s->ver[j]++; /* j is gone: its entries are stale */
    s->ver[i]++;
    int32_t nr = pair_rank(t, p, len, s, (int32_t)i);
    if (nr != NO_RANK) heap_push(s, nr, i, s->ver[i]);
    int32_t h = s->prev[i];
    if (h >= 0) {
      s->ver[h]++;
      nr = pair_rank(t, p, len, s, h);
      if (nr != NO_RANK) heap_push(s, nr, (uint32_t)h, s->ver[h]);
    }
  }
  for (int32_t i = 0; i >= 0; i = s->next[i]) {
    size_t end = s->next[i] < 0 ? len : (size_t)s->next[i];
    df_tok_push_id(o, df_tok_rank_of(t, p + i, end - (size_t)i));
  }
}

#define BPE_SMALL_MAX 64

void df_tok_bpe_piece(const df_tok *t, const uint8_t *p, size_t len, df_tok_scratch *s,
                      df_tok_ids *o) {
  if (len == 0) return;
  if (len == 1) {
    df_tok_push_id(o, t->byte_rank[p[0]]);
    return;
  }
  int r = df_tok_rank_of(t, p, len);
  if (r >= 0) {
    df_tok_push_id(o, r);
    return;
  }
  scratch_grow(s, len + 1);
  if (len <= BPE_SMALL_MAX)
    bpe_small(t, p, len, s, o);
  else
    bpe_large(t, p, len, s, o);
}


/* The tiktoken rank file ("base64(bytes) rank" per line) and the bytes->rank
 * table: open addressing with linear probing on XXH3, high hash bits kept as a
 * tag to skip most memcmp calls. Lookups are df_tok_rank_of (tok_int.h). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "tokenizer/tok_int.h"

/* Inserts rank r; returns the rank already holding the same bytes, or -1. */
static int insert(df_tok *t, int r) {
  const uint8_t *p = t->arena + t->off[r];
  size_t n = t->off[r + 1] - t->off[r];
  uint64_t h = XXH3_64bits(p, n);
  uint32_t tag = (uint32_t)(h >> 32);
  size_t i = (size_t)h & t->mask;
  for (;; i = (i + 1) & t->mask) {
    int32_t q = t->slot[i];
    if (q < 0) break;
    if (t->slot_tag[i] == tag && t->off[q + 1] - t->off[q] == n &&
        !memcmp(t->arena + t->off[q], p, n))
      return q;
  }
  t->slot[i] = r;
  t->slot_tag[i] = tag;
  return -1;
}

static int b64val(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Strict base64 (standard alphabet, '=' padding only at the end, length a
 * multiple of 4). Returns the decoded length or -1. out needs n/4*3 bytes. */
static long b64_decode(const char *s, size_t n, uint8_t *out) {
  if (n == 0 || n % 4) return -1;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int v[4], pad = 0;
    for (int k = 0; k < 4; k++) {
      char c = s[i + k];
      if (c == '=' && i + 4 == n && k >= 2) {
        v[k] = 0;
        pad++;
        continue;
      }
      if (pad) return -1; /* data after '=' */
      v[k] = b64val((unsigned char)c);
      if (v[k] < 0) return -1;
    }
    uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    out[o++] = (uint8_t)(w >> 16);
    if (pad < 2) out[o++] = (uint8_t)(w >> 8);
    if (pad < 1) out[o++] = (uint8_t)w;
  }
  return (long)o;
}

int df_tok_ranks_load(df_tok *t, const char *path, df_err *e) {
  char *buf;
  size_t len;
  if (df_file_read(path, &buf, &len, e)) return -1;
  size_t nlines = 0;
  for (size_t i = 0; i < len; i++) nlines += buf[i] == '\n';
  nlines++;
  /* First pass: parse every line into (rank, bytes) in file order. */
  int32_t *rank_of_line = df_xmalloc(nlines * sizeof *rank_of_line);
  uint32_t *line_off = df_xmalloc((nlines + 1) * sizeof *line_off);
  uint8_t *tmp = df_xmalloc(len / 4 * 3 + 4);
  size_t n = 0, tmpn = 0, lineno = 0;
  int rc = -1;
  char *p = buf, *end = buf + len;
  while (p < end) {
    lineno++;
    char *nl = memchr(p, '\n', (size_t)(end - p));
    char *le = nl ? nl : end;
    char *next = nl ? nl + 1 : end;
    if (le > p && le[-1] == '\r') le--;
    if (le == p) { /* blank line: allowed only at the end */
      p = next;
      for (char *q = p; q < end; q++)
        if (*q != '\n' && *q != '\r') {
          df_err_set(e, "%s: line %zu: empty line", path, lineno);
          goto out;
        }
      continue;
    }
    char *sp = memchr(p, ' ', (size_t)(le - p));
    if (!sp) {
      df_err_set(e, "%s: line %zu: expected 'base64 rank'", path, lineno);
      goto out;
    }
    long got = b64_decode(p, (size_t)(sp - p), tmp + tmpn);
    if (got <= 0) {
      df_err_set(e, "%s: line %zu: invalid base64 token", path, lineno);
      goto out;
    }
    char *q = sp + 1;
    long long r = 0;
    if (q == le) {
      df_err_set(e, "%s: line %zu: missing rank", path, lineno);
      goto out;
    }
    for (; q < le; q++) {
      if (*q < '0' || *q > '9' || r > INT_MAX / 10) {
        df_err_set(e, "%s: line %zu: rank is not a non-negative integer", path, lineno);
        goto out;
      }
      r = r * 10 + (*q - '0');
    }
    if (r >= INT_MAX / 2) {
      df_err_set(e, "%s: line %zu: rank %lld is too large", path, lineno, r);
      goto out;
    }
    line_off[n] = (uint32_t)tmpn;
    rank_of_line[n] = (int32_t)r;
    tmpn += (size_t)got;
    n++;
    p = next;
  }
  line_off[n] = (uint32_t)tmpn;
  if (n == 0) {
    df_err_set(e, "%s: no ranks", path);
    goto out;
  }
  /* Ranks must be exactly 0..n-1: each below n and none repeated. */
  int32_t *line_of_rank = df_xmalloc(n * sizeof *line_of_rank);
  for (size_t i = 0; i < n; i++) line_of_rank[i] = -1;
  for (size_t i = 0; i < n; i++) {
    int32_t r = rank_of_line[i];
    if ((size_t)r >= n) {
      df_err_set(e, "%s: rank %d is out of range: ranks must be contiguous from 0 (%zu lines)",
                 path, r, n);
      free(line_of_rank);
      goto out;
    }
    if (line_of_rank[r] >= 0) {
      df_err_set(e, "%s: rank %d appears twice (lines %d and %zu)", path, r,
                 line_of_rank[r] + 1, i + 1);
      free(line_of_rank);
      goto out;
    }
    line_of_rank[r] = (int32_t)i;
  }
  /* Lay the arena out by rank. */
  t->n_ranks = (int)n;
  t->arena = df_xmalloc(tmpn ? tmpn : 1);
  t->off = df_xmalloc((n + 1) * sizeof *t->off);
  size_t o = 0;
  for (size_t r = 0; r < n; r++) {
    int32_t l = line_of_rank[r];
    uint32_t bl = line_off[l + 1] - line_off[l];
    t->off[r] = (uint32_t)o;
    memcpy(t->arena + o, tmp + line_off[l], bl);
    o += bl;
  }
  t->off[n] = (uint32_t)o;
  free(line_of_rank);
  size_t cap = 1024;
  while (cap < n * 2) cap <<= 1;
  t->mask = cap - 1;
  t->slot = df_xmalloc(cap * sizeof *t->slot);
  t->slot_tag = df_xmalloc(cap * sizeof *t->slot_tag);
  memset(t->slot, 0xff, cap * sizeof *t->slot);
  for (int r = 0; r < (int)n; r++) {
    int q = insert(t, r);
    if (q >= 0) {
      df_err_set(e, "%s: ranks %d and %d have the same bytes", path, q, r);
      goto out;
    }
  }
  for (int b = 0; b < 256; b++) {
    uint8_t c = (uint8_t)b;
    t->byte_rank[b] = df_tok_rank_of(t, &c, 1);
    if (t->byte_rank[b] < 0) {
      df_err_set(e, "%s: the single byte 0x%02x has no rank (byte-level BPE needs all 256)", path,
                 b);
      goto out;
    }
  }
  rc = 0;
out:
  free(rank_of_line);
  free(line_off);
  free(tmp);
  free(buf);
  return rc;
}

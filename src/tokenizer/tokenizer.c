/* tiktoken-style byte-level BPE (kimi-k3.md section 6).
 *
 * Ranks live in one byte arena indexed by rank; a bytes->rank open-addressing
 * table (XXH3) serves the merge loop. Text is validated as UTF-8 once, split
 * into pre-tokens by the PCRE2 form of the K3 pattern, and each pre-token is
 * merged with tiktoken's rule: repeatedly merge the adjacent pair whose
 * concatenation has the lowest rank (leftmost on ties); a pre-token that is
 * itself a rank is one token. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <limits.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/util.h"
#include "tokenizer/pyjson.h"

/* The K3 pre-tokenizer in PCRE2 10.42 syntax. The published pattern uses
 * class intersection ([...&&[^\p{Han}]]), which PCRE2 cannot parse; each
 * such class becomes a negative lookahead in front of the class. Han is the
 * Script property (sc:), not Script_Extensions, as in the Rust regex crate
 * that tiktoken uses: CJK punctuation (，。「」) is Common script and must
 * not join a Han run.
 *
 * White space is spelled out as the Unicode White_Space set instead of \s:
 * PCRE2's UCP \s is \p{Z} plus \h and \v, which adds U+180E (MONGOLIAN VOWEL
 * SEPARATOR, not White_Space since Unicode 6.3); Rust's \s is White_Space.
 * The oracle test exercises U+180E, U+0085 and U+200B. */
#define WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
           "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define NOT_HAN "(?!\\p{sc:Han})"
#define UPPERISH NOT_HAN "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define LOWERISH NOT_HAN "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define CONTRACTION "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
static const char k3_pattern[] =
    "\\p{sc:Han}+"
    "|[^\\r\\n\\p{L}\\p{N}]?(?:" UPPERISH ")*(?:" LOWERISH ")+" CONTRACTION
    "|[^\\r\\n\\p{L}\\p{N}]?(?:" UPPERISH ")+(?:" LOWERISH ")*" CONTRACTION
    "|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

const char *df_tok_k3_pattern(void) { return k3_pattern; }

typedef struct special {
  int id;
  char *text;
  size_t len;
} special;

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
  special *sp;
  int nsp;
  int *sp_by_id; /* id - n_ranks -> index in sp, or -1 */
  int sp_span;
  uint8_t sp_first[256]; /* bytes that start some special */
  pcre2_code *re;
  int jit;
};

/* Length of the UTF-8 sequence a lead byte starts (0: not a lead byte), and
 * the allowed range of the second byte (which rules out overlongs,
 * surrogates and code points above U+10FFFF). */
static int utf8_lead(uint8_t c, uint8_t *lo, uint8_t *hi) {
  *lo = 0x80, *hi = 0xBF;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) {
    if (c == 0xE0) *lo = 0xA0;
    if (c == 0xED) *hi = 0x9F;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (c == 0xF0) *lo = 0x90;
    if (c == 0xF4) *hi = 0x8F;
    return 4;
  }
  return 0;
}

/* ---- rank table ---- */

static inline uint64_t hash_bytes(const uint8_t *p, size_t n) { return XXH3_64bits(p, n); }

static inline int lookup(const df_tok *t, const uint8_t *p, size_t n) {
  uint64_t h = hash_bytes(p, n);
  uint32_t tag = (uint32_t)(h >> 32);
  for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
    int32_t r = t->slot[i];
    if (r < 0) return -1;
    if (t->slot_tag[i] == tag && t->off[r + 1] - t->off[r] == n &&
        !memcmp(t->arena + t->off[r], p, n))
      return r;
  }
}

/* Inserts rank r; returns the rank already holding the same bytes, or -1. */
static int insert(df_tok *t, int r) {
  const uint8_t *p = t->arena + t->off[r];
  size_t n = t->off[r + 1] - t->off[r];
  uint64_t h = hash_bytes(p, n);
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

static int load_ranks(df_tok *t, const char *path, df_err *e) {
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
    t->byte_rank[b] = lookup(t, &c, 1);
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

/* ---- specials ---- */

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

static int load_specials(df_tok *t, const char *path, df_err *e) {
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
    special *s = &t->sp[t->nsp++];
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
      special *s = &t->sp[t->nsp++];
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
    special *s = &t->sp[i];
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

/* ---- load ---- */

static int compile_pattern(df_tok *t, const char *pattern, df_err *e) {
  int err;
  PCRE2_SIZE at;
  t->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
                        &at, NULL);
  if (!t->re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return df_err_set(e, "pre-tokenizer pattern: offset %zu: %s", (size_t)at, (char *)msg);
  }
  /* JIT is an optimisation only; the interpreter gives the same matches. */
  t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
  return 0;
}

int df_tok_load_files(df_tok **out, const char *ranks_path, const char *tokcfg_path,
                      const char *pattern, df_err *e) {
  *out = NULL;
  df_tok *t = df_xcalloc(1, sizeof *t);
  if (load_ranks(t, ranks_path, e)) goto fail;
  t->vocab = t->n_ranks;
  if (tokcfg_path && load_specials(t, tokcfg_path, e)) goto fail;
  if (compile_pattern(t, pattern ? pattern : k3_pattern, e)) goto fail;
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

int df_tok_special_id(const df_tok *t, const char *text) {
  size_t n = strlen(text);
  for (int i = 0; i < t->nsp; i++)
    if (t->sp[i].len == n && !memcmp(t->sp[i].text, text, n)) return t->sp[i].id;
  return -1;
}

static const special *special_of(const df_tok *t, int id) {
  if (id < t->n_ranks || id >= t->n_ranks + t->sp_span) return NULL;
  int i = t->sp_by_id[id - t->n_ranks];
  return i < 0 ? NULL : &t->sp[i];
}

int df_tok_is_special(const df_tok *t, int id) { return special_of(t, id) != NULL; }

const uint8_t *df_tok_piece(const df_tok *t, int id, size_t *len) {
  if (id >= 0 && id < t->n_ranks) {
    *len = t->off[id + 1] - t->off[id];
    return t->arena + t->off[id];
  }
  const special *s = special_of(t, id);
  if (!s) {
    *len = 0;
    return NULL;
  }
  *len = s->len;
  return (const uint8_t *)s->text;
}

char *df_tok_escape_piece(const uint8_t *p, size_t len) {
  char *out = df_xmalloc(len * 10 + 3), *o = out;
  *o++ = '"';
  for (size_t i = 0; i < len;) {
    uint8_t c = p[i], lo, hi;
    int k = utf8_lead(c, &lo, &hi);
    if (k == 1) {
      if (c == '"' || c == '\\') o += sprintf(o, "\\%c", c);
      else if (c == '\n') o += sprintf(o, "\\n");
      else if (c == '\t') o += sprintf(o, "\\t");
      else if (c == '\r') o += sprintf(o, "\\r");
      else if (c < 0x20 || c == 0x7F) o += sprintf(o, "\\x%02x", c);
      else *o++ = (char)c;
      i++;
      continue;
    }
    int ok = k > 1 && i + (size_t)k <= len && p[i + 1] >= lo && p[i + 1] <= hi;
    for (int j = 2; ok && j < k; j++) ok = (p[i + j] & 0xC0) == 0x80;
    if (!ok) {
      o += sprintf(o, "\\x%02x", c);
      i++;
      continue;
    }
    uint32_t cp = c & (0xFF >> (k + 1));
    for (int j = 1; j < k; j++) cp = cp << 6 | (p[i + j] & 0x3F);
    if (cp < 0xA0 || cp == 0x2028 || cp == 0x2029) { /* C1 controls, line separators */
      o += sprintf(o, "\\u%04x", (unsigned)cp);
    } else {
      memcpy(o, p + i, (size_t)k);
      o += k;
    }
    i += (size_t)k;
  }
  *o++ = '"';
  *o = 0;
  return out;
}

/* ---- encode ---- */

typedef struct ids_out {
  int **ids;
  size_t *n, *cap;
} ids_out;

static inline void push_id(ids_out *o, int id) {
  if (*o->n == *o->cap) {
    *o->cap = *o->cap ? *o->cap * 2 : 64;
    *o->ids = df_xrealloc(*o->ids, *o->cap * sizeof **o->ids);
  }
  (*o->ids)[(*o->n)++] = id;
}

/* Scratch space reused across the pre-tokens of one call. */
typedef struct scratch {
  size_t cap;
  uint32_t *start; /* part start offsets (small path) */
  int32_t *rank;   /* rank of the pair starting at each part */
  /* large path: linked list over byte positions + binary heap */
  int32_t *next, *prev;
  uint32_t *ver;
  uint64_t *heap; /* (rank << 32 | position); version kept alongside */
  uint32_t *hver;
  size_t nheap;
} scratch;

static void scratch_grow(scratch *s, size_t n) {
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

static void scratch_free(scratch *s) {
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
static void bpe_small(const df_tok *t, const uint8_t *p, size_t len, scratch *s, ids_out *o) {
  uint32_t *st = s->start;
  int32_t *rk = s->rank;
  size_t np = len + 1; /* parts, the last one a sentinel at len */
  for (size_t i = 0; i < np; i++) st[i] = (uint32_t)i;
  for (size_t i = 0; i + 2 < np; i++) {
    int r = lookup(t, p + i, 2);
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
      int r = lookup(t, p + st[bi - 1], st[bi + 2] - st[bi - 1]);
      rk[bi - 1] = r < 0 ? NO_RANK : r;
    }
    if (bi + 3 < np) {
      int r = lookup(t, p + st[bi], st[bi + 3] - st[bi]);
      rk[bi] = r < 0 ? NO_RANK : r;
    } else {
      rk[bi] = NO_RANK;
    }
    memmove(st + bi + 1, st + bi + 2, (np - bi - 2) * sizeof *st);
    memmove(rk + bi + 1, rk + bi + 2, (np - bi - 2) * sizeof *rk);
    np--;
  }
  for (size_t i = 0; i + 1 < np; i++) push_id(o, lookup(t, p + st[i], st[i + 1] - st[i]));
}

static inline int heap_less(const scratch *s, size_t a, size_t b) { return s->heap[a] < s->heap[b]; }

static void heap_swap(scratch *s, size_t a, size_t b) {
  uint64_t k = s->heap[a];
  s->heap[a] = s->heap[b];
  s->heap[b] = k;
  uint32_t v = s->hver[a];
  s->hver[a] = s->hver[b];
  s->hver[b] = v;
}

static void heap_push(scratch *s, int32_t rank, uint32_t pos, uint32_t ver) {
  size_t i = s->nheap++;
  s->heap[i] = (uint64_t)(uint32_t)rank << 32 | pos;
  s->hver[i] = ver;
  while (i > 0 && heap_less(s, i, (i - 1) / 2)) {
    heap_swap(s, i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
}

static void heap_pop(scratch *s) {
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
static int32_t pair_rank(const df_tok *t, const uint8_t *p, size_t len, const scratch *s,
                         int32_t i) {
  int32_t j = s->next[i];
  if (j < 0) return NO_RANK;
  int32_t k = s->next[j];
  size_t end = k < 0 ? len : (size_t)k;
  int r = lookup(t, p + i, end - (size_t)i);
  return r < 0 ? NO_RANK : r;
}

/* Long pre-tokens (long runs of spaces, unbroken CJK or Thai text): the same
 * merge order through a heap with lazy invalidation, O(n log n). */
static void bpe_large(const df_tok *t, const uint8_t *p, size_t len, scratch *s, ids_out *o) {
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
    push_id(o, lookup(t, p + i, end - (size_t)i));
  }
}

#define BPE_SMALL_MAX 64

static void bpe_piece(const df_tok *t, const uint8_t *p, size_t len, scratch *s, ids_out *o) {
  if (len == 0) return;
  if (len == 1) {
    push_id(o, t->byte_rank[p[0]]);
    return;
  }
  int r = lookup(t, p, len);
  if (r >= 0) {
    push_id(o, r);
    return;
  }
  scratch_grow(s, len + 1);
  if (len <= BPE_SMALL_MAX)
    bpe_small(t, p, len, s, o);
  else
    bpe_large(t, p, len, s, o);
}

/* Splits valid UTF-8 text into pre-tokens and merges each. */
static int encode_ordinary(const df_tok *t, const uint8_t *text, size_t len, scratch *s,
                           ids_out *o, df_err *e) {
  if (len == 0) return 0;
  pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->re, NULL);
  pcre2_match_context *mc = NULL;
  pcre2_jit_stack *js = NULL;
  int rc = 0;
  size_t pos = 0;
  while (pos < len) {
    int m = pcre2_match(t->re, text, len, pos, PCRE2_NO_UTF_CHECK, md, mc);
    if ((m == PCRE2_ERROR_JIT_STACKLIMIT || m == PCRE2_ERROR_MATCHLIMIT ||
         m == PCRE2_ERROR_DEPTHLIMIT || m == PCRE2_ERROR_HEAPLIMIT) &&
        !mc) {
      /* A very long pre-token: lift the limits once and retry. */
      mc = pcre2_match_context_create(NULL);
      js = pcre2_jit_stack_create(64 * 1024, 256 * 1024 * 1024, NULL);
      if (!js || !mc) {
        rc = df_err_set(e, "pre-tokenizer: out of memory");
        break;
      }
      pcre2_jit_stack_assign(mc, NULL, js);
      pcre2_set_match_limit(mc, UINT32_MAX);
      pcre2_set_depth_limit(mc, UINT32_MAX);
      pcre2_set_heap_limit(mc, UINT32_MAX);
      continue;
    }
    if (m == PCRE2_ERROR_NOMATCH) { /* patterns that do not cover all text: keep the bytes */
      bpe_piece(t, text + pos, len - pos, s, o);
      break;
    }
    if (m < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(m, msg, sizeof msg);
      rc = df_err_set(e, "pre-tokenizer: match at byte %zu: %s", pos, (char *)msg);
      break;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t a = ov[0], b = ov[1];
    if (a > pos) bpe_piece(t, text + pos, a - pos, s, o); /* unmatched gap, see above */
    if (b == a) {                                         /* empty match: step one character */
      size_t c = a + 1;
      while (c < len && (text[c] & 0xC0) == 0x80) c++;
      bpe_piece(t, text + a, c - a, s, o);
      b = c;
    } else {
      bpe_piece(t, text + a, b - a, s, o);
    }
    pos = b;
  }
  pcre2_match_data_free(md);
  if (mc) pcre2_match_context_free(mc);
  if (js) pcre2_jit_stack_free(js);
  return rc;
}

/* The release's cut before BPE (tokenization_kimi.py encode): the text in
 * pieces of at most 400,000 characters, each piece cut again wherever a run of
 * white space or of non-white space (Python's str.isspace) would pass 25,000
 * characters; every piece is then encoded on its own. It changes ids only on
 * long inputs, and there it must be reproduced. Characters are code points. */
#define SPLIT_CHUNK 400000
#define SPLIT_RUN 25000

typedef int (*piece_fn)(const df_tok *t, const uint8_t *p, size_t n, scratch *s, ids_out *o,
                        df_err *e);

static size_t utf8_len(uint8_t c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

static uint32_t utf8_cp(const uint8_t *p) {
  switch (utf8_len(p[0])) {
    case 1: return p[0];
    case 2: return (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
    case 3: return (uint32_t)(p[0] & 0x0F) << 12 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    default:
      return (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3F) << 12 |
             (uint32_t)(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
  }
}

/* Valid UTF-8 in, fn called on each piece. */
static int presplit(const df_tok *t, const uint8_t *text, size_t len, piece_fn fn, scratch *s,
                    ids_out *o, df_err *e) {
  size_t pos = 0;
  if (len == 0) return 0;
  while (pos < len) {
    /* one chunk of at most SPLIT_CHUNK characters */
    size_t start = pos, chars = 0, run = 0;
    int run_space = df_py_isspace(utf8_cp(text + pos));
    while (pos < len && chars < SPLIT_CHUNK) {
      int sp = df_py_isspace(utf8_cp(text + pos));
      if (sp != run_space) {
        run = 1;
        run_space = sp;
      } else if (++run > SPLIT_RUN) {
        if (fn(t, text + start, pos - start, s, o, e)) return -1;
        start = pos;
        run = 1;
      }
      pos += utf8_len(text[pos]);
      chars++;
    }
    if (fn(t, text + start, pos - start, s, o, e)) return -1;
  }
  return 0;
}

int df_tok_encode(const df_tok *t, const char *text, size_t len, int **ids, size_t *n,
                  size_t *cap, df_err *e) {
  if (!df_utf8_valid(text, len)) return df_err_set(e, "tokenize: input is not valid UTF-8");
  ids_out o = {ids, n, cap};
  scratch s = {0};
  int rc = presplit(t, (const uint8_t *)text, len, encode_ordinary, &s, &o, e);
  scratch_free(&s);
  return rc;
}

/* Leftmost special at or after pos (the longest one if several start there). */
static const special *find_special(const df_tok *t, const uint8_t *p, size_t len, size_t pos,
                                   size_t *at) {
  for (size_t i = pos; i < len; i++) {
    if (!t->sp_first[p[i]]) continue;
    const special *best = NULL;
    for (int k = 0; k < t->nsp; k++) {
      const special *s = &t->sp[k];
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

/* One piece with its special-token spellings recognised (the release splits
 * first and recognises specials inside each piece). */
static int encode_specials_piece(const df_tok *t, const uint8_t *p, size_t len, scratch *s,
                                 ids_out *o, df_err *e) {
  int rc = 0;
  size_t pos = 0;
  while (pos < len && rc == 0) {
    size_t at;
    const special *sp = t->nsp ? find_special(t, p, len, pos, &at) : NULL;
    size_t stop = sp ? at : len;
    /* the text between specials stays valid UTF-8: specials are whole strings */
    rc = encode_ordinary(t, p + pos, stop - pos, s, o, e);
    if (!sp) break;
    push_id(o, sp->id);
    pos = at + sp->len;
  }
  return rc;
}

int df_tok_encode_with_specials(const df_tok *t, const char *text, size_t len, int **ids,
                                size_t *n, size_t *cap, df_err *e) {
  if (!df_utf8_valid(text, len)) return df_err_set(e, "tokenize: input is not valid UTF-8");
  ids_out o = {ids, n, cap};
  scratch s = {0};
  int rc = presplit(t, (const uint8_t *)text, len, encode_specials_piece, &s, &o, e);
  scratch_free(&s);
  return rc;
}

/* ---- decode ---- */

char *df_tok_decode(const df_tok *t, const int *ids, size_t n, size_t *len) {
  size_t total = 0, l;
  for (size_t i = 0; i < n; i++)
    if (df_tok_piece(t, ids[i], &l)) total += l;
  char *out = df_xmalloc(total + 1);
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    const uint8_t *pc = df_tok_piece(t, ids[i], &l);
    if (!pc) continue; /* unknown ids decode to nothing */
    memcpy(out + o, pc, l);
    o += l;
  }
  out[o] = 0;
  *len = o;
  return out;
}

void df_tok_stream_init(df_tok_stream *s, const df_tok *t) {
  s->tok = t;
  s->npend = 0;
}

/* Converts b[0..n) to valid UTF-8: complete characters are copied, every
 * maximal invalid subpart becomes U+FFFD. If hold, an incomplete but so far
 * valid sequence at the end is not emitted; its length goes to *held.
 * Writes to out when out != NULL; returns the output length. */
static size_t utf8_sanitize(const uint8_t *b, size_t n, int hold, uint8_t *out, size_t *held) {
  size_t i = 0, o = 0;
  *held = 0;
  while (i < n) {
    uint8_t lo, hi;
    int k = utf8_lead(b[i], &lo, &hi);
    if (k == 1) {
      if (out) out[o] = b[i];
      o++, i++;
      continue;
    }
    size_t j = i + 1;
    if (k > 0) {
      /* count the valid continuation bytes that follow */
      while (j < n && (int)(j - i) < k) {
        uint8_t c = b[j];
        if (j == i + 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80) break;
        j++;
      }
      if ((int)(j - i) == k) {
        if (out) memcpy(out + o, b + i, (size_t)k);
        o += (size_t)k, i = j;
        continue;
      }
      if (j == n && hold) { /* a valid prefix cut off by the end of the buffer */
        *held = n - i;
        return o;
      }
    }
    if (out) memcpy(out + o, "\xEF\xBF\xBD", 3);
    o += 3;
    i = j;
  }
  return o;
}

static int stream_emit(df_tok_stream *s, const uint8_t *piece, size_t plen, int hold, char *out,
                       size_t outcap) {
  /* the held bytes (at most 3) followed by the piece */
  uint8_t small[256];
  size_t n = (size_t)s->npend + plen;
  uint8_t *buf = n <= sizeof small ? small : df_xmalloc(n);
  memcpy(buf, s->pend, (size_t)s->npend);
  if (plen) memcpy(buf + s->npend, piece, plen);
  size_t held;
  size_t need = utf8_sanitize(buf, n, hold, NULL, &held);
  int rc;
  if (need > outcap || need > INT_MAX) {
    rc = -1; /* state unchanged: the caller may retry with a larger buffer */
  } else {
    utf8_sanitize(buf, n, hold, (uint8_t *)out, &held);
    memcpy(s->pend, buf + n - held, held);
    s->npend = (int)held;
    rc = (int)need;
  }
  if (buf != small) free(buf);
  return rc;
}

int df_tok_stream_push(df_tok_stream *s, int id, char *out, size_t outcap) {
  size_t l;
  const uint8_t *pc = df_tok_piece(s->tok, id, &l);
  if (!pc) return 0; /* unknown id: no text */
  return stream_emit(s, pc, l, 1, out, outcap);
}

int df_tok_stream_push_bytes(df_tok_stream *s, const uint8_t *p, size_t n, char *out,
                             size_t outcap) {
  return stream_emit(s, p, n, 1, out, outcap);
}

int df_tok_stream_flush(df_tok_stream *s, char *out, size_t outcap) {
  return stream_emit(s, NULL, 0, 0, out, outcap);
}

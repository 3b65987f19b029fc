/* Hugging Face byte-level BPE (see hf_bpe.h).
 *
 * The merge loop is not tok_bpe.c's: tiktoken merges the adjacent pair whose
 * concatenation has the lowest rank, while a tokenizer.json lists merges as
 * pairs, and only a listed pair may merge (the same bytes reached through
 * another split do not), in the order of the list. The two rules give
 * different ids on some inputs, so the HF rule is implemented as the file
 * defines it: a heap of (rank, position), lowest rank first, leftmost on ties,
 * an entry skipped when its pair is gone. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/hf_bpe.h"

#include <jansson.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include "base/util.h"

#define MAX_RE 4
#define MAX_VOCAB (1 << 22) /* 4M ids: far above any published vocabulary */

typedef struct hf_added {
  char *text;
  size_t len;
  int id, special;
} hf_added;

struct df_hftok {
  int vocab; /* max id + 1 */
  uint8_t *arena;
  size_t *off;     /* vocab + 1 offsets: the bytes of each id */
  uint8_t *known;  /* id is in the vocab or added */
  int32_t byte_id[256];
  /* merges: (left id, right id) -> (rank, merged id); open addressing */
  uint64_t *pkey;
  int32_t *prank, *pid;
  size_t pmask;
  /* bytes -> id, for ignore_merges (a piece that is itself a token) */
  int32_t *bslot;
  size_t bmask;
  hf_added *add;
  int nadd;
  uint8_t add_first[256];
  int nfc, ignore_merges;
  pcre2_code *re[MAX_RE];
  int nre;
};

/* ------------------------------------------------------- byte-level map */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes for U+0100 upwards, in byte order. */
static void byte_map(uint32_t fwd[256], int16_t inv[512]) {
  int n = 0;
  for (int i = 0; i < 512; i++) inv[i] = -1;
  for (int b = 0; b < 256; b++) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    fwd[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    inv[fwd[b]] = (int16_t)b;
  }
}

static size_t utf8_put(uint32_t c, char *o) {
  if (c < 0x80) return o[0] = (char)c, 1;
  if (c < 0x800) return o[0] = (char)(0xC0 | c >> 6), o[1] = (char)(0x80 | (c & 0x3F)), 2;
  o[0] = (char)(0xE0 | c >> 12);
  o[1] = (char)(0x80 | (c >> 6 & 0x3F));
  o[2] = (char)(0x80 | (c & 0x3F));
  return 3;
}

/* A vocab string (byte-level characters) to the bytes it stands for; -1 if
 * some character is not in the map. out has room for strlen(s) bytes. */
static long unmap(const int16_t inv[512], const char *s, uint8_t *out) {
  const uint8_t *p = (const uint8_t *)s;
  long n = 0;
  while (*p) {
    uint32_t c;
    if (p[0] < 0x80) c = *p++;
    else if ((p[0] & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80) {
      c = (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
      p += 2;
    } else
      return -1;
    if (c >= 512 || inv[c] < 0) return -1;
    out[n++] = (uint8_t)inv[c];
  }
  return n;
}

/* -------------------------------------------------------------- tables */

static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

static inline size_t pair_find(const df_hftok *t, int a, int b) {
  uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  for (size_t i = mix64(k) & t->pmask;; i = (i + 1) & t->pmask)
    if (t->pid[i] < 0 || t->pkey[i] == k) return i;
}

static uint64_t bytes_hash(const uint8_t *p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ULL;
  return mix64(h);
}

static int bytes_id(const df_hftok *t, const uint8_t *p, size_t n) {
  for (size_t i = bytes_hash(p, n) & t->bmask;; i = (i + 1) & t->bmask) {
    int32_t id = t->bslot[i];
    if (id < 0) return -1;
    if (t->off[id + 1] - t->off[id] == n && !memcmp(t->arena + t->off[id], p, n)) return id;
  }
}

static size_t pow2_above(size_t n) {
  size_t c = 16;
  while (c < 2 * n) c *= 2;
  return c;
}

/* --------------------------------------------------------------- regex */

/* White space as the Unicode White_Space set: the Rust and Oniguruma \s of
 * the tokenizers library; PCRE2's UCP \s adds U+180E. */
#define WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
           "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* The file's Oniguruma pattern in PCRE2 terms: \s and \S spelled out. */
static char *translate_pattern(const char *p) {
  size_t cap = strlen(p) * 8 + sizeof WS * 4 + 16, o = 0;
  char *out = df_xmalloc(cap);
  int in_class = 0;
  for (size_t i = 0; p[i]; i++) {
    if (o + 2 * sizeof WS + 8 > cap) out = df_xrealloc(out, cap *= 2);
    char c = p[i];
    if (c == '\\' && p[i + 1]) {
      char d = p[++i];
      if (d == 's') o += (size_t)sprintf(out + o, in_class ? "%s" : "[%s]", WS);
      else if (d == 'S' && !in_class) o += (size_t)sprintf(out + o, "[^%s]", WS);
      else out[o++] = c, out[o++] = d;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = 1;
      out[o++] = c;
      if (p[i + 1] == '^') out[o++] = p[++i];
      if (p[i + 1] == ']') out[o++] = p[++i]; /* a leading ] is a literal */
      continue;
    }
    if (c == ']' && in_class) in_class = 0;
    out[o++] = c;
  }
  out[o] = 0;
  return out;
}

static int add_regex(df_hftok *t, const char *pattern, const char *label, df_err *e) {
  if (t->nre == MAX_RE)
    return df_err_set(e, "%s: pre_tokenizer: more than %d regex splits", label, MAX_RE);
  char *pc = translate_pattern(pattern);
  int err;
  PCRE2_SIZE at;
  pcre2_code *re =
      pcre2_compile((PCRE2_SPTR)pc, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
  free(pc);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return df_err_set(e, "%s: pre_tokenizer Split pattern: %s", label, (char *)msg);
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* an optimisation only: same matches */
  t->re[t->nre++] = re;
  return 0;
}

#define GPT2_PATTERN \
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* ------------------------------------------------------------- parsing */

static int is_false_or_absent(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return !v || json_is_false(v) || json_is_null(v);
}

static int parse_pretok(df_hftok *t, json_t *pt, int *bytelevel, const char *label, df_err *e) {
  const char *ty = json_string_value(json_object_get(pt, "type"));
  if (!ty) return df_err_set(e, "%s: pre_tokenizer: missing 'type'", label);
  if (!strcmp(ty, "Sequence")) {
    json_t *arr = json_object_get(pt, "pretokenizers");
    if (!json_is_array(arr))
      return df_err_set(e, "%s: pre_tokenizer Sequence: 'pretokenizers' must be a list", label);
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) {
      if (!json_is_object(x))
        return df_err_set(e, "%s: pre_tokenizer Sequence: entry %zu is not an object", label, i);
      if (parse_pretok(t, x, bytelevel, label, e)) return -1;
    }
    return 0;
  }
  if (!strcmp(ty, "Split")) {
    json_t *pat = json_object_get(pt, "pattern");
    const char *rx = json_string_value(json_object_get(pat, "Regex"));
    const char *beh = json_string_value(json_object_get(pt, "behavior"));
    if (!rx)
      return df_err_set(e, "%s: pre_tokenizer Split: only {\"Regex\": ...} patterns are supported",
                        label);
    if (!beh || strcmp(beh, "Isolated"))
      return df_err_set(e, "%s: pre_tokenizer Split: behavior '%s' is not supported (Isolated)",
                        label, beh ? beh : "?");
    if (!is_false_or_absent(pt, "invert"))
      return df_err_set(e, "%s: pre_tokenizer Split: invert is not supported", label);
    return add_regex(t, rx, label, e);
  }
  if (!strcmp(ty, "ByteLevel")) {
    if (!is_false_or_absent(pt, "add_prefix_space"))
      return df_err_set(e, "%s: pre_tokenizer ByteLevel: add_prefix_space is not supported", label);
    *bytelevel = 1;
    json_t *ur = json_object_get(pt, "use_regex");
    if (!ur || json_is_true(ur)) return add_regex(t, GPT2_PATTERN, label, e);
    return 0;
  }
  return df_err_set(e, "%s: pre_tokenizer type '%s' is not supported", label, ty);
}

static int parse_model(df_hftok *t, json_t *model, const char *label, df_err *e) {
  const char *ty = json_string_value(json_object_get(model, "type"));
  if (!ty || strcmp(ty, "BPE"))
    return df_err_set(e, "%s: model.type '%s' is not supported (BPE)", label, ty ? ty : "missing");
  json_t *d = json_object_get(model, "dropout");
  if (d && !json_is_null(d) && !(json_is_number(d) && json_number_value(d) == 0))
    return df_err_set(e, "%s: model.dropout is not supported", label);
  const char *pre = json_string_value(json_object_get(model, "continuing_subword_prefix"));
  const char *suf = json_string_value(json_object_get(model, "end_of_word_suffix"));
  if ((pre && *pre) || (suf && *suf))
    return df_err_set(e, "%s: model: continuing_subword_prefix/end_of_word_suffix unsupported",
                      label);
  if (!is_false_or_absent(model, "byte_fallback"))
    return df_err_set(e, "%s: model.byte_fallback is not supported", label);
  t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
  json_t *vocab = json_object_get(model, "vocab");
  json_t *merges = json_object_get(model, "merges");
  if (!json_is_object(vocab)) return df_err_set(e, "%s: model.vocab must be an object", label);
  if (!json_is_array(merges)) return df_err_set(e, "%s: model.merges must be a list", label);
  /* ids, sizes */
  const char *k;
  json_t *v;
  int maxid = -1;
  json_object_foreach(vocab, k, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= MAX_VOCAB)
      return df_err_set(e, "%s: model.vocab['%.64s'] must be an id in [0, %d)", label, k,
                        MAX_VOCAB);
    if (json_integer_value(v) > maxid) maxid = (int)json_integer_value(v);
  }
  t->vocab = maxid + 1;
  return 0;
}

/* Fills ids' bytes once the vocab size (model and added tokens) is known. */
static int fill_vocab(df_hftok *t, json_t *vocab, const char *label, df_err *e) {
  uint32_t fwd[256];
  int16_t inv[512];
  byte_map(fwd, inv);
  size_t total = 0;
  const char *k;
  json_t *v;
  json_object_foreach(vocab, k, v) total += strlen(k);
  for (int i = 0; i < t->nadd; i++) total += t->add[i].len;
  t->arena = df_xmalloc(total + 1);
  size_t *len = df_xcalloc((size_t)t->vocab, sizeof *len);
  size_t *at = df_xcalloc((size_t)t->vocab, sizeof *at);
  t->known = df_xcalloc((size_t)t->vocab, 1);
  size_t o = 0;
  json_object_foreach(vocab, k, v) {
    int id = (int)json_integer_value(v);
    long n = unmap(inv, k, t->arena + o);
    if (n < 0) {
      free(len);
      free(at);
      return df_err_set(e, "%s: model.vocab token '%.64s' is not byte-level text", label, k);
    }
    if (t->known[id]) {
      free(len);
      free(at);
      return df_err_set(e, "%s: model.vocab: id %d is used twice", label, id);
    }
    t->known[id] = 1;
    at[id] = o;
    len[id] = (size_t)n;
    o += (size_t)n;
  }
  /* added tokens decode to their content, whether or not the vocab has them */
  for (int i = 0; i < t->nadd; i++) {
    memcpy(t->arena + o, t->add[i].text, t->add[i].len);
    at[t->add[i].id] = o;
    len[t->add[i].id] = t->add[i].len;
    t->known[t->add[i].id] = 1;
    o += t->add[i].len;
  }
  /* pack into offsets so each id's bytes are off[id]..off[id+1] */
  uint8_t *packed = df_xmalloc(o + 1);
  t->off = df_xmalloc(((size_t)t->vocab + 1) * sizeof *t->off);
  size_t q = 0;
  for (int id = 0; id < t->vocab; id++) {
    t->off[id] = q;
    memcpy(packed + q, t->arena + at[id], len[id]);
    q += len[id];
  }
  t->off[t->vocab] = q;
  free(t->arena);
  t->arena = packed;
  free(len);
  free(at);
  /* byte ids and the bytes -> id table (vocab entries only) */
  t->bmask = pow2_above((size_t)json_object_size(vocab)) - 1;
  t->bslot = df_xmalloc((t->bmask + 1) * sizeof *t->bslot);
  for (size_t i = 0; i <= t->bmask; i++) t->bslot[i] = -1;
  json_object_foreach(vocab, k, v) {
    int id = (int)json_integer_value(v);
    const uint8_t *p = t->arena + t->off[id];
    size_t n = t->off[id + 1] - t->off[id];
    int ok = 1;
    for (int i = 0; i < t->nadd; i++)
      if (t->add[i].id == id) ok = 0; /* content replaced the vocab bytes */
    if (!ok) continue;
    if (bytes_id(t, p, n) >= 0)
      return df_err_set(e, "%s: model.vocab: two tokens stand for the same bytes ('%.64s')", label,
                        k);
    size_t i = bytes_hash(p, n) & t->bmask;
    while (t->bslot[i] >= 0) i = (i + 1) & t->bmask;
    t->bslot[i] = id;
  }
  for (int b = 0; b < 256; b++) {
    char s[4];
    s[utf8_put(fwd[b], s)] = 0;
    json_t *id = json_object_get(vocab, s);
    t->byte_id[b] = id ? (int32_t)json_integer_value(id) : -1;
  }
  return 0;
}

static int fill_merges(df_hftok *t, json_t *vocab, json_t *merges, const char *label, df_err *e) {
  size_t n = json_array_size(merges);
  t->pmask = pow2_above(n) - 1;
  t->pkey = df_xmalloc((t->pmask + 1) * sizeof *t->pkey);
  t->prank = df_xmalloc((t->pmask + 1) * sizeof *t->prank);
  t->pid = df_xmalloc((t->pmask + 1) * sizeof *t->pid);
  for (size_t i = 0; i <= t->pmask; i++) t->pid[i] = -1;
  char *buf = NULL;
  size_t bcap = 0;
  int rc = 0;
  for (size_t r = 0; r < n && !rc; r++) {
    json_t *m = json_array_get(merges, r);
    const char *a, *b;
    size_t la, lb;
    char *sp = NULL;
    if (json_is_string(m)) {
      const char *s = json_string_value(m);
      sp = strchr(s, ' ');
      if (!sp || strchr(sp + 1, ' ') || sp == s || !sp[1]) {
        rc = df_err_set(e, "%s: model.merges[%zu] '%.64s' is not \"left right\"", label, r, s);
        break;
      }
      a = s, la = (size_t)(sp - s), b = sp + 1, lb = strlen(b);
    } else if (json_is_array(m) && json_array_size(m) == 2 &&
               json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
      a = json_string_value(json_array_get(m, 0)), la = strlen(a);
      b = json_string_value(json_array_get(m, 1)), lb = strlen(b);
    } else {
      rc = df_err_set(e, "%s: model.merges[%zu] must be \"a b\" or [a, b]", label, r);
      break;
    }
    if (la + lb + 2 > bcap) buf = df_xrealloc(buf, bcap = (la + lb + 2) * 2);
    memcpy(buf, a, la), buf[la] = 0;
    json_t *ia = json_object_get(vocab, buf);
    memcpy(buf, b, lb), buf[lb] = 0;
    json_t *ib = json_object_get(vocab, buf);
    memcpy(buf, a, la), memcpy(buf + la, b, lb), buf[la + lb] = 0;
    json_t *ic = json_object_get(vocab, buf);
    if (!ia || !ib || !ic) {
      rc = df_err_set(e, "%s: model.merges[%zu]: '%.64s' is not in the vocab", label, r,
                      !ia ? (memcpy(buf, a, la), buf[la] = 0, buf)
                          : !ib ? (memcpy(buf, b, lb), buf[lb] = 0, buf) : buf);
      break;
    }
    size_t i = pair_find(t, (int)json_integer_value(ia), (int)json_integer_value(ib));
    if (t->pid[i] >= 0) continue; /* a repeated merge keeps its first (lowest) rank */
    t->pkey[i] = (uint64_t)(uint32_t)json_integer_value(ia) << 32 |
                 (uint32_t)json_integer_value(ib);
    t->prank[i] = (int32_t)r;
    t->pid[i] = (int32_t)json_integer_value(ic);
  }
  free(buf);
  return rc;
}

static int parse_added(df_hftok *t, json_t *arr, const char *label, df_err *e) {
  if (!arr || json_is_null(arr)) return 0;
  if (!json_is_array(arr)) return df_err_set(e, "%s: added_tokens must be a list", label);
  t->add = df_xcalloc(json_array_size(arr) + 1, sizeof *t->add);
  size_t i;
  json_t *x;
  json_array_foreach(arr, i, x) {
    json_t *id = json_object_get(x, "id");
    const char *c = json_string_value(json_object_get(x, "content"));
    if (!json_is_integer(id) || json_integer_value(id) < 0 ||
        json_integer_value(id) >= MAX_VOCAB || !c || !*c)
      return df_err_set(e, "%s: added_tokens[%zu] needs an id in [0, %d) and a content", label, i,
                        MAX_VOCAB);
    if (!is_false_or_absent(x, "lstrip") || !is_false_or_absent(x, "rstrip") ||
        !is_false_or_absent(x, "single_word"))
      return df_err_set(e, "%s: added_tokens[%zu] '%.64s': lstrip/rstrip/single_word unsupported",
                        label, i, c);
    size_t len = strlen(c);
    if (!df_utf8_valid(c, len))
      return df_err_set(e, "%s: added_tokens[%zu]: content is not UTF-8", label, i);
    for (int j = 0; j < t->nadd; j++)
      if (t->add[j].id == (int)json_integer_value(id))
        return df_err_set(e, "%s: added_tokens[%zu]: id %d is added twice", label, i,
                          t->add[j].id);
    hf_added *a = &t->add[t->nadd++];
    a->text = df_xstrdup(c);
    a->len = len;
    a->id = (int)json_integer_value(id);
    a->special = json_is_true(json_object_get(x, "special"));
    t->add_first[(uint8_t)c[0]] = 1;
  }
  return 0;
}

int df_hftok_parse(df_hftok **out, const char *json, size_t len, const char *label, df_err *e) {
  *out = NULL;
  json_error_t je;
  json_t *root = json_loadb(json, len, 0, &je);
  if (!root) return df_err_set(e, "%s: %s (line %d)", label, je.text, je.line);
  df_hftok *t = df_xcalloc(1, sizeof *t);
  int rc = -1;
  if (!json_is_object(root)) {
    df_err_set(e, "%s: not a JSON object", label);
    goto out;
  }
  json_t *model = json_object_get(root, "model");
  if (!json_is_object(model)) {
    df_err_set(e, "%s: 'model' is missing", label);
    goto out;
  }
  if (parse_model(t, model, label, e)) goto out;
  if (parse_added(t, json_object_get(root, "added_tokens"), label, e)) goto out;
  for (int i = 0; i < t->nadd; i++)
    if (t->add[i].id >= t->vocab) t->vocab = t->add[i].id + 1;
  json_t *norm = json_object_get(root, "normalizer");
  if (norm && !json_is_null(norm)) {
    const char *ty = json_string_value(json_object_get(norm, "type"));
    if (!ty || strcmp(ty, "NFC")) {
      df_err_set(e, "%s: normalizer '%s' is not supported (none or NFC)", label, ty ? ty : "?");
      goto out;
    }
    t->nfc = 1;
  }
  json_t *pt = json_object_get(root, "pre_tokenizer");
  int bytelevel = 0;
  if (!json_is_object(pt) || parse_pretok(t, pt, &bytelevel, label, e)) {
    if (!json_is_object(pt)) df_err_set(e, "%s: pre_tokenizer is missing", label);
    goto out;
  }
  if (!bytelevel) {
    df_err_set(e, "%s: pre_tokenizer has no ByteLevel step: not a byte-level tokenizer", label);
    goto out;
  }
  json_t *dec = json_object_get(root, "decoder");
  const char *dty = json_string_value(json_object_get(dec, "type"));
  if (!dty || strcmp(dty, "ByteLevel")) {
    df_err_set(e, "%s: decoder '%s' is not supported (ByteLevel)", label, dty ? dty : "missing");
    goto out;
  }
  json_t *vocab = json_object_get(model, "vocab");
  if (fill_vocab(t, vocab, label, e) ||
      fill_merges(t, vocab, json_object_get(model, "merges"), label, e))
    goto out;
  rc = 0;
out:
  json_decref(root);
  if (rc) df_hftok_free(t);
  else *out = t;
  return rc;
}

int df_hftok_load_file(df_hftok **out, const char *path, df_err *e) {
  char *buf;
  size_t len;
  *out = NULL;
  if (df_file_read(path, &buf, &len, e)) return -1;
  int rc = df_hftok_parse(out, buf, len, path, e);
  free(buf);
  return rc;
}

int df_hftok_load(df_hftok **out, const char *dir, df_err *e) {
  char *p = df_path_join(dir, "tokenizer.json");
  int rc = df_hftok_load_file(out, p, e);
  free(p);
  return rc;
}

void df_hftok_free(df_hftok *t) {
  if (!t) return;
  free(t->arena);
  free(t->off);
  free(t->known);
  free(t->pkey);
  free(t->prank);
  free(t->pid);
  free(t->bslot);
  for (int i = 0; i < t->nadd; i++) free(t->add[i].text);
  free(t->add);
  for (int i = 0; i < t->nre; i++) pcre2_code_free(t->re[i]);
  free(t);
}

int df_hftok_vocab_size(const df_hftok *t) { return t->vocab; }

int df_hftok_added_id(const df_hftok *t, const char *content) {
  for (int i = 0; i < t->nadd; i++)
    if (!strcmp(t->add[i].text, content)) return t->add[i].id;
  return -1;
}

int df_hftok_is_special(const df_hftok *t, int id) {
  for (int i = 0; i < t->nadd; i++)
    if (t->add[i].id == id) return t->add[i].special;
  return 0;
}

const uint8_t *df_hftok_piece(const df_hftok *t, int id, size_t *len) {
  if (id < 0 || id >= t->vocab || !t->known[id]) return NULL;
  *len = t->off[id + 1] - t->off[id];
  return t->arena + t->off[id];
}

char *df_hftok_decode(const df_hftok *t, const int *ids, size_t n, size_t *len) {
  size_t total = 0, l;
  for (size_t i = 0; i < n; i++)
    if (df_hftok_piece(t, ids[i], &l)) total += l;
  char *out = df_xmalloc(total + 1), *o = out;
  for (size_t i = 0; i < n; i++) {
    const uint8_t *p = df_hftok_piece(t, ids[i], &l);
    if (p) memcpy(o, p, l), o += l;
  }
  *o = 0;
  if (len) *len = total;
  return out;
}

/* --------------------------------------------------------------- encode */

typedef struct enc {
  const df_hftok *t;
  int **ids;
  size_t *n, *cap;
  /* one pre-token's symbols */
  int32_t *sym, *next, *prev;
  uint64_t *heap;
  size_t scap, nheap;
  pcre2_match_data *md;
  pcre2_match_context *mc;
  pcre2_jit_stack *js;
  df_err *e;
} enc;

static void push_id(enc *x, int id) {
  if (*x->n == *x->cap) {
    *x->cap = *x->cap ? *x->cap * 2 : 64;
    *x->ids = df_xrealloc(*x->ids, *x->cap * sizeof **x->ids);
  }
  (*x->ids)[(*x->n)++] = id;
}

static void heap_push(enc *x, uint64_t k) {
  size_t i = x->nheap++;
  x->heap[i] = k;
  while (i && x->heap[(i - 1) / 2] > x->heap[i]) {
    uint64_t tmp = x->heap[i];
    x->heap[i] = x->heap[(i - 1) / 2];
    x->heap[(i - 1) / 2] = tmp;
    i = (i - 1) / 2;
  }
}

static uint64_t heap_pop(enc *x) {
  uint64_t top = x->heap[0];
  x->heap[0] = x->heap[--x->nheap];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < x->nheap && x->heap[l] < x->heap[m]) m = l;
    if (r < x->nheap && x->heap[r] < x->heap[m]) m = r;
    if (m == i) break;
    uint64_t tmp = x->heap[i];
    x->heap[i] = x->heap[m];
    x->heap[m] = tmp;
    i = m;
  }
  return top;
}

/* Pushes the merge of the symbol at i with its successor, if the file has it. */
static void push_pair(enc *x, int32_t i) {
  if (i < 0 || x->next[i] < 0) return;
  size_t s = pair_find(x->t, x->sym[i], x->sym[x->next[i]]);
  if (x->t->pid[s] >= 0) heap_push(x, (uint64_t)(uint32_t)x->t->prank[s] << 32 | (uint32_t)i);
}

static void bpe(enc *x, const uint8_t *p, size_t n) {
  const df_hftok *t = x->t;
  if (!n) return;
  if (t->ignore_merges) {
    int id = bytes_id(t, p, n);
    if (id >= 0) {
      push_id(x, id);
      return;
    }
  }
  if (n + 1 > x->scap) {
    x->scap = (n + 1) * 2;
    x->sym = df_xrealloc(x->sym, x->scap * sizeof *x->sym);
    x->next = df_xrealloc(x->next, x->scap * sizeof *x->next);
    x->prev = df_xrealloc(x->prev, x->scap * sizeof *x->prev);
    /* each merge pushes at most two entries on top of the initial n */
    x->heap = df_xrealloc(x->heap, 3 * x->scap * sizeof *x->heap);
  }
  /* symbols are the bytes the vocab knows (the library drops the others
   * when there is no unk token); positions index the kept symbols */
  int32_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (t->byte_id[p[i]] >= 0) x->sym[m++] = t->byte_id[p[i]];
  if (!m) return;
  for (int32_t i = 0; i < m; i++) x->next[i] = i + 1 < m ? i + 1 : -1, x->prev[i] = i - 1;
  x->nheap = 0;
  for (int32_t i = 0; i + 1 < m; i++) push_pair(x, i);
  while (x->nheap) {
    uint64_t top = heap_pop(x);
    int32_t i = (int32_t)(uint32_t)top, rank = (int32_t)(top >> 32);
    if (x->sym[i] < 0 || x->next[i] < 0) continue;
    int32_t j = x->next[i];
    size_t s = pair_find(t, x->sym[i], x->sym[j]);
    if (t->pid[s] < 0 || t->prank[s] != rank) continue; /* the pair changed since */
    x->sym[i] = t->pid[s];
    x->sym[j] = -1;
    x->next[i] = x->next[j];
    if (x->next[j] >= 0) x->prev[x->next[j]] = i;
    push_pair(x, x->prev[i]);
    push_pair(x, i);
  }
  for (int32_t i = 0; i >= 0; i = x->next[i]) push_id(x, x->sym[i]);
}

/* Splits p by regex level lv (matches and the gaps between them are pieces,
 * "Isolated"), then each piece by the next level; the last level's pieces
 * go to BPE. */
static int split(enc *x, int lv, const uint8_t *p, size_t n) {
  if (lv == x->t->nre) {
    bpe(x, p, n);
    return 0;
  }
  const pcre2_code *re = x->t->re[lv];
  size_t pos = 0, prev = 0;
  while (pos < n) {
    int r = pcre2_match(re, p, n, pos, PCRE2_NO_UTF_CHECK, x->md, x->mc);
    if ((r == PCRE2_ERROR_JIT_STACKLIMIT || r == PCRE2_ERROR_MATCHLIMIT ||
         r == PCRE2_ERROR_DEPTHLIMIT || r == PCRE2_ERROR_HEAPLIMIT) &&
        !x->mc) {
      /* a very long pre-token: lift the limits once and retry */
      x->mc = pcre2_match_context_create(NULL);
      x->js = pcre2_jit_stack_create(64 * 1024, 256 * 1024 * 1024, NULL);
      if (!x->mc || !x->js) return df_err_set(x->e, "tokenizer: out of memory");
      pcre2_jit_stack_assign(x->mc, NULL, x->js);
      pcre2_set_match_limit(x->mc, UINT32_MAX);
      pcre2_set_depth_limit(x->mc, UINT32_MAX);
      pcre2_set_heap_limit(x->mc, UINT32_MAX);
      continue;
    }
    if (r == PCRE2_ERROR_NOMATCH) break;
    if (r < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(r, msg, sizeof msg);
      return df_err_set(x->e, "tokenizer: regex at byte %zu: %s", pos, (char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(x->md);
    size_t a = ov[0], b = ov[1];
    if (b == a) { /* an empty match splits nothing: step one character */
      pos = a + 1;
      while (pos < n && (p[pos] & 0xC0) == 0x80) pos++;
      continue;
    }
    if (a > prev && split(x, lv + 1, p + prev, a - prev)) return -1;
    if (split(x, lv + 1, p + a, b - a)) return -1;
    prev = pos = b;
  }
  if (n > prev) return split(x, lv + 1, p + prev, n - prev);
  return 0;
}

/* NFC through ICU (UTF-16 in between); ASCII is already NFC. */
static int nfc(const uint8_t *p, size_t n, char **out, size_t *olen, df_err *e) {
  size_t i = 0;
  while (i < n && p[i] < 0x80) i++;
  if (i == n) {
    *out = NULL;
    return 0;
  }
  UErrorCode st = U_ZERO_ERROR;
  const UNormalizer2 *nf = unorm2_getNFCInstance(&st);
  if (U_FAILURE(st)) return df_err_set(e, "tokenizer: NFC: %s", u_errorName(st));
  int32_t ulen = 0;
  if (n > INT32_MAX / 4) return df_err_set(e, "tokenizer: text too long for NFC");
  UChar *u = df_xmalloc((n + 1) * sizeof *u);
  u_strFromUTF8(u, (int32_t)n + 1, &ulen, (const char *)p, (int32_t)n, &st);
  if (U_FAILURE(st)) {
    free(u);
    return df_err_set(e, "tokenizer: NFC: %s", u_errorName(st));
  }
  int32_t cap = ulen * 3 + 16;
  UChar *v = df_xmalloc((size_t)cap * sizeof *v);
  int32_t vlen = unorm2_normalize(nf, u, ulen, v, cap, &st);
  free(u);
  if (U_FAILURE(st)) {
    free(v);
    return df_err_set(e, "tokenizer: NFC: %s", u_errorName(st));
  }
  int32_t blen = 0;
  char *b = df_xmalloc((size_t)vlen * 3 + 1);
  u_strToUTF8(b, vlen * 3 + 1, &blen, v, vlen, &st);
  free(v);
  if (U_FAILURE(st)) {
    free(b);
    return df_err_set(e, "tokenizer: NFC: %s", u_errorName(st));
  }
  *out = b;
  *olen = (size_t)blen;
  return 0;
}

static int segment(enc *x, const uint8_t *p, size_t n) {
  if (!n) return 0;
  char *norm = NULL;
  size_t nl = 0;
  if (x->t->nfc && nfc(p, n, &norm, &nl, x->e)) return -1;
  int rc = norm ? split(x, 0, (const uint8_t *)norm, nl) : split(x, 0, p, n);
  free(norm);
  return rc;
}

/* The added token at p[pos..], longest first; -1 if none. */
static int added_at(const df_hftok *t, const uint8_t *p, size_t n, size_t pos) {
  int best = -1;
  size_t bl = 0;
  if (!t->add_first[p[pos]]) return -1;
  for (int i = 0; i < t->nadd; i++) {
    const hf_added *a = &t->add[i];
    if (a->len > bl && a->len <= n - pos && !memcmp(p + pos, a->text, a->len)) best = i, bl = a->len;
  }
  return best;
}

int df_hftok_encode(const df_hftok *t, const char *text, size_t len, int added, int **ids,
                    size_t *n, size_t *cap, df_err *e) {
  if (!df_utf8_valid(text, len)) return df_err_set(e, "tokenizer: input is not valid UTF-8");
  enc x = {.t = t, .ids = ids, .n = n, .cap = cap, .e = e};
  if (t->nre) x.md = pcre2_match_data_create_from_pattern(t->re[0], NULL);
  const uint8_t *p = (const uint8_t *)text;
  size_t start = 0, pos = 0;
  int rc = 0;
  if (added && t->nadd) {
    while (pos < len && !rc) {
      int a = added_at(t, p, len, pos);
      if (a < 0) {
        pos++;
        continue;
      }
      rc = segment(&x, p + start, pos - start);
      push_id(&x, t->add[a].id);
      pos += t->add[a].len;
      start = pos;
    }
  }
  if (!rc) rc = segment(&x, p + start, len - start);
  free(x.sym);
  free(x.next);
  free(x.prev);
  free(x.heap);
  if (x.md) pcre2_match_data_free(x.md);
  if (x.mc) pcre2_match_context_free(x.mc);
  if (x.js) pcre2_jit_stack_free(x.js);
  return rc;
}

/* The pre-tokenizer (the K3 pattern through PCRE2) and the release's
 * pre-split that comes before it. */
#include <stdlib.h>

#include "base/util.h"
#include "tokenizer/pyjson.h"
#include "tokenizer/tok_int.h"

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

int df_tok_pattern_compile(df_tok *t, const char *pattern, df_err *e) {
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

int df_tok_pretok_encode(const df_tok *t, const uint8_t *text, size_t len, df_tok_scratch *s,
                         df_tok_ids *o, df_err *e) {
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
      df_tok_bpe_piece(t, text + pos, len - pos, s, o);
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
    if (a > pos) df_tok_bpe_piece(t, text + pos, a - pos, s, o); /* unmatched gap, see above */
    if (b == a) {                                         /* empty match: step one character */
      size_t c = a + 1;
      while (c < len && (text[c] & 0xC0) == 0x80) c++;
      df_tok_bpe_piece(t, text + a, c - a, s, o);
      b = c;
    } else {
      df_tok_bpe_piece(t, text + a, b - a, s, o);
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
int df_tok_presplit(const df_tok *t, const uint8_t *text, size_t len, df_tok_piece_fn fn,
                    df_tok_scratch *s, df_tok_ids *o, df_err *e) {
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

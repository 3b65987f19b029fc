/* Ids back to bytes: whole decodes, UTF-8-safe streaming (an incomplete
 * character is held back, invalid bytes become U+FFFD) and the escaped form
 * of a piece for display. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "tokenizer/tokenizer.h"

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

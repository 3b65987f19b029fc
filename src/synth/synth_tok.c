/* The synthetic tokenizer: a small byte-level BPE learned from df_synth_corpus,
 * written as tiktoken.model + tokenizer_config.json in the K3 layout. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "synth/synth.h"

static int is_letter(uint8_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static int is_space(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
static int is_nl(uint8_t c) { return c == '\n' || c == '\r'; }

/* An ASCII approximation of the K3 pre-tokenizer (kimi-k3.md section 6); it
 * only shapes which merges are learned, never how text is encoded. Returns the
 * end of the pre-token starting at i. */
static size_t pretok_end(const uint8_t *s, size_t n, size_t i) {
  size_t j = i;
  if (!is_letter(s[j]) && !is_digit(s[j]) && !is_nl(s[j])) j++;
  if (j < n && is_letter(s[j])) {
    while (j < n && is_letter(s[j])) j++;
    if (j + 1 < n && s[j] == '\'') {
      uint8_t a = (uint8_t)(s[j + 1] | 0x20), b = j + 2 < n ? (uint8_t)(s[j + 2] | 0x20) : 0;
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) j += 3;
      else if (a == 's' || a == 't' || a == 'm' || a == 'd') j += 2;
    }
    return j;
  }
  if (is_digit(s[i])) {
    j = i;
    while (j < n && j - i < 3 && is_digit(s[j])) j++;
    return j;
  }
  j = i;
  if (s[j] == ' ') j++;
  if (j < n && !is_space(s[j]) && !is_letter(s[j]) && !is_digit(s[j])) {
    while (j < n && !is_space(s[j]) && !is_letter(s[j]) && !is_digit(s[j])) j++;
    while (j < n && is_nl(s[j])) j++;
    return j;
  }
  size_t k = i;
  while (k < n && is_space(s[k])) k++;
  size_t last_nl = 0;
  for (size_t t = i; t < k; t++)
    if (is_nl(s[t])) last_nl = t + 1;
  if (last_nl) return last_nl;
  if (k < n && k - i >= 2) return k - 1;
  return k;
}

typedef struct word {
  int *sym;
  int n;
  int count;
} word;

static int cmp_span(const void *a, const void *b, const uint8_t *base) {
  const size_t *x = a, *y = b;
  size_t lx = x[1] - x[0], ly = y[1] - y[0];
  int c = memcmp(base + x[0], base + y[0], lx < ly ? lx : ly);
  if (c) return c;
  return lx < ly ? -1 : lx > ly;
}
static const uint8_t *g_sort_base;
static int cmp_span_q(const void *a, const void *b) { return cmp_span(a, b, g_sort_base); }

void df_synth_vocab_build(df_synth_vocab *v) {
  const uint8_t *s = (const uint8_t *)df_synth_corpus;
  size_t n = strlen(df_synth_corpus);
  /* pre-tokens as [begin, end) spans, sorted and counted */
  size_t cap = 1024, np = 0;
  size_t *sp = df_xmalloc(cap * 2 * sizeof *sp);
  for (size_t i = 0; i < n;) {
    size_t j = pretok_end(s, n, i);
    if (np == cap) {
      cap *= 2;
      sp = df_xrealloc(sp, cap * 2 * sizeof *sp);
    }
    sp[2 * np] = i;
    sp[2 * np + 1] = j;
    np++;
    i = j;
  }
  g_sort_base = s;
  qsort(sp, np, 2 * sizeof *sp, cmp_span_q);
  word *w = df_xcalloc(np, sizeof *w);
  int nw = 0;
  for (size_t i = 0; i < np; i++) {
    if (nw && !cmp_span(&sp[2 * i], &sp[2 * (i - 1)], s)) {
      w[nw - 1].count++;
      continue;
    }
    size_t len = sp[2 * i + 1] - sp[2 * i];
    w[nw].sym = df_xmalloc(len * sizeof(int));
    for (size_t k = 0; k < len; k++) w[nw].sym[k] = s[sp[2 * i] + k];
    w[nw].n = (int)len;
    w[nw].count = 1;
    nw++;
  }
  free(sp);

  const int maxtok = 256 + DF_SYNTH_MERGES;
  v->bytes = df_xcalloc((size_t)maxtok, sizeof *v->bytes);
  v->len = df_xcalloc((size_t)maxtok, sizeof *v->len);
  for (int b = 0; b < 256; b++) {
    v->bytes[b] = df_xmalloc(1);
    v->bytes[b][0] = (uint8_t)b;
    v->len[b] = 1;
  }
  v->n = 256;
  int *cnt = df_xcalloc((size_t)maxtok * (size_t)maxtok, sizeof *cnt);
  while (v->n < maxtok) {
    for (int i = 0; i < nw; i++)
      for (int k = 0; k + 1 < w[i].n; k++) cnt[w[i].sym[k] * maxtok + w[i].sym[k + 1]] += w[i].count;
    /* most frequent pair; ties go to the lowest (left, right) ids */
    int best = -1, bc = 0;
    for (int i = 0; i < nw; i++)
      for (int k = 0; k + 1 < w[i].n; k++) {
        int key = w[i].sym[k] * maxtok + w[i].sym[k + 1];
        if (cnt[key] > bc || (cnt[key] == bc && key < best)) {
          bc = cnt[key];
          best = key;
        }
      }
    for (int i = 0; i < nw; i++)
      for (int k = 0; k + 1 < w[i].n; k++) cnt[w[i].sym[k] * maxtok + w[i].sym[k + 1]] = 0;
    if (best < 0) break;
    int a = best / maxtok, b = best % maxtok;
    int len = v->len[a] + v->len[b];
    uint8_t *nb = df_xmalloc((size_t)len);
    memcpy(nb, v->bytes[a], (size_t)v->len[a]);
    memcpy(nb + v->len[a], v->bytes[b], (size_t)v->len[b]);
    int id = -1;
    for (int t = 256; t < v->n; t++)
      if (v->len[t] == len && !memcmp(v->bytes[t], nb, (size_t)len)) id = t;
    if (id < 0) {
      id = v->n++;
      v->bytes[id] = nb;
      v->len[id] = len;
    } else {
      free(nb);
    }
    for (int i = 0; i < nw; i++) {
      int o = 0;
      for (int k = 0; k < w[i].n; k++) {
        if (k + 1 < w[i].n && w[i].sym[k] == a && w[i].sym[k + 1] == b) {
          w[i].sym[o++] = id;
          k++;
        } else {
          w[i].sym[o++] = w[i].sym[k];
        }
      }
      w[i].n = o;
    }
  }
  free(cnt);
  for (int i = 0; i < nw; i++) free(w[i].sym);
  free(w);
}

void df_synth_vocab_free(df_synth_vocab *v) {
  for (int i = 0; i < v->n; i++) free(v->bytes[i]);
  free(v->bytes);
  free(v->len);
  memset(v, 0, sizeof *v);
}

void df_synth_special_name(int offset, int n_ranks, char *buf, size_t cap) {
  const char *fixed = NULL;
  switch (offset) {
    case 0: fixed = "[BOS]"; break;
    case 1: fixed = "[EOS]"; break;
    case 2: fixed = "<|end_of_msg|>"; break;
    case 3: fixed = "<|open|>"; break;
    case 4: fixed = "<|close|>"; break;
    case 5: fixed = "<|sep|>"; break;
    case 6: fixed = "[start_header_id]"; break;
    case 7: fixed = "[end_header_id]"; break;
    case 9: fixed = "[EOT]"; break;
    case 65: fixed = "<osagent_mode>"; break;
    case 18: fixed = "<|media_begin|>"; break;
    case 19: fixed = "<|media_content|>"; break;
    case 20: fixed = "<|media_end|>"; break;
    case 21: fixed = "<|media_pad|>"; break;
    case 254: fixed = "[UNK]"; break;
    case 255: fixed = "[PAD]"; break;
    default: break;
  }
  if (fixed) snprintf(buf, cap, "%s", fixed);
  else snprintf(buf, cap, "<|reserved_token_%d|>", n_ranks + offset);
}

static size_t b64(const uint8_t *in, size_t n, char *out) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t x = (uint32_t)in[i] << 16;
    if (i + 1 < n) x |= (uint32_t)in[i + 1] << 8;
    if (i + 2 < n) x |= in[i + 2];
    out[o++] = tab[(x >> 18) & 63];
    out[o++] = tab[(x >> 12) & 63];
    out[o++] = i + 1 < n ? tab[(x >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? tab[x & 63] : '=';
  }
  out[o] = 0;
  return o;
}

int df_synth_write_tokenizer(const char *dir, const df_synth_vocab *v, df_err *e) {
  size_t cap = 4096, len = 0;
  char *txt = df_xmalloc(cap);
  for (int r = 0; r < v->n; r++) {
    size_t need = (size_t)v->len[r] * 4 / 3 + 32;
    if (len + need >= cap) {
      while (len + need >= cap) cap *= 2;
      txt = df_xrealloc(txt, cap);
    }
    len += b64(v->bytes[r], (size_t)v->len[r], txt + len);
    len += (size_t)snprintf(txt + len, cap - len, " %d\n", r);
  }
  char *path = df_path_join(dir, "tiktoken.model");
  int rc = df_file_write_atomic(path, txt, len, e);
  free(path);
  free(txt);
  if (rc) return -1;

  json_t *root = json_object();
  json_t *dec = json_object();
  char name[64], id[32];
  /* Like the release: only the 16 named specials are listed; a TikTokenTokenizer
   * names the other 240 of the 256 ids <|reserved_token_ID|> by position. */
  for (int k = 0; k < 256; k++) {
    df_synth_special_name(k, v->n, name, sizeof name);
    if (!strncmp(name, "<|reserved_token_", 17)) continue;
    snprintf(id, sizeof id, "%d", v->n + k);
    json_t *t = json_object();
    json_object_set_new(t, "content", json_string(name));
    json_object_set_new(t, "lstrip", json_false());
    json_object_set_new(t, "normalized", json_false());
    json_object_set_new(t, "rstrip", json_false());
    json_object_set_new(t, "single_word", json_false());
    json_object_set_new(t, "special", json_true());
    json_object_set_new(dec, id, t);
  }
  json_object_set_new(root, "added_tokens_decoder", dec);
  json_object_set_new(root, "bos_token", json_string("[BOS]"));
  json_object_set_new(root, "eos_token", json_string("<|end_of_msg|>"));
  json_object_set_new(root, "pad_token", json_string("[PAD]"));
  json_object_set_new(root, "unk_token", json_string("[UNK]"));
  json_object_set_new(root, "clean_up_tokenization_spaces", json_false());
  json_object_set_new(root, "model_max_length", json_integer(1048576));
  json_object_set_new(root, "tokenizer_class", json_string("TikTokenTokenizer"));
  char *s = json_dumps(root, JSON_INDENT(2));
  json_decref(root);
  path = df_path_join(dir, "tokenizer_config.json");
  size_t sl = strlen(s);
  s = df_xrealloc(s, sl + 2);
  s[sl] = '\n';
  rc = df_file_write_atomic(path, s, sl + 1, e);
  free(path);
  free(s);
  return rc;
}

/* tiktoken-style byte-level BPE for the K3 family: ranks from tiktoken.model
 * ("base64(bytes) rank" per line), specials from tokenizer_config.json
 * (added_tokens_decoder, ids after the last rank), the K3 pre-tokenizer
 * pattern through PCRE2 (kimi-k3.md section 6). */
#ifndef DF_TOKENIZER_TOKENIZER_H
#define DF_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct df_tok df_tok;

/* Special ids a TikTokenTokenizer (Kimi's tokenization_kimi.py) reserves right
 * after the ranks: when tokenizer_config.json names that class, its
 * added_tokens_decoder may list only some of them (the release lists 16 of
 * 256) and every other id is <|reserved_token_ID|>, ID the token's id. */
#define DF_TOK_RESERVED 256

/* Loads dir/tiktoken.model and dir/tokenizer_config.json. */
int df_tok_load(df_tok **out, const char *dir, df_err *e);
/* Loads from explicit files; pattern NULL = the K3 pattern (else a PCRE2
 * pattern, compiled with UTF and UCP). tokcfg_path may be NULL (no specials).
 * Used by tests with the o200k/cl100k rank files.
 * The rank file must hold ranks 0..N-1, each once, distinct byte strings,
 * and every single byte; every added token in tokenizer_config.json is a
 * special with an id >= N. A loaded df_tok is read-only: threads may share it. */
int df_tok_load_files(df_tok **out, const char *ranks_path, const char *tokcfg_path,
                      const char *pattern, df_err *e);
void df_tok_free(df_tok *t);
/* The K3 pre-tokenizer pattern in PCRE2 syntax (the default of df_tok_load*). */
const char *df_tok_k3_pattern(void);

int df_tok_vocab_size(const df_tok *t); /* ranks + specials */
int df_tok_n_ranks(const df_tok *t);
/* Special token id by its text ("<|open|>"), or -1. */
int df_tok_special_id(const df_tok *t, const char *text);
int df_tok_is_special(const df_tok *t, int id);
/* The bytes of a token (specials: their text); NULL for an unknown id. */
const uint8_t *df_tok_piece(const df_tok *t, int id, size_t *len);

/* A token's bytes as a quoted, printable string for display: backslash
 * escapes for quotes, backslashes and control characters, \xNN for bytes
 * that are not part of a complete UTF-8 character. Caller frees. */
char *df_tok_escape_piece(const uint8_t *p, size_t len);

/* Encodes text as ordinary text: special-token strings in it become ordinary
 * tokens. Input must be valid UTF-8 (error otherwise). Appends to *ids
 * (realloc'd; *n and *cap track it). As the release's tokenizer does, the text
 * is first cut into pieces of at most 400,000 characters, and wherever a run of
 * white space or of non-white space (Python's str.isspace) passes 25,000
 * characters; each piece is encoded on its own (kimi-k3.md section 6). */
int df_tok_encode(const df_tok *t, const char *text, size_t len, int **ids, size_t *n,
                  size_t *cap, df_err *e);
/* Like df_tok_encode (same pre-split, specials recognised inside each piece),
 * but special-token strings are recognised: for trusted text only (a template
 * the client rendered itself, a --specials command line), never for chat
 * message content. */
int df_tok_encode_with_specials(const df_tok *t, const char *text, size_t len, int **ids,
                                size_t *n, size_t *cap, df_err *e);
/* Appends the bytes of ids to a new buffer (may be invalid UTF-8 if the ids
 * split a character; unknown ids add nothing; NUL-terminated, not counted in
 * *len). Caller frees. */
char *df_tok_decode(const df_tok *t, const int *ids, size_t n, size_t *len);

/* Incremental, UTF-8-safe decoding for streaming: push one id, get the bytes
 * that are now complete characters; an incomplete tail is held back until
 * completed (or flushed, as U+FFFD replacements, by df_tok_stream_flush). */
typedef struct df_tok_stream {
  const df_tok *tok;
  uint8_t pend[8];
  int npend;
} df_tok_stream;
void df_tok_stream_init(df_tok_stream *s, const df_tok *t);
/* Writes up to outcap bytes to out and returns the count (outcap >= 64 is
 * always enough for one token of K3; larger pieces are handled by the caller
 * passing a larger buffer: returns -1 if outcap is too small). */
int df_tok_stream_push(df_tok_stream *s, int id, char *out, size_t outcap);
int df_tok_stream_flush(df_tok_stream *s, char *out, size_t outcap);
/* Like df_tok_stream_push for raw bytes (a part of a piece, or several). */
int df_tok_stream_push_bytes(df_tok_stream *s, const uint8_t *p, size_t n, char *out,
                             size_t outcap);
/* Invalid UTF-8 in the token stream (a stray continuation byte, a sequence
 * broken by another lead byte) is written as U+FFFD, one per maximal invalid
 * subpart, so the stream's output is always valid UTF-8. */

#endif

/* Byte-level BPE from a Hugging Face tokenizer.json (the `tokenizers` format
 * Qwen2/Qwen3 and GPT-2 style models publish), for the Qwen3 draft model:
 *   added tokens (split out first, longest match at the leftmost position)
 *   -> normalizer (none or NFC)
 *   -> pre-tokenizer: Split(Regex, Isolated) and/or ByteLevel (its GPT-2
 *      regex when use_regex), the regex run by PCRE2
 *   -> BPE over bytes with the file's merge ranks (lowest rank first,
 *      leftmost on ties), ids from its vocab.
 * Decoding is byte-level: each id's bytes, added tokens as their content.
 * No ids are added around the text (add_special_tokens=False; the Qwen
 * releases' post-processor adds none either).
 *
 * Anything in the file this code does not implement (another model type, a
 * normalizer or pre-tokenizer it does not know, dropout, lstrip/rstrip added
 * tokens) is a load error naming it, never a silent difference.
 * A loaded df_hftok is read-only: threads may share it. */
#ifndef DF_TOKENIZER_HF_BPE_H
#define DF_TOKENIZER_HF_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct df_hftok df_hftok;

/* Loads dir/tokenizer.json. */
int df_hftok_load(df_hftok **out, const char *dir, df_err *e);
/* Loads a tokenizer.json file by path. */
int df_hftok_load_file(df_hftok **out, const char *path, df_err *e);
/* Parses tokenizer.json text held in memory (label names it in errors). */
int df_hftok_parse(df_hftok **out, const char *json, size_t len, const char *label, df_err *e);
void df_hftok_free(df_hftok *t);

/* One more than the largest id of the vocab and the added tokens. */
int df_hftok_vocab_size(const df_hftok *t);
/* The id of an added token by its content ("<|im_end|>"), or -1. */
int df_hftok_added_id(const df_hftok *t, const char *content);
/* 1 if id is an added token marked special. */
int df_hftok_is_special(const df_hftok *t, int id);
/* The bytes an id decodes to (added tokens: their content); NULL for an id
 * that is neither in the vocab nor added. */
const uint8_t *df_hftok_piece(const df_hftok *t, int id, size_t *len);

/* Encodes UTF-8 text (invalid UTF-8 is an error), appending to *ids
 * (realloc'd; *n and *cap track it). added: 1 = added tokens in the text
 * become their ids, as the `tokenizers` library's encode does; 0 = their
 * text is encoded as ordinary text (for untrusted content). */
int df_hftok_encode(const df_hftok *t, const char *text, size_t len, int added, int **ids,
                    size_t *n, size_t *cap, df_err *e);
/* The bytes of ids, concatenated (unknown ids add nothing); NUL-terminated,
 * not counted in *len; may be invalid UTF-8 where ids split a character.
 * Caller frees. */
char *df_hftok_decode(const df_hftok *t, const int *ids, size_t n, size_t *len);

#endif

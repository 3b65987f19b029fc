/* JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes
 * it, because the release's chat encoder puts such text into prompts (tool
 * declarations, non-string tool arguments) and a prompt the model was not
 * trained on differs by bytes, not by meaning. Internal to the tokenizer. */
#ifndef DF_TOKENIZER_PYJSON_H
#define DF_TOKENIZER_PYJSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* compact: separators (",", ":") instead of Python's default (", ", ": ").
 * sort_keys: every object's keys in code point order (the release's
 * deep_sort_dict); otherwise in the order the object holds them. Floats are
 * written as Python's repr (shortest round trip, "1.0", "1e-05", "1e+16").
 * Caller frees; *len gets the length. */
char *df_pyjson_dumps(const json_t *v, int compact, int sort_keys, size_t *len);

/* Python's str.isspace for one code point (bidi WS/B/S or category Zs). */
int df_py_isspace(uint32_t cp);

/* Decodes one UTF-8 character of valid UTF-8 at p (n > 0 bytes left): its
 * length, or 0 if the bytes are not a complete valid character. */
int df_py_utf8_next(const uint8_t *p, size_t n, uint32_t *cp);

#endif

/* Structured output: a byte-level matcher for JSON text that must be one
 * object (response_format json_object) or follow a JSON schema
 * (json_schema: objects with their properties in the schema's order, all
 * of them written, no others; arrays with minItems / maxItems; strings with
 * minLength / maxLength; numbers and integers with minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum (a bounded number is written without
 * an exponent); booleans, null; enum and const; anyOf and type lists
 * (nullable fields); allOf of one schema; local $ref into $defs /
 * definitions, recursion included). Every other keyword that constrains a
 * value is refused by name; annotations (title, description, default, ...)
 * are ignored. Strings are valid UTF-8 and use the short escapes only (no
 * \uXXXX: a model writes the character). The server masks every token whose bytes would leave the text no
 * longer a prefix of an accepted document, so greedy decoding stays exact
 * within the constraint. The text is compact: no white space between
 * tokens of the JSON. Pure (no model): unit-tested and fuzzed. */
#ifndef DF_SERVE_JSONGRAM_H
#define DF_SERVE_JSONGRAM_H

#include <stddef.h>
#include <stdint.h>

typedef struct df_jg df_jg; /* a compiled grammar */

df_jg *df_jg_object(void);
/* NULL with err filled (naming the schema path) for what the subset lacks. */
df_jg *df_jg_schema(const char *schema_json, size_t len, char *err, size_t errlen);
void df_jg_free(df_jg *g);

#define DF_JM_DEPTH 48
typedef struct df_jm_frame {
  int node;  /* index into the grammar's nodes */
  int phase; /* where inside that node */
  int idx;   /* property / literal position */
  uint64_t cand; /* enum / anyOf: alternatives still possible */
  long count;    /* strings: characters; arrays: items */
  long units;    /* strings: UTF-16 code units (maxLength counts these too: see jsongram.c) */
  double x, sc;  /* bounded numbers: the magnitude so far, the next fraction digit's weight */
  int neg;       /* bounded numbers: a minus sign was written */
} df_jm_frame;

/* A matcher: plain data, copied by value to try a token. */
typedef struct df_jm {
  const df_jg *g;
  df_jm_frame st[DF_JM_DEPTH];
  int depth;
  int done; /* a whole document was read */
  int dead; /* a byte was refused */
} df_jm;

void df_jm_init(df_jm *m, const df_jg *g);
/* Feeds bytes; returns 1 if the text is still a prefix of an accepted
 * document (m is then advanced), 0 if not (m is then unusable). */
int df_jm_feed(df_jm *m, const uint8_t *p, size_t n);
/* 1 if the bytes would be accepted (m unchanged). */
int df_jm_accepts(const df_jm *m, const uint8_t *p, size_t n);

#endif

/* The K3 chat format (kimi-k3.md section 7): control tokens are specials,
 * tag names and attributes are ordinary text, user content is always
 * encoded as ordinary text. */
#ifndef DF_TOKENIZER_CHAT_H
#define DF_TOKENIZER_CHAT_H

#include <stddef.h>

#include "tokenizer/tokenizer.h"

typedef enum { DF_ROLE_SYSTEM, DF_ROLE_USER, DF_ROLE_ASSISTANT, DF_ROLE_TOOL } df_role;
typedef enum { DF_EFFORT_LOW, DF_EFFORT_MEDIUM, DF_EFFORT_HIGH, DF_EFFORT_MAX } df_effort;

typedef struct df_chat_msg {
  df_role role;
  const char *content;
  size_t content_len;
  const char *tool_name; /* tool messages: tool="name" */
  int tool_index;        /* tool messages: index="N" */
  /* assistant messages in history: optional reasoning (think part) */
  const char *reasoning;
  size_t reasoning_len;
} df_chat_msg;

int df_effort_parse(const char *s, df_effort *out); /* "low","medium","high","max" */

/* Builds the prompt ids: the thinking-effort system message first, then the
 * messages, then (if add_generation_prompt) the assistant opening with the
 * think channel open. Appends to *ids.
 *
 * Every assistant message in the history is rendered the way the model
 * writes one: a think block (empty when reasoning is NULL or empty), then a
 * response block with the content, each closed, nothing between them. A tool
 * message without a tool_name omits the tool attribute. Contents must be
 * valid UTF-8 and are always ordinary text. */
int df_chat_encode(const df_tok *t, const df_chat_msg *msgs, size_t nmsgs, df_effort effort,
                   int add_generation_prompt, int **ids, size_t *n, size_t *cap, df_err *e);

/* Splits generated ids (after the generation prompt) into reasoning and
 * response text. Streaming use: feed ids one at a time; the splitter tells
 * which channel each decoded byte run belongs to and when the message ended. */
typedef enum { DF_CH_REASONING, DF_CH_RESPONSE, DF_CH_CONTROL, DF_CH_END } df_channel;

typedef struct df_chat_split {
  const df_tok *tok;
  df_channel ch;    /* current channel */
  int state;        /* internal: which control sequence is being matched */
  df_tok_stream stream;
  int ended;
  /* internal: where text goes (reasoning, response, between blocks) and the
   * tag name being collected after <|open|> or <|close|> */
  int mode;
  int ntag;
  char tag[32];
} df_chat_split;

void df_chat_split_init(df_chat_split *s, const df_tok *t);
/* Pushes one generated id. Writes the text it completes (possibly empty) to
 * out and sets *ch to the channel that text belongs to. Returns the byte
 * count, or -1 when outcap is too small. Control tokens and tag text
 * (`think<|sep|>`, `<|open|>response<|sep|>`, ...) produce no text.
 *
 * Rules (any id sequence is accepted; a model may emit garbage):
 * - text starts in the reasoning channel (the generation prompt opened think);
 * - <|open|>NAME<|sep|> and <|close|>NAME<|sep|> are markup: NAME is
 *   collected from ordinary tokens and dropped; open think -> reasoning, open
 *   response -> response, a close -> between blocks; unknown names change
 *   nothing. Another special in the middle abandons the tag;
 * - between blocks (after a close), white space is dropped (DF_CH_CONTROL);
 *   other text is taken as response text (a model that skipped the tag);
 * - <|end_of_msg|> ends the message: s->ended = 1 and *ch = DF_CH_END; from
 *   then on every push returns 0 with DF_CH_END;
 * - a special token flushes a dangling partial UTF-8 character of the
 *   current channel as U+FFFD: that push then returns those bytes with *ch
 *   naming the channel (check s->ended when the flushing special was
 *   <|end_of_msg|>); other specials and unknown ids produce no text.
 * The text of each channel is valid UTF-8 (see df_tok_stream_push). */
int df_chat_split_push(df_chat_split *s, int id, char *out, size_t outcap, df_channel *ch);

#endif

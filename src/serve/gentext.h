/* Generated ids -> the text a client sees. Chat: the K3 splitter sorts text
 * into reasoning and response; completions: plain decoding, the end-of-text
 * id itself contributing no text. Each channel has its own stop-sequence
 * matcher; a partial UTF-8 character is never released (a dangling one at
 * the very end becomes U+FFFD, as in `deltafin run`). Shared by streaming and
 * non-streaming responses, so both see the same text. */
#ifndef DF_SERVE_GENTEXT_H
#define DF_SERVE_GENTEXT_H

#include <stddef.h>

#include "serve/request.h"
#include "serve/stop.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

/* Receives released text: ch is DF_CH_REASONING or DF_CH_RESPONSE (always
 * the latter for completions); n > 0, whole UTF-8 characters. */
typedef void (*df_gentext_sink)(void *ud, df_channel ch, const char *text, size_t n);

typedef struct df_gentext {
  df_serve_kind kind;
  const df_tok *tok;
  int eot_id; /* completions: the id that ends the text (-1: none) */
  df_chat_split split;
  df_tok_stream ts;
  df_stop stop_r, stop_c;
  int stopped;      /* a stop sequence was found: nothing more is released */
  int resp_started; /* the response channel has begun */
  long n_reasoning; /* ids that fell in the reasoning channel */
  df_channel last_ch; /* the channel of the last id pushed */
  df_gentext_sink sink;
  void *ud;
} df_gentext;

void df_gentext_init(df_gentext *g, df_serve_kind kind, const df_tok *tok, int eot_id,
                     char *const *stops, const size_t *stop_lens, int nstop, df_gentext_sink sink,
                     void *ud);
/* Chat in the release's instruct mode: the generation prompt opened the
 * response channel, not think, so the splitter is told so (it is fed the
 * same <|open|>response<|sep|> the prompt ends with). */
void df_gentext_open_response(df_gentext *g);
/* One generated id. Returns 1 once a stop sequence has ended the text. */
int df_gentext_push(df_gentext *g, int id);
/* End of generation: releases what was held back (unless stopped). */
void df_gentext_finish(df_gentext *g);
void df_gentext_free(df_gentext *g);

#endif

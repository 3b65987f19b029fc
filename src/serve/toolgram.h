/* Tool choice enforced while decoding: a matcher over the K3 tool-call
 * markup the model writes (tokenizer/chat_parse.c reads it back):
 *   <|close|>response<|sep|><|open|>tools<|sep|>
 *   <|open|>call tool="NAME" index="1"<|sep|>
 *   <|open|>json type="object"<|sep|>{...}<|close|>json<|sep|>
 *   <|close|>call<|sep|> ...
 * <|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|> The server masks
 * every token the matcher refuses, as for structured output (jsongram.h), so
 * the constraint holds whatever the model prefers:
 *
 * - none: no <|open|> of a tag but think and response (no tools, no call);
 * - forced (required or a named function): the reply's text is empty and it
 *   makes a call to one of the named tools (one name: that one) whose
 *   arguments follow that tool's parameters schema; with thinking on the
 *   model first thinks freely (only <|close|> ends its think part);
 * - one call (parallel_tool_calls false): after the first call closes, the
 *   message can only close. With forced and parallel calls allowed, each
 *   call is followed by another forced call or the message's close.
 *
 * The input is the token stream: specials as symbols, ordinary tokens as
 * their bytes. Pure (no tokenizer, no model): unit-tested on its own. */
#ifndef DF_SERVE_TOOLGRAM_H
#define DF_SERVE_TOOLGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "serve/jsongram.h"

/* Special-token symbols (ordinary tokens are fed as bytes). */
typedef enum {
  DF_TG_OPEN = 1,
  DF_TG_CLOSE,
  DF_TG_SEP,
  DF_TG_EOM,
  DF_TG_OTHER
} df_tg_sym; /* 0: no symbol */

#define DF_TG_MAX_TOOLS 64

typedef struct df_tg df_tg;

/* forbid: tool_choice none. force: a call to one of names[0..n) is made,
 * args[i] its arguments' grammar (owned by the caller, outlives g).
 * one_call: parallel_tool_calls false. thinking: the prompt opened think
 * (else response). NULL when nothing is constrained or n is out of range. */
df_tg *df_tg_new(int forbid, int force, int one_call, int thinking,
                 const char *const *names, const df_jg *const *args, int n);
void df_tg_free(df_tg *g);

#define DF_TM_TAG 16
typedef struct df_tm {
  const df_tg *g;
  int seq; /* -1: free writing under the guard; else the forced item being read
            */
  size_t off;    /* bytes of the current text item read */
  uint64_t cand; /* text items with alternatives: the ones still possible */
  int chosen;    /* the tool whose name was written (-1: none yet) */
  int tag; /* guard: 0, or the symbol (open/close) whose tag name is being read
            */
  char name[DF_TM_TAG];
  int nname;
  int ncalls; /* calls closed */
  int done;   /* the forced tail ended at <|end_of_msg|> */
  df_jm jm;   /* a forced call's arguments */
} df_tm;

void df_tm_init(df_tm *m, const df_tg *g);
/* 1 if the token is allowed next (m unchanged). */
int df_tm_accepts_sym(const df_tm *m, df_tg_sym s);
int df_tm_accepts_bytes(const df_tm *m, const uint8_t *p, size_t n);
/* Takes the token; returns 1 if it was allowed (else m is unusable). */
int df_tm_feed_sym(df_tm *m, df_tg_sym s);
int df_tm_feed_bytes(df_tm *m, const uint8_t *p, size_t n);

#endif

/* A conversation held in one engine session, for `deltafin chat`.
 *
 * The conversation is OpenAI messages (what /save writes and /load, the
 * server and `deltafin template` read), and every turn renders it whole
 * through the one chat encoder: the ids fed to the model are always those of
 * the whole conversation. What makes a turn cheap is that the session keeps
 * its sequence state: when the ids it has run are a prefix of the new
 * rendering, only the rest is prefilled; when they are not (a reply that
 * re-encodes differently, /system, a cancelled pass), a snapshot taken at the
 * end of the last prompt is tried, then a full prefill. Results are those of
 * a full prefill either way (the forward pass is the same for any split). */
#ifndef DF_CLI_CHAT_CONVO_H
#define DF_CLI_CHAT_CONVO_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/engine.h"

typedef struct df_convo df_convo;

/* What one turn did, for /stats and for the caller's messages. */
typedef struct df_convo_turn {
  int n_prompt;    /* ids the whole conversation rendered to */
  int n_reused;    /* of them, already in the session's state */
  int n_prefilled; /* run through the model this turn */
  int n_gen;       /* reply ids */
  int n_reasoning; /* reply ids before the think block closed (thinking on) */
  df_finish finish;
  int dropped;     /* cancelled before the reply began: the user message was dropped */
  double prefill_s, decode_s;
  uint64_t expert_bytes;       /* routed-expert bytes fetched */
  uint64_t spine_bytes;        /* dense weight bytes the passes touched */
  uint64_t spine_stream_bytes; /* of the spine, read from the drives (streamed layers) */
  uint64_t cache_hits, cache_requests; /* expert cache */
  /* speculation (--draft): verify blocks, drafts proposed and accepted,
   * rollbacks, decode passes */
  int n_verify, n_drafted, n_accepted, n_rollback, n_passes;
  int positions;               /* positions the session holds afterwards */
} df_convo_turn;

/* effort: "low", "high", "max" or NULL (no thinking-effort message);
 * thinking 0: instruct mode (the reply opens the response channel). */
df_convo *df_convo_new(df_engine *en, const char *effort, int thinking);
void df_convo_free(df_convo *c);
/* /reset: drops every message but the system prompt (and the tools). */
void df_convo_clear(df_convo *c);
/* /system: the first message's system prompt; NULL or "" removes it. */
void df_convo_set_system(df_convo *c, const char *text);
int df_convo_set_effort(df_convo *c, const char *effort, df_err *e);
const char *df_convo_effort(const df_convo *c);
int df_convo_thinking(const df_convo *c);
size_t df_convo_nmsgs(const df_convo *c);
/* /save: the messages as a JSON array ({"messages", "tools"} when the
 * conversation has tools), written under a temporary name then renamed. */
int df_convo_save(const df_convo *c, const char *path, df_err *e);
/* /load: a messages array or a request object with "messages" (and
 * "tools"); refused, leaving the conversation as it was, unless it renders. */
int df_convo_load(df_convo *c, const char *path, df_err *e);

/* One turn: the user message appended, the conversation rendered whole and
 * the reply generated with go (its on_token, cancel and on_prefill are
 * called with go->ud; its stop ids are replaced by <|end_of_msg|>, its mask
 * is not used). The
 * reply is appended as an assistant message (reasoning, content, tool calls)
 * also when cut by --max-new or cancelled during the reply; cancelled before
 * it began, the user message is dropped (t->dropped). On error the
 * conversation is as before the call. */
int df_convo_say(df_convo *c, const char *text, size_t len, const df_gen_opts *go,
                 df_convo_turn *t, df_err *e);

#endif

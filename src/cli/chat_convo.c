/* The chat conversation: messages, the whole-conversation rendering, and the
 * two states that make a turn prefill only its new ids (chat_convo.h). */
#include "cli/chat_convo.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "tokenizer/chat.h"

struct df_convo {
  df_engine *en;
  df_session *s;
  const df_tok *tok;
  json_t *msgs;  /* OpenAI messages */
  json_t *tools; /* OpenAI tools (from /load) or NULL */
  char *effort;
  int thinking;
  int eom, close;
  int ncalls; /* tool call ids handed out, so each is unique in the conversation */
  /* The ids the session's state has run (valid while live_ok): the last
   * prompt and every reply id but the last, which was drawn, not run. */
  int *live;
  int nlive, live_ok;
  /* A snapshot of an earlier point of the same conversation (the last
   * prompt's end, or where this turn started) and its ids: the fallback when
   * the live state is not a prefix of the new rendering or was cut short. */
  df_session_snap *base;
  int *base_ids;
  int nbase;
};

static int prefix_of(const int *a, int na, const int *b, int nb) {
  return na <= nb && !memcmp(a, b, sizeof(int) * (size_t)na);
}

static void set_ids(int **dst, int *n, const int *src, int ns, const int *more, int nm) {
  *dst = df_xrealloc(*dst, sizeof(int) * (size_t)(ns + nm > 0 ? ns + nm : 1));
  if (ns) memcpy(*dst, src, sizeof(int) * (size_t)ns);
  if (nm > 0) memcpy(*dst + ns, more, sizeof(int) * (size_t)nm);
  *n = ns + nm;
}

df_convo *df_convo_new(df_engine *en, const char *effort, int thinking) {
  df_convo *c = df_xcalloc(1, sizeof *c);
  c->en = en;
  c->tok = df_engine_tok(en);
  c->s = df_session_new(en);
  c->msgs = json_array();
  c->effort = effort ? df_xstrdup(effort) : NULL;
  c->thinking = thinking;
  c->eom = df_tok_special_id(c->tok, "<|end_of_msg|>");
  c->close = df_tok_special_id(c->tok, "<|close|>");
  if (c->eom < 0) c->eom = df_engine_config(en)->eos_id;
  return c;
}

static void drop_base(df_convo *c) {
  df_session_snap_free(c->base);
  c->base = NULL;
  c->nbase = 0;
}

void df_convo_free(df_convo *c) {
  if (!c) return;
  drop_base(c);
  free(c->base_ids);
  free(c->live);
  df_session_free(c->s);
  json_decref(c->msgs);
  json_decref(c->tools);
  free(c->effort);
  free(c);
}

static int is_system_prompt(const json_t *m) {
  const char *r = json_string_value(json_object_get(m, "role"));
  return r && !strcmp(r, "system") && !json_object_get(m, "tools");
}

void df_convo_clear(df_convo *c) {
  json_t *first = json_array_get(c->msgs, 0);
  json_t *keep = first && is_system_prompt(first) ? json_incref(first) : NULL;
  json_array_clear(c->msgs);
  if (keep) json_array_append_new(c->msgs, keep);
  /* nothing kept can be a prefix of what comes next but the system prompt,
   * which is cheap to run again: give the memory back */
  drop_base(c);
  c->live_ok = 0;
  df_session_reset(c->s);
}

void df_convo_set_system(df_convo *c, const char *text) {
  json_t *first = json_array_get(c->msgs, 0);
  int has = first && is_system_prompt(first);
  if (!text || !*text) {
    if (has) json_array_remove(c->msgs, 0);
    return;
  }
  json_t *m = json_pack("{s:s, s:s}", "role", "system", "content", text);
  if (has) json_array_set_new(c->msgs, 0, m);
  else json_array_insert_new(c->msgs, 0, m);
}

int df_convo_set_effort(df_convo *c, const char *effort, df_err *e) {
  if (!df_chat_effort_valid(effort))
    return df_err_set(e, "'%s' is not an effort the release accepts (low, high, max)", effort);
  free(c->effort);
  c->effort = df_xstrdup(effort);
  return 0;
}

const char *df_convo_effort(const df_convo *c) { return c->effort; }
int df_convo_thinking(const df_convo *c) { return c->thinking; }
size_t df_convo_nmsgs(const df_convo *c) { return json_array_size(c->msgs); }

static int render(const df_convo *c, const json_t *msgs, const json_t *tools, df_chat_prompt *p,
                  df_err *e) {
  char *mj = json_dumps(msgs, JSON_COMPACT);
  char *tj = tools ? json_dumps(tools, JSON_COMPACT) : NULL;
  df_chat_opts o = df_chat_opts_default();
  o.thinking = c->thinking;
  if (c->effort) o.effort = c->effort; /* else apply_chat_template's (max) */
  o.tools_json = tj;
  o.tools_len = tj ? strlen(tj) : 0;
  int rc = df_chat_render_json(c->tok, mj, strlen(mj), &o, p, e);
  free(mj);
  free(tj);
  return rc;
}

int df_convo_save(const df_convo *c, const char *path, df_err *e) {
  json_t *doc = c->tools ? json_pack("{s:O, s:O}", "messages", c->msgs, "tools", c->tools)
                         : json_incref(c->msgs);
  char *txt = json_dumps(doc, JSON_INDENT(1) | JSON_ENSURE_ASCII);
  json_decref(doc);
  if (!txt) return df_err_set(e, "could not encode the conversation as JSON");
  size_t n = strlen(txt);
  txt = df_xrealloc(txt, n + 2);
  txt[n++] = '\n';
  int rc = df_file_write_atomic(path, txt, n, e);
  free(txt);
  return rc;
}

int df_convo_load(df_convo *c, const char *path, df_err *e) {
  json_error_t je;
  json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!doc) return df_err_set(e, "%s: %s (line %d)", path, je.text, je.line);
  json_t *msgs = doc, *tools = NULL;
  if (json_is_object(doc)) {
    msgs = json_object_get(doc, "messages");
    tools = json_object_get(doc, "tools");
    if (json_is_null(tools) || (json_is_array(tools) && !json_array_size(tools))) tools = NULL;
  }
  if (!json_is_array(msgs)) {
    json_decref(doc);
    return df_err_set(e, "%s: expected a JSON array of messages (or an object with one under "
                      "\"messages\")", path);
  }
  df_chat_prompt p;
  if (render(c, msgs, tools, &p, e)) {
    json_decref(doc);
    return df_err_prefix(e, "%s: ", path);
  }
  df_chat_prompt_free(&p);
  json_decref(c->msgs);
  json_decref(c->tools);
  c->msgs = json_incref(msgs);
  c->tools = tools ? json_incref(tools) : NULL;
  c->ncalls = 0;
  json_decref(doc);
  return 0;
}

/* Where this turn's prefill starts: the live state if the rendering extends
 * what it ran, else the snapshot if it does, else the beginning. At least
 * one id is run, or the state already holds the logits of the last one. */
static int pick_start(df_convo *c, const int *ids, int n) {
  if (c->live_ok && c->nlive < n && prefix_of(c->live, c->nlive, ids, n)) return c->nlive;
  c->live_ok = 0;
  if (c->base && prefix_of(c->base_ids, c->nbase, ids, n)) {
    df_session_restore(c->s, c->base);
    if (c->nbase < n || df_session_has_logits(c->s)) {
      set_ids(&c->live, &c->nlive, c->base_ids, c->nbase, NULL, 0);
      c->live_ok = 1;
      return c->nbase;
    }
  }
  df_session_reset(c->s);
  c->nlive = 0;
  c->live_ok = 1;
  return 0;
}

static void keep_base(df_convo *c, const int *ids, int n) {
  drop_base(c);
  c->base = df_session_snapshot(c->s);
  set_ids(&c->base_ids, &c->nbase, ids, n, NULL, 0);
}

typedef struct turn_ctx {
  df_convo *c;
  const df_gen_opts *user;
  const int *ids;
  int n, start;
  int closed; /* the think block closed (a <|close|> was drawn) */
  df_convo_turn *t;
} turn_ctx;

static void tc_prefill(void *ud, int done) {
  turn_ctx *x = ud;
  /* the prompt's end: the state a re-rendered reply can always continue from */
  if (x->start + done == x->n) keep_base(x->c, x->ids, x->n);
  if (x->user->on_prefill) x->user->on_prefill(x->user->ud, done);
}

static int tc_token(void *ud, int id) {
  turn_ctx *x = ud;
  if (x->c->thinking && !x->closed) {
    if (id == x->c->close) x->closed = 1;
    else x->t->n_reasoning++;
  }
  return x->user->on_token ? x->user->on_token(x->user->ud, id) : 0;
}

static int tc_cancel(void *ud) {
  turn_ctx *x = ud;
  return x->user->cancel ? x->user->cancel(x->user->ud) : 0;
}

/* The expert cache's counters from the engine's statistics. */
static void cache_counts(df_engine *en, uint64_t *hits, uint64_t *req) {
  char *j = df_engine_stats_json(en);
  json_t *v = j ? json_loads(j, 0, NULL) : NULL;
  free(j);
  json_t *st = json_object_get(v, "store");
  *hits = (uint64_t)json_integer_value(json_object_get(st, "cache_hits"));
  *req = (uint64_t)json_integer_value(json_object_get(st, "expert_requests"));
  json_decref(v);
}

static json_t *assistant_msg(df_convo *c, const int *ids, int n) {
  df_chat_parsed p;
  df_chat_parse_ids(c->tok, ids, (size_t)n, c->thinking, &p);
  json_t *m = json_object();
  json_object_set_new(m, "role", json_string("assistant"));
  json_object_set_new(m, "content", json_stringn(p.content, p.content_len));
  if (c->thinking && p.reasoning_len)
    json_object_set_new(m, "reasoning_content", json_stringn(p.reasoning, p.reasoning_len));
  if (p.ncalls) {
    json_t *calls = json_array();
    for (size_t k = 0; k < p.ncalls; k++) {
      char id[32];
      snprintf(id, sizeof id, "call_%d", ++c->ncalls);
      json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type",
                                             "function", "function", "name", p.calls[k].name,
                                             "arguments", p.calls[k].arguments));
    }
    json_object_set_new(m, "tool_calls", calls);
  }
  df_chat_parsed_free(&p);
  return m;
}

int df_convo_say(df_convo *c, const char *text, size_t len, const df_gen_opts *go,
                 df_convo_turn *t, df_err *e) {
  memset(t, 0, sizeof *t);
  if (!df_utf8_valid(text, len)) return df_err_set(e, "the message is not valid UTF-8");
  size_t nm = json_array_size(c->msgs);
  json_array_append_new(c->msgs, json_pack("{s:s, s:s%}", "role", "user", "content", text, len));
  df_chat_prompt p;
  if (render(c, c->msgs, c->tools, &p, e)) {
    json_array_remove(c->msgs, nm);
    return -1;
  }
  int n = (int)p.n;
  int start = pick_start(c, p.ids, n);
  /* a cancelled prefill leaves the state partly advanced: keep where this
   * turn starts so the conversation goes on from there, not from the turn
   * before (on a streamed K3, a reply's prefill costs minutes) */
  if (start > c->nbase) keep_base(c, p.ids, start);
  turn_ctx x = {.c = c, .user = go, .ids = p.ids, .n = n, .start = start, .t = t};
  df_gen_opts o = *go;
  o.stop_ids = &c->eom;
  o.nstop = 1;
  o.history = p.ids;
  o.nhistory = start;
  o.on_prefill = tc_prefill;
  o.on_token = tc_token;
  o.cancel = tc_cancel;
  o.mask = NULL;
  o.ud = &x;
  uint64_t h0, r0, h1, r1, sp0 = df_engine_spine_stream_bytes(c->en, NULL);
  cache_counts(c->en, &h0, &r0);
  int *out = NULL, nout = 0;
  df_gen_stats st;
  int rc = df_generate(c->s, p.ids + start, n - start, &o, &out, &nout, &st, e);
  cache_counts(c->en, &h1, &r1);
  t->n_prompt = n;
  t->n_reused = start;
  t->n_prefilled = st.n_prefilled;
  t->n_gen = nout;
  t->finish = st.finish;
  t->prefill_s = st.prefill_s;
  t->decode_s = st.decode_s;
  t->expert_bytes = st.expert_bytes_read;
  int chunk = go->prefill_chunk > 0 ? go->prefill_chunk : (n - start > 0 ? n - start : 1);
  uint64_t passes = (uint64_t)((st.n_prefilled + chunk - 1) / chunk) + (uint64_t)st.n_passes;
  t->spine_bytes = st.spine_bytes_per_token * passes;
  t->spine_stream_bytes = df_engine_spine_stream_bytes(c->en, NULL) - sp0;
  t->cache_hits = h1 - h0;
  t->cache_requests = r1 - r0;
  t->n_verify = st.n_verify;
  t->n_drafted = st.n_drafted;
  t->n_accepted = st.n_accepted;
  t->n_rollback = st.n_rollback;
  t->n_passes = st.n_passes;
  if (rc || (st.finish == DF_FINISH_CANCEL && nout == 0)) {
    c->live_ok = 0;
    json_array_remove(c->msgs, nm);
    t->dropped = !rc;
  } else {
    json_array_append_new(c->msgs, assistant_msg(c, out, nout));
    if (st.finish == DF_FINISH_CANCEL) {
      c->live_ok = 0; /* stopped between layers: the state is partly advanced */
    } else {
      set_ids(&c->live, &c->nlive, p.ids, n, out, nout - 1);
      c->live_ok = 1;
    }
  }
  t->positions = c->live_ok ? c->nlive : 0;
  free(out);
  df_chat_prompt_free(&p);
  return rc;
}

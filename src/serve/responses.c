/* The Responses API over chat completions (responses.h). */
#include "serve/responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/util.h"
#include "serve/request_int.h"

/* ---- the request ---- */

void df_resp_req_free(df_resp_req *r) {
  if (!r) return;
  free(r->chat);
  json_decref(r->history);
  json_decref(r->echo);
  memset(r, 0, sizeof *r);
}

/* A message's content: a string, or input_text / output_text parts (joined
 * into chat's text parts). Images and files are refused by name. */
static json_t *content_of(const json_t *c, const char *p, df_serve_err *e) {
  if (json_is_string(c)) return json_incref((json_t *)c);
  if (!json_is_array(c)) {
    BAD(e, p, "'%s' must be a string or an array of input_text parts", p);
    return NULL;
  }
  json_t *parts = json_array();
  size_t i;
  json_t *x;
  json_array_foreach(c, i, x) {
    const char *t = json_string_value(json_object_get(x, "type"));
    const json_t *text = json_object_get(x, "text");
    char pp[160];
    snprintf(pp, sizeof pp, "%s[%zu].type", p, i);
    if (!t || (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text"))) {
      json_decref(parts);
      BAD(e, pp, "content part type '%.40s' is not supported: this model reads text only",
          t ? t : "(none)");
      return NULL;
    }
    if (!json_is_string(text)) {
      json_decref(parts);
      snprintf(pp, sizeof pp, "%s[%zu].text", p, i);
      BAD(e, pp, "'%s' must be a string", pp);
      return NULL;
    }
    json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", text));
  }
  return parts;
}

/* The input items as chat messages, appended to msgs. Function calls join
 * the assistant message before them (or start one); a reasoning item goes
 * with the assistant turn that follows it. */
static int input_items_(json_t *msgs, const json_t *input, json_t **pending, df_serve_err *e) {
  if (json_is_string(input)) {
    json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", input));
    return 0;
  }
  if (!json_is_array(input)) return BAD(e, "input", "'input' must be a string or an array of items");
  size_t i;
  json_t *it;
  json_t *last_asst = NULL;
  char p[160];
  json_array_foreach(input, i, it) {
    snprintf(p, sizeof p, "input[%zu]", i);
    if (!json_is_object(it)) return BAD(e, p, "'%s' must be an object", p);
    const char *type = json_string_value(json_object_get(it, "type"));
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!type || !strcmp(type, "message")) {
      if (!role || (strcmp(role, "user") && strcmp(role, "system") && strcmp(role, "developer") &&
                    strcmp(role, "assistant"))) {
        snprintf(p, sizeof p, "input[%zu].role", i);
        return BAD(e, p, "'%s' must be user, system, developer or assistant", p);
      }
      snprintf(p, sizeof p, "input[%zu].content", i);
      json_t *c = content_of(json_object_get(it, "content"), p, e);
      if (!c) return -1;
      json_t *m = json_pack("{s:s,s:o}", "role", role, "content", c);
      if (!strcmp(role, "assistant")) {
        if (*pending) json_object_set_new(m, "reasoning_content", *pending), *pending = NULL;
        last_asst = m;
      } else {
        last_asst = NULL;
      }
      json_array_append_new(msgs, m);
    } else if (!strcmp(type, "function_call")) {
      const json_t *cid = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
                   *args = json_object_get(it, "arguments");
      if (!json_is_string(cid) || !json_is_string(name) || !json_is_string(args))
        return BAD(e, p, "'%s' needs call_id, name and arguments (strings)", p);
      if (!last_asst) {
        last_asst = json_pack("{s:s,s:n}", "role", "assistant", "content");
        if (*pending) json_object_set_new(last_asst, "reasoning_content", *pending), *pending = NULL;
        json_array_append_new(msgs, last_asst);
      }
      json_t *calls = json_object_get(last_asst, "tool_calls");
      if (!calls) json_object_set_new(last_asst, "tool_calls", calls = json_array());
      json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", cid, "type", "function",
                                             "function", "name", name, "arguments", args));
    } else if (!strcmp(type, "function_call_output")) {
      const json_t *cid = json_object_get(it, "call_id"), *out = json_object_get(it, "output");
      if (!json_is_string(cid)) return BAD(e, p, "'%s.call_id' must be a string", p);
      snprintf(p, sizeof p, "input[%zu].output", i);
      json_t *c = content_of(out, p, e);
      if (!c) return -1;
      json_array_append_new(msgs, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", cid,
                                            "content", c));
      last_asst = NULL;
    } else if (!strcmp(type, "reasoning")) {
      /* the model's reasoning, sent back: its text parts, for the next assistant turn */
      json_t *c = json_object_get(it, "content");
      df_sbuf b = {0};
      size_t k;
      json_t *x;
      json_array_foreach(c, k, x) {
        const char *t = json_string_value(json_object_get(x, "text"));
        if (t) df_sbuf_addstr(&b, t);
      }
      json_decref(*pending);
      *pending = json_stringn(b.p ? b.p : "", b.n);
      df_sbuf_free(&b);
    } else {
      snprintf(p, sizeof p, "input[%zu].type", i);
      return BAD(e, p, "input item type '%.40s' is not supported (message, function_call, "
                       "function_call_output, reasoning)", type);
    }
  }
  return 0;
}

/* (a reasoning item still waiting for its assistant turn is dropped with
 * the rest on every path) */
static int input_items(json_t *msgs, const json_t *input, df_serve_err *e) {
  json_t *pending = NULL;
  int rc = input_items_(msgs, input, &pending, e);
  json_decref(pending);
  return rc;
}

/* Responses tools ({type, name, description, parameters, strict}) as chat's. */
static json_t *tools_of(const json_t *tools, df_serve_err *e) {
  if (!json_is_array(tools)) {
    BAD(e, "tools", "'tools' must be an array");
    return NULL;
  }
  json_t *out = json_array();
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    char p[128];
    snprintf(p, sizeof p, "tools[%zu].type", i);
    const char *type = json_string_value(json_object_get(t, "type"));
    if (!type || strcmp(type, "function")) {
      json_decref(out);
      BAD(e, p, "tool type '%.40s' is not supported (function tools only)", type ? type : "(none)");
      return NULL;
    }
    json_t *fn = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(t, k, v) {
      if (!strcmp(k, "type") || !strcmp(k, "strict")) continue; /* strict: the grammar is strict */
      if (strcmp(k, "name") && strcmp(k, "description") && strcmp(k, "parameters")) {
        json_decref(fn);
        json_decref(out);
        snprintf(p, sizeof p, "tools[%zu].%.40s", i, k);
        BAD(e, p, "unrecognized field '%s' in a function tool", k);
        return NULL;
      }
      json_object_set(fn, k, v);
    }
    json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
  }
  return out;
}

int df_serve_responses_parse(const char *body, size_t len, df_resp_lookup lookup, void *ud,
                             df_resp_req *out, df_serve_err *err) {
  memset(out, 0, sizeof *out);
  out->store = 1;
  if (!df_utf8_valid(body, len)) return BAD(err, NULL, "the request body is not valid UTF-8");
  json_error_t je;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return BAD(err, NULL, "the request body is not valid JSON: %s (line %d, column %d)", je.text,
               je.line, je.column);
  int rc = -1;
  json_t *chat = json_object(), *msgs = json_array(), *echo = json_object();
  const json_t *input = NULL, *instructions = NULL, *prev = NULL;
  if (!json_is_object(root)) {
    BAD(err, NULL, "the request body must be a JSON object");
    goto done;
  }
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    if (json_is_null(v) && strcmp(k, "input")) continue; /* null: the default */
    if (!strcmp(k, "input")) {
      input = v;
    } else if (!strcmp(k, "instructions")) {
      if (df_req_want_str(v, k, err)) goto done;
      instructions = v;
      json_object_set(echo, k, v);
    } else if (!strcmp(k, "previous_response_id")) {
      if (df_req_want_str(v, k, err)) goto done;
      prev = v;
      json_object_set(echo, k, v);
    } else if (!strcmp(k, "model") || !strcmp(k, "temperature") || !strcmp(k, "top_p") ||
               !strcmp(k, "parallel_tool_calls") || !strcmp(k, "user") ||
               !strcmp(k, "metadata") || !strcmp(k, "safety_identifier") ||
               !strcmp(k, "prompt_cache_key") || !strcmp(k, "tool_choice") || !strcmp(k, "seed") ||
               !strcmp(k, "top_k") || !strcmp(k, "min_p") || !strcmp(k, "chat_template_kwargs")) {
      /* the same meaning as in chat completions (checked there) */
      json_object_set(chat, k, v);
      if (strcmp(k, "model")) json_object_set(echo, k, v);
    } else if (!strcmp(k, "max_output_tokens")) {
      json_object_set(chat, "max_completion_tokens", v);
      json_object_set(echo, k, v);
    } else if (!strcmp(k, "stream")) {
      if (df_req_want_bool(v, k, &out->stream, err)) goto done;
      json_object_set(chat, k, v);
    } else if (!strcmp(k, "store")) {
      if (df_req_want_bool(v, k, &out->store, err)) goto done;
      json_object_set(echo, k, v);
    } else if (!strcmp(k, "tools")) {
      json_t *t = tools_of(v, err);
      if (!t) goto done;
      json_object_set_new(chat, "tools", t);
      json_object_set(echo, k, v);
    } else if (!strcmp(k, "reasoning")) {
      json_t *eff = json_object_get(v, "effort"), *sum = json_object_get(v, "summary");
      if (!json_is_object(v)) {
        BAD(err, k, "'reasoning' must be an object");
        goto done;
      }
      if (sum && !json_is_null(sum)) {
        df_req_unsupported("reasoning.summary", "reasoning is returned whole, not summarised", err);
        goto done;
      }
      if (eff && !json_is_null(eff)) json_object_set(chat, "reasoning_effort", eff);
      json_object_set(echo, k, v);
    } else if (!strcmp(k, "text")) {
      const json_t *f = json_object_get(v, "format");
      const char *ft = json_string_value(json_object_get(f, "type"));
      if (!json_is_object(v) || (json_object_size(v) > (f ? 1u : 0u))) {
        BAD(err, "text", "'text' may only hold 'format'");
        goto done;
      }
      if (ft && !strcmp(ft, "json_schema")) {
        json_t *js = json_object();
        const char *fk;
        json_t *fv;
        json_object_foreach((json_t *)f, fk, fv) if (strcmp(fk, "type")) json_object_set(js, fk, fv);
        json_object_set_new(chat, "response_format",
                            json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
      } else if (ft && !strcmp(ft, "json_object")) {
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
      } else if (f && !(ft && !strcmp(ft, "text"))) {
        BAD(err, "text.format.type", "'text.format.type' must be text, json_object or json_schema");
        goto done;
      }
      json_object_set(echo, k, v);
    } else if (!strcmp(k, "truncation")) {
      if (!json_is_string(v) || strcmp(json_string_value(v), "disabled")) {
        df_req_unsupported(k, "only \"disabled\" (a prompt past the context is refused)", err);
        goto done;
      }
    } else if (!strcmp(k, "background") || !strcmp(k, "include") || !strcmp(k, "conversation") ||
               !strcmp(k, "prompt") || !strcmp(k, "max_tool_calls") || !strcmp(k, "service_tier") ||
               !strcmp(k, "top_logprobs") || !strcmp(k, "stream_options")) {
      int off = (json_is_false(v)) || (json_is_array(v) && !json_array_size(v)) ||
                (!strcmp(k, "service_tier") && json_is_string(v) &&
                 (!strcmp(json_string_value(v), "auto") || !strcmp(json_string_value(v), "default")));
      if (!off) {
        df_req_unsupported(k, "only the default is implemented", err);
        goto done;
      }
    } else {
      BAD(err, k, "Unrecognized request argument supplied: %s", k);
      goto done;
    }
  }
  if (!input || json_is_null(input)) {
    BAD(err, "input", "'input' is required");
    goto done;
  }
  if (prev) {
    char *h = lookup ? lookup(ud, json_string_value(prev)) : NULL;
    json_t *hist = h ? json_loads(h, 0, NULL) : NULL;
    free(h);
    if (!json_is_array(hist)) {
      json_decref(hist);
      BAD(err, "previous_response_id", "Previous response with id '%.100s' not found.",
          json_string_value(prev));
      goto done;
    }
    json_array_extend(msgs, hist);
    json_decref(hist);
  }
  if (input_items(msgs, input, err)) goto done;
  /* instructions apply to this response only: not part of the kept history */
  json_t *all = json_array();
  if (instructions) json_array_append_new(all, json_pack("{s:s,s:O}", "role", "system", "content", instructions));
  json_array_extend(all, msgs);
  json_object_set_new(chat, "messages", all);
  if (out->stream)
    json_object_set_new(chat, "stream_options", json_pack("{s:b}", "include_usage", 1));
  out->chat = json_dumps(chat, JSON_COMPACT);
  out->history = json_incref(msgs);
  out->echo = json_incref(echo);
  rc = 0;
done:
  json_decref(root);
  json_decref(chat);
  json_decref(msgs);
  json_decref(echo);
  return rc;
}

/* ---- the Response object ---- */

static void rand_id(char *id, size_t cap, const char *prefix) {
  static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char r[24];
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
    for (size_t i = 0; i < sizeof r; i++) r[i] = (unsigned char)(rand() & 0xff);
  size_t n = (size_t)snprintf(id, cap, "%s", prefix);
  for (size_t i = 0; i < sizeof r && n + 1 < cap; i++) id[n++] = al[r[i] % (sizeof al - 1)];
  id[n < cap ? n : cap - 1] = 0;
}

void df_resp_new_id(char *id, size_t cap) { rand_id(id, cap, "resp_"); }

static json_t *jstrn(const char *p, size_t n) {
  json_t *s = json_stringn(p ? p : "", p ? n : 0);
  return s ? s : json_string("");
}

static json_t *reasoning_item(const char *id, const char *text, size_t n) {
  return json_pack("{s:s,s:s,s:[],s:[{s:s,s:o}],s:s}", "type", "reasoning", "id", id, "summary",
                   "content", "type", "reasoning_text", "text", jstrn(text, n), "status",
                   "completed");
}

static json_t *message_item(const char *id, const char *text, size_t n, const char *status) {
  return json_pack("{s:s,s:s,s:s,s:s,s:[{s:s,s:o,s:[]}]}", "type", "message", "id", id, "status",
                   status, "role", "assistant", "content", "type", "output_text", "text",
                   jstrn(text, n), "annotations");
}

static json_t *call_item(const char *id, const df_serve_call *c, const char *status) {
  return json_pack("{s:s,s:s,s:s,s:o,s:o,s:s}", "type", "function_call", "id", id, "call_id", c->id,
                   "name", jstrn(c->name, c->nname), "arguments", jstrn(c->args, c->nargs),
                   "status", status);
}

static json_t *usage_of(const df_serve_usage *u) {
  return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", (json_int_t)u->prompt,
                   "input_tokens_details", "cached_tokens", (json_int_t)u->cached, "output_tokens",
                   (json_int_t)u->completion, "output_tokens_details", "reasoning_tokens",
                   (json_int_t)u->reasoning, "total_tokens", (json_int_t)(u->prompt + u->completion));
}

/* The shell every Response has; output and usage are filled by the caller. */
static json_t *response_shell(const char *id, long long created, const char *model,
                              const df_resp_req *q, const char *status) {
  json_t *r = json_pack("{s:s,s:s,s:I,s:s,s:s,s:n,s:n,s:[],s:n,s:s}", "id", id, "object", "response",
                        "created_at", (json_int_t)created, "status", status, "model", model, "error",
                        "incomplete_details", "output", "usage", "truncation", "disabled");
  static const char *const dflt[][2] = {{"instructions", "null"},     {"previous_response_id", "null"},
                                        {"tools", "[]"},              {"tool_choice", "\"auto\""},
                                        {"parallel_tool_calls", "true"}, {"temperature", "0"},
                                        {"top_p", "1"},               {"max_output_tokens", "null"},
                                        {"metadata", "{}"},           {"store", "true"},
                                        {"text", "{\"format\":{\"type\":\"text\"}}"},
                                        {"reasoning", "{\"effort\":null,\"summary\":null}"},
                                        {"user", "null"}};
  for (size_t i = 0; i < sizeof dflt / sizeof dflt[0]; i++) {
    json_t *v = q && q->echo ? json_object_get(q->echo, dflt[i][0]) : NULL;
    json_object_set_new(r, dflt[i][0], v ? json_incref(v) : json_loads(dflt[i][1], JSON_DECODE_ANY, NULL));
  }
  return r;
}

/* Output items of a result: reasoning, then the message (when it has text or
 * nothing else), then the calls. Item ids are derived from the response's. */
static json_t *output_of(const char *id, const df_resp_result *res) {
  json_t *out = json_array();
  const char *suffix = strchr(id, '_') ? strchr(id, '_') + 1 : id;
  char iid[96];
  if (res->nreasoning) {
    snprintf(iid, sizeof iid, "rs_%s", suffix);
    json_array_append_new(out, reasoning_item(iid, res->reasoning, res->nreasoning));
  }
  if (res->ncontent || (!res->ncalls && !res->nreasoning)) {
    snprintf(iid, sizeof iid, "msg_%s", suffix);
    const char *st = res->finish && !strcmp(res->finish, "length") ? "incomplete" : "completed";
    json_array_append_new(out, message_item(iid, res->content, res->ncontent, st));
  }
  for (size_t i = 0; i < res->ncalls; i++) {
    snprintf(iid, sizeof iid, "fc_%zu_%s", i, suffix);
    json_array_append_new(out, call_item(iid, &res->calls[i], "completed"));
  }
  return out;
}

static void finish_status(json_t *r, const df_resp_result *res) {
  if (res->finish && !strcmp(res->finish, "length")) {
    json_object_set_new(r, "status", json_string("incomplete"));
    json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
  }
}

char *df_serve_responses_object(const char *id, long long created, const char *model,
                                const df_resp_req *q, const df_resp_result *res) {
  json_t *r = response_shell(id, created, model, q, "completed");
  json_object_set_new(r, "output", output_of(id, res));
  json_object_set_new(r, "usage", usage_of(&res->usage));
  finish_status(r, res);
  char *s = json_dumps(r, JSON_COMPACT);
  json_decref(r);
  return s;
}

char *df_serve_responses_history(const df_resp_req *q, const df_resp_result *res) {
  json_t *h = json_copy(q->history);
  json_t *m = json_pack("{s:s,s:o}", "role", "assistant", "content", jstrn(res->content, res->ncontent));
  if (res->nreasoning) json_object_set_new(m, "reasoning_content", jstrn(res->reasoning, res->nreasoning));
  if (res->ncalls) {
    json_t *calls = json_array();
    for (size_t i = 0; i < res->ncalls; i++)
      json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:o,s:o}}", "id", res->calls[i].id, "type",
                                             "function", "function", "name",
                                             jstrn(res->calls[i].name, res->calls[i].nname),
                                             "arguments", jstrn(res->calls[i].args, res->calls[i].nargs)));
    json_object_set_new(m, "tool_calls", calls);
  }
  json_array_append_new(h, m);
  char *s = json_dumps(h, JSON_COMPACT);
  json_decref(h);
  return s;
}

/* ---- the stream ---- */

#define MAX_CALLS DF_RESP_MAX_CALLS
struct df_resp_stream {
  char id[64], model[128];
  long long created;
  const df_resp_req *q;
  long seq;
  int started, ended, failed;
  int open; /* the item being written: 0 none, 'r' reasoning, 'm' message, 'c' a call */
  int nitems; /* output items begun */
  df_sbuf reasoning, content;
  struct {
    df_serve_call c;
    df_sbuf name, args;
    int item;
  } calls[MAX_CALLS];
  int ncalls;
  int item_r, item_m; /* their output indexes */
  char finish[16];
  df_serve_usage usage;
  df_sbuf pending; /* a chat frame cut between two feeds */
};

df_resp_stream *df_resp_stream_new(const char *id, long long created, const char *model,
                                   const df_resp_req *q) {
  df_resp_stream *s = df_xcalloc(1, sizeof *s);
  snprintf(s->id, sizeof s->id, "%s", id);
  snprintf(s->model, sizeof s->model, "%s", model);
  s->created = created;
  s->q = q;
  s->item_r = s->item_m = -1;
  return s;
}

void df_resp_stream_free(df_resp_stream *s) {
  if (!s) return;
  df_sbuf_free(&s->reasoning);
  df_sbuf_free(&s->content);
  for (int i = 0; i < s->ncalls; i++) {
    df_sbuf_free(&s->calls[i].name);
    df_sbuf_free(&s->calls[i].args);
  }
  df_sbuf_free(&s->pending);
  free(s);
}

static void event(df_resp_stream *s, df_sbuf *out, const char *type, json_t *o) {
  json_object_set_new(o, "type", json_string(type));
  json_object_set_new(o, "sequence_number", json_integer(s->seq++));
  char *d = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  df_sbuf_addstr(out, "event: ");
  df_sbuf_addstr(out, type);
  df_sbuf_addstr(out, "\ndata: ");
  df_sbuf_addstr(out, d);
  df_sbuf_addstr(out, "\n\n");
  free(d);
}

static const char *suffix(const df_resp_stream *s) {
  const char *u = strchr(s->id, '_');
  return u ? u + 1 : s->id;
}

static void item_id(const df_resp_stream *s, int kind, int k, char *out, size_t cap) {
  if (kind == 'r') snprintf(out, cap, "rs_%s", suffix(s));
  else if (kind == 'm') snprintf(out, cap, "msg_%s", suffix(s));
  else snprintf(out, cap, "fc_%d_%s", k, suffix(s));
}

static void result_of(const df_resp_stream *s, df_resp_result *res, df_serve_call *calls) {
  memset(res, 0, sizeof *res);
  res->reasoning = s->reasoning.p;
  res->nreasoning = s->reasoning.n;
  res->content = s->content.p;
  res->ncontent = s->content.n;
  for (int i = 0; i < s->ncalls; i++) {
    calls[i] = s->calls[i].c;
    calls[i].name = s->calls[i].name.p ? s->calls[i].name.p : "";
    calls[i].nname = s->calls[i].name.n;
    calls[i].args = s->calls[i].args.p ? s->calls[i].args.p : "";
    calls[i].nargs = s->calls[i].args.n;
  }
  res->calls = calls;
  res->ncalls = (size_t)s->ncalls;
  res->finish = s->finish[0] ? s->finish : NULL;
  res->usage = s->usage;
}

/* Closes the item being written: its done events. */
static void close_item(df_resp_stream *s, df_sbuf *out) {
  char iid[96];
  if (s->open == 'r') {
    item_id(s, 'r', 0, iid, sizeof iid);
    json_t *t = jstrn(s->reasoning.p, s->reasoning.n);
    event(s, out, "response.reasoning_text.done",
          json_pack("{s:s,s:i,s:i,s:O}", "item_id", iid, "output_index", s->item_r, "content_index", 0, "text", t));
    event(s, out, "response.content_part.done",
          json_pack("{s:s,s:i,s:i,s:{s:s,s:O}}", "item_id", iid, "output_index", s->item_r,
                    "content_index", 0, "part", "type", "reasoning_text", "text", t));
    event(s, out, "response.output_item.done",
          json_pack("{s:i,s:o}", "output_index", s->item_r, "item", reasoning_item(iid, s->reasoning.p, s->reasoning.n)));
    json_decref(t);
  } else if (s->open == 'm') {
    item_id(s, 'm', 0, iid, sizeof iid);
    json_t *t = jstrn(s->content.p, s->content.n);
    event(s, out, "response.output_text.done",
          json_pack("{s:s,s:i,s:i,s:O,s:[]}", "item_id", iid, "output_index", s->item_m, "content_index", 0, "text", t,
                    "logprobs"));
    event(s, out, "response.content_part.done",
          json_pack("{s:s,s:i,s:i,s:{s:s,s:O,s:[]}}", "item_id", iid, "output_index", s->item_m,
                    "content_index", 0, "part", "type", "output_text", "text", t, "annotations"));
    event(s, out, "response.output_item.done",
          json_pack("{s:i,s:o}", "output_index", s->item_m, "item",
                    message_item(iid, s->content.p, s->content.n,
                                 !strcmp(s->finish, "length") ? "incomplete" : "completed")));
    json_decref(t);
  } else if (s->open == 'c') {
    int k = s->ncalls - 1;
    item_id(s, 'c', k, iid, sizeof iid);
    df_serve_call c = s->calls[k].c;
    c.name = s->calls[k].name.p ? s->calls[k].name.p : "";
    c.nname = s->calls[k].name.n;
    c.args = s->calls[k].args.p ? s->calls[k].args.p : "";
    c.nargs = s->calls[k].args.n;
    event(s, out, "response.function_call_arguments.done",
          json_pack("{s:s,s:i,s:o}", "item_id", iid, "output_index", s->calls[k].item, "arguments",
                    jstrn(c.args, c.nargs)));
    event(s, out, "response.output_item.done",
          json_pack("{s:i,s:o}", "output_index", s->calls[k].item, "item", call_item(iid, &c, "completed")));
  }
  s->open = 0;
}

static void open_item(df_resp_stream *s, df_sbuf *out, int kind) {
  close_item(s, out);
  char iid[96];
  int k = s->ncalls - 1;
  item_id(s, kind, k, iid, sizeof iid);
  int idx = s->nitems++;
  if (kind == 'r') {
    s->item_r = idx;
    json_t *it = json_pack("{s:s,s:s,s:[],s:[],s:s}", "type", "reasoning", "id", iid, "summary",
                           "content", "status", "in_progress");
    event(s, out, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", idx, "item", it));
    event(s, out, "response.content_part.added",
          json_pack("{s:s,s:i,s:i,s:{s:s,s:s}}", "item_id", iid, "output_index", idx, "content_index", 0,
                    "part", "type", "reasoning_text", "text", ""));
  } else if (kind == 'm') {
    s->item_m = idx;
    json_t *it = json_pack("{s:s,s:s,s:s,s:s,s:[]}", "type", "message", "id", iid, "status",
                           "in_progress", "role", "assistant", "content");
    event(s, out, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", idx, "item", it));
    event(s, out, "response.content_part.added",
          json_pack("{s:s,s:i,s:i,s:{s:s,s:s,s:[]}}", "item_id", iid, "output_index", idx,
                    "content_index", 0, "part", "type", "output_text", "text", "", "annotations"));
  } else {
    s->calls[k].item = idx;
    json_t *it = json_pack("{s:s,s:s,s:s,s:o,s:s,s:s}", "type", "function_call", "id", iid, "call_id",
                           s->calls[k].c.id, "name",
                           jstrn(s->calls[k].name.p, s->calls[k].name.n), "arguments", "", "status",
                           "in_progress");
    event(s, out, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", idx, "item", it));
  }
  s->open = kind;
}

static void text_delta(df_resp_stream *s, df_sbuf *out, int kind, const char *t, size_t n) {
  if (!n) return;
  if (s->open != kind) open_item(s, out, kind);
  char iid[96];
  item_id(s, kind, 0, iid, sizeof iid);
  df_sbuf_add(kind == 'r' ? &s->reasoning : &s->content, t, n);
  event(s, out, kind == 'r' ? "response.reasoning_text.delta" : "response.output_text.delta",
        kind == 'r' ? json_pack("{s:s,s:i,s:i,s:o}", "item_id", iid, "output_index", s->item_r,
                                "content_index", 0, "delta", jstrn(t, n))
                    : json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", iid, "output_index", s->item_m,
                                "content_index", 0, "delta", jstrn(t, n), "logprobs"));
}

static void start(df_resp_stream *s, df_sbuf *out) {
  if (s->started) return;
  s->started = 1;
  json_t *r = response_shell(s->id, s->created, s->model, s->q, "in_progress");
  event(s, out, "response.created", json_pack("{s:O}", "response", r));
  event(s, out, "response.in_progress", json_pack("{s:o}", "response", r));
}

static void chunk(df_resp_stream *s, const json_t *c, df_sbuf *out) {
  const json_t *u = json_object_get(c, "usage");
  if (json_is_object(u)) {
    s->usage.prompt = (long)json_integer_value(json_object_get(u, "prompt_tokens"));
    s->usage.completion = (long)json_integer_value(json_object_get(u, "completion_tokens"));
    s->usage.cached = (long)json_integer_value(
        json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    s->usage.reasoning = (long)json_integer_value(
        json_object_get(json_object_get(u, "completion_tokens_details"), "reasoning_tokens"));
  }
  const json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
  if (!ch) return;
  const json_t *d = json_object_get(ch, "delta");
  const json_t *r = json_object_get(d, "reasoning_content"), *t = json_object_get(d, "content");
  if (json_is_string(r)) text_delta(s, out, 'r', json_string_value(r), json_string_length(r));
  if (json_is_string(t)) text_delta(s, out, 'm', json_string_value(t), json_string_length(t));
  size_t i;
  json_t *tc;
  json_array_foreach(json_object_get(d, "tool_calls"), i, tc) {
    const json_t *fn = json_object_get(tc, "function");
    const json_t *id = json_object_get(tc, "id"), *args = json_object_get(fn, "arguments");
    if (json_is_string(id) && s->ncalls < MAX_CALLS) { /* a new call */
      int k = s->ncalls++;
      snprintf(s->calls[k].c.id, sizeof s->calls[k].c.id, "%s", json_string_value(id));
      const json_t *name = json_object_get(fn, "name");
      df_sbuf_add(&s->calls[k].name, json_string_value(name) ? json_string_value(name) : "",
                  json_string_length(name));
      open_item(s, out, 'c');
    }
    if (json_is_string(args) && json_string_length(args) && s->ncalls && s->open == 'c') {
      int k = s->ncalls - 1;
      char iid[96];
      item_id(s, 'c', k, iid, sizeof iid);
      df_sbuf_add(&s->calls[k].args, json_string_value(args), json_string_length(args));
      event(s, out, "response.function_call_arguments.delta",
            json_pack("{s:s,s:i,s:O}", "item_id", iid, "output_index", s->calls[k].item, "delta", args));
    }
  }
  const char *fin = json_string_value(json_object_get(ch, "finish_reason"));
  if (fin) snprintf(s->finish, sizeof s->finish, "%s", fin);
}

static void done(df_resp_stream *s, df_sbuf *out) {
  close_item(s, out);
  df_resp_result res;
  df_serve_call calls[MAX_CALLS];
  result_of(s, &res, calls);
  if (!res.nreasoning && !res.ncontent && !res.ncalls) { /* an empty message is still one */
    open_item(s, out, 'm');
    close_item(s, out);
  }
  json_t *r = response_shell(s->id, s->created, s->model, s->q, "completed");
  json_object_set_new(r, "output", output_of(s->id, &res));
  json_object_set_new(r, "usage", usage_of(&res.usage));
  finish_status(r, &res);
  int incomplete = !strcmp(json_string_value(json_object_get(r, "status")), "incomplete");
  event(s, out, incomplete ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", r));
  s->ended = 1;
}

static void frame(df_resp_stream *s, const char *p, size_t n, df_sbuf *out) {
  if (n < 6 || memcmp(p, "data: ", 6)) return; /* SSE comments (probes) carry nothing */
  p += 6;
  n -= 6;
  if (n == 6 && !memcmp(p, "[DONE]", 6)) {
    if (!s->failed && !s->ended) done(s, out);
    return;
  }
  json_t *c = json_loadb(p, n, 0, NULL);
  if (!c) return;
  const json_t *err = json_object_get(c, "error");
  if (err) {
    /* the generation failed (or the server is shutting down) */
    close_item(s, out);
    event(s, out, "error",
          json_pack("{s:O,s:O,s:O}", "code", json_object_get(err, "code") ? json_object_get(err, "code") : json_null(),
                    "message", json_object_get(err, "message") ? json_object_get(err, "message") : json_string(""),
                    "param", json_object_get(err, "param") ? json_object_get(err, "param") : json_null()));
    s->failed = 1;
  } else if (!s->failed) {
    chunk(s, c, out);
  }
  json_decref(c);
}

void df_resp_stream_feed(df_resp_stream *s, const char *frames, size_t n, df_sbuf *out) {
  start(s, out);
  df_sbuf_add(&s->pending, frames, n);
  size_t off = 0;
  for (;;) {
    const char *p = s->pending.p + off;
    size_t left = s->pending.n - off;
    const char *end = left >= 2 ? memmem(p, left, "\n\n", 2) : NULL;
    if (!end) break;
    frame(s, p, (size_t)(end - p), out);
    off += (size_t)(end - p) + 2;
  }
  if (off) {
    memmove(s->pending.p, s->pending.p + off, s->pending.n - off);
    s->pending.n -= off;
  }
}

int df_resp_stream_result(const df_resp_stream *s, df_resp_result *res, df_serve_call *calls) {
  if (!s->ended || s->failed) return 0;
  result_of(s, res, calls);
  return 1;
}

#include "serve/response.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/util.h"

void df_serve_meta_init(df_serve_meta *m, df_serve_kind kind, const char *model, long long created) {
  static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char r[24];
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
    /* no entropy source: ids only need to be unique per server, not secret */
    static unsigned long long ctr;
    unsigned long long x = (unsigned long long)time(NULL) * 1000003ull + __atomic_add_fetch(&ctr, 1, __ATOMIC_RELAXED);
    for (size_t i = 0; i < sizeof r; i++) r[i] = (unsigned char)(x >> (i % 8 * 8)) ^ (unsigned char)i;
  }
  memset(m, 0, sizeof *m);
  m->kind = kind;
  m->model = model;
  m->created = created;
  const char *pre = kind == DF_SERVE_CHAT ? "chatcmpl-" : "cmpl-";
  size_t o = strlen(pre);
  memcpy(m->id, pre, o);
  for (size_t i = 0; i < sizeof r; i++) m->id[o + i] = al[r[i] % (sizeof al - 1)];
  m->id[o + sizeof r] = 0;
}

char *df_serve_utf8_sanitize(const char *s, size_t len, size_t *outlen) {
  df_sbuf b = {0};
  size_t i = 0;
  while (i < len) {
    size_t j = i;
    /* longest valid run */
    while (j < len) {
      unsigned char c = (unsigned char)s[j];
      size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
      if (!n || j + n > len || !df_utf8_valid(s + j, n)) break;
      j += n;
    }
    df_sbuf_add(&b, s + i, j - i);
    if (j < len) {
      df_sbuf_add(&b, "\xEF\xBF\xBD", 3);
      j++;
    }
    i = j;
  }
  if (!b.p) df_sbuf_add(&b, "", 0);
  *outlen = b.n;
  return b.p;
}

/* A JSON string from bytes that should be UTF-8; repaired if they are not,
 * so a response is never dropped for one bad byte. */
static json_t *jstr(const char *s, size_t n) {
  if (!s) return json_string("");
  json_t *v = json_stringn(s, n);
  if (v) return v;
  size_t m;
  char *fix = df_serve_utf8_sanitize(s, n, &m);
  v = json_stringn(fix, m);
  free(fix);
  return v ? v : json_string("");
}

static char *dump(json_t *v) {
  char *s = json_dumps(v, JSON_COMPACT);
  json_decref(v);
  if (!s) abort(); /* only on out of memory */
  return s;
}

static void add_frame(df_sbuf *out, json_t *v) {
  char *s = dump(v);
  df_sbuf_add(out, "data: ", 6);
  df_sbuf_addstr(out, s);
  df_sbuf_add(out, "\n\n", 2);
  free(s);
}

static json_t *err_obj(const df_serve_err *e) {
  json_t *o = json_object();
  json_object_set_new(o, "message", jstr(e->msg, strlen(e->msg)));
  json_object_set_new(o, "type", json_string(e->type ? e->type : "invalid_request_error"));
  json_object_set_new(o, "param", e->param[0] ? jstr(e->param, strlen(e->param)) : json_null());
  json_object_set_new(o, "code", e->code ? json_string(e->code) : json_null());
  json_t *r = json_object();
  json_object_set_new(r, "error", o);
  return r;
}

char *df_serve_error_json(const df_serve_err *e) { return dump(err_obj(e)); }

static json_t *head(const df_serve_meta *m, const char *object) {
  json_t *o = json_object();
  json_object_set_new(o, "id", json_string(m->id));
  json_object_set_new(o, "object", json_string(object));
  json_object_set_new(o, "created", json_integer(m->created));
  json_object_set_new(o, "model", jstr(m->model, strlen(m->model)));
  return o;
}

static json_t *usage_obj(const df_serve_usage *u, df_serve_kind kind) {
  json_t *o = json_object();
  json_object_set_new(o, "prompt_tokens", json_integer(u->prompt));
  json_object_set_new(o, "completion_tokens", json_integer(u->completion));
  json_object_set_new(o, "total_tokens", json_integer(u->prompt + u->completion));
  json_t *pd = json_object(); /* OpenAI's field for prompt caching */
  json_object_set_new(pd, "cached_tokens", json_integer(u->cached));
  json_object_set_new(o, "prompt_tokens_details", pd);
  json_t *d = json_object();
  if (kind == DF_SERVE_CHAT) json_object_set_new(d, "reasoning_tokens", json_integer(u->reasoning));
  /* OpenAI's fields for predicted tokens: the drafts the target kept / threw away */
  json_object_set_new(d, "accepted_prediction_tokens", json_integer(u->accepted));
  json_object_set_new(d, "rejected_prediction_tokens", json_integer(u->drafted - u->accepted));
  json_object_set_new(o, "completion_tokens_details", d);
  const df_serve_spec *sp = u->spec;
  if (sp && sp->draft) {
    json_t *s = json_object(), *bl = json_array(), *aa = json_array();
    int top = 0;
    for (int k = 0; k < DF_SERVE_SPEC_MAX; k++)
      if (sp->block_len[k]) top = k + 1;
    for (int k = 0; k < top; k++) {
      json_array_append_new(bl, json_integer(sp->block_len[k]));
      json_array_append_new(aa, json_integer(sp->acc_at[k]));
    }
    json_object_set_new(s, "draft", json_string(sp->draft));
    json_object_set_new(s, "blocks", json_integer(sp->blocks));
    json_object_set_new(s, "drafted", json_integer(u->drafted));
    json_object_set_new(s, "accepted", json_integer(u->accepted));
    json_object_set_new(s, "block_lengths", bl);
    json_object_set_new(s, "accepted_at", aa);
    json_object_set_new(o, "deltafin_speculation", s);
  }
  return o;
}

static json_t *bytes_arr(const uint8_t *p, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(p[i]));
  return a;
}

/* chat: {"content":[...],"refusal":null}; completions: the legacy columns */
static json_t *lp_obj(df_serve_kind kind, const df_serve_lp *lp, size_t nlp, size_t text_offset) {
  json_t *o = json_object();
  if (kind == DF_SERVE_CHAT) {
    json_t *arr = json_array();
    for (size_t i = 0; i < nlp; i++) {
      json_t *e = json_object();
      json_object_set_new(e, "token", jstr((const char *)lp[i].p, lp[i].n));
      json_object_set_new(e, "logprob", json_real(lp[i].lp));
      json_object_set_new(e, "bytes", bytes_arr(lp[i].p, lp[i].n));
      json_t *top = json_array();
      for (int k = 0; k < lp[i].ntop; k++) {
        json_t *t = json_object();
        json_object_set_new(t, "token", jstr((const char *)lp[i].top[k].p, lp[i].top[k].n));
        json_object_set_new(t, "logprob", json_real(lp[i].top[k].lp));
        json_object_set_new(t, "bytes", bytes_arr(lp[i].top[k].p, lp[i].top[k].n));
        json_array_append_new(top, t);
      }
      json_object_set_new(e, "top_logprobs", top);
      json_array_append_new(arr, e);
    }
    json_object_set_new(o, "content", arr);
    json_object_set_new(o, "refusal", json_null());
    return o;
  }
  json_t *tokens = json_array(), *tlp = json_array(), *top = json_array(), *off = json_array();
  for (size_t i = 0; i < nlp; i++) {
    json_array_append_new(tokens, jstr((const char *)lp[i].p, lp[i].n));
    json_array_append_new(tlp, json_real(lp[i].lp));
    json_t *d = json_object();
    for (int k = 0; k < lp[i].ntop; k++) {
      json_t *key = jstr((const char *)lp[i].top[k].p, lp[i].top[k].n);
      json_object_set_new(d, json_string_value(key), json_real(lp[i].top[k].lp));
      json_decref(key);
    }
    json_array_append_new(top, d);
    json_array_append_new(off, json_integer((json_int_t)text_offset));
    text_offset += lp[i].n;
  }
  json_object_set_new(o, "tokens", tokens);
  json_object_set_new(o, "token_logprobs", tlp);
  json_object_set_new(o, "top_logprobs", top);
  json_object_set_new(o, "text_offset", off);
  return o;
}

void df_serve_sse_delta_lp(df_sbuf *out, const df_serve_meta *m, int index, const char *role,
                           const char *field, const char *text, size_t len, const char *finish,
                           const df_serve_lp *lp, size_t nlp, int want_lp, size_t text_offset) {
  int chat = m->kind == DF_SERVE_CHAT;
  json_t *o = head(m, chat ? "chat.completion.chunk" : "text_completion");
  json_t *c = json_object();
  json_object_set_new(c, "index", json_integer(index));
  if (chat) {
    json_t *d = json_object();
    if (role) json_object_set_new(d, "role", json_string(role));
    if (text) json_object_set_new(d, field, jstr(text, len));
    json_object_set_new(c, "delta", d);
  } else {
    json_object_set_new(c, "text", jstr(text, text ? len : 0));
  }
  json_object_set_new(c, "logprobs",
                      want_lp && nlp ? lp_obj(m->kind, lp, nlp, text_offset) : json_null());
  json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
  json_t *arr = json_array();
  json_array_append_new(arr, c);
  json_object_set_new(o, "choices", arr);
  if (m->include_usage) json_object_set_new(o, "usage", json_null());
  add_frame(out, o);
}

void df_serve_sse_tool_delta(df_sbuf *out, const df_serve_meta *m, int index, int k,
                             const df_serve_call *first, const char *args, size_t nargs) {
  json_t *o = head(m, "chat.completion.chunk");
  json_t *c = json_object(), *d = json_object(), *tc = json_array(), *t = json_object(),
         *f = json_object();
  json_object_set_new(t, "index", json_integer(k));
  if (first) {
    json_object_set_new(t, "id", json_string(first->id));
    json_object_set_new(t, "type", json_string("function"));
    json_object_set_new(f, "name", jstr(first->name, first->nname));
  }
  json_object_set_new(f, "arguments", jstr(args ? args : "", args ? nargs : 0));
  json_object_set_new(t, "function", f);
  json_array_append_new(tc, t);
  json_object_set_new(d, "tool_calls", tc);
  json_object_set_new(c, "index", json_integer(index));
  json_object_set_new(c, "delta", d);
  json_object_set_new(c, "logprobs", json_null());
  json_object_set_new(c, "finish_reason", json_null());
  json_t *arr = json_array();
  json_array_append_new(arr, c);
  json_object_set_new(o, "choices", arr);
  if (m->include_usage) json_object_set_new(o, "usage", json_null());
  add_frame(out, o);
}

void df_serve_sse_delta(df_sbuf *out, const df_serve_meta *m, const char *role, const char *field,
                        const char *text, size_t len, const char *finish) {
  df_serve_sse_delta_lp(out, m, 0, role, field, text, len, finish, NULL, 0, 0, 0);
}

void df_serve_sse_usage(df_sbuf *out, const df_serve_meta *m, const df_serve_usage *u) {
  json_t *o = head(m, m->kind == DF_SERVE_CHAT ? "chat.completion.chunk" : "text_completion");
  json_object_set_new(o, "choices", json_array());
  json_object_set_new(o, "usage", usage_obj(u, m->kind));
  add_frame(out, o);
}

void df_serve_sse_error(df_sbuf *out, const df_serve_err *e) { add_frame(out, err_obj(e)); }

void df_serve_sse_done(df_sbuf *out) { df_sbuf_addstr(out, "data: [DONE]\n\n"); }

char *df_serve_response_choices_json(const df_serve_meta *m, const df_serve_choice *ch, int n,
                                     const df_serve_usage *u) {
  int chat = m->kind == DF_SERVE_CHAT;
  json_t *o = head(m, chat ? "chat.completion" : "text_completion");
  json_t *arr = json_array();
  for (int i = 0; i < n; i++) {
    json_t *c = json_object();
    json_object_set_new(c, "index", json_integer(i));
    if (chat) {
      json_t *msg = json_object();
      json_object_set_new(msg, "role", json_string("assistant"));
      json_object_set_new(msg, "content", jstr(ch[i].content, ch[i].ncontent));
      json_object_set_new(msg, "reasoning_content", jstr(ch[i].reasoning, ch[i].nreasoning));
      if (ch[i].ncalls) {
        json_t *tc = json_array();
        for (size_t k = 0; k < ch[i].ncalls; k++) {
          const df_serve_call *x = &ch[i].calls[k];
          json_t *t = json_object(), *f = json_object();
          json_object_set_new(t, "id", json_string(x->id));
          json_object_set_new(t, "type", json_string("function"));
          json_object_set_new(f, "name", jstr(x->name, x->nname));
          json_object_set_new(f, "arguments", jstr(x->args, x->nargs));
          json_object_set_new(t, "function", f);
          json_array_append_new(tc, t);
        }
        json_object_set_new(msg, "tool_calls", tc);
      }
      json_object_set_new(c, "message", msg);
    } else {
      json_object_set_new(c, "text", jstr(ch[i].content, ch[i].ncontent));
    }
    json_object_set_new(c, "logprobs",
                        ch[i].logprobs ? lp_obj(m->kind, ch[i].lp, ch[i].nlp, 0) : json_null());
    json_object_set_new(c, "finish_reason", json_string(ch[i].finish));
    json_array_append_new(arr, c);
  }
  json_object_set_new(o, "choices", arr);
  json_object_set_new(o, "usage", usage_obj(u, m->kind));
  return dump(o);
}

char *df_serve_response_json(const df_serve_meta *m, const char *reasoning, size_t nreasoning,
                             const char *content, size_t ncontent, const char *finish,
                             const df_serve_usage *u) {
  df_serve_choice c = {reasoning, nreasoning, content, ncontent, finish, NULL, 0, 0, NULL, 0};
  return df_serve_response_choices_json(m, &c, 1, u);
}

static json_t *model_obj(const char *id, long long created) {
  json_t *o = json_object();
  json_object_set_new(o, "id", jstr(id, strlen(id)));
  json_object_set_new(o, "object", json_string("model"));
  json_object_set_new(o, "created", json_integer(created));
  json_object_set_new(o, "owned_by", json_string("deltafin"));
  return o;
}

char *df_serve_models_json(const char *model_id, long long created) {
  json_t *o = json_object();
  json_object_set_new(o, "object", json_string("list"));
  json_t *arr = json_array();
  json_array_append_new(arr, model_obj(model_id, created));
  json_object_set_new(o, "data", arr);
  return dump(o);
}

char *df_serve_model_json(const char *model_id, long long created) {
  return dump(model_obj(model_id, created));
}

char *df_serve_health_json(const char *model_id, int busy, int queued, int queue_max) {
  json_t *o = json_object();
  json_object_set_new(o, "status", json_string("ok"));
  json_object_set_new(o, "model", jstr(model_id, strlen(model_id)));
  json_object_set_new(o, "busy", json_boolean(busy));
  json_object_set_new(o, "queue", json_integer(queued));
  json_object_set_new(o, "queue_max", json_integer(queue_max));
  return dump(o);
}

char *df_serve_tokens_json(const int *ids, size_t n, const uint8_t *const *pieces,
                           const size_t *piece_len) {
  json_t *o = json_object(), *arr = json_array();
  for (size_t i = 0; i < n; i++) {
    if (!pieces) {
      json_array_append_new(arr, json_integer(ids[i]));
      continue;
    }
    json_t *e = json_object();
    json_object_set_new(e, "id", json_integer(ids[i]));
    json_t *p = json_stringn((const char *)pieces[i], piece_len[i]);
    if (!p) {
      p = json_array();
      for (size_t k = 0; k < piece_len[i]; k++) json_array_append_new(p, json_integer(pieces[i][k]));
    }
    json_object_set_new(e, "piece", p);
    json_array_append_new(arr, e);
  }
  json_object_set_new(o, "tokens", arr);
  return dump(o);
}

char *df_serve_content_json(const char *text, size_t len) {
  json_t *o = json_object();
  json_object_set_new(o, "content", jstr(text, len));
  return dump(o);
}

static void metric(df_sbuf *b, const char *name, const char *type, const char *help) {
  char line[512];
  snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  df_sbuf_addstr(b, line);
}

static void value(df_sbuf *b, const char *name, const char *labels, double v) {
  char line[512];
  snprintf(line, sizeof line, "%s%s %.17g\n", name, labels ? labels : "", v);
  df_sbuf_addstr(b, line);
}

static double jnum(const json_t *o, const char *k) {
  const json_t *v = o ? json_object_get(o, k) : NULL;
  return v && json_is_number(v) ? json_number_value(v) : 0;
}

static const double hist_bounds[DF_SERVE_HIST_N - 1] = {0.05, 0.1, 0.25, 0.5, 1,  2.5,
                                                         5,    10,  30,   60,  120, 300};

void df_serve_hist_add(df_serve_hist *h, double seconds) {
  int i = 0;
  while (i < DF_SERVE_HIST_N - 1 && seconds > hist_bounds[i]) i++;
  h->le[i]++;
  h->count++;
  h->sum += seconds;
}

static void histogram(df_sbuf *b, const char *name, const char *help, const df_serve_hist *h) {
  char n[160], lab[64];
  metric(b, name, "histogram", help);
  unsigned long long cum = 0;
  snprintf(n, sizeof n, "%s_bucket", name);
  for (int i = 0; i < DF_SERVE_HIST_N; i++) {
    cum += h->le[i];
    if (i < DF_SERVE_HIST_N - 1) snprintf(lab, sizeof lab, "{le=\"%g\"}", hist_bounds[i]);
    else snprintf(lab, sizeof lab, "{le=\"+Inf\"}");
    value(b, n, lab, (double)cum);
  }
  snprintf(n, sizeof n, "%s_sum", name);
  value(b, n, NULL, h->sum);
  snprintf(n, sizeof n, "%s_count", name);
  value(b, n, NULL, (double)h->count);
}

char *df_serve_metrics_text(const df_serve_metrics *m, const char *stats_json) {
  df_sbuf b = {0};
  static const struct {
    const char *name, *type, *help;
  } defs[] = {
      {"deltafin_requests_total", "counter", "Generation requests run."},
      {"deltafin_prompt_tokens_total", "counter", "Prompt tokens of the requests run."},
      {"deltafin_prompt_tokens_cached_total", "counter",
       "Prompt tokens taken from a kept conversation state instead of prefilled."},
      {"deltafin_generated_tokens_total", "counter", "Tokens generated."},
      {"deltafin_draft_tokens_total", "counter", "Draft tokens proposed to verify blocks (--draft)."},
      {"deltafin_draft_tokens_accepted_total", "counter", "Draft tokens the model kept."},
      {"deltafin_draft_blocks_total", "counter", "Verify blocks run (--draft)."},
      {"deltafin_prefill_seconds_total", "counter", "Time spent prefilling prompts."},
      {"deltafin_decode_seconds_total", "counter", "Time spent generating tokens."},
      {"deltafin_busy", "gauge", "1 while a generation runs."},
      {"deltafin_queue_depth", "gauge", "Requests waiting for the generation."},
      {"deltafin_queue_max", "gauge", "Requests that may wait (--queue)."},
      {"deltafin_reuse_kept_states", "gauge", "Prompt states kept for conversation reuse."},
      {"deltafin_reuse_kept_bytes", "gauge", "Memory those kept states take."},
  };
  double vals[] = {(double)m->requests,   (double)m->prompt_tokens, (double)m->cached_tokens,
                   (double)m->gen_tokens, (double)m->drafted,       (double)m->accepted,
                   (double)m->blocks,
                   m->prefill_s,          m->decode_s,
                   m->busy,               m->queued,                m->queue_max,
                   m->kept_states,        (double)m->kept_bytes};
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
    metric(&b, defs[i].name, defs[i].type, defs[i].help);
    value(&b, defs[i].name, NULL, vals[i]);
  }
  metric(&b, "deltafin_requests_rejected_total", "counter",
         "Requests refused: 429 (busy, queue full) and 503 (shutting down).");
  value(&b, "deltafin_requests_rejected_total", "{code=\"429\"}", (double)m->rejected_429);
  value(&b, "deltafin_requests_rejected_total", "{code=\"503\"}", (double)m->rejected_503);
  /* the acceptance by block position: drafts kept at position p (1-based) */
  metric(&b, "deltafin_draft_accepted_at_total", "counter",
         "Draft tokens kept at each block position (position=\"1\": the first draft).");
  for (int p = 0; p < DF_SERVE_SPEC_MAX; p++) {
    char lab[32];
    snprintf(lab, sizeof lab, "{position=\"%d\"}", p + 1);
    value(&b, "deltafin_draft_accepted_at_total", lab, (double)m->acc_at[p]);
  }
  histogram(&b, "deltafin_request_duration_seconds",
            "Generation requests answered 200: from arrival to the end of the reply.", &m->latency);
  histogram(&b, "deltafin_time_to_first_token_seconds",
            "Generation requests: from arrival to the first generated token.", &m->ttft);
  metric(&b, "deltafin_decode_tokens_per_second", "gauge",
         "The last generation's decode speed (tokens after the first per second of decoding).");
  value(&b, "deltafin_decode_tokens_per_second", NULL, m->last_tps);
  json_t *st = stats_json ? json_loads(stats_json, 0, NULL) : NULL;
  const json_t *store = st ? json_object_get(st, "store") : NULL;
  if (!json_is_object(store)) store = NULL;
  metric(&b, "deltafin_expert_bytes_read_total", "counter",
         "Routed-expert bytes the store has read (all drives).");
  value(&b, "deltafin_expert_bytes_read_total", NULL, jnum(st, "expert_bytes_read"));
  metric(&b, "deltafin_expert_requests_total", "counter", "Routed experts the model asked for.");
  value(&b, "deltafin_expert_requests_total", NULL, jnum(store, "expert_requests"));
  metric(&b, "deltafin_expert_cache_hits_total", "counter",
         "Routed experts found in the expert cache.");
  value(&b, "deltafin_expert_cache_hits_total", NULL, jnum(store, "cache_hits"));
  const json_t *drives = store ? json_object_get(store, "drives") : NULL;
  /* one group per metric family, as the exposition format requires */
  static const char *const dm[][3] = {
      {"deltafin_drive_bytes_read_total", "bytes", "Expert bytes read per drive."},
      {"deltafin_drive_reads_total", "reads", "Reads per drive."}};
  for (int f = 0; f < 2; f++) {
    metric(&b, dm[f][0], "counter", dm[f][2]);
    size_t i;
    json_t *d;
    if (json_is_array(drives)) json_array_foreach(drives, i, d) {
        char lab[64];
        snprintf(lab, sizeof lab, "{drive=\"%zu\"}", i);
        value(&b, dm[f][0], lab, jnum(d, dm[f][1]));
      }
  }
  /* --device cuda: the GPU's counters (engine.h's df_engine_device_json) */
  const json_t *dev = st ? json_object_get(st, "device") : NULL;
  if (json_is_object(dev)) {
    static const char *const gm[][4] = {
        {"deltafin_gpu_products_total", "counter", "products", "Matrix products run on the GPU."},
        {"deltafin_gpu_fallbacks_total", "counter", "fallbacks",
         "Matrix products the GPU could not take, run on the CPU (same results)."},
        {"deltafin_gpu_tier_hits_total", "counter", "tier_hits",
         "Weight matrices found in the GPU's weight tier."},
        {"deltafin_gpu_tier_misses_total", "counter", "tier_misses",
         "Weight matrices copied to the GPU on use."},
        {"deltafin_gpu_tier_evictions_total", "counter", "tier_evictions",
         "Weight matrices evicted from the GPU's weight tier."},
        {"deltafin_gpu_tier_refused_total", "counter", "tier_refused",
         "Weight matrices the tier did not keep (no room, or an expert no hotter than those it "
         "would evict): used from a per-use copy."},
        {"deltafin_gpu_buffer_trims_total", "counter", "buffer_trims",
         "Times the GPU's per-use buffers were freed for a pass of far fewer rows, their memory "
         "given back to the weight tier."},
        {"deltafin_gpu_tier_bytes", "gauge", "tier_bytes", "GPU memory the weight tier holds."},
        {"deltafin_gpu_h2d_bytes_total", "counter", "h2d_bytes", "Bytes copied to the GPU."},
        {"deltafin_gpu_weight_h2d_seconds_total", "counter", "weight_h2d_s",
         "Time copying weights to the GPU."},
        {"deltafin_gpu_compute_seconds_total", "counter", "compute_s",
         "Time of the GPU's products (activations in, kernels, results out)."},
        {"deltafin_gpu_memory_free_bytes", "gauge", "mem_free", "The GPU's free memory."},
        {"deltafin_gpu_kda_layers_total", "counter", "seq_calls",
         "KDA layers' convolution and recurrence run on the GPU."},
        {"deltafin_gpu_mla_attentions_total", "counter", "attn_calls",
         "MLA layers' attention run on the GPU."},
        {"deltafin_gpu_layer_inputs_total", "counter", "pre_calls",
         "Layer inputs (AttnRes and the norm) made on the GPU."},
        {"deltafin_gpu_state_bytes", "gauge", "seq_bytes",
         "GPU memory holding sequence state (KDA states, MLA caches; --gpu-state keep)."},
        {"deltafin_gpu_state_pulls_total", "counter", "seq_pulls",
         "KDA states copied back from the GPU because the host read them."},
        {"deltafin_gpu_state_copies_total", "counter", "seq_copies",
         "KDA states copied within the GPU (speculation's marks saved and restored)."}};
    for (size_t i = 0; i < sizeof gm / sizeof gm[0]; i++) {
      metric(&b, gm[i][0], gm[i][1], gm[i][3]);
      value(&b, gm[i][0], NULL, jnum(dev, gm[i][2]));
    }
  }
  json_decref(st);
  if (!b.p) df_sbuf_add(&b, "", 0);
  return b.p;
}

char *df_serve_template_json(const char *text, size_t len, const int *ids, size_t n) {
  json_t *o = json_object(), *arr = json_array();
  json_object_set_new(o, "prompt", jstr(text, len));
  for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
  json_object_set_new(o, "tokens", arr);
  return dump(o);
}

/* The release's chat encoder (encoding_k3.py build_chat_segments, as the
 * public ports quote it; kimi-k3.md section 7): a prompt is a list of
 * segments, each encoded on its own; control segments (<|open|>, <|close|>,
 * <|sep|>, <|end_of_msg|>) are special ids, every other segment is ordinary
 * text. Encoding segment by segment matters: " role", "=\"", "user", "\""
 * are four encodes in the release, and one encode of their concatenation can
 * give other ids. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sbuf.h"
#include "base/util.h"
#include "tokenizer/chat.h"
#include "tokenizer/pyjson.h"

static const char *const valid_efforts[] = {"low", "high", "max"};

int df_chat_effort_valid(const char *s) {
  for (int i = 0; i < 3; i++)
    if (s && !strcmp(s, valid_efforts[i])) return 1;
  return 0;
}

/* apply_chat_template's: the serving frameworks' entry point passes
 * thinking_effort=max unless told otherwise, so the effort message is part
 * of every default prompt (kimi-k3.md section 7). */
df_chat_opts df_chat_opts_default(void) {
  df_chat_opts o = {.thinking = 1, .effort = "max", .add_generation_prompt = 1};
  return o;
}

void df_chat_prompt_free(df_chat_prompt *p) {
  if (!p) return;
  free(p->text);
  free(p->ids);
  memset(p, 0, sizeof *p);
}

/* ---- segments ---- */

typedef struct seg {
  const df_tok *t;
  df_sbuf text; /* the rendered prompt */
  int *ids;
  size_t n, cap;
  int open, close, sep, eom;
  df_err *e;
  int failed;
} seg;

static void ctl(seg *s, int id) {
  if (s->failed) return;
  size_t len;
  const uint8_t *p = df_tok_piece(s->t, id, &len);
  df_sbuf_add(&s->text, (const char *)p, len);
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 256;
    s->ids = df_xrealloc(s->ids, s->cap * sizeof *s->ids);
  }
  s->ids[s->n++] = id;
}

/* An ordinary-text segment (empty ones do not exist in the release). */
static void txt(seg *s, const char *p, size_t n) {
  if (s->failed || !n) return;
  df_sbuf_add(&s->text, p, n);
  if (df_tok_encode(s->t, p, n, &s->ids, &s->n, &s->cap, s->e)) s->failed = 1;
}

static void txtz(seg *s, const char *p) { txt(s, p, strlen(p)); }

/* ` key`, `="`, the value with & and " escaped, `"`: four segments. */
static void attr(seg *s, const char *key, const char *val) {
  char k[64];
  snprintf(k, sizeof k, " %s", key);
  txtz(s, k);
  txtz(s, "=\"");
  size_t n = strlen(val), extra = 0;
  for (size_t i = 0; i < n; i++) extra += val[i] == '&' ? 4 : val[i] == '"' ? 5 : 0;
  char *v = df_xmalloc(n + extra + 1), *o = v;
  for (size_t i = 0; i < n; i++) {
    if (val[i] == '&') o += sprintf(o, "&amp;");
    else if (val[i] == '"') o += sprintf(o, "&quot;");
    else *o++ = val[i];
  }
  *o = 0;
  txt(s, v, (size_t)(o - v));
  free(v);
  txtz(s, "\"");
}

typedef struct kv {
  const char *k, *v;
} kv;

static void open_tag(seg *s, const char *tag, const kv *attrs, int na) {
  ctl(s, s->open);
  txtz(s, tag);
  for (int i = 0; i < na; i++) attr(s, attrs[i].k, attrs[i].v);
  ctl(s, s->sep);
}

static void close_tag(seg *s, const char *tag) {
  ctl(s, s->close);
  txtz(s, tag);
  ctl(s, s->sep);
}

static void internal_system(seg *s, const char *type, const char *body) {
  kv a[2] = {{"role", "system"}, {"type", type}};
  open_tag(s, "message", a, 2);
  txtz(s, body);
  close_tag(s, "message");
  ctl(s, s->eom);
}

/* Python's str.strip() == "" : the text is empty or only white space. */
static int blank(const char *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint32_t cp;
    int l = df_py_utf8_next((const uint8_t *)p + i, n - i, &cp);
    if (l <= 0) return 0;
    if (!df_py_isspace(cp)) return 0;
    i += (size_t)l;
  }
  return 1;
}

/* ---- tools ---- */

static json_t *parse_json(const char *p, size_t n) {
  return json_loadb(p, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
}

/* The tool-declare message: the tools with every key sorted, compact. */
static int tool_declare(seg *s, const char *json, size_t len, int dynamic, df_err *e,
                        const char *where) {
  json_t *v = parse_json(json, len);
  if (!v || !json_is_array(v)) {
    json_decref(v);
    return df_err_set(e, "chat: %s: tools must be a JSON array", where);
  }
  if (!json_array_size(v)) {
    json_decref(v);
    return 0;
  }
  size_t jl;
  char *j = df_pyjson_dumps(v, 1, 1, &jl);
  json_decref(v);
  const char *head = dynamic ? "## New Tools Available\n"
                               "The system dynamically extends the toolset via lazy-loading.\n"
                               "You have access to all existing and extended tools.\n"
                               "Here are the specs for the extended tools.\n\n```json\n"
                             : "# Tools\nHere are the available tools, described in JSONSchema."
                               "\n\n```json\n";
  size_t hl = strlen(head);
  char *body = df_xmalloc(hl + jl + 8);
  memcpy(body, head, hl);
  memcpy(body + hl, j, jl);
  memcpy(body + hl + jl, "\n```", 5);
  free(j);
  kv a[2] = {{"role", "system"}, {"type", "tool-declare"}};
  open_tag(s, "message", a, 2);
  txt(s, body, hl + jl + 4);
  close_tag(s, "message");
  ctl(s, s->eom);
  free(body);
  return 0;
}

static const char *xtml_type(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_TRUE: case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    case JSON_INTEGER: case JSON_REAL: return "number";
    case JSON_STRING: return "string";
    case JSON_OBJECT: return "object";
    default: return "array";
  }
}

/* One assistant tool call: typed arguments from a JSON object (strings raw,
 * everything else as Python's json.dumps), or the raw text in a json element
 * when it does not parse. */
static int render_call(seg *s, const df_chat_call *c, int index, df_err *e, size_t mi) {
  if (!c->name || !*c->name)
    return df_err_set(e, "chat: message %zu: tool call %d has no function name", mi, index);
  char idx[16];
  snprintf(idx, sizeof idx, "%d", index);
  kv a[2] = {{"tool", c->name}, {"index", idx}};
  open_tag(s, "call", a, 2);
  const char *args = c->arguments ? c->arguments : "";
  size_t al = c->arguments ? c->arguments_len : 0;
  if (!blank(args, al)) {
    json_t *v = parse_json(args, al);
    if (!v) {
      kv t[1] = {{"type", "object"}};
      open_tag(s, "json", t, 1);
      txt(s, args, al);
      close_tag(s, "json");
    } else if (!json_is_object(v)) {
      json_decref(v);
      return df_err_set(e, "chat: message %zu: tool call %d: arguments must be a JSON object",
                        mi, index);
    } else {
      const char *k;
      json_t *x;
      json_object_foreach(v, k, x) {
        kv t[2] = {{"key", k}, {"type", xtml_type(x)}};
        open_tag(s, "argument", t, 2);
        if (json_is_string(x)) {
          txt(s, json_string_value(x), json_string_length(x));
        } else {
          size_t n;
          char *d = df_pyjson_dumps(x, 0, 0, &n);
          txt(s, d, n);
          free(d);
        }
        close_tag(s, "argument");
      }
      json_decref(v);
    }
  }
  close_tag(s, "call");
  return 0;
}

/* response_format: the schema is json_schema.schema, else json_schema.json_schema,
 * else json_schema itself (the release's extract_response_schema), deep-sorted. */
static int response_format(seg *s, const df_chat_opts *o, df_err *e) {
  int rc = 0;
  json_t *rf = parse_json(o->response_format_json, o->response_format_len);
  if (!json_is_object(rf) && !json_is_string(rf)) {
    json_decref(rf);
    return df_err_set(e, "chat: response_format must be a JSON object");
  }
  const char *type = json_is_string(rf) ? json_string_value(rf)
                                        : json_string_value(json_object_get(rf, "type"));
  static const char head[] = "Your response must be raw JSON data without markdown code blocks "
                             "(```json) or any additional formatting.";
  if (type && !strcmp(type, "json_object")) {
    char body[512];
    snprintf(body, sizeof body, "The system is invoked with `response_format=json_object`.\n%s",
             head);
    internal_system(s, "response-format", body);
  } else if (type && !strcmp(type, "json_schema")) {
    const json_t *js = json_object_get(rf, "json_schema"), *schema = NULL;
    if (json_is_object(js)) {
      schema = json_object_get(js, "schema");
      if (!schema) schema = json_object_get(js, "json_schema");
      if (!schema) schema = js;
    }
    size_t sl;
    char *sj = schema ? df_pyjson_dumps(schema, 1, 1, &sl) : df_xstrdup("null");
    if (!schema) sl = 4;
    size_t cap = sl + 512;
    char *body = df_xmalloc(cap);
    snprintf(body, cap, "The system is invoked with `response_format=json_schema`.\n%s\nThe JSON "
             "data must match the following schema:\n```json\n%s\n```", head, sj);
    internal_system(s, "response-format", body);
    free(body);
    free(sj);
  } /* any other type (text, ...) adds nothing, as in the release */
  json_decref(rf);
  return rc;
}

static const char effort_fmt[] =
    "`thinking_effort` guides on how much to think in your thinking channel (not including the "
    "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
    "Now the system is invoked with `thinking_effort=%s`.";

static const char *const role_name[] = {"system", "user", "assistant", "tool", "system"};

/* The release re-sorts each run of consecutive tool results into the order of
 * the last assistant's calls, matched by tool_call_id, and then names each
 * result after its call; a run that cannot be matched whole is left as it is. */
typedef struct item {
  const df_chat_msg *m;
  const char *tool; /* the matched call's name, overriding m->tool_name */
  size_t pos;       /* 1-based position of the matched call */
  size_t orig;
} item;

static int cmp_item(const void *a, const void *b) {
  const item *x = a, *y = b;
  if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
  return x->orig < y->orig ? -1 : x->orig > y->orig;
}

static item *order_tool_results(const df_chat_msg *msgs, size_t n) {
  item *it = df_xcalloc(n ? n : 1, sizeof *it);
  for (size_t i = 0; i < n; i++) it[i].m = &msgs[i], it[i].orig = i;
  const df_chat_msg *last = NULL;
  size_t i = 0;
  while (i < n) {
    if (msgs[i].role == DF_ROLE_ASSISTANT) last = msgs[i].ncalls ? &msgs[i] : NULL;
    if (msgs[i].role != DF_ROLE_TOOL) {
      i++;
      continue;
    }
    size_t j = i, all = 1;
    for (; j < n && msgs[j].role == DF_ROLE_TOOL; j++) {
      const char *id = msgs[j].tool_call_id;
      size_t pos = 0;
      for (size_t k = 0; last && id && k < last->ncalls && !pos; k++)
        if (last->calls[k].id && !strcmp(last->calls[k].id, id)) pos = k + 1;
      if (!pos) all = 0;
      it[j].pos = pos;
      it[j].tool = pos ? last->calls[pos - 1].name : NULL;
    }
    if (all) qsort(it + i, j - i, sizeof *it, cmp_item);
    else
      for (size_t k = i; k < j; k++) it[k].tool = NULL;
    i = j;
  }
  return it;
}

int df_chat_render(const df_tok *t, const df_chat_msg *msgs, size_t nmsgs, const df_chat_opts *o,
                   df_chat_prompt *out, df_err *e) {
  memset(out, 0, sizeof *out);
  seg s = {.t = t, .e = e};
  static const char *const need[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
  int *dst[] = {&s.open, &s.close, &s.sep, &s.eom};
  for (int i = 0; i < 4; i++)
    if ((*dst[i] = df_tok_special_id(t, need[i])) < 0)
      return df_err_set(e, "chat: the tokenizer has no %s special token", need[i]);
  df_chat_opts def = df_chat_opts_default();
  if (!o) o = &def;
  if (o->thinking && o->effort && !df_chat_effort_valid(o->effort))
    return df_err_set(e, "chat: thinking effort \"%.32s\" is not one the release accepts "
                      "(low, high, max; it refuses medium)", o->effort);
  if (o->tools_json && tool_declare(&s, o->tools_json, o->tools_len, 0, e, "tools")) goto fail;
  if (o->thinking && o->effort) {
    char body[512];
    snprintf(body, sizeof body, effort_fmt, o->effort);
    internal_system(&s, "thinking-effort", body);
  }
  item *it = order_tool_results(msgs, nmsgs);
  const df_chat_msg *calls_of = NULL; /* the last assistant message */
  int tool_index = 0;
  for (size_t i = 0; i < nmsgs && !s.failed; i++) {
    const df_chat_msg *m = it[i].m;
    size_t mi = it[i].orig;
    if ((unsigned)m->role > DF_ROLE_DEVELOPER) {
      df_err_set(e, "chat: message %zu: invalid role", mi);
      free(it);
      goto fail;
    }
    const char *content = m->content ? m->content : "";
    size_t clen = m->content ? m->content_len : 0;
    if (m->role == DF_ROLE_SYSTEM && m->tools_json && m->tools_len) {
      char where[48];
      snprintf(where, sizeof where, "message %zu", mi);
      if (tool_declare(&s, m->tools_json, m->tools_len, 1, e, where)) {
        free(it);
        goto fail;
      }
      continue;
    }
    kv a[3];
    int na = 0;
    char idx[16];
    a[na++] = (kv){"role", role_name[m->role]};
    if (m->role == DF_ROLE_TOOL) {
      tool_index++;
      const char *name = it[i].tool ? it[i].tool : m->tool_name;
      if (!name && calls_of && (size_t)tool_index <= calls_of->ncalls)
        name = calls_of->calls[tool_index - 1].name;
      if (!name) {
        df_err_set(e, "chat: message %zu: a tool result needs the tool's name: give it, or "
                   "answer the preceding assistant's tool calls in order", mi);
        free(it);
        goto fail;
      }
      snprintf(idx, sizeof idx, "%d", tool_index);
      a[na++] = (kv){"tool", name};
      a[na++] = (kv){"index", idx};
    } else if (m->name && *m->name) {
      a[na++] = (kv){"name", m->name};
    }
    if (m->role == DF_ROLE_ASSISTANT) {
      calls_of = m;
      tool_index = 0;
    }
    open_tag(&s, "message", a, na);
    if (m->role == DF_ROLE_ASSISTANT) {
      /* With thinking on, every assistant message carries a think block, empty
       * when there is no reasoning; with thinking off there is none at all. */
      if (o->thinking) {
        open_tag(&s, "think", NULL, 0);
        if (m->reasoning && !blank(m->reasoning, m->reasoning_len))
          txt(&s, m->reasoning, m->reasoning_len);
        close_tag(&s, "think");
      }
      open_tag(&s, "response", NULL, 0);
      txt(&s, content, clen);
      close_tag(&s, "response");
      if (m->ncalls) {
        open_tag(&s, "tools", NULL, 0);
        for (size_t k = 0; k < m->ncalls; k++)
          if (render_call(&s, &m->calls[k], (int)k + 1, e, mi)) {
            free(it);
            goto fail;
          }
        close_tag(&s, "tools");
      }
    } else {
      txt(&s, content, clen);
    }
    close_tag(&s, "message");
    ctl(&s, s.eom);
    if (s.failed) /* the tokenizer refused its text (invalid UTF-8) */
      df_err_prefix(e, "chat: message %zu (%s): ", mi, role_name[m->role]);
  }
  free(it);
  if (s.failed) goto fail;
  if (o->tool_choice == DF_TOOL_CHOICE_REQUIRED)
    internal_system(&s, "tool-choice", "The system is invoked with `tool_choice=required`.\n"
                                       "You MUST call tools in the next message.");
  else if (o->tool_choice == DF_TOOL_CHOICE_NONE)
    internal_system(&s, "tool-choice", "The system is invoked with `tool_choice=none`.\n"
                                       "You MUST NOT call any tools in the next message.");
  if (o->response_format_json && response_format(&s, o, e)) goto fail;
  if (o->add_generation_prompt) {
    kv a[1] = {{"role", "assistant"}};
    open_tag(&s, "message", a, 1);
    open_tag(&s, o->thinking ? "think" : "response", NULL, 0);
  }
  if (s.failed) goto fail;
  out->text = s.text.p ? s.text.p : df_xstrdup("");
  out->text_len = s.text.n;
  out->ids = s.ids;
  out->n = s.n;
  return 0;
fail:
  df_sbuf_free(&s.text);
  free(s.ids);
  return -1;
}

/* ---- OpenAI messages JSON ---- */

static int jstr(const json_t *v, const char **out) {
  if (!v || json_is_null(v)) {
    *out = NULL;
    return 0;
  }
  if (!json_is_string(v)) return -1;
  *out = json_string_value(v);
  return 0;
}

typedef struct owned {
  char **p;
  size_t n;
} owned;

static char *own(owned *o, char *p) {
  o->p = df_xrealloc(o->p, (o->n + 1) * sizeof *o->p);
  o->p[o->n++] = p;
  return p;
}

/* content: a string, null, or text parts joined (the release renders each
 * part's text in order; images are not something a text-only engine can see). */
static int content_of(const json_t *c, size_t i, owned *ow, const char **out, size_t *len,
                      df_err *e) {
  *out = NULL;
  *len = 0;
  if (!c || json_is_null(c)) return 0;
  if (json_is_string(c)) {
    *out = json_string_value(c);
    *len = json_string_length(c);
    return 0;
  }
  if (!json_is_array(c))
    return df_err_set(e, "chat: messages[%zu].content must be a string, null or a list of parts",
                      i);
  size_t k, total = 0;
  const json_t *part;
  json_array_foreach(c, k, part) {
    const char *ty = json_string_value(json_object_get(part, "type"));
    const json_t *tx = json_object_get(part, "text");
    if (ty && (!strcmp(ty, "image") || !strcmp(ty, "image_url")))
      return df_err_set(e, "chat: messages[%zu].content[%zu]: images are not supported (the "
                        "engine runs the text model only)", i, k);
    if (!json_is_string(tx))
      return df_err_set(e, "chat: messages[%zu].content[%zu] needs a \"text\" string", i, k);
    total += json_string_length(tx);
  }
  char *b = own(ow, df_xmalloc(total + 1)), *o = b;
  json_array_foreach(c, k, part) {
    const json_t *tx = json_object_get(part, "text");
    memcpy(o, json_string_value(tx), json_string_length(tx));
    o += json_string_length(tx);
  }
  *o = 0;
  *out = b;
  *len = total;
  return 0;
}

static char *scalar_text(const json_t *v) {
  if (json_is_string(v)) return df_xstrdup(json_string_value(v));
  if (json_is_integer(v)) {
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)json_integer_value(v));
    return df_xstrdup(b);
  }
  return NULL;
}

int df_chat_render_json(const df_tok *t, const char *messages_json, size_t len,
                        const df_chat_opts *o, df_chat_prompt *out, df_err *e) {
  memset(out, 0, sizeof *out);
  json_error_t je;
  json_t *root = json_loadb(messages_json, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) return df_err_set(e, "chat: messages: invalid JSON at line %d: %s", je.line, je.text);
  if (!json_is_array(root)) {
    json_decref(root);
    return df_err_set(e, "chat: messages must be a JSON array");
  }
  size_t n = json_array_size(root);
  df_chat_msg *m = df_xcalloc(n ? n : 1, sizeof *m);
  df_chat_call **calls = df_xcalloc(n ? n : 1, sizeof *calls);
  owned ow = {0};
  int rc = -1;
  for (size_t i = 0; i < n; i++) {
    const json_t *j = json_array_get(root, i);
    if (!json_is_object(j)) {
      df_err_set(e, "chat: messages[%zu] must be an object", i);
      goto out;
    }
    const char *role;
    if (jstr(json_object_get(j, "role"), &role) || !role) {
      df_err_set(e, "chat: messages[%zu].role must be a string", i);
      goto out;
    }
    if (!strcmp(role, "system")) m[i].role = DF_ROLE_SYSTEM;
    else if (!strcmp(role, "developer")) m[i].role = DF_ROLE_DEVELOPER;
    else if (!strcmp(role, "user")) m[i].role = DF_ROLE_USER;
    else if (!strcmp(role, "assistant")) m[i].role = DF_ROLE_ASSISTANT;
    else if (!strcmp(role, "tool")) m[i].role = DF_ROLE_TOOL;
    else {
      df_err_set(e, "chat: messages[%zu].role \"%.32s\" is not system, developer, user, "
                 "assistant or tool", i, role);
      goto out;
    }
    if (content_of(json_object_get(j, "content"), i, &ow, &m[i].content, &m[i].content_len, e))
      goto out;
    if (jstr(json_object_get(j, "name"), &m[i].name)) {
      df_err_set(e, "chat: messages[%zu].name must be a string", i);
      goto out;
    }
    if (m[i].role == DF_ROLE_ASSISTANT) {
      /* the release: reasoning_content or reasoning (an empty first falls through) */
      const char *rc1, *rc2;
      if (jstr(json_object_get(j, "reasoning_content"), &rc1) ||
          jstr(json_object_get(j, "reasoning"), &rc2)) {
        df_err_set(e, "chat: messages[%zu].reasoning_content / reasoning must be a string", i);
        goto out;
      }
      m[i].reasoning = rc1 && *rc1 ? rc1 : rc2;
      m[i].reasoning_len = m[i].reasoning ? strlen(m[i].reasoning) : 0;
      const json_t *tc = json_object_get(j, "tool_calls");
      if (tc && !json_is_null(tc)) {
        if (!json_is_array(tc)) {
          df_err_set(e, "chat: messages[%zu].tool_calls must be an array", i);
          goto out;
        }
        size_t nc = json_array_size(tc);
        calls[i] = df_xcalloc(nc ? nc : 1, sizeof **calls);
        for (size_t k = 0; k < nc; k++) {
          const json_t *c = json_array_get(tc, k);
          if (!json_is_object(c)) {
            df_err_set(e, "chat: messages[%zu].tool_calls[%zu] must be an object", i, k);
            goto out;
          }
          const json_t *fn = json_object_get(c, "function");
          if (!json_is_object(fn)) fn = c;
          df_chat_call *cc = &calls[i][k];
          cc->id = json_object_get(c, "id") ? own(&ow, scalar_text(json_object_get(c, "id")))
                                             : NULL;
          if (jstr(json_object_get(fn, "name"), &cc->name)) cc->name = NULL;
          const json_t *args = json_object_get(fn, "arguments");
          if (json_is_string(args)) {
            cc->arguments = json_string_value(args);
            cc->arguments_len = json_string_length(args);
          } else if (json_is_object(args)) {
            cc->arguments = own(&ow, df_pyjson_dumps(args, 0, 0, &cc->arguments_len));
          } else if (args && !json_is_null(args)) {
            df_err_set(e, "chat: messages[%zu].tool_calls[%zu].function.arguments must be a "
                       "JSON object or a string holding one", i, k);
            goto out;
          }
        }
        m[i].calls = calls[i];
        m[i].ncalls = nc;
      }
    }
    if (m[i].role == DF_ROLE_TOOL) {
      const json_t *id = json_object_get(j, "tool_call_id");
      if (!id) id = json_object_get(j, "id");
      if (id && !json_is_null(id)) m[i].tool_call_id = own(&ow, scalar_text(id));
      const json_t *tn = json_object_get(j, "tool");
      if (!tn) tn = json_object_get(j, "name");
      if (jstr(tn, &m[i].tool_name)) {
        df_err_set(e, "chat: messages[%zu].tool must be a string", i);
        goto out;
      }
    }
    if (m[i].role == DF_ROLE_SYSTEM) {
      const json_t *tools = json_object_get(j, "tools");
      if (json_is_array(tools) && json_array_size(tools))
        m[i].tools_json = own(&ow, df_pyjson_dumps(tools, 1, 0, &m[i].tools_len));
    }
  }
  rc = df_chat_render(t, m, n, o, out, e);
out:
  for (size_t i = 0; i < ow.n; i++) free(ow.p[i]);
  free(ow.p);
  for (size_t i = 0; i < n; i++) free(calls[i]);
  free(calls);
  free(m);
  json_decref(root);
  return rc;
}

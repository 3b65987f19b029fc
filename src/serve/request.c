#include "serve/request.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

int df_serve_err_set(df_serve_err *e, int status, const char *type, const char *code,
                     const char *param, const char *fmt, ...) {
  e->status = status;
  e->type = type;
  e->code = code;
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return -1;
}

#define BAD(e, param, ...) \
  df_serve_err_set((e), 400, "invalid_request_error", NULL, (param), __VA_ARGS__)

/* ---- owned strings ---- */

static char *own(df_serve_req *r, const char *s, size_t n) {
  if (r->nowned == r->capowned) {
    r->capowned = r->capowned ? r->capowned * 2 : 16;
    r->owned = df_xrealloc(r->owned, r->capowned * sizeof *r->owned);
  }
  char *p = df_xmalloc(n + 1);
  if (n) memcpy(p, s, n);
  p[n] = 0;
  r->owned[r->nowned++] = p;
  return p;
}

/* zeroed memory freed with the request */
static void *own_raw(df_serve_req *r, size_t n) {
  char *p = own(r, "", 0);
  p = df_xrealloc(p, n ? n : 1);
  memset(p, 0, n ? n : 1);
  r->owned[r->nowned - 1] = p;
  return p;
}

static char *own_json_str(df_serve_req *r, const json_t *v, size_t *len) {
  size_t n = json_string_length(v);
  if (len) *len = n;
  return own(r, json_string_value(v), n);
}

void df_serve_req_free(df_serve_req *r) {
  if (!r) return;
  for (size_t i = 0; i < r->nowned; i++) free(r->owned[i]);
  free(r->owned);
  free(r->msgs);
  free(r->prompt_ids);
  free(r->bias);
  df_jg_free(r->grammar);
  memset(r, 0, sizeof *r);
}

/* ---- field checks ---- */

static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
  }
  return "a value";
}

static int want_bool(const json_t *v, const char *param, int *out, df_serve_err *e) {
  *out = 0; /* defined on every path (gcc -O3 cannot see that BAD returns -1) */
  if (!json_is_boolean(v)) return BAD(e, param, "'%s' must be a boolean, not %s", param, json_kind(v));
  *out = json_is_true(v);
  return 0;
}

static int want_int(const json_t *v, const char *param, long long lo, long long hi,
                    long long *out, df_serve_err *e) {
  if (!json_is_integer(v))
    return BAD(e, param, "'%s' must be an integer, not %s", param, json_kind(v));
  long long x = json_integer_value(v);
  if (x < lo || x > hi)
    return BAD(e, param, "'%s' is %lld; it must be between %lld and %lld", param, x, lo, hi);
  *out = x;
  return 0;
}

static int want_num(const json_t *v, const char *param, double lo, double hi, double *out,
                    df_serve_err *e) {
  if (!json_is_number(v)) return BAD(e, param, "'%s' must be a number, not %s", param, json_kind(v));
  double x = json_number_value(v);
  if (!(x >= lo && x <= hi))
    return BAD(e, param, "'%s' is %g; it must be between %g and %g", param, x, lo, hi);
  *out = x;
  return 0;
}

static int want_str(const json_t *v, const char *param, df_serve_err *e) {
  if (!json_is_string(v)) return BAD(e, param, "'%s' must be a string, not %s", param, json_kind(v));
  return 0;
}

static int unsupported(const char *param, const char *why, df_serve_err *e) {
  return BAD(e, param, "'%s' is not supported by this server: %s", param, why);
}

/* ---- messages ---- */

/* Joins the text parts of a content array, as the K2/K3 templates do (no
 * separator). Anything but text parts is refused, naming the part. */
static int message_content(df_serve_req *r, const json_t *c, size_t i, char **out, size_t *outlen,
                           df_serve_err *e) {
  char p[160];
  if (json_is_string(c)) {
    *out = own_json_str(r, c, outlen);
    return 0;
  }
  snprintf(p, sizeof p, "messages[%zu].content", i);
  if (!json_is_array(c))
    return BAD(e, p, "'%s' must be a string or an array of text parts, not %s", p, json_kind(c));
  size_t total = 0, j;
  json_t *part;
  json_array_foreach(c, j, part) {
    snprintf(p, sizeof p, "messages[%zu].content[%zu]", i, j);
    if (!json_is_object(part)) return BAD(e, p, "'%s' must be an object, not %s", p, json_kind(part));
    json_t *type = json_object_get(part, "type");
    snprintf(p, sizeof p, "messages[%zu].content[%zu].type", i, j);
    if (!type) return BAD(e, p, "'%s' is required", p);
    if (!json_is_string(type)) return BAD(e, p, "'%s' must be a string", p);
    if (strcmp(json_string_value(type), "text"))
      return BAD(e, p, "content part type '%s' is not supported: this model reads text only",
                 json_string_value(type));
    const char *k;
    json_t *v;
    json_object_foreach(part, k, v) {
      /* a prompt-caching hint (Anthropic-style clients): caching is by prefix here */
      if (!strcmp(k, "type") || !strcmp(k, "cache_control")) continue;
      snprintf(p, sizeof p, "messages[%zu].content[%zu].%s", i, j, k);
      if (strcmp(k, "text")) return BAD(e, p, "unrecognized field '%s' in a text part", k);
      if (want_str(v, p, e)) return -1;
      total += json_string_length(v);
    }
    if (!json_object_get(part, "text")) {
      snprintf(p, sizeof p, "messages[%zu].content[%zu].text", i, j);
      return BAD(e, p, "'%s' is required", p);
    }
  }
  char *buf = own(r, "", 0);
  buf = df_xrealloc(buf, total + 1);
  r->owned[r->nowned - 1] = buf;
  size_t off = 0;
  json_array_foreach(c, j, part) {
    json_t *t = json_object_get(part, "text");
    size_t n = json_string_length(t);
    memcpy(buf + off, json_string_value(t), n);
    off += n;
  }
  buf[off] = 0;
  *out = buf;
  *outlen = off;
  return 0;
}

/* An assistant's tool_calls from the history: [{id, type, function{name, arguments}}]. */
static int parse_calls(df_serve_req *r, df_chat_msg *cm, const json_t *v, size_t i, df_serve_err *e) {
  char p[160];
  snprintf(p, sizeof p, "messages[%zu].tool_calls", i);
  if (!json_is_array(v)) return BAD(e, p, "'%s' must be an array, not %s", p, json_kind(v));
  size_t n = json_array_size(v);
  df_chat_call *calls = own_raw(r, n * sizeof *calls);
  for (size_t c = 0; c < n; c++) {
    json_t *o = json_array_get(v, c);
    snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu]", i, c);
    if (!json_is_object(o)) return BAD(e, p, "'%s' must be an object, not %s", p, json_kind(o));
    json_t *id = json_object_get(o, "id"), *type = json_object_get(o, "type"),
           *fn = json_object_get(o, "function");
    if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "function")))
      return BAD(e, p, "'%s.type' must be \"function\"", p);
    if (id && !json_is_null(id)) {
      if (!json_is_string(id)) return BAD(e, p, "'%s.id' must be a string", p);
      calls[c].id = own_json_str(r, id, NULL);
    }
    snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu].function", i, c);
    if (!json_is_object(fn)) return BAD(e, p, "'%s' must be an object with a name", p);
    json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
    if (!json_is_string(name) || !json_string_length(name))
      return BAD(e, p, "'%s.name' must be a non-empty string", p);
    calls[c].name = own_json_str(r, name, NULL);
    if (args && !json_is_null(args)) {
      if (!json_is_string(args)) return BAD(e, p, "'%s.arguments' must be a string of JSON", p);
      calls[c].arguments = own_json_str(r, args, &calls[c].arguments_len);
    }
  }
  cm->calls = calls;
  cm->ncalls = n;
  r->use_render = 1;
  return 0;
}

/* text; json_object (any object); json_schema {name, schema, strict,
 * description}: constrained decoding (serve/jsongram.h) */
static int parse_response_format(df_serve_req *r, const json_t *v, df_serve_err *e) {
  json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
  const char *ts = t && json_is_string(t) ? json_string_value(t) : "";
  if (!strcmp(ts, "text")) return 0;
  if (!strcmp(ts, "json_object")) {
    r->grammar = df_jg_object();
    r->use_render = 1;
    return 0;
  }
  if (strcmp(ts, "json_schema"))
    return BAD(e, "response_format.type", "'response_format.type' must be text, json_object or json_schema");
  json_t *js = json_object_get(v, "json_schema");
  json_t *schema = json_is_object(js) ? json_object_get(js, "schema") : NULL;
  if (!schema)
    return BAD(e, "response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
  char *text = json_dumps(schema, JSON_COMPACT);
  char why[256] = "";
  r->grammar = text ? df_jg_schema(text, strlen(text), why, sizeof why) : NULL;
  free(text);
  if (!r->grammar)
    return unsupported("response_format.json_schema.schema", why[0] ? why : "unreadable", e);
  r->use_render = 1;
  return 0;
}

static int parse_tools(df_serve_req *r, const json_t *v, df_serve_err *e) {
  if (!json_is_array(v)) return BAD(e, "tools", "'tools' must be an array, not %s", json_kind(v));
  size_t i;
  json_t *t;
  char p[160];
  json_array_foreach(v, i, t) {
    snprintf(p, sizeof p, "tools[%zu]", i);
    json_t *type = json_is_object(t) ? json_object_get(t, "type") : NULL;
    json_t *fn = json_is_object(t) ? json_object_get(t, "function") : NULL;
    if (!type || !json_is_string(type) || strcmp(json_string_value(type), "function"))
      return BAD(e, p, "'%s' must be {\"type\":\"function\",\"function\":{...}}", p);
    json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
    if (!json_is_string(name) || !json_string_length(name))
      return BAD(e, p, "'%s.function.name' must be a non-empty string", p);
  }
  if (!json_array_size(v)) return 0;
  char *s = json_dumps(v, JSON_COMPACT);
  if (!s) return BAD(e, "tools", "'tools' cannot be serialised");
  r->tools_json = own(r, s, strlen(s));
  r->tools_len = strlen(s);
  free(s);
  r->use_render = 1;
  return 0;
}

static int parse_messages(df_serve_req *r, const json_t *arr, df_serve_err *e) {
  if (!json_is_array(arr))
    return BAD(e, "messages", "'messages' must be an array, not %s", json_kind(arr));
  size_t n = json_array_size(arr);
  if (n == 0) return BAD(e, "messages", "'messages' must contain at least one message");
  r->msgs = df_xcalloc(n, sizeof *r->msgs);
  r->nmsgs = n;
  int tool_run = 0; /* position within a run of consecutive tool messages */
  char p[160];
  for (size_t i = 0; i < n; i++) {
    json_t *m = json_array_get(arr, i);
    df_chat_msg *cm = &r->msgs[i];
    snprintf(p, sizeof p, "messages[%zu]", i);
    if (!json_is_object(m)) return BAD(e, p, "'%s' must be an object, not %s", p, json_kind(m));
    json_t *role = json_object_get(m, "role");
    snprintf(p, sizeof p, "messages[%zu].role", i);
    if (!role) return BAD(e, p, "'%s' is required", p);
    if (!json_is_string(role)) return BAD(e, p, "'%s' must be a string", p);
    const char *rs = json_string_value(role);
    /* "developer" is OpenAI's newer name for the system role. */
    if (!strcmp(rs, "system") || !strcmp(rs, "developer")) cm->role = DF_ROLE_SYSTEM;
    else if (!strcmp(rs, "user")) cm->role = DF_ROLE_USER;
    else if (!strcmp(rs, "assistant")) cm->role = DF_ROLE_ASSISTANT;
    else if (!strcmp(rs, "tool")) cm->role = DF_ROLE_TOOL;
    else
      return BAD(e, p, "role '%s' is not supported (system, developer, user, assistant, tool)", rs);

    const char *k;
    json_t *v;
    const json_t *content = NULL, *name = NULL, *call_id = NULL;
    json_object_foreach(m, k, v) {
      snprintf(p, sizeof p, "messages[%zu].%s", i, k);
      if (!strcmp(k, "role")) continue;
      if (!strcmp(k, "content")) {
        content = v;
      } else if (!strcmp(k, "name")) {
        /* the K3 chat format has no participant names: a tool message's name
         * is its tool, on others it is accepted and not rendered */
        if (json_is_null(v)) continue;
        if (want_str(v, p, e)) return -1;
        if (cm->role == DF_ROLE_TOOL) name = v;
      } else if (!strcmp(k, "tool_call_id")) {
        if (cm->role != DF_ROLE_TOOL) return BAD(e, p, "'%s' belongs on tool messages only", p);
        if (want_str(v, p, e)) return -1;
        call_id = v;
      } else if (!strcmp(k, "reasoning_content")) {
        if (cm->role != DF_ROLE_ASSISTANT)
          return BAD(e, p, "'%s' belongs on assistant messages only", p);
        if (json_is_null(v)) continue;
        if (want_str(v, p, e)) return -1;
        cm->reasoning = own_json_str(r, v, &cm->reasoning_len);
      } else if (!strcmp(k, "tool_calls")) {
        if (json_is_null(v) || (json_is_array(v) && json_array_size(v) == 0)) continue;
        if (cm->role != DF_ROLE_ASSISTANT) return BAD(e, p, "'%s' belongs on assistant messages only", p);
        if (parse_calls(r, cm, v, i, e)) return -1;
      } else if (!strcmp(k, "function_call") || !strcmp(k, "refusal") || !strcmp(k, "audio")) {
        if (json_is_null(v)) continue;
        return unsupported(p, "only text messages are supported", e);
      } else if (!strcmp(k, "parsed")) {
        /* the SDK's .parse() result, sent back with the history */
        if (json_is_null(v) || cm->role == DF_ROLE_ASSISTANT) continue;
        return BAD(e, p, "'%s' belongs on assistant messages only", p);
      } else if (!strcmp(k, "annotations")) {
        /* output metadata (url citations) the SDK round-trips: nothing to render */
        if (json_is_null(v) || json_is_array(v)) continue;
        return BAD(e, p, "'%s' must be an array, not %s", p, json_kind(v));
      } else {
        return BAD(e, p, "unrecognized field '%s' in a message", k);
      }
    }
    snprintf(p, sizeof p, "messages[%zu].content", i);
    if (!content) return BAD(e, p, "'%s' is required", p);
    if (json_is_null(content)) {
      /* null content only makes sense for an assistant turn */
      if (cm->role != DF_ROLE_ASSISTANT) return BAD(e, p, "'%s' must not be null", p);
      cm->content = own(r, "", 0);
      cm->content_len = 0;
    } else if (message_content(r, content, i, (char **)&cm->content, &cm->content_len, e)) {
      return -1;
    }
    if (cm->role == DF_ROLE_TOOL) {
      snprintf(p, sizeof p, "messages[%zu].tool_call_id", i);
      if (!call_id) return BAD(e, p, "'%s' is required on tool messages", p);
      /* K3 names the tool; OpenAI only gives the call id unless a name is sent.
       * The release's renderer finds the name from the call id. */
      cm->tool_call_id = own_json_str(r, call_id, NULL);
      cm->tool_name = name ? own_json_str(r, name, NULL) : NULL;
      if (!cm->tool_name) cm->tool_name = cm->tool_call_id;
      cm->tool_index = tool_run++;
    } else {
      tool_run = 0;
    }
  }
  return 0;
}

/* ---- prompt (completions) ---- */

static int parse_prompt(df_serve_req *r, const json_t *v, const df_serve_limits *lim,
                        df_serve_err *e) {
  if (json_is_string(v)) {
    if (json_string_length(v) == 0) return BAD(e, "prompt", "'prompt' must not be empty");
    r->prompt = own_json_str(r, v, &r->prompt_len);
    return 0;
  }
  if (!json_is_array(v))
    return BAD(e, "prompt", "'prompt' must be a string or an array, not %s", json_kind(v));
  size_t n = json_array_size(v);
  if (n == 0) return BAD(e, "prompt", "'prompt' must not be empty");
  json_t *first = json_array_get(v, 0);
  const json_t *ids = NULL;
  if (json_is_string(first) || json_is_array(first)) {
    if (n > 1) return unsupported("prompt", "one prompt per request (n = 1)", e);
    if (json_is_string(first)) return parse_prompt(r, first, lim, e);
    ids = first;
  } else {
    ids = v;
  }
  size_t m = json_array_size(ids);
  if (m == 0) return BAD(e, "prompt", "'prompt' must not be empty");
  r->prompt_ids = df_xmalloc(m * sizeof *r->prompt_ids);
  for (size_t i = 0; i < m; i++) {
    json_t *x = json_array_get(ids, i);
    if (!json_is_integer(x))
      return BAD(e, "prompt", "'prompt' must be a string, one string, or token ids");
    long long id = json_integer_value(x);
    if (id < 0 || id >= lim->vocab)
      return BAD(e, "prompt", "token id %lld in 'prompt' is outside the vocabulary [0, %d)", id,
                 lim->vocab);
    r->prompt_ids[i] = (int)id;
  }
  r->nprompt_ids = m;
  r->prompt_is_ids = 1;
  return 0;
}

/* ---- small groups ---- */

int df_serve_effort(const char *s, df_effort *out) {
  if (!strcmp(s, "none") || !strcmp(s, "minimal")) {
    *out = DF_EFFORT_LOW;
    return 0;
  }
  if (!strcmp(s, "xhigh")) {
    *out = DF_EFFORT_MAX;
    return 0;
  }
  return df_effort_parse(s, out) ? -1 : 0;
}

static int parse_logit_bias(df_serve_req *r, const json_t *v, const df_serve_limits *lim,
                            df_serve_err *e) {
  if (!json_is_object(v)) return BAD(e, "logit_bias", "'logit_bias' must be an object, not %s", json_kind(v));
  size_t n = json_object_size(v);
  if (n > 1024) return BAD(e, "logit_bias", "'logit_bias' has more than 1024 entries");
  r->bias = n ? df_xmalloc(n * sizeof *r->bias) : NULL;
  const char *k;
  json_t *x;
  char p[160];
  json_object_foreach((json_t *)v, k, x) {
    snprintf(p, sizeof p, "logit_bias.%.40s", k);
    char *end;
    long id = strtol(k, &end, 10);
    if (!*k || *end || id < 0 || id >= lim->vocab)
      return BAD(e, p, "logit_bias keys must be token ids in [0, %d)", lim->vocab);
    double b;
    if (want_num(x, p, -100, 100, &b, e)) return -1;
    r->bias[r->nbias].id = (int)id;
    r->bias[r->nbias].bias = (float)b;
    r->nbias++;
  }
  return 0;
}

static int parse_stop(df_serve_req *r, const json_t *v, df_serve_err *e) {
  const json_t *one[1] = {v};
  const json_t *const *items = one;
  size_t n = 1;
  json_t *tmp[DF_SERVE_MAX_STOP];
  if (json_is_array(v)) {
    n = json_array_size(v);
    if (n > DF_SERVE_MAX_STOP)
      return BAD(e, "stop", "'stop' has %zu sequences; at most %d are allowed", n, DF_SERVE_MAX_STOP);
    for (size_t i = 0; i < n; i++) tmp[i] = json_array_get(v, i);
    items = (const json_t *const *)tmp;
  } else if (!json_is_string(v)) {
    return BAD(e, "stop", "'stop' must be a string or an array of strings, not %s", json_kind(v));
  }
  for (size_t i = 0; i < n; i++) {
    if (!json_is_string(items[i])) return BAD(e, "stop", "'stop' entries must be strings");
    size_t len = json_string_length(items[i]);
    if (len == 0) return BAD(e, "stop", "'stop' sequences must not be empty");
    if (len > DF_SERVE_MAX_STOP_LEN)
      return BAD(e, "stop", "a 'stop' sequence is %zu bytes; at most %d are allowed", len,
                 DF_SERVE_MAX_STOP_LEN);
    r->stop[r->nstop] = own_json_str(r, items[i], &r->stop_len[r->nstop]);
    r->nstop++;
  }
  return 0;
}

static int parse_stream_options(df_serve_req *r, const json_t *v, df_serve_err *e) {
  if (!json_is_object(v))
    return BAD(e, "stream_options", "'stream_options' must be an object, not %s", json_kind(v));
  const char *k;
  json_t *x;
  char p[160];
  json_object_foreach((json_t *)v, k, x) {
    snprintf(p, sizeof p, "stream_options.%s", k);
    if (!strcmp(k, "include_usage")) {
      if (!json_is_null(x) && want_bool(x, p, &r->include_usage, e)) return -1;
    } else if (!strcmp(k, "include_obfuscation")) {
      int b = 0;
      if (!json_is_null(x) && want_bool(x, p, &b, e)) return -1;
      if (b) return unsupported(p, "streams are not obfuscated", e);
    } else {
      return BAD(e, p, "unrecognized field '%s' in stream_options", k);
    }
  }
  return 0;
}

static int parse_metadata(const json_t *v, df_serve_err *e) {
  if (!json_is_object(v))
    return BAD(e, "metadata", "'metadata' must be an object, not %s", json_kind(v));
  if (json_object_size(v) > 16) return BAD(e, "metadata", "'metadata' has more than 16 keys");
  const char *k;
  json_t *x;
  char p[160];
  json_object_foreach((json_t *)v, k, x) {
    snprintf(p, sizeof p, "metadata.%.64s", k);
    if (strlen(k) > 64) return BAD(e, p, "metadata keys are at most 64 characters");
    if (!json_is_string(x)) return BAD(e, p, "metadata values must be strings");
    if (json_string_length(x) > 512) return BAD(e, p, "metadata values are at most 512 characters");
  }
  return 0;
}

/* ---- top level ---- */

/* A field that is accepted only at the value meaning "off". */
static int only_default(const char *k, const json_t *v, df_serve_err *e) {
  if (json_is_null(v)) return 0;
  if (!strcmp(k, "best_of")) {
    long long x;
    if (want_int(v, k, 1, 128, &x, e)) return -1;
    if (x != 1) return unsupported(k, "best-of ranking is not implemented (use n)", e);
    return 0;
  }
  if (!strcmp(k, "echo") || !strcmp(k, "store")) {
    int b;
    if (want_bool(v, k, &b, e)) return -1;
    if (b) return unsupported(k, "only the default (false) is implemented", e);
    return 0;
  }
  if (!strcmp(k, "tools") || !strcmp(k, "functions")) {
    if (!json_is_array(v)) return BAD(e, k, "'%s' must be an array, not %s", k, json_kind(v));
    if (json_array_size(v)) return unsupported(k, "tool calling is not implemented", e);
    return 0;
  }
  if (!strcmp(k, "tool_choice") || !strcmp(k, "function_call")) {
    if (json_is_string(v) && !strcmp(json_string_value(v), "none")) return 0;
    return unsupported(k, "tool calling is not implemented (only \"none\")", e);
  }
  if (!strcmp(k, "parallel_tool_calls")) {
    int b;
    return want_bool(v, k, &b, e); /* meaningless without tools: any boolean is honoured */
  }

  if (!strcmp(k, "modalities")) {
    if (json_is_array(v) && json_array_size(v) == 1 &&
        json_is_string(json_array_get(v, 0)) &&
        !strcmp(json_string_value(json_array_get(v, 0)), "text"))
      return 0;
    return unsupported(k, "only [\"text\"]", e);
  }
  if (!strcmp(k, "suffix")) {
    if (json_is_string(v) && json_string_length(v) == 0) return 0;
    return unsupported(k, "insertion is not implemented", e);
  }
  if (!strcmp(k, "service_tier")) {
    if (json_is_string(v) &&
        (!strcmp(json_string_value(v), "auto") || !strcmp(json_string_value(v), "default")))
      return 0;
    return unsupported(k, "one tier: \"auto\" or \"default\"", e);
  }
  /* audio, prediction, web_search_options, verbosity */
  return unsupported(k, "only the default (off) is implemented", e);
}

static int is_only_default(df_serve_kind kind, const char *k) {
  static const char *const common[] = {NULL};
  static const char *const chat[] = {"tools", "tool_choice", "parallel_tool_calls", "functions",
                                     "function_call", "response_format", "store",
                                     "modalities", "audio", "prediction", "web_search_options",
                                     "service_tier", "verbosity", NULL};
  static const char *const compl[] = {"echo", "suffix", "best_of", NULL};
  for (const char *const *p = common; *p; p++)
    if (!strcmp(*p, k)) return 1;
  for (const char *const *p = kind == DF_SERVE_CHAT ? chat : compl; *p; p++)
    if (!strcmp(*p, k)) return 1;
  return 0;
}

static int is_known(df_serve_kind kind, const char *k) {
  static const char *const common[] = {"max_tokens", "stream", "stream_options", "temperature",
                                       "top_p", "seed", "stop", "user", "metadata", "n",
                                       "presence_penalty", "frequency_penalty", "logit_bias",
                                       "logprobs", "top_k", "min_p", "repeat_penalty", NULL};
  static const char *const chat[] = {"max_completion_tokens", "reasoning_effort",
                                     "safety_identifier", "prompt_cache_key", "top_logprobs",
                                     NULL};
  for (const char *const *p = common; *p; p++)
    if (!strcmp(*p, k)) return 1;
  if (kind == DF_SERVE_CHAT)
    for (const char *const *p = chat; *p; p++)
      if (!strcmp(*p, k)) return 1;
  return is_only_default(kind, k);
}

int df_serve_parse(df_serve_kind kind, const char *body, size_t len, const df_serve_limits *lim,
                   df_serve_req *out, df_serve_err *err) {
  memset(out, 0, sizeof *out);
  out->kind = kind;
  out->max_tokens = -1;
  out->top_p = 1;
  out->repeat_penalty = 1;
  out->n = 1;
  out->effort = DF_EFFORT_MAX;
  if (!df_utf8_valid(body, len)) {
    BAD(err, NULL, "the request body is not valid UTF-8");
    return -1;
  }
  json_error_t je;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    BAD(err, NULL, "the request body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
        je.column);
    return -1;
  }
  int rc = -1, has_top = 0;
  long long mt = -1, mct = -1;
  const json_t *messages = NULL, *prompt = NULL, *model = NULL, *stream_options = NULL;
  const char *k;
  json_t *v;
  if (!json_is_object(root)) {
    BAD(err, NULL, "the request body must be a JSON object, not %s", json_kind(root));
    goto done;
  }
  json_object_foreach(root, k, v) {
    if (!strcmp(k, "model")) {
      model = v;
    } else if (kind == DF_SERVE_CHAT && !strcmp(k, "messages")) {
      messages = v;
    } else if (kind == DF_SERVE_COMPLETION && !strcmp(k, "prompt")) {
      prompt = v;
    } else if (json_is_null(v) && is_known(kind, k)) {
      continue; /* null means "default" for every optional OpenAI field */
    } else if (!strcmp(k, "max_tokens")) {
      if (want_int(v, k, 1, INT_MAX, &mt, err)) goto done;
    } else if (kind == DF_SERVE_CHAT && !strcmp(k, "max_completion_tokens")) {
      if (want_int(v, k, 1, INT_MAX, &mct, err)) goto done;
    } else if (!strcmp(k, "stream")) {
      if (want_bool(v, k, &out->stream, err)) goto done;
    } else if (!strcmp(k, "stream_options")) {
      stream_options = v;
    } else if (kind == DF_SERVE_CHAT && !strcmp(k, "reasoning_effort")) {
      if (want_str(v, k, err)) goto done;
      const char *s = json_string_value(v);
      if (df_serve_effort(s, &out->effort)) {
        BAD(err, k,
            "'reasoning_effort' '%s' is not supported (none, minimal, low, medium, high, xhigh, "
            "max)",
            s);
        goto done;
      }
    } else if (!strcmp(k, "temperature")) {
      if (want_num(v, k, 0, 2, &out->temperature, err)) goto done;
    } else if (!strcmp(k, "top_p")) {
      if (want_num(v, k, 0, 1, &out->top_p, err)) goto done;
    } else if (!strcmp(k, "seed")) {
      long long s;
      if (want_int(v, k, LLONG_MIN, LLONG_MAX, &s, err)) goto done;
      out->has_seed = 1;
      out->seed = (uint64_t)s;
    } else if (!strcmp(k, "stop")) {
      if (parse_stop(out, v, err)) goto done;
    } else if (kind == DF_SERVE_CHAT && !strcmp(k, "response_format")) {
      if (parse_response_format(out, v, err)) goto done;
    } else if (kind == DF_SERVE_CHAT && !strcmp(k, "tools")) {
      if (parse_tools(out, v, err)) goto done;
    } else if (kind == DF_SERVE_CHAT && !strcmp(k, "tool_choice")) {
      const char *c = json_is_string(v) ? json_string_value(v) : NULL;
      if (c && !strcmp(c, "auto")) out->tool_choice = DF_TOOL_CHOICE_AUTO;
      else if (c && !strcmp(c, "none")) out->tool_choice = DF_TOOL_CHOICE_NONE;
      else if (c && !strcmp(c, "required")) out->tool_choice = DF_TOOL_CHOICE_REQUIRED;
      else {
        unsupported(k, "\"auto\", \"none\" or \"required\" (naming one function cannot be "
                       "enforced)", err);
        goto done;
      }
    } else if (!strcmp(k, "n")) {
      long long x;
      if (want_int(v, k, 1, DF_SERVE_MAX_N, &x, err)) goto done;
      out->n = (int)x;
    } else if (!strcmp(k, "top_k")) {
      long long x; /* llama.cpp: <= 0 is off */
      if (want_int(v, k, -1, 1 << 30, &x, err)) goto done;
      out->top_k = x > 0 ? (int)x : 0;
    } else if (!strcmp(k, "min_p")) {
      if (want_num(v, k, 0, 1, &out->min_p, err)) goto done;
    } else if (!strcmp(k, "repeat_penalty")) {
      if (want_num(v, k, 0, 10, &out->repeat_penalty, err)) goto done;
      if (out->repeat_penalty == 0) out->repeat_penalty = 1; /* Ollama: 0 is off */
    } else if (!strcmp(k, "presence_penalty")) {
      if (want_num(v, k, -2, 2, &out->presence_penalty, err)) goto done;
    } else if (!strcmp(k, "frequency_penalty")) {
      if (want_num(v, k, -2, 2, &out->frequency_penalty, err)) goto done;
    } else if (!strcmp(k, "logit_bias")) {
      if (parse_logit_bias(out, v, lim, err)) goto done;
    } else if (!strcmp(k, "logprobs")) {
      if (kind == DF_SERVE_CHAT) {
        if (want_bool(v, k, &out->logprobs, err)) goto done;
      } else { /* legacy completions: the number of alternatives */
        long long x;
        if (want_int(v, k, 0, DF_SERVE_MAX_TOP_LOGPROBS, &x, err)) goto done;
        out->logprobs = 1;
        out->top_logprobs = (int)x;
      }
    } else if (kind == DF_SERVE_CHAT && !strcmp(k, "top_logprobs")) {
      long long x;
      if (want_int(v, k, 0, DF_SERVE_MAX_TOP_LOGPROBS, &x, err)) goto done;
      out->top_logprobs = (int)x;
      has_top = 1;
    } else if (!strcmp(k, "user") ||
               (kind == DF_SERVE_CHAT &&
                (!strcmp(k, "safety_identifier") || !strcmp(k, "prompt_cache_key")))) {
      /* identification / cache hints: accepted, nothing to do with them */
      if (want_str(v, k, err)) goto done;
    } else if (!strcmp(k, "metadata")) {
      if (parse_metadata(v, err)) goto done;
    } else if (is_only_default(kind, k)) {
      if (only_default(k, v, err)) goto done;
    } else {
      BAD(err, k, "Unrecognized request argument supplied: %s", k);
      goto done;
    }
  }
  if ((!model || json_is_null(model)) && lim->model_optional) {
    model = NULL;
  } else if (!model || json_is_null(model)) {
    BAD(err, "model", "'model' is required");
    goto done;
  } else if (want_str(model, "model", err)) {
    goto done;
  }
  if (model && lim->model_id && strcmp(json_string_value(model), lim->model_id)) {
    /* 404 as OpenAI answers an unknown model */
    df_serve_err_set(err, 404, "invalid_request_error", "model_not_found", "model",
                     "The model '%.200s' is not served here (this server serves '%.200s')",
                     json_string_value(model), lim->model_id);
    goto done;
  }
  out->model = model ? own_json_str(out, model, NULL) : own(out, "", 0);
  if (kind == DF_SERVE_CHAT) {
    if (!messages || json_is_null(messages)) {
      BAD(err, "messages", "'messages' is required");
      goto done;
    }
    if (parse_messages(out, messages, err)) goto done;
  } else {
    if (!prompt || json_is_null(prompt)) {
      BAD(err, "prompt", "'prompt' is required");
      goto done;
    }
    if (parse_prompt(out, prompt, lim, err)) goto done;
  }
  if (mt >= 0 && mct >= 0 && mt != mct) {
    BAD(err, "max_completion_tokens",
        "'max_tokens' and 'max_completion_tokens' disagree; send only one");
    goto done;
  }
  if (mct >= 0) {
    out->max_tokens = (long)mct;
    out->max_tokens_param = "max_completion_tokens";
  } else if (mt >= 0) {
    out->max_tokens = (long)mt;
    out->max_tokens_param = "max_tokens";
  }
  if (out->grammar && (out->tools_json || out->nstop || out->logprobs)) {
    unsupported("response_format", "structured output together with tools, stop or logprobs", err);
    goto done;
  }
  if (out->tools_json && out->nstop) {
    unsupported("stop", "stop sequences together with tools", err);
    goto done;
  }
  if (out->tools_json && out->logprobs) {
    unsupported("logprobs", "log-probabilities together with tools", err);
    goto done;
  }
  if (has_top && out->top_logprobs > 0 && !out->logprobs) {
    BAD(err, "top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
    goto done;
  }
  if (stream_options && !json_is_null(stream_options)) {
    if (!out->stream) {
      BAD(err, "stream_options", "'stream_options' is only allowed when 'stream' is true");
      goto done;
    }
    if (parse_stream_options(out, stream_options, err)) goto done;
  }
  rc = 0;
done:
  json_decref(root);
  if (rc) df_serve_req_free(out);
  return rc;
}

int df_serve_check_context(const df_serve_req *r, long nprompt, long max_pos, df_serve_err *err) {
  const char *p = r->kind == DF_SERVE_CHAT ? "messages" : "prompt";
  if (nprompt >= max_pos)
    return df_serve_err_set(err, 400, "invalid_request_error", "context_length_exceeded", p,
                            "This model's maximum context length is %ld tokens; the prompt is "
                            "%ld tokens, leaving no room to generate",
                            max_pos, nprompt);
  if (r->max_tokens > 0 && nprompt + r->max_tokens > max_pos)
    return df_serve_err_set(err, 400, "invalid_request_error", "context_length_exceeded",
                            r->max_tokens_param,
                            "This model's maximum context length is %ld tokens; the prompt is "
                            "%ld tokens and %s is %ld, %ld in total",
                            max_pos, nprompt, r->max_tokens_param, r->max_tokens,
                            nprompt + r->max_tokens);
  return 0;
}

/* ---- /tokenize, /detokenize ---- */

static json_t *load_object(const char *body, size_t len, df_serve_err *e) {
  if (!df_utf8_valid(body, len)) {
    BAD(e, NULL, "the request body is not valid UTF-8");
    return NULL;
  }
  json_error_t je;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    BAD(e, NULL, "the request body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
        je.column);
    return NULL;
  }
  if (!json_is_object(root)) {
    BAD(e, NULL, "the request body must be a JSON object, not %s", json_kind(root));
    json_decref(root);
    return NULL;
  }
  return root;
}

int df_serve_parse_tokenize(const char *body, size_t len, char **owned, size_t *text_len,
                            int *with_pieces, int *parse_special, df_serve_err *err) {
  *owned = NULL;
  *with_pieces = *parse_special = 0;
  json_t *root = load_object(body, len, err);
  if (!root) return -1;
  int rc = -1;
  const json_t *content = NULL;
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    if (!strcmp(k, "content")) {
      if (want_str(v, k, err)) goto done;
      content = v;
    } else if (!strcmp(k, "with_pieces")) {
      if (want_bool(v, k, with_pieces, err)) goto done;
    } else if (!strcmp(k, "parse_special") || !strcmp(k, "add_special")) {
      int b;
      if (want_bool(v, k, &b, err)) goto done;
      if (!strcmp(k, "parse_special")) *parse_special = b;
      else if (b) {
        unsupported(k, "K3 prompts have no BOS to add", err);
        goto done;
      }
    } else {
      BAD(err, k, "Unrecognized request argument supplied: %s", k);
      goto done;
    }
  }
  if (!content) {
    BAD(err, "content", "'content' is required");
    goto done;
  }
  *text_len = json_string_length(content);
  *owned = df_xmalloc(*text_len + 1);
  memcpy(*owned, json_string_value(content), *text_len);
  (*owned)[*text_len] = 0;
  rc = 0;
done:
  json_decref(root);
  return rc;
}

int df_serve_parse_detokenize(const char *body, size_t len, int vocab, int **ids, size_t *n,
                              df_serve_err *err) {
  *ids = NULL;
  *n = 0;
  json_t *root = load_object(body, len, err);
  if (!root) return -1;
  int rc = -1;
  const json_t *toks = NULL;
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    if (!strcmp(k, "tokens")) {
      toks = v;
    } else {
      BAD(err, k, "Unrecognized request argument supplied: %s", k);
      goto done;
    }
  }
  if (!toks || !json_is_array(toks)) {
    BAD(err, "tokens", "'tokens' must be an array of token ids");
    goto done;
  }
  size_t m = json_array_size(toks);
  *ids = df_xmalloc((m ? m : 1) * sizeof **ids);
  for (size_t i = 0; i < m; i++) {
    json_t *x = json_array_get(toks, i);
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= vocab) {
      BAD(err, "tokens", "tokens[%zu] is not a token id in [0, %d)", i, vocab);
      free(*ids);
      *ids = NULL;
      goto done;
    }
    (*ids)[i] = (int)json_integer_value(x);
  }
  *n = m;
  rc = 0;
done:
  json_decref(root);
  return rc;
}

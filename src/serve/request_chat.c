/* Chat requests: messages (content parts, tool calls), tools and
 * response_format. */

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "serve/request_int.h"

/* ---- messages ---- */

/* Joins the text parts of a content array, as the K2/K3 templates do (no
 * separator). Anything but text parts is refused, naming the part. */
static int message_content(df_serve_req *r, const json_t *c, size_t i, char **out, size_t *outlen,
                           df_serve_err *e) {
  char p[160];
  if (json_is_string(c)) {
    *out = df_req_own_json_str(r, c, outlen);
    return 0;
  }
  snprintf(p, sizeof p, "messages[%zu].content", i);
  if (!json_is_array(c))
    return BAD(e, p, "'%s' must be a string or an array of text parts, not %s", p,
               df_req_json_kind(c));
  size_t total = 0, j;
  json_t *part;
  json_array_foreach(c, j, part) {
    snprintf(p, sizeof p, "messages[%zu].content[%zu]", i, j);
    if (!json_is_object(part))
      return BAD(e, p, "'%s' must be an object, not %s", p, df_req_json_kind(part));
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
      if (df_req_want_str(v, p, e)) return -1;
      total += json_string_length(v);
    }
    if (!json_object_get(part, "text")) {
      snprintf(p, sizeof p, "messages[%zu].content[%zu].text", i, j);
      return BAD(e, p, "'%s' is required", p);
    }
  }
  char *buf = df_req_own(r, "", 0);
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
static int parse_calls(df_serve_req *r, df_chat_msg *cm, const json_t *v, size_t i,
                       df_serve_err *e) {
  char p[160];
  snprintf(p, sizeof p, "messages[%zu].tool_calls", i);
  if (!json_is_array(v)) return BAD(e, p, "'%s' must be an array, not %s", p, df_req_json_kind(v));
  size_t n = json_array_size(v);
  df_chat_call *calls = df_req_own_raw(r, n * sizeof *calls);
  for (size_t c = 0; c < n; c++) {
    json_t *o = json_array_get(v, c);
    snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu]", i, c);
    if (!json_is_object(o))
      return BAD(e, p, "'%s' must be an object, not %s", p, df_req_json_kind(o));
    json_t *id = json_object_get(o, "id"), *type = json_object_get(o, "type"),
           *fn = json_object_get(o, "function");
    if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "function")))
      return BAD(e, p, "'%s.type' must be \"function\"", p);
    if (id && !json_is_null(id)) {
      if (!json_is_string(id)) return BAD(e, p, "'%s.id' must be a string", p);
      calls[c].id = df_req_own_json_str(r, id, NULL);
    }
    snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu].function", i, c);
    if (!json_is_object(fn)) return BAD(e, p, "'%s' must be an object with a name", p);
    json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
    if (!json_is_string(name) || !json_string_length(name))
      return BAD(e, p, "'%s.name' must be a non-empty string", p);
    calls[c].name = df_req_own_json_str(r, name, NULL);
    if (args && !json_is_null(args)) {
      if (!json_is_string(args)) return BAD(e, p, "'%s.arguments' must be a string of JSON", p);
      calls[c].arguments = df_req_own_json_str(r, args, &calls[c].arguments_len);
    }
  }
  cm->calls = calls;
  cm->ncalls = n;
  return 0;
}

/* The request's response_format, for the release's response-format message. */
static int own_response_format(df_serve_req *r, const json_t *v, df_serve_err *e) {
  char *s = json_dumps(v, JSON_COMPACT);
  if (!s) return BAD(e, "response_format", "'response_format' cannot be serialised");
  r->response_format_len = strlen(s);
  r->response_format_json = df_req_own(r, s, r->response_format_len);
  free(s);
  return 0;
}

/* text; json_object (any object); json_schema {name, schema, strict,
 * description}: constrained decoding (serve/jsongram.h) */
int df_req_parse_response_format(df_serve_req *r, const json_t *v, df_serve_err *e) {
  json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
  const char *ts = t && json_is_string(t) ? json_string_value(t) : "";
  if (!strcmp(ts, "text")) return 0;
  if (!strcmp(ts, "json_object")) {
    r->grammar = df_jg_object();
    return own_response_format(r, v, e);
  }
  if (strcmp(ts, "json_schema"))
    return BAD(e, "response_format.type",
               "'response_format.type' must be text, json_object or json_schema");
  json_t *js = json_object_get(v, "json_schema");
  json_t *schema = json_is_object(js) ? json_object_get(js, "schema") : NULL;
  if (!schema)
    return BAD(e, "response_format.json_schema.schema",
               "'response_format.json_schema.schema' is required");
  char *text = json_dumps(schema, JSON_COMPACT);
  char why[256] = "";
  r->grammar = text ? df_jg_schema(text, strlen(text), why, sizeof why) : NULL;
  free(text);
  if (!r->grammar)
    return df_req_unsupported("response_format.json_schema.schema", why[0] ? why : "unreadable", e);
  return own_response_format(r, v, e);
}

int df_req_parse_tools(df_serve_req *r, const json_t *v, df_serve_err *e) {
  if (!json_is_array(v))
    return BAD(e, "tools", "'tools' must be an array, not %s", df_req_json_kind(v));
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
  r->tools_json = df_req_own(r, s, strlen(s));
  r->tools_len = strlen(s);
  free(s);
  return 0;
}

/* "auto", "none", "required", or one function: {"type":"function",
 * "function":{"name":N}} (Chat Completions) or {"type":"function","name":N}
 * (the Responses API's shape). */
int df_req_parse_tool_choice(df_serve_req *r, const json_t *v, df_serve_err *e) {
  if (json_is_string(v)) {
    const char *c = json_string_value(v);
    if (!strcmp(c, "auto")) r->tool_choice = DF_TOOL_CHOICE_AUTO;
    else if (!strcmp(c, "none")) r->tool_choice = DF_TOOL_CHOICE_NONE;
    else if (!strcmp(c, "required")) r->tool_choice = DF_TOOL_CHOICE_REQUIRED;
    else return BAD(e, "tool_choice", "'tool_choice' must be auto, none, required or a function");
    return 0;
  }
  json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
  if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
    return BAD(e, "tool_choice",
               "'tool_choice' must be auto, none, required or {\"type\":\"function\",\"function\":"
               "{\"name\":...}}");
  json_t *fn = json_object_get(v, "function");
  json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : json_object_get(v, "name");
  if (!json_is_string(name) || !json_string_length(name))
    return BAD(e, "tool_choice.function.name", "'tool_choice.function.name' must be a non-empty string");
  r->tool_choice_name = df_req_own_json_str(r, name, NULL);
  r->tool_choice = DF_TOOL_CHOICE_REQUIRED; /* the release's template knows no named choice */
  return 0;
}

/* The decoding constraint for tool_choice none / required / a named
 * function and parallel_tool_calls false (serve/toolgram.h). A forced
 * call's arguments follow its tool's parameters, so those must be a schema
 * the constrained decoder enforces: otherwise 400 naming the tool. */
int df_req_build_toolgram(df_serve_req *r, const json_t *tools, df_serve_err *e) {
  if (!r->tools_json) {
    if (r->tool_choice_name)
      return BAD(e, "tool_choice", "'tool_choice' names the function '%.100s' but no tools are given",
                 r->tool_choice_name);
    if (r->tool_choice == DF_TOOL_CHOICE_REQUIRED)
      return BAD(e, "tool_choice", "'tool_choice' \"required\" needs 'tools'");
    return 0;
  }
  int forbid = r->tool_choice == DF_TOOL_CHOICE_NONE;
  int force = r->tool_choice == DF_TOOL_CHOICE_REQUIRED;
  int one = !forbid && (!r->parallel_tool_calls || r->tool_choice_name);
  if (!forbid && !force && !one) return 0;
  const char *names[DF_TG_MAX_TOOLS];
  int n = 0;
  if (force) {
    size_t i;
    json_t *t;
    r->tool_args = df_xcalloc(DF_TG_MAX_TOOLS, sizeof *r->tool_args);
    json_array_foreach(tools, i, t) {
      json_t *fn = json_object_get(t, "function");
      const char *name = json_string_value(json_object_get(fn, "name"));
      if (r->tool_choice_name && strcmp(name, r->tool_choice_name)) continue;
      if (n == DF_TG_MAX_TOOLS)
        return df_req_unsupported("tool_choice", "\"required\" with more than 64 tools", e);
      json_t *params = json_object_get(fn, "parameters");
      char why[256] = "", p[160];
      snprintf(p, sizeof p, "tools[%zu].function.parameters", i);
      if (!params || json_is_null(params)) {
        r->tool_args[n] = df_jg_object();
      } else {
        char *text = json_dumps(params, JSON_COMPACT);
        r->tool_args[n] = text ? df_jg_schema(text, strlen(text), why, sizeof why) : NULL;
        free(text);
      }
      if (!r->tool_args[n])
        return BAD(e, p, "'%s' cannot be enforced for tool_choice %s: %s", p,
                   r->tool_choice_name ? "naming a function" : "\"required\"",
                   why[0] ? why : "unreadable");
      names[n] = name;
      r->ntool_args = ++n;
    }
    if (!n)
      return BAD(e, "tool_choice.function.name", "'tool_choice' names '%.100s', which is not in 'tools'",
                 r->tool_choice_name);
  }
  r->toolgram = df_tg_new(forbid, force, one, r->thinking, names, (const df_jg *const *)r->tool_args, n);
  return 0;
}

int df_req_parse_messages(df_serve_req *r, const json_t *arr, df_serve_err *e) {
  if (!json_is_array(arr))
    return BAD(e, "messages", "'messages' must be an array, not %s", df_req_json_kind(arr));
  size_t n = json_array_size(arr);
  if (n == 0) return BAD(e, "messages", "'messages' must contain at least one message");
  r->msgs = df_xcalloc(n, sizeof *r->msgs);
  r->nmsgs = n;
  char p[160];
  for (size_t i = 0; i < n; i++) {
    json_t *m = json_array_get(arr, i);
    df_chat_msg *cm = &r->msgs[i];
    snprintf(p, sizeof p, "messages[%zu]", i);
    if (!json_is_object(m))
      return BAD(e, p, "'%s' must be an object, not %s", p, df_req_json_kind(m));
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
    const json_t *content = NULL, *name = NULL, *call_id = NULL, *reasoning_content = NULL,
                 *reasoning_alias = NULL;
    json_object_foreach(m, k, v) {
      snprintf(p, sizeof p, "messages[%zu].%s", i, k);
      if (!strcmp(k, "role")) continue;
      if (!strcmp(k, "content")) {
        content = v;
      } else if (!strcmp(k, "name")) {
        /* a tool message's name is its tool; on the others the release
         * renders it as name="..." */
        if (json_is_null(v)) continue;
        if (df_req_want_str(v, p, e)) return -1;
        if (cm->role == DF_ROLE_TOOL) name = v;
        else if (json_string_length(v)) cm->name = df_req_own_json_str(r, v, NULL);
      } else if (!strcmp(k, "tool_call_id")) {
        if (cm->role != DF_ROLE_TOOL) return BAD(e, p, "'%s' belongs on tool messages only", p);
        if (df_req_want_str(v, p, e)) return -1;
        call_id = v;
      } else if (!strcmp(k, "reasoning_content") || !strcmp(k, "reasoning")) {
        /* "reasoning": the name OpenRouter and vLLM's newer replies use */
        if (cm->role != DF_ROLE_ASSISTANT)
          return BAD(e, p, "'%s' belongs on assistant messages only", p);
        if (json_is_null(v)) continue;
        if (df_req_want_str(v, p, e)) return -1;
        if (!strcmp(k, "reasoning")) reasoning_alias = v;
        else reasoning_content = v;
      } else if (!strcmp(k, "tool_calls")) {
        if (json_is_null(v) || (json_is_array(v) && json_array_size(v) == 0)) continue;
        if (cm->role != DF_ROLE_ASSISTANT)
          return BAD(e, p, "'%s' belongs on assistant messages only", p);
        if (parse_calls(r, cm, v, i, e)) return -1;
      } else if (!strcmp(k, "function_call") || !strcmp(k, "refusal") || !strcmp(k, "audio")) {
        if (json_is_null(v)) continue;
        return df_req_unsupported(p, "only text messages are supported", e);
      } else if (!strcmp(k, "parsed")) {
        /* the SDK's .parse() result, sent back with the history */
        if (json_is_null(v) || cm->role == DF_ROLE_ASSISTANT) continue;
        return BAD(e, p, "'%s' belongs on assistant messages only", p);
      } else if (!strcmp(k, "annotations")) {
        /* output metadata (url citations) the SDK round-trips: nothing to render */
        if (json_is_null(v) || json_is_array(v)) continue;
        return BAD(e, p, "'%s' must be an array, not %s", p, df_req_json_kind(v));
      } else {
        return BAD(e, p, "unrecognized field '%s' in a message", k);
      }
    }
    /* as the release: reasoning_content, or reasoning when that is absent or empty */
    const json_t *rs_v = reasoning_content && json_string_length(reasoning_content)
                             ? reasoning_content
                             : reasoning_alias ? reasoning_alias : reasoning_content;
    if (rs_v) cm->reasoning = df_req_own_json_str(r, rs_v, &cm->reasoning_len);
    snprintf(p, sizeof p, "messages[%zu].content", i);
    if (!content) return BAD(e, p, "'%s' is required", p);
    if (json_is_null(content)) {
      /* null content only makes sense for an assistant turn */
      if (cm->role != DF_ROLE_ASSISTANT) return BAD(e, p, "'%s' must not be null", p);
      cm->content = df_req_own(r, "", 0);
      cm->content_len = 0;
    } else if (message_content(r, content, i, (char **)&cm->content, &cm->content_len, e)) {
      return -1;
    }
    if (cm->role == DF_ROLE_TOOL) {
      snprintf(p, sizeof p, "messages[%zu].tool_call_id", i);
      if (!call_id) return BAD(e, p, "'%s' is required on tool messages", p);
      /* K3 names the tool; OpenAI only gives the call id unless a name is sent.
       * The release's renderer finds the name from the call id. */
      cm->tool_call_id = df_req_own_json_str(r, call_id, NULL);
      cm->tool_name = name ? df_req_own_json_str(r, name, NULL) : NULL;
      if (!cm->tool_name) cm->tool_name = cm->tool_call_id;
    }
  }
  return 0;
}


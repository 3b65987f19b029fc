#include "serve/request.h"

#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "serve/request_int.h"

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

/* ---- owned strings ---- */

char *df_req_own(df_serve_req *r, const char *s, size_t n) {
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
void *df_req_own_raw(df_serve_req *r, size_t n) {
  char *p = df_req_own(r, "", 0);
  p = df_xrealloc(p, n ? n : 1);
  memset(p, 0, n ? n : 1);
  r->owned[r->nowned - 1] = p;
  return p;
}

char *df_req_own_json_str(df_serve_req *r, const json_t *v, size_t *len) {
  size_t n = json_string_length(v);
  if (len) *len = n;
  return df_req_own(r, json_string_value(v), n);
}

void df_serve_req_free(df_serve_req *r) {
  if (!r) return;
  for (size_t i = 0; i < r->nowned; i++) free(r->owned[i]);
  free(r->owned);
  free(r->msgs);
  free(r->prompt_ids);
  free(r->bias);
  df_jg_free(r->grammar);
  df_tg_free(r->toolgram);
  for (int i = 0; i < r->ntool_args; i++) df_jg_free(r->tool_args[i]);
  free(r->tool_args);
  memset(r, 0, sizeof *r);
}

/* ---- field checks ---- */

const char *df_req_json_kind(const json_t *v) {
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

int df_req_want_bool(const json_t *v, const char *param, int *out, df_serve_err *e) {
  *out = 0; /* defined on every path (gcc -O3 cannot see that BAD returns -1) */
  if (!json_is_boolean(v))
    return BAD(e, param, "'%s' must be a boolean, not %s", param, df_req_json_kind(v));
  *out = json_is_true(v);
  return 0;
}

static int want_int(const json_t *v, const char *param, long long lo, long long hi,
                    long long *out, df_serve_err *e) {
  if (!json_is_integer(v))
    return BAD(e, param, "'%s' must be an integer, not %s", param, df_req_json_kind(v));
  long long x = json_integer_value(v);
  if (x < lo || x > hi)
    return BAD(e, param, "'%s' is %lld; it must be between %lld and %lld", param, x, lo, hi);
  *out = x;
  return 0;
}

static int want_num(const json_t *v, const char *param, double lo, double hi, double *out,
                    df_serve_err *e) {
  if (!json_is_number(v))
    return BAD(e, param, "'%s' must be a number, not %s", param, df_req_json_kind(v));
  double x = json_number_value(v);
  if (!(x >= lo && x <= hi))
    return BAD(e, param, "'%s' is %g; it must be between %g and %g", param, x, lo, hi);
  *out = x;
  return 0;
}

int df_req_want_str(const json_t *v, const char *param, df_serve_err *e) {
  if (!json_is_string(v))
    return BAD(e, param, "'%s' must be a string, not %s", param, df_req_json_kind(v));
  return 0;
}

int df_req_unsupported(const char *param, const char *why, df_serve_err *e) {
  return BAD(e, param, "'%s' is not supported by this server: %s", param, why);
}

/* ---- prompt (completions) ---- */

static int parse_prompt(df_serve_req *r, const json_t *v, const df_serve_limits *lim,
                        df_serve_err *e) {
  if (json_is_string(v)) {
    if (json_string_length(v) == 0) return BAD(e, "prompt", "'prompt' must not be empty");
    r->prompt = df_req_own_json_str(r, v, &r->prompt_len);
    return 0;
  }
  if (!json_is_array(v))
    return BAD(e, "prompt", "'prompt' must be a string or an array, not %s", df_req_json_kind(v));
  size_t n = json_array_size(v);
  if (n == 0) return BAD(e, "prompt", "'prompt' must not be empty");
  json_t *first = json_array_get(v, 0);
  const json_t *ids = NULL;
  if (json_is_string(first) || json_is_array(first)) {
    if (n > 1) return df_req_unsupported("prompt", "one prompt per request (n = 1)", e);
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
  if (!strcmp(s, "minimal")) {
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
  if (!json_is_object(v))
    return BAD(e, "logit_bias", "'logit_bias' must be an object, not %s", df_req_json_kind(v));
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
      return BAD(e, "stop", "'stop' has %zu sequences; at most %d are allowed", n,
                 DF_SERVE_MAX_STOP);
    for (size_t i = 0; i < n; i++) tmp[i] = json_array_get(v, i);
    items = (const json_t *const *)tmp;
  } else if (!json_is_string(v)) {
    return BAD(e, "stop", "'stop' must be a string or an array of strings, not %s",
               df_req_json_kind(v));
  }
  for (size_t i = 0; i < n; i++) {
    if (!json_is_string(items[i])) return BAD(e, "stop", "'stop' entries must be strings");
    size_t len = json_string_length(items[i]);
    if (len == 0) return BAD(e, "stop", "'stop' sequences must not be empty");
    if (len > DF_SERVE_MAX_STOP_LEN)
      return BAD(e, "stop", "a 'stop' sequence is %zu bytes; at most %d are allowed", len,
                 DF_SERVE_MAX_STOP_LEN);
    r->stop[r->nstop] = df_req_own_json_str(r, items[i], &r->stop_len[r->nstop]);
    r->nstop++;
  }
  return 0;
}

static int parse_stream_options(df_serve_req *r, const json_t *v, df_serve_err *e) {
  if (!json_is_object(v))
    return BAD(e, "stream_options", "'stream_options' must be an object, not %s",
               df_req_json_kind(v));
  const char *k;
  json_t *x;
  char p[160];
  json_object_foreach((json_t *)v, k, x) {
    snprintf(p, sizeof p, "stream_options.%s", k);
    if (!strcmp(k, "include_usage")) {
      if (!json_is_null(x) && df_req_want_bool(x, p, &r->include_usage, e)) return -1;
    } else if (!strcmp(k, "include_obfuscation")) {
      int b = 0;
      if (!json_is_null(x) && df_req_want_bool(x, p, &b, e)) return -1;
      if (b) return df_req_unsupported(p, "streams are not obfuscated", e);
    } else {
      return BAD(e, p, "unrecognized field '%s' in stream_options", k);
    }
  }
  return 0;
}

/* chat_template_kwargs (vLLM, SGLang): the K3 template's own switches.
 * thinking: false renders the instruct mode; thinking_effort names the
 * effort message's level as the template does (low, high, max). Any other
 * key is refused by name: a switch the template would read must not be
 * dropped silently. */
static int parse_template_kwargs(df_serve_req *r, const json_t *v, int *effort_set,
                                 df_serve_err *e) {
  if (!json_is_object(v))
    return BAD(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object, not %s",
               df_req_json_kind(v));
  const char *k;
  json_t *x;
  char p[160];
  json_object_foreach((json_t *)v, k, x) {
    snprintf(p, sizeof p, "chat_template_kwargs.%.64s", k);
    if (json_is_null(x)) continue;
    if (!strcmp(k, "thinking") || !strcmp(k, "enable_thinking")) {
      /* enable_thinking: the name other templates (Qwen, GLM) use for the same switch */
      if (df_req_want_bool(x, p, &r->thinking, e)) return -1;
    } else if (!strcmp(k, "thinking_effort")) {
      if (df_req_want_str(x, p, e)) return -1;
      const char *s = json_string_value(x);
      if (!strcmp(s, "low")) r->effort = DF_EFFORT_LOW;
      else if (!strcmp(s, "high")) r->effort = DF_EFFORT_HIGH;
      else if (!strcmp(s, "max")) r->effort = DF_EFFORT_MAX;
      else return BAD(e, p, "'%s' '%.32s' is not one the template accepts (low, high, max)", p, s);
      *effort_set = 1;
    } else {
      return df_req_unsupported(p, "the K3 template reads thinking and thinking_effort", e);
    }
  }
  return 0;
}

static int parse_metadata(const json_t *v, df_serve_err *e) {
  if (!json_is_object(v))
    return BAD(e, "metadata", "'metadata' must be an object, not %s", df_req_json_kind(v));
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
    if (x != 1) return df_req_unsupported(k, "best-of ranking is not implemented (use n)", e);
    return 0;
  }
  if (!strcmp(k, "echo") || !strcmp(k, "store")) {
    int b;
    if (df_req_want_bool(v, k, &b, e)) return -1;
    if (b) return df_req_unsupported(k, "only the default (false) is implemented", e);
    return 0;
  }
  if (!strcmp(k, "tools") || !strcmp(k, "functions")) {
    if (!json_is_array(v))
      return BAD(e, k, "'%s' must be an array, not %s", k, df_req_json_kind(v));
    if (json_array_size(v)) return df_req_unsupported(k, "tool calling is not implemented", e);
    return 0;
  }
  if (!strcmp(k, "tool_choice") || !strcmp(k, "function_call")) {
    if (json_is_string(v) && !strcmp(json_string_value(v), "none")) return 0;
    return df_req_unsupported(k, "tool calling is not implemented (only \"none\")", e);
  }
  if (!strcmp(k, "parallel_tool_calls")) {
    int b;
    return df_req_want_bool(v, k, &b, e); /* meaningless without tools: any boolean is honoured */
  }

  if (!strcmp(k, "modalities")) {
    if (json_is_array(v) && json_array_size(v) == 1 &&
        json_is_string(json_array_get(v, 0)) &&
        !strcmp(json_string_value(json_array_get(v, 0)), "text"))
      return 0;
    return df_req_unsupported(k, "only [\"text\"]", e);
  }
  if (!strcmp(k, "suffix")) {
    if (json_is_string(v) && json_string_length(v) == 0) return 0;
    return df_req_unsupported(k, "insertion is not implemented", e);
  }
  if (!strcmp(k, "service_tier")) {
    if (json_is_string(v) &&
        (!strcmp(json_string_value(v), "auto") || !strcmp(json_string_value(v), "default")))
      return 0;
    return df_req_unsupported(k, "one tier: \"auto\" or \"default\"", e);
  }
  /* audio, prediction, web_search_options, verbosity */
  return df_req_unsupported(k, "only the default (off) is implemented", e);
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
                                     "chat_template_kwargs", NULL};
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
  out->thinking = 1;
  out->parallel_tool_calls = 1;
  int effort_none = 0, effort_set = 0;
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
    BAD(err, NULL, "the request body must be a JSON object, not %s", df_req_json_kind(root));
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
      if (df_req_want_bool(v, k, &out->stream, err)) goto done;
    } else if (!strcmp(k, "stream_options")) {
      stream_options = v;
    } else if (kind == DF_SERVE_CHAT && !strcmp(k, "reasoning_effort")) {
      if (df_req_want_str(v, k, err)) goto done;
      const char *s = json_string_value(v);
      if (!strcmp(s, "none")) {
        effort_none = 1;
      } else if (df_serve_effort(s, &out->effort)) {
        BAD(err, k,
            "'reasoning_effort' '%s' is not supported (none, minimal, low, medium, high, xhigh, "
            "max)",
            s);
        goto done;
      } else {
        effort_set = 1;
      }
    } else if (kind == DF_SERVE_CHAT && !strcmp(k, "chat_template_kwargs")) {
      if (parse_template_kwargs(out, v, &effort_set, err)) goto done;
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
      if (df_req_parse_response_format(out, v, err)) goto done;
    } else if (kind == DF_SERVE_CHAT && !strcmp(k, "tools")) {
      if (df_req_parse_tools(out, v, err)) goto done;
    } else if (kind == DF_SERVE_CHAT && !strcmp(k, "tool_choice")) {
      if (df_req_parse_tool_choice(out, v, err)) goto done;
    } else if (kind == DF_SERVE_CHAT && !strcmp(k, "parallel_tool_calls")) {
      if (df_req_want_bool(v, k, &out->parallel_tool_calls, err)) goto done;
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
        if (df_req_want_bool(v, k, &out->logprobs, err)) goto done;
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
      if (df_req_want_str(v, k, err)) goto done;
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
  } else if (df_req_want_str(model, "model", err)) {
    goto done;
  }
  if (model && lim->model_id && strcmp(json_string_value(model), lim->model_id)) {
    /* 404 as OpenAI answers an unknown model */
    df_serve_err_set(err, 404, "invalid_request_error", "model_not_found", "model",
                     "The model '%.200s' is not served here (this server serves '%.200s')",
                     json_string_value(model), lim->model_id);
    goto done;
  }
  out->model = model ? df_req_own_json_str(out, model, NULL) : df_req_own(out, "", 0);
  if (kind == DF_SERVE_CHAT) {
    if (!messages || json_is_null(messages)) {
      BAD(err, "messages", "'messages' is required");
      goto done;
    }
    if (df_req_parse_messages(out, messages, err)) goto done;
  } else {
    if (!prompt || json_is_null(prompt)) {
      BAD(err, "prompt", "'prompt' is required");
      goto done;
    }
    if (parse_prompt(out, prompt, lim, err)) goto done;
  }
  if (effort_none) {
    if (json_is_true(json_object_get(json_object_get(root, "chat_template_kwargs"), "thinking"))) {
      BAD(err, "reasoning_effort",
          "'reasoning_effort' \"none\" turns thinking off; chat_template_kwargs.thinking is true");
      goto done;
    }
    out->thinking = 0;
  }
  if (!out->thinking) {
    if (effort_set && !effort_none) {
      BAD(err, "reasoning_effort", "a thinking effort needs thinking; it is turned off");
      goto done;
    }
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
    df_req_unsupported("response_format", "structured output together with tools, stop or logprobs",
                       err);
    goto done;
  }
  if (kind == DF_SERVE_CHAT && df_req_build_toolgram(out, json_object_get(root, "tools"), err))
    goto done;
  if (out->tools_json && out->nstop) {
    df_req_unsupported("stop", "stop sequences together with tools", err);
    goto done;
  }
  if (out->tools_json && out->logprobs) {
    df_req_unsupported("logprobs", "log-probabilities together with tools", err);
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


long df_serve_max_new(const df_serve_req *r, long nprompt, long max_pos, long dflt) {
  if (r->max_tokens > 0) return r->max_tokens; /* checked against the context already */
  long room = max_pos - nprompt;
  long n = r->kind == DF_SERVE_COMPLETION ? DF_SERVE_COMPLETION_DEFAULT_MAX : room;
  if (dflt > 0 && dflt < n) n = dflt;
  return n < room ? n : room;
}

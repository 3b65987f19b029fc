/* deltafin template: what the model is fed for a conversation, rendered by
 * the release's chat encoder (df_chat_render_json): the prompt text and its
 * ids, so a user can check a prompt before serving it. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

void df_cmd_template_help(void) {
  printf(
      "usage: deltafin template --model DIR --messages FILE [--tools FILE] [--effort E]\n"
      "                         [--no-thinking] [--tool-choice C] [--no-generation-prompt] [--json]\n"
      "\n"
      "Renders a conversation the way the Kimi K3 release's encoder does\n"
      "(encoding_k3.py, with apply_chat_template's defaults) and prints the prompt\n"
      "text, then a line with its token ids: the ids `run --chat` and `serve` feed\n"
      "the model for the same conversation.\n"
      "\n"
      "options:\n"
      "  --model DIR         model directory (its tokenizer)\n"
      "  --messages FILE     OpenAI chat messages: a JSON array, or a request object\n"
      "                      with \"messages\" (and \"tools\", \"tool_choice\",\n"
      "                      \"response_format\") ('-' = stdin)\n"
      "  --tools FILE        OpenAI tools, a JSON array (overrides the request's)\n"
      "  --effort E          thinking effort message: low, high or max (default max,\n"
      "                      as the release's apply_chat_template; it refuses medium)\n"
      "  --no-thinking       instruct mode: the prompt opens the response channel and\n"
      "                      history carries no think blocks\n"
      "  --tool-choice C     auto (default), none or required\n"
      "  --no-generation-prompt  end after the last message\n"
      "  --json              {\"prompt\": TEXT, \"ids\": [...]} instead of text\n");
}

static int read_json_file(const char *path, json_t **out) {
  char *buf;
  size_t len;
  if (df_cli_read_input(path, &buf, &len)) return 1;
  json_error_t je;
  *out = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
  free(buf);
  if (!*out)
    return df_cli_fail("%s: invalid JSON at line %d column %d: %s", path, je.line, je.column,
                       je.text);
  return 0;
}

int df_cmd_template(int argc, char **argv) {
  if (df_cli_wants_help(argc, argv)) {
    df_cmd_template_help();
    return 0;
  }
  const char *model = NULL, *mfile = NULL, *tfile = NULL, *effort = NULL, *choice = NULL;
  int thinking = 1, gen = 1, as_json = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--no-thinking")) thinking = 0;
    else if (!strcmp(a, "--no-generation-prompt")) gen = 0;
    else if (!strcmp(a, "--json")) as_json = 1;
    else if (!strcmp(a, "--model") || !strcmp(a, "--messages") || !strcmp(a, "--tools") ||
             !strcmp(a, "--effort") || !strcmp(a, "--tool-choice")) {
      if (i + 1 >= argc) return df_cli_fail("%s needs a value", a);
      const char *v = argv[++i];
      if (!strcmp(a, "--model")) model = v;
      else if (!strcmp(a, "--messages")) mfile = v;
      else if (!strcmp(a, "--tools")) tfile = v;
      else if (!strcmp(a, "--effort")) effort = v;
      else choice = v;
    } else {
      return df_cli_fail("template: unknown argument '%s' (see deltafin template --help)", a);
    }
  }
  if (!model) return df_cli_fail("template needs --model DIR (for its tokenizer)");
  if (!mfile) return df_cli_fail("template needs --messages FILE");
  if (effort && !df_chat_effort_valid(effort))
    return df_cli_fail("--effort: '%s' is not one the release accepts (low, high, max)", effort);
  if (effort && !thinking) return df_cli_fail("--effort needs thinking (drop --no-thinking)");

  json_t *req, *tools = NULL, *rformat = NULL;
  if (read_json_file(mfile, &req)) return 1;
  json_t *msgs = req;
  if (json_is_object(req)) {
    msgs = json_object_get(req, "messages");
    tools = json_object_get(req, "tools");
    rformat = json_object_get(req, "response_format");
    const json_t *tc = json_object_get(req, "tool_choice");
    if (!choice && json_is_string(tc)) choice = json_string_value(tc);
  }
  if (!json_is_array(msgs)) {
    json_decref(req);
    return df_cli_fail("%s: expected a JSON array of messages (or an object with one under "
                       "\"messages\")", mfile);
  }
  json_t *tfj = NULL;
  if (tfile) {
    if (read_json_file(tfile, &tfj)) {
      json_decref(req);
      return 1;
    }
    tools = tfj;
  }
  df_chat_opts o = df_chat_opts_default();
  o.thinking = thinking;
  if (effort) o.effort = effort; /* else apply_chat_template's: max */
  o.add_generation_prompt = gen;
  int rc = 1;
  char *ms = NULL, *ts = NULL, *rs = NULL;
  df_tok *tok = NULL;
  if (!choice || !strcmp(choice, "auto")) o.tool_choice = DF_TOOL_CHOICE_AUTO;
  else if (!strcmp(choice, "none")) o.tool_choice = DF_TOOL_CHOICE_NONE;
  else if (!strcmp(choice, "required")) o.tool_choice = DF_TOOL_CHOICE_REQUIRED;
  else {
    df_cli_fail("--tool-choice: '%s' is not auto, none or required", choice);
    goto out;
  }
  if (tools && !json_is_null(tools)) {
    ts = json_dumps(tools, JSON_ENCODE_ANY);
    o.tools_json = ts;
    o.tools_len = strlen(ts);
  }
  if (rformat && !json_is_null(rformat)) {
    rs = json_dumps(rformat, JSON_ENCODE_ANY);
    o.response_format_json = rs;
    o.response_format_len = strlen(rs);
  }
  ms = json_dumps(msgs, 0);
  df_err e;
  if (df_tok_load(&tok, model, &e)) {
    df_cli_fail("%s", e.msg);
    goto out;
  }
  df_chat_prompt p;
  if (df_chat_render_json(tok, ms, strlen(ms), &o, &p, &e)) {
    df_cli_fail("%s: %s", mfile, e.msg);
    goto out;
  }
  if (as_json) {
    json_t *ids = json_array();
    for (size_t i = 0; i < p.n; i++) json_array_append_new(ids, json_integer(p.ids[i]));
    json_t *j = json_pack("{s:s%, s:o}", "prompt", p.text, p.text_len, "ids", ids);
    char *s = json_dumps(j, JSON_COMPACT);
    puts(s);
    free(s);
    json_decref(j);
  } else {
    fwrite(p.text, 1, p.text_len, stdout);
    printf("\nids (%zu):", p.n);
    for (size_t i = 0; i < p.n; i++) printf("%s%d", i ? "," : " ", p.ids[i]);
    printf("\n");
  }
  df_chat_prompt_free(&p);
  rc = 0;
out:
  df_tok_free(tok);
  free(ms);
  free(ts);
  free(rs);
  json_decref(tfj);
  json_decref(req);
  return rc;
}

#!/bin/sh
# Thinking off: chat_template_kwargs {"thinking": false} (as vLLM and SGLang
# users pass it) and reasoning_effort "none" render the release's instruct
# mode - the same ids as `deltafin template --no-thinking` - and the reply's
# text is the response, not reasoning. History messages may carry their
# reasoning as "reasoning" or "reasoning_content", rendered as the CLI
# renders the same JSON. --debug-output-ids makes the output known text.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d /tmp/df-e2e-serve-thinking.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny

TEXT="Plain answer text with no markup at all"
IDS=$("$DF_BIN" tokenize --model "$T/model" "$TEXT")
start S --debug-output-ids "$IDS"
U="http://127.0.0.1:$PORT"

# ---- the prompt: /apply-template against the CLI's renderer on the same messages
HIST='[{"role":"user","content":"hi"},{"role":"assistant","content":"hello","reasoning":"greet back"},{"role":"user","content":"and now?"}]'
HIST2='[{"role":"user","content":"hi"},{"role":"assistant","content":"hello","reasoning_content":"greet back"},{"role":"user","content":"and now?"}]'
echo "$HIST" >"$T/hist.json"
cli_ids() { # FILE [template options]: the ids line of `deltafin template --json`
  f=$1
  shift
  "$DF_BIN" template --model "$T/model" --messages "$f" --json "$@" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["ids"])'
}
srv_ids() { # BODY-FIELDS
  s=$(req "$T/a" POST "$U/apply-template" -H "$JSON" -d "{\"messages\":$HIST$1}")
  [ "$s" = 200 ] || fail "apply-template $1: $s $(cat "$T/a")"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"])' "$T/a"
}
OFF=$(cli_ids "$T/hist.json" --no-thinking)
ON=$(cli_ids "$T/hist.json" --effort max)
[ "$OFF" != "$ON" ] || fail "the CLI renders thinking on and off alike"
[ "$(srv_ids ',"chat_template_kwargs":{"thinking":false}')" = "$OFF" ] ||
  fail "chat_template_kwargs thinking false is not the instruct mode"
[ "$(srv_ids ',"reasoning_effort":"none"')" = "$OFF" ] || fail "reasoning_effort none is not the instruct mode"
[ "$(srv_ids '')" = "$ON" ] || fail "the default is not think mode with the history's reasoning"
[ "$(srv_ids ',"chat_template_kwargs":{"thinking":true,"thinking_effort":"low"}')" = "$(cli_ids "$T/hist.json" --effort low)" ] ||
  fail "chat_template_kwargs thinking_effort low"
HIST=$HIST2
[ "$(srv_ids '')" = "$ON" ] || fail "reasoning_content renders unlike reasoning"
pass "thinking off renders the release's instruct mode; history reasoning under either name"

# ---- the reply: the forced text is the response with thinking off, reasoning with it on
chat() { # EXTRA-FIELDS STREAM(true|false)
  s=$(req "$T/c" POST "$U/v1/chat/completions" -H "$JSON" \
    -d "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":$2$1}")
  [ "$s" = 200 ] || fail "chat $1: $s $(cat "$T/c")"
}
# reply FILE: prints content|reasoning from a whole reply or an SSE stream
reply() {
  python3 - "$1" <<'PY'
import json, sys
raw = open(sys.argv[1]).read()
if raw.startswith("data:"):
    c = r = ""
    for line in raw.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ch = json.loads(line[6:])["choices"]
        if ch:
            d = ch[0]["delta"]
            c += d.get("content") or ""
            r += d.get("reasoning_content") or ""
    print(c + "|" + r)
else:
    m = json.loads(raw)["choices"][0]["message"]
    print((m["content"] or "") + "|" + (m.get("reasoning_content") or ""))
PY
}
for st in false true; do
  chat ',"chat_template_kwargs":{"thinking":false}' $st
  [ "$(reply "$T/c")" = "$TEXT|" ] || fail "thinking false, stream $st: $(cat "$T/c")"
  chat ',"reasoning_effort":"none"' $st
  [ "$(reply "$T/c")" = "$TEXT|" ] || fail "reasoning_effort none, stream $st: $(cat "$T/c")"
  chat '' $st
  [ "$(reply "$T/c")" = "|$TEXT" ] || fail "thinking on, stream $st: $(cat "$T/c")"
done
chat ',"reasoning_effort":"none"' false
python3 -c 'import json,sys; u=json.load(open(sys.argv[1]))["usage"]; assert u.get("completion_tokens_details",{}).get("reasoning_tokens",0)==0, u' "$T/c" ||
  fail "reasoning tokens counted with thinking off: $(cat "$T/c")"
pass "with thinking off the reply is response text (whole and streamed), with it on reasoning"

# ---- refusals name the field
bad() { # FIELDS PARAM
  s=$(req "$T/b" POST "$U/v1/chat/completions" -H "$JSON" \
    -d "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]$1}")
  [ "$s" = 400 ] || fail "$1: status $s"
  python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["error"]["param"]==sys.argv[2]' "$T/b" "$2" ||
    fail "$1: $(cat "$T/b")"
}
bad ',"chat_template_kwargs":{"thinking":"no"}' chat_template_kwargs.thinking
bad ',"chat_template_kwargs":{"unknown_switch":1}' chat_template_kwargs.unknown_switch
bad ',"chat_template_kwargs":{"thinking":true},"reasoning_effort":"none"' reasoning_effort
pass "bad template switches get 400 naming them"
echo "PASS: deltafin serve thinking off"

#!/bin/sh
# deltafin template: a conversation rendered the release's way, on a generated
# checkpoint's tokenizer. The tool-declare + tool_choice=required prompt is the
# one a public oracle pins by sha256 (tests/fixtures/chat/k3-encoder-goldens.json,
# first case); the ids must decode back to the text; bad input is one error line.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
T=$(mktemp -d "${TMPDIR:-/tmp}/df-template.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

"$DF_BIN" make-model --preset tiny --seed 2 --out "$T/m" -q >/dev/null 2>&1 || fail "make-model"
cat >"$T/req.json" <<'JSON'
{"messages": [{"role": "user", "content": "What's the weather in San Francisco?"}],
 "tools": [{"type": "function", "function": {"name": "get_weather",
   "description": "Get current weather for a location", "parameters": {"type": "object",
   "properties": {"location": {"type": "string", "description": "City name"}},
   "required": ["location"]}}}],
 "tool_choice": "required"}
JSON
"$DF_BIN" template --model "$T/m" --messages "$T/req.json" --no-thinking --json >"$T/out.json" ||
  fail "template exited $?"
jq -j .prompt "$T/out.json" >"$T/prompt.txt"
sum=$(sha256sum "$T/prompt.txt" | cut -d' ' -f1)
[ "$sum" = fa05c4fc98a796f387838fdef2aef89aaa5805ca2bbb1c7101ed428f80439d14 ] ||
  fail "prompt sha256 $sum differs from the pinned official prompt: $(cat "$T/prompt.txt")"
"$DF_BIN" detokenize --model "$T/m" "$(jq -r '.ids | map(tostring) | join(",")' "$T/out.json")" \
  >"$T/back.txt"
cmp -s "$T/prompt.txt" "$T/back.txt" || fail "ids do not decode to the prompt"
echo "tool-declare prompt: sha256 matches the official one, ids decode back"

# text form: the prompt, then one line of ids (the same ones); messages as a bare array
jq .messages "$T/req.json" >"$T/msgs.json"
jq .tools "$T/req.json" >"$T/tools.json"
"$DF_BIN" template --model "$T/m" --messages "$T/msgs.json" --tools "$T/tools.json" \
  --tool-choice required --no-thinking >"$T/out.txt"
[ "$(tail -n 1 "$T/out.txt" | sed 's/^ids ([0-9]*): //')" = "$(jq -r '.ids | map(tostring) | join(",")' "$T/out.json")" ] ||
  fail "text form ids differ: $(tail -n 1 "$T/out.txt")"

# thinking on with an effort: the effort message first, the think channel opened
"$DF_BIN" template --model "$T/m" --messages "$T/msgs.json" --effort high --json >"$T/o2.json"
jq -e '.prompt | startswith("<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>")' \
  "$T/o2.json" >/dev/null || fail "no effort message first"
jq -e '.prompt | endswith("<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>")' \
  "$T/o2.json" >/dev/null || fail "no think generation prompt"

# errors: one line naming the problem, exit 1
expect_fail() {
  want=$1
  shift
  if "$DF_BIN" template "$@" >/dev/null 2>"$T/err"; then fail "template $* succeeded"; fi
  [ "$(wc -l <"$T/err")" -eq 1 ] || fail "template $*: $(cat "$T/err")"
  grep -q -- "$want" "$T/err" || fail "template $*: no '$want' in $(cat "$T/err")"
}
expect_fail medium --model "$T/m" --messages "$T/msgs.json" --effort medium
expect_fail messages --model "$T/m"
printf '[{"role": "user"' >"$T/bad.json"
expect_fail bad.json --model "$T/m" --messages "$T/bad.json"
printf '[{"role": "tool", "content": "x"}]' >"$T/orphan.json"
expect_fail name --model "$T/m" --messages "$T/orphan.json"
expect_fail tool-choice --model "$T/m" --messages "$T/msgs.json" --tool-choice sometimes
echo "ok"

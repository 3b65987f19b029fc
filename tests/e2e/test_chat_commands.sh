#!/bin/sh
# `deltafin chat`'s commands and options on nano-K3 (piped input), each
# against `run --chat --messages` on the conversation they should give:
#  - /reset forgets the turns, /system sets the system prompt, /effort the
#    thinking effort: the replies are run's on the conversation so changed;
#  - /load of a conversation with tools (a tool call and its result) goes
#    on as run does with those tools, and /save keeps them;
#  - --system and --no-thinking (instruct mode: the reply opens the response
#    channel, checked against template + run --prompt-ids);
#  - a /load that fails leaves the conversation as it was; bad options fail.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d "${TMPDIR:-/tmp}/df-chat-cmd.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }
export HOME="$T"
cp -r "$DF_SRC/models/nano-k3" "$T/m" # a copy: the engine writes its heat file next to the model
M=20
U1="How do I open a file in Python?"
U2="What is a dictionary?"
SYS="You answer in one sentence."
# sampled, seeded: nano-K3 greedy writes the same first tokens whatever the
# system prompt, and a test of /system must see it matter
S="--temperature 1 --seed 1"
run() { "$DF_BIN" run --model "$T/m" --chat --max-new $M --json $S "$@"; }
chat() { "$DF_BIN" chat --model "$T/m" --max-new $M $S "$@"; }
msg() { jq -n --arg r "$1" --arg c "$2" '{role: $r, content: $c}'; }
reply() { jq '{role: "assistant", content: .text} + (if .reasoning != "" then {reasoning_content: .reasoning} else {} end)' "$1"; }
CLOSE=$("$DF_BIN" run --model "$T/m" --parse-special --prompt "<|close|>" --max-new 0 --json |
  jq '.prompt_ids[0]')
expect() { # run's JSON -> what chat prints for that reply (think folded)
  jq -j --argjson close "$CLOSE" '((.output_ids | index($close)) // (.output_ids | length)) as $n |
    "[thought for \($n) tokens]\n" + .text + "\n"' "$1"
}
same_json() { [ "$(jq -cS . "$1")" = "$(jq -cS . "$2")" ]; }

# ---- /reset, /system, /effort
run --prompt "$U1" >"$T/a.json"
{ msg system "$SYS"; msg user "$U1"; } | jq -s . >"$T/cb.json"
run --messages "$T/cb.json" >"$T/b.json"
{ jq '.[]' "$T/cb.json"; reply "$T/b.json"; msg user "$U2"; } | jq -s . >"$T/cc.json"
run --messages "$T/cc.json" --effort low >"$T/c.json"
{ jq '.[]' "$T/cc.json"; reply "$T/c.json"; } | jq -s . >"$T/cd.json"
[ "$(jq -c .output_ids "$T/a.json")" != "$(jq -c .output_ids "$T/b.json")" ] ||
  fail "the system prompt changes nothing (test too weak)"
{ expect "$T/a.json"; expect "$T/b.json"; expect "$T/c.json"; } >"$T/want"
printf '%s\n/reset\n/system %s\n%s\n/effort low\n%s\n/save %s\n' "$U1" "$SYS" "$U1" "$U2" "$T/s.json" |
  chat >"$T/got" 2>"$T/err" || fail "chat exited $?: $(cat "$T/err")"
cmp -s "$T/want" "$T/got" || fail "/reset /system /effort: chat printed
$(cat "$T/got")
--- run on the same conversations:
$(cat "$T/want")"
same_json "$T/s.json" "$T/cd.json" || fail "/save after /reset: $(cat "$T/s.json")"
grep -q "conversation cleared" "$T/err" || fail "/reset said: $(cat "$T/err")"
pass "/reset, /system and /effort give run's replies on the conversations they make"

# ---- --system: the same as /system before the first message
printf '%s\n' "$U1" | chat --system "$SYS" >"$T/got2" 2>/dev/null || fail "chat --system exited $?"
expect "$T/b.json" | cmp -s - "$T/got2" || fail "--system: $(cat "$T/got2")"
printf '/system\n%s\n' "$U1" | chat --system "$SYS" >"$T/got3" 2>/dev/null || fail "chat /system (remove) exited $?"
expect "$T/a.json" | cmp -s - "$T/got3" || fail "/system without TEXT did not remove it: $(cat "$T/got3")"
pass "--system sets it, /system alone removes it"

# ---- a conversation with tools: /load, the next turn, /save
cat >"$T/tools.json" <<'JSON'
{"messages": [
  {"role": "user", "content": "What is the weather in Paris?"},
  {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
  {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}],
 "tools": [{"type": "function", "function": {"name": "get_weather",
   "description": "Current weather for a city", "parameters": {"type": "object",
   "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]}
JSON
U3="Thanks. Should I take an umbrella?"
jq --arg u "$U3" '.messages += [{role: "user", content: $u}]' "$T/tools.json" >"$T/ct.json"
run --messages "$T/ct.json" >"$T/t.json"
jq '.messages' "$T/ct.json" >"$T/ctm.json"
run --messages "$T/ctm.json" >"$T/tnot.json"
[ "$(jq -c .output_ids "$T/t.json")" != "$(jq -c .output_ids "$T/tnot.json")" ] ||
  fail "the tools change nothing (test too weak)"
printf '/load %s\n%s\n/save %s\n' "$T/tools.json" "$U3" "$T/ts.json" | chat >"$T/got4" 2>"$T/err4" ||
  fail "chat with tools exited $?: $(cat "$T/err4")"
expect "$T/t.json" | cmp -s - "$T/got4" || fail "after /load with tools: $(cat "$T/got4") $(cat "$T/err4")"
jq --slurpfile r "$T/t.json" '.messages += [{role: "assistant", content: $r[0].text} +
  (if $r[0].reasoning != "" then {reasoning_content: $r[0].reasoning} else {} end)]' "$T/ct.json" >"$T/ctd.json"
same_json "$T/ts.json" "$T/ctd.json" || fail "/save with tools: $(cat "$T/ts.json")"
pass "a conversation with tools loads, continues as run's, and saves with its tools"

# ---- --no-thinking: the release's instruct mode, against template + run --prompt-ids
msg user "$U1" | jq -s . >"$T/nt.json"
ids=$("$DF_BIN" template --model "$T/m" --messages "$T/nt.json" --no-thinking --json | jq -r '.ids | map(tostring) | join(",")')
EOM=$("$DF_BIN" run --model "$T/m" --parse-special --prompt "<|end_of_msg|>" --max-new 0 --json | jq '.prompt_ids[0]')
"$DF_BIN" run --model "$T/m" --prompt-ids "$ids" --stop "$EOM" --max-new $M --json $S >"$T/n.json"
# the premise: no special id among them, so the answer is their plain decoding
jq -e --argjson close "$CLOSE" --argjson eom "$EOM" '.output_ids | all(. != $close and . != $eom)' "$T/n.json" >/dev/null ||
  fail "the instruct reply has markup (change the prompt)"
printf '%s\n' "$U1" | chat --no-thinking >"$T/got5" 2>/dev/null || fail "chat --no-thinking exited $?"
{ jq -j .text "$T/n.json"; echo; } | cmp -s - "$T/got5" || fail "--no-thinking: $(cat "$T/got5") vs $(jq .text "$T/n.json")"
pass "--no-thinking replies as template --no-thinking + run --prompt-ids"

# ---- a failed /load changes nothing; bad options
printf '[{"role": "tool", "content": "x"}]' >"$T/orphan.json"
printf '{"messages": [' >"$T/broken.json"
printf '/load %s\n/load %s\n%s\n' "$T/orphan.json" "$T/broken.json" "$U1" | chat >"$T/got6" 2>"$T/err6" ||
  fail "chat exited $?"
expect "$T/a.json" | cmp -s - "$T/got6" || fail "a failed /load changed the conversation: $(cat "$T/got6")"
[ "$(grep -c 'deltafin: /load' "$T/err6")" -eq 2 ] || fail "failed /load messages: $(cat "$T/err6")"
bad() {
  want=$1
  shift
  if "$DF_BIN" chat "$@" </dev/null >/dev/null 2>"$T/e"; then fail "chat $* succeeded"; fi
  grep -q -- "$want" "$T/e" || fail "chat $*: $(cat "$T/e")"
}
bad "needs --model" --max-new 4
bad "medium" --model "$T/m" --effort medium
bad "needs --temperature" --model "$T/m" --top-k 3
bad "unknown argument" --model "$T/m" --frobnicate
# the generation options are run's (one parser, cli/gen_opts.c): the same
# messages for the same bad values, the same help lines
for opt in "--max-new x" "--top-k -1" "--min-p 2" "--temperature -1" "--top-p 0" "--seed x" \
           "--repeat-penalty 0" "--prefill-chunk -2"; do
  # shellcheck disable=SC2086
  "$DF_BIN" run --model "$T/m" --prompt x $opt >/dev/null 2>"$T/e1" && fail "run accepted $opt"
  # shellcheck disable=SC2086
  "$DF_BIN" chat --model "$T/m" $opt </dev/null >/dev/null 2>"$T/e2" && fail "chat accepted $opt"
  cmp -s "$T/e1" "$T/e2" || fail "$opt: run says $(cat "$T/e1"), chat $(cat "$T/e2")"
done
"$DF_BIN" run --help | sed -n '/--temperature T/,/--prefill-chunk/p' >"$T/h1"
"$DF_BIN" chat --help | sed -n '/--temperature T/,/--prefill-chunk/p' >"$T/h2"
[ -s "$T/h1" ] && cmp -s "$T/h1" "$T/h2" || fail "run and chat print different generation help"
pass "a failed /load leaves the conversation; bad options are refused as run refuses them"

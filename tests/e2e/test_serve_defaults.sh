#!/bin/sh
# Generation lengths when a request leaves max_tokens out: /v1/completions
# stops at OpenAI's default of 16, chat runs on (here until the forced output
# ends) unless --max-tokens-default caps it. --debug-output-ids makes the
# output 40 ordinary tokens with no end-of-text among them, so only the
# length limit can stop a completion before the 40th; the text is checked
# against /detokenize of the forced ids' prefix.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d /tmp/df-e2e-serve-defaults.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny

TEXT="The quick brown fox jumps over the lazy dog while seven tired wizards quietly juggle"
IDS=$("$DF_BIN" tokenize --model "$T/model" "$TEXT $TEXT $TEXT")
N=$(echo "$IDS" | tr ',' '\n' | wc -l)
[ "$N" -ge 40 ] || fail "want at least 40 forced ids, the text gave $N"
IDS=$(echo "$IDS" | cut -d, -f1-40)

# check PORT PATH BODY WANT_TOKENS WANT_FINISH: usage and finish, and the text
# equals the decoding of the first WANT_TOKENS forced ids
check() {
  s=$(req "$T/o" POST "http://127.0.0.1:$1$2" -H "$JSON" -d "$3")
  [ "$s" = 200 ] || fail "$2 $3: status $s $(cat "$T/o")"
  want=$(echo "$IDS" | cut -d, -f1-"$4")
  s=$(req "$T/d" POST "http://127.0.0.1:$1/detokenize" -H "$JSON" -d "{\"tokens\":[$want]}")
  [ "$s" = 200 ] || fail "detokenize: $s"
  python3 - "$T/o" "$T/d" "$4" "$5" <<'PY' || fail "$2 $3: $(cat "$T/o")"
import json, sys
o, d, n, fin = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3]), sys.argv[4]
c = o["choices"][0]
m = c.get("message", {})
text = c["text"] if "text" in c else (m.get("reasoning_content") or "") + m["content"]
assert o["usage"]["completion_tokens"] == n, ("completion_tokens", o["usage"], n)
assert c["finish_reason"] == fin, ("finish_reason", c["finish_reason"], fin)
assert text == d["content"], (text, d["content"])
PY
}

start D --debug-output-ids "$IDS"
check "$PORT" /v1/completions '{"model":"k3-tiny","prompt":"Once upon a time"}' 16 length
check "$PORT" /v1/completions '{"model":"k3-tiny","prompt":"Once upon a time","max_tokens":null}' 16 length
check "$PORT" /v1/completions '{"model":"k3-tiny","prompt":"Once upon a time","max_tokens":30}' 30 length
# chat keeps "until the context ends": only the forced output's end stops it
check "$PORT" /v1/chat/completions '{"model":"k3-tiny","messages":[{"role":"user","content":"hi"}]}' 40 length
pass "completions default to 16 tokens; chat without max_tokens runs on"

start C --debug-output-ids "$IDS" --max-tokens-default 7
check "$PORT" /v1/chat/completions '{"model":"k3-tiny","messages":[{"role":"user","content":"hi"}]}' 7 length
check "$PORT" /v1/completions '{"model":"k3-tiny","prompt":"Once upon a time"}' 7 length
# an explicit max_tokens is the client's: the default does not cap it
check "$PORT" /v1/chat/completions '{"model":"k3-tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":12}' 12 length
pass "--max-tokens-default caps requests without max_tokens, not those with it"

"$DF_BIN" serve --max-tokens-default x >/dev/null 2>&1 && fail "--max-tokens-default x was accepted"
echo "PASS: deltafin serve max_tokens defaults"

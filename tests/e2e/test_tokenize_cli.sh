#!/bin/sh
# deltafin tokenize / detokenize on a small hand-made tokenizer directory:
# ids, --verbose, --chat layout, round trips and one-line errors.
# With DF_K3_TOKENIZER_DIR set to a directory holding the real K3
# tiktoken.model and tokenizer_config.json, also checks the published vector
# (kimi-k3.md section 6).
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
T=$(mktemp -d "${TMPDIR:-/tmp}/df-tok-cli.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# rank b = byte b, then: 256 "ab", 257 "cd", 258 "abcd", 259 " ab";
# specials 260.. as in K3's order.
python3 - "$T" <<'EOF'
import base64, json, sys
d = sys.argv[1]
toks = [bytes([b]) for b in range(256)] + [b"ab", b"cd", b"abcd", b" ab"]
with open(d + "/tiktoken.model", "w") as f:
    for r, t in enumerate(toks):
        f.write("%s %d\n" % (base64.b64encode(t).decode(), r))
names = ["[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>"]
dec = {str(260 + i): {"content": n, "special": True} for i, n in enumerate(names)}
with open(d + "/tokenizer_config.json", "w") as f:
    json.dump({"added_tokens_decoder": dec}, f)
EOF
M="$T"

expect_out() { # NAME WANT CMD...
  name=$1 want=$2
  shift 2
  if ! got=$("$@" 2>"$T/err"); then
    fail "$name: exit status $? ($(cat "$T/err"))"
    return
  fi
  [ "$got" = "$want" ] || fail "$name: got '$got', want '$want'"
}

expect_err() { # NAME NEEDLE CMD...
  name=$1 needle=$2
  shift 2
  if "$@" >"$T/out" 2>"$T/err"; then
    fail "$name: succeeded, expected an error"
    return
  fi
  [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$name: error is not one line: $(cat "$T/err")"
  grep -q -- "$needle" "$T/err" || fail "$name: error '$(cat "$T/err")' lacks '$needle'"
}

# pre-tokens "abcd", " abd" (ab merges first, then " ab", then d), " ab"
expect_out "plain ids" "258,259,100,259" "$DF_BIN" tokenize --model "$M" "abcd abd ab"
expect_out "empty text" "" "$DF_BIN" tokenize --model "$M" ""
expect_out "file input" "258" sh -c "printf abcd | '$DF_BIN' tokenize --model '$M' --file -"
# user text is ordinary: <|open|> as bytes (pre-tokens "<|", "open", "|>")
expect_out "special text is ordinary" "60,124,111,112,101,110,124,62" \
  "$DF_BIN" tokenize --model "$M" "<|open|>"
expect_out "--specials" "97,263,98" "$DF_BIN" tokenize --model "$M" --specials "a<|open|>b"
expect_out "--verbose" "$(printf '258\t"abcd"\n9\t"\\t"\n195\t"\\xc3"\n169\t"\\xa9"')" \
  "$DF_BIN" tokenize --model "$M" --verbose "$(printf 'abcd\té')"

# --chat: the effort message, the user message, the generation prompt
python3 - "$T" <<'EOF'
import sys
ctl = {"<|open|>": 263, "<|close|>": 264, "<|sep|>": 265, "<|end_of_msg|>": 262}
def layout(s):
    ids, i = [], 0
    while i < len(s):
        for k, v in ctl.items():
            if s.startswith(k, i):
                ids.append(v); i += len(k); break
        else:
            b = s[i].encode(); i += 1
            ids.extend(b)
    return ids
def effort(level):
    return ('<|open|>message role="system" type="thinking-effort"<|sep|>'
            "`thinking_effort` guides on how much to think in your thinking channel (not "
            "including the response channel), supported values include `low`, `medium`, "
            "`high`, and `max`.\nNow the system is invoked with `thinking_effort=%s`."
            "<|close|>message<|sep|><|end_of_msg|>" % level)
user = '<|open|>message role="user"<|sep|>xy<|close|>message<|sep|><|end_of_msg|>'
gen = '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'
for level in ("max", "low"):
    with open("%s/chat_%s.txt" % (sys.argv[1], level), "w") as f:
        f.write(",".join(map(str, layout(effort(level) + user + gen))) + "\n")
EOF
expect_out "--chat" "$(cat "$T/chat_max.txt")" "$DF_BIN" tokenize --model "$M" --chat xy
if "$DF_BIN" tokenize --model "$M" --chat --effort medium xy >/dev/null 2>&1; then fail "--effort medium accepted (the release refuses it)"; fi
expect_out "--chat --effort low" "$(cat "$T/chat_low.txt")" \
  "$DF_BIN" tokenize --model "$M" --chat --effort low xy

# detokenize: commas and/or spaces, several arguments; exact bytes, no newline added
expect_out "detokenize" "abcd ab<|open|>é" "$DF_BIN" detokenize --model "$M" "258,32,256" "263 195,169"
"$DF_BIN" detokenize --model "$M" 97 10 >"$T/nl"
printf 'a\n' | cmp -s - "$T/nl" || fail "detokenize adds or drops bytes"
text="$(printf 'Ünïcödé, CRLF\r\n, NBSP\302\240, tab\t, emoji \360\237\221\215\360\237\217\275 end')"
ids=$("$DF_BIN" tokenize --model "$M" "$text")
expect_out "round trip" "$text" "$DF_BIN" detokenize --model "$M" "$ids"

# errors: one line, non-zero exit
expect_err "missing model" "tiktoken.model" "$DF_BIN" tokenize --model "$T/nope" abc
expect_err "no model option" "--model" "$DF_BIN" tokenize abc
expect_err "invalid UTF-8" "UTF-8" "$DF_BIN" tokenize --model "$M" "$(printf 'ab\377')"
expect_err "bad effort" "--effort" "$DF_BIN" tokenize --model "$M" --chat --effort huge x
expect_err "no text" "TEXT" "$DF_BIN" tokenize --model "$M"
expect_err "two texts" "one TEXT" "$DF_BIN" tokenize --model "$M" a b
expect_err "unknown option" "--bogus" "$DF_BIN" tokenize --model "$M" --bogus x
expect_err "unknown id" "266" "$DF_BIN" detokenize --model "$M" 1,266
expect_err "garbage id" "12x" "$DF_BIN" detokenize --model "$M" "1,12x"
expect_err "no ids" "ids" "$DF_BIN" detokenize --model "$M"
printf '!!!! 0\n' >"$T/bad.model"
expect_err "bad rank file" "bad.model" "$DF_BIN" tokenize --ranks "$T/bad.model" x

if [ -n "${DF_K3_TOKENIZER_DIR:-}" ]; then
  expect_out "K3 published vector" "1008,10484,318,15383,387" \
    "$DF_BIN" tokenize --model "$DF_K3_TOKENIZER_DIR" "The capital of France is"
else
  echo "note: DF_K3_TOKENIZER_DIR not set; the real-K3 vector check is not run"
fi

# A generated checkpoint's tokenizer lists 16 specials, like the release; detokenize
# decodes all 256 special ids (the others are <|reserved_token_ID|> by position).
"$DF_BIN" make-model --preset tiny --seed 3 --out "$T/m" -q >/dev/null 2>&1 || fail "make-model"
n=$(wc -l <"$T/m/tiktoken.model")
ids=$(python3 -c "print(' '.join(str($n + k) for k in range(256)))")
"$DF_BIN" detokenize --model "$T/m" $ids >"$T/specials.txt" || fail "detokenize of the 256 specials"
python3 - "$T/m" "$n" "$T/specials.txt" <<'EOF2' || fail "special ids decode wrong"
import json, sys
d, n, got = sys.argv[1], int(sys.argv[2]), open(sys.argv[3], "rb").read().decode()
listed = {int(k): v["content"] for k, v in json.load(open(d + "/tokenizer_config.json"))["added_tokens_decoder"].items()}
assert len(listed) == 16, len(listed)
want = "".join(listed.get(n + k, "<|reserved_token_%d|>" % (n + k)) for k in range(256))
assert got == want, (got[:200], want[:200])
print("all 256 special ids decode (16 listed, 240 reserved by position)")
EOF2

if [ "$fails" -ne 0 ]; then
  echo "FAIL: $fails checks failed"
  exit 1
fi
echo "PASS"

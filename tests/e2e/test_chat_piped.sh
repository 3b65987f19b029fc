#!/bin/sh
# `deltafin chat` driven through a pipe on the trained nano-K3, against
# `run --chat` on the same conversation rendered whole and run from scratch:
#  - every reply (think channel and answer, and the folded think line's token
#    count) is what run gives for the conversation so far, byte for byte,
#    also after commands that fail (/load of a missing file, an unknown one);
#  - a follow-up prefills only its new tokens: /stats' reused count is the
#    previous prompt plus every reply id but the last (what the state ran)
#    when the whole rendering extends those ids, else the previous prompt
#    (both happen here), computed from run's ids; prompt = reused +
#    prefilled, prompt being the length run renders the conversation to;
#  - with speculation (--draft ngram: blocks verified, rolled back) the same
#    replies and the same reuse;
#  - /save writes the conversation as OpenAI messages (the same JSON the test
#    builds from run's replies), `deltafin template` reads it, and /load in a
#    fresh process continues it with the same reply, prefilled in full.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d "${TMPDIR:-/tmp}/df-chat-piped.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }
export HOME="$T" # the line history file stays in the test's folder
cp -r "$DF_SRC/models/nano-k3" "$T/m" # a copy: the engine writes its heat file next to the model
M=24
U1="How do I open a file in Python?"
U2="And how do I read a line from it?"
U3="What is a list?"
run() { "$DF_BIN" run --model "$T/m" --chat --max-new $M --json "$@"; }
chat() { "$DF_BIN" chat --model "$T/m" --max-new $M "$@"; }

# the references: each turn's conversation rendered whole by run --chat --messages
run --prompt "$U1" >"$T/r1.json" || fail "run turn 1"
msg() { jq -n --arg r "$1" --arg c "$2" '{role: $r, content: $c}'; }
reply() { # run's JSON -> the assistant message chat keeps
  jq '{role: "assistant", content: .text} + (if .reasoning != "" then {reasoning_content: .reasoning} else {} end)' "$1"
}
{ msg user "$U1"; reply "$T/r1.json"; msg user "$U2"; } | jq -s . >"$T/c2.json"
run --messages "$T/c2.json" >"$T/r2.json" || fail "run turn 2"
{ jq '.[]' "$T/c2.json"; reply "$T/r2.json"; msg user "$U3"; } | jq -s . >"$T/c3.json"
run --messages "$T/c3.json" >"$T/r3.json" || fail "run turn 3"
{ jq '.[]' "$T/c3.json"; reply "$T/r3.json"; } | jq -s . >"$T/c4.json"
for r in 1 2 3; do
  [ "$(jq .stats.n_gen "$T/r$r.json")" -gt 1 ] || fail "reference turn $r wrote too little to compare"
done
CLOSE=$("$DF_BIN" run --model "$T/m" --parse-special --prompt "<|close|>" --max-new 0 --json |
  jq '.prompt_ids[0]')

# what chat prints for one reply (plain text): the think channel if shown, the
# folded line with the ids before the think block closed, the answer
expect() { # FILE SHOW
  jq -j --argjson close "$CLOSE" --argjson show "$2" '
    ((.output_ids | index($close)) // (.output_ids | length)) as $n |
    (if $show == 1 and .reasoning != "" then .reasoning + "\n" else "" end) +
    "[thought for \($n) tokens]\n" + .text + "\n"' "$1"
}
for v in 1 0 spec; do
  show=$([ $v = 0 ] && echo 0 || echo 1)
  flag=$([ $show = 1 ] && echo --show-reasoning || true)
  # speculation (drafts verified in blocks, rollbacks) must give the same ids
  [ $v = spec ] && flag="$flag --draft ngram --draft-max 4"
  { expect "$T/r1.json" $show; expect "$T/r2.json" $show; expect "$T/r3.json" $show; } >"$T/want$v"
  printf '%s\n/load %s\n/bogus\n%s\n%s\n/save %s\n' "$U1" "$T/missing.json" "$U2" "$U3" \
    "$T/saved$v.json" | chat $flag >"$T/got$v" 2>"$T/err$v" || fail "chat exited $?: $(cat "$T/err$v")"
  cmp -s "$T/want$v" "$T/got$v" ||
    fail "chat $flag replies differ from run --chat on the whole conversation:
--- run
$(cat "$T/want$v")
--- chat
$(cat "$T/got$v")"
  grep -q "missing.json" "$T/err$v" || fail "no error for /load of a missing file: $(cat "$T/err$v")"
  grep -q "unknown command '/bogus'" "$T/err$v" || fail "no error for /bogus: $(cat "$T/err$v")"
done
pass "three turns equal run --chat on each whole conversation (with and without --show-reasoning, with --draft ngram)"

jq -S . "$T/c4.json" >"$T/c4s.json"
jq -S . "$T/saved1.json" >"$T/saveds.json"
cmp -s "$T/c4s.json" "$T/saveds.json" || fail "/save wrote $(cat "$T/saved1.json"), not $(cat "$T/c4.json")"
"$DF_BIN" template --model "$T/m" --messages "$T/saved1.json" --effort max --json >/dev/null ||
  fail "deltafin template cannot read the saved conversation"
pass "/save writes the conversation as OpenAI messages, and template reads it"

# /stats after each turn: computed from run's ids, never from chat's own output
# (also with speculation: a rolled-back block must leave the state where plain
# decoding would, or the next turn could not continue from it)
for spec in "" "--draft ngram --draft-max 4"; do
# shellcheck disable=SC2086
printf '%s\n/stats\n%s\n/stats\n%s\n/stats\n' "$U1" "$U2" "$U3" | chat $spec >"$T/st" 2>/dev/null ||
  fail "chat $spec with /stats exited $?"
grep '^tokens ' "$T/st" >"$T/tok"
[ "$(wc -l <"$T/tok")" -eq 3 ] || fail "expected three /stats: $(cat "$T/st")"
if [ -n "$spec" ]; then
  grep '^draft ' "$T/st" | grep -q -v ': 0 blocks' || fail "no turn drafted anything (test too weak): $(grep '^draft' "$T/st")"
  grep '^draft ' "$T/st" | grep -q -v ', 0 rollbacks' || fail "no block was rolled back (test too weak)"
fi
live_turns=0
for turn in 1 2 3; do
  line=$(sed -n "${turn}p" "$T/tok")
  P=$(jq '.prompt_ids | length' "$T/r$turn.json")
  G=$(jq '.output_ids | length' "$T/r$turn.json")
  R=0
  if [ $turn != 1 ]; then
    prev="$T/r$((turn - 1)).json"
    # the state after the previous turn ran its prompt and every reply id but
    # the last: reused whole when this turn's rendering extends it; when the
    # reply re-encodes to other ids (a model may write "5","5" where the
    # encoder writes "55"), from the previous prompt's end
    if jq -e -s '(.[0].prompt_ids + .[0].output_ids[:-1]) as $l | .[1].prompt_ids[:($l | length)] == $l'       "$prev" "$T/r$turn.json" >/dev/null; then
      R=$(jq '(.prompt_ids | length) + (.output_ids | length) - 1' "$prev")
      live_turns=$((live_turns + 1))
    elif jq -e -s '.[0].prompt_ids as $l | .[1].prompt_ids[:($l | length)] == $l' "$prev"       "$T/r$turn.json" >/dev/null; then
      R=$(jq '.prompt_ids | length' "$prev")
    fi
    [ "$R" -gt 0 ] || fail "turn $turn: run's rendering does not extend the previous prompt"
  fi
  want="tokens   prompt $P = $R reused + $((P - R)) prefilled; reply $G ("
  case "$line" in "$want"*) ;; *) fail "turn $turn: /stats says '$line', want '$want...'" ;; esac
  echo "     turn $turn${spec:+ ($spec)}: $(echo "$line" | cut -c10-)"
done
# the prompts are chosen so that one follow-up extends the live state: the
# reuse this test is about, not only the fallback
[ $live_turns -ge 1 ] || fail "no turn continued from the live state (change the prompts)"
done
pass "follow-ups prefill only what the kept states do not cover"

# a fresh process: /load the first two turns, then the third message
jq '.[:-1]' "$T/c3.json" >"$T/c2done.json"
printf '/load %s\n%s\n/stats\n' "$T/c2done.json" "$U3" | chat --show-reasoning >"$T/ld" 2>"$T/lderr" ||
  fail "chat /load exited $?: $(cat "$T/lderr")"
grep -q "loaded 4 messages" "$T/lderr" || fail "/load said: $(cat "$T/lderr")"
expect "$T/r3.json" 1 >"$T/want3"
P3=$(jq '.prompt_ids | length' "$T/r3.json")
head -c "$(wc -c <"$T/want3")" "$T/ld" | cmp -s "$T/want3" - || fail "after /load the reply differs: $(cat "$T/ld")"
grep -q "^tokens   prompt $P3 = 0 reused + $P3 prefilled" "$T/ld" || fail "after /load: $(grep '^tokens' "$T/ld")"
pass "/load in a fresh process gives run's reply to the whole conversation"

# a line ending in a backslash continues the message
printf 'How do I open\\\na file in Python?\n' | chat >"$T/ml" 2>/dev/null || fail "multi-line chat exited $?"
printf '[{"role":"user","content":"How do I open\\na file in Python?"}]' >"$T/ml.json"
run --messages "$T/ml.json" >"$T/rml.json" || fail "run multi-line"
expect "$T/rml.json" 0 | cmp -s - "$T/ml" || fail "a continued line is not one message: $(cat "$T/ml")"
pass "a trailing backslash continues the message"

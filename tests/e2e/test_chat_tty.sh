#!/bin/sh
# `deltafin chat` in a real terminal (tmux: send-keys types, capture-pane
# reads) on the trained nano-K3, checked against `run --chat`:
#  - two turns, the second prefilling only its new tokens: /stats' counts
#    computed from run's ids for the same conversation rendered whole;
#  - /save, a third message, /load of the saved file and the same message
#    again: the same reply, the same conversation; a paste is one message;
#  - Ctrl-D exits with status 0;
#  - on slowed (emulated) drives, Ctrl-C mid-reply stops it and leaves the
#    program at a prompt with the partial reply kept, exactly run's first K
#    ids; the next turn continues the conversation as run does on it whole;
#    Ctrl-C while the prompt is read drops the message; Ctrl-C twice at the
#    empty prompt exits with status 0.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
command -v tmux >/dev/null || { echo "FAIL: tmux is not installed (scripts/install-deps.sh)" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/df-chat-tty.XXXXXX")
TM="tmux -f /dev/null -S $T/tmux.sock"
trap '$TM kill-server 2>/dev/null || true; rm -rf "$T"' EXIT INT TERM
fail() {
  echo "FAIL: $*" >&2
  [ -f "$T/pane" ] && { echo "--- the terminal:" >&2; cat "$T/pane" >&2; }
  exit 1
}
pass() { echo "ok: $*"; }
cp -r "$DF_SRC/models/nano-k3" "$T/m" # a copy: the engine writes its heat file next to the model
U1="How do I open a file in Python?"
U2="And how do I read a line from it?"
U3="What is a list?"

start() { # NAME chat-options...: a terminal running chat; $T/NAME.exit gets its status
  name=$1
  shift
  $TM new-session -d -s "$name" -x 150 -y 50 \
    "env HOME=$T LANG=C.UTF-8 $DF_BIN chat --model $T/m $*; echo \$? >$T/$name.exit"
  S=$name
  N=0
}
pane() { $TM capture-pane -p -J -S - -t "$S" >"$T/pane" 2>/dev/null || true; }
# A hang guard, not a timing assertion: give up after about 120 s.
wait_until() { # DESCRIPTION COMMAND...
  what=$1
  shift
  i=0
  while :; do
    pane
    "$@" && return 0
    i=$((i + 1))
    [ $i -lt 1200 ] || fail "timed out waiting for $what"
    sleep 0.1
  done
}
at_prompt() { # the Nth prompt is shown and nothing follows it
  [ "$(grep -c '^>>>' "$T/pane")" -ge "$N" ] && [ "$(grep -v '^ *$' "$T/pane" | tail -n 1 | sed 's/ *$//')" = ">>>" ]
}
prompt() { N=$((N + 1)); wait_until "prompt $N" at_prompt; }
type_line() { $TM send-keys -t "$S" -l "$1"; $TM send-keys -t "$S" Enter; prompt; }
shows() { grep -q -- "$1" "$T/pane"; }
exited() { [ -s "$T/$S.exit" ]; }
run() { "$DF_BIN" run --model "$T/m" --chat --json "$@"; }
msg() { jq -n --arg r "$1" --arg c "$2" '{role: $r, content: $c}'; }
reply() { jq '{role: "assistant", content: .text} + (if .reasoning != "" then {reasoning_content: .reasoning} else {} end)' "$1"; }
same_json() { [ "$(jq -cS . "$1")" = "$(jq -cS . "$2")" ]; }

# ---- two turns, /stats, /save and /load, Ctrl-D
M=16
run --max-new $M --prompt "$U1" >"$T/r1.json" || fail "run turn 1"
{ msg user "$U1"; reply "$T/r1.json"; msg user "$U2"; } | jq -s . >"$T/c2.json"
run --max-new $M --messages "$T/c2.json" >"$T/r2.json" || fail "run turn 2"
# the premise: turn 2's whole rendering extends what turn 1 left in the state
# (its prompt and every reply id but the last, drawn and not run)
jq -e -s '(.[0].prompt_ids + .[0].output_ids[:-1]) as $l | .[1].prompt_ids[:($l | length)] == $l' \
  "$T/r1.json" "$T/r2.json" >/dev/null || fail "run's turn-2 rendering does not extend turn 1 (change the prompts)"
P2=$(jq '.prompt_ids | length' "$T/r2.json")
R2=$(jq '(.prompt_ids | length) + (.output_ids | length) - 1' "$T/r1.json")

start a --max-new $M
prompt
type_line "$U1"
type_line "$U2"
type_line /stats
want="tokens   prompt $P2 = $R2 reused + $((P2 - R2)) prefilled; reply $(jq .stats.n_gen "$T/r2.json") ("
got=$(grep '^tokens ' "$T/pane" | tail -n 1)
case "$got" in "$want"*) ;; *) fail "/stats says '$got', want '$want...'" ;; esac
pass "turn 2 prefills only its new tokens: $(echo "$got" | cut -c10-)"

type_line "/save $T/a.json"
[ "$(jq -c '.[:3]' "$T/a.json")" = "$(jq -c . "$T/c2.json")" ] || fail "/save: $(cat "$T/a.json")"
type_line "$U3"
type_line "/save $T/b.json"
type_line "/load $T/a.json"
shows "loaded 4 messages" || fail "/load did not say it loaded the 4 messages"
type_line "$U3"
type_line "/save $T/c.json"
[ "$(jq 'length' "$T/b.json")" -eq 6 ] || fail "the conversation after turn 3: $(cat "$T/b.json")"
[ "$(jq -r '.[5].reasoning_content // "" | length' "$T/b.json")" -gt 0 ] || fail "turn 3 wrote nothing"
same_json "$T/b.json" "$T/c.json" || fail "after /load the same message got another reply:
$(jq -c '.[5]' "$T/b.json")
$(jq -c '.[5]' "$T/c.json")"
pass "/save, /load and the same message give the same reply"
# a paste of two lines is one message (tmux pastes them as one write, with \r)
$TM set-buffer "$(printf 'What is a tuple?\nAnd a set?')"
$TM paste-buffer -t "$S"
$TM send-keys -t "$S" Enter
prompt
type_line "/save $T/d.json"
[ "$(jq -r '.[-2].content' "$T/d.json")" = "$(printf 'What is a tuple?\nAnd a set?')" ] ||
  fail "a pasted message: $(jq -c '.[-2]' "$T/d.json")"
pass "a paste of several lines is one message"
$TM send-keys -t "$S" C-d
wait_until "chat to exit on Ctrl-D" exited
[ "$(cat "$T/a.exit")" = 0 ] || fail "Ctrl-D: exit status $(cat "$T/a.exit")"
pass "Ctrl-D exits with status 0"

# ---- Ctrl-C, on drives slow enough that a reply of 400 tokens takes a while
start b --max-new 400 --cache-mb 0 --emulate-drives 20MB/s,1ms
prompt
$TM send-keys -t "$S" -l "$U1"
$TM send-keys -t "$S" Enter
wait_until "the reply to start" shows '\[thinking: [1-9][0-9]'
$TM send-keys -t "$S" C-c
prompt
K1=$(sed -n 's/^\[interrupted: the \([0-9]*\) tokens written so far are kept\]$/\1/p' "$T/pane" | tail -n 1)
[ -n "$K1" ] || fail "no interruption message"
[ "$K1" -lt 400 ] || fail "Ctrl-C did not stop the reply ($K1 tokens)"
type_line "/save $T/p.json"
run --max-new "$K1" --prompt "$U1" >"$T/rp.json" || fail "run partial"
{ msg user "$U1"; reply "$T/rp.json"; } | jq -s . >"$T/cp.json"
same_json "$T/p.json" "$T/cp.json" || fail "the partial reply kept is not run's first $K1 ids:
$(cat "$T/p.json")
$(cat "$T/cp.json")"
pass "Ctrl-C stops the reply at $K1 tokens, at a prompt, the partial reply kept as written"

# the next turn continues the conversation with the partial reply in it
$TM send-keys -t "$S" -l "$U2"
$TM send-keys -t "$S" Enter
wait_until "the second reply to start" shows '\[thinking: [1-9][0-9]'
$TM send-keys -t "$S" C-c
prompt
K2=$(sed -n 's/^\[interrupted: the \([0-9]*\) tokens written so far are kept\]$/\1/p' "$T/pane" | tail -n 1)
type_line "/save $T/q.json"
{ jq '.[]' "$T/cp.json"; msg user "$U2"; } | jq -s . >"$T/cq.json"
run --max-new "$K2" --messages "$T/cq.json" >"$T/rq.json" || fail "run after the partial reply"
{ jq '.[]' "$T/cq.json"; reply "$T/rq.json"; } | jq -s . >"$T/cq2.json"
same_json "$T/q.json" "$T/cq2.json" || fail "after an interrupted reply the next one differs from run's:
$(jq -c '.[3]' "$T/q.json")
$(jq -c '.[3]' "$T/cq2.json")"
pass "the turn after an interrupted reply is run's on the whole conversation"

# Ctrl-C while a long message is read: the message is dropped
long=$(awk 'BEGIN { for (i = 0; i < 60; i++) printf "The file object has a read method. "; }')
$TM send-keys -t "$S" -l "$long"
$TM send-keys -t "$S" Enter
wait_until "the prompt to be read" shows '\[prompt: [0-9]* tokens read\]'
$TM send-keys -t "$S" C-c
prompt
shows "interrupted while reading the prompt: the message was dropped" || fail "no drop message"
type_line "/save $T/r.json"
same_json "$T/r.json" "$T/q.json" || fail "the interrupted message stayed: $(jq -c '.[-1]' "$T/r.json")"
pass "Ctrl-C while the prompt is read drops the message"

# Ctrl-C at the empty prompt says how to quit; a second one exits
$TM send-keys -t "$S" C-c
wait_until "the hint" shows 'Ctrl-C again, Ctrl-D or /quit to exit'
$TM send-keys -t "$S" C-c
wait_until "chat to exit on the second Ctrl-C" exited
[ "$(cat "$T/b.exit")" = 0 ] || fail "Ctrl-C twice: exit status $(cat "$T/b.exit")"
pass "a second Ctrl-C at the empty prompt exits with status 0"

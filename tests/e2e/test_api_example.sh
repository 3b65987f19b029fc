#!/bin/sh
# examples/generate.c uses only include/deltafin.h: the ids it generates from
# models/nano-k3 must be those `deltafin run --json` reports for the same
# prompt and budget (greedy, so exact), and its streamed ids the same list.
set -eu
BIN=${DF_BIN:?set DF_BIN}
EX=${DF_BUILD:?set DF_BUILD}/example_generate
M=${DF_SRC:?set DF_SRC}/models/nano-k3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$EX" ] || fail "no $EX (built by CMake from examples/generate.c)"

for prompt in "The cat sat on" "Once upon a time"; do
  "$EX" "$M" "$prompt" 6 >"$tmp/ex" 2>"$tmp/ex.err" || fail "example: $(cat "$tmp/ex.err")"
  got=$(sed -n 's/^ids: //p' "$tmp/ex")
  "$BIN" run --model "$M" --prompt "$prompt" --max-new 6 --json >"$tmp/run.json" 2>"$tmp/e" ||
    fail "run: $(cat "$tmp/e")"
  want=$(jq -r '.output_ids | map(tostring) | join(",")' "$tmp/run.json")
  [ -n "$want" ] || fail "run gave no ids: $(cat "$tmp/run.json")"
  [ "$got" = "$want" ] || fail "'$prompt': example ids $got, run ids $want"
  streamed=$(sed -n 's/^token ids as they come: //p' "$tmp/ex.err")
  [ "$streamed" = "$want" ] || fail "'$prompt': the callback saw $streamed, not $want"
  grep -q '^store: [1-9][0-9]* expert bytes read' "$tmp/ex" || fail "no store counters: $(cat "$tmp/ex")"
done

# a bad model folder: a clear error naming it, exit 1
if "$EX" "$tmp/none" "x" 2 >/dev/null 2>"$tmp/e"; then fail "example opened a missing model"; fi
grep -q "$tmp/none" "$tmp/e" || fail "error does not name the folder: $(cat "$tmp/e")"
echo "api example: ok"

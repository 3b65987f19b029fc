#!/bin/sh
# eval reports its progress on stderr with --progress (the default on a
# terminal), says nothing with -q, and either way prints the same results on
# stdout.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
T=$(mktemp -d "${TMPDIR:-/tmp}/df-cli-prog.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
"$DF_BIN" make-model --preset tiny --seed 1 --out "$T/m" -q >/dev/null
python3 -c 'print(" ".join("word%d" % (i % 37) for i in range(300)))' >"$T/text.txt"
"$DF_BIN" eval --model "$T/m" --file "$T/text.txt" --window 32 --progress >"$T/p.out" 2>"$T/p.err" ||
  fail "eval --progress: $(cat "$T/p.err")"
n=$(sed -n 's/^tokens *\([0-9]*\) .*/\1/p' "$T/p.out")
[ -n "$n" ] || fail "eval printed no token count: $(cat "$T/p.out")"
grep -q "^eval: $n of $n tokens (100.0%" "$T/p.err" || fail "no final progress line for $n tokens: $(cat "$T/p.err")"
"$DF_BIN" eval --model "$T/m" --file "$T/text.txt" --window 32 -q >"$T/q.out" 2>"$T/q.err" ||
  fail "eval -q: $(cat "$T/q.err")"
[ -s "$T/q.err" ] && fail "eval -q wrote to stderr: $(cat "$T/q.err")"
cmp -s "$T/p.out" "$T/q.out" || fail "eval results differ with and without --progress"
[ "$fails" -eq 0 ] || exit 1
echo "cli progress ok"

#!/bin/sh
# One-line errors for bad input files and options that used to be unclear or
# silently succeed (found by the qa pass): each must exit non-zero and name the
# file or option and the actual problem.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
T=$(mktemp -d "${TMPDIR:-/tmp}/df-cli-err.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
# expect_fail NAME PATTERN CMD...: CMD exits non-zero and stderr matches PATTERN
expect_fail() {
  name=$1 pat=$2
  shift 2
  if "$@" >"$T/out" 2>"$T/err"; then
    fail "$name: exited 0 (stdout: $(head -c 200 "$T/out"))"
    return
  fi
  grep -Eq -- "$pat" "$T/err" || fail "$name: stderr '$(cat "$T/err")' does not match '$pat'"
}

# a tokenizer directory is all tokenize needs: bytes as ranks, K3's specials
python3 - "$T/tok" <<'EOF'
import base64, json, os, sys
d = sys.argv[1]
os.makedirs(d)
with open(d + "/tiktoken.model", "w") as f:
    for b in range(256):
        f.write("%s %d\n" % (base64.b64encode(bytes([b])).decode(), b))
names = ["[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>"]
dec = {str(256 + i): {"content": n, "special": True} for i, n in enumerate(names)}
with open(d + "/tokenizer_config.json", "w") as f:
    json.dump({"added_tokens_decoder": dec}, f)
EOF

# tokenize --batch: a missing file is "No such file", not a JSON error at line -1
expect_fail "tokenize --batch missing" "$T/nope.json: No such file or directory" \
  "$DF_BIN" tokenize --model "$T/tok" --batch "$T/nope.json"
grep -q "line -1" "$T/err" && fail "tokenize --batch missing: jansson's 'line -1' leaked: $(cat "$T/err")"
printf '["ab", ' >"$T/trunc.json"
expect_fail "tokenize --batch truncated JSON" "$T/trunc.json: invalid JSON at line 1" \
  "$DF_BIN" tokenize --model "$T/tok" --batch "$T/trunc.json"
printf '["ab", "c"]' >"$T/ok.json"
"$DF_BIN" tokenize --model "$T/tok" --batch "$T/ok.json" >"$T/ids" || fail "tokenize --batch ok.json failed"
[ "$(cat "$T/ids")" = "$(printf '97,98\n99')" ] || fail "tokenize --batch ids: $(cat "$T/ids")"

# plan --compute: a missing file says so instead of "no stats.decode_compute"
expect_fail "plan --compute missing" "$T/none.json: No such file or directory" \
  "$DF_BIN" plan --mem 64G --compute "$T/none.json"
printf '{"stats": ' >"$T/bad.json"
expect_fail "plan --compute bad JSON" "--compute $T/bad.json: invalid JSON" \
  "$DF_BIN" plan --mem 64G --compute "$T/bad.json"
printf '{"stats": {}}' >"$T/nocomp.json"
expect_fail "plan --compute without decode_compute" "no stats.decode_compute" \
  "$DF_BIN" plan --mem 64G --compute "$T/nocomp.json"

# bench kernels --only with a name no kernel has: an error, not an empty table
expect_fail "bench kernels --only no match" "--only: no kernel name contains 'no-such-kernel'.*mxfp4" \
  "$DF_BIN" bench kernels --only no-such-kernel --threads 1 --tables scalar --pool-mb 16 --min-time 0.01

# pack --drives: a drive path whose parent does not exist (a typo, an
# unmounted drive) is refused, and nothing is created; an existing parent is fine
"$DF_BIN" make-model --preset tiny --seed 1 --out "$T/m" -q >/dev/null || fail "make-model tiny"
expect_fail "pack --drives without parent" "drive $T/nomount/df: its parent folder $T/nomount does not exist" \
  "$DF_BIN" pack --model "$T/m" --drives "$T/nomount/df" -q
[ -e "$T/nomount" ] && fail "pack created $T/nomount"
[ -e "$T/m/deltafin-pack.json" ] && fail "pack left a manifest after failing"
"$DF_BIN" pack --model "$T/m" --drives "$T/d0/" -q >/dev/null 2>"$T/err" || fail "pack --drives d0/: $(cat "$T/err")"
[ -f "$T/m/deltafin-pack.json" ] || fail "pack --drives d0/ wrote no manifest"

# convert-spine --out: the same rule as pack's drives (only the last folder is created)
expect_fail "convert-spine --out without parent" "output folder $T/nomount2/i8: its parent folder $T/nomount2 does not exist" \
  "$DF_BIN" convert-spine --model "$T/m" --out "$T/nomount2/i8" -q
[ -e "$T/nomount2" ] && fail "convert-spine created $T/nomount2"

# make-model on a file system without room: sizes a person can read (MB for a tiny preset)
expect_fail "make-model no room" "needs [0-9.]+ MB but the file system has 0.00 MB free" \
  "$DF_BIN" make-model --preset tiny --out /proc/df-no-room -q

# doctor after an interrupted pack: says to resume it, not "no pack manifest"
"$DF_BIN" make-model --preset tiny --seed 2 --out "$T/m2" -q >/dev/null || fail "make-model tiny seed 2"
"$DF_BIN" pack --model "$T/m2" --drives "$T/e0" --max-rate 100KB/s -q >/dev/null 2>&1 &
pid=$!
i=0
while [ ! -f "$T/m2/deltafin-pack.json.plan" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
kill -TERM "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
if [ -f "$T/m2/deltafin-pack.json" ]; then
  fail "pack at 100KB/s finished before it could be interrupted"
else
  expect_fail "doctor after an interrupted pack" "a pack was interrupted.*run the same deltafin pack command again" \
    "$DF_BIN" doctor --model "$T/m2"
fi

# run --top-p without --temperature: greedy would ignore it, so it is refused
expect_fail "run --top-p alone" "--top-p needs --temperature" \
  "$DF_BIN" run --model "$T/m" --prompt-ids 1,2 --max-new 2 --top-p 0.5
"$DF_BIN" run --model "$T/m" --prompt-ids 1,2 --max-new 2 --top-p 0.5 --temperature 1 --seed 7 --json \
  >"$T/s.json" 2>"$T/err" || fail "run --top-p --temperature: $(cat "$T/err")"

[ "$fails" -eq 0 ] || exit 1
echo "cli errors ok"

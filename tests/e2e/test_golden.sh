#!/bin/sh
# `deltafin run` against the float64 reference (tools/reference/k3_ref.py):
#  1. every committed golden (tests/fixtures/golden/*.json): the model is
#     regenerated from its preset and seed, and the greedy ids printed by
#     `run --json` (2 threads, prefill chunks of 5) must equal the golden's;
#  2. live: the reference runs now on a fresh `small` model (16 layers,
#     4 AttnRes blocks, 128 experts, top-8) and a prompt no golden uses.
# Ids are compared up to the first step whose reference top-1/top-2 margin is
# below 1e-3 (there fp32 rounding may legitimately pick the other id; the
# logit tolerances themselves are checked in unit.test_engine_golden).
# PYTHON: the interpreter with numpy and torch (default Debian's; the GPU
# machine's is another).
set -eu
BIN=${DF_BIN:?set DF_BIN}
SRC=${DF_SRC:?set DF_SRC}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

# compare REF.json OUT.json LABEL
compare() {
  n=$(jq '.greedy_ids | length' "$1")
  res=$(jq -n --slurpfile r "$1" --slurpfile o "$2" '
    [$r[0].greedy_ids, $r[0].margins, $o[0].output_ids] as [$g, $m, $x]
    | reduce range(0; $g | length) as $i ({ok: 0, bad: null, stop: null};
        if .bad != null or .stop != null then .
        elif $x[$i] != $g[$i] then .bad = $i
        elif $m[$i] < 0.001 then .ok += 1 | .stop = $i
        else .ok += 1 end)')
  bad=$(echo "$res" | jq .bad)
  [ "$bad" = null ] || fail "$3: greedy id $bad differs: engine $(jq -c .output_ids "$2") reference $(jq -c .greedy_ids "$1")"
  echo "$3: greedy ids identical for $(echo "$res" | jq .ok) of $n steps$(echo "$res" | jq -r 'if .stop != null then " (margin < 1e-3 at step \(.stop))" else "" end')"
}

count=0
for g in "$SRC"/tests/fixtures/golden/*.json; do
  [ -f "$g" ] || continue
  preset=$(jq -r .model.preset "$g")
  seed=$(jq -r .model.seed "$g")
  m="$tmp/$preset-$seed"
  [ -d "$m" ] || "$BIN" make-model --preset "$preset" --seed "$seed" --out "$m" >/dev/null 2>&1
  ids=$(jq -r '.prompt_ids | map(tostring) | join(",")' "$g")
  n=$(jq .n_new "$g")
  "$BIN" run --model "$m" --prompt-ids "$ids" --max-new "$n" --json --threads 2 \
    --prefill-chunk 5 >"$tmp/out.json"
  compare "$g" "$tmp/out.json" "$(basename "$g")"
  count=$((count + 1))
done
[ "$count" -gt 0 ] || fail "no golden files in $SRC/tests/fixtures/golden (a test that compares nothing must not pass)"
echo "$count goldens compared"

# live reference on the small preset
"$BIN" make-model --preset small --seed 31 --out "$tmp/small" >/dev/null 2>&1
P=901,17,333,64,1020,5,77,412
"${PYTHON:-/usr/bin/python3}" "$SRC/tools/reference/k3_ref.py" --model "$tmp/small" --prompt-ids $P --new 5 \
  --out "$tmp/ref.json"
"$BIN" run --model "$tmp/small" --prompt-ids $P --max-new 5 --json --threads 2 \
  --prefill-chunk 3 >"$tmp/out.json"
compare "$tmp/ref.json" "$tmp/out.json" "live small seed 31"
echo "ok"

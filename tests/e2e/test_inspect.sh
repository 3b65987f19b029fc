#!/bin/sh
# deltafin inspect on a generated checkpoint: the generator's output must
# match the K3 roster exactly, and damage must be reported.
set -eu
: "${DF_BIN:?DF_BIN must point to the deltafin binary}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

"$DF_BIN" make-model --preset tiny --seed 7 --out "$T/m" -q >/dev/null 2>&1 || fail "make-model"

"$DF_BIN" inspect --model "$T/m" >"$T/out" 2>"$T/err" || fail "inspect exit $?: $(cat "$T/err")"
grep -q '^problems  *none' "$T/out" || fail "problems reported on a fresh checkpoint: $(cat "$T/out")"
grep -q '^model_type  *kimi_k3' "$T/out" || fail "config not printed"
[ ! -s "$T/err" ] || fail "stderr not empty: $(cat "$T/err")"

"$DF_BIN" inspect --model "$T/m" --json >"$T/json" || fail "inspect --json"
grep -q '"count": 0' "$T/json" || fail "json problem count"
grep -q '"scales_scanned": true' "$T/json" || fail "scales not scanned"

# A shard cut short is fatal: exit 1 with one line naming the shard.
shard=$(ls "$T/m"/model-*.safetensors | tail -n 1)
truncate -s -1 "$shard"
set +e
"$DF_BIN" inspect --model "$T/m" >"$T/out" 2>"$T/err"
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "truncated shard: exit $rc, expected 1"
[ "$(wc -l <"$T/err")" -eq 1 ] || fail "expected one stderr line: $(cat "$T/err")"
grep -q "$(basename "$shard")" "$T/err" || fail "message does not name the shard: $(cat "$T/err")"
echo "ok"

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
# The quick check is the default (every scale of the real release is 85 GB);
# --full-scan reads them all, with progress on stderr.
grep -q '"scales_scanned": false' "$T/json" || fail "scales scanned without --full-scan"
"$DF_BIN" inspect --model "$T/m" --json --full-scan --progress >"$T/json" 2>"$T/err" || fail "inspect --full-scan"
grep -q '"scales_scanned": true' "$T/json" || fail "scales not scanned"
grep -q 'expert scales 100%' "$T/err" || fail "no progress reaching 100%: $(cat "$T/err")"

# An E8M0 scale byte of 255 is found by --full-scan only.
cp -r "$T/m" "$T/bad"
/usr/bin/python3 - "$T/bad" <<'PY'
import json, struct, sys, os
d = sys.argv[1]
idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
name = sorted(n for n in idx if n.endswith("experts.3.w2.weight_scale"))[0]
p = os.path.join(d, idx[name])
with open(p, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    f.seek(8 + n + h[name]["data_offsets"][0] + 5)
    f.write(b"\xff")
PY
"$DF_BIN" inspect --model "$T/bad" >"$T/out" 2>/dev/null || fail "quick inspect of a bad scale must not fail"
set +e
"$DF_BIN" inspect --model "$T/bad" --full-scan >"$T/out" 2>/dev/null
rc=$?
set -e
[ "$rc" -eq 3 ] || fail "bad scale: --full-scan exit $rc, expected 3"
grep -q 'bad scales 1' "$T/out" || fail "bad scale not reported: $(cat "$T/out")"

# The published config.json alone (tests/fixtures/config): K3's real dimensions,
# and exit 3 for the missing weights.
mkdir "$T/k3"
cp "${DF_SRC:?}/tests/fixtures/config/kimi-k3-config.json" "$T/k3/config.json"
set +e
"$DF_BIN" inspect --model "$T/k3" >"$T/out" 2>"$T/err"
rc=$?
set -e
[ "$rc" -eq 3 ] || fail "config-only dir: exit $rc, expected 3"
for want in '^hidden  *7168$' '^layers  *93 (69 KDA, 24 MLA' '^vocab  *163840 (bos 163584, eos 163586, pad 163839)' \
    '^MLA layers  *3,7,11,15,19,23,27,31,35,39,43,47,51,55,59,63,67,71,75,79,83,87,91,92 ' \
    '^KDA  *96 heads x 128, conv 4' '^MLA  *96 heads, q_lora 1536, kv_lora 512, nope 128, rope 64, v 128' \
    '^dense FFN  *intermediate 33792' \
    '^MoE  *896 routed experts, top 16, 2 shared (width 6144), expert intermediate 3072, latent 3584' \
    '^AttnRes block  *12' '^max positions  *1048576' '^activation  *situ (beta 4, linear beta 25)' \
    '^experts  *MXFP4, group 32' 'no weights'; do
  grep -q "$want" "$T/out" || fail "release config: no '$want' in: $(cat "$T/out")"
done

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

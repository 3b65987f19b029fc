#!/bin/sh
# deltafin setup --stream, on-demand expert fetching, warm and the upgrade to
# --full, against nginx on loopback (hub URL layout, Range) and the fault proxy.
# Checks, against independent computations from the safetensors headers
# (tests/setup/shardmap.py) and nginx's access log:
#  - --stream fetches exactly the headers and the non-expert tensors;
#  - run from the stream install gives the original's ids, fetching each
#    needed expert once, and a second run fetches nothing (works offline);
#  - the endpoint unreachable: run fails naming the missing expert, no token;
#  - a fetched record damaged on the local disk is refused (no token);
#  - warm --fetch N fetches exactly the N most used missing experts of a trace;
#  - kill -9 during --stream and during run-time fetching, then rerun: valid;
#  - setup --full on a stream install downloads exactly what was missing, and
#    a corrupted served byte is caught there by the shard's sha256.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin stream

hub_tiny 9 a1b2c3d4e5f60718293a4b5c6d7e8f9012345678
SHARDS_RX=$($MAP shard-regex "$T/hub/www" "$COMMIT")
IDS=5,6,7,8,100,200
IDS2=900,31,77
"$BIN" run --model "$T/orig" --prompt-ids $IDS --max-new 10 --json >"$T/ref.json"
"$BIN" run --model "$T/orig" --prompt-ids $IDS2 --max-new 10 --json >"$T/ref2.json"

# --- 1: a stream install fetches exactly the headers and the spine ---
: >"$T/hub/logs/access.log"
"$BIN" setup --stream --repo "$REPO" --revision main --endpoint "$EP" --model-root "$T/s1" -q \
  --chunk-kb 64 --json >"$T/s1.json" 2>"$T/s1.err" || fail "setup --stream: $(cat "$T/s1.err")"
WANT=$($MAP spine-bytes "$T/src")
GOT=$(hub_bytes "$SHARDS_RX")
[ "$GOT" = "$WANT" ] || fail "--stream fetched $GOT shard bytes, the headers and spine are $WANT"
$MAP check-present "$T/s1" "$T/src" none || fail "stream install: wrong ranges present"
"$BIN" run --model "$T/s1" --prompt-ids $IDS --max-new 10 --json --stats >"$T/o1.json" 2>"$T/o1.err"
[ "$(ids "$T/o1.json")" = "$(ids "$T/ref.json")" ] || fail "stream ids differ: $(ids "$T/o1.json") vs $(ids "$T/ref.json")"
grep -q "network (stream install)" "$T/o1.err" || fail "--stats has no network line: $(cat "$T/o1.err")"
F1=$(net "$T/o1.json" records_fetched)
B1=$(net "$T/o1.json" bytes_fetched)
RB=$($MAP record-bytes "$T/src")
[ "$F1" -gt 0 ] && [ "$B1" = $((F1 * RB)) ] || fail "fetch stats: $F1 records, $B1 bytes (record $RB)"
# each needed expert fetched once: the present records are exactly the distinct ones fetched
NPRES=$($MAP count-present "$T/s1" "$T/src")
[ "$NPRES" = "$F1" ] || fail "$F1 records fetched but $NPRES present (a record fetched twice?)"
# a second run fetches nothing, even with the hub gone
"$BIN" run --model "$T/s1" --prompt-ids $IDS --max-new 10 --json >"$T/o1b.json"
[ "$(net "$T/o1b.json" records_fetched)" = 0 ] || fail "the second run fetched again"
[ "$(ids "$T/o1b.json")" = "$(ids "$T/ref.json")" ] || fail "second stream run ids differ"

# --- 2: endpoint unreachable: fail naming the expert, never a token ---
cp -r "$T/s1" "$T/s2"
DEAD=$(free_port)
rc=0
HF_ENDPOINT="http://127.0.0.1:$DEAD" "$BIN" run --model "$T/s2" --prompt-ids $IDS2 --max-new 10 \
  >"$T/o2" 2>"$T/o2.err" || rc=$?
[ "$rc" != 0 ] || fail "run succeeded with missing experts and no endpoint"
grep -q "layer [0-9]* expert [0-9]*" "$T/o2.err" && grep -q "could not be fetched" "$T/o2.err" \
  || fail "unreachable endpoint message: $(cat "$T/o2.err")"
[ -z "$(tr -d ' \n' <"$T/o2")" ] || fail "tokens printed although experts were missing: $(cat "$T/o2")"

# --- 3: a fetched record damaged on the local disk is refused ---
cp -r "$T/s1" "$T/s3"
$MAP damage-fetched "$T/s3" "$T/src" >"$T/dmg" || fail "no fetched record to damage"
rc=0
"$BIN" run --model "$T/s3" --prompt-ids $IDS --max-new 10 --cache-mb 0 >"$T/o3" 2>"$T/o3.err" || rc=$?
[ "$rc" != 0 ] || fail "a damaged fetched record was used"
grep -q "checksum" "$T/o3.err" && grep -q "setup --full" "$T/o3.err" || fail "damaged record message: $(cat "$T/o3.err")"
[ -z "$(tr -d ' \n' <"$T/o3")" ] || fail "tokens printed from a damaged record: $(cat "$T/o3")"
# the advice works: one setup --full refetches the damaged record and completes the shards
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/s3" -q \
  2>"$T/s3f.err" || fail "setup --full did not repair the damaged record: $(cat "$T/s3f.err")"
grep -q "damaged on the local disk" "$T/s3f.err" || fail "the repair did not report the damage: $(cat "$T/s3f.err")"
for f in "$T"/src/*; do cmp -s "$f" "$T/s3/$(basename "$f")" || fail "$(basename "$f") differs after the repair"; done

# --- 4: warm --fetch N fetches exactly the N most used missing experts ---
"$BIN" run --model "$T/orig" --prompt-ids $IDS2 --max-new 10 --prefetch off --cache-mb 0 \
  --trace "$T/trace" >/dev/null 2>&1
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/s4" -q 2>/dev/null
N=$($MAP pick-n "$T/trace")
$MAP top-n "$T/trace" "$N" >"$T/topn"
"$BIN" warm --model "$T/s4" --trace "$T/trace" --fetch "$N" --json -q >"$T/w.json" \
  || fail "warm failed"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["fetched"]==int(sys.argv[2]), r' "$T/w.json" "$N" \
  || fail "warm did not fetch $N: $(cat "$T/w.json")"
$MAP check-present "$T/s4" "$T/src" "$T/topn" || fail "warm fetched other experts than the $N most used"
"$BIN" run --model "$T/s4" --prompt-ids $IDS2 --max-new 10 --json >"$T/o4.json"
[ "$(ids "$T/o4.json")" = "$(ids "$T/ref2.json")" ] || fail "ids after warm differ"

# --- 4a: --pin-mb on a stream install fetches the pinned experts (it asks for them) ---
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/s4a" -q 2>/dev/null
cp "$T/orig/deltafin.heat" "$T/s4a/deltafin.heat"
"$BIN" run --model "$T/s4a" --prompt-ids $IDS --max-new 10 --pin-mb 1 --json >"$T/o4a.json" 2>"$T/o4a.err" \
  || fail "--pin-mb on a stream install: $(cat "$T/o4a.err")"
[ "$(ids "$T/o4a.json")" = "$(ids "$T/ref.json")" ] || fail "--pin-mb stream ids differ"
[ "$(net "$T/o4a.json" records_fetched)" -gt 0 ] || fail "--pin-mb fetched nothing"

# --- 4b: serve from a stream install fetches on demand too ---
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/s4b" -q 2>/dev/null
SP=$(free_port)
"$BIN" serve --model "$T/s4b" --port "$SP" >"$T/serve.out" 2>"$T/serve.err" &
SERVE=$!
HUB_PIDS="$HUB_PIDS $SERVE"
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$SP/health" >/dev/null 2>&1 && break; sleep 0.1; done
MID=$(curl -sf "http://127.0.0.1:$SP/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])') \
  || fail "serve from a stream install did not start: $(cat "$T/serve.err")"
curl -sf "http://127.0.0.1:$SP/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\":\"$MID\",\"prompt\":[$IDS2],\"max_tokens\":10}" >"$T/serve.json" \
  || fail "completion from a stream install failed: $(cat "$T/serve.err")"
kill "$SERVE"; wait "$SERVE" 2>/dev/null || true
python3 -c '
import json, sys
got = json.load(open(sys.argv[1]))["choices"][0]["text"]
want = json.load(open(sys.argv[2]))["text"]
assert got == want, (got, want)' "$T/serve.json" "$T/ref2.json" || fail "served text differs from the original run"
[ "$($MAP count-present "$T/s4b" "$T/src")" -gt 0 ] || fail "serve fetched no expert"

# --- 5: kill -9 during --stream and during run-time fetches, then rerun ---
start_proxy --rate 600000 --log "$T/p5.log"
EPS="http://127.0.0.1:$PROXY_PORT"
for d in 0.3 0.9; do
  "$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EPS" --model-root "$T/s5" \
    --chunk-kb 16 -q >/dev/null 2>&1 &
  P=$!; sleep "$d"; kill -9 "$P" 2>/dev/null || true; wait "$P" 2>/dev/null || true
done
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EPS" --model-root "$T/s5" -q \
  2>"$T/s5.err" || fail "--stream after kills: $(cat "$T/s5.err")"
$MAP check-present "$T/s5" "$T/src" none || fail "stream install after kills: wrong ranges"
for d in 0.2 0.5; do
  "$BIN" run --model "$T/s5" --prompt-ids $IDS --max-new 10 --json >/dev/null 2>&1 &
  P=$!; sleep "$d"; kill -9 "$P" 2>/dev/null || true; wait "$P" 2>/dev/null || true
done
"$BIN" run --model "$T/s5" --prompt-ids $IDS --max-new 10 --json >"$T/o5.json" 2>"$T/o5.err" \
  || fail "run after kills: $(cat "$T/o5.err")"
[ "$(ids "$T/o5.json")" = "$(ids "$T/ref.json")" ] || fail "ids after killed fetches differ"
$MAP verify-present "$T/s5" "$T/src" || fail "a present range holds wrong bytes after kills"
stop_proxy

# --- 5b: pack refuses a stream install whose experts are not all local ---
rc=0
"$BIN" pack --model "$T/s5" --drives "$T/s5.d0" -q 2>"$T/pk.err" || rc=$?
[ "$rc" != 0 ] || fail "pack accepted a stream install with missing experts"
grep -q "not local" "$T/pk.err" && grep -q "setup --full" "$T/pk.err" || fail "pack message: $(cat "$T/pk.err")"

# --- 6: setup --full on a stream install downloads exactly what is missing ---
MISSING=$($MAP missing-bytes "$T/s1")
: >"$T/hub/logs/access.log"
"$BIN" setup --full --repo "$REPO" --revision main --endpoint "$EP" --model-root "$T/s1" -q --json \
  >"$T/f1.json" 2>"$T/f1.err" || fail "--full after --stream: $(cat "$T/f1.err")"
GOT=$(hub_bytes "$SHARDS_RX")
[ "$GOT" = "$MISSING" ] || fail "--full after --stream fetched $GOT shard bytes, $MISSING were missing"
for f in "$T"/src/*; do cmp -s "$f" "$T/s1/$(basename "$f")" || fail "$(basename "$f") differs after --full"; done
ls "$T/s1" | grep -q '\.ranges$' && fail "journals left after --full"
"$BIN" run --model "$T/s1" --prompt-ids $IDS2 --max-new 10 --json >"$T/o6.json"
[ "$(ids "$T/o6.json")" = "$(ids "$T/ref2.json")" ] || fail "ids after the upgrade differ"
[ "$(net "$T/o6.json" records_fetched 2>/dev/null || echo none)" = none ] || true

# --- 7: a corrupted served byte in an expert: caught by the shard's sha256 ---
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/s7" -q 2>/dev/null
$MAP corrupt-blob-expert "$T/hub/www" "$T/src" "$COMMIT" >"$T/corrupt"
rc=0
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/s7" -q \
  2>"$T/s7.err" || rc=$?
[ "$rc" != 0 ] || fail "a corrupted served expert passed setup --full"
grep -q "sha256" "$T/s7.err" && grep -q "$(cat "$T/corrupt")" "$T/s7.err" || fail "corruption message: $(cat "$T/s7.err")"
if "$BIN" run --model "$T/s7" --prompt-ids $IDS --max-new 4 >"$T/o7" 2>/dev/null; then
  fail "run produced tokens after the corrupt shard was rejected"
fi
[ -z "$(tr -d ' \n' <"$T/o7")" ] || fail "tokens printed from a rejected install: $(cat "$T/o7")"
echo "PASS setup stream"

#!/bin/sh
# Stream installs verified per record: deltafin record-sums, setup --stream
# --record-sums and --stream-verify record|shard|arrival, against nginx on
# loopback (hub URL layout) and the fault proxy. Checks, against independent
# computations (tests/setup/shardmap.py hashes the original files itself):
#  - record-sums of the original folder lists every shard and expert record
#    with its true sha256; a full install's gives the same document;
#  - a stream install with record sums (fetched from a URL) gives the
#    original's ids, every fetched expert checked, none used unverified;
#    a byte flipped once on the way is fetched again and the ids still match;
#  - record sums of another checkpoint are refused at setup;
#  - with record sums a corrupted served spine byte fails setup --stream
#    naming the shard and tensor (the shard removed); a rerun refetches it;
#  - a served blob with one corrupted byte in an expert the prompt needs:
#    record: the run fails naming the expert, its shard, offset and endpoint,
#    prints no token and journals nothing of it; shard: the run fails naming
#    the shard (removed), no token; arrival (explicit): it runs, warned and
#    counted as unverified (the documented limit); serve warns at start-up;
#  - record sums cannot be added while a serve has the install open;
#  - record sums added later to that arrival install drop the wrong record,
#    and the next run (good hub) gives the original's ids;
#  - --stream-verify shard on a good hub: the original's ids, the shards it
#    used complete and verified.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin verify

REPO=test-org/K3-tiny
COMMIT=0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c
IDS=3,14,15,92,65
"$BIN" make-model --preset tiny --seed 11 --out "$T/src" -q >/dev/null 2>&1
cp -r "$T/src" "$T/orig"
"$BIN" run --model "$T/orig" --prompt-ids $IDS --max-new 6 --json >"$T/ref.json"
REF=$(ids "$T/ref.json")
# the experts this prompt reads (every use a read): the corrupted one is among them
"$BIN" run --model "$T/orig" --prompt-ids $IDS --max-new 6 --prefetch off --cache-mb 0 \
  --trace "$T/trace" >/dev/null 2>&1
set -- $($MAP top-n "$T/trace" 1)
L=$1 X=$2

# --- 1: record sums of a plain folder and of a full install ---
"$BIN" record-sums --model "$T/orig" --out "$T/sums.json" -q || fail "record-sums failed"
N=$($MAP check-sums "$T/sums.json" "$T/src") || fail "record-sums document is wrong"
[ "$N" -gt 0 ] || fail "no records summed"
ls "$T" | grep -q 'sums.json.' && fail "a temporary file was left beside the sums"
start_hub "$T/src" "$REPO" "$COMMIT"
EP="http://127.0.0.1:$HUB_PORT"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/full" -q \
  2>"$T/full.err" || fail "setup --full: $(cat "$T/full.err")"
"$BIN" record-sums --model "$T/full" --out "$T/sums-full.json" -q || fail "record-sums of a full install"
python3 -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a["shards"] == b["shards"] and a["records"] == b["records"], "sums differ"
assert b["commit"] == sys.argv[3] and b["repo"] == sys.argv[4], (b.get("commit"), b.get("repo"))' \
  "$T/sums.json" "$T/sums-full.json" "$COMMIT" "$REPO" || fail "a full install's record sums differ"
# a stream install (shards partial) cannot give record sums
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/a" -q \
  2>"$T/a.err" || fail "setup --stream: $(cat "$T/a.err")"
grep -q "UNVERIFIED EXPERTS" "$T/a.err" || fail "no warning for a stream install without record sums: $(cat "$T/a.err")"
rc=0
"$BIN" record-sums --model "$T/a" --out "$T/bad.json" -q 2>"$T/rs.err" || rc=$?
[ "$rc" != 0 ] && grep -q "not complete" "$T/rs.err" || fail "record-sums of a stream install: $(cat "$T/rs.err")"

# --- 2: a good stream install with record sums (by URL) gives the original's ids ---
cp "$T/sums.json" "$T/hub/www/cdn/sums.json"
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/g" -q \
  --record-sums "$EP/cdn/sums.json" 2>"$T/g.err" || fail "setup --stream --record-sums URL: $(cat "$T/g.err")"
grep -q "UNVERIFIED" "$T/g.err" && fail "warned although record sums are present"
cmp -s "$T/sums.json" "$T/g/deltafin-record-sums.json" || fail "record sums not stored in the install"
"$BIN" run --model "$T/g" --prompt-ids $IDS --max-new 6 --json --stats >"$T/g.json" 2>"$T/g.run" \
  || fail "run with record sums: $(cat "$T/g.run")"
[ "$(ids "$T/g.json")" = "$REF" ] || fail "ids with record sums differ: $(ids "$T/g.json") vs $REF"
[ "$(net "$T/g.json" stream_verify)" = record ] || fail "policy is not record by default"
F=$(net "$T/g.json" records_fetched)
[ "$F" -gt 0 ] && [ "$(net "$T/g.json" records_verified)" = "$F" ] || fail "not every fetched record was checked"
[ "$(net "$T/g.json" records_used_unverified)" = 0 ] || fail "records used unverified with record sums"
grep -q "stream verify: record" "$T/g.run" || fail "--stats has no verify line: $(cat "$T/g.run")"
grep -q "UNVERIFIED" "$T/g.run" && fail "run warned although record sums are present"
# a byte flipped once on the way: fetched again, same ids
start_proxy --flip-first 1 --log "$T/p.log"
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/g2" -q \
  --record-sums "$T/sums.json" 2>/dev/null || fail "setup --stream --record-sums FILE"
HF_ENDPOINT="http://127.0.0.1:$PROXY_PORT" "$BIN" run --model "$T/g2" --prompt-ids $IDS --max-new 6 \
  --json >"$T/g2.json" 2>"$T/g2.err" || fail "a transient flipped byte failed the run: $(cat "$T/g2.err")"
stop_proxy
grep -q " flip " "$T/p.log" || fail "the proxy flipped nothing (test too weak)"
[ "$(net "$T/g2.json" records_refetched)" = 1 ] || fail "the flipped record was not fetched again"
[ "$(ids "$T/g2.json")" = "$REF" ] || fail "ids after a refetch differ"
$MAP verify-present "$T/g2" "$T/src" || fail "a wrong byte reached the install"

# --- 3: record sums of another checkpoint are refused ---
"$BIN" make-model --preset tiny --seed 12 --out "$T/other" -q >/dev/null 2>&1
"$BIN" record-sums --model "$T/other" --out "$T/other.json" -q
rc=0
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/x" -q \
  --record-sums "$T/other.json" 2>"$T/x.err" || rc=$?
[ "$rc" != 0 ] && grep -q "record sums are for another revision/repo" "$T/x.err" \
  || fail "sums of another checkpoint: $(cat "$T/x.err")"
rc=0
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/x2" -q \
  --stream-verify record 2>"$T/x2.err" || rc=$?
[ "$rc" != 0 ] && grep -q "needs record sums" "$T/x2.err" || fail "record without sums: $(cat "$T/x2.err")"

# --- 3b: with record sums a corrupted served spine byte is caught by setup --stream ---
cp -r "$T/hub/www/cdn" "$T/cdn.good"
SSH=$($MAP corrupt-blob-spine "$T/hub/www" "$T/src" "$COMMIT")
rc=0
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/sp" -q \
  --record-sums "$T/sums.json" 2>"$T/sp.err" || rc=$?
[ "$rc" != 0 ] && grep -q "$SSH: language_model" "$T/sp.err" && grep -q "record sums' sha256" "$T/sp.err" \
  || fail "a corrupted served spine tensor: $(cat "$T/sp.err")"
[ -e "$T/sp/$SSH" ] && fail "the shard with a wrong spine tensor was left behind"
cp "$T"/cdn.good/* "$T/hub/www/cdn/"
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/sp" \
  2>"$T/sp2.err" || fail "rerun after a wrong spine: $(cat "$T/sp2.err")"
grep -q "spine checked against the record sums" "$T/sp2.err" || fail "the refetched spine was not checked"
$MAP verify-present "$T/sp" "$T/src" || fail "a wrong spine byte stayed"
"$BIN" run --model "$T/sp" --prompt-ids $IDS --max-new 6 --json >"$T/sp.json" 2>/dev/null || fail "run after the rerun"
[ "$(ids "$T/sp.json")" = "$REF" ] || fail "ids after a refetched spine differ"

# --- 4: one corrupted byte in a served expert the prompt needs ---
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/c1" -q \
  --record-sums "$T/sums.json" 2>/dev/null || fail "setup c1"
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/c2" -q \
  --stream-verify shard 2>"$T/c2s.err" || fail "setup c2: $(cat "$T/c2s.err")"
grep -q "UNVERIFIED" "$T/c2s.err" && fail "warned about shard verification"
set -- $($MAP corrupt-blob-record "$T/hub/www" "$T/src" "$COMMIT" "$L" "$X")
SH=$1 OFF=$2
# record: fails naming the expert, shard, offset and endpoint; no token; nothing journalled
rc=0
"$BIN" run --model "$T/c1" --prompt-ids $IDS --max-new 6 >"$T/c1.out" 2>"$T/c1.err" || rc=$?
[ "$rc" != 0 ] || fail "record: a corrupted expert was used"
grep -q "layer $L expert $X" "$T/c1.err" && grep -q "$SH at offset $OFF" "$T/c1.err" \
  && grep -q "$EP" "$T/c1.err" && grep -q "record sums" "$T/c1.err" || fail "record: message: $(cat "$T/c1.err")"
[ -z "$(tr -d ' \n' <"$T/c1.out")" ] || fail "record: tokens printed: $(cat "$T/c1.out")"
$MAP is-present "$T/c1" "$T/src" "$L" "$X" && fail "record: the corrupted expert was journalled"
$MAP verify-present "$T/c1" "$T/src" || fail "record: a wrong byte reached the install"
# shard: fails naming the shard, which is removed; no token
rc=0
"$BIN" run --model "$T/c2" --prompt-ids $IDS --max-new 6 >"$T/c2.out" 2>"$T/c2.err" || rc=$?
[ "$rc" != 0 ] || fail "shard: a corrupted shard was used"
grep -q "$SH" "$T/c2.err" && grep -q "sha256" "$T/c2.err" && grep -q "stream-verify shard" "$T/c2.err" \
  || fail "shard: message: $(cat "$T/c2.err")"
[ -z "$(tr -d ' \n' <"$T/c2.out")" ] || fail "shard: tokens printed: $(cat "$T/c2.out")"
[ -e "$T/c2/$SH" ] && fail "shard: the corrupt shard was left behind"
# arrival (explicit, no record sums): it runs; warned, and counted as unverified
"$BIN" run --model "$T/a" --prompt-ids $IDS --max-new 6 --stream-verify arrival --json \
  >"$T/a.json" 2>"$T/a.run" || fail "arrival: $(cat "$T/a.run")"
grep -q "UNVERIFIED EXPERTS" "$T/a.run" || fail "arrival: no start-up warning"
[ "$(net "$T/a.json" stream_verify)" = arrival ] || fail "arrival: policy not reported"
[ "$(net "$T/a.json" records_used_unverified)" -gt 0 ] || fail "arrival: unverified records not counted"
$MAP is-present "$T/a" "$T/src" "$L" "$X" || fail "arrival: the expert was not fetched"
# serve warns at start-up too
SP=$(free_port)
"$BIN" serve --model "$T/a" --port "$SP" >/dev/null 2>"$T/serve.err" &
SERVE=$!
HUB_PIDS="$HUB_PIDS $SERVE"
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$SP/health" >/dev/null 2>&1 && break; sleep 0.1; done
# record sums cannot be added while it has the install open (it would go on
# journalling what it fetches unchecked)
rc=0
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/a" \
  --record-sums "$T/sums.json" 2>"$T/busy.err" || rc=$?
[ "$rc" != 0 ] || fail "record sums were added while serve had the install open"
grep -q "is fetching into this stream install" "$T/busy.err" || fail "busy message: $(cat "$T/busy.err")"
[ -e "$T/a/deltafin-record-sums.json" ] && fail "the sums were stored although setup refused"
kill "$SERVE"; wait "$SERVE" 2>/dev/null || true
grep -q "UNVERIFIED EXPERTS" "$T/serve.err" || fail "serve: no start-up warning: $(cat "$T/serve.err")"

# --- 5: record sums added to that install drop the wrong record ---
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/a" \
  --record-sums "$T/sums.json" 2>"$T/a2.err" || fail "adding record sums: $(cat "$T/a2.err")"
grep -q "layer $L expert $X .*does not match the record sums" "$T/a2.err" && grep -q ", 1 dropped" "$T/a2.err" \
  || fail "adding record sums did not drop the wrong record: $(cat "$T/a2.err")"
$MAP is-present "$T/a" "$T/src" "$L" "$X" && fail "the wrong record is still journalled"
$MAP verify-present "$T/a" "$T/src" || fail "a wrong record is still present"
stop_hub
python3 "$DF_SRC/tests/setup/hubgen.py" --model "$T/src" --repo "$REPO" --commit "$COMMIT" \
  --out "$T/hub" --port "$HUB_PORT" # the good blobs again
"$NGINX" -c "$T/hub/nginx.conf" -p "$T/hub" -e "$T/hub/logs/error.log" &
HUB_PIDS="$HUB_PIDS $!"
wait_port "$HUB_PORT"
"$BIN" run --model "$T/a" --prompt-ids $IDS --max-new 6 --json >"$T/a3.json" 2>"$T/a3.err" \
  || fail "run after adding record sums: $(cat "$T/a3.err")"
[ "$(ids "$T/a3.json")" = "$REF" ] || fail "ids after adding record sums differ"
[ "$(net "$T/a3.json" stream_verify)" = record ] || fail "the added sums did not make record the default"
[ "$(net "$T/a3.json" records_used_unverified)" = 0 ] || fail "records used unverified after adding sums"

# --- 6: --stream-verify shard on a good hub: same ids, the shards used complete ---
"$BIN" run --model "$T/c1" --prompt-ids $IDS --max-new 6 --stream-verify shard --json \
  >"$T/c3.json" 2>"$T/c3.err" || fail "shard on a good hub: $(cat "$T/c3.err")"
[ "$(ids "$T/c3.json")" = "$REF" ] || fail "ids with --stream-verify shard differ"
[ -e "$T/c1/$SH.ranges" ] && fail "shard: the shard used is still partial"
cmp -s "$T/src/$SH" "$T/c1/$SH" || fail "shard: the completed shard differs from the original"
[ "$(net "$T/c3.json" records_used_unverified)" = 0 ] || fail "shard: records used unverified"
echo "PASS setup verify"

#!/bin/sh
# deltafin setup --full against a real HTTP server on loopback: nginx serves a
# generated checkpoint in the hub's URL layout (model info, resolve -> 302 ->
# blob, Range), a fault-injecting proxy in front. Checks: the installed files
# are byte-identical to the original and give the same ids (also packed on two
# drives and with the int8 spine); resets, short bodies, wrong Content-Range and
# 500s are survived; kill -9 at random points followed by a rerun gives a valid
# verified install; a corrupted served byte is detected, leaves nothing behind
# and no token is produced; 401/404 say what to do; the token is sent, and
# never written or printed; files in the hub cache (HF_HOME) are reused.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin setup

hub_tiny 5 5d2c3b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c
IDS=1,20,300,400,7,7,99
"$BIN" run --model "$T/orig" --prompt-ids $IDS --max-new 12 --json >"$T/ref.json"
REF=$(ids "$T/ref.json")
[ -n "$REF" ] || fail "no reference ids"

same_files() { # dir
  for f in "$T"/src/*; do
    cmp -s "$f" "$1/$(basename "$f")" || fail "$1/$(basename "$f") differs from the original"
  done
  ls "$1" | grep -q '\.part' && fail "partial files left in $1: $(ls "$1")"
  return 0
}

# --- 1: a plain install, branch resolved once and recorded ---
"$BIN" setup --full --repo "$REPO" --revision main --endpoint "$EP" --model-root "$T/r1" -q \
  --chunk-kb 64 --json >"$T/r1.json" 2>"$T/r1.err" || fail "setup: $(cat "$T/r1.err")"
same_files "$T/r1"
grep -q "\"commit\": \"$COMMIT\"" "$T/r1/deltafin-setup.json" || fail "commit not recorded"
"$BIN" run --model "$T/r1" --prompt-ids $IDS --max-new 12 --json >"$T/o1.json"
[ "$(ids "$T/o1.json")" = "$REF" ] || fail "ids from the install differ: $(ids "$T/o1.json") vs $REF"
# a rerun downloads nothing and re-hashes nothing
"$BIN" setup --full --repo "$REPO" --revision main --endpoint "$EP" --model-root "$T/r1" -q --json \
  >"$T/r1b.json" 2>"$T/r1b.err" || fail "rerun: $(cat "$T/r1b.err")"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["bytes_net"]==0 and r["requests"]==0, r' "$T/r1b.json" \
  || fail "a rerun of a complete install fetched something: $(cat "$T/r1b.json")"

# --- 2: through the fault proxy: resets, short bodies, wrong ranges, 500s ---
start_proxy --seed 7 --p-reset 0.12 --p-short 0.12 --p-badrange 0.12 --p-500 0.12 --log "$T/p2.log"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$PROXY_PORT" \
  --model-root "$T/r2" --chunk-kb 32 --connections 3 --retry-wait-ms 5 --retries 30 -q --json \
  --drives "$T/d0,$T/d1" --spine int8 >"$T/r2.json" 2>"$T/r2.err" || fail "setup through faults: $(cat "$T/r2.err")"
stop_proxy
for k in reset short badrange 500; do
  grep -q " $k " "$T/p2.log" || fail "the proxy injected no '$k' fault (test too weak)"
done
same_files "$T/r2"
[ -f "$T/r2/deltafin-pack.json" ] || fail "no pack manifest after --drives"
"$BIN" doctor --model "$T/r2" -q >"$T/doc2" || fail "doctor: $(cat "$T/doc2")"
"$BIN" run --model "$T/r2" --prompt-ids $IDS --max-new 12 --json >"$T/o2.json"
[ "$(ids "$T/o2.json")" = "$REF" ] || fail "ids from the packed install differ"
grep -q '"source":"pack"' "$T/o2.json" || fail "the packed install did not read the pack"
cp -r "$T/src" "$T/orig8"
"$BIN" convert-spine --model "$T/orig8" >/dev/null 2>&1
"$BIN" run --model "$T/orig8" --prompt-ids $IDS --max-new 12 --spine int8 --no-pack --json >"$T/ref8.json"
"$BIN" run --model "$T/r2" --prompt-ids $IDS --max-new 12 --spine int8 --json >"$T/o2i8.json" \
  || fail "no int8 spine after --spine int8"
[ "$(ids "$T/o2i8.json")" = "$(ids "$T/ref8.json")" ] || fail "int8 spine ids differ"

# --- 3: kill -9 at random points (download, convert, pack), then rerun ---
start_proxy --rate 1500000 --log "$T/p3.log"
EP3="http://127.0.0.1:$PROXY_PORT"
# (download ~1.5 s at 1.5 MB/s, then the int8 conversion, then a pack slowed to 1 MB/s)
STEPS=""
for seed in 1 2 3 4; do
  D="$T/k$seed"
  for delay in $(python3 -c "import random; r=random.Random($seed); print(' '.join('%.2f' % r.uniform(0.05, 2.6) for _ in range(2)))"); do
    "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP3" --model-root "$D" \
      --chunk-kb 32 --drives "$D.d0,$D.d1" --spine int8 --pack-max-rate 1MB/s -q >/dev/null 2>&1 &
    P=$!
    sleep "$delay"
    kill -9 "$P" 2>/dev/null || true
    wait "$P" 2>/dev/null || true
    if ls "$D" | grep -q '\.part'; then STEPS="$STEPS download"
    elif [ -f "$D/deltafin-pack.json" ]; then STEPS="$STEPS done"
    elif ls "$D.d0" >/dev/null 2>&1; then STEPS="$STEPS pack"
    else STEPS="$STEPS convert"; fi
  done
  "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP3" --model-root "$D" \
    --chunk-kb 32 --drives "$D.d0,$D.d1" --spine int8 --pack-max-rate 1MB/s -q 2>"$T/k.err" || fail "resume after kill (seed $seed): $(cat "$T/k.err")"
  same_files "$D"
  "$BIN" doctor --model "$D" -q >"$T/dock" || fail "doctor after kills (seed $seed): $(cat "$T/dock")"
  "$BIN" run --model "$D" --prompt-ids $IDS --max-new 12 --json >"$T/ok.json"
  [ "$(ids "$T/ok.json")" = "$REF" ] || fail "ids after kill+resume differ (seed $seed)"
  "$BIN" run --model "$D" --prompt-ids $IDS --max-new 12 --spine int8 --json >"$T/ok8.json"
  [ "$(ids "$T/ok8.json")" = "$(ids "$T/ref8.json")" ] || fail "int8 ids after kill+resume differ (seed $seed)"
done
echo "kill points landed in:$STEPS"
stop_proxy

# --- 4: a corrupted byte in a served shard ---
SHA=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print([s["lfs"]["sha256"] for s in d["siblings"] if s["rfilename"]=="model-00002-of-000003.safetensors"][0])' "$T/hub/www/api/$COMMIT.json")
cp "$T/hub/www/cdn/$SHA" "$T/good-blob"
python3 -c "
import sys
f = open(sys.argv[1], 'r+b'); f.seek(600000); b = f.read(1); f.seek(600000); f.write(bytes([b[0] ^ 0x10]))
" "$T/hub/www/cdn/$SHA"
rc=0
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/r4" -q \
  --chunk-kb 64 2>"$T/r4.err" || rc=$?
[ "$rc" != 0 ] || fail "a corrupted shard was accepted"
grep -q "model-00002-of-000003.safetensors" "$T/r4.err" || fail "corruption error does not name the file: $(cat "$T/r4.err")"
grep -q "sha256" "$T/r4.err" || fail "corruption error does not say sha256: $(cat "$T/r4.err")"
ls "$T/r4" | grep -q "model-00002" && fail "corrupt data left behind: $(ls "$T/r4")"
if "$BIN" run --model "$T/r4" --prompt-ids $IDS --max-new 4 >"$T/o4" 2>/dev/null; then fail "run produced tokens from a failed install"; fi
[ ! -s "$T/o4" ] || fail "run printed tokens from a failed install: $(cat "$T/o4")"
cp "$T/good-blob" "$T/hub/www/cdn/$SHA"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/r4" -q \
  2>"$T/r4b.err" || fail "setup after the blob was repaired: $(cat "$T/r4b.err")"
same_files "$T/r4"

# --- 5: 401 and 404 say what to do; the token is sent and never leaks ---
SECRET=hf_test_SeCrEt_8c1d4
start_proxy --require-token "$SECRET" --log "$T/p5.log"
EP5="http://127.0.0.1:$PROXY_PORT"
rc=0
env -u HF_TOKEN HF_HOME="$T/nohome" "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP5" \
  --model-root "$T/r5" -q 2>"$T/r5.err" || rc=$?
[ "$rc" != 0 ] || fail "setup without a token succeeded against a server that wants one"
grep -q "401" "$T/r5.err" && grep -q "HF_TOKEN" "$T/r5.err" || fail "401 message: $(cat "$T/r5.err")"
HF_TOKEN="$SECRET" HF_HOME="$T/nohome" "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP5" \
  --model-root "$T/r5" --json >"$T/r5.out" 2>"$T/r5b.err" || fail "setup with the token: $(cat "$T/r5b.err")"
same_files "$T/r5"
grep -rq "$SECRET" "$T/r5" "$T/r5.out" "$T/r5b.err" && fail "the token was written or printed"
stop_proxy
rc=0
"$BIN" setup --full --repo test-org/no-such-model --revision "$COMMIT" --endpoint "$EP" \
  --model-root "$T/r6" -q 2>"$T/r6.err" || rc=$?
[ "$rc" != 0 ] || fail "a missing repository was accepted"
grep -q "404" "$T/r6.err" && grep -q "check --repo" "$T/r6.err" || fail "404 message: $(cat "$T/r6.err")"
start_proxy --status '403:/resolve/' --log "$T/p6b.log"
rc=0
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$PROXY_PORT" \
  --model-root "$T/r6b" -q 2>"$T/r6b.err" || rc=$?
stop_proxy
[ "$rc" != 0 ] || fail "a 403 was accepted"
grep -q "403" "$T/r6b.err" && grep -q "Request access" "$T/r6b.err" || fail "403 message: $(cat "$T/r6b.err")"

# --- 6: reuse of the hub cache under HF_HOME (downloads are refused) ---
SNAP="$T/hfhome/hub/models--test-org--K3-tiny/snapshots/$COMMIT"
mkdir -p "$SNAP" "$T/hfhome/hub/models--test-org--K3-tiny/blobs"
for f in "$T"/src/*; do
  b=$(sha256sum "$f" | cut -c1-64)
  cp "$f" "$T/hfhome/hub/models--test-org--K3-tiny/blobs/$b"
  ln -s "../../blobs/$b" "$SNAP/$(basename "$f")"
done
start_proxy --status '404:/resolve/' --log "$T/p6.log"
HF_HOME="$T/hfhome" "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" \
  --endpoint "http://127.0.0.1:$PROXY_PORT" --model-root "$T/r7" -q --json >"$T/r7.json" 2>"$T/r7.err" \
  || fail "setup from the hub cache: $(cat "$T/r7.err")"
same_files "$T/r7"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["bytes_net"]==0 and r["files_reused"]==8, r' "$T/r7.json" \
  || fail "the hub cache was not reused: $(cat "$T/r7.json")"
# --from a local folder, one file of it damaged: that one is downloaded, the rest reused
cp -r "$T/src" "$T/local"
printf 'x' | dd of="$T/local/model-00003-of-000003.safetensors" bs=1 seek=1000 conv=notrunc 2>/dev/null
stop_proxy
start_proxy --log "$T/p7.log"
env -u HF_HOME HOME="$T/nohome" "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --from "$T/local" \
  --endpoint "http://127.0.0.1:$PROXY_PORT" --model-root "$T/r7b" -q --json >"$T/r7b.json" 2>"$T/r7b.err" \
  || fail "setup --from: $(cat "$T/r7b.err")"
stop_proxy
same_files "$T/r7b"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["files_reused"]==7 and r["files_downloaded"]==1, r' "$T/r7b.json" \
  || fail "--from reuse: $(cat "$T/r7b.json")"
grep -q "model-00003-of-000003.safetensors" "$T/r7b.err" || fail "the damaged local file was not reported: $(cat "$T/r7b.err")"

# --- 6b: the free-space check refuses before downloading anything ---
# (the served model info claims one more, 1 PB file: no disk here has room)
python3 - "$T/hub/www/api/$COMMIT.json" <<'EOF2'
import json, sys
d = json.load(open(sys.argv[1]))
d["siblings"].append({"rfilename": "model-huge.safetensors", "size": 10**15,
                      "lfs": {"sha256": "ab" * 32, "size": 10**15, "pointerSize": 135}})
json.dump(d, open(sys.argv[1] + ".huge", "w"))
EOF2
cp "$T/hub/www/api/$COMMIT.json" "$T/info.keep"
cp "$T/hub/www/api/$COMMIT.json.huge" "$T/hub/www/api/$COMMIT.json"
: >"$T/hub/logs/access.log"
rc=0
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/r9" -q \
  2>"$T/r9.err" || rc=$?
cp "$T/info.keep" "$T/hub/www/api/$COMMIT.json"
[ "$rc" != 0 ] || fail "a 1 PB install passed the free-space check"
grep -Eq "[0-9.]+ [KMGT]?B free" "$T/r9.err" && grep -q "needs" "$T/r9.err" || fail "space message: $(cat "$T/r9.err")"
[ "$(hub_bytes '^/cdn/')" = 0 ] || fail "shards were downloaded before the space check refused"

# --- 7: a shard holding only vision tensors: header only unless --with-vision ---
stop_hub
"$BIN" make-model --preset tiny --seed 5 --out "$T/vsrc" -q >/dev/null 2>&1
VHDR=$(python3 "$DF_SRC/tests/setup/shardmap.py" add-vision "$T/vsrc")
rm -rf "$T/hub"
start_hub "$T/vsrc" "$REPO" "$COMMIT"
EP="http://127.0.0.1:$HUB_PORT"
VSHA=$(sha256sum "$T/vsrc/model-vision.safetensors" | cut -c1-64)
"$BIN" run --model "$T/vsrc" --prompt-ids $IDS --max-new 12 --json >"$T/vref.json" \
  || fail "the original with a vision shard does not run"
rm -f "$T/vsrc/deltafin.heat"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/r8" -q \
  2>"$T/r8.err" || fail "setup with a vision shard: $(cat "$T/r8.err")"
VB=$(hub_bytes "^/cdn/$VSHA\$")
[ "$VB" = "$VHDR" ] || fail "the vision-only shard: $VB bytes fetched, its header is $VHDR"
"$BIN" run --model "$T/r8" --prompt-ids $IDS --max-new 12 --json >"$T/o8.json" || fail "run without the vision bytes"
[ "$(ids "$T/o8.json")" = "$(ids "$T/vref.json")" ] || fail "ids without the vision bytes differ"
"$BIN" setup --full --with-vision --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/r8" -q \
  2>"$T/r8b.err" || fail "--with-vision: $(cat "$T/r8b.err")"
cmp -s "$T/vsrc/model-vision.safetensors" "$T/r8/model-vision.safetensors" || fail "--with-vision: shard differs"
[ ! -f "$T/r8/model-vision.safetensors.ranges" ] || fail "--with-vision left the journal"
echo "PASS setup full"

#!/bin/sh
# Remembered redirect targets (the hub's resolve -> 302 -> signed CDN URL):
# a stream install's range requests go straight to the remembered target.
# Checks, against nginx's access log and the fault proxy's request log:
#  1. a cold run resolves each shard at most once per connection (before:
#     once per range request), every range still strictly checked; same ids;
#  2. signed CDN URLs that expire (403 after a few uses, emulated by the
#     proxy's --sign) are forgotten and resolved again; the run completes
#     with the original's ids;
#  3. with HF_TOKEN set, the token reaches the resolve host and never a CDN
#     on another host:port, also for requests sent straight to the target.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin cdn

REPO=test-org/K3-tiny
COMMIT=a1b2c3d4e5f60718293a4b5c6d7e8f9012345678
TOKEN=hf_cdntest_0123456789
CONNS=2
"$BIN" make-model --preset tiny --seed 9 --out "$T/src" -q >/dev/null 2>&1
start_hub "$T/src" "$REPO" "$COMMIT"
EP="http://127.0.0.1:$HUB_PORT"
IDS=5,6,7,8,100,200
"$BIN" run --model "$T/src" --prompt-ids $IDS --max-new 10 --json >"$T/ref.json"
NSHARDS=$(ls "$T/src"/*.safetensors | wc -l)
# nginx access log lines: METHOD URI STATUS BYTES "RANGE"
resolves() { awk -v rx="^/$REPO/resolve/.*[.]safetensors\$" '$2 ~ rx' "$T/hub/logs/access.log"; }
cdn_ranges() { awk '$2 ~ /^\/cdn\// && $3 == 206' "$T/hub/logs/access.log"; }
cold_run() { # model-dir out-json
  DF_FETCH_CONNECTIONS=$CONNS "$BIN" run --model "$1" --prompt-ids $IDS --max-new 10 --json --stats \
    --prefetch off --fetch-ahead off >"$2" 2>"$2.err" || fail "cold run: $(cat "$2.err")"
  [ "$(ids "$2")" = "$(ids "$T/ref.json")" ] || fail "ids differ: $(ids "$2") vs $(ids "$T/ref.json")"
}

# --- 1: at most one resolve per shard per connection ---
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/s1" -q \
  2>"$T/s1.err" || fail "setup --stream: $(cat "$T/s1.err")"
: >"$T/hub/logs/access.log"
cold_run "$T/s1" "$T/o1.json"
NRES=$(resolves | wc -l)
NCDN=$(cdn_ranges | wc -l)
REQ=$(net "$T/o1.json" http_requests)
[ "$NCDN" = "$REQ" ] || fail "nginx served $NCDN ranges, the run counted $REQ requests"
[ "$(awk '$2 ~ /^\/cdn\// && $3 != 206' "$T/hub/logs/access.log" | wc -l)" = 0 ] \
  || fail "a range request got no 206"
MAXPER=$(resolves | awk '{ n[$2]++ } END { m = 0; for (k in n) if (n[k] > m) m = n[k]; print m }')
[ "$MAXPER" -le "$CONNS" ] || fail "a shard was resolved $MAXPER times with $CONNS connections"
[ "$NRES" -le $((NSHARDS * CONNS)) ] || fail "$NRES resolves for $NSHARDS shards x $CONNS connections"
# meaningful only if most ranges skipped the resolve (one resolve each before)
[ "$NCDN" -gt $((2 * NRES)) ] || fail "only $NCDN ranges for $NRES resolves: too few to tell"
[ "$(net "$T/o1.json" http_redirects_followed)" = "$NRES" ] || fail "redirects followed: $(net "$T/o1.json" http_redirects_followed), nginx resolved $NRES"
[ "$(net "$T/o1.json" http_redirects_skipped)" = $((REQ - NRES)) ] || fail "redirects skipped: $(net "$T/o1.json" http_redirects_skipped) of $REQ requests, $NRES resolved"
grep -q "redirects followed, [0-9]* skipped" "$T/o1.json.err" || fail "--stats lacks the redirect counts: $(cat "$T/o1.json.err")"

# --- 2: expiring signed URLs are resolved again ---
start_proxy --sign 3 --require-token "$TOKEN" --log "$T/p2.log"
EP2="http://127.0.0.1:$PROXY_PORT"
HF_TOKEN=$TOKEN "$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP2" \
  --model-root "$T/s2" -q 2>"$T/s2.err" || fail "setup --stream with expiring URLs: $(cat "$T/s2.err")"
: >"$T/hub/logs/access.log"
: >"$T/p2.log"
HF_TOKEN=$TOKEN cold_run "$T/s2" "$T/o2.json"
N403=$(awk '$1 ~ /^\/cdn\// && $3 == 403' "$T/p2.log" | wc -l)
[ "$N403" -gt 0 ] || fail "no signed URL expired: the test checks nothing"
[ "$(net "$T/o2.json" http_reresolved)" = "$N403" ] || fail "$N403 expired answers, $(net "$T/o2.json" http_reresolved) resolved again"
[ "$(resolves | wc -l)" -gt $((NSHARDS * CONNS)) ] || fail "expired URLs but no shard resolved again"
[ "$(net "$T/o2.json" http_redirects_skipped)" -gt 0 ] || fail "no request went to a remembered target"
# same host: the token goes with requests to the remembered target, as with curl's redirects
[ "$(awk '$1 ~ /^\/cdn\// && $6 != "yes"' "$T/p2.log" | wc -l)" = 0 ] \
  || fail "a same-host /cdn/ request went without the token"
stop_proxy

# --- 3: the token reaches the resolve host, never the CDN on another host:port ---
start_proxy --log "$T/cdn.log"
CDN_PORT=$PROXY_PORT
start_proxy --cdn-base "http://127.0.0.1:$CDN_PORT" --require-token "$TOKEN" --log "$T/front.log"
EP3="http://127.0.0.1:$PROXY_PORT"
HF_TOKEN=$TOKEN "$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP3" \
  --model-root "$T/s3" -q 2>"$T/s3.err" || fail "setup --stream with a CDN host: $(cat "$T/s3.err")"
HF_TOKEN=$TOKEN cold_run "$T/s3" "$T/o3.json"
[ "$(net "$T/o3.json" http_redirects_skipped)" -gt 0 ] || fail "no request went straight to the CDN host"
NC=$(awk '$1 ~ /^\/cdn\//' "$T/cdn.log" | wc -l)
[ "$NC" -gt 0 ] || fail "nothing was served by the CDN host"
[ "$(awk '$6 != "no"' "$T/cdn.log" | wc -l)" = 0 ] || fail "the token reached the CDN host: $(awk '$6 != "no"' "$T/cdn.log" | head -3)"
[ "$(awk '$1 ~ /\/resolve\// && $6 != "yes"' "$T/front.log" | wc -l)" = 0 ] || fail "a resolve went without the token"
[ "$(awk '$1 ~ /\/resolve\//' "$T/front.log" | wc -l)" -gt 0 ] || fail "no resolve reached the hub host"
grep -q "$TOKEN" "$T/s3.err" "$T/o3.json" "$T/o3.json.err" && fail "the token appears in an output"
! grep -rq "$TOKEN" "$T/s3" || fail "the token was written into the install"
echo "PASS: setup cdn ($NRES resolves for $NCDN ranges; $N403 expired; $NC CDN requests without the token)"

#!/bin/sh
# A server or proxy that ignores Range (the fault proxy's --ignore-range
# forwards without it: nginx answers 200 with the whole file). Checks:
#  1. setup --full installs identical bytes (and the original's ids) from
#     it: a range that is the whole file (tiktoken.model, one request) is
#     taken as is; a larger file is fetched as one stream, with a warning
#     naming the server, and not once per chunk (bytes served stay within
#     (connections + 1) x the LFS bytes, where a chunk-by-chunk download
#     would need about 14 x);
#  2. an install interrupted with part of every shard journalled (a rate
#     limit beyond --max-wait) completes from such a server;
#  3. setup --stream says it needs a server that honours Range.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin norange

hub_tiny 17 3333333333333333333333333333333333333333
IDS=4,44,404,5,55
"$BIN" run --model "$T/orig" --prompt-ids $IDS --max-new 10 --json >"$T/ref.json"
REF=$(ids "$T/ref.json")
same() { # dir
  for f in "$T"/src/*; do
    cmp -s "$f" "$1/$(basename "$f")" || fail "$1/$(basename "$f") differs from the original"
  done
  ls "$1" | grep -q '\.part' && fail "partial files left in $1: $(ls "$1")"
  "$BIN" run --model "$1" --prompt-ids $IDS --max-new 10 --json >"$1.ids.json" 2>"$1.ids.err" \
    || fail "run on $1: $(cat "$1.ids.err")"
  [ "$(ids "$1.ids.json")" = "$REF" ] || fail "$1: ids $(ids "$1.ids.json"), the original gives $REF"
}
LFS=$(cat "$T"/src/*.safetensors "$T"/src/*.model | wc -c)
CONNS=2

# --- 1 ---
start_proxy --ignore-range --log "$T/p1.log"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$PROXY_PORT" \
  --model-root "$T/r1" --chunk-kb 64 --connections $CONNS --retries 1 2>"$T/r1.err" \
  || fail "setup from a server that ignores Range: $(cat "$T/r1.err")"
stop_proxy
[ "$(awk '$1 ~ /^\/cdn\// && $3 == 200 && $5 == "norange"' "$T/p1.log" | wc -l)" -gt 0 ] \
  || fail "the proxy answered no range with 200 (test too weak)"
[ "$(awk '$3 == 206' "$T/p1.log" | wc -l)" = 0 ] || fail "a 206 came through: the proxy honoured a range"
grep -q "127.0.0.1:$PROXY_PORT ignores Range requests" "$T/r1.err" || fail "no warning naming the server: $(cat "$T/r1.err")"
TIK=$(python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$T/src/tiktoken.model")
[ "$(awk -v p="/cdn/$TIK" '$1 == p' "$T/p1.log" | wc -l)" = 1 ] || fail "tiktoken.model (one whole-file range) took more than one request"
SENT=$(awk '$1 ~ /^\/cdn\// { s += $4 } END { print s + 0 }' "$T/p1.log")
[ "$SENT" -le $(((CONNS + 1) * LFS)) ] || fail "$SENT bytes served for $LFS LFS bytes: fetched chunk by chunk, not as a stream"
same "$T/r1"

# --- 2: a journal from an earlier try, completed from the server that ignores Range ---
start_proxy --limit-after 9 --limit-s 600 --log "$T/p2a.log"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$PROXY_PORT" \
  --model-root "$T/r2" --chunk-kb 64 --connections $CONNS --max-wait 1s -q 2>"$T/r2a.err" && fail "the rate limit did not stop the first try"
stop_proxy
ls "$T/r2" | grep -q '\.part\.ranges$' || fail "the first try left no journal: $(cat "$T/r2a.err")"
start_proxy --ignore-range --log "$T/p2.log"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$PROXY_PORT" \
  --model-root "$T/r2" --chunk-kb 64 --connections $CONNS -q --json >"$T/r2.json" 2>"$T/r2.err" \
  || fail "resume from a server that ignores Range: $(cat "$T/r2.err")"
stop_proxy
same "$T/r2"

# --- 3: a stream install cannot use such a server ---
start_proxy --ignore-range --log "$T/p3.log"
if "$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$PROXY_PORT" \
  --model-root "$T/s3" -q 2>"$T/s3.err"; then fail "setup --stream from a server that ignores Range succeeded"; fi
grep -q "honours Range" "$T/s3.err" || fail "setup --stream: no clear error: $(cat "$T/s3.err")"
echo "PASS: setup norange ($SENT bytes served for $LFS LFS bytes)"

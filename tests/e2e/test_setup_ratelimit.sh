#!/bin/sh
# Rate limits, as the hub sends them, against the fault proxy's --limit-*
# (a window of 429s, or 503s, after a few good answers). Checks, at the
# server (the proxy's log of arrival times):
#  1. Retry-After in seconds, as an HTTP date, the hub's RateLimit header
#     alone, and a 503 with Retry-After are each waited out: no request of
#     any connection arrives inside the window once the client was told, the
#     first answer after it is no earlier than the window's end, and the
#     install completes with the original bytes and ids, although --retries
#     1 (a rate limit is not a failure);
#  2. a 429 that gives no time is retried, waiting longer each time, also
#     past --retries;
#  3. --max-wait: a wait beyond the patience fails at once, saying so, and
#     keeps what was downloaded: a rerun fetches only the rest;
#  4. a stream install's fetcher (run, three connections) waits as told as
#     well: no request inside the window once told, the same ids.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin ratelimit

hub_tiny 11 7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b
IDS=3,30,300,33,9
"$BIN" run --model "$T/orig" --prompt-ids $IDS --max-new 10 --json >"$T/ref.json"
REF=$(ids "$T/ref.json")

same_files() { # dir
  for f in "$T"/src/*; do
    cmp -s "$f" "$1/$(basename "$f")" || fail "$1/$(basename "$f") differs from the original"
  done
}

# The proxy's log: path range status bytes fault auth arrival.
# Prints: <n429> <first 429 arrival> <first success after it>
window() { # log
  python3 -c '
import sys
rows = [l.split() for l in open(sys.argv[1])]
lim = [float(r[6]) for r in rows if r[2] in ("429", "503")]
t0 = min(lim) if lim else 0.0
after = [float(r[6]) for r in rows if r[2] not in ("429", "503") and float(r[6]) > t0]
print(len(lim), "%.6f" % t0, "%.6f" % (min(after) if after else 0.0))' "$1"
}

LIMIT_S=3
for style in retry-after date ratelimit 503; do
  start_proxy --limit-after 4 --limit-s $LIMIT_S --limit-style $style --log "$T/p-$style.log"
  "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$PROXY_PORT" \
    --model-root "$T/r-$style" --chunk-kb 64 --connections 3 --retries 1 --retry-wait-ms 5 -q --json \
    >"$T/r-$style.json" 2>"$T/r-$style.err" || fail "$style: setup did not wait out the rate limit: $(cat "$T/r-$style.err")"
  stop_proxy
  same_files "$T/r-$style"
  set -- $(window "$T/p-$style.log")
  [ "$1" -gt 0 ] || fail "$style: the proxy limited nothing (test too weak)"
  RL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rate_limited"])' "$T/r-$style.json")
  [ "$RL" = "$1" ] || fail "$style: the report counts $RL rate-limit answers, the proxy sent $1"
  python3 -c 'import sys; t0, t1, w = map(float, sys.argv[1:]); sys.exit(0 if t1 >= t0 + w else 1)' \
    "$2" "$3" "$LIMIT_S" || fail "$style: the first request served after the window came $(python3 -c "print(round($3 - $2, 3))") s after the first 429, before the $LIMIT_S s it was told"
  ! grep -q " early " "$T/p-$style.log" || fail "$style: requests arrived inside the window after the client was told: $(grep ' early ' "$T/p-$style.log" | head -3)"
  grep -q "rate limited by 127.0.0.1:" "$T/r-$style.err" || fail "$style: no word about the rate limit: $(cat "$T/r-$style.err")"
  "$BIN" run --model "$T/r-$style" --prompt-ids $IDS --max-new 10 --json >"$T/o-$style.json"
  [ "$(ids "$T/o-$style.json")" = "$REF" ] || fail "$style: ids differ: $(ids "$T/o-$style.json") vs $REF"
done

# --- 2: a 429 without a time: waited, longer each time, past --retries ---
start_proxy --limit-after 4 --limit-s 2.5 --limit-style none --log "$T/p-none.log"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$PROXY_PORT" \
  --model-root "$T/r-none" --chunk-kb 64 --connections 2 --retries 1 --retry-wait-ms 5 -q \
  2>"$T/r-none.err" || fail "none: setup gave up on a 429 without Retry-After: $(cat "$T/r-none.err")"
stop_proxy
same_files "$T/r-none"
N=$(awk '$3 == 429' "$T/p-none.log" | wc -l)
[ "$N" -ge 2 ] || fail "none: only $N 429s (test too weak)"

# --- 3: --max-wait ---
start_proxy --limit-after 6 --limit-s 600 --limit-style retry-after --log "$T/p-max.log"
if "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$PROXY_PORT" \
  --model-root "$T/r-max" --chunk-kb 64 --connections 2 --max-wait 5s -q 2>"$T/r-max.err"; then
  fail "--max-wait 5s: setup succeeded against a 600 s rate limit"
fi
stop_proxy
grep -q "rate limited by 127.0.0.1:" "$T/r-max.err" && grep -q -- "--max-wait 5 s" "$T/r-max.err" \
  || fail "--max-wait: the message does not say what happened: $(cat "$T/r-max.err")"
[ "$(awk '$3 == 429' "$T/p-max.log" | wc -l)" -le 2 ] || fail "--max-wait: more than one 429 per connection: the wait was tried"
ls "$T/r-max" | grep -q '\.part\.ranges$' || fail "--max-wait: nothing downloaded was kept: $(ls "$T/r-max")"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/r-max" -q --json \
  >"$T/r-max2.json" 2>"$T/r-max2.err" || fail "rerun after --max-wait: $(cat "$T/r-max2.err")"
same_files "$T/r-max"
TOTAL=$(cat "$T"/src/* | wc -c)
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if 0 < r["bytes_net"] < int(sys.argv[2]) else 1)' \
  "$T/r-max2.json" "$TOTAL" || fail "the rerun did not resume: $(cat "$T/r-max2.json") of $TOTAL bytes"
# --- 4: a stream install's fetcher (run) waits as told too, every connection ---
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/s4" -q \
  2>"$T/s4.err" || fail "setup --stream: $(cat "$T/s4.err")"
start_proxy --limit-after 3 --limit-s $LIMIT_S --limit-style retry-after --log "$T/p-run.log"
HF_ENDPOINT="http://127.0.0.1:$PROXY_PORT" DF_FETCH_CONNECTIONS=3 "$BIN" run --model "$T/s4" \
  --prompt-ids $IDS --max-new 10 --json --prefetch off >"$T/o-run.json" 2>"$T/o-run.err" \
  || fail "a stream run through a rate limit: $(cat "$T/o-run.err")"
stop_proxy
[ "$(ids "$T/o-run.json")" = "$REF" ] || fail "stream run: ids differ"
set -- $(window "$T/p-run.log")
[ "$1" -gt 0 ] || fail "run: the proxy limited nothing (test too weak)"
! grep -q " early " "$T/p-run.log" || fail "run: requests arrived inside the window after the fetcher was told: $(grep ' early ' "$T/p-run.log" | head -3)"
python3 -c 'import sys; t0, t1, w = map(float, sys.argv[1:]); sys.exit(0 if t1 >= t0 + w else 1)' \
  "$2" "$3" "$LIMIT_S" || fail "run: a request was served before the window's end"
echo "PASS: setup ratelimit (retry-after, date, ratelimit, 503, none; --max-wait)"

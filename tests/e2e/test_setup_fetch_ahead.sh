#!/bin/sh
# Stream installs: --fetch-ahead (speculative network fetches for the
# predictors, default off) and one fetch per record across processes.
# Against nginx on loopback; what was served is counted from nginx's access
# log (tests/setup/shardmap.py served: each expert record served whole, no
# byte of one served twice), apart from the fetcher's own counters:
#  - default: a cold run fetches ahead nothing (stats and server log agree:
#    the served records are exactly the demanded ones);
#  - --fetch-ahead on: some records arrive ahead, the ids are the original
#    folder's and those of the default run, every record is served once and
#    demand + used-ahead = the default run's demand;
#  - fetch-ahead against an endpoint that is gone never fails a run whose
#    demanded records are local;
#  - two processes started together on one cold install (a throttled link,
#    also both with --stream-verify shard, which claims whole shards,
#    so their fetches overlap): every record served exactly once, both give
#    the original's ids; one of them killed mid-fetch: the other completes,
#    nothing wrong is journalled;
#  - with record sums, every record fetched ahead is checked like a demanded one.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin fetchahead

hub_tiny 9 a1b2c3d4e5f60718293a4b5c6d7e8f9012345678
IDS=5,6,7,8,100,200
IDS2=900,31,77
served() { $MAP served "$T/hub/logs/access.log" "$T/hub/www" "$T/src" "$COMMIT"; }
"$BIN" run --model "$T/orig" --prompt-ids $IDS --max-new 10 --json >"$T/ref.json"
"$BIN" run --model "$T/orig" --prompt-ids $IDS2 --max-new 10 --json >"$T/ref2.json"
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/base" -q \
  2>"$T/base.err" || fail "setup --stream: $(cat "$T/base.err")"
RB=$($MAP record-bytes "$T/src")
fresh() { rm -rf "${T:?}/${1:?}"; cp -r --sparse=always "$T/base" "$T/$1"; }

# --- 1: the default fetches nothing speculatively (the predictors are on: auto, and gate) ---
for pf in auto gate; do
  fresh c1$pf
  : >"$T/hub/logs/access.log"
  "$BIN" run --model "$T/c1$pf" --prompt-ids $IDS --max-new 10 --prefetch $pf --json >"$T/o1$pf.json" \
    2>"$T/o1$pf.err" || fail "cold run (--prefetch $pf): $(cat "$T/o1$pf.err")"
  [ "$(ids "$T/o1$pf.json")" = "$(ids "$T/ref.json")" ] || fail "--prefetch $pf: ids differ from the original"
  [ "$(net "$T/o1$pf.json" fetch_ahead)" = false ] || fail "fetch-ahead is on by default"
  [ "$(net "$T/o1$pf.json" ahead_records_fetched)" = 0 ] && [ "$(net "$T/o1$pf.json" ahead_http_requests)" = 0 ] \
    || fail "--prefetch $pf without --fetch-ahead fetched ahead: $(cat "$T/o1$pf.json")"
  F=$(net "$T/o1$pf.json" records_fetched)
  [ "$F" -gt 0 ] || fail "the cold run fetched nothing"
  [ "$(served)" = "$F $((F * RB))" ] || fail "--prefetch $pf: nginx served $(served) (records bytes), the demand was $F records"
  [ "$($MAP count-present "$T/c1$pf" "$T/src")" = "$F" ] || fail "--prefetch $pf: present records != demanded"
done
F1=$(net "$T/o1auto.json" records_fetched)

# --- 2: --fetch-ahead on: records fetched ahead, same ids, every record served once ---
fresh c2
: >"$T/hub/logs/access.log"
"$BIN" run --model "$T/c2" --prompt-ids $IDS --max-new 10 --fetch-ahead on --json --stats >"$T/o2.json" \
  2>"$T/o2.err" || fail "run --fetch-ahead on: $(cat "$T/o2.err")"
[ "$(ids "$T/o2.json")" = "$(ids "$T/ref.json")" ] || fail "--fetch-ahead on: ids differ from the original"
[ "$(ids "$T/o2.json")" = "$(ids "$T/o1auto.json")" ] || fail "--fetch-ahead on and off give different ids"
F2=$(net "$T/o2.json" records_fetched)
A2=$(net "$T/o2.json" ahead_records_fetched)
U2=$(net "$T/o2.json" ahead_used)
[ "$A2" -gt 0 ] || fail "--fetch-ahead on fetched nothing ahead: $(cat "$T/o2.json")"
[ "$U2" -le "$A2" ] || fail "more records used ahead ($U2) than fetched ahead ($A2)"
[ "$((F2 + U2))" = "$F1" ] || fail "demand $F2 + used-ahead $U2 != the default run's demand $F1"
[ "$(served)" = "$((F2 + A2)) $(((F2 + A2) * RB))" ] || fail "nginx served $(served), fetched $F2 + ahead $A2"
[ "$($MAP count-present "$T/c2" "$T/src")" = "$((F2 + A2))" ] || fail "present records != fetched + fetched ahead"
$MAP verify-present "$T/c2" "$T/src" || fail "a record fetched ahead holds wrong bytes"
grep -q "network fetch-ahead: $A2 experts fetched ahead" "$T/o2.err" || fail "--stats: no fetch-ahead line: $(cat "$T/o2.err")"

# --- 3: fetch-ahead against an endpoint that is gone never fails the run by itself ---
# (a longer run, so that guesses are tried while it decodes)
"$BIN" run --model "$T/orig" --prompt-ids $IDS --max-new 40 --json >"$T/ref40.json"
fresh c3
"$BIN" run --model "$T/c3" --prompt-ids $IDS --max-new 40 --json >/dev/null 2>"$T/o3a.err" \
  || fail "filling c3: $(cat "$T/o3a.err")" # now exactly the demanded records are local
DEAD=$(free_port)
HF_ENDPOINT="http://127.0.0.1:$DEAD" "$BIN" run --model "$T/c3" --prompt-ids $IDS --max-new 40 \
  --fetch-ahead on --json >"$T/o3.json" 2>"$T/o3.err" || fail "a failed fetch-ahead failed the run: $(cat "$T/o3.err")"
[ "$(ids "$T/o3.json")" = "$(ids "$T/ref40.json")" ] || fail "ids differ after failed fetch-aheads"
[ "$(net "$T/o3.json" ahead_failed)" -ge 1 ] || fail "no fetch-ahead was tried against the dead endpoint: $(cat "$T/o3.json")"
[ "$(net "$T/o3.json" records_fetched)" = 0 ] || fail "demand fetched although everything needed was local"
# ... while a demanded record that cannot be fetched still fails, naming it, no token
fresh c3b
rc=0
HF_ENDPOINT="http://127.0.0.1:$DEAD" "$BIN" run --model "$T/c3b" --prompt-ids $IDS --max-new 10 \
  --fetch-ahead on >"$T/o3b" 2>"$T/o3b.err" || rc=$?
[ "$rc" != 0 ] || fail "run succeeded with missing experts and no endpoint"
grep -q "layer [0-9]* expert [0-9]*.*could not be fetched" "$T/o3b.err" || fail "message: $(cat "$T/o3b.err")"
[ -z "$(tr -d ' \n' <"$T/o3b")" ] || fail "tokens printed although experts were missing"

# --- 4: two processes on one cold install: each record served once ---
start_proxy --rate 500000 --latency-ms 2
EPS="http://127.0.0.1:$PROXY_PORT"
pair() { # name opts-a ids-a opts-b ids-b
  fresh "$1"
  : >"$T/hub/logs/access.log"
  # shellcheck disable=SC2086
  HF_ENDPOINT=$EPS "$BIN" run --model "$T/$1" --prompt-ids $3 --max-new 10 $2 --json >"$T/$1.a.json" 2>"$T/$1.a.err" &
  PA=$!
  # shellcheck disable=SC2086
  HF_ENDPOINT=$EPS "$BIN" run --model "$T/$1" --prompt-ids $5 --max-new 10 $4 --json >"$T/$1.b.json" 2>"$T/$1.b.err" &
  PB=$!
  wait "$PA" || fail "$1: first run: $(cat "$T/$1.a.err")"
  wait "$PB" || fail "$1: second run: $(cat "$T/$1.b.err")"
  N=$($MAP count-present "$T/$1" "$T/src")
  [ "$(served)" = "$N $((N * RB))" ] || fail "$1: nginx served $(served) for $N present records (a record fetched twice?)"
  S=0
  for x in a b; do
    S=$((S + $(net "$T/$1.$x.json" records_fetched) + $(net "$T/$1.$x.json" ahead_records_fetched)))
  done
  # --stream-verify shard fetches whole shards in chunks, not records: nginx's count says it all
  case "$2" in *shard*) ;; *) [ "$S" = "$N" ] || fail "$1: the two processes fetched $S records for $N present" ;; esac
  $MAP verify-present "$T/$1" "$T/src" || fail "$1: a present range holds wrong bytes"
}
pair p1 "" $IDS "" $IDS
[ "$(ids "$T/p1.a.json")" = "$(ids "$T/ref.json")" ] && [ "$(ids "$T/p1.b.json")" = "$(ids "$T/ref.json")" ] \
  || fail "two runs on one install: ids differ from the original"
pair p2 "--fetch-ahead on" $IDS "--fetch-ahead on" $IDS2
[ "$(ids "$T/p2.a.json")" = "$(ids "$T/ref.json")" ] && [ "$(ids "$T/p2.b.json")" = "$(ids "$T/ref2.json")" ] \
  || fail "two runs (fetch-ahead on) on one install: ids differ from the original"

# both completing shards before use (--stream-verify shard): the shard is
# claimed whole across processes, so none of its bytes is served twice
pair p3 "--stream-verify shard" $IDS "--stream-verify shard" $IDS2
[ "$(ids "$T/p3.a.json")" = "$(ids "$T/ref.json")" ] && [ "$(ids "$T/p3.b.json")" = "$(ids "$T/ref2.json")" ] \
  || fail "two runs (--stream-verify shard) on one install: ids differ from the original"

# --- 5: one of two processes killed mid-fetch: the other completes ---
fresh k
HF_ENDPOINT=$EPS "$BIN" run --model "$T/k" --prompt-ids $IDS --max-new 10 >/dev/null 2>&1 &
PK=$!
HF_ENDPOINT=$EPS "$BIN" run --model "$T/k" --prompt-ids $IDS --max-new 10 --json >"$T/k.json" 2>"$T/k.err" &
PB=$!
sleep 0.4
kill -9 "$PK" 2>/dev/null || true
wait "$PK" 2>/dev/null || true
wait "$PB" || fail "the survivor of a killed fetcher failed: $(cat "$T/k.err")"
[ "$(ids "$T/k.json")" = "$(ids "$T/ref.json")" ] || fail "ids differ after the other process was killed"
$MAP verify-present "$T/k" "$T/src" || fail "a killed fetch left wrong bytes journalled"
stop_proxy

# --- 6: record sums: records fetched ahead are checked before they are written, as demanded ones ---
"$BIN" record-sums --model "$T/orig" --out "$T/sums.json" -q || fail "record-sums failed"
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/rs" -q \
  --record-sums "$T/sums.json" 2>"$T/rs.err" || fail "setup --stream --record-sums: $(cat "$T/rs.err")"
"$BIN" run --model "$T/rs" --prompt-ids $IDS --max-new 10 --fetch-ahead on --json >"$T/o6.json" \
  2>"$T/o6.err" || fail "run with record sums and --fetch-ahead on: $(cat "$T/o6.err")"
[ "$(ids "$T/o6.json")" = "$(ids "$T/ref.json")" ] || fail "ids with record sums and fetch-ahead differ"
F6=$(net "$T/o6.json" records_fetched)
A6=$(net "$T/o6.json" ahead_records_fetched)
[ "$A6" -gt 0 ] || fail "nothing fetched ahead with record sums"
[ "$(net "$T/o6.json" records_verified)" = "$((F6 + A6))" ] || fail "records checked != fetched + fetched ahead: $(cat "$T/o6.json")"
[ "$(net "$T/o6.json" records_used_unverified)" = 0 ] || fail "records used unverified with record sums"
echo "PASS setup fetch-ahead"

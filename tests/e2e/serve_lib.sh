# Shared helpers of the serve e2e tests (sourced; not a test itself).
# Needs DF_BIN and T (a temp dir) set; defines fail/pass, wait_for, start, req.
PIDS=""
serve_cleanup() {
  # the pids are timeout(1)'s: TERM is passed on to the server, KILL follows 5 s later
  for p in $PIDS; do kill -TERM "$p" 2>/dev/null || true; done
  for p in $PIDS; do wait "$p" 2>/dev/null || true; done
  rm -rf "$T"
}
trap serve_cleanup EXIT
trap 'exit 1' INT TERM
fail() {
  echo "FAIL: $*"
  for f in "$T"/*.log; do
    [ -f "$f" ] || continue
    echo "--- $f"
    tail -n 60 "$f"
  done
  exit 1
}
pass() { echo "ok - $*"; }

# wait_for SECONDS COMMAND...: polls until COMMAND succeeds (a bound, not an assertion on time)
wait_for() {
  n=$(($1 * 10))
  shift
  while [ "$n" -gt 0 ]; do
    if "$@"; then return 0; fi
    sleep 0.1
    n=$((n - 1))
  done
  return 1
}

make_tiny() {
  timeout 120 "$DF_BIN" make-model --preset tiny --seed 1 --out "$T/model" >/dev/null 2>&1 ||
    fail "make-model"
}

# start NAME [serve options...]: starts a server on a free port; sets PORT and SPID
start() {
  name=$1
  shift
  : >"$T/$name.log" # exists before the server opens it: the sed below reads it at once
  timeout -k 5 900 "$DF_BIN" serve --model "$T/model" --port 0 --model-id k3-tiny --threads 1 "$@" \
    2>"$T/$name.log" &
  SPID=$!
  PIDS="$PIDS $SPID"
  PORT=
  i=0
  while [ $i -lt 600 ]; do
    PORT=$(sed -n 's|.*serving .* on http://127\.0\.0\.1:\([0-9][0-9]*\)/v1.*|\1|p' "$T/$name.log")
    [ -n "$PORT" ] && return 0
    kill -0 "$SPID" 2>/dev/null || fail "server $name exited before listening"
    sleep 0.1
    i=$((i + 1))
  done
  fail "server $name did not start"
}

# start_reuse_pair: a server with conversation reuse (port R) and one without (port N)
start_reuse_pair() {
  start R --threads 2
  R=$PORT
  start N --threads 2 --reuse-mb 0
  N=$PORT
}

# req OUT METHOD URL [curl args...]: prints the status; the body goes to OUT, headers to OUT.h
req() {
  out=$1 method=$2 url=$3
  shift 3
  curl -s -m 60 -X "$method" -o "$out" -D "$out.h" -w '%{http_code}' "$@" "$url" || echo "curl-failed"
}
JSON='Content-Type: application/json'

health_field() { # PORT FIELD
  curl -s -m 10 "http://127.0.0.1:$1/health" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)[sys.argv[1]]))' "$2"
}
is_idle() { [ "$(health_field "$1" busy)" = false ] && [ "$(health_field "$1" queue)" = 0 ]; }
log_has() { grep -Eq "$2" "$T/$1.log"; }

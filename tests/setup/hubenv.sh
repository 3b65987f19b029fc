# Sourced by the setup e2e tests: a loopback "hub" (nginx serving a generated
# checkpoint in the hub's URL layout) and the fault-injecting proxy in front.
# Needs: DF_SRC; T (a temp dir: hub_test_begin makes it). Sets HUB_PORT, PROXY_PORT after start_*.
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || {
  echo "FAIL: nginx is not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }
NGINX=$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)
HUB_PIDS=""

fail() { echo "FAIL: $*" >&2; exit 1; }

# The common start of a setup test: BIN, T (a temp dir: removed at exit
# unless KEEP is set, after the hub and the proxy are stopped) and MAP.
hub_test_begin() { # name
  BIN=${DF_BIN:-build/deltafin}
  T=$(mktemp -d "/tmp/df_e2e_$1.XXXXXX")
  trap 'stop_hub; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
  MAP="python3 $DF_SRC/tests/setup/shardmap.py"
}

# The served checkpoint: a tiny generated model (seed $1) in $T/src, a
# pristine copy in $T/orig (runs write a heat file into their folder), and
# the hub serving it as REPO at commit $2 on EP.
hub_tiny() { # seed commit
  REPO=test-org/K3-tiny
  COMMIT=$2
  "$BIN" make-model --preset tiny --seed "$1" --out "$T/src" -q >/dev/null 2>&1
  cp -r "$T/src" "$T/orig"
  start_hub "$T/src" "$REPO" "$COMMIT"
  EP="http://127.0.0.1:$HUB_PORT"
}

# A run's --json output: its ids, and one field of its network stats
# (booleans as true/false).
ids() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["output_ids"])' "$1"; }
net() { python3 -c 'import json,sys; n=json.load(open(sys.argv[1]))["stats"]["store"]["network"]; print(str(n[sys.argv[2]]).lower())' "$1" "$2"; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() { # port
  for _ in $(seq 1 100); do
    python3 -c 'import socket,sys; s=socket.create_connection(("127.0.0.1",int(sys.argv[1])),0.2)' "$1" \
      2>/dev/null && return 0
    sleep 0.05
  done
  echo "FAIL: nothing listens on 127.0.0.1:$1" >&2; return 1
}

start_hub() { # model-dir repo commit [out, default $T/hub: a second hub needs its own] [hubgen options]
  HUB_PORT=$(free_port)
  _out=${4:-$T/hub}
  _m=$1 _r=$2 _c=$3
  shift 3
  [ $# -gt 0 ] && shift
  python3 "$DF_SRC/tests/setup/hubgen.py" --model "$_m" --repo "$_r" --commit "$_c" --out "$_out" \
    --port "$HUB_PORT" "$@"
  "$NGINX" -c "$_out/nginx.conf" -p "$_out" -e "$_out/logs/error.log" &
  HUB_PIDS="$HUB_PIDS $!"
  wait_port "$HUB_PORT"
}

start_proxy() { # faultproxy options...
  PROXY_PORT=$(free_port)
  python3 "$DF_SRC/tests/setup/faultproxy.py" --listen "$PROXY_PORT" --upstream "$HUB_PORT" "$@" \
    2>>"$T/proxy.err" &
  PROXY_PID=$!
  HUB_PIDS="$HUB_PIDS $PROXY_PID"
  wait_port "$PROXY_PORT"
}

stop_proxy() {
  kill "$PROXY_PID" 2>/dev/null || true
  wait "$PROXY_PID" 2>/dev/null || true
}

stop_hub() {
  for p in $HUB_PIDS; do kill "$p" 2>/dev/null || true; done
  for p in $HUB_PIDS; do wait "$p" 2>/dev/null || true; done
  HUB_PIDS=""
}

# nginx writes a request's log line after it sent the response, so a client
# can exit before its last request is logged: wait until the log has not
# grown for 0.3 s (at most 5 s) before reading it.
hub_settle() { # [hub dir]
  python3 - "${1:-$T/hub}/logs/access.log" <<'PYEOF'
import os, sys, time
p, last, since, t0 = sys.argv[1], -1, time.monotonic(), time.monotonic()
while time.monotonic() - t0 < 5:
    n = os.path.getsize(p) if os.path.exists(p) else 0
    if n != last:
        last, since = n, time.monotonic()
    elif time.monotonic() - since >= 0.3:
        break
    time.sleep(0.05)
PYEOF
}

# Sum of body bytes nginx sent for paths matching a regex (its access log).
hub_bytes() { # regex [hub dir]
  hub_settle "${2:-}"
  awk -v rx="$1" '$2 ~ rx { s += $4 } END { print s + 0 }' "${2:-$T/hub}/logs/access.log"
}

# Requests nginx answered (all paths) so far.
hub_requests() { # [hub dir]
  hub_settle "${1:-}"
  wc -l <"${1:-$T/hub}/logs/access.log" | tr -d ' '
}

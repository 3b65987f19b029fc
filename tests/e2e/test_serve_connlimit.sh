#!/bin/sh
# Connection caps that answer instead of dropping: over --max-client-connections
# a client address's oldest idle connection is closed so the new one is served,
# or (nothing idle) the new one gets 429; over --max-connections the same with
# 503; behind a --trusted-proxy the cap counts each X-Forwarded-For client's
# requests in progress, not the proxy's connections. Raw sockets from several
# loopback addresses (127.0.0.x).
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d /tmp/df-e2e-serve-connlimit.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny
cat >"$T/lib.py" <<'PY'
import socket, time
def conn(port, src="127.0.0.1"):
    s = socket.create_connection(("127.0.0.1", port), source_address=(src, 0))
    s.settimeout(120)  # a bound for a loaded machine, not a measured time
    return s
def status(s):
    """the status of the next reply on s (None: closed first)"""
    d = b""
    try:
        while b"\r\n\r\n" not in d:
            x = s.recv(65536)
            if not x:
                return None
            d += x
    except (ConnectionResetError, socket.timeout):
        return None
    head, rest = d.split(b"\r\n\r\n", 1)
    n = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
    while n and len(rest) < n[0]:
        rest += s.recv(65536)
    return int(head.split(b" ")[1])
def get(s, path="/health", extra=b""):
    s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + b"\r\n")
    return status(s)
def closed(s):
    s.settimeout(5)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
PY

# ---- per address
start A --max-client-connections 3 --request-timeout 20
python3 - "$PORT" "$T" <<'PY' || fail "per-address cap"
import sys, time
sys.path.insert(0, sys.argv[2])
from lib import *
port = int(sys.argv[1])
busy = [conn(port) for _ in range(3)]
for s in busy:  # a request begun and not finished: not idle
    s.sendall(b"GET /health HTTP/1.1\r\n")
time.sleep(0.3)
extra = conn(port)
assert get(extra) == 429, "a fourth connection from the address was not answered 429"
assert get(conn(port, "127.0.0.2")) == 200, "another address was refused"
for s in busy:
    s.close()
time.sleep(0.3)
idle = [conn(port) for _ in range(3)]
for s in idle:
    assert get(s) == 200
    time.sleep(0.05)
new = conn(port)
assert get(new) == 200, "over the cap with idle connections, the new one was not served"
assert closed(idle[0]), "the oldest idle connection was not closed"
assert not closed(idle[2]) and get(idle[2]) == 200, "a newer idle connection was closed"
print("ok - per address: 429 when nothing is idle, else the oldest idle connection makes room")
PY

# ---- in all
start B --max-connections 4 --max-client-connections 0 --request-timeout 20
python3 - "$PORT" "$T" <<'PY' || fail "total cap"
import sys, time
sys.path.insert(0, sys.argv[2])
from lib import *
port = int(sys.argv[1])
busy = [conn(port, f"127.0.0.{i + 1}") for i in range(4)]
for s in busy:
    s.sendall(b"GET /health HTTP/1.1\r\n")
time.sleep(0.3)
assert get(conn(port, "127.0.0.9")) == 503, "over --max-connections the new connection was not answered 503"
busy[0].sendall(b"Host: 127.0.0.1\r\n\r\n")
assert status(busy[0]) == 200
time.sleep(0.3)
assert get(conn(port, "127.0.0.9")) == 200, "with an idle connection to close, the new one was not served"
assert closed(busy[0]), "the idle connection was not closed"
print("ok - in all: 503 when nothing is idle, else the oldest idle connection makes room")
PY

# ---- behind a trusted proxy (127.0.0.1): counted per forwarded client
start P --trusted-proxy 127.0.0.1 --max-client-connections 2 --queue 8 --debug-token-delay-ms 100
python3 - "$PORT" "$T" <<'PY' || fail "trusted proxy"
import json, sys, time
sys.path.insert(0, sys.argv[2])
from lib import *
port = int(sys.argv[1])
def post(s, xff, body):
    b = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"X-Forwarded-For: " + xff + b"\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
many = [conn(port) for _ in range(5)]  # the proxy's own connections are not capped
# each for its own forwarded client: a request is in progress until the
# server has seen its reply out, which may come after the client has read
# it, so back-to-back requests of one client can overlap by a moment
sts = [get(s, extra=b"X-Forwarded-For: 10.9.0.%d\r\n" % i) for i, s in enumerate(many)]
assert sts == [200] * 5, f"the proxy's connections were capped: {sts}"
long = {"model": "k3-tiny", "prompt": "Once", "max_tokens": 10, "stream": True}
streams = [conn(port), conn(port)]
for s in streams:
    post(s, b"10.0.0.7", long)
time.sleep(0.5)
third = conn(port)
post(third, b"203.0.113.5, 10.0.0.7", {"model": "k3-tiny", "prompt": "x", "max_tokens": 1})
st = status(third)
assert st == 429, f"a third request of the forwarded client got {st}, not 429"
other = conn(port)
post(other, b"10.0.0.8", {"model": "k3-tiny", "prompt": "x", "max_tokens": 1})
st = status(other)
assert st == 200, f"another forwarded client got {st}"
direct = conn(port, "127.0.0.2")  # not a trusted proxy: its X-Forwarded-For is not believed
post(direct, b"10.0.0.7", {"model": "k3-tiny", "prompt": "x", "max_tokens": 1})
st = status(direct)
assert st == 200, f"an untrusted peer's request got {st}: its X-Forwarded-For was believed?"
print("ok - behind a trusted proxy the cap counts each forwarded client's requests")
PY
log_has P '^deltafin: 10\.0\.0\.7 POST /v1/completions 429 ' ||
  fail "the access log does not name the forwarded client"
log_has P '^deltafin: 127\.0\.0\.2 POST /v1/completions 200 ' || fail "the untrusted peer is not logged by its address"
pass "connection caps answer 429/503 or make room by closing idle connections; trusted proxies"
echo "PASS: deltafin serve connection limits"

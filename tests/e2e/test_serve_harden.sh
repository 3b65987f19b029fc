#!/bin/sh
# `deltafin serve` against hostile or odd clients (issue 14's hardening):
# a request deadline for slow clients, a per-client connection cap with
# /health answerable during a flood, Host checked against DNS rebinding,
# JSON-only POSTs, CORS only for --cors origins, odd framing refused, and
# the server's memory staying flat through all of it (RSS from /proc, with a
# generous bound). Nothing asserts a duration.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d /tmp/df-e2e-serve-harden.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny

rss_kb() { # the server's resident set (the child of timeout(1))
  pid=$(ps -o pid= --ppid "$1" | tr -d ' ' | head -n 1)
  sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status"
}

# A sanitizer build keeps freed memory in quarantine (256 MB by default), so
# its RSS grows with what the server frees, not with what it holds: the
# quarantine is kept small for the memory check below (leaks are
# LeakSanitizer's, at exit).
if grep -aq AddressSanitizer "$DF_BIN" 2>/dev/null; then
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4:thread_local_quarantine_size_kb=64"
  export ASAN_OPTIONS
fi
start H --queue 1 --request-timeout 2 --idle-timeout 60 --max-client-connections 16 --debug-token-delay-ms 5
H=$PORT
HPID=$SPID
U="http://127.0.0.1:$H"
CHAT='{"model":"k3-tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":3}'
s=$(req "$T/b" POST "$U/v1/chat/completions" -H "$JSON" -d "$CHAT")
[ "$s" = 200 ] || fail "warm-up request: $s"
rss0=$(rss_kb "$HPID")

# ---- slow clients: a trickled body and trickled headers are cut at the request deadline
python3 - "$H" <<'PY' || fail "a slow client was not cut off"
import socket, sys, time
port = int(sys.argv[1])
def trickle(head, rest):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(head)
    sent = 0
    try:
        for b in rest:  # a byte every 0.25 s: never idle, never complete
            time.sleep(0.25)
            s.sendall(bytes([b]))
            sent += 1
            s.setblocking(False)
            try:
                if s.recv(4096) == b"":
                    break
            except BlockingIOError:
                pass
            s.setblocking(True)
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert sent < len(rest), f"the server took all {sent} trickled bytes"
    return sent
body = b'{"model":"k3-tiny","prompt":"' + b"x" * 300 + b'"}'
n1 = trickle(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             b"Content-Length: %d\r\n\r\n" % len(body), body)
n2 = trickle(b"GET /health HTTP/1.1\r\n", b"Host: 127.0.0.1\r\nX-Padding: " + b"y" * 200 + b"\r\n\r\n")
print(f"cut after {n1} body bytes and {n2} header bytes")
PY
wait_for 10 is_idle "$H" || fail "not idle after the slow clients"
pass "slow clients are cut off at --request-timeout (body and headers)"

# ---- a connection flood from one address: capped; /health answers from another address
python3 - "$H" <<'PY' >"$T/flood.out" 2>&1 &
import socket, sys, time
port = int(sys.argv[1])
socks = []
for i in range(60):
    s = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.1", 0))
    socks.append(s)
time.sleep(1.0)
closed = 0
for s in socks:
    s.setblocking(False)
    try:
        if s.recv(1) == b"":
            closed += 1
    except BlockingIOError:
        pass
    except ConnectionResetError:
        closed += 1
print("refused", closed)
time.sleep(4)
PY
FL=$!
sleep 0.5
s=$(curl -s -m 10 --interface 127.0.0.2 -o "$T/h" -w '%{http_code}' "$U/health") || true
[ "$s" = 200 ] || fail "/health from another address during the flood: $s"
wait "$FL" || fail "flood client: $(cat "$T/flood.out")"
refused=$(sed -n 's/^refused \([0-9]*\)/\1/p' "$T/flood.out")
[ "$refused" -ge 44 ] || fail "the per-client cap of 16 let $((60 - refused)) of 60 connections stay"
wait_for 20 is_idle "$H" || fail "/health from the flooding address after the flood"
pass "a flood of 60 connections: $refused refused over the cap of 16; /health answered meanwhile"

# ---- Host: DNS rebinding (a foreign name) is refused; --allow-host accepts a name
s=$(req "$T/b" POST "$U/v1/chat/completions" -H "$JSON" -H 'Host: evil.example' -d "$CHAT")
[ "$s" = 403 ] && grep -q host_not_allowed "$T/b" || fail "a foreign Host: $s $(cat "$T/b")"
s=$(req "$T/b" GET "$U/v1/models" -H "Host: localhost:$H")
[ "$s" = 200 ] || fail "Host localhost: $s"
pass "a foreign Host gets 403; localhost and IP literals pass"

# ---- POSTs must be JSON: a text/plain or form POST (what a foreign page can send
# without a preflight) is refused before anything runs
s=$(req "$T/b" POST "$U/v1/chat/completions" -H 'Content-Type: text/plain' -d "$CHAT")
[ "$s" = 415 ] || fail "text/plain POST: $s"
s=$(curl -s -m 10 -o "$T/b" -w '%{http_code}' "$U/v1/completions" -d '{"model":"k3-tiny","prompt":"x"}')
[ "$s" = 415 ] || fail "form-encoded POST: $s"
pass "text/plain and form POSTs get 415"

# ---- CORS: no headers unless --cors names the origin
s=$(req "$T/b" GET "$U/v1/models" -H 'Origin: http://evil.example')
grep -qi '^Access-Control-Allow-Origin' "$T/b.h" && fail "CORS headers without --cors"
s=$(req "$T/b" OPTIONS "$U/v1/chat/completions" -H 'Origin: http://evil.example' -H 'Access-Control-Request-Method: POST')
grep -qi '^Access-Control-Allow-Origin' "$T/b.h" && fail "a preflight was allowed without --cors"

# ---- odd framing: conflicting lengths, length + chunked, unknown codings
raw() { # BYTES (printf format): prints the status line's code
  python3 - "$H" "$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode("latin1"))
s.settimeout(20)
d = b""
while not d.endswith(b"}") and b"\r\n\r\n" not in d:
    x = s.recv(4096)
    if not x:
        break
    d += x
print(d.split(b" ")[1].decode() if d.startswith(b"HTTP/1.1 ") else "none")
PY
}
B='{"model":"k3-tiny","prompt":"hi","max_tokens":2}'
H1='POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
[ "$(raw "${H1}Content-Length: 48\r\nContent-Length: 49\r\n\r\n$B")" = 400 ] || fail "two Content-Lengths"
[ "$(raw "${H1}Content-Length: 48\r\nTransfer-Encoding: chunked\r\n\r\n30\r\n$B\r\n0\r\n\r\n")" = 400 ] || fail "Content-Length + chunked"
[ "$(raw "${H1}Transfer-Encoding: gzip\r\n\r\n$B")" = 501 ] || fail "Transfer-Encoding gzip"
[ "$(raw "${H1}Transfer-Encoding: gzip, chunked\r\n\r\n30\r\n$B\r\n0\r\n\r\n")" = 501 ] || fail "gzip, chunked"
[ "$(raw "${H1}Content-Length: 48\r\n\r\n$B")" = 200 ] || fail "a plain request after the odd ones"
pass "odd framing: 400 for conflicting lengths or length + coding, 501 for unknown codings"

# ---- memory stays flat: refused big bodies, many requests and connections
python3 -c 'print("{\"model\":\"k3-tiny\",\"prompt\":\"" + "x"*870000 + "\"}")' >"$T/big.json"
curl -sN -m 120 -H "$JSON" "$U/v1/chat/completions" \
  -d '{"model":"k3-tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":600,"stream":true}' >/dev/null 2>&1 &
C=$!
sleep 0.3
: >"$T/par.cfg"
i=0
while [ $i -lt 100 ]; do
  [ $i = 0 ] || echo next >>"$T/par.cfg"
  printf 'url = "%s"\nheader = "Content-Type: application/json"\ndata-binary = "@%s"\noutput = "/dev/null"\nsilent\nwrite-out = "%%{http_code}\\n"\n' \
    "$U/v1/completions" "$T/big.json" >>"$T/par.cfg"
  i=$((i + 1))
done
for round in 1 2 3; do
  curl -s -m 120 --parallel --parallel-max 14 -K "$T/par.cfg" >>"$T/par.codes" 2>/dev/null || true
done
wait "$C" 2>/dev/null || true
i=0
while [ $i -lt 30 ]; do
  s=$(req "$T/b" POST "$U/v1/chat/completions" -H "$JSON" -d "$CHAT")
  [ "$s" = 200 ] || fail "request $i after the pressure: $s"
  i=$((i + 1))
done
rss1=$(rss_kb "$HPID")
echo "server RSS: ${rss0} kB before, ${rss1} kB after (codes: $(sort "$T/par.codes" | uniq -c | tr '\n' ' '))"
[ "$rss1" -lt $((rss0 + 65536)) ] || fail "memory grew from $rss0 kB to $rss1 kB"
kill -0 "$HPID" || fail "the server died"
pass "memory flat: ${rss0} kB -> ${rss1} kB after 300 refused 870 KB bodies, 60 flood connections, 30 requests"

kill -TERM "$HPID"
wait "$HPID" || fail "server H did not exit 0"

# ---- --cors and --allow-host
start C --cors http://app.example:3000 --allow-host gpu.example
U="http://127.0.0.1:$PORT"
s=$(req "$T/b" GET "$U/v1/models" -H 'Origin: http://app.example:3000')
grep -qi '^Access-Control-Allow-Origin: http://app.example:3000' "$T/b.h" || fail "no CORS header for a --cors origin"
s=$(req "$T/b" GET "$U/v1/models" -H 'Origin: http://evil.example')
grep -qi '^Access-Control-Allow-Origin' "$T/b.h" && fail "CORS header for an origin not given"
s=$(req "$T/b" OPTIONS "$U/v1/chat/completions" -H 'Origin: http://app.example:3000' -H 'Access-Control-Request-Method: POST')
[ "$s" = 204 ] && grep -qi '^Access-Control-Allow-Headers: .*Content-Type' "$T/b.h" || fail "preflight: $s $(cat "$T/b.h")"
s=$(req "$T/b" GET "$U/v1/models" -H "Host: gpu.example:$PORT")
[ "$s" = 200 ] || fail "--allow-host name refused: $s"
s=$(req "$T/b" GET "$U/v1/models" -H "Host: cpu.example:$PORT")
[ "$s" = 403 ] || fail "a name not allowed: $s"
pass "--cors: headers and preflight for the given origin only; --allow-host"
echo "PASS: deltafin serve hardening"

#!/bin/sh
# Connection handling over raw sockets: GET replies keep the connection
# alive (a request pipelined after one is answered), RFC 9112's Host rules
# (HTTP/1.1 without Host or any request with two: 400), and --idle-timeout
# above --request-timeout is honoured for a kept-alive connection while a
# client trickling its headers is still cut off by --request-timeout.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d /tmp/df-e2e-serve-conn.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny
start C --idle-timeout 60 --request-timeout 2

python3 - "$PORT" <<'PY' || fail "connection checks"
import socket, sys, time
port = int(sys.argv[1])

def conn():
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(30)
    return s

def read_replies(s, n):
    """n whole replies (Content-Length framed) from s; [] entries are missing ones"""
    buf, out = b"", []
    while len(out) < n:
        while b"\r\n\r\n" not in buf:
            x = s.recv(65536)
            if not x:
                return out
            buf += x
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin1").split("\r\n")
        h = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        length = int(h.get("content-length", "0"))
        while len(rest) < length:
            x = s.recv(65536)
            if not x:
                return out
            rest += x
        out.append((int(lines[0].split(" ")[1]), h, rest[:length]))
        buf = rest[length:]
    return out

# ---- pipelined GETs on one connection: both answered, neither closes it
s = conn()
s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
          b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
          b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
r = read_replies(s, 3)
assert [x[0] for x in r] == [200, 200, 200], r
assert all(x[1].get("connection", "").lower() != "close" for x in r), [x[1] for x in r]
assert b'"k3-tiny"' in r[1][2], r[1][2]
# and a POST after them on the same connection
body = b'{"content":"hello"}'
s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
r = read_replies(s, 1)
assert r and r[0][0] == 200 and b'"tokens"' in r[0][2], r
print("ok - pipelined GETs and a POST after them on one kept-alive connection")

# ---- Host (RFC 9112 3.2)
def status(raw):
    s = conn()
    s.sendall(raw)
    r = read_replies(s, 1)
    s.close()
    return r[0][0] if r else None
assert status(b"GET /health HTTP/1.1\r\n\r\n") == 400
assert status(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 127.0.0.1\r\n\r\n") == 400
assert status(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n") == 400
assert status(b"GET /health HTTP/1.0\r\n\r\n") == 200  # HTTP/1.0 has no Host requirement
assert status(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") == 200
print("ok - HTTP/1.1 without Host and two Hosts get 400; HTTP/1.0 without Host is served")

# ---- idle keep-alive connection outlives --request-timeout 2 (idle timeout is 60)
s = conn()
s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
assert read_replies(s, 1)[0][0] == 200
time.sleep(5)  # idle: longer than the request timeout, far shorter than the idle timeout
s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
r = read_replies(s, 1)
assert r and r[0][0] == 200, "the idle connection was closed before --idle-timeout"
print("ok - a kept-alive connection idle past --request-timeout is still open")

# ---- a request whose headers trickle in is still cut off by --request-timeout
s = conn()
s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
closed = False
for i in range(60):  # up to 30 s of trickling, one header byte every 0.5 s
    try:
        s.sendall(b"X")
        s.settimeout(0.5)
        x = s.recv(4096)
        if not x:
            closed = True
            break
    except socket.timeout:
        continue
    except OSError:
        closed = True
        break
assert closed, "a trickling request was not cut off"
print("ok - trickled headers are still cut off by --request-timeout")
PY
pass "keep-alive, Host validation, idle and request timeouts"
echo "PASS: deltafin serve connections"

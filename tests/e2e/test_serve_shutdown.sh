#!/bin/sh
# SIGTERM while requests are in flight: every request admitted before the
# signal gets a complete HTTP reply (its result or a 503 in OpenAI's error
# shape) before the process exits 0 - a whole-reply request in a long
# prefill and one waiting in the queue behind it (streams: test_serve_http). Repeated over
# several runs: the reply racing the daemon's stop is what this catches.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d /tmp/df-e2e-serve-shutdown.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny
python3 -c 'import json; print(json.dumps({"model":"k3-tiny","prompt":[100+i%500 for i in range(12000)],"max_tokens":5}))' >"$T/long.json"
is_busy() { [ "$(health_field "$1" busy)" = true ]; }
queued() { [ "$(health_field "$1" queue)" = "$2" ]; }

# reply FILE: "STATUS complete" when FILE holds one whole HTTP response (its
# body as long as its Content-Length says, and JSON), else what is wrong
reply() {
  python3 - "$1" <<'PY'
import json, sys
d = open(sys.argv[1], "rb").read()
if b"\r\n\r\n" not in d:
    print("no-reply", len(d)); sys.exit()
head, body = d.split(b"\r\n\r\n", 1)
status = head.split(b" ")[1].decode()
h = {l.split(b":", 1)[0].strip().lower(): l.split(b":", 1)[1].strip() for l in head.split(b"\r\n")[1:]}
if b"content-length" in h:
    if len(body) != int(h[b"content-length"]):
        print(status, "cut", len(body), int(h[b"content-length"])); sys.exit()
    j = json.loads(body)
    if status == "503":
        assert j["error"]["code"] == "shutting_down", j
elif not body.endswith(b"data: [DONE]\n\n") and not body.endswith(b"0\r\n\r\n"):
    print(status, "stream-cut"); sys.exit()
print(status, "complete")
PY
}
# raw PORT FILE OUT: sends FILE as a POST to /v1/completions, the whole response to OUT
raw() {
  python3 - "$1" "$2" "$3" <<'PY' &
import socket, sys
b = open(sys.argv[2], "rb").read()
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
s.settimeout(120)
out = b""
try:
    while True:
        x = s.recv(65536)
        if not x:
            break
        out += x
except OSError:
    pass
open(sys.argv[3], "wb").write(out)
PY
}
printf '%s' '{"model":"k3-tiny","prompt":"Once","max_tokens":3}' >"$T/short.json"

run=1
while [ $run -le 6 ]; do
  start "R$run" --queue 2
  raw "$PORT" "$T/long.json" "$T/a$run"
  A=$!
  wait_for 60 is_busy "$PORT" || fail "run $run: the long prefill did not start"
  raw "$PORT" "$T/short.json" "$T/b$run"
  B=$!
  wait_for 60 queued "$PORT" 1 || fail "run $run: the second request was not queued"
  kill -TERM "$SPID"
  rc=0
  wait "$SPID" || rc=$?
  [ "$rc" = 0 ] || fail "run $run: exit status $rc"
  wait "$A" "$B" 2>/dev/null || true
  ra=$(reply "$T/a$run") rb=$(reply "$T/b$run")
  [ "$ra" = "503 complete" ] || fail "run $run: the request in its prefill got: $ra"
  [ "$rb" = "503 complete" ] || fail "run $run: the queued request got: $rb"
  run=$((run + 1))
done
pass "SIGTERM during a long prefill: the running and the queued request get a whole 503 (6 runs)"

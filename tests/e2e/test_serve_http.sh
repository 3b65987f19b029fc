#!/bin/sh
# Raw HTTP (curl) against `deltafin serve` on loopback with a tiny generated
# model: every error status in OpenAI's shape (400 with param, 401, 404, 405,
# 413, 429 while another request streams), the FIFO queue, client disconnects
# mid-stream and while queued, 200 concurrent bad requests during a
# generation, and a clean exit on SIGTERM mid-stream. --debug-token-delay-ms
# slows generation down so that "while a generation runs" holds; nothing here
# asserts a duration.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
T=$(mktemp -d /tmp/df-e2e-serve-http.XXXXXX)
: "${DF_SRC:?DF_SRC must name the source root}"
. "$DF_SRC/tests/e2e/serve_lib.sh" # cleanup, fail/pass, wait_for, start
make_tiny
MAXPOS=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c.get("text_config",c)["max_position_embeddings"])' "$T/model/config.json")

# req OUT METHOD URL [curl args...]: prints the status; the body goes to OUT, headers to OUT.h
req() {
  out=$1 method=$2 url=$3
  shift 3
  # POST bodies must be JSON (a cross-origin form or text/plain POST is refused with 415)
  curl -s -m 60 -X "$method" -H 'Content-Type: application/json' -o "$out" -D "$out.h" -w '%{http_code}' "$@" "$url" || echo "curl-failed"
}

# check_error FILE STATUS-GOT STATUS-WANT PARAM|null [CODE]: OpenAI's error shape
check_error() {
  [ "$2" = "$3" ] || fail "status $2, want $3: $(cat "$1")"
  python3 - "$1" "$4" "${5:-}" <<'PY' || fail "error body $(cat "$1")"
import json, sys
d = json.load(open(sys.argv[1]))
assert list(d) == ["error"], d
e = d["error"]
assert sorted(e) == ["code", "message", "param", "type"], e
assert isinstance(e["message"], str) and e["message"], e
assert isinstance(e["type"], str) and e["type"], e
want = None if sys.argv[2] == "null" else sys.argv[2]
assert e["param"] == want, (e["param"], want)
if sys.argv[3]:
    assert e["code"] == sys.argv[3], (e["code"], sys.argv[3])
PY
}

health_field() { # PORT FIELD
  curl -s -m 10 "http://127.0.0.1:$1/health" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)[sys.argv[1]]))' "$2"
}
is_busy() { [ "$(health_field "$1" busy)" = true ]; }
is_idle() { [ "$(health_field "$1" busy)" = false ] && [ "$(health_field "$1" queue)" = 0 ]; }
queue_is() { [ "$(health_field "$1" queue)" = "$2" ]; }
has_frames() { [ -f "$1" ] && [ "$(grep -c '^data: {' "$1")" -ge "$2" ]; }
log_has() { grep -Eq "$2" "$T/$1.log"; }

# a long streamed generation in the background: stream NAME PORT MAX_TOKENS [curl args]
stream() {
  name=$1 port=$2 n=$3
  shift 3
  curl -sN -m 120 -H 'Content-Type: application/json' "http://127.0.0.1:$port/v1/chat/completions" "$@" \
    -d "{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a long story\"}],\"max_tokens\":$n,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" \
    >"$T/$name.sse" 2>/dev/null &
  CPID=$!
}

CHAT='"messages":[{"role":"user","content":"hi"}]'

# ============================================================ server A
# no queue: 429 while busy; small request limit for 413
start A --queue 0 --max-request-bytes 400000 --debug-token-delay-ms 40
A=$PORT
APID=$SPID
U="http://127.0.0.1:$A"

# ---- a second server cannot take a busy port
rc=0
timeout 60 "$DF_BIN" serve --model "$T/model" --port "$A" 2>"$T/dup.out" || rc=$?
[ "$rc" = 1 ] && grep -q 'cannot listen' "$T/dup.out" || fail "second server on a busy port: status $rc, $(cat "$T/dup.out")"
pass "a busy port is an error (exit 1)"

# ---- 400: each refusal names its field
bad() { # PATH BODY PARAM [CODE]
  s=$(req "$T/b" POST "$U$1" -H 'Content-Type: application/json' --data-binary "$2")
  check_error "$T/b" "$s" 400 "$3" "${4:-}"
}
bad /v1/chat/completions '{"model":"k3-tiny",' null
bad /v1/chat/completions '[]' null
bad /v1/chat/completions '' null
bad /v1/chat/completions "{\"model\":\"k3-tiny\",$CHAT,\"frobnicate\":1}" frobnicate
bad /v1/chat/completions "{\"model\":\"k3-tiny\",$CHAT,\"n\":17}" n
bad /v1/chat/completions "{\"model\":\"k3-tiny\",$CHAT,\"logprobs\":\"yes\"}" logprobs
bad /v1/chat/completions "{\"model\":\"k3-tiny\",$CHAT,\"tools\":[{\"type\":\"function\",\"function\":{\"description\":\"no name\"}}]}" 'tools[0]'
bad /v1/chat/completions "{\"model\":\"k3-tiny\",$CHAT,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}" tool_choice.function.name
bad /v1/chat/completions "{\"model\":\"k3-tiny\",$CHAT,\"max_tokens\":\"5\"}" max_tokens
bad /v1/chat/completions "{\"model\":\"k3-tiny\",$CHAT,\"temperature\":3}" temperature
bad /v1/chat/completions "{\"model\":\"k3-tiny\",$CHAT,\"reasoning_effort\":\"extreme\"}" reasoning_effort
bad /v1/chat/completions "{\"model\":\"k3-tiny\",$CHAT,\"stop\":[\"\"]}" stop
# an unknown model is 404, as OpenAI answers
s=$(req "$T/b" POST "$U/v1/chat/completions" -d "{\"model\":\"gpt-4o\",$CHAT}")
check_error "$T/b" "$s" 404 model model_not_found
bad /v1/chat/completions '{"model":"k3-tiny"}' messages
bad /v1/chat/completions '{"model":"k3-tiny","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]}' 'messages[0].content[0].type'
bad /v1/chat/completions '{"model":"k3-tiny","messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}}]}]}' 'messages[1].content[0].type'
bad /v1/chat/completions '{"model":"k3-tiny","messages":[{"role":"robot","content":"a"}]}' 'messages[0].role'
bad /chat/completions "{\"model\":\"k3-tiny\",$CHAT,\"max_tokens\":$MAXPOS}" max_tokens context_length_exceeded
grep -q "$MAXPOS" "$T/b" || fail "the context error does not name the limit: $(cat "$T/b")"
bad /v1/completions '{"model":"k3-tiny","prompt":["a","b"]}' prompt
bad /completions '{"model":"k3-tiny","prompt":"a","echo":true}' echo
bad /v1/completions "{\"model\":\"k3-tiny\",\"prompt\":\"a\",\"max_tokens\":$((MAXPOS + 1))}" max_tokens context_length_exceeded
# invalid UTF-8 in the body
printf '{"model":"k3-tiny","prompt":"caf\351"}' >"$T/latin1.json"
s=$(req "$T/b" POST "$U/v1/completions" --data-binary @"$T/latin1.json")
check_error "$T/b" "$s" 400 null
grep -q 'UTF-8' "$T/b" || fail "the UTF-8 error does not say so: $(cat "$T/b")"
# prompts beyond the context limit, as text and as ids
python3 -c 'import sys; n=int(sys.argv[1]); print("{\"model\":\"k3-tiny\",\"prompt\":[" + ",".join(["5"]*(n+1)) + "]}")' "$MAXPOS" >"$T/ids.json"
s=$(req "$T/b" POST "$U/v1/completions" --data-binary @"$T/ids.json")
check_error "$T/b" "$s" 400 prompt context_length_exceeded
grep -q "$MAXPOS" "$T/b" || fail "the context error does not name the limit"
python3 -c 'import sys; n=int(sys.argv[1]); print("{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"" + "x "*(n+10) + "\"}]}")' "$MAXPOS" >"$T/long.json"
s=$(req "$T/b" POST "$U/v1/chat/completions" --data-binary @"$T/long.json")
check_error "$T/b" "$s" 400 messages context_length_exceeded
grep -q "$MAXPOS" "$T/b" || fail "the context error does not name the limit"
pass "400 with param for invalid JSON/UTF-8, unknown fields, types, ranges, n, logprobs, tools, images, audio, context; 404 for an unknown model"

# ---- 404 / 405
s=$(req "$T/b" GET "$U/v1/nothing-here")
check_error "$T/b" "$s" 404 null unknown_url
s=$(req "$T/b" POST "$U/v1/embeddings" -d '{}')
check_error "$T/b" "$s" 404 null
s=$(req "$T/b" GET "$U/v1/models/gpt-4o")
check_error "$T/b" "$s" 404 model model_not_found
s=$(req "$T/b" GET "$U/v1/chat/completions")
check_error "$T/b" "$s" 405 null method_not_allowed
grep -qi '^Allow: POST' "$T/b.h" || fail "405 without Allow: POST"
s=$(req "$T/b" DELETE "$U/v1/models")
check_error "$T/b" "$s" 405 null
grep -qi '^Allow: GET, HEAD' "$T/b.h" || fail "405 without Allow: GET, HEAD"
s=$(req "$T/b" POST "$U/health" -d '{}')
check_error "$T/b" "$s" 405 null
pass "404 for unknown paths and models, 405 with Allow"

# ---- 413: refused from Content-Length before the body is sent when the client
# waits for 100 Continue; read to its end (and the connection kept) when the
# client is already sending, since closing on unread bytes resets the
# connection and can lose the 413; counted when chunked
python3 -c 'print("{\"model\":\"k3-tiny\",\"prompt\":\"" + "x"*500000 + "\"}")' >"$T/big.json"
out=$(curl -s -m 60 -H 'Expect:' -H 'Content-Type: application/json' -o "$T/b" -D "$T/b.h" \
  -w '%{http_code} %{num_connects}\n' --data-binary @"$T/big.json" "$U/v1/completions" \
  --next -o "$T/b2" -w '%{http_code} %{num_connects}\n' "$U/health" | tr '\n' ' ') || out="curl-failed"
check_error "$T/b" "${out%% *}" 413 null request_too_large
! grep -qi '^Connection: close' "$T/b.h" || fail "413 to a client already sending closed the connection: $(cat "$T/b.h")"
[ "$out" = "413 1 200 0 " ] || fail "413 then /health on the same connection: $out"
s=$(req "$T/b" POST "$U/v1/completions" -H 'Expect: 100-continue' --data-binary @"$T/big.json")
check_error "$T/b" "$s" 413 null request_too_large
s=$(req "$T/b" POST "$U/v1/completions" -H 'Transfer-Encoding: chunked' --data-binary @"$T/big.json")
check_error "$T/b" "$s" 413 null request_too_large
s=$(req "$T/b" GET "$U/health")
[ "$s" = 200 ] || fail "health after 413: $s"
pass "413 over --max-request-bytes (Content-Length, 100-continue, chunked)"

# ---- 429 while another request streams; 200 concurrent bad requests meanwhile
# long enough (1500 tokens, 20 ms each) to outlast the burst below on a loaded machine
stream s1 "$A" 1500
S1=$CPID
wait_for 60 has_frames "$T/s1.sse" 3 || fail "the stream did not start"
is_busy "$A" || fail "health does not report busy while streaming"
s=$(req "$T/b" POST "$U/v1/chat/completions" -d "{\"model\":\"k3-tiny\",$CHAT,\"max_tokens\":3}")
check_error "$T/b" "$s" 429 null rate_limit_exceeded
grep -qi '^Retry-After: [0-9]' "$T/b.h" || fail "429 without Retry-After"
s=$(req "$T/b" POST "$U/v1/completions" -d '{"model":"k3-tiny","prompt":"x","stream":true}')
check_error "$T/b" "$s" 429 null rate_limit_exceeded

: >"$T/par.cfg"
i=0
while [ $i -lt 200 ]; do
  case $((i % 4)) in
    0) body='{"model":"k3-tiny","messages":' ;;
    1) body="{\"model\":\"k3-tiny\",$CHAT,\"n\":5}" ;;
    2) body='{"model":"k3-tiny","prompt":"x","max_tokens":-1}' ;;
    3) body='{"model":"k3-tiny","messages":[{"role":"user","content":[{"type":"image_url"}]}]}' ;;
  esac
  path=/v1/chat/completions
  [ $((i % 4)) = 2 ] && path=/v1/completions
  body=$(printf '%s' "$body" | sed 's/\\/\\\\/g; s/"/\\"/g')
  [ $i = 0 ] || echo next >>"$T/par.cfg"
  printf 'url = "%s"\ndata = "%s"\noutput = "%s"\nheader = "Content-Type: application/json"\nsilent\nwrite-out = "%%{http_code}\\n"\n' \
    "$U$path" "$body" "$T/par.$i" >>"$T/par.cfg"
  i=$((i + 1))
done
curl -s -m 120 --parallel --parallel-immediate --parallel-max 200 -K "$T/par.cfg" \
  >"$T/par.codes" 2>/dev/null || true
# admission comes before the body is parsed: while busy, bad bodies cost nothing and get 429
n429=$(grep -c '^429$' "$T/par.codes" || true)
[ "$n429" = 200 ] || fail "200 concurrent bad requests: $n429 got 429 ($(sort "$T/par.codes" | uniq -c | tr '\n' ' '))"
for f in "$T"/par.[0-9]*; do grep -q '"param"' "$f" || fail "bad request without an error body: $f"; done
kill -0 "$APID" 2>/dev/null || fail "server died under concurrent bad requests"
# The burst must have overlapped the generation: the stream started before it and
# the first bad request was answered (logged) before the stream's own log line.
# Whether the stream is still running after the burst depends on machine load (the
# tiny model may end its message early), so that is not what is checked.
awk '
  / 429 / && !done200                         { n429++ }
  n429 && /POST \/v1\/chat\/completions 200 / { done200 = 1 }
  END { exit !(n429 >= 202) }' "$T/A.log" ||
  fail "the concurrent bad requests did not overlap the generation"

# the streamed generation completes: role first, deltas, finish frame, usage, [DONE]
wait "$S1" || fail "the stream failed"
python3 - "$T/s1.sse" <<'PY' || fail "stream s1 malformed"
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
assert raw.endswith("data: [DONE]\n\n"), raw[-200:]
frames = [f for f in raw.split("\n\n") if f]
assert all(f.startswith("data: ") and "\n" not in f for f in frames)
chunks = [json.loads(f[6:]) for f in frames[:-1]]
assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
ids = {c["id"] for c in chunks}
assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
fin = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
assert len(fin) == 1 and fin[0]["choices"][0]["finish_reason"] in ("length", "stop"), fin
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1
PY
log_has A 'POST /v1/chat/completions 200 tokens=[0-9]+\+([1-9][0-9]*) ' || fail "no log line for the stream"
pass "429 with Retry-After while a stream runs; 200 concurrent bad requests refused 429 before parsing; the stream completed"

# ---- disconnect mid-stream cancels; the next request succeeds
stream s2 "$A" 5000
S2=$CPID
wait_for 60 has_frames "$T/s2.sse" 4 || fail "the stream did not start"
kill -TERM "$S2"
wait "$S2" 2>/dev/null || true
# the cancelled request is logged as 499 with fewer tokens than asked for
wait_for 60 log_has A 'POST /v1/chat/completions 499 tokens=' || fail "no 499 log line after the disconnect"
g=$(sed -n 's|.*POST /v1/chat/completions 499 tokens=[0-9]*+\([0-9]*\) .*|\1|p' "$T/A.log" | tail -n 1)
[ -n "$g" ] && [ "$g" -lt 5000 ] || fail "the generation was not cancelled: $g tokens"
wait_for 30 is_idle "$A" || fail "the server stayed busy after the client left"
s=$(req "$T/b" POST "$U/v1/completions" -d '{"model":"k3-tiny","prompt":"Once upon a time","max_tokens":4}')
[ "$s" = 200 ] || fail "request after a disconnect: $s $(cat "$T/b")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["usage"]["completion_tokens"]==4 and d["choices"][0]["finish_reason"]=="length"' "$T/b" ||
  fail "bad completion after a disconnect"
pass "disconnect mid-stream cancels the generation ($g of 5000 tokens); the next request succeeds"

# ---- a non-streaming request whose client leaves is cancelled too
curl -s -m 2 -H 'Content-Type: application/json' "$U/v1/completions" -d '{"model":"k3-tiny","prompt":"abc","max_tokens":5000}' >/dev/null 2>&1 || true
wait_for 60 log_has A 'POST /v1/completions 499 tokens=' || fail "no 499 for the abandoned request"
wait_for 30 is_idle "$A" || fail "busy after an abandoned non-streaming request"
pass "an abandoned non-streaming request is cancelled"

# ---- SIGTERM mid-stream: the stream ends with an error frame, the server exits 0
stream s3 "$A" 5000
S3=$CPID
wait_for 60 has_frames "$T/s3.sse" 3 || fail "the stream did not start"
kill -TERM "$APID"
rc=0
wait "$APID" || rc=$?
[ "$rc" = 0 ] || fail "server A exited with $rc after SIGTERM"
wait "$S3" 2>/dev/null || true
grep -q 'shutting_down' "$T/s3.sse" || fail "the cancelled stream does not say why: $(tail -c 300 "$T/s3.sse")"
tail -c 20 "$T/s3.sse" | grep -q 'data: \[DONE\]' || fail "the cancelled stream does not end with [DONE]"
curl -s -m 5 "$U/health" >/dev/null 2>&1 && fail "server A still answers after SIGTERM"
pass "SIGTERM mid-stream: error frame, [DONE], exit 0"

# ============================================================ server B
# API key from the environment, a queue of 2
DELTAFIN_API_KEY=sekrit start B --queue 2 --debug-token-delay-ms 20 --idle-timeout 1 --kernels scalar
B=$PORT
BPID=$SPID
V="http://127.0.0.1:$B"
AUTH="Authorization: Bearer sekrit"

# ---- a client that stops sending mid-request is disconnected (--idle-timeout 1), while
# requests that generate or wait longer than that (below) are not
python3 - "$B" <<'PY' || fail "a silent client was not disconnected"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sekrit\r\n"
          b"Content-Type: application/json\r\n"
          b"Content-Length: 100\r\n\r\n{")
s.settimeout(60)
assert s.recv(100) == b""
PY
wait_for 30 log_has B 'POST /v1/completions 499 tokens=0\+0 ' || fail "the idle close is not logged"
pass "a silent client is disconnected after --idle-timeout"

# ---- 401
s=$(req "$T/b" GET "$V/v1/models")
check_error "$T/b" "$s" 401 null invalid_api_key
s=$(req "$T/b" POST "$V/v1/chat/completions" -H 'Authorization: Bearer wrong' -d "{\"model\":\"k3-tiny\",$CHAT}")
check_error "$T/b" "$s" 401 null invalid_api_key
s=$(req "$T/b" POST "$V/v1/completions" -H 'Authorization: Basic c2Vrcml0' -d '{"model":"k3-tiny","prompt":"x"}')
check_error "$T/b" "$s" 401 null invalid_api_key
s=$(req "$T/b" GET "$V/v1/models" -H "$AUTH")
[ "$s" = 200 ] || fail "the right key was refused: $s"
s=$(req "$T/b" GET "$V/health")
[ "$s" = 200 ] || fail "health needs no key: $s"
pass "401 without the right Bearer key (DELTAFIN_API_KEY)"

# ---- queue of 2: two requests wait behind a stream and then run in order; a third gets 429
stream q0 "$B" 300 -H "$AUTH"
Q0=$CPID
wait_for 60 has_frames "$T/q0.sse" 3 || fail "the stream did not start"
curl -s -m 120 -H "$AUTH" -H 'Content-Type: application/json' "$V/v1/completions" -d '{"model":"k3-tiny","prompt":"one","max_tokens":5}' \
  -o "$T/q1.json" -w '%{http_code}' >"$T/q1.code" &
Q1=$!
wait_for 30 queue_is "$B" 1 || fail "the first waiting request is not queued"
curl -s -m 120 -H "$AUTH" -H 'Content-Type: application/json' "$V/v1/completions" -d '{"model":"k3-tiny","prompt":"one two three four five six","max_tokens":6}' \
  -o "$T/q2.json" -w '%{http_code}' >"$T/q2.code" &
Q2=$!
wait_for 30 queue_is "$B" 2 || fail "the second waiting request is not queued"
s=$(req "$T/b" POST "$V/v1/completions" -H "$AUTH" -d '{"model":"k3-tiny","prompt":"x","max_tokens":2}')
check_error "$T/b" "$s" 429 null rate_limit_exceeded
grep -qi '^Retry-After: [0-9]' "$T/b.h" || fail "429 without Retry-After"
wait "$Q1" || fail "queued request 1 failed"
wait "$Q2" || fail "queued request 2 failed"
wait "$Q0" || fail "the stream in front of the queue failed"
[ "$(cat "$T/q1.code")" = 200 ] && [ "$(cat "$T/q2.code")" = 200 ] || fail "queued requests: $(cat "$T/q1.code") $(cat "$T/q2.code")"
python3 - "$T/q1.json" "$T/q2.json" <<'PY' || fail "queued results"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["usage"]["completion_tokens"] == 5 and b["usage"]["completion_tokens"] == 6, (a, b)
assert a["choices"][0]["finish_reason"] == "length" and b["choices"][0]["finish_reason"] == "length"
PY
# first in, first out: the log lines of the two waiting requests are in arrival order
order=$(sed -n 's|.*POST /v1/completions 200 tokens=[0-9]*+\([56]\) .*|\1|p' "$T/B.log" | tr -d '\n')
[ "$order" = 56 ] || fail "queued requests did not run in FIFO order: $order"
tail -c 20 "$T/q0.sse" | grep -q 'data: \[DONE\]' || fail "the stream ahead of the queue did not complete"
pass "--queue 2: waiting requests run in FIFO order, a third gets 429"

# ---- a client that leaves the queue gives up its place; the server carries on
stream q3 "$B" 5000 -H "$AUTH"
Q3=$CPID
wait_for 60 has_frames "$T/q3.sse" 3 || fail "the stream did not start"
curl -s -m 120 -H "$AUTH" -H 'Content-Type: application/json' "$V/v1/completions" -d '{"model":"k3-tiny","prompt":"leaving","max_tokens":7}' >/dev/null 2>&1 &
Q4=$!
wait_for 30 queue_is "$B" 1 || fail "the request did not queue"
kill -TERM "$Q4"
wait "$Q4" 2>/dev/null || true
wait_for 30 queue_is "$B" 0 || fail "the abandoned request kept its place in the queue"
is_busy "$B" || fail "the running stream was disturbed"
kill -TERM "$Q3"
wait "$Q3" 2>/dev/null || true
wait_for 30 is_idle "$B" || fail "the server stayed busy after the stream's client left"
log_has B 'POST /v1/completions 499 tokens=[0-9]+\+0 ' || fail "the abandoned queued request is not logged as 499 with no tokens"
s=$(req "$T/b" POST "$V/v1/chat/completions" -H "$AUTH" -d "{\"model\":\"k3-tiny\",$CHAT,\"max_tokens\":3}")
[ "$s" = 200 ] || fail "request after the queue was abandoned: $s"
pass "disconnect while queued frees the place; disconnect mid-stream frees the server"

kill -INT "$BPID"
rc=0
wait "$BPID" || rc=$?
[ "$rc" = 0 ] || fail "server B exited with $rc after SIGINT"
pass "SIGINT: exit 0"
echo "PASS: deltafin serve over raw HTTP"

#!/bin/sh
# The official openai npm client (tests/e2e/openai, pinned by its lockfile)
# against `deltafin serve` on loopback with a tiny generated model: models,
# chat and text completions with and without streaming, stop sequences and
# seeded sampling, each compared with `deltafin run --json` on the same prompt.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
NODE_DIR="$DF_SRC/tests/e2e/openai"
if [ ! -d "$NODE_DIR/node_modules/openai" ]; then
  echo "FAIL: the openai client is not installed (scripts/install-deps.sh runs npm ci in $NODE_DIR)"
  exit 1
fi
T=$(mktemp -d /tmp/df-e2e-serve-openai.XXXXXX)
PID=
cleanup() {
  # $PID is timeout(1)'s: TERM is passed on to the server, KILL follows 5 s later
  if [ -n "$PID" ]; then
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
  echo "FAIL: $*"
  echo "--- server log"
  cat "$T/server.log" 2>/dev/null || true
  exit 1
}

timeout 120 "$DF_BIN" make-model --preset tiny --seed 1 --out "$T/model" >/dev/null 2>&1 ||
  fail "make-model"

# --port 0: the kernel picks a free port; the server logs which. The log
# exists before the server opens it: the sed below reads it at once, and a
# sed that fails in an assignment ends the script under set -e (CI, ASan
# stage, 2026-12-05: "can't read tools.log" and a silent failure).
: >"$T/server.log"
timeout -k 5 900 "$DF_BIN" serve --model "$T/model" --port 0 --model-id k3-tiny --threads 2 \
  2>"$T/server.log" &
PID=$!
port=
i=0
while [ $i -lt 600 ]; do
  port=$(sed -n 's|.*serving .* on http://127\.0\.0\.1:\([0-9][0-9]*\)/v1.*|\1|p' "$T/server.log")
  [ -n "$port" ] && break
  kill -0 "$PID" 2>/dev/null || fail "the server exited before listening"
  sleep 0.1
  i=$((i + 1))
done
[ -n "$port" ] || fail "the server did not start listening"

BASE_URL="http://127.0.0.1:$port/v1" MODEL_ID=k3-tiny MODEL_DIR="$T/model" DF_BIN="$DF_BIN" \
  timeout 900 node "$NODE_DIR/check.mjs" || fail "openai client checks"

# ---- tool calls: a second server's output side is fed the ids of a tool call
# as the release's encoder writes one in history (the same format the model
# writes), taken from /apply-template
IDS=$(python3 - "$port" <<'PY'
import json, sys, urllib.request
def post(body):
    rq = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/apply-template", json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=60) as r:
        return json.load(r)["tokens"]
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
a = [{"role": "user", "content": "Weather in Oslo?"}]
b = a + [{"role": "assistant", "content": "", "reasoning_content": "need tool", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]}]
pa, pb = post({"messages": a, "tools": tools}), post({"messages": b, "tools": tools})
assert pb[:len(pa)] == pa, "the rendering of a longer history does not extend the shorter one"
print(",".join(map(str, pb[len(pa):])))
PY
) || fail "apply-template"
EOM=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print([k for k,v in t["added_tokens_decoder"].items() if v["content"]=="<|end_of_msg|>"][0])' "$T/model/tokenizer_config.json")
: >"$T/tools.log"
timeout -k 5 900 "$DF_BIN" serve --model "$T/model" --port 0 --model-id k3-tiny --threads 2 \
  --debug-output-ids "$IDS" 2>"$T/tools.log" &
PID2=$!
port2=
i=0
while [ $i -lt 600 ]; do
  port2=$(sed -n 's|.*serving .* on http://127\.0\.0\.1:\([0-9][0-9]*\)/v1.*|\1|p' "$T/tools.log")
  [ -n "$port2" ] && break
  sleep 0.1
  i=$((i + 1))
done
[ -n "$port2" ] || fail "the tools server did not start"
BASE_URL="http://127.0.0.1:$port2/v1" MODEL_ID=k3-tiny EOM_ID="$EOM" timeout 300 node "$NODE_DIR/tools.mjs" ||
  { cat "$T/tools.log"; fail "openai client tool calls"; }
kill -TERM "$PID2"
wait "$PID2" || fail "the tools server did not exit 0"

# every request left an access-log line: method, path, status, tokens, duration
grep -Eq '^deltafin: 127\.0\.0\.1 POST /v1/chat/completions 200 tokens=[0-9]+\+[0-9]+ [0-9.]+s$' \
  "$T/server.log" || fail "no access-log line for a chat completion"
grep -Eq '^deltafin: 127\.0\.0\.1 GET /v1/models 200 ' "$T/server.log" ||
  fail "no access-log line for the model list"
grep -Eq '^deltafin: 127\.0\.0\.1 POST /v1/chat/completions 400 ' "$T/server.log" ||
  fail "no access-log line for a refused request"

# SIGTERM: a clean exit with status 0
kill -TERM "$PID"
rc=0
wait "$PID" || rc=$?
PID=
[ "$rc" = 0 ] || fail "the server exited with status $rc after SIGTERM"
echo "PASS: openai client against deltafin serve"

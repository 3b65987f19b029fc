#!/bin/sh
# A second npm client, the Vercel AI SDK (tests/e2e/aisdk, pinned by its
# lockfile), against `deltafin serve`: chat, streaming, logprobs, structured
# output and tool calls (see tests/e2e/aisdk/check.mjs).
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
NODE_DIR="$DF_SRC/tests/e2e/aisdk"
if [ ! -d "$NODE_DIR/node_modules/ai" ]; then
  echo "FAIL: the AI SDK is not installed (scripts/install-deps.sh runs npm ci in $NODE_DIR)"
  exit 1
fi
T=$(mktemp -d /tmp/df-e2e-serve-aisdk.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny
start A --threads 2
A=$PORT
# the ids of a get_weather(city=Oslo) call as the release's encoder writes one
IDS=$(python3 - "$A" <<'PY'
import json, sys, urllib.request
def post(body):
    rq = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/apply-template", json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=60) as r:
        return json.load(r)["tokens"]
a = [{"role": "user", "content": "Weather in Oslo?"}]
b = a + [{"role": "assistant", "content": "", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]}]
pa, pb = post({"messages": a}), post({"messages": b})
assert pb[:len(pa)] == pa
print(",".join(map(str, pb[len(pa):])))
PY
) || fail "apply-template"
EOM=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print([k for k,v in t["added_tokens_decoder"].items() if v["content"]=="<|end_of_msg|>"][0])' "$T/model/tokenizer_config.json")
start B --threads 2 --debug-output-ids "$IDS"
BASE_URL="http://127.0.0.1:$A/v1" TOOLS_URL="http://127.0.0.1:$PORT/v1" MODEL_ID=k3-tiny EOM_ID="$EOM" \
  timeout 600 node "$NODE_DIR/check.mjs" || fail "AI SDK checks"
pass "the Vercel AI SDK: text, stream, logprobs, generateObject, tool calls"
echo "PASS: the Vercel AI SDK against deltafin serve"

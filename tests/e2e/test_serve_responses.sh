#!/bin/sh
# POST /v1/responses with the official openai client (responses.create and
# responses.stream; tests/e2e/openai/responses.mjs), every reply compared
# with the same conversation through chat completions.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
NODE_DIR="$DF_SRC/tests/e2e/openai"
[ -d "$NODE_DIR/node_modules/openai" ] ||
  { echo "FAIL: the openai client is not installed (scripts/install-deps.sh runs npm ci in $NODE_DIR)"; exit 1; }
T=$(mktemp -d /tmp/df-e2e-serve-responses.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny
start S --threads 2
BASE_URL="http://127.0.0.1:$PORT/v1" MODEL_ID=k3-tiny timeout 600 node "$NODE_DIR/responses.mjs" ||
  fail "responses checks"
pass "the openai SDK's Responses API: create, stream, previous_response_id, function tools"
echo "PASS: deltafin serve /v1/responses"

#!/bin/sh
# json_schema as clients write it (tests/e2e/schema: openai-node's
# zodResponseFormat, pydantic's schemas, every reply checked with ajv and by
# pydantic itself). See tests/e2e/schema/check.mjs.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
NODE_DIR="$DF_SRC/tests/e2e/schema"
[ -d "$NODE_DIR/node_modules/ajv" ] ||
  { echo "FAIL: ajv is not installed (scripts/install-deps.sh runs npm ci in $NODE_DIR)"; exit 1; }
python3 -c 'import pydantic' 2>/dev/null ||
  { echo "FAIL: pydantic is missing (scripts/install-deps.sh installs python3-pydantic)"; exit 1; }
T=$(mktemp -d /tmp/df-e2e-serve-schema.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny
start S --threads 2
python3 "$NODE_DIR/models.py" schema >"$T/pyd.json" || fail "pydantic schema"
BASE_URL="http://127.0.0.1:$PORT/v1" MODEL_ID=k3-tiny PYD_SCHEMA="$T/pyd.json" PYD_OUT="$T/pyd.out" \
  timeout 900 node "$NODE_DIR/check.mjs" || fail "schema checks"
python3 "$NODE_DIR/models.py" check "$T/pyd.out" || fail "pydantic refused a reply"
pass "zod and pydantic schemas: every sampled reply validates"
echo "PASS: deltafin serve json_schema"

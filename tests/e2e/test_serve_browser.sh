#!/bin/sh
# The official openai JS client in headless Chromium (tests/e2e/browser:
# playwright-core and openai pinned by its lockfile, Debian's chromium)
# against `deltafin serve --cors ORIGIN --api-key K`: the SDK's preflights
# ask for its x-stainless-* headers, which the server must allow for an
# allowed origin; its replies must equal the same requests made without a
# browser; another origin is refused. Raw preflights check the header list.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
NODE_DIR="$DF_SRC/tests/e2e/browser"
[ -d "$NODE_DIR/node_modules/playwright-core" ] ||
  { echo "FAIL: playwright-core is not installed (scripts/install-deps.sh runs npm ci in $NODE_DIR)"; exit 1; }
[ -x /usr/bin/chromium ] || { echo "FAIL: /usr/bin/chromium is missing (scripts/install-deps.sh installs it)"; exit 1; }
T=$(mktemp -d /tmp/df-e2e-serve-browser.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny

# the page's port must be known before the server (its --cors names it)
PAGE_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ORIGIN="http://127.0.0.1:$PAGE_PORT"
start B --cors "$ORIGIN" --api-key sk-browser
U="http://127.0.0.1:$PORT"

# ---- raw preflights: the requested names come back; a malformed list gets the fixed one
pre() { # ORIGIN REQUEST-HEADERS
  curl -s -m 10 -X OPTIONS -o /dev/null -D "$T/p.h" -w '%{http_code}' -H "Origin: $1" \
    -H 'Access-Control-Request-Method: POST' -H "Access-Control-Request-Headers: $2" "$U/v1/chat/completions"
}
hdr() { sed -n "s/^$1: *//Ip" "$T/p.h" | tr -d '\r'; }
[ "$(pre "$ORIGIN" 'authorization,content-type,x-stainless-os,x-stainless-retry-count')" = 204 ] || fail "preflight status"
[ "$(hdr Access-Control-Allow-Headers)" = "authorization,content-type,x-stainless-os,x-stainless-retry-count" ] ||
  fail "allowed headers: $(cat "$T/p.h")"
[ "$(hdr Access-Control-Allow-Origin)" = "$ORIGIN" ] || fail "allowed origin: $(cat "$T/p.h")"
pre "$ORIGIN" 'x-a;x-b' >/dev/null
[ "$(hdr Access-Control-Allow-Headers)" = "Authorization, Content-Type" ] || fail "a malformed list: $(cat "$T/p.h")"
pre "http://localhost:$PAGE_PORT" 'x-stainless-os' >/dev/null
grep -qi '^Access-Control-Allow' "$T/p.h" && fail "another origin got CORS headers: $(cat "$T/p.h")"
pass "preflights allow the requested header names for an allowed origin only"

BASE_URL="$U/v1" MODEL_ID=k3-tiny API_KEY=sk-browser PAGE_PORT="$PAGE_PORT" \
  timeout 300 node "$NODE_DIR/check.mjs" || fail "the browser checks"
pass "the openai SDK in Chromium: models, chat, streamed chat from the allowed origin"
echo "PASS: deltafin serve in a browser"

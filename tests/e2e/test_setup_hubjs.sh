#!/bin/sh
# The hub cache deltafin writes (setup --hf-cache) is one the hub's own
# JavaScript client (@huggingface/hub, pinned in tests/setup/hubjs) reads, and
# the other way round. Against nginx's access log:
#  1. after setup --full --hf-cache (revision main), scanCacheDir finds the
#     repo with the commit, refs [main] and every installed file at its size;
#     downloadFileToCacheDir for each file at that commit answers from the
#     cache with zero requests, and the files it points to are the originals;
#     the blobs are hard links of the install (no second copy);
#  2. a cache the JS client filled from the hub (its own layout, its own etags)
#     installs with zero bytes downloaded and gives the original ids;
#  3. a second commit with the same files (--hf-cache again) adds a snapshot
#     and no blob.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
JS_DIR="$DF_SRC/tests/setup/hubjs"
if [ ! -d "$JS_DIR/node_modules/@huggingface/hub" ]; then
  echo "FAIL: @huggingface/hub is not installed (scripts/install-deps.sh runs npm ci in $JS_DIR)" >&2
  exit 1
fi
hub_test_begin hubjs
JS="node $JS_DIR/interop.mjs"

hub_tiny 37 8888888888888888888888888888888888888888
IDS=8,80,800,88
"$BIN" run --model "$T/orig" --prompt-ids $IDS --max-new 8 --json >"$T/ref.json"
REF=$(ids "$T/ref.json")
export HOME="$T/home"
unset HF_HOME HUGGINGFACE_HUB_CACHE XDG_CACHE_HOME 2>/dev/null || true
FILES=$(cd "$T/src" && ls)

# --- 1: deltafin writes, the JS client reads ---
HF_HUB_CACHE="$T/c1" "$BIN" setup --full --hf-cache --repo "$REPO" --endpoint "$EP" --model-root "$T/r1" -q \
  2>"$T/r1.err" || fail "setup --hf-cache: $(cat "$T/r1.err")"
$JS scan "$T/c1" >"$T/scan1.json" 2>"$T/scan1.err" || fail "scanCacheDir: $(cat "$T/scan1.err")"
python3 - "$T/scan1.json" "$T/src" "$REPO" "$COMMIT" <<'PY' || fail "scanCacheDir's view of deltafin's cache (above): $(cat "$T/scan1.json")"
import json, os, sys
repos = json.load(open(sys.argv[1]))
src, repo, commit = sys.argv[2:]
want = sorted((f, os.path.getsize(os.path.join(src, f))) for f in os.listdir(src))
assert len(repos) == 1 and repos[0]["id"] == repo and repos[0]["type"] == "model", repos
revs = repos[0]["revisions"]
assert len(revs) == 1 and revs[0]["commit"] == commit and revs[0]["refs"] == ["main"], revs
got = sorted((f["path"], f["size"]) for f in revs[0]["files"])
assert got == want, (got, want)
PY
N0=$(hub_requests)
# shellcheck disable=SC2086
$JS get "$T/c1" "$REPO" "$COMMIT" "$EP" $FILES >"$T/get1.out" 2>"$T/get1.err" || fail "downloadFileToCacheDir: $(cat "$T/get1.err")"
[ "$(hub_requests)" = "$N0" ] || fail "the JS client sent $(($(hub_requests) - N0)) requests for files deltafin cached"
for f in $FILES; do
  P=$(grep "/$f\$" "$T/get1.out") || fail "no pointer for $f: $(cat "$T/get1.out")"
  cmp -s "$P" "$T/src/$f" || fail "the cached $f differs from the original"
done
S1=$(ls "$T/src" | grep '^model-0' | head -1)
[ "$(stat -c %i "$T/r1/$S1")" = "$(stat -L -c %i "$(grep "/$S1\$" "$T/get1.out")")" ] || fail "the blob of $S1 is a second copy, not a hard link"

# --- 2: the JS client writes, deltafin reads ---
start_proxy --log "$T/js.log"  # answers the client's paths-info from the hub's tree
# shellcheck disable=SC2086
$JS get "$T/c2" "$REPO" "$COMMIT" "http://127.0.0.1:$PROXY_PORT" $FILES >"$T/get2.out" 2>"$T/get2.err" \
  || fail "the JS client could not fill a cache: $(cat "$T/get2.err")"
stop_proxy
for f in $FILES; do cmp -s "$(grep "/$f\$" "$T/get2.out")" "$T/src/$f" || fail "the JS client cached a wrong $f"; done
HF_HUB_CACHE="$T/c2" "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/r2" -q \
  --json >"$T/r2.json" 2>"$T/r2.err" || fail "setup from the JS client's cache: $(cat "$T/r2.err")"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["bytes_net"] == 0 and r["files_reused"] == r["files"], r' \
  "$T/r2.json" || fail "the JS client's cache was not reused: $(cat "$T/r2.json")"
"$BIN" run --model "$T/r2" --prompt-ids $IDS --max-new 8 --json >"$T/o2.json"
[ "$(ids "$T/o2.json")" = "$REF" ] || fail "ids from the JS client's cache differ"

# --- 3: a second commit, same files: a snapshot, no new blob ---
COMMIT_B=9999999999999999999999999999999999999999
start_hub "$T/src" "$REPO" "$COMMIT_B" "$T/hubB"
NB=$(ls "$T/c1/models--test-org--K3-tiny/blobs" | wc -l)
HF_HUB_CACHE="$T/c1" "$BIN" setup --full --hf-cache --repo "$REPO" --revision "$COMMIT_B" \
  --endpoint "http://127.0.0.1:$HUB_PORT" --model-root "$T/r3" -q --json >"$T/r3.json" 2>"$T/r3.err" \
  || fail "setup of commit B: $(cat "$T/r3.err")"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["bytes_net"] == 0, r' "$T/r3.json" || fail "commit B downloaded: $(cat "$T/r3.json")"
[ "$(ls "$T/c1/models--test-org--K3-tiny/blobs" | wc -l)" = "$NB" ] || fail "commit B added blobs"
$JS scan "$T/c1" >"$T/scan3.json" || fail "scan 3"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))[0]["revisions"]; assert sorted(v["commit"] for v in r) == sorted(sys.argv[2:]), r' \
  "$T/scan3.json" "$COMMIT" "$COMMIT_B" || fail "the JS client does not see both commits: $(cat "$T/scan3.json")"
echo "PASS: setup hubjs (@huggingface/hub reads deltafin's cache with zero requests; deltafin reuses the client's)"

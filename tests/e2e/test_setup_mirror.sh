#!/bin/sh
# A mirror that ignores ?blobs=true (model-info siblings with rfilename only):
# sizes and checksums come from the tree API (/api/models/{repo}/tree/{commit}
# ?recursive=true). Checks against nginx's access log:
#  1. setup --full from such a mirror installs the original bytes and ids,
#     asking the tree once; every file is still checked (sha256 for LFS files,
#     where the tree's top-level oid is the pointer's);
#  2. a stream install from it runs and gives the same ids;
#  3. a mirror with neither sizes nor a tree: one HEAD per file (X-Linked-Etag
#     and X-Linked-Size for LFS files, ETag = git blob id for the others),
#     the same bytes and ids;
#  4. without ETags either it is refused, naming the file.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin mirror

REPO=test-org/K3-tiny
COMMIT=7777777777777777777777777777777777777777
"$BIN" make-model --preset tiny --seed 31 --out "$T/src" -q >/dev/null 2>&1
cp -r "$T/src" "$T/orig"
start_hub "$T/src" "$REPO" "$COMMIT" "$T/hub" --no-blob-sizes
EP="http://127.0.0.1:$HUB_PORT"
IDS=7,70,700,77
"$BIN" run --model "$T/orig" --prompt-ids $IDS --max-new 8 --json >"$T/ref.json"
REF=$(ids "$T/ref.json")
python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["siblings"]; assert s and all(set(x) == {"rfilename"} for x in s)' \
  "$T/hub/www/api/$COMMIT.json" || fail "the mirror's model info has sizes (test too weak)"

# --- 1 ---
"$BIN" setup --full --repo "$REPO" --revision main --endpoint "$EP" --model-root "$T/r1" -q 2>"$T/r1.err" \
  || fail "setup from a mirror without blob sizes: $(cat "$T/r1.err")"
for f in "$T"/src/*; do cmp -s "$f" "$T/r1/$(basename "$f")" || fail "$(basename "$f") differs"; done
hub_settle
[ "$(grep -c "^GET /api/$COMMIT.tree.json 200" "$T/hub/logs/access.log")" = 1 ] || fail "the tree was not asked once: $(cat "$T/hub/logs/access.log")"
"$BIN" run --model "$T/r1" --prompt-ids $IDS --max-new 8 --json >"$T/o1.json"
[ "$(ids "$T/o1.json")" = "$REF" ] || fail "ids differ"
# the stored model info has the tree's checksums: a wrong byte in a shard is caught
S1=$(ls "$T/r1" | grep '^model-0' | head -1)
python3 - "$T/r1/$S1" <<'PY'
import sys
f = open(sys.argv[1], "r+b"); f.seek(-5, 2); b = f.read(1); f.seek(-5, 2); f.write(bytes([b[0] ^ 1]))
PY
rm -f "$T/r1/deltafin-setup.verified"
"$BIN" setup --full --repo "$REPO" --revision main --endpoint "$EP" --model-root "$T/r1" 2>"$T/r1b.err" \
  || fail "rerun: $(cat "$T/r1b.err")"
grep -q "replacing .*$S1: sha256" "$T/r1b.err" || fail "a damaged shard was not caught by the tree's sha256: $(cat "$T/r1b.err")"
cmp -s "$T/src/$S1" "$T/r1/$S1" || fail "$S1 not repaired"

# --- 2 ---
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/s2" -q 2>"$T/s2.err" \
  || fail "setup --stream from the mirror: $(cat "$T/s2.err")"
"$BIN" run --model "$T/s2" --prompt-ids $IDS --max-new 8 --json >"$T/o2.json" 2>"$T/o2.err" || fail "stream run: $(cat "$T/o2.err")"
[ "$(ids "$T/o2.json")" = "$REF" ] || fail "stream ids differ"

# --- 3: neither sizes nor a tree: one HEAD per file (X-Linked-Etag/-Size, ETag) ---
stop_hub
start_hub "$T/src" "$REPO" "$COMMIT" "$T/hub3" --no-blob-sizes --no-tree
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$HUB_PORT" \
  --model-root "$T/r3" -q 2>"$T/r3.err" || fail "a mirror with neither sizes nor a tree: $(cat "$T/r3.err")"
for f in "$T"/src/*; do cmp -s "$f" "$T/r3/$(basename "$f")" || fail "HEAD install: $(basename "$f") differs"; done
hub_settle "$T/hub3"
[ "$(grep -c '^HEAD ' "$T/hub3/logs/access.log")" -ge "$(ls "$T/src" | wc -l)" ] || fail "not one HEAD per file: $(cat "$T/hub3/logs/access.log")"
python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["siblings"]; assert all("size" in x and ("lfs" in x or "blobId" in x) for x in s), s' \
  "$T/r3/deltafin-setup.info.json" || fail "the stored model info lacks the checksums from HEAD"
"$BIN" run --model "$T/r3" --prompt-ids $IDS --max-new 8 --json >"$T/o3.json"
[ "$(ids "$T/o3.json")" = "$REF" ] || fail "HEAD install: ids differ"

# --- 4: and without ETags either: refused, naming a file ---
stop_hub
start_hub "$T/src" "$REPO" "$COMMIT" "$T/hub4" --no-blob-sizes --no-tree --no-etag
if "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$HUB_PORT" \
  --model-root "$T/r4" -q 2>"$T/r4.err"; then fail "a mirror with no way to verify its files was accepted"; fi
grep -q "cannot be verified" "$T/r4.err" && grep -q "config.json" "$T/r4.err" || fail "no clear error: $(cat "$T/r4.err")"
echo "PASS: setup mirror (tree API, then HEAD, instead of ?blobs=true sizes)"

#!/bin/sh
# Which files setup fetches, and --dry-run / --include / --exclude, against
# nginx's access log. The served repository also has a README.md and a
# LICENSE.md (not needed to run). Checks:
#  1. --dry-run lists every file of the model info with its size (checked
#     against the served files) as download or skip, totals them, sends only
#     the model-info request, and writes nothing (not even the folder);
#  2. with a hub cache holding some of the files, and an earlier partial
#     install, it says reuse / present / the bytes already here;
#  3. the default set: README/LICENSE skipped; --include '*.md' fetches
#     exactly the docs; --exclude generation_config.json leaves it out (the
#     install still runs and gives the original ids); excluding a shard the
#     index needs is refused before anything is downloaded.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin select

REPO=test-org/K3-tiny
COMMIT=6666666666666666666666666666666666666666
"$BIN" make-model --preset tiny --seed 29 --out "$T/src" -q >/dev/null 2>&1
echo "# K3 tiny" >"$T/src/README.md"
echo "MIT" >"$T/src/LICENSE.md"
cp -r "$T/src" "$T/orig"
start_hub "$T/src" "$REPO" "$COMMIT"
EP="http://127.0.0.1:$HUB_PORT"
IDS=6,60,600,66
"$BIN" run --model "$T/orig" --prompt-ids $IDS --max-new 8 --json >"$T/ref.json"
REF=$(ids "$T/ref.json")
export HF_HOME="$T/nohome" HOME="$T/nohome"
unset HF_HUB_CACHE HUGGINGFACE_HUB_CACHE XDG_CACHE_HOME 2>/dev/null || true

# --- 1: a dry run ---
: >"$T/hub/logs/access.log"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/d1" --dry-run \
  >"$T/d1.out" 2>"$T/d1.err" || fail "--dry-run: $(cat "$T/d1.err")"
[ ! -e "$T/d1" ] || fail "--dry-run created the model root: $(ls -a "$T/d1")"
[ "$(hub_requests)" = 1 ] && grep -q "^GET /api/" "$T/hub/logs/access.log" \
  || fail "--dry-run sent more than the model-info request: $(cat "$T/hub/logs/access.log")"
python3 - "$T/d1.out" "$T/src" <<'EOF' || fail "--dry-run listing (above): $(cat "$T/d1.out")"
import os, re, sys
unit = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
rows = {}
for l in open(sys.argv[1]):
    m = re.match(r"(download|reuse|present|skip) +([0-9.]+) (B|KB|MB|GB|TB)  (\S+)", l)
    if m:
        digits = len(m.group(2).split(".")[1]) if "." in m.group(2) else 0
        u = unit[m.group(3)]
        rows[m.group(4)] = (m.group(1), float(m.group(2)) * u, 0.5 * u / 10 ** digits)
bad = []
for f in os.listdir(sys.argv[2]):
    size = os.path.getsize(os.path.join(sys.argv[2], f))
    want = "skip" if f.endswith(".md") else "download"
    if f not in rows:
        bad.append("%s is not listed" % f)
        continue
    act, n, tol = rows[f]
    if act != want:
        bad.append("%s: %s, expected %s" % (f, act, want))
    if abs(n - size) > tol + 1e-9:  # as rounded to the digits printed
        bad.append("%s: %s bytes listed, it has %d" % (f, n, size))
tot = [l for l in open(sys.argv[1]) if l.startswith("total: ")]
n_dl = sum(1 for f in os.listdir(sys.argv[2]) if not f.endswith(".md"))
if not tot or not tot[0].startswith("total: %d to download" % n_dl) or "2 skipped" not in tot[0]:
    bad.append("totals: %r" % tot)
print("\n".join(bad))
sys.exit(1 if bad else 0)
EOF

# --- 2: reuse, present, partial ---
python3 "$DF_SRC/tests/setup/mkcache.py" --model "$T/src" --repo "$REPO" --commit "$COMMIT" \
  --cache "$T/cache" --skip model-00001-of-000003.safetensors --skip model-00002-of-000003.safetensors \
  --skip model-00003-of-000003.safetensors
mkdir -p "$T/d2"
cp "$T/src/config.json" "$T/d2/"
HF_HUB_CACHE="$T/cache" "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" \
  --model-root "$T/d2" --dry-run >"$T/d2.out" 2>"$T/d2.err" || fail "--dry-run 2: $(cat "$T/d2.err")"
grep -Eq "^present .*  config.json$" "$T/d2.out" || fail "config.json not present: $(cat "$T/d2.out")"
grep -Eq "^reuse .*  tiktoken.model  \(from $T/cache/" "$T/d2.out" || fail "tiktoken.model not reused: $(cat "$T/d2.out")"
grep -Eq "^download .*  model-00002-of-000003.safetensors$" "$T/d2.out" || fail "shard 2 not downloaded: $(cat "$T/d2.out")"
[ "$(ls "$T/d2")" = config.json ] || fail "--dry-run wrote into an existing folder: $(ls "$T/d2")"
# a partial install: killed by a rate limit after some chunks
start_proxy --limit-after 5 --limit-s 600 --log "$T/p.log"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$PROXY_PORT" \
  --model-root "$T/d3" --chunk-kb 64 --connections 1 --max-wait 1s -q 2>/dev/null && fail "no partial install"
stop_proxy
PART=$(ls "$T/d3" | sed -n 's/\.part\.ranges$//p' | head -1)
[ -n "$PART" ] || fail "no partial file to list"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/d3" --dry-run \
  >"$T/d3.out" 2>"$T/d3.err" || fail "--dry-run 3: $(cat "$T/d3.err")"
grep -Eq "^download .*  $PART  \([0-9.]+ [KMG]?B of it already here\)$" "$T/d3.out" \
  || fail "the partial $PART is not listed with what is here: $(cat "$T/d3.out")"

# --- 3: the default set, --include, --exclude ---
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/r1" -q \
  2>"$T/r1.err" || fail "setup: $(cat "$T/r1.err")"
[ ! -e "$T/r1/README.md" ] && [ ! -e "$T/r1/LICENSE.md" ] || fail "docs were fetched by default"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/r2" \
  --include '*.md' -q 2>"$T/r2.err" || fail "--include '*.md': $(cat "$T/r2.err")"
[ "$(ls "$T/r2" | grep -v '^deltafin-setup' | tr '\n' ' ')" = "LICENSE.md README.md " ] \
  || fail "--include '*.md' fetched: $(ls "$T/r2")"
cmp -s "$T/r2/README.md" "$T/src/README.md" || fail "README.md differs"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/r3" \
  --exclude generation_config.json -q 2>"$T/r3.err" || fail "--exclude: $(cat "$T/r3.err")"
[ ! -e "$T/r3/generation_config.json" ] || fail "--exclude generation_config.json fetched it"
for f in config.json model-00001-of-000003.safetensors tiktoken.model; do
  cmp -s "$T/r3/$f" "$T/src/$f" || fail "--exclude: $f differs or is missing"
done
"$BIN" run --model "$T/r3" --prompt-ids $IDS --max-new 8 --json >"$T/o3.json" 2>"$T/o3.err" || fail "run: $(cat "$T/o3.err")"
[ "$(ids "$T/o3.json")" = "$REF" ] || fail "--exclude install: ids differ"
if "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "$EP" --model-root "$T/r4" \
  --exclude 'model-00002-*' -q 2>"$T/r4.err"; then fail "excluding a shard the index needs succeeded"; fi
grep -q "model-00002-of-000003.safetensors is left out (--exclude)" "$T/r4.err" || fail "exclude a shard: $(cat "$T/r4.err")"
! ls "$T/r4" | grep -q '^model-0' || fail "shards were downloaded before the exclusion was refused: $(ls "$T/r4")"
echo "PASS: setup select (--dry-run, --include, --exclude, the default set)"

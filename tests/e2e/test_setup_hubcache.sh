#!/bin/sh
# The hub cache and offline mode, against nginx's access log (every request
# it answered). The cache is laid out by tests/setup/mkcache.py (blobs named
# by sha256 / git blob id, snapshot links, refs), independently of deltafin.
#  1. --revision defaults to main, resolved once and recorded (a rerun
#     without it continues the revision the folder recorded);
#  2. one blob store: a new commit whose files are all in the cache's blobs/
#     (brought there by another commit) downloads zero bytes of any file;
#  3. where the cache is: XDG_CACHE_HOME/huggingface/hub without HF_HOME,
#     HUGGINGFACE_HUB_CACHE, and HF_HUB_CACHE winning over both;
#  4. offline (HF_HUB_OFFLINE=1 or --offline): zero requests for a rerun of
#     a complete install, for an install from the cache alone (by ref), and
#     an exact error naming the file the cache lacks;
#  5. a stream install run offline serves what is local (same ids, zero
#     requests) and fails naming the layer, expert and shard it lacks.
# Every install gives the original model's ids.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin hubcache

hub_tiny 13 1111111111111111111111111111111111111111
COMMIT_A=$COMMIT
IDS=2,40,400,44,8
"$BIN" run --model "$T/orig" --prompt-ids $IDS --max-new 10 --json >"$T/ref.json"
REF=$(ids "$T/ref.json")
MKCACHE="python3 $DF_SRC/tests/setup/mkcache.py"
same() { # dir
  for f in "$T"/src/*; do
    cmp -s "$f" "$1/$(basename "$f")" || fail "$1/$(basename "$f") differs from the original"
  done
  "$BIN" run --model "$1" --prompt-ids $IDS --max-new 10 --json >"$1.ids.json" 2>"$1.ids.err" \
    || fail "run on $1: $(cat "$1.ids.err")"
  [ "$(ids "$1.ids.json")" = "$REF" ] || fail "$1: ids $(ids "$1.ids.json"), the original gives $REF"
}
# no cache anywhere unless a step sets one
export HF_HOME="$T/nohome" HOME="$T/nohome"
unset HF_HUB_CACHE HUGGINGFACE_HUB_CACHE XDG_CACHE_HOME HF_HUB_OFFLINE 2>/dev/null || true
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# --- 1: --revision defaults to main ---
"$BIN" setup --full --repo "$REPO" --endpoint "$EP" --model-root "$T/r1" -q 2>"$T/r1.err" \
  || fail "setup without --revision: $(cat "$T/r1.err")"
[ "$(field "$T/r1/deltafin-setup.json" revision)" = main ] || fail "revision main not recorded: $(cat "$T/r1/deltafin-setup.json")"
[ "$(field "$T/r1/deltafin-setup.json" commit)" = "$COMMIT_A" ] || fail "main not resolved to $COMMIT_A"
same "$T/r1"

# --- 2: one blob store across revisions ---
# commit B: the same files plus a README (a README-only commit), on a second hub
COMMIT_B=2222222222222222222222222222222222222222
cp -r "$T/src" "$T/srcB"
echo "# K3 tiny, now with a README" >"$T/srcB/README.md"
start_hub "$T/srcB" "$REPO" "$COMMIT_B" "$T/hubB"
EPB="http://127.0.0.1:$HUB_PORT"
$MKCACHE --model "$T/src" --repo "$REPO" --commit "$COMMIT_A" --cache "$T/c2" --ref main
HF_HUB_CACHE="$T/c2" "$BIN" setup --full --repo "$REPO" --revision "$COMMIT_B" --endpoint "$EPB" \
  --model-root "$T/r2" -q --json >"$T/r2.json" 2>"$T/r2.err" || fail "setup of commit B: $(cat "$T/r2.err")"
[ "$(hub_bytes '^/cdn/' "$T/hubB")" = 0 ] || fail "commit B downloaded $(hub_bytes '^/cdn/' "$T/hubB") LFS bytes that the cache's blobs hold"
[ "$(field "$T/r2.json" bytes_net)" = 0 ] || fail "commit B downloaded $(field "$T/r2.json" bytes_net) bytes"
[ "$(field "$T/r2.json" files_reused)" = "$(ls "$T/src" | wc -l)" ] || fail "not every file was reused: $(cat "$T/r2.json")"
same "$T/r2"
# a rerun without --revision continues the recorded one (not main)
HF_HUB_CACHE="$T/c2" "$BIN" setup --full --repo "$REPO" --endpoint "$EPB" --model-root "$T/r2" -q \
  2>"$T/r2b.err" || fail "a rerun without --revision of a --revision COMMIT install: $(cat "$T/r2b.err")"
# without the cache the same install downloads everything (the check above can fail)
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT_B" --endpoint "$EPB" --model-root "$T/r2n" -q \
  --json >"$T/r2n.json" 2>"$T/r2n.err" || fail "setup of commit B without a cache: $(cat "$T/r2n.err")"
[ "$(field "$T/r2n.json" bytes_net)" -gt 0 ] || fail "without a cache nothing was downloaded?"

# --- 3: where the cache is ---
cache_reused() { # label model-root (env set by the caller)
  "$BIN" setup --full --repo "$REPO" --revision "$COMMIT_A" --endpoint "$EP" --model-root "$2" -q \
    --json >"$2.json" 2>"$2.err" || fail "$1: $(cat "$2.err")"
  [ "$(field "$2.json" bytes_net)" = 0 ] || fail "$1: the cache was not used ($(field "$2.json" bytes_net) bytes downloaded)"
}
$MKCACHE --model "$T/src" --repo "$REPO" --commit "$COMMIT_A" --cache "$T/xdg/huggingface/hub"
(unset HF_HOME; XDG_CACHE_HOME="$T/xdg"; export XDG_CACHE_HOME; cache_reused XDG_CACHE_HOME "$T/r3a")
[ -f "$T/r3a/config.json" ] || fail "XDG_CACHE_HOME: no install"
$MKCACHE --model "$T/src" --repo "$REPO" --commit "$COMMIT_A" --cache "$T/legacy"
(HUGGINGFACE_HUB_CACHE="$T/legacy"; export HUGGINGFACE_HUB_CACHE; cache_reused HUGGINGFACE_HUB_CACHE "$T/r3b")
# HF_HUB_CACHE wins: pointed at an empty cache, the legacy one is not used
(HUGGINGFACE_HUB_CACHE="$T/legacy" HF_HUB_CACHE="$T/empty"; export HUGGINGFACE_HUB_CACHE HF_HUB_CACHE
 "$BIN" setup --full --repo "$REPO" --revision "$COMMIT_A" --endpoint "$EP" --model-root "$T/r3c" -q \
   --json >"$T/r3c.json" 2>"$T/r3c.err") || fail "HF_HUB_CACHE: $(cat "$T/r3c.err")"
[ "$(field "$T/r3c.json" bytes_net)" -gt 0 ] || fail "HUGGINGFACE_HUB_CACHE was used although HF_HUB_CACHE is set"
same "$T/r3b"

# --- 4: offline: zero requests ---
N0=$(hub_requests)
HF_HUB_OFFLINE=1 "$BIN" setup --full --repo "$REPO" --endpoint "$EP" --model-root "$T/r1" -q \
  2>"$T/o1.err" || fail "offline rerun of a complete install: $(cat "$T/o1.err")"
$MKCACHE --model "$T/src" --repo "$REPO" --commit "$COMMIT_A" --cache "$T/c4" --ref main
HF_HUB_OFFLINE=yes HF_HUB_CACHE="$T/c4" "$BIN" setup --full --repo "$REPO" --endpoint "$EP" \
  --model-root "$T/r4" -q 2>"$T/o4.err" || fail "offline install from the cache: $(cat "$T/o4.err")"
[ "$(field "$T/r4/deltafin-setup.json" commit)" = "$COMMIT_A" ] || fail "offline: refs/main not followed"
SHARD2=$(ls "$T/src" | grep safetensors$ | sed -n 2p)
$MKCACHE --model "$T/src" --repo "$REPO" --commit "$COMMIT_A" --cache "$T/c5" --ref main --skip "$SHARD2"
if HF_HUB_CACHE="$T/c5" "$BIN" setup --full --offline --repo "$REPO" --endpoint "$EP" --model-root "$T/r5" \
  -q 2>"$T/o5.err"; then fail "offline with a file missing from the cache succeeded"; fi
grep -q "offline" "$T/o5.err" && grep -q "$SHARD2" "$T/o5.err" \
  || fail "offline: the error does not name the missing $SHARD2: $(cat "$T/o5.err")"
if HF_HUB_CACHE="$T/empty" "$BIN" setup --full --offline --repo "$REPO" --revision "$COMMIT_A" \
  --endpoint "$EP" --model-root "$T/r6" -q 2>"$T/o6.err"; then fail "offline with no cache succeeded"; fi
grep -q "no snapshot of $REPO@$COMMIT_A" "$T/o6.err" || fail "offline, no cache: $(cat "$T/o6.err")"
[ "$(hub_requests)" = "$N0" ] || fail "offline setups sent $(($(hub_requests) - N0)) requests"
same "$T/r4"
# --- 5: a stream install, offline ---
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT_A" --endpoint "$EP" --model-root "$T/s1" -q \
  2>"$T/s1.err" || fail "setup --stream: $(cat "$T/s1.err")"
"$BIN" run --model "$T/s1" --prompt-ids $IDS --max-new 10 --json >"$T/s1a.json" 2>"$T/s1a.err" \
  || fail "stream run: $(cat "$T/s1a.err")"
[ "$(ids "$T/s1a.json")" = "$REF" ] || fail "stream run ids differ"
N1=$(hub_requests)
HF_HUB_OFFLINE=1 "$BIN" run --model "$T/s1" --prompt-ids $IDS --max-new 10 --json --fetch-ahead on \
  >"$T/s1b.json" 2>"$T/s1b.err" || fail "offline stream run of local experts: $(cat "$T/s1b.err")"
[ "$(ids "$T/s1b.json")" = "$REF" ] || fail "offline stream run ids differ"
"$BIN" setup --stream --repo "$REPO" --revision "$COMMIT_A" --endpoint "$EP" --model-root "$T/s2" -q \
  2>"$T/s2.err" || fail "setup --stream: $(cat "$T/s2.err")"
N1=$(hub_requests)
if HF_HUB_OFFLINE=1 "$BIN" run --model "$T/s2" --prompt-ids $IDS --max-new 10 \
  >"$T/s1c.out" 2>"$T/s1c.err"; then fail "an offline stream run with no expert local succeeded"; fi
grep -Eq "offline \(HF_HUB_OFFLINE is set\): layer [0-9]+ expert [0-9]+ is not local \(shard model-[0-9-]+of-[0-9]+\.safetensors" \
  "$T/s1c.err" || fail "offline stream run: the missing expert is not named: $(cat "$T/s1c.err")"
[ "$(hub_requests)" = "$N1" ] || fail "offline stream runs sent $(($(hub_requests) - N1)) requests"
echo "PASS: setup hubcache (revision main; blobs across commits; cache env; offline: zero requests)"

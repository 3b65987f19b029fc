#!/bin/sh
# make-model: determinism by seed, refusal without overwrite, and a disk-space
# refusal that leaves nothing behind.
set -eu
BIN=${DF_BIN:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$BIN" make-model --preset tiny --seed 7 --out "$tmp/a" 2>/dev/null
"$BIN" make-model --preset tiny --seed 7 --out "$tmp/b" 2>/dev/null
"$BIN" make-model --preset tiny --seed 8 --out "$tmp/c" 2>/dev/null
for f in "$tmp"/a/*; do
  cmp -s "$f" "$tmp/b/$(basename "$f")" || fail "seed 7 twice differs in $(basename "$f")"
done
differ=0
for f in "$tmp"/a/model-*.safetensors; do
  cmp -s "$f" "$tmp/c/$(basename "$f")" || differ=1
done
[ "$differ" = 1 ] || fail "seeds 7 and 8 wrote identical shards"

# An existing model is not overwritten without --force.
if "$BIN" make-model --preset tiny --seed 9 --out "$tmp/a" 2>"$tmp/err"; then
  fail "overwrote an existing model without --force"
fi
[ "$(wc -l <"$tmp/err")" -ge 1 ] || fail "no error line"

# Far more than any test disk: refused with the size in the message, no folder left.
if "$BIN" make-model --preset k3-shaped --moe-layers 92 --experts 896 --out "$tmp/new/deep" 2>"$tmp/err"; then
  fail "accepted a 1.4 TB model"
fi
grep -q "GB" "$tmp/err" || fail "refusal does not give sizes: $(cat "$tmp/err")"
[ ! -e "$tmp/new" ] || fail "refusal left $tmp/new behind"
echo "make-model: ok"

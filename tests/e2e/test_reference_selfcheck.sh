#!/bin/sh
# The tiny checkpoint generator is deterministic and matches the golden
# fingerprints, and the float64 reference passes its independent self-checks
# and still reproduces the goldens (tools/reference/selfcheck.py).
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
SRC=${DF_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${PYTHON:-/usr/bin/python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM

for s in 1 2 3; do
  "$DF_BIN" make-model --preset tiny --seed "$s" --out "$TMP/tiny-s$s" -q
done

# same seed twice: byte-identical directories
"$DF_BIN" make-model --preset tiny --seed 1 --out "$TMP/again" -q
for f in "$TMP"/tiny-s1/*; do
  cmp "$f" "$TMP/again/$(basename "$f")" || { echo "FAIL make-model is not deterministic: $(basename "$f")"; exit 1; }
done
echo "ok   make-model tiny is byte-identical across runs"

# an existing model is not overwritten without --force, and is with it
if "$DF_BIN" make-model --preset tiny --seed 2 --out "$TMP/again" -q 2>/dev/null; then
  echo "FAIL make-model overwrote a model without --force"; exit 1
fi
"$DF_BIN" make-model --preset tiny --seed 2 --out "$TMP/again" -q --force
cmp "$TMP/again/model-00001-of-000003.safetensors" "$TMP/tiny-s2/model-00001-of-000003.safetensors"
echo "ok   --force replaces a model"
rm -rf "$TMP/again"

exec "$PY" "$SRC/tools/reference/selfcheck.py" --models "$TMP" --golden "$SRC/tests/fixtures/golden"

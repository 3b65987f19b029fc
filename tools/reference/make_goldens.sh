#!/bin/sh
# Regenerates tests/fixtures/golden/ with the generator (deltafin make-model)
# and the float64 reference (k3_ref.py). Run after a deliberate change to the
# generator or the reference, and say why in the commit.
#   DF_BIN=build/deltafin tools/reference/make_goldens.sh
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${DF_BIN:-$SRC/build/deltafin}
PY=${PYTHON:-/usr/bin/python3}
OUT=$SRC/tests/fixtures/golden
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
mkdir -p "$OUT"
for seed in 1 2 3; do
  "$BIN" make-model --preset tiny --seed "$seed" --out "$TMP/tiny-s$seed" -q
  hidden=""
  [ "$seed" = 1 ] && hidden=short
  "$PY" "$SRC/tools/reference/golden.py" write --model "$TMP/tiny-s$seed" --preset tiny \
    --seed "$seed" --out "$OUT" --hidden-prompt "$hidden"
done
du -ch "$OUT"/*.json | tail -n 1

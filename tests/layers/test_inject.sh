#!/bin/sh
# The layer check fails when it should: on copies of the tree (README.md and
# src/) with one bad include injected each, it must exit 1 and name the file
# and line; a good include (downwards) injected the same way must still pass.
# Usage: test_inject.sh SRC_ROOT [PYTHON]
set -eu
root=$1
py=${2:-python3}
check="$root/tests/layers/check_layers.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

fresh() {
  rm -rf "$tmp/t"
  mkdir -p "$tmp/t"
  cp "$root/README.md" "$tmp/t/"
  cp -R "$root/src" "$tmp/t/src"
}

# expect_fail NAME PATTERN: the check exits 1 and its output has PATTERN.
expect_fail() {
  rc=0
  "$py" "$check" "$tmp/t" >"$tmp/out" 2>&1 || rc=$?
  if [ "$rc" != 1 ]; then
    echo "FAIL $1: the check exited $rc, not 1:"
    cat "$tmp/out"
    exit 1
  fi
  if ! grep -q -- "$2" "$tmp/out"; then
    echo "FAIL $1: no line matching '$2' in:"
    cat "$tmp/out"
    exit 1
  fi
  echo "ok $1: $(grep -- "$2" "$tmp/out" | head -n 1)"
}

# 1. the lowest layer includes the highest: base/err.h gets the CLI's header
#    after its last line, so the line number is known.
fresh
n=$(($(wc -l <"$tmp/t/src/base/err.h") + 1))
echo '#include "cli/cli.h"' >>"$tmp/t/src/base/err.h"
expect_fail base-includes-cli "^src/base/err.h:$n: base (layer 1) includes \"cli/cli.h\" of cli"

# 2. the store includes the install side again (the knot this check undid).
fresh
n=$(($(wc -l <"$tmp/t/src/store/source.c") + 1))
echo '#include "setup/install.h"' >>"$tmp/t/src/store/source.c"
expect_fail store-includes-setup "^src/store/source.c:$n: store (layer .*) includes \"setup/install.h\" of setup"

# 3. a folder placed on no layer.
fresh
mkdir -p "$tmp/t/src/newpart"
printf '#include "base/err.h"\n' >"$tmp/t/src/newpart/newpart.c"
expect_fail unplaced-folder "^src/newpart/: on no layer"

# 4. two peers on one layer (qwen3, dspark) including each other in a circle.
fresh
mkdir -p "$tmp/t/src/dspark"
printf '#include "qwen3/qwen3.h"\n' >"$tmp/t/src/dspark/dspark.h"
echo '#include "dspark/dspark.h"' >>"$tmp/t/src/qwen3/qwen3.c"
expect_fail peer-circle "in a circle: .*dspark -> qwen3 (src/dspark/dspark.h:1)"

# 5. the same kinds of edit going downwards or sideways pass.
fresh
echo '#include "base/err.h"' >>"$tmp/t/src/cli/main.c"
mkdir -p "$tmp/t/src/dspark"
printf '#include "qwen3/qwen3.h"\n#include "model/k3.h"\n' >"$tmp/t/src/dspark/dspark.h"
if ! "$py" "$check" "$tmp/t" >"$tmp/out" 2>&1; then
  echo "FAIL downward includes were refused:"
  cat "$tmp/out"
  exit 1
fi
echo "ok downward-and-peer: $(cat "$tmp/out")"

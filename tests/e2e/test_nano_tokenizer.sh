#!/bin/sh
# nano-K3's own tokenizer (models/nano-k3: tiktoken.model trained by tools/train/bpe.py, sparse
# tokenizer_config.json): deltafin's ids for the held-out text, its lines and paragraphs equal
# OpenAI's tiktoken (npm, Rust compiled to WASM, K3's pattern as published); the draft's
# tokenizer.json and the model's tokenizer files are well-formed and disjoint in vocabulary size.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
DF_SRC=${DF_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
O="$DF_SRC/tests/oracle"
JS="$O/tiktoken_oracle.js"
M="$DF_SRC/models/nano-k3"
if ! command -v node >/dev/null 2>&1 || [ ! -d "$O/node_modules/tiktoken" ]; then
  echo "FAIL: node or $O/node_modules is missing: run scripts/install-deps.sh (npm ci in tests/oracle)"
  exit 1
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/df-nano-tok.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM

node "$JS" chunks "$DF_SRC/models/corpus/eval.txt" "$T/eval.json"
"$DF_BIN" tokenize --ranks "$M/tiktoken.model" --batch "$T/eval.json" >"$T/ours.txt"
printf 'nano-k3 eval.txt: '
node "$JS" check "$M/tiktoken.model" - k3 "$T/eval.json" "$T/ours.txt"

# the model directory's tokenizer as the engine loads it: 3840 ranks, specials after them, only 16
# listed in tokenizer_config.json, <|end_of_msg|> = config.json's eos
"$DF_BIN" tokenize --model "$M" --specials "<|open|>x<|end_of_msg|>[PAD]" > "$T/sp.txt"
[ "$(cat "$T/sp.txt")" = "3843,120,3842,4095" ] || { echo "FAIL specials: $(cat "$T/sp.txt")"; exit 1; }
/usr/bin/python3 - "$M" "$DF_SRC/models/nano-draft" <<'PY'
import json, sys
m, d = sys.argv[1:3]
tc = json.load(open(f"{m}/tokenizer_config.json"))["added_tokens_decoder"]
cfg = json.load(open(f"{m}/config.json"))
assert len(tc) == 16 and min(map(int, tc)) == 3840 and max(map(int, tc)) == 4095, tc.keys()
assert tc[str(cfg["eos_token_id"])]["content"] == "<|end_of_msg|>"
assert sum(1 for _ in open(f"{m}/tiktoken.model")) == 3840
tj = json.load(open(f"{d}/tokenizer.json"))
dc = json.load(open(f"{d}/config.json"))
n = len(tj["model"]["vocab"]) + len(tj["added_tokens"])
assert n == dc["vocab_size"] == 3072 != cfg["text_config"]["vocab_size"], n
assert tj["model"]["type"] == "BPE" and len(tj["model"]["merges"]) == 2813
print("ok   tokenizer files: 16 of 256 specials listed, eos <|end_of_msg|>; draft vocab 3072 (nano-K3 4096)")
PY
echo PASS

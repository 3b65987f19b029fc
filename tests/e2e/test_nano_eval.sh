#!/bin/sh
# nano-K3 (models/nano-k3, trained): the engine's perplexity on held-out text
# equals the float64 PyTorch reference's, is far below an untrained model of
# the same architecture, and every thread count, batch split, cache size,
# drive count and prefetch mode gives the same predictions and the same
# log-likelihood to the last bit.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
SRC=${DF_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${PYTHON:-/usr/bin/python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
# a copy: the engine writes its heat file next to the model
cp -r "$SRC/models/nano-k3" "$TMP/m"
EVAL="$SRC/models/corpus/eval.txt"
field() { "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$1"; }

# 0. the training script computes what the reference computes (its recurrence, MXFP4 export, forward)
"$PY" "$SRC/tools/train/train_k3.py" --selftest | sed 's/^/     /'

# 1. engine vs the float64 reference on the same ids (384 tokens, 3 windows of 128)
"$DF_BIN" eval --model "$TMP/m" --file "$EVAL" --max-tokens 384 --ids-out "$TMP/ids" --json > "$TMP/eng.json"
"$PY" "$SRC/tools/train/ref_ppl.py" --model "$TMP/m" --ids "$TMP/ids" --threads 2 > "$TMP/ref.json"
# tolerance: 1e-4 nats/token on the mean (the engine's fp32 activations against float64; measured 1.1e-8 to 1.4e-8)
"$PY" - "$TMP/eng.json" "$TMP/ref.json" <<'PY'
import json, sys
e, r = (json.load(open(p)) for p in sys.argv[1:3])
d = abs(e["mean_nll"] - r["mean_nll"])
print(f"     engine mean nll {e['mean_nll']:.8f} (ppl {e['perplexity']:.3f}), reference {r['mean_nll']:.8f}: diff {d:.1e}")
assert e["scored"] == r["scored"] == 381, (e["scored"], r["scored"])
if d > 1e-4:
    sys.exit(f"FAIL engine perplexity differs from the reference by {d:.2e} nats/token (tolerance 1e-4)")
PY
echo "ok   engine perplexity == float64 reference within 1e-4 nats/token"

# 2. far below an untrained model of the same architecture and vocabulary
"$PY" "$SRC/tools/train/train_k3.py" --init-only --tokenizer "$TMP/m" --out "$TMP/rand" --work "$TMP/w"
"$DF_BIN" eval --model "$TMP/rand" --file "$EVAL" --max-tokens 384 --json > "$TMP/rand.json"
"$PY" - "$TMP/eng.json" "$TMP/rand.json" <<'PY'
import json, sys
e, r = (json.load(open(p)) for p in sys.argv[1:3])
print(f"     trained ppl {e['perplexity']:.2f}, untrained ppl {r['perplexity']:.1f} (uniform: 4096)")
if not e["perplexity"] * 20 < r["perplexity"]:
    sys.exit("FAIL the trained model is not 20x below the untrained one in perplexity")
PY
echo "ok   trained perplexity is more than 20x below the untrained model's"

# 3. the same predictions and log-likelihood for every configuration
"$DF_BIN" pack --model "$TMP/m" --drives "$TMP/d1,$TMP/d2" --manifest "$TMP/pack.json" -q
base=""
for cfg in "--threads 1" "--threads 2" "--prefill-chunk 1 --threads 2" "--prefill-chunk 7" \
    "--cache-mb 1" "--cache-mb 1 --prefetch off" "--cache-mb 1 --prefetch gate" \
    "--cache-mb 1 --prefetch prev" "--cache-mb 1 --prefetch auto --emulate-drives 200MB/s" \
    "--store $TMP/pack.json --cache-mb 1" "--store $TMP/pack.json --cache-mb 1 --prefetch gate --emulate-drives 100MB/s"; do
  # shellcheck disable=SC2086
  out=$("$DF_BIN" eval --model "$TMP/m" --file "$EVAL" --max-tokens 192 --window 96 --json $cfg)
  got="$(echo "$out" | field argmax_digest) $(echo "$out" | field nll_sum)"
  if [ -z "$base" ]; then base=$got; fi
  if [ "$got" != "$base" ]; then
    echo "FAIL eval with $cfg: $got, expected $base"; exit 1
  fi
done
echo "ok   eval digest and nll identical over threads, batch split, cache size, drives and prefetch ($base)"

# generation from a held-out prompt: the same ids everywhere too
prompt=$(head -c 2200 "$EVAL" | tail -c 300)
gbase=""
for cfg in "--threads 1" "--threads 2 --cache-mb 1 --prefetch gate" "--store $TMP/pack.json --cache-mb 1 --prefetch auto"; do
  # shellcheck disable=SC2086
  ids=$("$DF_BIN" run --model "$TMP/m" --prompt "$prompt" --max-new 24 --json $cfg | field output_ids)
  if [ -z "$gbase" ]; then gbase=$ids; fi
  [ "$ids" = "$gbase" ] || { echo "FAIL run with $cfg: $ids, expected $gbase"; exit 1; }
done
echo "ok   run gives the same 24 ids for every configuration"

# bad input: clear errors naming what is wrong, exit 1
if "$DF_BIN" eval --model "$TMP/m" --file "$TMP/missing.txt" 2>"$TMP/err"; then echo "FAIL eval of a missing file succeeded"; exit 1; fi
grep -q "missing.txt" "$TMP/err" || { echo "FAIL the error does not name the file: $(cat "$TMP/err")"; exit 1; }
printf 'a' > "$TMP/one.txt"
if "$DF_BIN" eval --model "$TMP/m" --file "$TMP/one.txt" 2>"$TMP/err"; then echo "FAIL eval of 1 token succeeded"; exit 1; fi
grep -q "nothing to score" "$TMP/err" || { echo "FAIL: $(cat "$TMP/err")"; exit 1; }
echo "ok   eval refuses a missing file and a text of one token"

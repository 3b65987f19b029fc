#!/bin/sh
# The expert store on the trained nano-K3: cache hit rate against cache size, prefetch modes,
# gate-ahead / previous-token recall per layer and what --prefetch auto switches on, for a
# held-out prompt (models/corpus/eval.txt, lines LINES) and NEW greedy tokens, one emulated drive.
# Prints one JSON line per run.
# usage: measure_store.sh DELTAFIN [EMU (default 1GB/s)] [LINES (default 8,22: 261 tokens)] [NEW (default 64)]
set -eu
BIN=$1
EMU=${2:-1GB/s}
LINES=${3:-8,22}
NEW=${4:-64}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
cp -r "$SRC/models/nano-k3" "$TMP/m"
P=$(sed -n "${LINES}p" "$SRC/models/corpus/eval.txt")
for cache in 1 2 3 4 8; do
  for pf in off gate prev auto; do
    "$BIN" run --model "$TMP/m" --prompt "$P" --max-new "$NEW" --json --cache-mb $cache --prefetch $pf \
      --emulate-drives "$EMU" --heat "" --threads 2 |
      python3 -c '
import json, sys
d = json.load(sys.stdin); s = d["stats"]; st = s["store"]; p = st["predictors"]
r = lambda v: None if v is None else round(v, 3)
print(json.dumps({"n_prompt": s["n_prompt"], "n_gen": s["n_gen"], "cache_mb": int(sys.argv[1]), "prefetch": sys.argv[2], "hit_rate": r(st["cache_hit_rate"]),
  "decode_tok_s": r(s["decode_tok_s"]), "prefill_tok_s": r(s["prefill_tok_s"]), "wait_s": r(st["wait_seconds"]),
  "read_mb": round(st["expert_bytes_read"] / 1e6, 2), "prefetch_wasted_mb": round(st["prefetch_wasted_bytes"] / 1e6, 2),
  "gate_recall": [r(x) for x in p["gate"]["recall_per_layer"]], "gate_on": p["gate"]["on_per_layer"],
  "prev_recall": [r(x) for x in p["prev"]["recall_per_layer"]], "prev_on": p["prev"]["on_per_layer"],
  "ids_head": d["output_ids"][:8]}))' $cache $pf
  done
done

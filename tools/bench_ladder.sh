#!/bin/sh
# Drive ladder on EMULATED drives: the same expert-bound run with the experts
# packed onto 1, 2, 3 and 4 drives, each drive throttled in the store to
# BW (default 150MB/s, latency 0.1ms) -- far below the real disk, so the
# numbers measure the store's scheduling over N drives, not this machine's disk.
#
# usage: tools/bench_ladder.sh [WORKDIR] (env: DF_BIN, BW, TOKENS, MAXN,
#        REPLICAS = --replicas-hot percentage for 2+ drives, default 0,
#        PREFETCH = --prefetch mode, default auto, SPLIT = --split-reads, default auto)
# "vs 1 drive" compares decode tokens/s; with prefetch on, "expert MB/s" also
# counts speculative reads that were wasted (the last column).
# The model is a k3-shaped checkpoint (K3's real 17.5 MB experts, 2 MoE
# layers x 32 experts, top-16), so a decode token reads 32 experts = 561 MB
# with --cache-mb 0.
set -eu
BIN=${DF_BIN:-build/deltafin}
W=${1:-/tmp/df_ladder}
BW=${BW:-150MB/s,0.1ms}
TOKENS=${TOKENS:-4}
MAXN=${MAXN:-4}
REPLICAS=${REPLICAS:-0}
PREFETCH=${PREFETCH:-auto}
SPLIT=${SPLIT:-auto}
mkdir -p "$W"
M="$W/m"
if [ ! -f "$M/config.json" ]; then
  "$BIN" make-model --preset k3-shaped --moe-layers 2 --experts 32 --seed 1 --out "$M" -q
fi
n=1
while [ "$n" -le "$MAXN" ]; do
  P="$W/pack$n-r$REPLICAS.json"
  [ "$n" -gt 1 ] || P="$W/pack1-r0.json"
  if [ ! -f "$P" ]; then
    drives=""
    i=0
    while [ "$i" -lt "$n" ]; do
      drives="$drives${drives:+,}$W/n$n-r$REPLICAS-d$i"
      i=$((i + 1))
    done
    rep=$REPLICAS
    [ "$n" -gt 1 ] || rep=0
    "$BIN" pack --model "$M" --drives "$drives" --replicas-hot "$rep" --manifest "$P" -q
  fi
  n=$((n + 1))
done
echo "drive ladder, EMULATED drives at $BW each; hot replicas $REPLICAS% (2+ drives); $TOKENS decode tokens, --cache-mb 0 --prefetch $PREFETCH --split-reads $SPLIT"
echo "command: $BIN run --model $M --store $W/packN-r$REPLICAS.json --prompt-ids 1,2,3,4 --max-new $TOKENS --cache-mb 0 --prefetch $PREFETCH --split-reads $SPLIT --emulate-drives $BW --json"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null) on $(nproc 2>/dev/null) cores"
printf "%-7s %12s %12s %10s %10s %10s %s\n" drives "expert MB/s" "decode tok/s" "vs 1 drive" "ids" "splits" "per-drive MB, wasted MB"
base=""
n=1
while [ "$n" -le "$MAXN" ]; do
  P="$W/pack$n-r$REPLICAS.json"
  [ "$n" -gt 1 ] || P="$W/pack1-r0.json"
  "$BIN" run --model "$M" --store "$P" --prompt-ids 1,2,3,4 --max-new "$TOKENS" \
    --cache-mb 0 --prefetch "$PREFETCH" --split-reads "$SPLIT" --emulate-drives "$BW" --json >"$W/run$n.json"
  line=$(python3 - "$W/run$n.json" "$base" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
st = d["stats"]; s = st["store"]
t = st["prefill_s"] + st["decode_s"]
mbs = s["expert_bytes_read"] / 1e6 / t
tps = st["n_gen"] / st["decode_s"] if st["decode_s"] > 0 else 0
base = float(sys.argv[2]) if sys.argv[2] else tps
per = "/".join("%.0f" % (x["bytes"] / 1e6) for x in s["drives"])
ids = ",".join(map(str, d["output_ids"]))
print("%.1f %.3f %.2fx %s %d %s,%.0f" % (mbs, tps, tps / base, ids, s["split_reads"], per,
                                         s["prefetch_wasted_bytes"] / 1e6))
EOF
)
  set -- $line
  [ -n "$base" ] || base=$2
  printf "%-7s %12s %12s %10s %10s %10s %s\n" "$n" "$1" "$2" "$3" "$4" "$5" "$6"
  n=$((n + 1))
done

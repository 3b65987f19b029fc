#!/bin/sh
# Drive ladder on EMULATED drives: the same expert-bound run with the experts
# packed onto 1, 2, 3 and 4 drives, each drive throttled in the store to
# BW (default 150MB/s, latency 0.1ms) -- far below the real disk, so the
# numbers measure the store's scheduling over N drives, not this machine's disk.
#
# usage: tools/bench_ladder.sh [WORKDIR] (env: DF_BIN, BW, TOKENS, MAXN,
#        REPLICAS = --replicas-hot percentage for 2+ drives, default 0,
#        PREFETCH = --prefetch mode, default auto, SPLIT = --split-reads, default auto,
#        PRESET = make-model preset, default k3-shaped (e.g. small for a quick look),
#        CHART = the ladder chart, default WORKDIR/PRESET/ladder.svg,
#        REPORTS = 1: also each step's trace report, WORKDIR/PRESET/runN.html)
# The chart draws decode tokens/s and expert MB/s against the number of
# drives, each with the linear ideal (N x the 1-drive value).
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
PRESET=${PRESET:-k3-shaped}
REPORTS=${REPORTS:-0}
mkdir -p "$W"
M="$W/m"
[ "$PRESET" = k3-shaped ] || M="$W/m-$PRESET"
if [ ! -f "$M/config.json" ]; then
  if [ "$PRESET" = k3-shaped ]; then
    "$BIN" make-model --preset k3-shaped --moe-layers 2 --experts 32 --seed 1 --out "$M" -q
  else
    "$BIN" make-model --preset "$PRESET" --seed 1 --out "$M" -q
  fi
fi
[ "$PRESET" = k3-shaped ] || W="$W/$PRESET"
mkdir -p "$W"
CHART=${CHART:-$W/ladder.svg}
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
  tr=""
  [ "$REPORTS" != 1 ] || tr="--trace $W/run$n.trace.jsonl"
  # shellcheck disable=SC2086
  "$BIN" run --model "$M" --store "$P" --prompt-ids 1,2,3,4 --max-new "$TOKENS" \
    --cache-mb 0 --prefetch "$PREFETCH" --split-reads "$SPLIT" --emulate-drives "$BW" --json $tr >"$W/run$n.json"
  if [ "$REPORTS" = 1 ]; then
    "$BIN" trace report "$W/run$n.trace.jsonl" --html "$W/run$n.html" --svg "$W/run$n.svg" >/dev/null
  fi
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
n=$((n - 1))
# the chart: one row per step from the runs' JSON
python3 - "$CHART" "$BW" "$TOKENS" "$PRESET" "$W" "$n" <<'EOF'
import json, math, os, sys
chart, bw, tokens, preset, w, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
rows = []
for k in range(1, n + 1):
    d = json.load(open(os.path.join(w, "run%d.json" % k)))
    st = d["stats"]; s = st["store"]
    t = st["prefill_s"] + st["decode_s"]
    rows.append((k, st["n_gen"] / st["decode_s"] if st["decode_s"] > 0 else 0,
                 s["expert_bytes_read"] / 1e6 / t))
def esc(x):
    return x.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
def nice(v):
    if v <= 0:
        return 1
    p = 10 ** math.floor(math.log10(v / 4)); f = v / 4 / p
    return (1 if f <= 1 else 2 if f <= 2 else 5 if f <= 5 else 10) * p
PW, PH, L, T = 360, 240, 70, 70
out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="DejaVu Sans, Arial, sans-serif" font-size="11">' % (2 * (PW + L + 30) + 10, PH + T + 70),
       '<rect width="100%" height="100%" fill="white"/>',
       '<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>' % (L, esc("Drive ladder, EMULATED drives at %s each" % bw)),
       '<text x="%d" y="36" fill="#444">%s</text>' % (L, esc("%s model, %s decode tokens, --cache-mb 0; single runs on this machine, not medians" % (preset, tokens)))]
for p, (name, unit, col) in enumerate((("decode tokens/s", "tok/s", "#0072B2"), ("expert read MB/s", "MB/s", "#D55E00"))):
    x0 = L + p * (PW + L + 30)
    vals = [r[1 + p] for r in rows]
    ideal = [vals[0] * r[0] for r in rows]
    ymax = max(vals + ideal) * 1.1 or 1
    st = nice(ymax)
    X = lambda k: x0 + (k - 0.5) / n * PW
    Y = lambda v: T + PH - v / ymax * PH
    out.append('<text x="%d" y="%d" font-weight="bold">%s</text>' % (x0, T - 10, esc(name)))
    out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#000" stroke-dasharray="5,3"/><text x="%d" y="%d">linear ideal (N x 1 drive)</text>' % (x0 + 160, x0 + 180, T - 14, T - 14, x0 + 185, T - 10))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (x0, T, PW, PH))
    v = 0
    while v <= ymax:
        out.append('<g class="ytick"><line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e4e4e4"/><text x="%d" y="%.1f" text-anchor="end">%g%s</text></g>' % (x0, x0 + PW, Y(v), Y(v), x0 - 6, Y(v) + 4, round(v, 6), " " + unit if v + st > ymax else ""))
        v += st
    for r in rows:
        k = r[0]; val = r[1 + p]
        out.append('<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>' % (X(k) - PW / n * 0.3, Y(val), PW / n * 0.6, Y(0) - Y(val), col))
        out.append('<text x="%.1f" y="%.1f" text-anchor="middle" fill="%s">%.3g</text>' % (X(k), Y(val) + 14 if Y(0) - Y(val) > 20 else Y(val) - 4, "white" if Y(0) - Y(val) > 20 else "black", val))
        out.append('<g class="xtick"><text x="%.1f" y="%d" text-anchor="middle">%d</text></g>' % (X(k), T + PH + 15, k))
    out.append('<polyline class="ideal" fill="none" stroke="#000" stroke-dasharray="5,3" points="%s"/>' % " ".join("%.1f,%.1f" % (X(r[0]), Y(i)) for r, i in zip(rows, ideal)))
    out.append('<text x="%d" y="%d" text-anchor="middle">drives</text>' % (x0 + PW // 2, T + PH + 32))
out.append('<text x="%d" y="%d" fill="#444">%s</text>' % (L, T + PH + 55, esc("expert MB/s = expert bytes read / (prefill + decode time)")))
out.append('</svg>')
tmp = chart + ".tmp"
open(tmp, "w").write("\n".join(out) + "\n")
os.replace(tmp, chart)
print("chart: %s" % chart)
EOF

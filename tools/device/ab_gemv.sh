#!/bin/bash
# Kernel changes measured against each other on the GPU machine: every
# out/mb/<name>.xz (an xz-compressed deltafin-cuda-bench, which links only
# libc and libstdc++, so nothing else travels) is run on the same shapes,
# the binaries alternated ROUNDS times so that a drift of the card's clocks
# shows as disagreement between rounds rather than as a difference between
# binaries. Results in $OUT/ab.tgz (ab/, or NAME: <name>_<round>.json, machine.txt,
# and with SASS=<regex of a mangled kernel name> that kernel's SASS and
# resource usage from each binary), a summary line a measurement on stdout.
#   ONLY: the shapes (DF_BENCH_GEMV_ONLY, a substring of the bench's shape
#   names; "" for every shape), default "16 experts"
#   FORMAT: the formats too (DF_BENCH_GEMV_FORMAT: bf16, int8 or mxfp4;
#   default every one)
#   KINDS: the kernels too (DF_BENCH_GEMV_KINDS: the bench's kind names,
#   comma-separated, "tiled,tiled_pdl" say; default every one)
#   H200_ONLY: where the card is an H200, also that filter on the first
#   binary (the int8 shapes' share on an H200, say); skipped elsewhere
#   BINS: a glob of the names to run (default every one); NAME: the
#   results' folder and archive (default ab)
#   out/mb/<name>.env (a line VAR=value): that binary's run in that
#   environment too, so one binary can be measured as two (a kernel's
#   switch on and off, say: name.xz and name_off.xz -> the same file)
# Usage (device): ROUNDS=2 bash tools/device/ab_gemv.sh out/mb
set -u
M=$(cd "${1:-out/mb}" && pwd)
ONLY=${ONLY-16 experts}
ROUNDS=${ROUNDS:-2}
NAME=${NAME:-ab}
A=$OUT/$NAME
mkdir -p "$A"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv > "$A/machine.txt" 2>&1
cat "$A/machine.txt"
T=$(mktemp -d)
names=()
for f in "$M"/${BINS:-*}.xz; do
  n=$(basename "$f" .xz)
  xz -dc "$f" > "$T/$n" && chmod +x "$T/$n" && names+=("$n")
done
# one line a measurement: binary, round, shape, kernel, share of the copy
summary() {
  python3 -c '
import json, sys
for p in sys.argv[1:]:
    try:
        d = json.load(open(p))
    except Exception as e:
        print(p, "unreadable:", e); continue
    for g in d.get("gemv", []):
        if g: print("%-28s %-34s %-36s %.3f" % (p.rsplit("/", 1)[1], g["shape"], g["kernel"], g["of_copy"]))
    m = d.get("moe_layer_one_token")
    if m: print(p.rsplit("/", 1)[1], "moe_layer_one_token", json.dumps(m)[:300])
' "$@"
}
for r in $(seq "$ROUNDS"); do
  for n in "${names[@]}"; do
    echo "[$(date +%T)] $n, round $r"
    envs=()
    [ -f "$M/$n.env" ] && read -r -a envs < "$M/$n.env"
    env "${envs[@]}" DF_BENCH_GEMV_ONLY="$ONLY" DF_BENCH_GEMV_FORMAT="${FORMAT:-}" DF_BENCH_GEMV_KINDS="${KINDS:-}" timeout 200 "$T/$n" 200 > "$A/${n}_$r.json" 2> "$A/${n}_$r.err"
    echo "rc=$?" >> "$A/${n}_$r.err"
  done
done
if [ -n "${H200_ONLY+x}" ] && grep -q H200 "$A/machine.txt"; then
  echo "[$(date +%T)] H200: ${names[0]} on \"$H200_ONLY\""
  DF_BENCH_GEMV_ONLY="$H200_ONLY" timeout 300 "$T/${names[0]}" 200 > "$A/h200_${names[0]}.json" 2> "$A/h200.err"
fi
if [ -n "${SASS:-}" ]; then
  CUOBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  for n in "${names[@]}"; do
    "$CUOBJ" -sass "$T/$n" 2>&1 | awk -v re="$SASS" '/Function :/ { keep = ($0 ~ re) } keep' > "$A/$n.sass"
    # registers, shared memory and spills of the same kernels
    "$CUOBJ" -res-usage "$T/$n" 2>&1 | grep -A1 -E "$SASS" > "$A/$n.res"
  done
fi
summary "$A"/*.json
rm -rf "$T"
# one file back (a call returns a limited number of files)
cd "$OUT" && tar czf "$NAME.tgz" "$NAME" && rm -rf "$NAME"

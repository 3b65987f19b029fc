#!/bin/bash
# Issue 21's open measurements in one device call, most needed first for the
# card that came, each step started only while BUDGET seconds (default 540:
# a call's 600 less the margin) leave room for it, so a short lease still
# brings back what matters most. Device leases have been scarce (a failed
# start costs 90-180 s of a session's 1800), so this is the one command to
# run when one comes:
#   bash tools/device/bundle.sh build-cuda out/gpu        (on the VM)
#   bash tools/device/gemv_aim_gpuhost.sh out/gpu         (device, out/gpu carried)
# H200: int8's GEMVs with the pick against the variants it chooses between
# (the aim's one unmeasured format there), then the engine's and kernels'
# GPU tests; H100: the tests first (the pick of bdaffe8 has not run in the
# engine on a GPU), then every format's pick against those variants. Then,
# either card, the SASS of MXFP4's grouped kernels and the whole bench.
# Results: $OUT/*.tgz (ab_gemv.sh's and gpu_forward_gpuhost.sh's folders,
# packed here also when a step's timeout cut their own packing short), and
# $OUT/plan.txt (which steps ran, which did not fit).
set -u
D=${1:-out/gpu}
BUDGET=${BUDGET:-540}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -e "$D/deltafin-cuda-bench" ] || tar xJf "$D/bin.tar.xz" -C "$D"
MB=$(mktemp -d)
xz -0 -c "$D/deltafin-cuda-bench" > "$MB/bench.xz"
# the pick (tiled), the old pick's narrow forms and variant 7, each plain
# and as a dependent launch where the engine launches them so
KINDS=tiled,tiled_pdl,tiled_2stages_pdl,tiled_3stages_pdl,tiled_wide_5stages_4threads,tiled_wide_5stages_4threads_pdl
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/plan.txt"; }
# step NEED LIMIT NAME CMD...: run CMD under LIMIT seconds when NEED more
# seconds fit in the budget, otherwise say it did not fit
step() {
  local need=$1 limit=$2 name=$3
  shift 3
  if [ $((SECONDS + need)) -gt "$BUDGET" ]; then
    log "$name: skipped, ${need}s would not fit in the ${BUDGET}s budget"
    return
  fi
  log "$name"
  timeout "$limit" bash -c '"$@"' step "$@" # the functions below, exported
  log "$name: rc=$?"
}
tests() { STEPS="$1" bash "$HERE/gpu_forward_gpuhost.sh" "$D" && mv "$OUT/r.tgz" "$OUT/r_$2.tgz"; }
ab() { KINDS=$KINDS ONLY="" ROUNDS=2 NAME=$1 FORMAT=${2:-} SASS=${3:-} bash "$HERE/ab_gemv.sh" "$MB"; }
abx() { KINDS=tiled,tiled_pdl ONLY="16 experts" ROUNDS=2 NAME=mxfp4_ab FORMAT=mxfp4 SASS=$MXSASS bash "$HERE/ab_gemv.sh" "$AB"; }
whole() { STEPS=gbench bash "$HERE/gpu_forward_gpuhost.sh" "$D" && mv "$OUT/r.tgz" "$OUT/r_bench.tgz"; }
export -f tests ab abx whole
# the SASS kept: MXFP4's grouped kernels
MXSASS='tile_group_k.*mxfp4'
export D HERE MB KINDS AB MXSASS
log "card: $(nvidia-smi -L | head -1)"
# the cards differ only in what comes first: on an H200, int8's measurement
if nvidia-smi -L | grep -q H200; then
  step 90 120 "int8, pick against variants (H200)" ab int8_h200 int8
fi
# AB=<folder of *.xz benches> (ab_gemv.sh's out/mb): MXFP4's kernels
# against each other on the MoE token and the 16 experts' shapes
[ -n "${AB:-}" ] && step 100 160 "MXFP4, the binaries in $AB against each other" abx
step 120 200 "engine and kernel tests" tests "test kern" tests
step 120 180 "every format, pick against variants" ab all "" "$MXSASS"
step 150 200 "whole bench" whole
# a step cut by its timeout leaves its folder unpacked: pack it here
cd "$OUT" && for d in r int8_h200 mxfp4_ab all; do
  [ -d "$d" ] && tar czf "$d.cut.tgz" "$d" && rm -rf "$d"
done
ls -l "$OUT" | tee -a "$OUT/plan.txt"
rm -rf "$MB"

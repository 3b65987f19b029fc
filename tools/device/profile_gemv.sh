#!/bin/bash
# Nsight Compute on the GPU machine (its CUDA toolkit has ncu and cuobjdump):
# the row-tile GEMVs of deltafin-cuda-bench, profiled one launch at a time,
# and the SASS of the bench's kernels. Run there from the repository root
# with out/gpu carried (tools/device/bundle.sh); results in $OUT/p.tgz.
#   PICK: "name skip" pairs, each a launch of the kernels whose demangled
#   name matches regex name, after skipping that many of them. With the
#   bench run as `deltafin-cuda-bench 1` (one repetition), the MXFP4
#   single launches (tile_k, variant 12: the medium form, 2 stages) come
#   in this order: 144 of the MoE layer launched expert by expert, 6 of its
#   chain of two single launches, 65 of one expert's gate, 65 of its down,
#   7 of 16 experts' gate+up (98304 x 3584), 11 of their down (57344 x
#   3072); so skip 280 is the first gate+up of the 16 experts and 287 their
#   first down. The MoE token's grouped launches are tile_group_k's: 6 of
#   its 48 allocations, then 6 of its one allocation a kind.
set -u
D=$(cd "${1:-out/gpu}" && pwd)
# the bench links only libc and libstdc++ (no carried libraries needed)
[ -e "$D/deltafin-cuda-bench" ] || tar xJf "$D/bin.tar.xz" -C "$D"
P=$OUT/p; mkdir -p "$P"
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
PICK=${PICK:-"tile_k<(tf_wide<)?tf_mxfp4 280 tile_k<(tf_wide<)?tf_mxfp4 287"}
set -- $PICK
i=0
while [ $# -ge 2 ]; do
  echo "[$(date +%T)] ncu: $1, skip $2" | tee -a "$P/log.txt"
  timeout 240 "$NCU" --kernel-name-base demangled -k "regex:$1" --launch-skip "$2" \
    --launch-count 1 --set full "$D/deltafin-cuda-bench" 1 > "$P/ncu_$i.txt" 2>&1
  echo "rc=$?" >> "$P/ncu_$i.txt"
  i=$((i + 1)); shift 2
done
CUOBJ=$(dirname "$NCU")/cuobjdump
[ -x "$CUOBJ" ] || CUOBJ=/usr/local/cuda/bin/cuobjdump
# the MXFP4 kernels' SASS only: the whole binary's is 160 MB of text, whose
# compression outlasted run 33's call
"$CUOBJ" -sass "$D/deltafin-cuda-bench" 2>&1 | awk '/Function :/ { keep = /tf_mxfp4/ } keep' |
  xz -2 > "$P/sass.txt.xz"
cd "$OUT" && tar czf p.tgz p && rm -rf p

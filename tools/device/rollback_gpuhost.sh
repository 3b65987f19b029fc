#!/bin/bash
# The two rollbacks (--draft-rollback recompute | rows) side by side on a
# k3-trunk (every real dimension, 8 layers, 16 experts per layer) on the GPU
# host's 16 CPU cores. Rejections come from the self draft under sampling
# (the target's greedy proposal accepted with the target's probability of
# it, df_sample_verify), so the blocks are the same for both rollbacks and
# only the undoing differs. Packaging as in spec_gpuhost.sh; $OUT/r.tgz.
set -u
D=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$D/../.." && pwd)
export LD_LIBRARY_PATH=$SRC/out/gh/lib
B=$SRC/out/gh/deltafin
R=$OUT/r; mkdir -p "$R"
W=/tmp/dfspec; mkdir -p $W; cd $W
[ -d t8 ] || $B make-model --preset k3-trunk --layers 8 --experts 16 --out t8 -q
for t in 0.02 0.1; do
  for k in 4 8; do
    for rb in recompute rows; do
      $B run --model t8 --prompt-ids 1,2,3,4,5,6,7,8 --max-new 32 --json --heat "" --threads 16 \
        --draft self --draft-max $k --temperature $t --seed 7 --draft-rollback $rb \
        > "$R/self_t${t}_k${k}_$rb.json" 2> "$R/self_t${t}_k${k}_$rb.err"
    done
  done
done
uptime > "$R/uptime.txt"
cd "$OUT" && tar czf r.tgz r && rm -rf r

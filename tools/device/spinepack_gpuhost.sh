#!/bin/bash
# The pack's spine section on the GPU host's 16 cores: k3-trunk, 4 layers,
# spine larger than --mem-limit, two EMULATED drives (both on the host's one
# virtio disk, so each is emulated well below that disk's ~1.7 GB/s).
# Packaging as in spine_gpuhost.sh; results in $OUT/r.tgz.
set -u
D=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$D/lib
B=$D/deltafin
R=$OUT/r; mkdir -p "$R"
W=/tmp/dfgh4; mkdir -p $W; cd $W
[ -d t4 ] || $B make-model --preset k3-trunk --layers 4 --experts 16 --out t4 -q
$B pack --model t4 --drives $W/d0,$W/d1 --spine bf16 --heat "" -q > "$R/pack.log" 2>&1
$B pack --model t4 --drives $W/e0,$W/e1 --heat "" --manifest $W/experts_only.json -q > "$R/pack2.log" 2>&1
bench() { local out=$1; shift; timeout 200 $B bench --model t4 --prompt-tokens 4 --new-tokens 4 --repeat 2 \
  --mem-limit 6G --threads 16 --emulate-drives 600MB/s "$@" > "$R/$out.txt" 2>&1; }
bench pack_section
bench experts_only_2drives --store $W/experts_only.json --repeat 1
bench shards_1drive --no-pack --repeat 1
uptime > "$R/uptime.txt"
cd "$OUT" && tar czf r.tgz r && rm -rf r

#!/bin/bash
# Issue 19's measurements on the GPU host's 16 CPU cores (a quiet machine):
#  1. tools/bench_spec.sh: nano-K3 with n-gram, auto and the Qwen3 nano-draft,
#     text and chat, cold and warm experts, one and four EMULATED drives;
#  2. the two rollbacks side by side on a k3-trunk (every real dimension,
#     8 layers, 16 experts per layer): --draft-rollback recompute and rows,
#     n-gram drafts on a repetitive prompt, K 2, 4, 8.
# Packaging as in spine_gpuhost.sh (out/gh with deltafin and its libraries,
# plus this repo's tools/ and models/); results in $OUT/r.tgz.
set -u
D=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$D/../.." && pwd)
export LD_LIBRARY_PATH=$SRC/out/gh/lib
B=$SRC/out/gh/deltafin
R=$OUT/r; mkdir -p "$R"
W=/tmp/dfspec; mkdir -p $W
lscpu | grep -E 'Model name|^CPU\(s\)|L3' > "$R/cpu.txt"; free -g >> "$R/cpu.txt"
NEW=48 timeout 200 sh "$SRC/tools/bench_spec.sh" "$B" $W/nano > "$R/bench_spec.txt" 2>&1
cd $W
[ -d t8 ] || $B make-model --preset k3-trunk --layers 8 --experts 16 --out t8 -q
P=$(python3 -c "print(','.join(str(x) for x in ([5,17,29,41,53,65,77,89]*6)))")
for k in 2 4 8; do
  for rb in recompute rows; do
    $B run --model t8 --prompt-ids "$P" --max-new 32 --json --heat "" --threads 16 \
      --draft ngram --draft-max $k --draft-rollback $rb > "$R/trunk_k${k}_$rb.json" 2> "$R/trunk_k${k}_$rb.err"
  done
done
$B run --model t8 --prompt-ids "$P" --max-new 32 --json --heat "" --threads 16 --draft off > "$R/trunk_off.json" 2>&1
uptime >> "$R/cpu.txt"
cd "$OUT" && tar czf r.tgz r && rm -rf r

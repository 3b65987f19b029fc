#!/bin/bash
# Issue 11's per-part compute and spine bench on the GPU host's CPU (16 cores).
# The device has no package archive, so the binary travels with its shared
# libraries: on the VM,
#   mkdir -p out/gh/lib && cp build-rel/deltafin tools/device/spine_gpuhost.sh out/gh/ &&
#   ldd build-rel/deltafin | awk '/=> \//{print $3}' | grep -v -E '/libc.so|/libm.so|/libresolv' |
#     xargs -I{} cp -L {} out/gh/lib/
# then run `bash out/gh/spine_gpuhost.sh` there with out/gh carried; results in $OUT/r.tgz.
# The outputs of 2026-12-01 are in docs/data/gpuhost-2026-12-01/.
set -u
D=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$D/lib
B=$D/deltafin
R=$OUT/r; mkdir -p "$R"
W=/tmp/dfgh; mkdir -p $W; cd $W
lscpu | grep -E 'Model name|^CPU\(s\)|L3' > "$R/cpu.txt"; free -g >> "$R/cpu.txt"
[ -d t8 ] || $B make-model --preset k3-trunk --layers 8 --experts 16 --out t8 -q
[ -d t8i8 ] || $B convert-spine --model t8 --out t8i8 --threads 16 -q
run() { local out=$1; shift; $B run --model t8 --prompt-ids 1,2,3 --max-new 6 --json "$@" > "$R/$out.json"; }
run bf16_t16 --threads 16
run bf16_t1 --threads 1
run bf16_t16_mem8G --threads 16 --mem-limit 8G
run int8_t16 --threads 16 --spine int8 --spine-dir t8i8
run int8_t1 --threads 1 --spine int8 --spine-dir t8i8
run int8_t16_mem4G --threads 16 --spine int8 --spine-dir t8i8 --mem-limit 4G
bench() { local out=$1; shift; timeout 300 $B bench --model t8 --prompt-tokens 4 --new-tokens 4 --repeat 2 \
  --mem-limit 6.3G --threads 16 --json "$@" > "$R/$out.json"; }
bench bench_real_disk
bench bench_emulated_1GBps --emulate-drives 1GB/s
uptime >> "$R/cpu.txt"
cd "$OUT" && tar czf r.tgz r && rm -rf r

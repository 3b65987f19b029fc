#!/bin/bash
# Issue 21's CUDA kernels on the GPU machine: the bit-identity test against
# the scalar reference, the kmath.h check against this host's libm, and the
# GEMV bandwidth bench. Built on the VM with -DDF_CUDA=ON (static CUDA
# runtime: only the driver's libcuda is needed there); the binaries travel
# with their shared libraries:
#   cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DDF_CUDA=ON
#   cmake --build build-cuda -j2
#   mkdir -p out/cuda/lib && cp build-cuda/{deltafin,test_cuda_kernels,cuda_host_kmath,deltafin-cuda-bench} \
#     tools/device/cuda_gpuhost.sh out/cuda/ &&
#   ldd build-cuda/deltafin | awk '/=> \//{print $3}' | grep -v -E '/libc.so|/libm.so|/libresolv' |
#     xargs -I{} cp -L {} out/cuda/lib/ &&
#   (cd out/cuda && tar cJf lib.tar.xz lib && rm -rf lib)   # the carry limit is 64 MiB with the tree
# then `bash out/cuda/cuda_gpuhost.sh` there with out/cuda carried; results in $OUT/r/.
# The outputs of 2026-12-01 are in docs/data/cuda-2026-12-01/.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$D/lib
if [ ! -d "$L" ]; then L=/tmp/dfcuda-lib; mkdir -p $L && tar xJf "$D/lib.tar.xz" -C $L --strip-components=1; fi
export LD_LIBRARY_PATH=$L
R=$OUT/r; mkdir -p "$R"
{ nvidia-smi; lscpu | grep -E 'Model name|^CPU\(s\)'; ldd --version | head -1; } > "$R/machine.txt" 2>&1
"$D/deltafin" --version > "$R/version.txt" 2>&1
{ "$D/deltafin" run --device cuda --model /nonexistent; "$D/deltafin" run --device cuda:7 --model /nonexistent
  "$D/deltafin" run --device tpu --model /nonexistent; } > "$R/device_option.txt" 2>&1
{ time timeout 300 "$D/test_cuda_kernels"; echo "rc=$?"; } > "$R/test_cuda_kernels.txt" 2>&1
{ time timeout 120 "$D/cuda_host_kmath" "${KMATH_STEP:-7}"; echo "rc=$?"; } > "$R/host_kmath.txt" 2>&1
timeout 200 "$D/deltafin-cuda-bench" 200 > "$R/bench.json" 2> "$R/bench.err"
echo "bench rc=$?" >> "$R/bench.err"
cat "$R"/version.txt "$R"/test_cuda_kernels.txt "$R"/host_kmath.txt "$R"/bench.json "$R"/bench.err

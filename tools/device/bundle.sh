#!/bin/bash
# The bundle a GPU-host script runs from, made on the VM (the GPU machine
# has no package archive): the -DDF_CUDA=ON binaries that BUILD has,
# stripped and packed into OUTDIR/bin.tar.xz, and deltafin's shared
# libraries (less the C library's own) into OUTDIR/lib.tar.xz. Packed because
# a device call carries at most 64 MiB with the working tree, and four
# binaries with the kernels' device code in each are over 20 MB. xz -9e:
# its 64 MiB window spans all four, so their common device code is packed
# once (16 MB at xz's default level, 4.5 MB so).
#   cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DDF_CUDA=ON
#   cmake --build build-gpu -j2 --target deltafin test_cuda_kernels test_cuda_seq deltafin-cuda-bench
#   bash tools/device/bundle.sh build-gpu out/gpu
# then run a *_gpuhost.sh script there with out/gpu carried: it unpacks both.
set -eu
B=${1:?usage: bundle.sh BUILD OUTDIR}
O=${2:?usage: bundle.sh BUILD OUTDIR}
[ -x "$B/deltafin" ] || { echo "bundle.sh: no $B/deltafin (build it first)" >&2; exit 1; }
rm -rf "$O" && mkdir -p "$O/lib" "$O/bin"
for f in deltafin test_cuda_kernels test_cuda_seq deltafin-cuda-bench cuda_host_kmath; do
  [ -x "$B/$f" ] && cp "$B/$f" "$O/bin/" && strip "$O/bin/$f"
done
ldd "$B/deltafin" | awk '/=> \//{print $3}' | grep -v -E '/libc.so|/libm.so|/libresolv' |
  xargs -I{} cp -L {} "$O/lib/"
(cd "$O" && export XZ_OPT=-9e && tar cJf lib.tar.xz lib && tar cJf bin.tar.xz -C bin . && rm -rf lib bin)
ls -l "$O"

#!/bin/sh
# Every test: clang's static analyzer, gcc Release build + all ctest tests, gcc RelWithDebInfo unit tests,
# clang -Werror Debug and Release builds, the CUDA build's unit tests (where nvcc is), the
# mock-GPU gcc Debug build (every target) and its engine tests, ASan+UBSan
# unit tests and server e2e tests, and a few seconds of each libFuzzer target. Installs its own
# dependencies first, so it works on a clean Debian 12 machine.
#   --long   also the long reference goldens (1,000 and 4,000 positions;
#            DF_LONG=1 for e2e.test_long_context), nightly-style
set -eu
for a in "$@"; do
  case "$a" in
  --long) export DF_LONG=1 ;;
  *) echo "usage: scripts/test-all.sh [--long]" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
J=$(nproc)
# clang's static analyzer over every target first (minutes, where the suite
# takes most of an hour): a report fails the run and stays in
# build-scan/reports. Its own Debug build, compiled through scan-build's
# wrappers, cleaned first so that every file is analysed on every run.
echo "== clang static analyzer (scan-build), every target"
scan-build -o build-scan/reports cmake -S . -B build-scan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang >/dev/null
scan-build -o build-scan/reports --status-bugs cmake --build build-scan -j "$J" --clean-first
# Every build type a user may pick must compile warning-free with both compilers
# (-O3 in Release finds maybe-uninitialized paths the other levels do not), so
# each is built; the whole suite runs once, on Release, the type users ship.
echo "== gcc Release build + all tests"
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc >/dev/null
cmake --build build-release -j "$J"
ctest --test-dir build-release --output-on-failure -j "$J"

echo "== gcc RelWithDebInfo build + unit tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=gcc >/dev/null
cmake --build build -j "$J"
ctest --test-dir build --output-on-failure -j "$J" -L unit

echo "== clang Debug and Release builds (warnings are errors)"
cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang >/dev/null
cmake --build build-clang -j "$J"
cmake -S . -B build-clang-release -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang >/dev/null
cmake --build build-clang-release -j "$J"

# The optional CUDA build (-DDF_CUDA=ON): nvcc compiles src/kernels/cuda and
# the CPU unit tests run in that build (unit.cuda_host_kmath among them: the
# GPU's expf/tanhf against libm). The GPU tests (label gpu) need the GPU
# machine: tools/device/cuda_gpuhost.sh. The toolkit is not installed here
# (Debian's nvidia-cuda-toolkit is non-free, several GB, and CUDA 11.8), so
# the stage runs where nvcc already is and says so where it is not.
echo "== CUDA build (-DDF_CUDA=ON) + unit tests"
NVCC=$(command -v nvcc || true)
[ -n "$NVCC" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || NVCC=/usr/local/cuda/bin/nvcc
if [ -n "$NVCC" ]; then
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DDF_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$NVCC" >/dev/null
  cmake --build build-cuda -j "$J"
  ctest --test-dir build-cuda --output-on-failure -j "$J" -L unit -LE slow
else
  echo "-- skipped: no nvcc (install the CUDA toolkit to build the CUDA kernels)"
fi

# --device cuda's driving code (the weight tier, the staging, the expert
# batch, the CPU taking over after an injected failure) on a stand-in for
# the CUDA library in host memory (tests/mockgpu), so it is tested on every
# machine; the GPU machine runs the same engine test on the H200. A gcc
# Debug build, every target: the one build type gcc does not get elsewhere
# here (its -O0 warnings differ from -O2's).
echo "== mock-GPU build (-DDF_MOCKGPU=ON, gcc Debug): the GPU's engine test and injected failures"
cmake -S . -B build-mockgpu -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=gcc -DDF_MOCKGPU=ON >/dev/null
cmake --build build-mockgpu -j "$J"
ctest --test-dir build-mockgpu --output-on-failure -j "$J" -L mockgpu

echo "== aarch64 cross build of the kernels (NEON), kernel tests under qemu-user"
cmake -S tests/cross -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE="$PWD/tests/cross/aarch64-linux-gnu.cmake" >/dev/null
cmake --build build-aarch64 -j "$J"
ctest --test-dir build-aarch64 --output-on-failure -j "$J"

echo "== ASan+UBSan unit tests and the server's end-to-end tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DDF_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$J"
# -LE slow: the statistical tests (unit.test_spec_sampling) run in the Release suite
ctest --test-dir build-asan --output-on-failure -j "$J" -L unit -LE slow
# -fno-sanitize-recover: a finding ends the server, so the test that met it fails
ctest --test-dir build-asan --output-on-failure -j "$J" -R '^e2e\.test_serve_'

echo "== libFuzzer targets"
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DDF_FUZZ=ON >/dev/null
cmake --build build-fuzz -j "$J"
fail=0
for f in build-fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  corpus="fuzz/corpus/${name#fuzz_}"
  work="build-fuzz/work-$name"
  mkdir -p "$work"
  echo "-- $name"
  # A finding (crash, leak, timeout) makes libFuzzer exit non-zero and write the input
  # to build-fuzz/artifacts/; that fails the whole run.
  mkdir -p build-fuzz/artifacts
  if ! "$f" -max_total_time="${DF_FUZZ_SECONDS:-20}" -rss_limit_mb=2048 \
      -artifact_prefix=build-fuzz/artifacts/"$name"- "$work" \
      $( [ -d "$corpus" ] && echo "$corpus" ) >"build-fuzz/$name.log" 2>&1; then
    echo "FAILED: $name found a problem; input and log:"
    ls build-fuzz/artifacts/"$name"-* 2>/dev/null || true
    grep -E "ERROR|runtime error|SUMMARY" "build-fuzz/$name.log" | head -n 20 || true
    fail=1
  else
    tail -n 1 "build-fuzz/$name.log"
  fi
done
[ "$fail" = 0 ] || { echo "== fuzzing found problems"; exit 1; }
echo "== all tests passed"

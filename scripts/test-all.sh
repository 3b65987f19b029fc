#!/bin/sh
# Every test: gcc build + all ctest tests, clang -Werror build, ASan+UBSan
# unit tests, and a few seconds of each libFuzzer target. Installs its own
# dependencies first, so it works on a clean Debian 12 machine.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
J=$(nproc)
echo "== gcc build + all tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=gcc >/dev/null
cmake --build build -j "$J"
ctest --test-dir build --output-on-failure -j "$J"

echo "== clang build (warnings are errors)"
cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang >/dev/null
cmake --build build-clang -j "$J"

echo "== ASan+UBSan unit tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DDF_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$J"
ctest --test-dir build-asan --output-on-failure -j "$J" -L unit

echo "== libFuzzer targets"
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DDF_FUZZ=ON >/dev/null
cmake --build build-fuzz -j "$J"
for f in build-fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  corpus="fuzz/corpus/${name#fuzz_}"
  mkdir -p "build-fuzz/work-$name"
  echo "-- $name"
  "$f" -max_total_time="${DF_FUZZ_SECONDS:-20}" -rss_limit_mb=2048 "build-fuzz/work-$name" \
    $( [ -d "$corpus" ] && echo "$corpus" ) 2>&1 | tail -n 3
done
echo "== all tests passed"

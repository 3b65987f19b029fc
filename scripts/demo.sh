#!/bin/sh
# The main job on the built-in tiny model: install, build, generate a tiny
# K3-layout checkpoint from a seed, and run a real generation with stats.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"
MODEL=${DF_DEMO_MODEL:-out/tiny}
if [ ! -f "$MODEL/config.json" ]; then
  ./build/deltafin make-model --preset tiny --seed 1 --out "$MODEL"
fi
./build/deltafin inspect --model "$MODEL"
echo "== tokenizer: ids of a prompt"
./build/deltafin tokenize --model "$MODEL" "The capital of France is"
echo "== generation (tiny random weights: the text is gibberish, the computation is exact K3)"
./build/deltafin run --model "$MODEL" --prompt "The capital of France is" --max-new 32 --stats

#!/bin/sh
# The main job: install, build, and run the trained nano-K3 (models/nano-k3: K3's
# architecture at small dimensions, trained on the Python and Perl manuals) on a
# prompt from its held-out text, with stats. DF_DEMO_MODEL=tiny runs the tiny
# random-weight preset instead (exact K3 arithmetic, gibberish text); any other
# value is a model directory.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"
MODEL=${DF_DEMO_MODEL:-models/nano-k3}
PROMPT="All function, type and macro definitions needed to use the Python/C API are"
if [ "$MODEL" = tiny ]; then
  MODEL=out/tiny
  [ -f "$MODEL/config.json" ] || ./build/deltafin make-model --preset tiny --seed 1 --out "$MODEL"
  PROMPT="The capital of France is"
fi
./build/deltafin inspect --model "$MODEL"
echo "== tokenizer: ids of the prompt"
./build/deltafin tokenize --model "$MODEL" "$PROMPT"
echo "== generation (greedy) from a sentence of the held-out text (models/corpus/eval.txt)"
printf '%s' "$PROMPT"
./build/deltafin run --model "$MODEL" --prompt "$PROMPT" --max-new 48 --stats
if [ -f "$MODEL/../corpus/eval.txt" ]; then
  echo "== perplexity on the first 2048 held-out tokens"
  ./build/deltafin eval --model "$MODEL" --file "$MODEL/../corpus/eval.txt" --max-tokens 2048
fi

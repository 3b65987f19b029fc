#!/bin/sh
# One parser for the engine options (src/cli/engine_opts.c): run, serve,
# chat, bench --model and eval accept every engine option, refuse the same bad
# values with the same message and print the same help section. The other
# option tables (src/cli/opt_table.h: generation, plan, inspect, serve) name
# the option and its range when they refuse a value.
set -eu
BIN=${DF_BIN:?set DF_BIN}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" make-model --preset tiny --seed 5 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"
ALL="--threads 1 --spine bf16 --kernels auto --cache-mb 0 --no-pack --io pread --prefetch gate
 --emulate-drives 2GB/s --split-reads off --gate-input x+shared --pin-mb 1 --queue-depth 4 --heat $tmp/h.heat
 --mem-limit 8G --ctx 256 --fetch-ahead on --device cpu --gpu-mem 1G --gpu-state copy"

# every engine option, valid, on each command
# shellcheck disable=SC2086
"$BIN" run --model "$tmp/m" --prompt-ids 1,2,3 --max-new 2 --json $ALL --trace "$tmp/t.jsonl" \
  >"$tmp/run.json" 2>"$tmp/e" || fail "run with every engine option: $(cat "$tmp/e")"
[ -s "$tmp/t.jsonl" ] || fail "run --trace wrote nothing"
# shellcheck disable=SC2086
"$BIN" bench --model "$tmp/m" --prompt-tokens 3 --new-tokens 1 --repeat 1 --json $ALL --trace "$tmp/b.jsonl" \
  >"$tmp/bench.json" 2>"$tmp/e" || fail "bench with every engine option: $(cat "$tmp/e")"
[ -s "$tmp/b.jsonl" ] || fail "bench --trace wrote nothing"
jq -e '.io == "pread"' "$tmp/bench.json" >/dev/null || fail "bench did not use --io pread: $(cat "$tmp/bench.json")"
# shellcheck disable=SC2086
"$BIN" chat --model "$tmp/m" $ALL </dev/null >/dev/null 2>"$tmp/e" || fail "chat with every engine option: $(cat "$tmp/e")"
printf 'the cat sat on the mat and the dog sat on the log\n' >"$tmp/text.txt"
# shellcheck disable=SC2086
"$BIN" eval --model "$tmp/m" --file "$tmp/text.txt" --window 8 --json $ALL --trace "$tmp/v.jsonl" \
  >"$tmp/eval.json" 2>"$tmp/e" || fail "eval with every engine option: $(cat "$tmp/e")"
jq -e '.scored > 0' "$tmp/eval.json" >/dev/null || fail "eval scored nothing: $(cat "$tmp/eval.json")"
[ -s "$tmp/v.jsonl" ] || fail "eval --trace wrote nothing"
# serve: the options parse (the missing model is what stops it)
# shellcheck disable=SC2086
if "$BIN" serve --model "$tmp/none" --port 0 $ALL --trace "$tmp/t2" 2>"$tmp/e"; then fail "serve on no model"; fi
grep -q "config.json" "$tmp/e" || fail "serve did not get to the model: $(cat "$tmp/e")"

# the same bad values, the same messages
for bad in "--io mmap" "--prefetch sometimes" "--split-reads maybe" "--gate-input y" "--spine f16" \
           "--kernels fast" "--queue-depth 0" "--cache-mb -1" "--pin-mb x" "--threads 5000" \
           "--mem-limit lots" "--ctx 0" "--fetch-ahead maybe" "--device tpu" "--device cuda:x" \
           "--gpu-mem lots" "--gpu-mem 512K" "--gpu-state maybe"; do
  msgs=""
  for cmd in run serve bench chat eval; do
    # shellcheck disable=SC2086
    if "$BIN" $cmd --model "$tmp/m" $bad >/dev/null 2>"$tmp/e"; then fail "$cmd accepted $bad"; fi
    msgs="$msgs$(cat "$tmp/e")
"
  done
  n=$(printf '%s' "$msgs" | sort -u | wc -l)
  [ "$n" = 1 ] || fail "$bad: different messages: $msgs"
  opt=${bad%% *}
  printf '%s' "$msgs" | grep -q -- "$opt" || fail "$bad: message does not name $opt: $msgs"
done
# --device cuda: refused with the reason where there is no CUDA build or no
# GPU (the GPU machine's tests/cuda/test_device_forward.sh runs it for real)
if "$BIN" --version | grep -q "^cuda: not built"; then
  if "$BIN" run --model "$tmp/m" --prompt-ids 1 --max-new 1 --device cuda >/dev/null 2>"$tmp/e"; then
    fail "--device cuda accepted by a build without CUDA"
  fi
  grep -q -- "--device: this deltafin was built without CUDA (configure with -DDF_CUDA=ON)" "$tmp/e" ||
    fail "--device cuda without CUDA: $(cat "$tmp/e")"
elif ! "$BIN" run --model "$tmp/m" --prompt-ids 1 --max-new 1 --device cuda >/dev/null 2>"$tmp/e"; then
  grep -q -- "--device: no CUDA device found" "$tmp/e" || fail "--device cuda: $(cat "$tmp/e")"
fi
# DF_DEVICE (the default of --device, for running a suite on the GPU): a bad value is an error
if DF_DEVICE=tpu "$BIN" run --model "$tmp/m" --prompt-ids 1 --max-new 1 >/dev/null 2>"$tmp/e"; then
  fail "DF_DEVICE=tpu accepted"
fi
grep -q "DF_DEVICE=tpu: 'tpu' is not cpu, cuda or cuda:N" "$tmp/e" || fail "DF_DEVICE=tpu: $(cat "$tmp/e")"
DF_DEVICE=cpu "$BIN" run --model "$tmp/m" --prompt-ids 1 --max-new 1 >/dev/null 2>"$tmp/e" ||
  fail "DF_DEVICE=cpu: $(cat "$tmp/e")"
if "$BIN" run --model "$tmp/m" --io 2>"$tmp/e"; then fail "--io without a value"; fi
grep -q "needs a value" "$tmp/e" || fail "--io without a value: $(cat "$tmp/e")"

# one help section, the same text everywhere (bench leaves out what it refuses)
for cmd in run serve bench chat eval; do
  "$BIN" $cmd --help | sed -n '/^engine and expert store/,$p' >"$tmp/help.$cmd"
  [ -s "$tmp/help.$cmd" ] || fail "$cmd --help has no engine section"
done
cmp -s "$tmp/help.run" "$tmp/help.serve" || fail "run and serve print different engine help"
cmp -s "$tmp/help.run" "$tmp/help.bench" || fail "run and bench print different engine help"
cmp -s "$tmp/help.run" "$tmp/help.chat" || fail "run and chat print different engine help"
cmp -s "$tmp/help.run" "$tmp/help.eval" || fail "run and eval print different engine help"
for o in --pin-mb --heat --queue-depth --split-reads --gate-input --io --prefetch --fetch-ahead; do
  grep -q -- "$o" "$tmp/help.serve" || fail "serve --help lacks $o"
done

# --prefill-chunk: one row, one range, one message wherever it is taken
msgs=""
for cmd in "run --prompt-ids 1" "chat" "bench --prompt-tokens 3" "eval --file $tmp/text.txt" "logits --prompt-ids 1"; do
  # shellcheck disable=SC2086
  if "$BIN" $cmd --model "$tmp/m" --prefill-chunk 2000000 </dev/null >/dev/null 2>"$tmp/e"; then
    fail "$cmd accepted --prefill-chunk 2000000"
  fi
  msgs="$msgs$(cat "$tmp/e")
"
done
n=$(printf '%s' "$msgs" | sort -u | wc -l)
[ "$n" = 1 ] || fail "--prefill-chunk: different messages: $msgs"
printf '%s' "$msgs" | grep -q -- "--prefill-chunk: '2000000' is not an integer in \[0, 1048576\]" ||
  fail "--prefill-chunk message lacks the range: $msgs"
# eval --prefill-chunk 0 is the whole window: the same scores as batches of 3
"$BIN" eval --model "$tmp/m" --file "$tmp/text.txt" --window 8 --prefill-chunk 0 --json >"$tmp/e0.json" 2>"$tmp/e" ||
  fail "eval --prefill-chunk 0: $(cat "$tmp/e")"
"$BIN" eval --model "$tmp/m" --file "$tmp/text.txt" --window 8 --prefill-chunk 3 --json >"$tmp/e3.json" 2>"$tmp/e" ||
  fail "eval --prefill-chunk 3: $(cat "$tmp/e")"
[ "$(jq -r .argmax_digest "$tmp/e0.json") $(jq -r .nll_sum "$tmp/e0.json")" = \
  "$(jq -r .argmax_digest "$tmp/e3.json") $(jq -r .nll_sum "$tmp/e3.json")" ] ||
  fail "eval scores depend on --prefill-chunk: $(cat "$tmp/e0.json") vs $(cat "$tmp/e3.json")"

# the per-command tables: a bad value names the option and the accepted range
check_bad() { # want command...
  want=$1
  shift
  if "$BIN" "$@" >/dev/null 2>"$tmp/e" </dev/null; then fail "accepted: $*"; fi
  grep -qF -- "$want" "$tmp/e" || fail "$*: message lacks '$want': $(cat "$tmp/e")"
}
check_bad "--mem-limit: 'lots' is not a size like 48G or 512M" inspect --model "$tmp/m" --mem-limit lots
check_bad "--mem: '0' is not a size like 48G or 512M" plan --mem 0
check_bad "--spine: 'f16' is not bf16 or int8" plan --spine f16
check_bad "--ctx: '0' is not an integer in [1, 1073741824]" plan --ctx 0
check_bad "--reuse-mb: '-1' is not an integer in [0, 1073741824]" plan --reuse-mb -1
check_bad "--expert-hit: '2' is not a number in [0, 1]" plan --expert-hit 2
check_bad "--reuse-mb: 'x' is not a number in [0, 1073741824]" serve --model "$tmp/m" --reuse-mb x
check_bad "--port: '70000' is not an integer in [0, 65535]" serve --model "$tmp/m" --port 70000
check_bad "--top-p: '0' is not a number in (0, 1]" run --model "$tmp/m" --prompt-ids 1 --temperature 1 --top-p 0
check_bad "--temperature: '101' is not a number in [0, 100]" chat --model "$tmp/m" --temperature 101
check_bad "--window: '1' is not an integer in [2, 1048576]" eval --model "$tmp/m" --file "$tmp/text.txt" --window 1
check_bad "--reuse-mb needs a value" plan --reuse-mb
# the values they accept reach the command
"$BIN" plan --mem 8G --ctx 512 --reuse-mb 64 --spine bf16 --expert-hit 0.5 --json >"$tmp/plan.json" 2>"$tmp/e" ||
  fail "plan with valid options: $(cat "$tmp/e")"
jq -e '.plan.ctx == 512 and .plan.reuse_bytes == 67108864 and .spine == "bf16" and .projection.expert_hit == 0.5' \
  "$tmp/plan.json" >/dev/null || fail "plan options did not arrive: $(cat "$tmp/plan.json")"
"$BIN" inspect --model "$tmp/m" --mem-limit 1G --json >"$tmp/insp.json" 2>"$tmp/e" || fail "inspect --mem-limit 1G: $(cat "$tmp/e")"
grep -q '"mem_limit": 1000000000' "$tmp/insp.json" || fail "inspect --mem-limit did not arrive: $(grep mem_limit "$tmp/insp.json")"

echo "engine options: ok"

#!/bin/sh
# One parser for the engine options (src/cli/engine_opts.c): run, serve,
# chat and bench --model accept every engine option, refuse the same bad values with
# the same message and print the same help section.
set -eu
BIN=${DF_BIN:?set DF_BIN}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" make-model --preset tiny --seed 5 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"
ALL="--threads 1 --spine bf16 --kernels auto --cache-mb 0 --no-pack --io pread --prefetch gate
 --emulate-drives 2GB/s --split-reads off --gate-input x+shared --pin-mb 1 --queue-depth 4 --heat $tmp/h.heat
 --mem-limit 8G --ctx 256 --fetch-ahead on --device cpu"

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
# serve: the options parse (the missing model is what stops it)
# shellcheck disable=SC2086
if "$BIN" serve --model "$tmp/none" --port 0 $ALL --trace "$tmp/t2" 2>"$tmp/e"; then fail "serve on no model"; fi
grep -q "config.json" "$tmp/e" || fail "serve did not get to the model: $(cat "$tmp/e")"

# the same bad values, the same messages
for bad in "--io mmap" "--prefetch sometimes" "--split-reads maybe" "--gate-input y" "--spine f16" \
           "--kernels fast" "--queue-depth 0" "--cache-mb -1" "--pin-mb x" "--threads 5000" \
           "--mem-limit lots" "--ctx 0" "--fetch-ahead maybe" "--device tpu" "--device cuda:x"; do
  msgs=""
  for cmd in run serve bench chat; do
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
# --device cuda: refused with the reason (no CUDA build, no GPU, or no GPU forward yet)
if "$BIN" run --model "$tmp/m" --prompt-ids 1 --max-new 1 --device cuda >/dev/null 2>"$tmp/e"; then
  fail "--device cuda accepted"
fi
if "$BIN" --version | grep -q "^cuda: not built"; then
  grep -q -- "--device: this deltafin was built without CUDA (configure with -DDF_CUDA=ON)" "$tmp/e" ||
    fail "--device cuda without CUDA: $(cat "$tmp/e")"
else
  grep -q -- "--device" "$tmp/e" || fail "--device cuda: $(cat "$tmp/e")"
fi
if "$BIN" run --model "$tmp/m" --io 2>"$tmp/e"; then fail "--io without a value"; fi
grep -q "needs a value" "$tmp/e" || fail "--io without a value: $(cat "$tmp/e")"

# one help section, the same text everywhere (bench leaves out what it refuses)
for cmd in run serve bench chat; do
  "$BIN" $cmd --help | sed -n '/^engine and expert store/,$p' >"$tmp/help.$cmd"
  [ -s "$tmp/help.$cmd" ] || fail "$cmd --help has no engine section"
done
cmp -s "$tmp/help.run" "$tmp/help.serve" || fail "run and serve print different engine help"
cmp -s "$tmp/help.run" "$tmp/help.bench" || fail "run and bench print different engine help"
cmp -s "$tmp/help.run" "$tmp/help.chat" || fail "run and chat print different engine help"
for o in --pin-mb --heat --queue-depth --split-reads --gate-input --io --prefetch --fetch-ahead; do
  grep -q -- "$o" "$tmp/help.serve" || fail "serve --help lacks $o"
done

echo "engine options: ok"

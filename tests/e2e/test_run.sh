#!/bin/sh
# deltafin run on a generated tiny model: --json shape, the same ids for every
# thread count / prefill chunk / kernel choice / cache budget, streamed text ==
# the JSON text, chat mode, --stats, the int8 spine (convert-spine, resume),
# and argument errors.
set -eu
BIN=${DF_BIN:?set DF_BIN}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" make-model --preset tiny --seed 5 --out "$tmp/m" >/dev/null 2>&1
M="$tmp/m"
P=3,1,4,1,5,9,2,6,5,3,5

# --json: exactly one object with the documented fields
"$BIN" run --model "$M" --prompt-ids $P --max-new 10 --json --threads 1 >"$tmp/j1"
[ "$(wc -l <"$tmp/j1")" -eq 1 ] || fail "--json printed more than one line"
jq -e '.prompt_ids == [3,1,4,1,5,9,2,6,5,3,5] and (.output_ids | length) == 10
  and .finish_reason == "length" and (.text | type) == "string"
  and .stats.n_prompt == 11 and .stats.n_gen == 10 and .stats.spine == "bf16"
  and (.stats.prefill_s | type) == "number" and (.stats.decode_tok_s | type) == "number"
  and .stats.expert_bytes_read > 0 and .stats.spine_bytes_per_token > 0
  and .stats.weight_bytes_read >= .stats.expert_bytes_read
  and (.stats.store | type) == "object"' "$tmp/j1" >/dev/null || fail "--json fields: $(cat "$tmp/j1")"
ref=$(jq -c .output_ids "$tmp/j1")
echo "reference ids: $ref"

# compute by part: a prompt's passes (more than one row) count layer-rows in
# prefill_compute, decode's single-row passes layer-passes in decode_compute;
# every layer is one attention part (kda or mla) and one FFN part (dense or
# MoE trunk), so each pair sums to layers x rows
L=$(jq '.text_config.num_hidden_layers // .num_hidden_layers' "$M/config.json")
"$BIN" run --model "$M" --prompt-ids $P --max-new 4 --prefill-chunk 3 --json >"$tmp/pc"
jq -e --argjson L "$L" '.stats.prefill_compute as $p | .stats.decode_compute as $d
  | ($p.kda.n + $p.mla.n) == $L * 11 and ($p.dense_ffn.n + $p.moe_trunk.n) == $L * 11
  and $p.head.n == 1 and $p.routed_expert.n > 0 and $p.kda.s > 0
  and ($d.kda.n + $d.mla.n) == $L * 3 and ($d.dense_ffn.n + $d.moe_trunk.n) == $L * 3' \
  "$tmp/pc" >/dev/null || fail "compute by part: $(jq -c '[.stats.prefill_compute, .stats.decode_compute]' "$tmp/pc")"

# determinism: threads, batch splits, kernel table, cache budget
for args in "--threads 2" "--threads 3" "--prefill-chunk 1" "--prefill-chunk 3 --threads 2" \
            "--prefill-chunk 7" "--prefill-chunk 0" "--kernels auto" "--kernels scalar" \
            "--cache-mb 0" "--no-pack"; do
  # shellcheck disable=SC2086
  got=$("$BIN" run --model "$M" --prompt-ids $P --max-new 10 --json $args | jq -c .output_ids)
  [ "$got" = "$ref" ] || fail "ids differ with $args: $got vs $ref"
done
echo "same ids for every thread count, prefill chunk, kernel table and cache budget"

# streamed text == the JSON text (plus the final newline)
"$BIN" run --model "$M" --prompt "the cat sat on" --max-new 12 >"$tmp/stream"
"$BIN" run --model "$M" --prompt "the cat sat on" --max-new 12 --json >"$tmp/j2"
jq -j .text "$tmp/j2" >"$tmp/text"
printf '\n' >>"$tmp/text"
cmp -s "$tmp/stream" "$tmp/text" || fail "streamed text differs from the --json text"
n=$(jq '.prompt_ids | length' "$tmp/j2")
[ "$n" -gt 0 ] || fail "--prompt encoded to nothing"
# the prompt ids are the tokenizer's
tk=$("$BIN" tokenize --model "$M" "the cat sat on")
[ "$(jq -c '.prompt_ids | map(tostring) | join(",")' "$tmp/j2")" = "\"$tk\"" ] ||
  fail "--prompt ids differ from deltafin tokenize"

# --stats goes to stderr, stdout keeps only the text
"$BIN" run --model "$M" --prompt-ids $P --max-new 4 --stats >"$tmp/o" 2>"$tmp/e"
grep -q "^decode" "$tmp/e" || fail "--stats printed no summary"
grep -q "^decode" "$tmp/o" && fail "--stats wrote to stdout"

# chat: stops at <|end_of_msg|> or --max-new; --no-reasoning prints only the response
"$BIN" run --model "$M" --chat --prompt "Hello there" --effort low --max-new 24 --json >"$tmp/c"
jq -e '(.reasoning | type) == "string" and (.text | type) == "string"
  and (.finish_reason == "stop" or .finish_reason == "length")' "$tmp/c" >/dev/null ||
  fail "chat --json fields: $(cat "$tmp/c")"
if jq -e '.finish_reason == "stop"' "$tmp/c" >/dev/null; then
  eom=$(jq '.output_ids[-1]' "$tmp/c")
  eomid=$("$BIN" tokenize --model "$M" --specials '<|end_of_msg|>')
  [ "$eom" = "$eomid" ] || fail "chat stopped on $eom, not <|end_of_msg|> ($eomid)"
fi
"$BIN" run --model "$M" --chat --prompt "Hello there" --effort low --max-new 24 --no-reasoning >"$tmp/c2"
jq -j .text "$tmp/c" >"$tmp/c3"
printf '\n' >>"$tmp/c3"
cmp -s "$tmp/c2" "$tmp/c3" || fail "--no-reasoning printed more than the response"
"$BIN" run --model "$M" --chat --prompt "Hello there" --effort low --max-new 24 >"$tmp/c4"
jq -j '.reasoning + .text' "$tmp/c" >"$tmp/c5"
printf '\n' >>"$tmp/c5"
cmp -s "$tmp/c4" "$tmp/c5" || fail "chat stream differs from reasoning + response"

# int8 spine: refused before conversion, then converted, resumable, used
if "$BIN" run --model "$M" --prompt-ids $P --max-new 2 --spine int8 2>"$tmp/e"; then
  fail "--spine int8 ran without a converted spine"
fi
grep -q "convert-spine" "$tmp/e" || fail "no hint to run convert-spine: $(cat "$tmp/e")"
"$BIN" convert-spine --model "$M" --threads 2 2>"$tmp/e" || fail "convert-spine: $(cat "$tmp/e")"
[ -f "$M/spine-int8/model.safetensors.index.json" ] || fail "no int8 index"
ls -l --time-style=+%s.%N "$M/spine-int8" >"$tmp/before"
sleep 1
"$BIN" convert-spine --model "$M" 2>/dev/null
ls -l --time-style=+%s.%N "$M/spine-int8" | grep -v index >"$tmp/after"
grep -v index "$tmp/before" | cmp -s - "$tmp/after" || fail "convert-spine rewrote converted shards"
# a removed output file is converted again, the others kept
f=$(ls "$M/spine-int8" | grep -v index | head -n 1)
rm "$M/spine-int8/$f"
"$BIN" convert-spine --model "$M" 2>/dev/null
[ -f "$M/spine-int8/$f" ] || fail "convert-spine did not resume the missing shard"
"$BIN" run --model "$M" --prompt-ids $P --max-new 6 --spine int8 --json >"$tmp/j8"
jq -e '.stats.spine == "int8" and (.output_ids | length) == 6' "$tmp/j8" >/dev/null ||
  fail "int8 run: $(cat "$tmp/j8")"
b16=$(jq .stats.spine_bytes_per_token "$tmp/j1")
i8=$(jq .stats.spine_bytes_per_token "$tmp/j8")
[ "$i8" -lt "$b16" ] || fail "int8 spine reads $i8 bytes per token, bf16 $b16"
for t in 1 2; do
  got=$("$BIN" run --model "$M" --prompt-ids $P --max-new 6 --spine int8 --threads $t --json | jq -c .output_ids)
  [ "$got" = "$(jq -c .output_ids "$tmp/j8")" ] || fail "int8 ids differ with $t threads"
done

# argument errors: exit != 0 and a message
expect_fail() {
  if "$BIN" run "$@" >/dev/null 2>"$tmp/e"; then fail "run $* succeeded"; fi
  [ -s "$tmp/e" ] || fail "run $* failed silently"
}
expect_fail --prompt-ids 1,2
expect_fail --model "$M"
expect_fail --model "$M" --prompt-ids 1,2 --prompt hi
expect_fail --model "$M" --prompt-ids 1,x,2
expect_fail --model "$M" --prompt-ids 1,99999999
expect_fail --model "$M" --prompt-ids 1,2 --spine fp8
expect_fail --model "$M" --prompt-ids 1,2 --kernels fastest
expect_fail --model "$M" --prompt-ids 1,2 --bogus
expect_fail --model "$M" --chat --prompt-ids 1,2
expect_fail --model "$M" --chat --prompt hi --parse-special
expect_fail --model "$M" --chat --prompt hi --effort medium
expect_fail --model "$M" --prompt-ids 1,2 --parse-special

# --parse-special: a prompt rendered by the caller keeps its special tokens; without
# the flag the same text is ordinary tokens (the id of <|open|> is read from the file)
open_id=$(jq -r '.added_tokens_decoder | to_entries[] | select(.value.content == "<|open|>") | .key' \
  "$M/tokenizer_config.json")
"$BIN" run --model "$M" --prompt '<|open|>hi' --parse-special --max-new 1 --json >"$tmp/ps"
[ "$(jq '.prompt_ids[0]' "$tmp/ps")" = "$open_id" ] || fail "--parse-special: $(jq -c .prompt_ids "$tmp/ps")"
[ "$(jq '.prompt_ids | length' "$tmp/ps")" -lt 5 ] || fail "--parse-special: too many ids"
"$BIN" run --model "$M" --prompt '<|open|>hi' --max-new 1 --json >"$tmp/ps"
jq -e --argjson o "$open_id" '.prompt_ids | index($o) == null' "$tmp/ps" >/dev/null ||
  fail "without --parse-special <|open|> became the special id"
# a full context (--ctx) ends the reply with finish "length" and the ids an unlimited
# run starts with, instead of failing after tokens were already printed
"$BIN" run --model "$M" --prompt-ids 5 --ctx 3 --max-new 8 --json >"$tmp/cx" || fail "--ctx 3 exited non-zero"
"$BIN" run --model "$M" --prompt-ids 5 --max-new 3 --json >"$tmp/cy"
jq -e '.finish_reason == "length" and (.output_ids | length) == 3' "$tmp/cx" >/dev/null ||
  fail "--ctx 3: $(jq -c '[.finish_reason, .output_ids]' "$tmp/cx")"
[ "$(jq -c .output_ids "$tmp/cx")" = "$(jq -c .output_ids "$tmp/cy")" ] || fail "--ctx 3 changed the ids"
expect_fail --model "$tmp/nothing" --prompt-ids 1,2
grep -q "config.json" "$tmp/e" || fail "missing model dir: $(cat "$tmp/e")"
echo "ok"

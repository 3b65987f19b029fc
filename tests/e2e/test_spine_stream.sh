#!/bin/sh
# The memory plan and the spine stream on a generated tiny model: for every
# --mem-limit from "all resident" down to "nothing but the small tensors
# resident" (the embedding is always read per row), bf16 and int8, experts
# from the shards (1 drive) and from a pack on 2 drives, expert cache off and
# on, the ids equal the unlimited run's; each streamed run reads exactly the
# plan's streamed bytes per pass; a limit below what streaming needs is
# refused with the least memory named; the plan shows in --stats; and, when
# this machine lets us make a memory cgroup, the limit is read from it.
set -eu
BIN=${DF_BIN:?set DF_BIN}
tmp=$(mktemp -d /var/tmp/df_spine.XXXXXX 2>/dev/null || mktemp -d)
cg=""
cleanup() {
  [ -n "$cg" ] && [ -d "$cg" ] && rmdir "$cg" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

# k3-trunk: K3's trunk and vocabulary, the release pattern cut to --layers N
# (MLA every fourth layer, 1-based, and the last); sizes only (it is GBs)
"$BIN" make-model --preset k3-trunk --layers 8 --experts 16 --dry-run >"$tmp/kt"
grep -q "8 layers (6 KDA, 2 MLA), hidden 7168, vocab 163840, 16 experts top-16" "$tmp/kt" ||
  fail "k3-trunk dry run: $(cat "$tmp/kt")"
"$BIN" make-model --preset k3-trunk --layers 5 --dry-run | grep -q "5 layers (3 KDA, 2 MLA)" ||
  fail "k3-trunk --layers 5: MLA at layers 4 and 5 (1-based)"
if "$BIN" make-model --preset tiny --layers 4 --dry-run 2>"$tmp/e"; then fail "--layers accepted for tiny"; fi

"$BIN" make-model --preset tiny --seed 5 --out "$tmp/m" -q >/dev/null 2>&1
M="$tmp/m"
P=3,1,4,1,5,9,2,6,5,3,5
N=10 # new tokens: 1 prefill pass + 9 decode passes
"$BIN" convert-spine --model "$M" >/dev/null 2>&1

ref_bf16=$("$BIN" run --model "$M" --prompt-ids $P --max-new $N --json | jq -c .output_ids)
ref_int8=$("$BIN" run --model "$M" --prompt-ids $P --max-new $N --json --spine int8 | jq -c .output_ids)
[ "$ref_bf16" != "$ref_int8" ] || echo "note: int8 and bf16 ids agree on this prompt"

# sweep SPINE EXTRA...: limits from 4 MB down in 200 kB steps until refused, then exactly the least
sweep() {
  spine=$1
  shift
  ref=$ref_bf16
  [ "$spine" = int8 ] && ref=$ref_int8
  lim=4000000
  saw_all=0 saw_none=0 runs=0
  while :; do
    # shellcheck disable=SC2086
    if ! "$BIN" run --model "$M" --prompt-ids $P --max-new $N --json --spine "$spine" \
        --ctx 512 --mem-limit "$lim" "$@" >"$tmp/o" 2>"$tmp/e"; then
      grep -q "at least" "$tmp/e" || fail "refusal at $lim without the least memory: $(cat "$tmp/e")"
      least=$(sed -n 's/.*at least [0-9.]* MB (\([0-9]*\) bytes).*/\1/p' "$tmp/e")
      [ -n "$least" ] || fail "no byte count in: $(cat "$tmp/e")"
      [ "$least" -gt "$lim" ] || fail "refused $lim but names $least as enough"
      if [ "$saw_none" -eq 0 ] && [ "$least" -lt $((lim + 200000)) ]; then
        lim=$least # exactly the least: everything streams
        continue
      fi
      break
    fi
    runs=$((runs + 1))
    got=$(jq -c .output_ids "$tmp/o")
    [ "$got" = "$ref" ] || fail "$spine $* --mem-limit $lim: ids $got, expected $ref"
    jq -e --argjson n $N '.stats.plan as $p
      | ($p.resident | length) + ($p.streamed | length) == 9
      and $p.mem_limit == '"$lim"'
      and (if $p.streamed_units > 0 then
             $p.spine_stream.weight_bytes == $n * $p.streamed_spine_bytes_per_token
             and $p.spine_stream.bytes_read >= $p.spine_stream.weight_bytes
             and $p.spine_stream.wasted_bytes == 0
             and $p.ring_slots == 2
           else $p.spine_stream.bytes_read == 0 and $p.ring_slots == 0 end)' "$tmp/o" >/dev/null ||
      fail "$spine $* --mem-limit $lim: plan/stream stats: $(jq -c .stats.plan "$tmp/o")"
    nres=$(jq '.stats.plan.resident_units' "$tmp/o")
    [ "$nres" -eq 9 ] && saw_all=1
    [ "$nres" -eq 0 ] && saw_none=1
    lim=$((lim - 200000))
    [ $lim -gt 0 ] || fail "never refused"
  done
  [ $saw_all -eq 1 ] || fail "$spine $*: no limit kept everything resident"
  [ $saw_none -eq 1 ] || fail "$spine $*: no limit streamed every unit"
  echo "$spine $*: $runs limits, same ids from all resident to all streamed"
}

for spine in bf16 int8; do
  sweep $spine --cache-mb 0
  sweep $spine --cache-mb 1
done
# streamed through emulated drives, and with several threads
sweep bf16 --cache-mb 0 --emulate-drives 400MB/s,0.1ms --threads 2
sweep int8 --cache-mb 0 --io pread

# experts from a pack on two drives
"$BIN" pack --model "$M" --drives "$tmp/d0,$tmp/d1" -q >/dev/null
for spine in bf16 int8; do
  sweep $spine --cache-mb 0
  sweep $spine --cache-mb 1
done

# convert-spine --out: the int8 copy elsewhere (resumable: a second run keeps
# every file), read with --spine-dir, resident and streamed
"$BIN" convert-spine --model "$M" --out "$tmp/i8" -q
ls -l --time-style=full-iso "$tmp/i8" | grep -v index.json >"$tmp/ls1"
"$BIN" convert-spine --model "$M" --out "$tmp/i8" -q
ls -l --time-style=full-iso "$tmp/i8" | grep -v index.json >"$tmp/ls2"
cmp -s "$tmp/ls1" "$tmp/ls2" || fail "a second convert-spine --out rewrote finished shard files"
for lim in 0 1600000; do
  extra=""
  [ $lim -gt 0 ] && extra="--mem-limit $lim --ctx 512"
  # shellcheck disable=SC2086
  got=$("$BIN" run --model "$M" --prompt-ids $P --max-new $N --json --spine int8 \
    --spine-dir "$tmp/i8" $extra | jq -c .output_ids)
  [ "$got" = "$ref_int8" ] || fail "int8 from --spine-dir ($extra): $got vs $ref_int8"
done
if "$BIN" run --model "$M" --prompt-ids $P --spine int8 --spine-dir "$tmp/nope" 2>"$tmp/e"; then
  fail "a missing --spine-dir was accepted"
fi
grep -q "convert-spine --model .* --out" "$tmp/e" || fail "missing --spine-dir message: $(cat "$tmp/e")"
echo "convert-spine --out and --spine-dir: same int8 ids, resumable"

# prefill chunks that skip the head: the wrong guess costs bytes, never ids
got=$("$BIN" run --model "$M" --prompt-ids $P --max-new $N --json --mem-limit 1600000 \
  --prefill-chunk 2 | jq -c .output_ids)
[ "$got" = "$ref_bf16" ] || fail "prefill chunks with streaming: $got"

# --trace: the spine's reads go to TRACE.spine.jsonl (the store's format,
# expert -1), every byte the stream read, readable by `trace report`
"$BIN" run --model "$M" --prompt-ids $P --max-new $N --json --mem-limit 1600000 --ctx 512 \
  --trace "$tmp/tr.jsonl" >"$tmp/t"
[ -f "$tmp/tr.jsonl.spine.jsonl" ] || fail "no spine trace next to $tmp/tr.jsonl"
tb=$(jq -s '[.[] | select(.k == "read" and .expert == -1 and .ok == 1) | .bytes] | add' "$tmp/tr.jsonl.spine.jsonl")
sb=$(jq '.stats.plan.spine_stream.bytes_read' "$tmp/t")
[ "$tb" = "$sb" ] || fail "spine trace has $tb bytes, the stream read $sb"
"$BIN" trace report "$tmp/tr.jsonl.spine.jsonl" --svg "$tmp/sp.svg" >/dev/null || fail "trace report on the spine trace"
[ -s "$tmp/sp.svg" ] || fail "no spine SVG"

# the plan in --stats
"$BIN" run --model "$M" --prompt-ids $P --max-new 3 --mem-limit 2000000 --stats >/dev/null 2>"$tmp/st"
grep -q "^plan .*streamed" "$tmp/st" || fail "--stats has no plan: $(cat "$tmp/st")"
grep -q "^spine    stream:" "$tmp/st" || fail "--stats has no stream line: $(cat "$tmp/st")"

# deltafin plan: full K3 from its config (record size and counts from
# kimi-k3.md: 92 MoE layers x top-16 x 17,547,264 bytes), and this model
"$BIN" plan --mem 16G --drives 2x5GB/s --spine bf16 --expert-hit 0 --json >"$tmp/p1"
jq -e '(.plan.resident | length) + (.plan.streamed | length) == 94
  and .plan.streamed_units > 0 and .projection.label == "PROJECTION"
  and .projection.expert_bytes_per_token == 92 * 16 * 17547264
  and .projection.drive_bytes_per_s == 10000000000
  and ((.projection.read_s_per_token - (.projection.spine_bytes_per_token
        + .projection.expert_bytes_per_token) / 1e10) | fabs) < 1e-6' "$tmp/p1" >/dev/null ||
  fail "plan for full K3: $(cat "$tmp/p1")"
"$BIN" plan --mem 256G --spine int8 --json | jq -e '.plan.streamed_units == 0' >/dev/null ||
  fail "full K3 int8 in 256 GB should be all resident"
if "$BIN" plan --mem 2G --spine bf16 2>"$tmp/e"; then fail "plan accepted 2 GB for full K3"; fi
grep -q "at least" "$tmp/e" || fail "plan refusal: $(cat "$tmp/e")"
"$BIN" run --model "$M" --prompt-ids $P --max-new 3 --json >"$tmp/c"
"$BIN" plan --model "$M" --mem 1600000 --ctx 512 --spine bf16 --compute "$tmp/c" >"$tmp/p2"
grep -q "^PROJECTION" "$tmp/p2" || fail "plan --model: $(cat "$tmp/p2")"
grep -q "compute .* s (" "$tmp/p2" || fail "plan --compute: $(cat "$tmp/p2")"
echo "deltafin plan: full K3 and this model"

# inspect shows the plan (text and JSON)
"$BIN" inspect --model "$M" --mem-limit 1600000 >"$tmp/i1"
grep -q "^plan .*streamed" "$tmp/i1" || fail "inspect has no plan: $(tail -3 "$tmp/i1")"
"$BIN" inspect --model "$M" --json --mem-limit 1600000 |
  jq -e '.plan.mem_limit == 1600000 and .plan.streamed_units > 0' >/dev/null || fail "inspect --json plan"

# a real memory cgroup (v2 directory or v1 memory controller) when we may make one
limit=200000000
v2=$(sed -n 's/^0:://p' /proc/self/cgroup)
v1=$(sed -n 's/^[0-9]*:[^:]*memory[^:]*://p' /proc/self/cgroup)
if [ -n "$v1" ] && [ -w "/sys/fs/cgroup/memory$v1" ]; then
  cg="/sys/fs/cgroup/memory$v1/df_spine_$$"
  limf=memory.limit_in_bytes
elif [ -n "$v2" ] && [ -f "/sys/fs/cgroup$v2/cgroup.controllers" ] &&
     grep -qw memory "/sys/fs/cgroup$v2/cgroup.subtree_control" 2>/dev/null &&
     [ -w "/sys/fs/cgroup$v2" ]; then
  cg="/sys/fs/cgroup$v2/df_spine_$$"
  limf=memory.max
fi
if [ -n "$cg" ] && mkdir "$cg" 2>/dev/null && echo $limit >"$cg/$limf" 2>/dev/null; then
  incg() { sh -c 'echo $$ >"$0/cgroup.procs" && shift && exec "$@"' "$cg" x "$@"; }
  incg "$BIN" run --model "$M" --prompt-ids $P --max-new $N --json >"$tmp/c1" ||
    fail "run in a $limit-byte cgroup failed"
  jq -e --argjson l $limit '(.stats.plan.memory_source | startswith("cgroup"))
    and .stats.plan.mem_limit <= $l' "$tmp/c1" >/dev/null ||
    fail "the cgroup limit was not used: $(jq -c .stats.plan "$tmp/c1")"
  [ "$(jq -c .output_ids "$tmp/c1")" = "$ref_bf16" ] || fail "ids differ in the cgroup"
  incg "$BIN" run --model "$M" --prompt-ids $P --max-new $N --json --mem-limit 1600000 >"$tmp/c2" ||
    fail "streamed run in the cgroup failed"
  [ "$(jq -c .output_ids "$tmp/c2")" = "$ref_bf16" ] || fail "streamed ids differ in the cgroup"
  jq -e '.stats.plan.streamed_units > 0' "$tmp/c2" >/dev/null || fail "nothing streamed in the cgroup"
  echo "cgroup $cg ($limf $limit): limit detected, same ids resident and streamed"
else
  echo "SKIP cgroup part: cannot create a memory cgroup here (v1 '$v1', v2 '$v2')"
  cg=""
fi
echo "OK"

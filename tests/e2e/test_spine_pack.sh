#!/bin/sh
# The pack's spine section (deltafin pack --spine bf16|int8) on a generated
# tiny model: streamed units read from it give the ids of the shards' path
# (no pack) for several --mem-limit values from all resident to everything
# streamed, bf16 and int8, 1 and 2 drives, expert cache off and on, and the
# run says the spine streams from the pack on every drive; a section of the
# other kind is left alone; doctor checks the section; one flipped byte in
# a spine chunk fails the run with the unit, the drive file and the offset
# named, before any token; a truncated drive file is a clear error; bench
# replays the spine's reads with the store's spine depth (queue depth - 1);
# an interrupted pack resumes to the same manifest; deltafin plan reads the
# spine balanced across drives only from a section, and counts serve's
# kept conversation states (--reuse-mb).
set -eu
BIN=${DF_BIN:?set DF_BIN}
tmp=$(mktemp -d /var/tmp/df_spinepack.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" make-model --preset tiny --seed 5 --out "$tmp/m" -q >/dev/null 2>&1
M="$tmp/m"
P=3,1,4,1,5,9,2,6,5,3,5
N=10
"$BIN" convert-spine --model "$M" >/dev/null 2>&1
# the references: no pack at all, the spine from the shards
ref_bf16=$("$BIN" run --model "$M" --prompt-ids $P --max-new $N --json | jq -c .output_ids)
ref_int8=$("$BIN" run --model "$M" --prompt-ids $P --max-new $N --json --spine int8 | jq -c .output_ids)

# the least memory with everything streamed (SPINE CACHE-MB), from the planner's refusal
least() {
  if "$BIN" run --model "$M" --prompt-ids $P --max-new 1 --spine "$1" --cache-mb "$2" --ctx 512 \
      --mem-limit 100000 >/dev/null 2>"$tmp/e"; then fail "100 kB accepted"; fi
  l=$(sed -n 's/.*at least [0-9.]* MB (\([0-9]*\) bytes).*/\1/p' "$tmp/e")
  [ -n "$l" ] || fail "no least memory in: $(cat "$tmp/e")"
  echo "$l"
}
least_bf16=$(least bf16 0)

# check SPINE STORE-ARGS...: ids and where the spine streamed from, for limits
# from unlimited to the least (everything streamed), cache off and on
check() {
  spine=$1 ndr=$2 src=$3
  shift 3
  ref=$ref_bf16
  [ "$spine" = int8 ] && ref=$ref_int8
  for cache in 0 1; do
    lo=$(least "$spine" $cache)
    for lim in 0 4000000 $((lo + 300000)) "$lo"; do
      extra=""
      [ "$lim" -gt 0 ] && extra="--mem-limit $lim --ctx 512"
      # shellcheck disable=SC2086
      "$BIN" run --model "$M" --prompt-ids $P --max-new $N --json --spine "$spine" --cache-mb $cache \
        $extra "$@" >"$tmp/o" 2>"$tmp/e" || fail "$spine $* $extra: $(cat "$tmp/e")"
      got=$(jq -c .output_ids "$tmp/o")
      [ "$got" = "$ref" ] || fail "$spine $* $extra cache $cache: ids $got, expected $ref"
      nst=$(jq .stats.plan.streamed_units "$tmp/o")
      if [ "$nst" -gt 0 ]; then
        jq -e --arg s "$src" --argjson d "$ndr" --argjson n $N '.stats.plan as $p
          | $p.spine_stream.source == $s and $p.spine_stream.drives == $d
          and $p.spine_stream.weight_bytes == $n * $p.streamed_spine_bytes_per_token
          and $p.spine_stream.bytes_read >= $p.spine_stream.weight_bytes' "$tmp/o" >/dev/null ||
          fail "$spine $* $extra: stream stats: $(jq -c .stats.plan.spine_stream "$tmp/o")"
      fi
      [ "$lim" = "$lo" ] && [ "$nst" -ne 9 ] && fail "$spine at the least limit streams $nst units"
    done
  done
  echo "$spine $*: same ids, spine from $src on $ndr drive(s)"
}

# bf16 section on two drives (the model's default pack)
"$BIN" pack --model "$M" --drives "$tmp/d0,$tmp/d1" --spine bf16 --heat "" -q >/dev/null
jq -e '.spine.kind == "bf16" and (.spine.units | length) == 9
  and ([.spine.units[][2][][0]] | unique) == [0, 1]' "$M/deltafin-pack.json" >/dev/null ||
  fail "no bf16 spine section over both drives: $(jq -c .spine "$M/deltafin-pack.json" | head -c 400)"
cp "$M/deltafin-pack.json" "$tmp/first.json"
check bf16 2 pack
# int8 runs against a bf16 section: the shards, with a note
check int8 1 shards+int8
"$BIN" run --model "$M" --prompt-ids $P --max-new 2 --spine int8 --mem-limit "$(least int8 0)" --ctx 512 --cache-mb 0 \
  >/dev/null 2>"$tmp/e"
grep -q "spine section is bf16 and this run reads the int8 spine" "$tmp/e" || fail "no note: $(cat "$tmp/e")"
# --no-pack: the shards
check bf16 1 shards --no-pack
# the stats text says where it streams from
"$BIN" run --model "$M" --prompt-ids $P --max-new 2 --mem-limit "$least_bf16" --cache-mb 0 --ctx 512 --stats \
  >/dev/null 2>"$tmp/st"
grep -q "^spine    stream: 9 units from the pack's spine section on 2 drives" "$tmp/st" ||
  fail "--stats: $(grep spine "$tmp/st")"
# the spine's trace names both drive files and its reads land on both, as
# the manifest's chunks say, and the trace report accepts it
"$BIN" run --model "$M" --prompt-ids $P --max-new 2 --mem-limit "$least_bf16" --cache-mb 0 --ctx 512 \
  --trace "$tmp/tr" >/dev/null 2>&1
python3 - "$tmp/tr.spine.jsonl" "$M/deltafin-pack.json" <<'PY' || fail "spine trace drives"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
mf = json.load(open(sys.argv[2]))
want = sorted({c[0] for u in mf["spine"]["units"] for c in u[2]})
assert want == [0, 1], want
head = lines[0]
assert len(head["drives"]) == 2 and all(d.endswith(mf["drives"][i]["file"]) for i, d in enumerate(head["drives"])), head
got = sorted({l["drive"] for l in lines if l.get("k") == "read"})
assert got == want, (got, want)
PY
"$BIN" trace report "$tmp/tr.spine.jsonl" >/dev/null || fail "trace report refuses the spine trace"

# doctor checks the section
"$BIN" doctor --model "$M" -q >"$tmp/doc" || fail "doctor on a good pack: $(cat "$tmp/doc")"
grep -q "spine section (bf16): 9 units, [0-9]* chunks: [0-9]* ok, 0 corrupt, 0 missing" "$tmp/doc" ||
  fail "doctor: $(cat "$tmp/doc")"

# int8 section on one drive, elsewhere (--manifest / --store), from --spine-dir
"$BIN" convert-spine --model "$M" --out "$tmp/i8" -q
"$BIN" pack --model "$M" --drives "$tmp/e0" --spine int8 --spine-dir "$tmp/i8" \
  --manifest "$tmp/p1.json" -q >/dev/null
jq -e '.spine.kind == "int8"' "$tmp/p1.json" >/dev/null || fail "no int8 section"
check int8 1 pack --store "$tmp/p1.json"
"$BIN" pack --model "$M" --drives "$tmp/e1" --spine bf16 --manifest "$tmp/p1b.json" -q >/dev/null
check bf16 1 pack --store "$tmp/p1b.json"
check int8 1 pack --store "$tmp/p1.json" --spine-dir "$tmp/i8"

# packing again from scratch, interrupted (slowed by --max-rate, stopped once
# its plan is written) and resumed, gives the same manifest (placement is
# deterministic, every chunk's checksum the same) and a pack doctor accepts
rm -rf "$tmp/d0" "$tmp/d1" "$M/deltafin-pack.json"
"$BIN" pack --model "$M" --drives "$tmp/d0,$tmp/d1" --spine bf16 --heat "" --max-rate 300KB/s -q \
  >/dev/null 2>&1 &
pid=$!
i=0
while [ ! -f "$M/deltafin-pack.json.plan" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
sleep 0.5
kill "$pid" 2>/dev/null || fail "the slowed pack finished before it could be interrupted"
wait "$pid" 2>/dev/null || true
[ ! -f "$M/deltafin-pack.json" ] || fail "an interrupted pack wrote its manifest"
"$BIN" pack --model "$M" --drives "$tmp/d0,$tmp/d1" --spine bf16 --heat "" >/dev/null 2>"$tmp/e"
grep -q "resuming the pack planned" "$tmp/e" || fail "no resume: $(cat "$tmp/e")"
cmp -s "$M/deltafin-pack.json" "$tmp/first.json" || fail "the resumed pack wrote another manifest"
"$BIN" doctor --model "$M" -q >/dev/null || fail "doctor after a resumed pack"

# one flipped byte in the first chunk of layer 2, everything streamed: the run
# fails naming the unit, the drive file and the offset, and prints no token
set -- $(jq -r '.spine.units[] | select(.[0] == 2) | .[2][0] | "\(.[0]) \(.[1])"' "$M/deltafin-pack.json")
d=$1 off=$2
f=$(jq -r --argjson d "$d" '.drives[$d] | "\(.path)/\(.file)"' "$M/deltafin-pack.json")
cp "$f" "$tmp/good.dfpack"
b=$(od -An -tu1 -j $((off + 777)) -N1 "$f" | tr -d ' ')
printf "$(printf '\\%03o' $(((b + 1) % 256)))" | dd of="$f" bs=1 seek=$((off + 777)) conv=notrunc 2>/dev/null
if "$BIN" run --model "$M" --prompt-ids $P --max-new $N --json --mem-limit "$least_bf16" --cache-mb 0 --ctx 512 \
    >"$tmp/o" 2>"$tmp/e"; then
  fail "a corrupt spine chunk was accepted"
fi
[ ! -s "$tmp/o" ] || fail "a token was printed from a corrupt chunk: $(cat "$tmp/o")"
grep -q "layer 2 from the pack's spine section: checksum mismatch in chunk 1 of [0-9]* (drive $d file $f, offset $off," "$tmp/e" ||
  fail "corrupt chunk message: $(cat "$tmp/e")"
if "$BIN" run --model "$M" --prompt-ids $P --max-new $N --mem-limit "$least_bf16" --cache-mb 0 --ctx 512 \
    >"$tmp/o" 2>"$tmp/e"; then
  fail "a corrupt spine chunk was accepted (text)"
fi
[ "$(tr -d '\n' <"$tmp/o")" = "" ] || fail "text output from a corrupt chunk: $(cat "$tmp/o")"
rc=0
"$BIN" doctor --model "$M" -q >"$tmp/doc" || rc=$?
[ $rc -eq 2 ] || fail "doctor exit $rc on a corrupt spine chunk"
grep -q "CORRUPT spine unit 2 chunk 1 of [0-9]*: drive $d (.*) offset $off: checksum mismatch" "$tmp/doc" ||
  fail "doctor: $(cat "$tmp/doc")"
# the shards are unharmed: --no-pack still gives the ids
got=$("$BIN" run --model "$M" --prompt-ids $P --max-new $N --json --no-pack --mem-limit "$least_bf16" \
  --cache-mb 0 --ctx 512 | jq -c .output_ids)
[ "$got" = "$ref_bf16" ] || fail "--no-pack beside a corrupt section: $got"
cp "$tmp/good.dfpack" "$f"

# a truncated drive file: a clear error at start, whatever streams
sz=$(stat -c %s "$f")
truncate -s $((sz - 4096)) "$f"
if "$BIN" run --model "$M" --prompt-ids $P --max-new 2 --mem-limit $((least_bf16 + 300000)) --cache-mb 0 --ctx 512 \
    >"$tmp/o" 2>"$tmp/e"; then
  fail "a truncated drive file was accepted"
fi
grep -q "drive $d file $f is cut short (truncated?).*spine section is incomplete" "$tmp/e" ||
  fail "truncation message: $(cat "$tmp/e")"
cp "$tmp/good.dfpack" "$f"
echo "corrupt chunk and truncated drive file: clear errors, no token"

# bench: the spine's reads replayed with the depth the store gives spine
# reads (queue depth - 1), and said so
"$BIN" bench --model "$M" --prompt-tokens 4 --new-tokens 3 --repeat 1 --mem-limit "$least_bf16" \
  --cache-mb 0 --ctx 512 --queue-depth 5 --json >"$tmp/b" 2>"$tmp/e" || fail "bench: $(cat "$tmp/e")"
jq -e '.spine_stream.source == "pack" and .spine_stream.drives == 2 and .spine_stream.replay_qd == 4' \
  "$tmp/b" >/dev/null || fail "bench spine_stream: $(jq -c .spine_stream "$tmp/b")"
echo "bench: spine replay at the store's spine depth"

# deltafin plan: the spine is read balanced across the drives only from a
# pack's spine section; --model looks at the model's pack
"$BIN" plan --mem 16G --drives 2x5GB/s --spine bf16 --expert-hit 0 --json >"$tmp/p1"
"$BIN" plan --mem 16G --drives 2x5GB/s --spine bf16 --expert-hit 0 --spine-from shards --json >"$tmp/p2"
jq -e '.projection.spine_source == "pack" and .projection.spine_balanced == true' "$tmp/p1" >/dev/null ||
  fail "plan default: $(jq -c .projection "$tmp/p1")"
jq -e --slurpfile a "$tmp/p1" '.projection as $p | $p.spine_source == "shards"
  and $p.spine_balanced == false and $p.spine_bytes_per_token == $a[0].projection.spine_bytes_per_token
  and (($p.read_s_per_token - ($p.spine_bytes_per_token + $p.expert_bytes_per_token / 2) / 5e9) | fabs) < 1e-6
  and $p.read_s_per_token > $a[0].projection.read_s_per_token' "$tmp/p2" >/dev/null ||
  fail "plan --spine-from shards: $(jq -c .projection "$tmp/p2")"
"$BIN" plan --mem 16G --drives 2x5GB/s --spine bf16 --spine-from shards >"$tmp/p3"
grep -q "from the checkpoint shards, all on one drive (not balanced" "$tmp/p3" || fail "plan text: $(cat "$tmp/p3")"
"$BIN" plan --model "$M" --mem "$least_bf16" --ctx 512 --drives 2x1GB/s --spine bf16 --json |
  jq -e '.projection.spine_source == "pack"' >/dev/null || fail "plan --model with a bf16 section"
"$BIN" plan --model "$M" --mem 4000000 --ctx 512 --drives 2x1GB/s --spine int8 --json |
  jq -e '.projection.spine_source == "shards"' >/dev/null || fail "plan --model, int8, bf16 section"

# the plan counts serve's kept conversation states: a limit that fits
# without them is refused with them, naming them and --reuse-mb
if "$BIN" plan --model "$M" --mem 100000 --ctx 512 --spine bf16 2>"$tmp/e" >/dev/null; then
  fail "plan fit 100 kB"
fi
lp=$(sed -n 's/.*at least [0-9.]* MB (\([0-9]*\) bytes).*/\1/p' "$tmp/e")
"$BIN" plan --model "$M" --mem "$lp" --ctx 512 --spine bf16 --json >/dev/null ||
  fail "plan at its least limit $lp"
if "$BIN" plan --model "$M" --mem "$lp" --ctx 512 --spine bf16 --reuse-mb 1 2>"$tmp/e"; then
  fail "plan --reuse-mb 1 fit in the least memory without reuse"
fi
grep -q "kept conversation states.*--reuse-mb" "$tmp/e" || fail "plan refusal: $(cat "$tmp/e")"
"$BIN" plan --model "$M" --mem 64M --ctx 512 --spine bf16 --reuse-mb 1 --json |
  jq -e '.plan.reuse_bytes > 0 and .plan.reuse_bytes <= 1048576' >/dev/null || fail "plan json reuse_bytes"
if "$BIN" serve --model "$M" --mem-limit "$least_bf16" --ctx 512 --cache-mb 0 --reuse-mb 1 --port 1 \
    2>"$tmp/e" >/dev/null; then
  fail "serve started in the least memory without reuse"
fi
grep -q "kept conversation states.*--reuse-mb" "$tmp/e" || fail "serve refusal: $(cat "$tmp/e")"
echo "plan: spine balance by source, serve's reuse states counted"
echo "OK"

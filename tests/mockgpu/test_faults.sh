#!/bin/sh
# --device cuda when the GPU fails (the stand-in of tests/mockgpu, which can
# fail its N-th allocation, copy in, product, KDA sequence part, MLA
# attention kernel, wait, device copy or copy out): every run finishes with
# the CPU's ids exactly, except on a device that dies holding the only
# current sequence state, which must stop saying so.
# A failed product (or KDA sequence part, df_kgpu_kda, or MLA attention,
# df_kgpu_mla) and every later one are computed on the CPU,
# counted as fallbacks, the error named once on stderr and in the stats; a
# routed-experts batch that fails at its end (its records already released)
# is read again and computed on the CPU, said on stderr. Swept over the
# first calls of each kind on two models, so both paths are reached
# (checked).
set -eu
BIN=${DF_BIN:?set DF_BIN}
SRC=${DF_SRC:?set DF_SRC}
PY=${PYTHON:-python3}
T=$(mktemp -d "${TMPDIR:-/tmp}/df_mockfault.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }
"$BIN" --version | grep -q "^cuda: MOCK" || { echo "skip: not a -DDF_MOCKGPU=ON build"; exit 77; }

"$BIN" make-model --preset tiny --seed 3 --out "$T/tiny" -q >/dev/null 2>&1 || fail "make-model"
P=$(seq -s, 100 120)
field() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
# same_st A B LABEL: every tensor of two safetensors files (logits --hidden) equal byte for byte
same_st() { "$PY" "$SRC/tests/cuda/same_st.py" "$1" "$2" "$3" >/dev/null; }
# the store's record buffers page-locked for the copies, and every range
# unlocked before it is freed (the stand-in checks at exit)
"$BIN" run --model "$SRC/models/nano-k3" --prompt-ids "$P" --max-new 8 --json --heat '' \
  >"$T/cpu.json" 2>"$T/e" || fail "cpu run: $(cat "$T/e")"
DF_MOCK_CUDA_CHECK_PINS=1 "$BIN" run --model "$SRC/models/nano-k3" --prompt-ids "$P" --max-new 8 \
  --json --heat '' --device cuda --cache-mb 0 >"$T/g.json" 2>"$T/e" || fail "pinned run: $(cat "$T/e")"
[ "$(field "$T/g.json" "d['output_ids']")" = "$(field "$T/cpu.json" "d['output_ids']")" ] ||
  fail "pinned run: ids differ"
[ "$(field "$T/g.json" "d['stats']['device']['pinned_bytes'] > 0")" = True ] ||
  fail "no record buffer page-locked: $(cat "$T/g.json")"
echo "ok   the store's record buffers page-locked, and unlocked before they are freed"
# a tier larger than the device's free memory (the stand-in has 8 GiB): refused, saying both
if "$BIN" run --model "$SRC/models/nano-k3" --prompt-ids 1 --max-new 1 --device cuda --gpu-mem 9G \
    >/dev/null 2>"$T/e"; then fail "--gpu-mem 9G on an 8 GiB device ran"; fi
grep -q -- "--device cuda:0: --gpu-mem: 8.38 GiB asked, cuda:0 has 8.00 GiB free" "$T/e" ||
  fail "--gpu-mem 9G: $(cat "$T/e")"
DF_DEVICE=cuda:1 "$BIN" run --model "$SRC/models/nano-k3" --prompt-ids 1 --max-new 1 >/dev/null 2>"$T/e" &&
  fail "DF_DEVICE=cuda:1 ran on a one-device machine"
grep -q "DF_DEVICE=cuda:1: no CUDA device 1 (1 found: cuda:0 .. cuda:0)" "$T/e" || fail "cuda:1: $(cat "$T/e")"
echo "ok   a tier larger than the device and a device that is not there are refused with the reason"
# a device just large enough for the weights: the per-use buffers take their
# room from the tier's budget instead of failing products over to the CPU
# (7 MB: nano-K3's 12 MB of weights do not fit; the spine's kept part fills it)
DF_MOCK_CUDA_MEM=7000000 "$BIN" run --model "$SRC/models/nano-k3" --prompt-ids "$P" --max-new 8 \
  --json --heat '' --device cuda --gpu-mem 6950000 >"$T/g.json" 2>"$T/e" || fail "tight device: $(cat "$T/e")"
[ "$(field "$T/g.json" "d['output_ids']")" = "$(field "$T/cpu.json" "d['output_ids']")" ] ||
  fail "tight device: ids differ"
[ "$(field "$T/g.json" "(d['stats']['device']['fallbacks'], d['stats']['device']['tier_cap'] < 6950000)")" = "(0, True)" ] ||
  fail "tight device: $(field "$T/g.json" "d['stats']['device']")"
echo "ok   a device full of kept weights gives the per-use buffers their room"
# ... and a product that fails there says the device is full (the driver's
# own allocations may be what failed) and what leaves it room
DF_MOCK_CUDA_MEM=7000000 DF_MOCK_CUDA_FAIL=gemm:3 "$BIN" run --model "$SRC/models/nano-k3" \
  --prompt-ids "$P" --max-new 8 --json --heat '' --device cuda --gpu-mem 6950000 >"$T/g.json" 2>"$T/e" ||
  fail "tight device, gemm:3: $(cat "$T/e")"
[ "$(field "$T/g.json" "d['output_ids']")" = "$(field "$T/cpu.json" "d['output_ids']")" ] ||
  fail "tight device, gemm:3: ids differ"
grep -q "mock gemm #3: injected failure (its memory is full: [0-9]* of 7 MiB free; a smaller --gpu-mem leaves the driver room); the layers' products run on the CPU from here on" \
  "$T/e" || fail "tight device, gemm:3: $(cat "$T/e")"
echo "ok   a failure on a full device says so"
# the default tier leaves a sixteenth of the device free, at least 2 GiB, for
# what the driver allocates on its own later: 6 GiB of the stand-in's 8, 60
# of a 64 GiB device
for mem in 8589934592:6442450944 68719476736:64424509440; do
  DF_MOCK_CUDA_MEM=${mem%%:*} "$BIN" run --model "$SRC/models/nano-k3" --prompt-ids 1 --max-new 1 \
    --json --heat '' --device cuda >"$T/g.json" 2>"$T/e" || fail "default tier, ${mem%%:*}: $(cat "$T/e")"
  [ "$(field "$T/g.json" "d['stats']['device']['tier_cap']")" = "${mem#*:}" ] ||
    fail "default tier on ${mem%%:*} bytes: $(field "$T/g.json" "d['stats']['device']['tier_cap']"), not ${mem#*:}"
done
echo "ok   the default tier leaves the driver a sixteenth of the device, at least 2 GiB"
# ... and what the open left beyond the tier (up to that reserve) stays free
# to the end: the per-use buffers and the state take their room from the
# tier, not from it (run 24: a 512-token prefill's buffers took the reserve
# and a launch failed at 18 MiB free). 14 MB with a 10 MB tier: 4 MB stay.
# One new token: the buffers come first and the tier fills after them (its
# own allocations stop at the floor); 8: the buffers grow after the tier
# filled (they shrink it).
for n in 1 8; do
  DF_MOCK_CUDA_MEM=14000000 "$BIN" run --model "$SRC/models/nano-k3" --prompt-ids "$P" --max-new $n \
    --json --heat '' --device cuda --gpu-mem 10000000 >"$T/g.json" 2>"$T/e" || fail "floor, $n: $(cat "$T/e")"
  [ "$(field "$T/g.json" "d['output_ids']")" = "$(field "$T/cpu.json" "d['output_ids'][:$n]")" ] ||
    fail "floor, $n: ids differ"
  [ "$(field "$T/g.json" "(d['stats']['device']['fallbacks'], d['stats']['device']['mem_free'] >= 4000000, d['stats']['device']['tier_cap'] < 10000000)")" = "(0, True, True)" ] ||
    fail "floor, $n new: $(field "$T/g.json" "d['stats']['device']")"
done
# run 24's order: bench's cold warm-up fills the tier with every weight, then
# its 128-token prompt grows the buffers with nothing more to put in the
# tier (without shrinking it, 1.5 MB of the 4 stay free)
DF_MOCK_CUDA_MEM=18000000 "$BIN" bench --model "$SRC/models/nano-k3" --device cuda --gpu-mem 14000000 \
  --prompt-tokens 128 --new-tokens 2 --repeat 1 --heat '' --json >"$T/b.json" 2>"$T/e" ||
  fail "floor, bench: $(cat "$T/e")"
[ "$(field "$T/b.json" "(d['device']['fallbacks'], d['device']['mem_free'] >= 4000000)")" = "(0, True)" ] ||
  fail "floor, bench: $(field "$T/b.json" "d['device']")"
echo "ok   the per-use buffers leave the driver what the open left it"
# ... and give the tier its memory back: a 128-token prompt in one chunk
# grows them until the tier's budget is 9.3 of the 14 MB (the short prompt's
# stays 14); the decode passes after it, of one row, free them and the
# budget comes back to within 1 MB of the short prompt's (without the trim
# it stays at 9.3 for the rest of the process)
L=$(seq -s, 100 227)
"$BIN" run --model "$SRC/models/nano-k3" --prompt-ids "$L" --prefill-chunk 128 --max-new 8 --json \
  --heat '' >"$T/cpu.json" 2>"$T/e" || fail "cpu run, long prompt: $(cat "$T/e")"
for p in 100,101,102,103 "$L"; do
  DF_MOCK_CUDA_MEM=18000000 "$BIN" run --model "$SRC/models/nano-k3" --prompt-ids "$p" \
    --prefill-chunk 128 --max-new 8 --json --heat '' --device cuda --gpu-mem 14000000 \
    >"$T/g.json" 2>"$T/e" || fail "trim: $(cat "$T/e")"
  [ "$p" = "$L" ] || { short=$(field "$T/g.json" "d['stats']['device']['tier_cap']"); continue; }
  [ "$(field "$T/g.json" "d['output_ids']")" = "$(field "$T/cpu.json" "d['output_ids']")" ] ||
    fail "trim: ids differ"
  dv="d['stats']['device']"
  got=$(field "$T/g.json" "($dv['fallbacks'], $dv['buffer_trims'] > 0,
    $dv['tier_cap'] >= $short - 1000000, $dv['mem_free'] >= 4000000)")
  [ "$got" = "(0, True, True, True)" ] ||
    fail "trim: after the decode (the short prompt's budget $short): $(field "$T/g.json" "$dv")"
done
echo "ok   decode after a long prompt frees the buffers it grew, and the tier gets their room back"
# the tier's heap (kernels/dheap.h) on a device whose allocations take whole
# 2 MiB granules: nano-K3's 324 matrices (12.5 MB, most far below a
# granule) all kept in about 6 granules, as on a device that rounds nothing;
# each allocated on its own (DF_CUDA_TIER_VMM=0), a granule each fills the
# device and the tier keeps a few. The CPU's ids either way.
"$BIN" run --model "$SRC/models/nano-k3" --prompt-ids "$P" --max-new 8 --json --heat '' \
  >"$T/cpu.json" 2>"$T/e" || fail "cpu run: $(cat "$T/e")"
for vmm in 1 0; do
  DF_CUDA_TIER_VMM=$vmm DF_MOCK_CUDA_GRAN=2097152 DF_MOCK_CUDA_MEM=400000000 "$BIN" run \
    --model "$SRC/models/nano-k3" --prompt-ids "$P" --max-new 8 --json --heat '' --device cuda \
    --gpu-mem 60000000 >"$T/g$vmm.json" 2>"$T/e" || fail "granules, vmm $vmm: $(cat "$T/e")"
  [ "$(field "$T/g$vmm.json" "d['output_ids']")" = "$(field "$T/cpu.json" "d['output_ids']")" ] ||
    fail "granules, vmm $vmm: ids differ"
done
dv="d['stats']['device']"
got=$(field "$T/g1.json" "($dv['fallbacks'], $dv['tier_entries'], $dv['tier_granule'],
  0 < $dv['tier_mapped'] - $dv['tier_bytes'] < 2097152)")
[ "$got" = "(0, 324, 2097152, True)" ] || fail "granules, the heap: $(field "$T/g1.json" "$dv")"
got=$(field "$T/g0.json" "($dv['tier_granule'], $dv['tier_mapped'], $dv['tier_entries'] < 50)")
[ "$got" = "(0, 0, True)" ] || fail "granules, each on its own: $(field "$T/g0.json" "$dv")"
echo "ok   the tier's matrices share the device's granules ($(field "$T/g1.json" "$dv['tier_entries']") kept; $(field "$T/g0.json" "$dv['tier_entries']") each on its own)"

# a KDA layer's sequence part (df_kgpu_kda) that fails on the GPU, in the
# prefill's second KDA layer: that layer and the rest computed on the CPU
# from the buffers the failed call left untouched, every position's logits
# and hidden states the CPU's bit for bit (the sweep below also fails it in
# decode passes)
Q=$(seq -s, 100 140)
"$BIN" logits --model "$T/tiny" --prompt-ids "$Q" --hidden --heat '' --out "$T/cpu.st" >/dev/null 2>"$T/e" ||
  fail "logits cpu: $(cat "$T/e")"
# fault_logits KIND:N: logits and hidden states with that call failing on
# the device equal the CPU's, after the one warning that says so
fault_logits() {
  DF_MOCK_CUDA_FAIL=$1 "$BIN" logits --model "$T/tiny" --prompt-ids "$Q" --hidden --heat '' \
    --device cuda --out "$T/f.st" >/dev/null 2>"$T/e" || fail "logits $1: $(cat "$T/e")"
  grep -q "mock ${1%%:*} #${1#*:}: injected failure; the layers' products run on the CPU from here on" \
    "$T/e" || fail "$1: no warning: $(cat "$T/e")"
  same_st "$T/cpu.st" "$T/f.st" "$1" || fail "$1: the logits or hidden states differ from the CPU's"
}
fault_logits kda:2
DF_MOCK_CUDA_FAIL=kda:2 "$BIN" run --model "$T/tiny" --prompt-ids "$Q" --max-new 4 --json --heat '' \
  --device cuda >"$T/g.json" 2>"$T/e" || fail "run kda:2: $(cat "$T/e")"
[ "$(field "$T/g.json" "(d['stats']['device']['seq_calls'], d['stats']['device']['fallbacks'] > 0)")" = "(1, True)" ] ||
  fail "kda:2: $(field "$T/g.json" "d['stats']['device']")"
echo "ok   a failed KDA sequence part is computed on the CPU with the same floats"
# the same for an MLA layer's attention (df_kgpu_mla) failing in its kernel
fault_logits mla:1
echo "ok   a failed MLA attention is computed on the CPU with the same floats"
# and a layer's input (AttnRes and the norm, df_kgpu_pre) failing on the
# device: the host makes it (from its own snapshots) and goes on
fault_logits ar:3
echo "ok   a failed layer input is made on the CPU with the same floats"

exact=0 again=0 clean=0
for m in "$T/tiny" "$SRC/models/nano-k3"; do
  "$BIN" run --model "$m" --prompt-ids "$P" --max-new 8 --json --heat '' >"$T/cpu.json" 2>"$T/e" ||
    fail "cpu run: $(cat "$T/e")"
  ref=$(field "$T/cpu.json" "d['output_ids']")
  for kind in alloc put gemm sync kda mla copy get ar; do
    for n in 1 3 8 21 55 144; do
      DF_MOCK_CUDA_FAIL=$kind:$n "$BIN" run --model "$m" --prompt-ids "$P" --max-new 8 --json \
        --heat '' --device cuda >"$T/g.json" 2>"$T/e" || fail "$kind:$n on $m: $(cat "$T/e")"
      got=$(field "$T/g.json" "d['output_ids']")
      [ "$got" = "$ref" ] || fail "$kind:$n on $m: ids $got, the CPU's $ref"
      fb=$(field "$T/g.json" "d['stats']['device']['fallbacks']")
      if grep -q "the GPU's expert batch failed (mock $kind #$n: injected failure); its experts are read again" "$T/e"; then
        again=$((again + 1))
      elif [ "$fb" -gt 0 ]; then
        exact=$((exact + 1))
      else
        clean=$((clean + 1)) # absorbed (a refused tier entry goes per use) or never reached
        continue
      fi
      field "$T/g.json" "d['stats']['device']['last_error']" | grep -q "mock $kind #$n: injected" ||
        fail "$kind:$n: the stats do not name the error: $(cat "$T/g.json")"
      [ "$(grep -c "run on the CPU from here on" "$T/e")" = 1 ] ||
        fail "$kind:$n: not one warning: $(cat "$T/e")"
    done
  done
done
echo "faults: the CPU's ids in every run: $exact products taken over by the CPU, $again expert batches read again, $clean absorbed"

# The sequence state kept on the device (--gpu-state keep, the default):
# one failed copy leaves it recoverable (the sweep above: copy, get), but a
# device that dies (every copy to the host failing from the N-th on) while
# it holds the only current KDA state loses that state: the run must stop
# with an error that says so, never print ids. With --gpu-state copy the
# host always has the state and the same dead device gives the CPU's ids.
m="$T/tiny"
"$BIN" run --model "$m" --prompt-ids "$P" --max-new 8 --json --heat '' >"$T/cpu.json" 2>"$T/e" ||
  fail "cpu run: $(cat "$T/e")"
ref=$(field "$T/cpu.json" "d['output_ids']")
lost=0
for n in 1 20 40 80 160; do
  rc=0
  DF_MOCK_CUDA_FAIL=get:$n+ "$BIN" run --model "$m" --prompt-ids "$P" --max-new 8 --json --heat '' \
    --device cuda >"$T/g.json" 2>"$T/e" || rc=$?
  if [ "$rc" != 0 ]; then
    grep -q "the GPU failed while it held this sequence's recurrent state (mock get #$n: injected failure)" "$T/e" ||
      fail "get:$n+: exit $rc without saying the state was lost: $(cat "$T/e")"
    [ ! -s "$T/g.json" ] || fail "get:$n+: a lost state still printed: $(cat "$T/g.json")"
    lost=$((lost + 1))
  else
    [ "$(field "$T/g.json" "d['output_ids']")" = "$ref" ] || fail "get:$n+: ids differ from the CPU's"
  fi
  DF_MOCK_CUDA_FAIL=get:$n+ "$BIN" run --model "$m" --prompt-ids "$P" --max-new 8 --json --heat '' \
    --device cuda --gpu-state copy >"$T/g.json" 2>"$T/e" || fail "get:$n+ --gpu-state copy: $(cat "$T/e")"
  [ "$(field "$T/g.json" "d['output_ids']")" = "$ref" ] || fail "get:$n+ --gpu-state copy: ids differ"
done
[ "$lost" -gt 0 ] || fail "no dead device met a state kept on it"

# Speculation keeps its marks' states on the device (the per-row states a
# verify pass writes, the mark saved before it, the restores): a device
# copy, an allocation or a KDA call failing while marks are there must
# still give the CPU's ids, in both ways of rolling back. The copies swept
# are those of the verify passes (after the prefill's and the first decode
# passes' copies); a run counts as "after marks" when its failure came once
# marks had been copied there (seq_copies > 0).
TXT="The cat sat on the mat. The dog sat on the log. The cat sat on the"
after=0
for rb in rows recompute; do
  a="--model $SRC/models/nano-k3 --prompt \"$TXT\" --max-new 16 --json --heat '' --draft ngram --draft-rollback $rb"
  eval "\"$BIN\" run $a" >"$T/cpu.json" 2>"$T/e" || fail "cpu ngram $rb: $(cat "$T/e")"
  ref=$(field "$T/cpu.json" "d['output_ids']")
  for f in copy:160 copy:166 copy:172 copy:178 copy:184 copy:190 copy:196 copy:202 copy:208 \
           copy:220 copy:226 copy:232 copy:244 alloc:12 alloc:14 alloc:16 kda:30 kda:40; do
    eval "DF_MOCK_CUDA_FAIL=$f \"$BIN\" run $a --device cuda" >"$T/g.json" 2>"$T/e" ||
      fail "ngram $rb $f: $(cat "$T/e")"
    [ "$(field "$T/g.json" "d['output_ids']")" = "$ref" ] || fail "ngram $rb $f: ids differ from the CPU's"
    [ "$(field "$T/g.json" "d['stats']['device']['fallbacks'] > 0 and d['stats']['device']['seq_copies'] > 0")" = True ] &&
      after=$((after + 1))
  done
done
[ "$after" -ge 10 ] || fail "only $after failures met marks kept on the device"
# A device too full for a mark's entry (allocations failing for a while,
# past the retry after the tier gives memory back and past the unfused
# retry): not an error. The CPU's loops write that layer's marks from the
# state pulled back, the context is not given up (no fallback) and the
# device goes on with the next layers. The windows sweep the verify
# passes' allocations; one must meet a mark's.
a="--model $SRC/models/nano-k3 --prompt \"$TXT\" --max-new 16 --json --heat '' --draft ngram --draft-rollback rows"
eval "\"$BIN\" run $a" >"$T/cpu.json" 2>"$T/e" || fail "cpu ngram rows: $(cat "$T/e")"
ref=$(field "$T/cpu.json" "d['output_ids']")
full=0
for n in 330 342 354 366 378 390 402 414; do
  eval "DF_MOCK_CUDA_FAIL=alloc:$n-$((n + 5)) \"$BIN\" run $a --device cuda" >"$T/g.json" 2>"$T/e" ||
    fail "alloc:$n-$((n + 5)): $(cat "$T/e")"
  [ "$(field "$T/g.json" "d['output_ids']")" = "$ref" ] || fail "alloc:$n-$((n + 5)): ids differ from the CPU's"
  [ "$(field "$T/g.json" "(d['stats']['device']['fallbacks'], d['stats']['device']['seq_pulls'] > 0, d['stats']['device']['seq_copies'] > 0)")" = "(0, True, True)" ] &&
    full=$((full + 1))
done
[ "$full" -gt 0 ] || fail "no allocation window met a mark's entry (the run's allocations moved: widen the sweep)"
echo "ok   a device too full for a mark: $full runs wrote it on the CPU and went on on the device"
echo "ok   speculation with its marks on the device: $after failures after marks were there, the CPU's ids"
echo "ok   a device that dies holding the state: $lost runs stop saying so; with --gpu-state copy the CPU's ids"
[ "$exact" -gt 0 ] || fail "no injected failure was taken over by the CPU"
[ "$again" -gt 0 ] || fail "no injected failure hit an expert batch"

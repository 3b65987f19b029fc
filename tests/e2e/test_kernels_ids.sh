#!/bin/sh
# SIMD on and off give the same token ids: `deltafin run` on generated tiny
# checkpoints with --kernels scalar, with auto, and with every SIMD table this
# CPU runs forced through DF_KERNELS (avx2, avx512; neon on ARM), for the bf16
# and the row-int8 spine, decode (GEMV) and batched prefill (GEMM, whole
# prompt and ragged chunks), 1 and 2 threads. The kernel tables claim the
# same summation order bit for bit (kernels.h), so the ids must be identical;
# each run's JSON must also name the table it was asked for, so a silent
# fall-back to scalar cannot make the test pass vacuously.
set -eu
BIN=${DF_BIN:-build/deltafin}
T=$(mktemp -d "${TMPDIR:-/tmp}/df_e2e_kern.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

IDS=$(seq -s, 100 140) # 41 prompt tokens: not a multiple of any vector width
NEW=24

# run_ids MODEL WANT_TABLE [run options...]: prints the output ids
run_ids() {
  m=$1 want=$2
  shift 2
  "$BIN" run --model "$m" --prompt-ids "$IDS" --max-new $NEW --json "$@" >"$T/out.json" 2>"$T/err" ||
    { cat "$T/err" >&2; fail "run $* failed"; }
  got=$(sed -n 's/.*"kernels":"\([a-z0-9]*\)".*/\1/p' "$T/out.json")
  [ "$got" = "$want" ] || fail "asked for kernels '$want', the run used '$got' ($*)"
  ids=$(sed -n 's/.*"output_ids":\[\([0-9,]*\)\].*/\1/p' "$T/out.json")
  [ -n "$ids" ] || fail "no output_ids in the JSON of run $*"
  echo "$ids"
}

for seed in 1 2; do
  "$BIN" make-model --preset tiny --seed $seed --out "$T/m$seed" -q >/dev/null 2>&1 || fail "make-model seed $seed"
  "$BIN" convert-spine --model "$T/m$seed" >/dev/null 2>&1 || fail "convert-spine seed $seed"
done

# The tables this machine runs: forcing one it lacks is a warning (and auto).
tables=""
for t in avx2 avx512 neon; do
  if DF_KERNELS=$t "$BIN" run --model "$T/m1" --prompt-ids 1 --max-new 1 --json 2>&1 >/dev/null |
      grep -q "DF_KERNELS=$t: no such kernel table"; then
    echo "note: $t kernels not available on this CPU/architecture: not compared"
  else
    tables="$tables $t"
  fi
done
# auto picks the widest: avx512, then avx2, then neon
want_auto=scalar
for t in neon avx2 avx512; do
  case " $tables " in *" $t "*) want_auto=$t ;; esac
done
[ -n "$tables" ] || echo "note: no SIMD table on this machine; only scalar vs auto (= scalar) is compared"

n=0
for seed in 1 2; do
  M="$T/m$seed"
  for spine in bf16 int8; do
    for split in "--prefill-chunk 0" "--prefill-chunk 7" "--prefill-chunk 1"; do
      for th in 1 2; do
        # shellcheck disable=SC2086
        ref=$(run_ids "$M" scalar --kernels scalar --spine $spine $split --threads $th)
        # shellcheck disable=SC2086
        a=$(DF_KERNELS= run_ids "$M" $want_auto --spine $spine $split --threads $th)
        [ "$a" = "$ref" ] || fail "seed $seed spine $spine $split threads $th: auto ids $a != scalar ids $ref"
        for t in $tables; do
          # shellcheck disable=SC2086
          got=$(DF_KERNELS=$t run_ids "$M" $t --spine $spine $split --threads $th)
          [ "$got" = "$ref" ] || fail "seed $seed spine $spine $split threads $th: $t ids $got != scalar ids $ref"
          n=$((n + 1))
        done
      done
    done
  done
done
# with --kernels scalar, DF_KERNELS must not override the request
got=$(DF_KERNELS=avx2 run_ids "$T/m1" scalar --kernels scalar)
[ -n "$got" ] || fail "--kernels scalar with DF_KERNELS set"
echo "ok: identical ids for scalar, auto and$tables ($n SIMD runs compared)"

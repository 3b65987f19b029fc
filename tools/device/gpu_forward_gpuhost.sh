#!/bin/bash
# Issue 21, --device cuda on the GPU machine: the GPU test of the engine
# (tests/cuda/test_device_forward.sh), the kernels' test, and decode/prefill
# on the CPU and the GPU of the same host (nano-K3 and a k3-trunk). Built on
# the VM with -DDF_CUDA=ON, the binaries and their shared libraries packed
# by tools/device/bundle.sh (its header has the recipe) into out/gpu;
# then `bash tools/device/gpu_forward_gpuhost.sh out/gpu` there with out/gpu
# carried; results in $OUT/r.tgz (one file: a call brings back only a few).
# STEPS (default "test kern gbench nano spec trunk"; also "suite": CPU e2e
# suites with DF_DEVICE=cuda, where jq and curl are there, and "test_pdl":
# test with DF_CUDA_PDL=1, "test_plain": with DF_CUDA_PDL=0) picks parts;
# TRUNK_LAYERS (default 4) the k3-trunk's depth.
set -u
D=$(cd "${1:-out/gpu}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
[ -e "$D/deltafin" ] || tar xJf "$D/bin.tar.xz" -C "$D" # bundle.sh's
L=$D/lib
if [ ! -d "$L" ]; then L=/tmp/dfgpu-lib; mkdir -p $L && tar xJf "$D/lib.tar.xz" -C $L --strip-components=1; fi
# The carried libraries for our binaries only: exported, they would also be
# loaded by the host's own tools the tests call (its curl against our
# libcurl fails with an undefined symbol), so deltafin runs through a wrapper.
mkdir -p /tmp/dfgpu-bin
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$L" "$D/deltafin" > /tmp/dfgpu-bin/deltafin
chmod +x /tmp/dfgpu-bin/deltafin
B=/tmp/dfgpu-bin/deltafin
ours() { LD_LIBRARY_PATH=$L "$@"; }
R=$OUT/r; mkdir -p "$R"
STEPS=${STEPS:-test kern gbench nano spec trunk}
ts() { echo "[$(date +%T)] $*" | tee -a "$R/log.txt"; }
{ nvidia-smi; lscpu | grep -E 'Model name|^CPU\(s\)'; free -g; df -h /tmp; } > "$R/machine.txt" 2>&1
"$B" --version > "$R/version.txt" 2>&1
for s in $STEPS; do
  case $s in
  test)
    ts "gpu.test_device_forward"
    { time DF_BIN=$B DF_SRC=$SRC timeout 330 sh "$SRC/tests/cuda/test_device_forward.sh"; echo "rc=$?"; } \
      > "$R/test_device_forward.txt" 2>&1
    tail -3 "$R/test_device_forward.txt" ;;
  test_pdl)
    # the same with every kernel as a dependent launch (DF_CUDA_PDL=1)
    ts "gpu.test_device_forward, DF_CUDA_PDL=1"
    { time DF_CUDA_PDL=1 DF_BIN=$B DF_SRC=$SRC timeout 330 sh "$SRC/tests/cuda/test_device_forward.sh"; echo "rc=$?"; } \
      > "$R/test_device_forward_pdl.txt" 2>&1
    tail -3 "$R/test_device_forward_pdl.txt" ;;
  test_plain)
    # no dependent launch at all (DF_CUDA_PDL=0; the default: the row-tile GEMVs)
    ts "gpu.test_device_forward, DF_CUDA_PDL=0"
    { time DF_CUDA_PDL=0 DF_BIN=$B DF_SRC=$SRC timeout 330 sh "$SRC/tests/cuda/test_device_forward.sh"; echo "rc=$?"; } \
      > "$R/test_device_forward_plain.txt" 2>&1
    tail -3 "$R/test_device_forward_plain.txt" ;;
  kern)
    ts "gpu.test_cuda_kernels"
    { time ours timeout 300 "$D/test_cuda_kernels"; echo "rc=$?"; } > "$R/test_cuda_kernels.txt" 2>&1
    tail -3 "$R/test_cuda_kernels.txt"
    if [ -x "$D/test_cuda_seq" ]; then
      ts "gpu.test_cuda_seq (KDA conv and recurrence, MLA attention)"
      { time ours timeout 120 "$D/test_cuda_seq"; echo "rc=$?"; } > "$R/test_cuda_seq.txt" 2>&1
      tail -3 "$R/test_cuda_seq.txt"
    fi ;;
  suite)
    # the reference needs numpy and torch: the host's /usr/bin/python3 has
    # neither, the python3 on its PATH (the one transformers runs in) both
    PYREF=$(command -v python3 || echo /usr/bin/python3)
    for n in test_golden test_run test_chat_piped test_serve_api test_serve_metrics test_serve_reuse \
             test_spine_stream; do
      command -v jq >/dev/null && command -v curl >/dev/null || { ts "suite: no jq/curl here"; break; }
      ts "DF_DEVICE=cuda $n"
      { DF_DEVICE=cuda DF_BIN=$B DF_SRC=$SRC PYTHON=$PYREF timeout 300 sh "$SRC/tests/e2e/$n.sh"; echo "rc=$?"; } \
        > "$R/suite_$n.txt" 2>&1
      tail -1 "$R/suite_$n.txt"
    done ;;
  gbench)
    ts "deltafin-cuda-bench (GEMV and GEMM bandwidth)"
    ours timeout 300 "$D/deltafin-cuda-bench" 200 > "$R/cuda_bench.json" 2> "$R/cuda_bench.err"
    # the bench writes its JSON by hand: say so here when it does not parse
    python3 -m json.tool "$R/cuda_bench.json" > /dev/null 2>> "$R/cuda_bench.err" ||
      ts "cuda_bench.json does not parse (cuda_bench.err)" ;;
  nano)
    ts "nano-K3 decode and prefill, cpu and cuda"
    P=$(seq -s, 100 227) # 128 positions
    for dev in cpu cuda; do
      for th in 16 4; do
        "$B" run --model "$SRC/models/nano-k3" --prompt-ids "$P" --max-new 64 --json --heat '' \
          --threads $th --device $dev > "$R/nano_${dev}_t$th.json" 2> "$R/nano_${dev}_t$th.err"
      done
    done ;;
  spec)
    # speculation with its marks kept on the device (no state pulled back):
    # the n-gram draft on a repetitive text, both ways of rolling back, against --draft off
    ts "nano-K3 speculation, cpu and cuda"
    TXT="The cat sat on the mat. The dog sat on the log. The cat sat on the mat. The dog sat on the"
    for dev in cpu cuda; do
      for d in off recompute rows; do
        a=(--draft ngram --draft-rollback "$d"); [ "$d" = off ] && a=()
        "$B" run --model "$SRC/models/nano-k3" --prompt "$TXT" --max-new 96 --json --heat '' \
          --threads 16 --device $dev "${a[@]}" > "$R/spec_${dev}_$d.json" 2> "$R/spec_${dev}_$d.err"
      done
    done ;;
  trunk)
    W=/tmp/dftrunk; mkdir -p $W
    N=${TRUNK_LAYERS:-4}
    ts "make-model k3-trunk --layers $N"
    [ -d $W/t ] || timeout 200 "$B" make-model --preset k3-trunk --layers "$N" --experts 16 --out $W/t -q \
      > "$R/trunk_make.txt" 2>&1
    ts "convert-spine"
    [ -d $W/t/spine-int8 ] || timeout 120 "$B" convert-spine --model $W/t --threads 16 -q >> "$R/trunk_make.txt" 2>&1
    for spine in ${TRUNK_SPINES:-int8 bf16}; do
      for dev in cpu cuda; do
        ts "trunk $spine $dev decode"
        timeout 120 "$B" run --model $W/t --spine $spine --prompt-ids 1,2,3 --max-new 6 --json --heat '' \
          --threads 16 --device $dev > "$R/trunk_${spine}_${dev}_decode.json" 2> "$R/trunk_${spine}_${dev}_decode.err"
        for np in 64 512; do
          ts "trunk $spine $dev prefill $np"
          timeout 120 "$B" run --model $W/t --spine $spine --prompt-ids "$(seq -s, 1 $np)" --max-new 1 \
            --json --heat '' --threads 16 --device $dev > "$R/trunk_${spine}_${dev}_prefill$np.json" \
            2> "$R/trunk_${spine}_${dev}_prefill$np.err"
        done
      done
    done ;;
  esac
done
ts "done"
cd "$OUT" && tar czf r.tgz r && rm -rf r

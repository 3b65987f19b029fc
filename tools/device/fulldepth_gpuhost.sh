#!/bin/bash
# Issue 21's first full-depth measurement on the GPU machine: a 93-layer
# k3-trunk (every real dimension, 16 real-shape experts per MoE layer, the
# row-int8 spine written directly by `make-model --spine int8`) generated
# there, then decode (3 prompt ids, 4 new) and a 512-token prefill (1 new) on
# its 16 CPU cores and with --device cuda, the ids compared across devices,
# the model deleted. Every step is timestamped; the whole stays under
# BUDGET seconds (default 530: 9 minutes less room to clean up).
#
# Where it goes: the int8 spine is 56.2 GB and the shards 25.9 GB (the routed
# experts, 92 x 16 x 17.5 MB, plus routers and norms; the bf16 spine is holes,
# no disk): 82 GB, more than the machine's 64 GiB disk. The shards go to the
# disk (MODEL_DIR), so the experts are read from it as from a drive; the int8
# spine to a tmpfs (SPINE_DIR: /dev/shm when it has room, else a tmpfs
# mounted here, else the disk if it holds both): RAM that a run keeps the
# spine resident in anyway (the plan holds every unit; --mem-limit). The
# script checks the free space first and refuses with the numbers.
#
# Built on the VM with -DDF_CUDA=ON and packed with its shared libraries by
# tools/device/bundle.sh (its header has the recipe) into out/fd;
# then `bash tools/device/fulldepth_gpuhost.sh out/fd` there with out/fd
# carried. The prefill runs take the prompt as one chunk (--prefill-chunk
# PREFILL), so each expert is read once for it. Results:
# $OUT/{cpu,cuda}_{decode,prefill}.json (each run's --json), $OUT/summary.txt
# (timings, ids, the comparison), $OUT/r.tgz (stderr of every step,
# make-model's log, machine, df, meminfo). MODEL_DIR and the int8 dir must not
# exist yet: the script deletes only what it made.
# Knobs: LAYERS (93), EXPERTS (16), PREFILL (512), THREADS (nproc),
# CACHE_MB (0: every pass reads its experts from the disk), MEM_LIMIT (100G), GPU_MEM (--gpu-mem
# for the cuda runs; default: none, the default tier),
# MODEL_DIR ($HOME/dffull), SPINE_DIR, DROP_CACHES (1), SAMPLE (5 s; 0: off), STEPS (default
# "gen cpu_decode cuda_decode cpu_prefill cuda_prefill"; also cuda_decode_notier:
# --gpu-mem 57G, the tier holding the spine only, and cuda_decode_copy:
# --gpu-state copy; cuda_bench / cpu_bench: `bench --model`, a cold warm-up then a warm
# PREFILL-token prompt and 8 new tokens, and the disk's ceiling; cuda_bench_gl: cuda_bench
# with DF_CUDA_GEMM_TILES=2, cuda_bench_lanes with 0; cuda_bench_pdl and cuda_decode_pdl
# with DF_CUDA_PDL=1, cuda_bench_plain and cuda_decode_plain with DF_CUDA_PDL=0; cuda_bench_sx and cuda_decode_sx with DF_CUDA_SHARED_X=1), KEEP=1
# keeps the model.
# Time: the budget is split evenly over the steps left. A full-depth bench on an
# 80 GB H100 takes about 120 s (its experts do not all fit the tier, and the storage
# ceiling then replays the decode's reads, 36 GB at the disk's 2 GB/s); on an H200
# about 55 s; gen about 60 s. Runs 26-27 lost benches to too small a BUDGET.
# Exit status: 0 ids equal on both pairs, 1 a pair differs, 2 a pair missing.
# First run, 2026-12-03 (outputs in docs/data/gpuhost-fulldepth-2026-12-03/):
# 82.1 GB generated in 71 s; decode ids equal on both devices; the CUDA
# prefill of 512 ran past its 283 s and the CPU prefill had no time left
# (hence the equal shares below, added after it).
set -u
T0=$(date +%s)
D=$(cd "${1:-out/fd}" && pwd)
[ -e "$D/deltafin" ] || tar xJf "$D/bin.tar.xz" -C "$D" # bundle.sh's
L=$D/lib
if [ ! -d "$L" ]; then L=/tmp/dffd-lib; mkdir -p $L && tar xJf "$D/lib.tar.xz" -C $L --strip-components=1; fi
export LD_LIBRARY_PATH=$L
B=$D/deltafin
OUT=${OUT:?OUT must name the results folder}
R=$OUT/r; mkdir -p "$R"
BUDGET=${BUDGET:-530}
LAYERS=${LAYERS:-93}; EXPERTS=${EXPERTS:-16}; PREFILL=${PREFILL:-512}
THREADS=${THREADS:-$(nproc)}; CACHE_MB=${CACHE_MB:-0}; MEM_LIMIT=${MEM_LIMIT:-100G}
# GPU_MEM: --gpu-mem for every --device cuda run (empty: the default tier)
GPU_MEM=${GPU_MEM:-}
M=${MODEL_DIR:-$HOME/dffull}
STEPS=${STEPS:-gen cpu_decode cuda_decode cpu_prefill cuda_prefill}
S=""; MOUNTED=""
ts() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" | tee -a "$R/log.txt"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
avail() { # free bytes of the file system holding $1 (or its nearest existing parent)
  local p=$1; while [ ! -e "$p" ]; do p=$(dirname "$p"); done
  df -B1 --output=avail "$p" | tail -1 | tr -d ' '; }
fsid() { local p=$1; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; stat -f -c %i "$p"; df --output=target "$p" | tail -1; }
OURS="" # what this script made, the only things it deletes
cleanup() {
  if [ "${KEEP:-0}" != 1 ]; then
    [ -n "$OURS" ] && rm -rf $OURS && ts "model deleted ($OURS)"
    [ -n "$MOUNTED" ] && umount "$MOUNTED" && rmdir "$MOUNTED"
  fi
  df -h / /dev/shm > "$R/df_end.txt" 2>&1
  cp "$R/log.txt" "$OUT/summary.txt" 2>/dev/null
  (cd "$OUT" && tar czf r.tgz r && rm -rf r)
}
trap cleanup EXIT

{ nvidia-smi; lscpu | grep -E 'Model name|^CPU\(s\)|L3'; free -g; grep -E 'MemTotal|MemAvailable|Shmem' /proc/meminfo
  df -hT / /tmp /dev/shm "$HOME"; mount | grep -E ' / | /dev/shm | /tmp '; uname -r; } > "$R/machine.txt" 2>&1
"$B" --version > "$R/version.txt" 2>&1
ts "budget ${BUDGET}s; $(grep MemAvailable /proc/meminfo | tr -s ' '); disk free $(( $(avail "$M") / 1000000000 )) GB," \
   "/dev/shm free $(( $(avail /dev/shm) / 1000000000 )) GB"

# ---- sizes and places (when generating; without gen, an earlier KEEP=1 model) ----
place() {
  "$B" make-model --preset k3-trunk --layers "$LAYERS" --experts "$EXPERTS" --spine int8 --dry-run > "$R/dry.txt" 2>&1 ||
    { ts "make-model --dry-run failed: $(cat "$R/dry.txt")"; exit 1; }
  NEED_M=$(sed -n 's/.*(shards \([0-9.]*\) GB.*/\1/p' "$R/dry.txt" | awk '{printf "%.0f", $1 * 1e9 + 1e9}')
  NEED_S=$(sed -n 's/.*int8 spine \([0-9.]*\) GB).*/\1/p' "$R/dry.txt" | awk '{printf "%.0f", $1 * 1e9 + 1e9}')
  [ -n "$NEED_M" ] && [ -n "$NEED_S" ] || { ts "cannot read the sizes from: $(cat "$R/dry.txt")"; exit 1; }
  ts "$(cat "$R/dry.txt")"
  if [ "$(avail "$M")" -lt "$NEED_M" ]; then
    ts "REFUSED: the shards need $((NEED_M / 1000000000)) GB, $M has $(( $(avail "$M") / 1000000000 )) GB free"; exit 1
  fi
  # a tmpfs only where RAM holds the spine and leaves 16 GB to the runs
  MEM=$(awk '/MemAvailable/{printf "%.0f", $2 * 1024}' /proc/meminfo)
  RAM_OK=$([ "$MEM" -ge $((NEED_S + 16000000000)) ] && echo 1 || echo 0)
  if [ -n "${SPINE_DIR:-}" ]; then S=$SPINE_DIR
  elif [ "$RAM_OK" = 1 ] && [ "$(avail /dev/shm)" -ge "$NEED_S" ]; then S=/dev/shm/dffull-i8
  elif [ "$RAM_OK" = 1 ] && [ "$(id -u)" = 0 ] && mkdir -p /mnt/dffull &&
       mount -t tmpfs -o size=$(( NEED_S / 1000000000 + 2 ))G dffull /mnt/dffull; then
    MOUNTED=/mnt/dffull; S=/mnt/dffull/i8
  else S=$M-i8
  fi
  if [ "$(fsid "$S")" = "$(fsid "$M")" ]; then need=$((NEED_M + NEED_S)); else need=$NEED_S; fi
  if [ "$(avail "$S")" -lt "$need" ]; then
    ts "REFUSED: the int8 spine needs $((NEED_S / 1000000000)) GB in $S (with the shards when on one file system:" \
       "$((need / 1000000000)) GB), it has $(( $(avail "$S") / 1000000000 )) GB free; set SPINE_DIR or MODEL_DIR"
    S=""; exit 1
  fi
  for d in "$M" "$S"; do
    [ ! -e "$d" ] || { ts "REFUSED: $d exists (remove it or set MODEL_DIR / SPINE_DIR)"; exit 1; }
  done
  ts "shards in $M ($(df --output=fstype "$(dirname "$M")" | tail -1)), int8 spine in $S ($(df --output=fstype "$(dirname "$S")" | tail -1))"
}
case " $STEPS " in
*" gen "*) place ;;
*) S=${SPINE_DIR:-/dev/shm/dffull-i8}
   [ -e "$M/config.json" ] && [ -e "$S/model.safetensors.index.json" ] ||
     { ts "REFUSED: no gen step and no model in $M with its int8 spine in $S (KEEP=1 keeps one)"; exit 1; }
   ts "reusing $M, int8 spine in $S" ;;
esac

# ---- the runs ----
# Each run gets an equal share of what is left, so one slow run (a prefill
# on a path still being made fast) cannot starve the ones after it.
RUNS_LEFT=$(echo "$STEPS" | tr ' ' '\n' | grep -c -E '_(decode|prefill|bench)(_[a-z]+)?$')
gpu_mem() { [ "$1" = cuda ] && [ -n "$GPU_MEM" ] && echo "--gpu-mem $GPU_MEM"; }
run() { # name device prompt-ids max-new [options]
  local name=$1 dev=$2 ids=$3 n=$4 t=$(( ($(left) - 20) / RUNS_LEFT ))
  RUNS_LEFT=$((RUNS_LEFT - 1))
  shift 4
  if [ "$t" -lt 30 ]; then ts "SKIPPED $name: ${t}s left"; return; fi
  ts "$name: --device $dev, $(echo "$ids" | tr ',' '\n' | wc -l) prompt ids, --max-new $n $(gpu_mem "$dev") $* (timeout ${t}s)"
  timeout "$t" "$B" run --model "$M" --spine int8 --spine-dir "$S" --threads "$THREADS" --heat '' \
    --cache-mb "$CACHE_MB" --mem-limit "$MEM_LIMIT" --prompt-ids "$ids" --max-new "$n" --json --stats \
    --device "$dev" $(gpu_mem "$dev") "$@" > "$OUT/$name.json" 2> "$R/$name.err" &
  local tp=$!
  [ "${SAMPLE:-5}" -gt 0 ] && sampler "$tp" > "$R/$name.samples" 2>&1 &
  wait "$tp"
  local rc=$?
  ts "$name: rc=$rc $(summarize "$OUT/$name.json" 2>/dev/null || tail -2 "$R/$name.err" | tr '\n' ' ')"
}
# Every SAMPLE seconds while a run lasts (0: off): what the process does
# (CPU seconds used per second by its threads, thread states, the kernel
# functions they wait in, bytes read), the GPU's utilisation and memory,
# and the host's free memory: a run that is slower than its parts add up to
# says where the time goes without a profiler on the host.
sampler() {
  local tp=$1 p="" last=0 lr=0
  for _ in 1 2 3 4 5 6 7 8 9 10; do p=$(pgrep -P "$tp" | head -1); [ -n "$p" ] && break; sleep 0.2; done
  [ -n "$p" ] || return
  echo "# t_s cpu% read_MB rss_MB states | wchan top | gpu util%,MiB | MemFree MB"
  local t0=$(date +%s.%N)
  while [ -d /proc/$p ]; do
    local tk=0 st="" rb rss wc g mf now
    tk=$(cat /proc/$p/task/*/stat 2>/dev/null | awk '{s += $14 + $15} END {print s + 0}')
    st=$(cat /proc/$p/task/*/stat 2>/dev/null | awk '{c[$3]++} END {for (k in c) printf "%s%d", k, c[k]}')
    rb=$(awk '/^read_bytes/{print int($2 / 1e6)}' /proc/$p/io 2>/dev/null)
    rss=$(awk '/^VmRSS/{print int($2 / 1024)}' /proc/$p/status 2>/dev/null)
    wc=$(for f in /proc/$p/task/*/wchan; do cat "$f" 2>/dev/null; echo; done | grep -v '^$' | sort | uniq -c |
         sort -rn | head -3 | awk '{printf "%s:%s ", $2, $1}')
    g=$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits 2>/dev/null | tr -d ' ')
    mf=$(awk '/^MemFree/{print int($2 / 1024)}' /proc/meminfo)
    now=$(date +%s.%N)
    echo "$(awk -v a="$now" -v b="$t0" 'BEGIN{printf "%.0f", a - b}') $(( (tk - last) / ${SAMPLE:-5} ))" \
         "$(( ${rb:-0} - lr )) ${rss:-0} $st | $wc| $g | $mf"
    last=$tk; lr=${rb:-0}
    sleep "${SAMPLE:-5}"
  done
}
summarize() { # one run's figures on one line
  python3 - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
s = d.get("stats", {})
out = ["ids %s" % d.get("output_ids")]
for k in ("prefill_s", "decode_s", "prefill_tok_s", "decode_tok_s", "spine_bytes_per_token",
          "expert_bytes_read"):
    if k in s:
        out.append("%s=%.4g" % (k, s[k]))
for dr in (s.get("store") or {}).get("drives") or []:
    out.append("drive %s: %.0f MB in %d reads, %.0f MB/s busy" % (
        dr.get("path"), dr.get("bytes", 0) / 1e6, dr.get("reads", 0), dr.get("mb_per_s_busy", 0)))
parts = s.get("decode_compute")
if isinstance(parts, dict):
    out.append("decode ms per layer-token: " + " ".join(
        "%s=%.3g" % (k, v.get("ms_each", 0)) for k, v in parts.items() if isinstance(v, dict)))
if s.get("device"):
    out.append("device " + json.dumps(s["device"], separators=(",", ":")))
print("; ".join(out))
EOF
}
# bench --model: a warm-up (the cold pass: the tier filled), then one repeat of
# a PREFILL-token prompt and 8 new tokens in the same process (the warm figures),
# then the storage ceiling of the same expert records on this disk
bench() { # name device [options]
  local name=$1 dev=$2 t=$(( ($(left) - 20) / RUNS_LEFT ))
  RUNS_LEFT=$((RUNS_LEFT - 1))
  shift 2
  if [ "$t" -lt 30 ]; then ts "SKIPPED $name: ${t}s left"; return; fi
  ts "$name: bench --device $dev --prompt-tokens $PREFILL --new-tokens 8 --repeat 1 $(gpu_mem "$dev") $* (timeout ${t}s)"
  timeout "$t" "$B" bench --model "$M" --spine int8 --spine-dir "$S" --threads "$THREADS" --heat '' \
    --cache-mb "$CACHE_MB" --mem-limit "$MEM_LIMIT" --prompt-tokens "$PREFILL" --prefill-chunk "$PREFILL" \
    --new-tokens 8 --repeat 1 --json --device "$dev" $(gpu_mem "$dev") "$@" > "$OUT/$name.json" 2> "$R/$name.err" &
  local tp=$!
  [ "${SAMPLE:-5}" -gt 0 ] && sampler "$tp" > "$R/$name.samples" 2>&1 &
  wait "$tp"
  ts "$name: rc=$? $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print({k: d.get(k) for k in ("prefill_s_per_token", "decode_s_per_token", "expert_read_gbps", "ceiling_gbps", "storage_efficiency")}, {ph: {k: round(v["s"], 2) for k, v in (p or {}).items() if isinstance(v, dict)} for ph, p in (d.get("compute_repeats") or {}).items()})' "$OUT/$name.json" 2>/dev/null || tail -2 "$R/$name.err" | tr '\n' ' ')"
}
ids_of() { sed -n 's/.*"output_ids": *\[\([^]]*\)\].*/\1/p' "$OUT/$1.json" 2>/dev/null | tr -d ' \n'; }
P=$(seq -s, 1 "$PREFILL")
for step in $STEPS; do
  case $step in
  gen)
    ts "make-model --preset k3-trunk --layers $LAYERS --experts $EXPERTS --spine int8 --threads $THREADS"
    OURS="$M $S"
    timeout $(( $(left) - 60 )) "$B" make-model --preset k3-trunk --layers "$LAYERS" --experts "$EXPERTS" \
      --spine int8 --spine-dir "$S" --out "$M" --threads "$THREADS" > "$R/make_model.txt" 2>&1
    rc=$?
    ts "make-model rc=$rc: $(tail -1 "$R/make_model.txt")"
    du -sh "$M" "$S" > "$R/du.txt" 2>&1; du -sh --apparent-size "$M" >> "$R/du.txt" 2>&1
    ts "on disk: $(tr '\t\n' '  ' < "$R/du.txt")"
    [ "$rc" = 0 ] || exit 1
    # frees the shards' 26 GB of page cache (the runs read experts with O_DIRECT anyway)
    [ "${DROP_CACHES:-1}" = 1 ] && sync && echo 1 > /proc/sys/vm/drop_caches 2>/dev/null
    ;;
  cpu_decode) run cpu_decode cpu 1,2,3 4 ;;
  cuda_decode) run cuda_decode cuda 1,2,3 4 ;;
  cpu_prefill) run cpu_prefill cpu "$P" 1 --prefill-chunk "$PREFILL" ;;
  cuda_prefill) run cuda_prefill cuda "$P" 1 --prefill-chunk "$PREFILL" ;;
  # the GPU's tier holding the spine only (its 54.7 GB int8): every pass reads its experts
  cuda_decode_notier) run cuda_decode_notier cuda 1,2,3 4 --gpu-mem 57G ;;
  # the sequence state copied in and out every pass (run 8's way), against the kept default
  cuda_decode_copy) run cuda_decode_copy cuda 1,2,3 4 --gpu-state copy ;;
  # warm prefill and decode in one process, and the disk's ceiling (bench above)
  cuda_bench) bench cuda_bench cuda ;;
  # the same with the T > 1 products on one lane a thread (kcuda_gemm.cuh's gemm_lane_k;
  # the default from 32 vectors since 2026-12-05), and on the lanes layout at every T
  cuda_bench_gl) export DF_CUDA_GEMM_TILES=2; bench cuda_bench_gl cuda; unset DF_CUDA_GEMM_TILES ;;
  cuda_bench_lanes) export DF_CUDA_GEMM_TILES=0; bench cuda_bench_lanes cuda; unset DF_CUDA_GEMM_TILES ;;
  # every kernel as a dependent launch (df_cuda_set_pdl; the default: the row-tile GEMVs only)
  cuda_bench_pdl) export DF_CUDA_PDL=1; bench cuda_bench_pdl cuda; unset DF_CUDA_PDL ;;
  cuda_decode_pdl) export DF_CUDA_PDL=1; run cuda_decode_pdl cuda 1,2,3 4; unset DF_CUDA_PDL ;;
  # no dependent launch at all (run 28 measured the default against it)
  cuda_bench_plain) export DF_CUDA_PDL=0; bench cuda_bench_plain cuda; unset DF_CUDA_PDL ;;
  cuda_decode_plain) export DF_CUDA_PDL=0; run cuda_decode_plain cuda 1,2,3 4; unset DF_CUDA_PDL ;;
  # the wide tiles in blocks of four warps sharing x (DF_CUDA_SHARED_X; off: no clear gain in run 23's bench)
  cuda_bench_sx) export DF_CUDA_SHARED_X=1; bench cuda_bench_sx cuda; unset DF_CUDA_SHARED_X ;;
  cuda_decode_sx) export DF_CUDA_SHARED_X=1; run cuda_decode_sx cuda 1,2,3 4; unset DF_CUDA_SHARED_X ;;
  cpu_bench) bench cpu_bench cpu ;;
  esac
done

# exit 0: every pair equal; 1: a pair differs; 2: a pair could not be compared
status=0
for k in decode prefill; do
  a=$(ids_of cpu_$k); b=$(ids_of cuda_$k)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then ts "ids $k: EQUAL cpu = cuda = [$a]"
  elif [ -n "$a" ] && [ -n "$b" ]; then ts "ids $k: DIFFER cpu [$a] cuda [$b]"; status=1
  else ts "ids $k: not compared (cpu [$a], cuda [$b])"; [ "$status" = 1 ] || status=2
  fi
done
# the other launch modes' and the shared-x tiles' decode, where they ran,
# against the default's
a=$(ids_of cuda_decode)
for v in pdl plain sx; do
  b=$(ids_of cuda_decode_$v)
  [ -n "$b" ] || continue
  if [ -z "$a" ]; then ts "ids decode, $v: not compared (cuda [], $v [$b])"; [ "$status" = 1 ] || status=2
  elif [ "$a" = "$b" ]; then ts "ids decode, $v: EQUAL [$b]"
  else ts "ids decode, $v: DIFFER cuda [$a] $v [$b]"; status=1; fi
done
ts "done"
exit $status

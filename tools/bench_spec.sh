#!/bin/sh
# Speculative decoding against plain decoding on nano-K3 with emulated drives
# (figures are EMULATED): one table row per (prompt, drives, cache, draft):
# decode tok/s, drafts accepted, tokens per target pass, expert MB per token,
# drafts kept by block position; drafts: off, ngram, auto (nano-DSpark beside
# the model: chat prompts draft with it, raw text with n-gram), the Qwen3
# nano-draft and the trained nano-DSpark (K 7).
#   tools/bench_spec.sh [BIN] [WORKDIR]     (env: NEW=64 BW=100MB/s LAT=100us)
# Packs nano-K3 over one and over four folders under WORKDIR (kept for reruns).
set -eu
BIN=${1:-build-release/deltafin}
W=${2:-/tmp/df_bench_spec}
NEW=${NEW:-64}
EMU="${BW:-100MB/s},${LAT:-100us}"
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$W"
for n in 1 4; do
  [ -f "$W/m$n/config.json" ] && continue
  rm -rf "$W/m$n" && mkdir -p "$W/m$n" && cp "$SRC"/models/nano-k3/* "$W/m$n/"
  drives=$(seq -s, -f "$W/d$n-%g" 0 $((n - 1)))
  "$BIN" pack --model "$W/m$n" --drives "$drives" -q >/dev/null
done
# --draft auto finds MODEL/dspark
for n in 1 4; do [ -e "$W/m$n/dspark" ] || ln -s "$SRC/models/nano-dspark" "$W/m$n/dspark"; done
TEXT=$(head -c 700 "$SRC/models/corpus/eval.txt")
CHAT="Explain what the Python/C API is for, and how extension modules use it."
printf '%-5s %-6s %-5s %-12s %8s %9s %11s %10s %-4s %s\n' prompt drives cache draft tok/s accepted tok/pass MB/token ids \
  "ran, kept by position / blocks by length"
for kind in text chat; do
  for n in 1 4; do
    for cache in cold warm; do
      base=""
      for d in off ngram auto "$SRC/models/nano-draft" "dspark:$SRC/models/nano-dspark"; do
        set -- --model "$W/m$n" --max-new "$NEW" --json --heat "" --emulate-drives "$EMU" --draft "$d"
        case $d in dspark:*) set -- "$@" --draft-max 7 ;; esac
        [ "$cache" = cold ] && set -- "$@" --cache-mb 0
        if [ "$kind" = text ]; then set -- "$@" --prompt "$TEXT"; else set -- "$@" --chat --prompt "$CHAT"; fi
        "$BIN" run "$@" >"$W/o.json" 2>/dev/null
        python3 - "$W/o.json" "$kind" "$n" "$cache" "$d" "$base" <<'PY'
import json, sys
o = json.load(open(sys.argv[1])); s = o["stats"]; sp = s["speculation"]
ids = ",".join(map(str, o["output_ids"]))
base = sys.argv[6]
same = "same" if not base or base == ids else "DIFFER"
acc = "-" if sp["acceptance"] is None else "%.0f%%" % (100 * sp["acceptance"])
passes = sp["decode_passes"] or 1
name = sys.argv[5].rsplit("/", 1)[-1]
print("%-5s %-6s %-5s %-12s %8.1f %9s %11.2f %10.2f %-4s %s %s / %s" % (sys.argv[2], sys.argv[3], sys.argv[4], name,
      s["decode_tok_s"], acc, s["n_gen"] / max(1, passes), s["expert_bytes_read"] / 1e6 / max(1, s["n_gen"]), same,
      sp["draft"], sp["accepted_at"], sp["block_lengths"]))
open(sys.argv[1] + ".ids", "w").write(ids)
PY
        [ -z "$base" ] && base=$(cat "$W/o.json.ids")
      done
    done
  done
done

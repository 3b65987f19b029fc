#!/bin/sh
# The expert store under `deltafin run`: the same output ids with no pack and
# packs on 1, 2 and 4 drives, with and without hot replicas, cache 0 / small /
# unlimited, every prefetch mode, io_uring and pread, emulated drives and
# another prefill split; prefill read amplification 1.00 with no cache on a
# 70-token prompt; a corrupt copy, a missing drive and a truncated pack file
# are read around when a replica exists and fail naming the expert when not;
# --trace output feeds `deltafin trace report`.
set -eu
BIN=${DF_BIN:-build/deltafin}
T=$(mktemp -d /tmp/df_e2e_store.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" make-model --preset tiny --seed 5 --out "$T/m" -q >/dev/null 2>&1
M="$T/m"
IDS=$(seq -s, 300 369) # 70 prompt tokens
NEW=8

# ids of one run (its JSON kept in $T/last.json, stderr in $T/last.err)
ids_model() { m=$1; shift; "$BIN" run --model "$m" --prompt-ids "$IDS" --max-new $NEW --json --threads 1 "$@" \
    >"$T/last.json" 2>"$T/last.err" || { cat "$T/last.err" >&2; return 1; }
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['output_ids'])" "$T/last.json"; }
stat_of() { python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))['stats']['store']
for k in sys.argv[2].split('.'):
    s = s[int(k)] if isinstance(s, list) else s[k]
print(s)" "$T/last.json" "$1"; }


BASE=$(ids_model "$M" --no-pack --cache-mb 0 --prefetch off) || fail "baseline run"
[ "$(stat_of source)" = shards ] || fail "--no-pack did not read the shards"
[ "$(stat_of o_direct)" = True ] || echo "note: O_DIRECT unsupported on $T"
same() { # label, then run args
  label=$1; shift
  got=$(ids_model "$M" "$@") || fail "$label: run failed"
  [ "$got" = "$BASE" ] || fail "$label: ids $got differ from $BASE"
}

# amplification 1.00 with no cache, whole 70-token prompt as one chunk and chunks of 64
ids_model "$M" --no-pack --cache-mb 0 --prefetch off --prefill-chunk 0 >/dev/null
[ "$(stat_of prefill_read_amplification)" = 1.0 ] || fail "prefill read amplification $(stat_of prefill_read_amplification), want 1.00"
ids_model "$M" --no-pack --cache-mb 0 --prefill-chunk 64 >/dev/null
[ "$(stat_of prefill_read_amplification)" = 1.0 ] || fail "amplification $(stat_of prefill_read_amplification) with prefetch auto, want 1.00"

same "no pack, default cache" --no-pack
same "no pack, pread" --no-pack --io pread --cache-mb 0
same "no pack, prefill chunks of 16" --no-pack --prefill-chunk 16

# packs: 1 drive recorded in the model folder, 2 and 4 drives elsewhere
"$BIN" pack --model "$M" --drives "$T/p1d0" -q
"$BIN" pack --model "$M" --drives "$T/p2d0,$T/p2d1" --manifest "$T/p2.json" -q
"$BIN" pack --model "$M" --drives "$T/p4d0,$T/p4d1,$T/p4d2,$T/p4d3" --replicas-hot 50 --manifest "$T/p4r.json" -q
"$BIN" pack --model "$M" --drives "$T/p2rd0,$T/p2rd1" --replicas-hot 100 --manifest "$T/p2r.json" -q
"$BIN" pack --model "$M" --drives "$T/p2md0,$T/p2md1" --replicas-hot 100 --manifest "$T/p2m.json" -q

same "pack 1 drive (recorded)" --cache-mb 0
[ "$(stat_of source)" = pack ] || fail "the recorded pack was not used"
same "pack 1 drive, pread, unlimited cache" --io pread --cache-mb 1048576
same "pack 2 drives" --store "$T/p2.json" --cache-mb 0 --prefetch off
[ "$(stat_of drives.1.reads)" -gt 0 ] || fail "2 drives: drive 1 was never read"
same "pack 2 drives, prev" --store "$T/p2.json" --cache-mb 0 --prefetch prev
same "pack 4 drives + replicas, gate" --store "$T/p4r.json" --prefetch gate
# gate-ahead recall is measured for every MoE layer after the first and is > 0
gate_recall_ok() { python3 - "$T/last.json" "$1" <<'EOF2'
import json, sys
s = json.load(open(sys.argv[1]))["stats"]["store"]
g = s["predictors"]["gate"]
pl = g["recall_per_layer"]
assert g["recall"] is not None and g["recall"] > 0, (sys.argv[2], g)
assert pl[0] is None, (sys.argv[2], pl)
assert all(x is not None and x > 0 for x in pl[1:]), (sys.argv[2], pl)
assert g["issued"] > 0 or not g["enabled"], (sys.argv[2], g)
EOF2
}
gate_recall_ok "tiny, gate" || fail "tiny: gate recall not measured per layer or 0"
same "pack 4 drives + replicas, gate from x+shared" --store "$T/p4r.json" --prefetch gate --gate-input x+shared
gate_recall_ok "tiny, gate x+shared" || fail "tiny: gate (x+shared) recall not measured or 0"
same "pack 2 drives, 100% replicas, split reads always" --store "$T/p2r.json" --cache-mb 0 --split-reads always --prefetch gate
[ "$(stat_of split_reads)" -gt 0 ] || [ "$(stat_of record_bytes)" -le "$(stat_of split_granularity)" ] || fail "--split-reads always split nothing"
same "pack 4 drives + replicas, split reads always, pread, auto" --store "$T/p4r.json" --cache-mb 0 --split-reads always --io pread
same "pack 4 drives + replicas, split reads off, prev" --store "$T/p4r.json" --split-reads off --prefetch prev
[ "$(stat_of split_reads)" = 0 ] || fail "--split-reads off split $(stat_of split_reads) reads"
same "pack 4 drives + replicas, auto, pread" --store "$T/p4r.json" --prefetch auto --io pread --cache-mb 0
same "pack 4 drives + replicas, uring, unlimited" --store "$T/p4r.json" --io uring --cache-mb 1048576
same "emulated drives" --store "$T/p4r.json" --cache-mb 0 --emulate-drives 50MB/s,0.1ms --trace "$T/trace.jsonl"
"$BIN" run --model "$M" --store "$T/p4r.json" --prompt-ids "$IDS" --max-new 4 --threads 1 --cache-mb 0 \
  --prefetch auto --emulate-drives 50MB/s,0.1ms --stats >/dev/null 2>"$T/stats.txt" || fail "--stats run"
grep -q "drives are EMULATED (50MB/s,0.1ms each" "$T/stats.txt" || fail "--stats does not say the drives are emulated: $(cat "$T/stats.txt")"
grep -q "drive 0 (emulated)" "$T/stats.txt" || fail "--stats drive lines not labelled emulated"
grep -q "predictor gate: recall [0-9.]*; per layer (\* = switched off by auto): [0-9]*:- [0-9]*:[0-9.]" "$T/stats.txt" \
  || fail "--stats lacks per-layer gate recall: $(cat "$T/stats.txt")"
grep -q "predictor prev: recall .*per layer" "$T/stats.txt" || fail "--stats lacks per-layer prev recall"
[ "$(stat_of emulated)" = "50MB/s,0.1ms" ] || fail "emulated run not labelled: $(stat_of emulated)"
"$BIN" trace report "$T/trace.jsonl" --svg "$T/trace.svg" >"$T/report" || fail "trace report"
grep -q "EMULATED" "$T/report" || fail "trace report does not say emulated: $(cat "$T/report")"
grep -q "^3 " "$T/report" || fail "trace report lacks drive 3: $(cat "$T/report")"
grep -q "finished last" "$T/report" || fail "trace report lacks the last-drive summary"
head -c 4 "$T/trace.svg" | grep -q "<svg" || fail "no SVG chart"
grep -q '"k":"sample"' "$T/trace.jsonl" || fail "no sampler records in the trace"
[ -f "$M/deltafin.heat" ] || fail "no heat file in the model folder"

# a small cache (evicting) on a model with larger experts
"$BIN" make-model --preset small --seed 2 --out "$T/s" -q >/dev/null 2>&1
IDS=$(seq -s, 100 111)
NEW=5
SBASE=$(ids_model "$T/s" --no-pack --cache-mb 0 --prefetch off) || fail "small baseline"
"$BIN" pack --model "$T/s" --drives "$T/s0,$T/s1" --replicas-hot 20 -q
for args in "--cache-mb 0 --prefetch gate --split-reads always" "--cache-mb 2" "--cache-mb 2 --io pread --prefetch prev" "--cache-mb 0 --prefetch auto" "--cache-mb 0 --prefetch gate" "--no-pack --cache-mb 2"; do
  # shellcheck disable=SC2086
  got=$(ids_model "$T/s" $args) || fail "small model $args"
  [ "$got" = "$SBASE" ] || fail "small model $args: ids $got differ from $SBASE"
  case "$args" in *"prefetch gate --split"*) [ "$(stat_of split_reads)" -gt 0 ] || fail "small model: no split reads with --split-reads always";; esac
  case "$args" in *"prefetch gate"*) gate_recall_ok "small, $args" || fail "small: gate recall not measured per layer or 0";; esac
done
[ "$(stat_of cache.evictions)" -gt 0 ] || fail "--cache-mb 2 never evicted: not a small cache"
IDS=$(seq -s, 300 369)
NEW=8

# --- faults ---
# a corrupt byte in one copy of many replicated records: read from the other copy
python3 - "$T/p2r.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
for i, (layer, expert, copies) in enumerate(m["records"]):
    if i % 2:
        continue
    d, off, _ = copies[(i // 2) % 2]
    dr = m["drives"][d]
    with open(dr["path"] + "/" + dr["file"], "r+b") as f:
        f.seek(off + 17); b = f.read(1); f.seek(off + 17); f.write(bytes([b[0] ^ 0x40]))
EOF
same "corrupt copies, replicas" --store "$T/p2r.json" --cache-mb 0 --prefetch off
[ "$(stat_of checksum_errors)" -gt 0 ] || fail "no checksum error met (test does not test)"
grep -q "checksum mismatch; reading another copy" "$T/last.err" || fail "fallback not reported: $(cat "$T/last.err")"
rc=0; "$BIN" doctor --model "$M" --store "$T/p2r.json" -q >"$T/doc" || rc=$?
[ "$rc" = 1 ] || fail "doctor exit $rc after corruption (want 1)"
grep -q "CORRUPT" "$T/doc" || fail "doctor did not report the corruption"

# a corrupt byte in the only copy: the run fails naming the expert
python3 - "$T/p2.json" >"$T/victim" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
layer, expert, copies = m["records"][0]
d, off, _ = copies[0]
dr = m["drives"][d]
with open(dr["path"] + "/" + dr["file"], "r+b") as f:
    f.seek(off + 3); b = f.read(1); f.seek(off + 3); f.write(bytes([b[0] ^ 0x01]))
print(layer, expert)
EOF
read -r VL VE <"$T/victim"
# read every expert of the first MoE layer: a prompt long enough to route to all of them
if ids_model "$M" --store "$T/p2.json" --cache-mb 0 --prefill-chunk 0 >/dev/null 2>&1; then
  grep -q "layer $VL, expert $VE" "$T/last.err" && fail "run succeeded after naming the bad expert"
  echo "note: expert ($VL, $VE) was not routed to; corrupt-only-copy case not exercised by run"
else
  grep -q "expert (layer $VL, expert $VE)" "$T/last.err" || fail "error does not name the expert: $(cat "$T/last.err")"
fi

# a missing drive directory: with replicas the run succeeds, without it fails naming an expert
mv "$T/p2md1" "$T/p2md1.gone"
same "missing drive, replicas" --store "$T/p2m.json" --cache-mb 0
mv "$T/p2md1.gone" "$T/p2md1"
mv "$T/p2d1" "$T/p2d1.gone"
if ids_model "$M" --store "$T/p2.json" >/dev/null 2>&1; then fail "run succeeded with a drive missing and no replicas"; fi
grep -q "expert (layer" "$T/last.err" || fail "missing-drive error does not name an expert: $(cat "$T/last.err")"
mv "$T/p2d1.gone" "$T/p2d1"

# a truncated pack file: read around with replicas, an error naming an expert without
SZ=$(stat -c %s "$T/p2md0/m.dfpack")
truncate -s $((SZ / 2)) "$T/p2md0/m.dfpack"
same "truncated pack file, replicas" --store "$T/p2m.json" --cache-mb 0
SZ=$(stat -c %s "$T/p1d0/m.dfpack")
truncate -s $((SZ - 4096)) "$T/p1d0/m.dfpack"
if ids_model "$M" >/dev/null 2>&1; then fail "run succeeded with a truncated pack and no replicas"; fi
grep -q "expert (layer" "$T/last.err" || fail "truncation error does not name an expert: $(cat "$T/last.err")"
grep -q "no-pack" "$T/last.err" || fail "truncation error does not say what to do"
echo "store run e2e: ok"

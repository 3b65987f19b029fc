#!/bin/sh
# The spine stream's reads go through the expert store's scheduler, ranked
# after the experts' demand reads and before any speculative read
# (src/store/rank.h). On a generated tiny model whose spine streams (small
# --mem-limit), with gate-ahead prefetch on a slow emulated drive, for queue
# depths 2 and 8: the ids equal the unlimited run's; and from the two traces
# (the store's and TRACE.spine.jsonl, on one clock, each read with the class
# the drive took it in, when it joined that queue and when the drive took
# it) no prefetch was taken while a spine or demand read waited on that
# drive. `trace report --svg` then draws expert and spine reads apart in one
# chart (stacked by class on the drive they share), with the tokens' waits
# on the spine.
set -eu
BIN=${DF_BIN:?set DF_BIN}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" make-model --preset tiny --seed 5 --out "$tmp/m" -q >/dev/null 2>&1
M="$tmp/m"
P=3,1,4,1,5,9,2,6,5,3,5
ref=$("$BIN" run --model "$M" --prompt-ids $P --max-new 10 --json | jq -c .output_ids)

for qd in 2 8; do
  "$BIN" run --model "$M" --prompt-ids $P --max-new 10 --json --mem-limit 1600000 --ctx 512 \
    --cache-mb 0 --prefetch gate --queue-depth $qd --emulate-drives 20MB/s,0.1ms \
    --trace "$tmp/tr$qd.jsonl" >"$tmp/o" || fail "qd $qd: run failed"
  got=$(jq -c .output_ids "$tmp/o")
  [ "$got" = "$ref" ] || fail "qd $qd: ids $got, unlimited run $ref"
  [ "$(jq '.stats.plan.spine_stream.units' "$tmp/o")" -gt 0 ] || fail "qd $qd: nothing streamed"
  python3 - "$tmp/tr$qd.jsonl" "$qd" <<'EOF2' || fail "qd $qd: ranking violated (above)"
import json, sys
path, qd = sys.argv[1], sys.argv[2]
reads = []
for p in (path, path + ".spine.jsonl"):
    reads += [r for r in map(json.loads, open(p)) if r["k"] == "read"]
spine = [r for r in reads if r["class"] == "spine"]
pf = [r for r in reads if r["class"] == "prefetch"]
assert spine and all(r["expert"] == -1 for r in spine), "no spine reads in the spine trace"
assert all(r["class"] != "spine" for r in reads if r["expert"] != -1), "an expert read ranked as spine"
assert pf, "no prefetch read: the check would be empty"
bad = [(f, r) for f in pf for r in reads
       if r["class"] != "prefetch" and r["drive"] == f["drive"]
       and r["queued"] < f["start"] < r["start"]]
for f, r in bad[:5]:
    print("qd %s: prefetch taken at %.6f while a %s read (layer %d) waited since %.6f" %
          (qd, f["start"], r["class"], r["layer"], r["queued"]), file=sys.stderr)
sys.exit(1 if bad else 0)
EOF2
done

# one chart, both series
"$BIN" trace report "$tmp/tr8.jsonl" --svg "$tmp/c.svg" >"$tmp/rep" || fail "trace report"
grep -q "spine stream (.*): [0-9]* reads" "$tmp/rep" || fail "report has no spine line: $(cat "$tmp/rep")"
grep -q '<path class="cls-demand"' "$tmp/c.svg" || fail "SVG does not draw the experts' demand reads"
grep -q 'class="legend">spine</text>' "$tmp/c.svg" || fail "SVG does not name the spine series"
[ "$(grep -c '<path class="cls-spine"' "$tmp/c.svg")" = 1 ] || fail "SVG has no spine series on its one drive"
grep -q 'waiting on the spine' "$tmp/c.svg" || fail "SVG does not show the tokens' spine waits"
# without a spine trace next to it: the expert chart alone
cp "$tmp/tr8.jsonl" "$tmp/alone.jsonl"
"$BIN" trace report "$tmp/alone.jsonl" --svg "$tmp/a.svg" >/dev/null || fail "trace report (alone)"
if grep -q "spine" "$tmp/a.svg"; then fail "spine series drawn without a spine trace"; fi
echo "spine rank: ok"

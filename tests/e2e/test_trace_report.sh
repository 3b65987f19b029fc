#!/bin/sh
# `deltafin trace report` on EMULATED runs (a generated tiny model, cache 0,
# one drive and a pack over four): the text summary, --json and --html. The
# JSON's binned per-drive rates never exceed the emulated ceiling and its
# token list has one entry per generated token; then headless Chromium
# (Debian's chromium) renders the HTML page and a checker appended to a copy
# of it (tests/trace/page_check.js) reads, from the page as drawn, that no
# plotted throughput lies above the ceiling line, that the token marks equal
# the generated tokens, that the axes carry ticks with numbers and units,
# that no two labels overlap and that nothing is loaded from elsewhere.
# Also: an old trace (no marks, no transfer times) still reports, with
# completions that come together never drawn above the bytes of the time;
# bad --bin values are refused.
set -eu
BIN=${DF_BIN:?set DF_BIN}
SRC=${DF_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
T=$(mktemp -d /tmp/df_e2e_trace.XXXXXX)
trap 'rm -rf "$T"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v chromium >/dev/null 2>&1 || fail "chromium is needed (scripts/install-deps.sh installs Debian's)"

"$BIN" make-model --preset tiny --seed 1 --out "$T/m" -q >/dev/null 2>&1
"$BIN" pack --model "$T/m" --drives "$T/d0,$T/d1,$T/d2,$T/d3" --manifest "$T/p4.json" -q >/dev/null 2>&1
NEW=12

# the checks on one report: $1 trace, $2 run JSON, $3 name
check() {
  tr=$1 run=$2 n=$3
  "$BIN" trace report "$tr" --html "$T/$n.html" --json "$T/$n.json" --svg "$T/$n.svg" --bin 10 >"$T/$n.txt" \
    || fail "$n: trace report"
  grep -q "EMULATED ceiling" "$T/$n.txt" || fail "$n: summary lacks the ceiling: $(cat "$T/$n.txt")"
  grep -q "^tokens: $NEW " "$T/$n.txt" || fail "$n: summary lacks the tokens: $(cat "$T/$n.txt")"
  python3 - "$T/$n.json" "$run" "$NEW" <<'PY' || fail "$n: JSON series (above)"
import json, sys
s = json.load(open(sys.argv[1])); run = json.load(open(sys.argv[2])); new = int(sys.argv[3])
assert s["emulated"] and s["exact_transfer_times"], "not an emulated trace with transfer times"
assert abs(s["bin_s"] - 0.010) < 1e-12, s["bin_s"]
best = 0
for i, d in enumerate(s["drives"]):
    c = d["ceiling_mbps"]
    assert d["ceiling_kind"] == "emulated" and c > 0, d["ceiling_kind"]
    tot = [a + b + w for a, b, w in zip(d["demand_mbps"], d["prefetch_mbps"], d["wasted_mbps"])]
    assert len(tot) == s["nbins"]
    # values are rounded to 0.001 MB/s in the file
    over = [(k, v) for k, v in enumerate(tot) if v > c * (1 + 1e-6) + 0.002]
    assert not over, "drive %d: bins above the %.1f MB/s ceiling: %s" % (i, c, over[:5])
    # the binned bytes are the bytes the drive read
    got = sum(tot) * s["bin_s"] * 1e6
    want = d["demand_bytes"] + d["prefetch_bytes"] + d["wasted_bytes"]
    assert abs(got - want) <= 0.01 * want + 1000 * s["nbins"], (got, want)
    best = max(best, max(tot) / c)
# the drives were driven near their ceiling, so the bound above says something
assert best > 0.5, "highest bin only %.0f%% of the ceiling" % (best * 100)
toks = s["tokens"]
assert len(toks) == len(run["output_ids"]) == new, (len(toks), len(run["output_ids"]))
assert [t["i"] for t in toks] == list(range(1, new + 1))
assert toks[0]["phase"] == "prefill" and all(t["phase"] == "decode" for t in toks[1:])
for t in toks:
    parts = t["compute_s"] + t["expert_wait_s"] + t["spine_wait_s"]
    assert abs(parts - t["seconds"]) < 1e-6 or t["compute_s"] == 0, t
assert s["generations"][0]["prompt_tokens"] == 8
assert s["barriers"] and all(b["wait_s"] >= 0 for b in s["barriers"])
assert s["cache"] and all(0 <= c["hit_rate"] <= 1 for c in s["cache"])
assert "gate" in s["recall_per_layer"], s["recall_per_layer"].keys()
st = run["stats"]["store"]
wasted = sum(d["wasted_bytes"] for d in s["drives"])
assert (wasted > 0) == (st["prefetch_wasted_bytes"] > 0), (wasted, st["prefetch_wasted_bytes"])
PY
  grep -q 'id="command">.*run --model' "$T/$n.html" || fail "$n: HTML lacks the command"
  grep -q 'id="machine">.*cores' "$T/$n.html" || fail "$n: HTML lacks the machine"
  grep -q 'id="emulated"' "$T/$n.html" || fail "$n: HTML does not say EMULATED"
  # the page as Chromium draws it, with the checker appended to a copy
  {
    sed 's#</body></html>##' "$T/$n.html"
    printf '<script>window.DF_EXPECT_TOKENS = %d;</script>\n<script>\n' "$NEW"
    cat "$SRC/tests/trace/page_check.js"
    printf '</script>\n</body></html>\n'
  } >"$T/$n.check.html"
  rm -rf "$T/prof"
  timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --user-data-dir="$T/prof" \
    --window-size=1100,2000 --virtual-time-budget=5000 --dump-dom "file://$T/$n.check.html" \
    >"$T/$n.dom" 2>"$T/$n.chromium.err" || fail "$n: chromium failed: $(tail -5 "$T/$n.chromium.err")"
  line=$(grep -o '<pre id="df-check">DF-CHECK .*' "$T/$n.dom" | sed 's#</pre>.*##; s#^<pre id="df-check">##' | head -1)
  [ -n "$line" ] || fail "$n: the page check did not run"
  echo "$n: $line"
  python3 - "$line" <<'PY' || fail "$n: page check (above)"
import html, json, sys
r = json.loads(html.unescape(sys.argv[1][len("DF-CHECK "):]))
if not r["ok"]:
    print("\n".join(r["problems"]), file=sys.stderr)
    sys.exit(1)
assert r["highest_of_ceiling"] > 0.5, r
PY
}

"$BIN" run --model "$T/m" --prompt-ids 1,2,3,4,5,6,7,8 --max-new $NEW --cache-mb 0 \
  --emulate-drives 10MB/s --trace "$T/t1.jsonl" --json >"$T/r1.json" || fail "one-drive run"
check "$T/t1.jsonl" "$T/r1.json" one
"$BIN" run --model "$T/m" --store "$T/p4.json" --prompt-ids 1,2,3,4,5,6,7,8 --max-new $NEW --cache-mb 0 \
  --emulate-drives 2MB/s --trace "$T/t4.jsonl" --json >"$T/r4.json" || fail "four-drive run"
check "$T/t4.jsonl" "$T/r4.json" four
[ "$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['drives']))" "$T/four.json")" = 4 ] \
  || fail "four-drive JSON has not 4 drives"

# an old trace: no marks, no transfer times, no device bytes; 10 reads of
# 1 MB in flight together from 0, completing 1 ms apart from 0.100 to
# 0.109 s: the drive moved 10 MB in 0.109 s, so no 10 ms bin may show more
# than 10 MB / 0.100 s (the string gives 91.7 MB/s), whereas rates between
# single completions would give 1,000 MB/s
{
  echo '{"k":"head","version":1,"drives":["/old"],"emulated":null,"io":"uring"}'
  i=0
  while [ $i -lt 10 ]; do
    echo "{\"k\":\"read\",\"t\":0.10$i,\"layer\":1,\"expert\":$i,\"drive\":0,\"bytes\":1000000,\"demand\":1,\"wait\":0,\"service\":0.10$i,\"ok\":1}"
    i=$((i + 1))
  done
  echo '{"k":"batch","t":0.11,"layer":1,"n":10,"wait":0.1}'
} >"$T/old.jsonl"
"$BIN" trace report "$T/old.jsonl" --json "$T/old.json" --html "$T/old.html" >"$T/old.txt" || fail "old trace"
python3 - "$T/old.json" <<'PY' || fail "old trace binned above what the drive moved (above)"
import json, sys
s = json.load(open(sys.argv[1]))
d = s["drives"][0]
assert d["ceiling_mbps"] is None and d["ceiling_kind"] == "none", d
assert not s["exact_transfer_times"] and s["tokens"] == []
peak = max(d["demand_mbps"])
assert 0 < peak <= 10 / 0.100 + 0.01, peak
assert abs(sum(d["demand_mbps"]) * s["bin_s"] - 10) < 0.01
PY
grep -q "not known" "$T/old.html" || fail "old trace: HTML claims a ceiling"

# `deltafin bench --report`: the same page for the bench's runs (a warm-up of
# 2 tokens after an 8-token prompt, then 2 repeats of 5), and one per step of a
# drive ladder
"$BIN" bench --model "$T/m" --prompt-tokens 8 --new-tokens 5 --repeat 2 --no-ceiling \
  --emulate-drives 10MB/s --report "$T/b.html" >"$T/b.txt" 2>&1 || fail "bench --report: $(cat "$T/b.txt")"
grep -q "^report: $T/b.html" "$T/b.txt" || fail "bench does not name its report: $(cat "$T/b.txt")"
python3 - "$T/b.html.json" <<'PY' || fail "bench report series (above)"
import json, sys
s = json.load(open(sys.argv[1]))
assert [g["prompt_tokens"] for g in s["generations"]] == [8, 8, 8], s["generations"]
assert [t["i"] for t in s["tokens"]] == [1, 2] + [1, 2, 3, 4, 5] * 2, [t["i"] for t in s["tokens"]]
assert s["drives"][0]["ceiling_kind"] == "emulated"
PY
grep -q 'id="command">.*bench --model' "$T/b.html" || fail "bench report lacks its command"
mkdir -p "$T/m/bench-drives"
"$BIN" bench --model "$T/m" --prompt-tokens 4 --new-tokens 2 --repeat 1 --no-ceiling --ladder \
  --emulate-drives 10MB/s --report "$T/lad.html" --json >"$T/lad.json" 2>"$T/lad.err" || fail "bench --ladder --report: $(cat "$T/lad.err")"
for k in 1 2 3 4; do
  [ -s "$T/lad-${k}drives.html" ] || fail "no report for the ladder's $k-drive step"
  n=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['drives']))" "$T/lad-${k}drives.html.json")
  [ "$n" = "$k" ] || fail "the $k-drive step's report has $n drives"
done

for b in 0 -5 abc 1e9; do
  if "$BIN" trace report "$T/old.jsonl" --bin "$b" >/dev/null 2>"$T/err"; then fail "--bin $b accepted"; fi
  grep -q "bin" "$T/err" || fail "--bin $b: $(cat "$T/err")"
done
echo "PASS"

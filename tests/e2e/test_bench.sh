#!/bin/sh
# `deltafin bench` runs end to end on a tiny generated checkpoint and reports
# what it promises: `bench kernels --json` has one entry per kernel, table and
# thread count with positive rates and the measured memory bandwidth;
# `bench --model --json` has the required keys, the phase statistics are
# ordered (min <= median <= max), every expert byte of the decode phase is
# accounted for (bytes/token > 0), prefill with no cache reads each needed
# expert once (amplification 1.00 with prefetch off), the useful read rate
# (needed experts only) is the read rate when nothing extra was read, the
# ceiling replays the decode reads (positive rate), and --ladder with
# emulated drives packs and prints one row per drive count; --draft reports the
# source, its blocks by length and drafts kept by position. Never asserts a
# time or a speed.
set -eu
BIN=${DF_BIN:-build/deltafin}
T=$(mktemp -d "${TMPDIR:-/tmp}/df_e2e_bench.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || fail "python3 is needed to read the JSON"

"$BIN" bench kernels --threads 1 --only "f32 gemv" --pool-mb 16 --min-time 0.02 --json >"$T/k.json" 2>"$T/k.err" ||
  { cat "$T/k.err" >&2; fail "bench kernels"; }
python3 - "$T/k.json" <<'EOF' || fail "bench kernels JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["membw"] and all(m["gbps"] > 0 for m in d["membw"]), d["membw"]
ks = d["kernels"]
assert ks and all(k["kernel"] == "f32 gemv" for k in ks), ks
assert "scalar" in {k["table"] for k in ks}
for k in ks:
    assert k["gbps"] > 0 and k["gflops"] > 0 and k["s_per_call"] > 0, k
EOF

"$BIN" make-model --preset tiny --seed 3 --out "$T/m" -q >/dev/null 2>&1 || fail "make-model"
"$BIN" bench --model "$T/m" --prompt-tokens 40 --new-tokens 5 --repeat 3 --prefetch off --json \
  >"$T/b.json" 2>"$T/b.err" || { cat "$T/b.err" >&2; fail "bench --model"; }
python3 - "$T/b.json" <<'EOF' || fail "bench --model JSON"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ["decode_s_per_token", "prefill_s_per_token", "expert_read_gbps", "ceiling_gbps", "storage_efficiency"]:
    assert isinstance(d[k], (int, float)) and d[k] > 0, (k, d[k])
assert d["repeat"] == 3 and d["prompt_tokens"] == 40 and d["new_tokens"] == 5
for ph in ["prefill", "decode"]:
    for name, s in d[ph].items():
        assert s["min"] <= s["median"] <= s["max"], (ph, name, s)
    assert d[ph]["expert_bytes_per_token"]["median"] > 0, ph
# no cache, no prefetch: each needed expert of a batch is read exactly once
assert abs(d["prefill"]["read_amplification"]["median"] - 1.0) < 1e-9, d["prefill"]["read_amplification"]
assert abs(d["prefill_read_amplification"] - 1.0) < 1e-9
assert d["ceiling"]["reads"] > 0 and d["ceiling"]["bytes"] > 0
# useful = the needed experts' bytes per second: the read rate itself when
# every read was needed (no prefetch, no cache: amplification exactly 1)
for ph in ["prefill", "decode"]:
    u, g, a = d[ph]["useful_read_gbps"], d[ph]["read_gbps"], d[ph]["read_amplification"]
    assert u["min"] > 0, (ph, u)
    if a["min"] == a["max"] == 1.0:
        for k in ["min", "median", "max"]:
            assert abs(u[k] - g[k]) <= 1e-9 * g[k], (ph, k, u, g)
assert d["useful_storage_efficiency"] > 0
assert d["cache_mb"] == 0
EOF

"$BIN" bench --model "$T/m" --prompt-tokens 8 --new-tokens 2 --repeat 1 --ladder \
  --emulate-drives 400MB/s,0.1ms --drives "$T/d1,$T/d2" >"$T/l.txt" 2>"$T/l.err" ||
  { cat "$T/l.err" >&2; fail "bench --ladder"; }
grep -q "drive ladder (EMULATED drives)" "$T/l.txt" || fail "no ladder table: $(cat "$T/l.txt")"
rows=$(sed -n '/drive ladder/,$p' "$T/l.txt" | grep -c 'x$')
[ "$rows" = 2 ] || fail "ladder rows: $rows (want 2)"
[ -f "$T/d2/deltafin-bench-2/manifest.json" ] || [ -f "$T/d1/deltafin-bench-2/manifest.json" ] || fail "no 2-drive pack manifest"
# --draft: the source that ran, its blocks by length and drafts kept by position, consistent
# with the drafted and accepted counts (a generated DSpark drafts every block)
"$BIN" make-model --preset dspark --target "$T/m" --seed 2 --out "$T/ds" -q >/dev/null 2>&1 || fail "make-model dspark"
"$BIN" bench --model "$T/m" --prompt-tokens 24 --new-tokens 12 --repeat 2 --draft "dspark:$T/ds" --draft-max 5 \
  --json >"$T/s.json" 2>"$T/s.err" || { cat "$T/s.err" >&2; fail "bench --draft dspark"; }
python3 - "$T/s.json" <<'EOF' || fail "bench --draft JSON"
import json, sys
s = json.load(open(sys.argv[1]))["speculation"]
assert s["draft"] == "dspark" and s["auto"] is False and s["draft_max"] == 5, s
bl, aa = s["block_lengths"], s["accepted_at"]
assert len(bl) == len(aa) <= 5 and sum(bl) == s["verify_blocks"] > 0, s
assert s["drafted"] == sum((k + 1) * n for k, n in enumerate(bl)), s
assert s["accepted"] == sum(aa) <= s["drafted"], s
assert all(aa[j] >= aa[j + 1] for j in range(len(aa) - 1)), s
assert abs(s["acceptance"] - s["accepted"] / s["drafted"]) < 1e-12, s
EOF
"$BIN" bench --model "$T/m" --prompt-tokens 24 --new-tokens 12 --repeat 1 --draft "dspark:$T/ds" --draft-max 5 \
  >"$T/s.txt" 2>"$T/s.err" || { cat "$T/s.err" >&2; fail "bench --draft dspark (text)"; }
grep -q "^speculation: --draft dspark, K 5" "$T/s.txt" || fail "no speculation line: $(cat "$T/s.txt")"
grep -q "^speculation: blocks by length:.*; accepted by position:" "$T/s.txt" || fail "no blocks line: $(cat "$T/s.txt")"
echo "ok: bench kernels, bench --model (json), ladder, --draft (source, blocks, acceptance by position)"

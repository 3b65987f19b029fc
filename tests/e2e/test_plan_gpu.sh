#!/bin/sh
# The GPU's memory plan (plan.h's df_plan_gpu) as the commands report it:
#  1. `deltafin plan --device cuda --gpu-mem SIZE` plans full K3 on any
#     build (no GPU needed): text and JSON agree, the parts fit the tier, a
#     tier too small for the spine keeps part of it and caps the tier's
#     kept bytes; without --gpu-mem and without a device it says what it
#     needs; a misspelt device is still refused.
#  2. On a build with a device (the -DDF_MOCKGPU=ON stand-in, or CUDA with
#     a GPU): `run --device cuda --json` carries stats.plan.gpu and --stats
#     its lines; with room for the whole spine the tier keeps at least the
#     plan's spine bytes (the sizes mirror what the pass sends to the
#     device: an undercount shows here), and with a tier too small the kept
#     bytes stay within the plan's cap and the ids are the CPU's; the
#     sequence state the device keeps is planned (one sequence at the
#     context, the marks; none with --gpu-state copy).
set -eu
BIN=${DF_BIN:?set DF_BIN}
SRC=${DF_SRC:?set DF_SRC}
PY=${PYTHON:-python3}
T=$(mktemp -d "${TMPDIR:-/tmp}/df_plan_gpu.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

# ---- 1. deltafin plan
"$BIN" plan --mem 64G --device cuda --gpu-mem 80G >"$T/p80" || fail "plan --gpu-mem 80G"
grep -q "^gpu      budget 80000.0 MB from --gpu-mem" "$T/p80" || fail "no budget line: $(cat "$T/p80")"
grep -q "^gpu      tier 80000.0 MB: spine .* (94 of 94 units: layers 0-92,head; per use: none)" "$T/p80" ||
  fail "int8 K3 should fit 80G whole: $(grep gpu "$T/p80")"
grep -q "^gpu      per-use buffers .* at 64 rows" "$T/p80" || fail "no per-use line"
"$BIN" plan --mem 64G --device cuda --gpu-mem 40G --spine bf16 --json >"$T/p40.json" || fail "plan 40G json"
"$PY" - "$T/p40.json" <<'PYEOF' || fail "plan 40G bf16 JSON"
import json, sys
g = json.load(open(sys.argv[1]))["gpu"]
assert g["budget_source"] == "--gpu-mem", g
assert g["budget_bytes"] == 40 * 10**9 and g["outside_bytes"] is None, g
assert g["spine_gpu_bytes"] < g["spine_total_bytes"], g
assert g["keep_cap_bytes"] == g["spine_gpu_bytes"], g
assert g["spine_gpu_bytes"] + g["expert_tier_bytes"] <= g["tier_bytes"], g
assert g["expert_tier_bytes"] >= g["expert_min_bytes"] > 0, g
assert len(g["gpu_units"]) == g["gpu_units_count"] and len(g["gpu_units"]) + len(g["per_use_units"]) == 94, g
assert g["peruse_weight_bytes"] > 0, g  # a unit not kept goes through the weight buffer
assert g["peruse_bytes"] == g["peruse_activation_bytes"] + g["peruse_expert_bytes"] + g["peruse_weight_bytes"], g
print("ok: plan 40G bf16: %d of 94 units, %d expert records" % (g["gpu_units_count"], g["expert_records"]))
PYEOF
if "$BIN" --version | grep -q "^cuda: not built"; then
  "$BIN" plan --mem 64G --device cuda >"$T/pnone" || fail "plan --device cuda without --gpu-mem"
  grep -q "^gpu      the GPU section needs --gpu-mem SIZE or a device" "$T/pnone" || fail "no hint: $(cat "$T/pnone")"
fi
"$BIN" plan --mem 64G >"$T/pcpu" || fail "plan"
if grep -q "^gpu" "$T/pcpu"; then fail "a GPU section without --device cuda"; fi
if "$BIN" plan --device cuda:x --gpu-mem 1G >/dev/null 2>"$T/e"; then fail "cuda:x accepted"; fi
grep -q "is not cpu, cuda or cuda:N" "$T/e" || fail "cuda:x: $(cat "$T/e")"

# ---- 2. run on a device
if "$BIN" --version | grep -q "^cuda: not built"; then echo "ok (no device in this build: part 2 skipped)"; exit 0; fi
M="$SRC/models/nano-k3"
if ! "$BIN" run --model "$M" --prompt-ids 1 --max-new 1 --device cuda >/dev/null 2>"$T/e"; then
  grep -q "no CUDA device" "$T/e" && { echo "ok (no CUDA device: part 2 skipped)"; exit 0; }
  fail "--device cuda: $(cat "$T/e")"
fi
"$BIN" plan --mem 4G --device cuda --model "$M" --spine bf16 >"$T/pdev" || fail "plan on the device"
grep -q "^gpu      budget .* from cuda:0's free memory less its reserve" "$T/pdev" || fail "device budget: $(grep gpu "$T/pdev")"
"$BIN" run --model "$M" --prompt-ids 1,2,3,4,5 --max-new 4 --json >"$T/cpu.json" || fail "cpu run"
"$BIN" run --model "$M" --prompt-ids 1,2,3,4,5 --max-new 4 --device cuda --json >"$T/big.json" || fail "gpu run"
"$BIN" run --model "$M" --prompt-ids 1,2,3,4,5 --max-new 4 --device cuda --stats >/dev/null 2>"$T/stats" ||
  fail "gpu run --stats"
grep -q "^gpu      tier " "$T/stats" || fail "--stats has no gpu lines: $(cat "$T/stats")"
"$PY" - "$T/big.json" <<'PYEOF' || fail "run --device cuda: stats.plan.gpu"
import json, sys
s = json.load(open(sys.argv[1]))["stats"]
g, d = s["plan"]["gpu"], s["device"]
assert g["gpu_units_count"] == len(g["gpu_units"]) and not g["per_use_units"], g
assert g["keep_cap_bytes"] is None, g
assert g["budget_bytes"] == d["tier_cap"] or d["tier_cap"] < g["budget_bytes"], (g, d)
# every planned spine byte is kept after a pass; a little more may be (a layer's small weights)
k, want = d["tier_keep_bytes"], g["spine_gpu_bytes"]
assert want <= k <= want + want // 20 + 65536, "kept %d, planned %d" % (k, want)
# the sequence state kept there is planned (for the whole context: more than these few rows)
assert 0 < d["seq_bytes"] <= g["state_bytes"], "state kept %d, planned %d" % (d["seq_bytes"], g["state_bytes"])
print("ok: kept %d bytes, planned %d; state %d, planned %d" % (k, want, d["seq_bytes"], g["state_bytes"]))
PYEOF
# with --gpu-state copy nothing of the state is kept there, nor planned; a
# draft's marks are (--draft-rollback rows: one a row, KDA states only)
"$BIN" run --model "$M" --prompt-ids 1,2,3,4,5 --max-new 4 --device cuda --gpu-state copy --json \
  >"$T/copy.json" || fail "gpu run --gpu-state copy"
"$BIN" run --model "$M" --prompt-ids 1,2,3,4,5 --max-new 4 --device cuda --draft ngram \
  --draft-rollback rows --draft-max 3 --json >"$T/marks.json" || fail "gpu run with marks"
"$PY" - "$T/big.json" "$T/copy.json" "$T/marks.json" <<'PYEOF' || fail "the planned state"
import json, sys
big, copy, marks = (json.load(open(p))["stats"] for p in sys.argv[1:4])
assert copy["plan"]["gpu"]["state_bytes"] == 0 == copy["device"]["seq_bytes"], copy["plan"]["gpu"]
one = big["plan"]["gpu"]["state_bytes"]
assert one == big["plan"]["state_bytes"], big["plan"]  # the RAM plan's state: KDA + the cache at ctx
extra = marks["plan"]["gpu"]["state_bytes"] - one
assert extra > 0 and extra % 3 == 0, extra  # three marks, each the same KDA state
print("ok: state planned on the device: %d bytes, %d a mark, none with --gpu-state copy" % (one, extra // 3))
PYEOF
# a tier that holds about half of the spine: the cap holds, the ids are the CPU's
cap=$("$PY" -c "import json,sys; g=json.load(open(sys.argv[1]))['stats']['plan']['gpu']; print(g['spine_total_bytes'] // 2 + g['expert_min_bytes'])" "$T/big.json")
"$BIN" run --model "$M" --prompt-ids 1,2,3,4,5 --max-new 4 --device cuda --gpu-mem "$cap" --json >"$T/half.json" ||
  fail "gpu run --gpu-mem $cap"
"$PY" - "$T/half.json" "$T/cpu.json" <<'PYEOF' || fail "run --device cuda, half the spine"
import json, sys
r, c = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
s = r["stats"]
g, d = s["plan"]["gpu"], s["device"]
assert 0 < g["gpu_units_count"] < len(g["gpu_units"]) + len(g["per_use_units"]), g
assert g["keep_cap_bytes"] == g["spine_gpu_bytes"], g
assert d["tier_keep_bytes"] <= g["keep_cap_bytes"], (d, g)
assert d["fallbacks"] == 0, d
assert r["output_ids"] == c["output_ids"], (r["output_ids"], c["output_ids"])
print("ok: half: kept %d of cap %d, ids %s" % (d["tier_keep_bytes"], g["keep_cap_bytes"], r["output_ids"]))
PYEOF
echo "ok"

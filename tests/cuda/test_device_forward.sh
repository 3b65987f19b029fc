#!/bin/sh
# --device cuda against the CPU path of the same binary (issue 21): the
# layers' products on the GPU must give the CPU's floats, so
#  1. `deltafin logits --hidden --routes` files are equal bit for bit
#     (every position's logits, every layer's hidden states, every router's
#     scores and choices) on generated checkpoints (tiny, small: 16 layers,
#     128 experts) and the committed nano-K3, bf16 and row-int8 spines,
#     prefill in one batch and in chunks of 8 (the last of one row: the
#     decode step's shapes, where grouped launches take over);
#  2. greedy ids are the CPU's across expert-cache sizes, GPU weight-tier
#     sizes (one so small that it evicts and refuses), memory limits (down to
#     every spine layer streamed), batch splits and thread counts;
#  3. speculation (n-gram, the nano-draft, the nano-DSpark) gives the same
#     ids on both devices, its marks kept on the GPU (none pulled back);
#  4. the GPU's weight tier sits above the RAM cache: an expert it holds is
#     not requested from the store again;
#  5. the sequence state kept in GPU memory (--gpu-state keep, the default)
#     gives the ids of --gpu-state copy and the CPU's, and a decode token
#     moves no KDA state: each KDA layer of each decode pass copies at least
#     its state matrix less in and out; speculation keeps its marks there
#     too (no state comes back to the host) and gives the same ids.
# Every GPU run's JSON must show products, KDA layers' sequence parts (the
# conv and the recurrence, df_kgpu_kda), MLA attention (df_kgpu_mla) and
# layer inputs (AttnRes and the norm, df_kgpu_pre) run on the GPU and none fallen
# back to the CPU, so a run that silently stayed on the CPU cannot pass.
# By default the row-tile GEMVs go as dependent launches; with DF_CUDA_PDL=1
# every kernel does, with DF_CUDA_PDL=0 none: every check must hold the same
# in each, and on sm_90 the runs must say which they used.
# Exits 77 (skipped) in a build without CUDA or on a machine without a GPU.
# PARTS (default "1 2 3 4 5") runs some of them.
set -eu
BIN=${DF_BIN:?set DF_BIN}
SRC=${DF_SRC:?set DF_SRC}
PY=${PYTHON:-python3}
T=$(mktemp -d "${TMPDIR:-/tmp}/df_gpu_fwd.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

if "$BIN" --version | grep -q "^cuda: not built"; then echo "skip: built without CUDA"; exit 77; fi
"$BIN" make-model --preset tiny --seed 1 --out "$T/tiny1" -q >/dev/null 2>&1 || fail "make-model tiny 1"
if ! "$BIN" run --model "$T/tiny1" --prompt-ids 1 --max-new 1 --device cuda >/dev/null 2>"$T/e"; then
  grep -q "no CUDA device" "$T/e" && { echo "skip: no CUDA device"; exit 77; }
  fail "--device cuda: $(cat "$T/e")"
fi
"$BIN" make-model --preset tiny --seed 2 --out "$T/tiny2" -q >/dev/null 2>&1 || fail "make-model tiny 2"
"$BIN" make-model --preset small --seed 31 --out "$T/small" -q >/dev/null 2>&1 || fail "make-model small"
cp -r "$SRC/models/nano-k3" "$T/nano"
for m in tiny1 tiny2 small nano; do
  "$BIN" convert-spine --model "$T/$m" >/dev/null 2>&1 || fail "convert-spine $m"
done

# same_st A B LABEL: every tensor of two safetensors files equal byte for byte
same_st() { "$PY" "$SRC/tests/cuda/same_st.py" "$1" "$2" "$3" || fail "$3: the files differ"; }

# gpu_ok JSON LABEL [min-evictions]: the run's products, KDA sequence parts and MLA attention ran on the GPU, none fell back
gpu_ok() {
  "$PY" - "$1" "$2" "${3:-0}" <<'PYEOF' || fail "$2: GPU counters"
import json, os, sys
s = json.load(open(sys.argv[1]))["stats"]
d = s.get("device")
if s.get("device_name", "cpu") == "cpu" or not d:
    sys.exit("%s: ran on %s" % (sys.argv[2], s.get("device_name")))
if d["products"] <= 0 or d["fallbacks"] != 0 or d["last_error"] is not None:
    sys.exit("%s: products %d, fallbacks %d, error %s" % (sys.argv[2], d["products"], d["fallbacks"], d["last_error"]))
if d["seq_calls"] <= 0 or d["attn_calls"] <= 0:  # every model here has KDA and MLA layers
    sys.exit("%s: KDA sequence parts %d, MLA attentions %d on the GPU" % (sys.argv[2], d["seq_calls"], d["attn_calls"]))
if d["pre_calls"] <= 0:  # a layer's AttnRes and norm on the device
    sys.exit("%s: no layer input made on the GPU" % sys.argv[2])
if d["tier_evictions"] + d["tier_refused"] < int(sys.argv[3]):
    sys.exit("%s: expected evictions or refusals: %s" % (sys.argv[2], d))
# the dependent launches asked for (unset or gemv: of the row-tile GEMVs; 1: every kernel;
# 0: none) are, on an sm_90 device, what ran
want = {"": "dependent launches of the GEMVs)", "gemv": "dependent launches of the GEMVs)",
        "1": "dependent launches)", "0": "GiB)"}.get(os.environ.get("DF_CUDA_PDL", ""))
if want and "sm_9" in d["name"] and not d["name"].endswith(want):
    sys.exit("%s: DF_CUDA_PDL=%s but the name says otherwise (%s)" % (sys.argv[2], os.environ.get("DF_CUDA_PDL", "unset"), d["name"]))
PYEOF
}
ids() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['output_ids'])" "$1"; }

P=$(seq -s, 100 140) # 41 positions
PARTS=${PARTS:-1 2 3 4 5}
part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
n=0
part 1 && echo "== 1. logits, hidden states and routes"
part 1 && for m in tiny1 tiny2 small nano; do
  for spine in bf16 int8; do
    for chunk in 0 8; do # 41 = 5 x 8 + 1
      a="--model $T/$m --prompt-ids $P --hidden --routes --heat '' --spine $spine --prefill-chunk $chunk --threads 4"
      eval "\"$BIN\" logits $a --out \"$T/cpu.st\"" 2>"$T/e" || fail "logits cpu $m: $(cat "$T/e")"
      eval "\"$BIN\" logits $a --out \"$T/gpu.st\" --device cuda" 2>"$T/e" || fail "logits cuda $m: $(cat "$T/e")"
      same_st "$T/cpu.st" "$T/gpu.st" "$m $spine chunk $chunk"
      n=$((n + 1))
    done
  done
done

part 2 && echo "== 2. ids across cache, tier, memory, batch split and threads"
NEW=16
part 2 && for m in tiny2 nano; do
  for spine in bf16 int8; do
    base="--model $T/$m --prompt-ids $P --max-new $NEW --json --heat '' --spine $spine"
    eval "\"$BIN\" run $base --threads 2" >"$T/ref.json" 2>"$T/e" || fail "cpu run $m: $(cat "$T/e")"
    ref=$(ids "$T/ref.json")
    # the least memory that runs (every spine layer streamed), from the refusal of 1 byte
    if eval "\"$BIN\" run $base --ctx 256 --mem-limit 1" >/dev/null 2>"$T/e"; then fail "--mem-limit 1 ran"; fi
    least=$(sed -n 's/.*at least [0-9.]* MB (\([0-9]*\) bytes).*/\1/p' "$T/e")
    [ -n "$least" ] || fail "no least memory in: $(cat "$T/e")"
    for v in "" "--cache-mb 0" "--gpu-mem 1M" "--gpu-mem 2G" "--prefill-chunk 1" "--prefill-chunk 7" \
             "--threads 1" "--ctx 256 --mem-limit $least" "--ctx 256 --mem-limit $least --gpu-mem 1M" \
             "--cache-mb 0 --prefill-chunk 5 --threads 3"; do
      ev=0 # a 1 MiB tier cannot hold these models: it must evict or refuse
      case "$v" in *"--gpu-mem 1M"*) ev=1 ;; esac
      eval "\"$BIN\" run $base --device cuda $v" >"$T/g.json" 2>"$T/e" || fail "cuda run $m $spine $v: $(cat "$T/e")"
      got=$(ids "$T/g.json")
      [ "$got" = "$ref" ] || fail "$m $spine --device cuda $v: ids $got, the CPU's $ref"
      gpu_ok "$T/g.json" "$m $spine $v" $ev
      n=$((n + 1))
    done
    echo "ok: $m $spine: 10 GPU variants give the CPU's ids"
  done
done

part 3 && echo "== 3. speculation"
C="$T/nano"
# text, so a draft with its own tokenizer (the nano-draft) sees what the model sees
TXT="The cat sat on the mat. The dog sat on the log. The cat sat on the"
part 3 && for d in ngram "$SRC/models/nano-draft" "dspark:$SRC/models/nano-dspark"; do
  for dev in cpu cuda; do
    "$BIN" run --model "$C" --prompt "$TXT" --max-new 24 --json --heat '' --draft "$d" --device $dev \
      >"$T/s.$dev.json" 2>"$T/e" || fail "draft $d on $dev: $(cat "$T/e")"
  done
  "$BIN" run --model "$C" --prompt "$TXT" --max-new 24 --json --heat '' >"$T/off.json" 2>"$T/e" || fail "draft off"
  [ "$(ids "$T/s.cpu.json")" = "$(ids "$T/off.json")" ] || fail "draft $d on the CPU: ids differ from --draft off"
  [ "$(ids "$T/s.cuda.json")" = "$(ids "$T/s.cpu.json")" ] || fail "draft $d: GPU ids $(ids "$T/s.cuda.json"), CPU $(ids "$T/s.cpu.json")"
  gpu_ok "$T/s.cuda.json" "draft $d"
  [ "$("$PY" -c "import json,sys; d=json.load(open(sys.argv[1]))['stats']['device']; print(d['seq_pulls'], d['seq_copies'] > 0)" "$T/s.cuda.json")" = "0 True" ] ||
    fail "draft $d: the marks did not stay on the GPU (seq_pulls, seq_copies)"
  n=$((n + 1))
  echo "ok: --draft $d: the same ids on both devices, the marks kept on the GPU"
done
part 4 && echo "== 4. the GPU's tier above the RAM cache: what it holds is not read"
# --cache-mb 0, so every expert a CPU pass uses is requested from the store;
# with a tier that holds every expert, the GPU requests each one once at
# most (it is then in GPU memory); a 1 MiB tier holds the few that fit
# beside the spine, so it requests more, and never more than the CPU.
part 4 && for spine in bf16 int8; do
  base="--model $T/tiny2 --prompt-ids $P --max-new 16 --json --heat '' --cache-mb 0 --spine $spine"
  eval "\"$BIN\" run $base" >"$T/c.json" 2>"$T/e" || fail "cpu run: $(cat "$T/e")"
  eval "\"$BIN\" run $base --device cuda" >"$T/g.json" 2>"$T/e" || fail "cuda run: $(cat "$T/e")"
  eval "\"$BIN\" run $base --device cuda --gpu-mem 1M" >"$T/g1.json" 2>"$T/e" || fail "cuda 1M run: $(cat "$T/e")"
  for j in g g1; do
    [ "$(ids "$T/$j.json")" = "$(ids "$T/c.json")" ] || fail "tier reads $spine $j: ids differ from the CPU's"
  done
  gpu_ok "$T/g.json" "tier reads $spine"
  gpu_ok "$T/g1.json" "tier reads $spine 1M" 1
  "$PY" - "$T/c.json" "$T/g.json" "$T/g1.json" "$T/tiny2/config.json" "$spine" <<'PYEOF' || fail "tier reads $spine"
import json, sys
c, g, g1 = (json.load(open(p))["stats"] for p in sys.argv[1:4])
cfg = json.load(open(sys.argv[4]))
cfg = cfg.get("text_config", cfg)
moe = cfg["num_hidden_layers"] - cfg.get("first_k_dense_replace", 0)
n_exp = cfg.get("n_routed_experts") or cfg.get("num_experts")
req = lambda s: s["store"]["expert_requests"]
rec = c["store"]["record_bytes"]
if not req(g) <= req(g1) <= req(c):
    sys.exit("requests: a large tier %d, a 1 MiB one %d, the CPU %d (a smaller tier may not read less)"
             % (req(g), req(g1), req(c)))
if not req(g) < req(c):
    sys.exit("the tier held nothing back: %d requests, the CPU's %d" % (req(g), req(c)))
if g["device"]["tier_evictions"] == 0 and req(g) > moe * n_exp:
    sys.exit("%d requests, more than the %d experts there are: one was read twice" % (req(g), moe * n_exp))
if g["store"]["expert_bytes_demand"] > moe * n_exp * rec:
    sys.exit("%d bytes read on demand, more than every expert once" % g["store"]["expert_bytes_demand"])
print("ok: %s: the GPU's tier requested %d experts, the CPU %d (1 MiB tier: %d)" % (sys.argv[5], req(g), req(c), req(g1)))
PYEOF
  n=$((n + 1))
done
part 5 && echo "== 5. the sequence state kept on the GPU"
part 5 && for m in tiny2 nano; do
  base="--model $T/$m --prompt-ids $P --max-new 16 --json --heat ''"
  eval "\"$BIN\" run $base" >"$T/c.json" 2>"$T/e" || fail "cpu run: $(cat "$T/e")"
  for st in keep copy; do
    eval "\"$BIN\" run $base --device cuda --gpu-state $st" >"$T/$st.json" 2>"$T/e" || fail "cuda $st: $(cat "$T/e")"
    [ "$(ids "$T/$st.json")" = "$(ids "$T/c.json")" ] || fail "$m --gpu-state $st: ids differ from the CPU's"
    gpu_ok "$T/$st.json" "$m --gpu-state $st"
  done
  "$PY" - "$T/keep.json" "$T/copy.json" "$T/$m/config.json" "$m" <<'PYEOF' || fail "$m: the state kept on the GPU"
import json, sys
k, c = (json.load(open(p))["stats"]["device"] for p in sys.argv[1:3])
cfg = json.load(open(sys.argv[3]))
cfg = cfg.get("text_config", cfg)
la = cfg["linear_attn_config"]
n_kda, S = len(la["kda_layers"]), la["num_heads"] * la["head_dim"] ** 2 * 4
decode = 15  # passes after the prefill's (16 new tokens)
act = lambda d, key: d[key] - (d["weight_h2d_bytes"] if key == "h2d_bytes" else 0)
if c["seq_bytes"] != 0 or k["seq_bytes"] <= 0 or k["seq_entries"] <= 0:
    sys.exit("state in GPU memory: keep %d B (%d entries), copy %d B" % (k["seq_bytes"], k["seq_entries"], c["seq_bytes"]))
for key in ("h2d_bytes", "d2h_bytes"):
    saved = act(c, key) - act(k, key)
    if saved < decode * n_kda * S:
        sys.exit("%s: keep moves %d B less than copy, under %d decode passes x %d KDA layers x %d B"
                 % (key, saved, decode, n_kda, S))
print("ok: %s: the kept state saves %d B in, %d B out (%d B in GPU memory)"
      % (sys.argv[4], act(c, "h2d_bytes") - act(k, "h2d_bytes"), act(c, "d2h_bytes") - act(k, "d2h_bytes"), k["seq_bytes"]))
PYEOF
  n=$((n + 1))
done
# speculation keeps its marks' states on the device too: a verify pass
# writes its per-row states into the marks' entries there (rows) or saves
# the state into one (recompute), a rollback copies one back, and no KDA
# state comes to the host (seq_pulls 0); each KDA layer of each pass runs
# there. The device copies are counted exactly: rows, one per drafted
# token (the state after each row but the last) and one per rollback, in
# every KDA layer; recompute, one per verify pass (the save) and one per
# rollback.
part 5 && for rb in recompute rows; do
  a="--model $T/nano --prompt \"$TXT\" --max-new 24 --json --heat '' --draft ngram --draft-rollback $rb"
  eval "\"$BIN\" run $a" >"$T/sc.json" 2>"$T/e" || fail "cpu ngram $rb: $(cat "$T/e")"
  eval "\"$BIN\" run $a --device cuda" >"$T/sg.json" 2>"$T/e" || fail "cuda ngram $rb: $(cat "$T/e")"
  [ "$(ids "$T/sg.json")" = "$(ids "$T/sc.json")" ] || fail "ngram $rb: GPU ids differ from the CPU's"
  gpu_ok "$T/sg.json" "ngram $rb"
  "$PY" - "$T/sg.json" "$T/nano/config.json" "$rb" <<'PYEOF' || fail "ngram $rb: the marks on the GPU"
import json, sys
s = json.load(open(sys.argv[1]))["stats"]
d, sp = s["device"], s["speculation"]
cfg = json.load(open(sys.argv[2]))
cfg = cfg.get("text_config", cfg)
n_kda, rb = len(cfg["linear_attn_config"]["kda_layers"]), sys.argv[3]
if sp["rollbacks"] <= 0 or sp["verify_blocks"] <= 0:
    sys.exit("no verify pass rolled back: %s" % sp)
if d["seq_pulls"] != 0:
    sys.exit("%d KDA states came back to the host" % d["seq_pulls"])
want = (sp["drafted"] if rb == "rows" else sp["verify_blocks"]) + sp["rollbacks"]
if d["seq_copies"] != want * n_kda:
    sys.exit("%d device copies of a state, not (%d + %d rollbacks) x %d KDA layers"
             % (d["seq_copies"], want - sp["rollbacks"], sp["rollbacks"], n_kda))
passes = sp["decode_passes"] + 1  # the prefill's
if d["seq_calls"] != passes * n_kda:
    sys.exit("%d KDA layers on the GPU, not %d passes x %d" % (d["seq_calls"], passes, n_kda))
print("ok: ngram, --draft-rollback %s: the CPU's ids, %d state copies on the GPU, none to the host"
      % (rb, d["seq_copies"]))
PYEOF
  n=$((n + 1))
done
echo "device forward: ok ($n comparisons)"

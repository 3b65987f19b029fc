#!/bin/sh
# Speculative decoding through `deltafin run`: --draft ngram, auto and self
# give the ids of --draft off on a generated checkpoint and on nano-K3, for
# K 1..8, 1 and 2 threads, the trained Qwen3 nano-draft (another vocabulary), no expert cache, a pack on two drives, a memory
# limit that streams spine layers, and another prefill split; --stats and
# --json report the blocks; bad --draft values are refused by name.
set -eu
BIN=${DF_BIN:-build/deltafin}
SRC=${DF_SRC:-.}
T=$(mktemp -d /tmp/df_e2e_spec.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" make-model --preset tiny --seed 9 --out "$T/m" -q >/dev/null 2>&1
# repetitive ids so prompt lookup has something to find
IDS=$(python3 -c "print(','.join(str(300 + (i * 7) % 23) for i in range(60)))")
NANO="$SRC/models/nano-k3"
TEXT="A list is a sequence of items. A list can hold other lists. A list"

. "$(dirname "$0")/lib_spec.sh"

check tiny "$T/m" "--prompt-ids $IDS" \
  "--draft ngram --draft-max 1" "--draft ngram --draft-max 2" "--draft ngram --draft-max 5" \
  "--draft ngram --draft-max 8" "--draft self --draft-max 3" "--draft self --draft-max 8" \
  "--draft auto" "--draft ngram --threads 1" "--draft ngram --threads 2" \
  "--draft ngram --cache-mb 0" "--draft self --cache-mb 0 --prefill-chunk 7" \
  "--draft ngram --draft-rollback rows --draft-max 1" "--draft ngram --draft-rollback rows --draft-max 8" \
  "--draft self --draft-rollback rows --draft-max 5 --threads 1"

# the self draft is always right: every draft accepted, fewer passes than tokens
ids_of "$T/m" --prompt-ids "$IDS" --draft self --draft-max 4 >/dev/null || fail "self run"
[ "$(spec accepted)" = "$(spec drafted)" ] || fail "self draft: $(spec accepted) of $(spec drafted) accepted"
[ "$(spec rollbacks)" = 0 ] || fail "self draft rolled back"
[ "$(spec decode_passes)" -lt 39 ] || fail "self draft: $(spec decode_passes) passes for 40 tokens"
[ "$(spec draft)" = self ] || fail "speculation.draft is $(spec draft)"

# two drives, and spine layers streamed under a memory limit
"$BIN" pack --model "$T/m" --drives "$T/d0,$T/d1" -q >/dev/null 2>&1 || fail "pack on two drives"
check "tiny, 2 drives" "$T/m" "--prompt-ids $IDS --cache-mb 0" "--draft ngram" "--draft self --draft-max 6"
# the least memory the plan accepts with a self draft (its refusal names it, speculation
# included): spine layers stream
lim=$("$BIN" run --model "$T/m" --prompt-ids 1,2 --max-new 1 --ctx 512 --mem-limit 1M --heat "" --draft self 2>&1 |
  sed -n 's/.*at least [0-9.]* MB (\([0-9]*\) bytes).*/\1/p')
[ -n "$lim" ] || fail "no least memory in the plan's refusal"
ids_of "$T/m" --prompt-ids "$IDS" --ctx 512 --mem-limit "$lim" --draft ngram >/dev/null || fail "streamed run"
python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['stats']['plan']; sys.exit(0 if p['streamed_units'] > 0 else 1)" \
  "$T/last.json" || fail "--mem-limit $lim streams no spine layer"
check "tiny, --mem-limit $lim (spine streamed)" "$T/m" "--prompt-ids $IDS --ctx 512 --mem-limit $lim" "--draft ngram" "--draft self" "--draft ngram --draft-rollback rows"

check nano "$NANO" "--prompt \"$TEXT\"" "--draft ngram --draft-max 4" "--draft auto --draft-max 8" \
  "--draft self --draft-max 2" "--draft ngram --threads 2 --cache-mb 0" \
  "--draft $SRC/models/nano-draft --draft-max 4" "--draft $SRC/models/nano-draft --draft-max 8 --threads 2" \
  "--draft $SRC/models/nano-draft --draft-max 1 --cache-mb 0" \
  "--draft $SRC/models/nano-draft --draft-max 6 --draft-rollback rows" "--draft auto --draft-rollback rows"
check "nano chat" "$NANO" "--chat --prompt \"What is a list?\"" "--draft $SRC/models/nano-draft" "--draft auto"

# the trained Qwen3 draft (another vocabulary, its text re-encoded into K3 ids) is right sometimes
ids_of "$NANO" --prompt "$TEXT" --draft "$SRC/models/nano-draft" >/dev/null || fail "nano-draft run"
[ "$(spec accepted)" -gt 0 ] || fail "nano-draft: no draft accepted of $(spec drafted)"
[ "$(spec draft)" = nano-draft ] || fail "speculation.draft is $(spec draft)"
echo "ok: nano-draft: $(spec accepted) of $(spec drafted) drafts accepted"
# rows rollback: the same blocks, and no recompute pass for a rejected one
rb=$(spec rollbacks) passes=$(spec decode_passes)
[ "$rb" -gt 0 ] || fail "nano-draft: no block rolled back (the rows check below needs one)"
ids_of "$NANO" --prompt "$TEXT" --draft "$SRC/models/nano-draft" --draft-rollback rows >/dev/null ||
  fail "nano-draft rows run"
[ "$(spec rollbacks)" = "$rb" ] || fail "rows: $(spec rollbacks) rollbacks, recompute had $rb"
[ "$(spec decode_passes)" = $((passes - rb)) ] ||
  fail "rows: $(spec decode_passes) passes, expected $passes - $rb recomputes"
echo "ok: rows rollback: $rb rejected blocks undone without a recompute pass"

# the memory plan budgets a draft model (its tensors, its logits, its KV cache over the context)
# and the rows rollback's marks: the least memory the plan asks for grows by exactly that,
# counted here from the files (safetensors headers, config.json) and kimi-k3.md's state sizes
least() { "$BIN" run --model "$NANO" --prompt-ids 1,2 --max-new 1 --ctx 1024 --mem-limit 1M --heat "" "$@" 2>&1 |
  sed -n 's/.*at least [0-9.]* MB (\([0-9]*\) bytes).*/\1/p'; }
l_ngram=$(least --draft ngram) l_qwen=$(least --draft "$SRC/models/nano-draft")
l_rows=$(least --draft ngram --draft-rollback rows --draft-max 8)
python3 - "$SRC/models/nano-draft" "$NANO/config.json" "$l_ngram" "$l_qwen" "$l_rows" <<'PY' || fail "the plan's draft budget"
import json, struct, sys, os
d, k3cfg, ng, qw, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
c = json.load(open(os.path.join(d, "config.json")))
tensors = 0
for f in os.listdir(d):
    if f.endswith(".safetensors"):
        with open(os.path.join(d, f), "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            hdr = json.loads(fh.read(n))
        tensors += sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in hdr.items() if k != "__metadata__")
kv = c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * c["head_dim"] * 4
want = tensors + 4 * c["vocab_size"] + kv * 1024
assert qw - ng == want, (qw - ng, want)
t = json.load(open(k3cfg))["text_config"]
la = t["linear_attn_config"]
P = la["num_heads"] * la["head_dim"]
mark = len(la["kda_layers"]) * 4 * (la["num_heads"] * la["head_dim"] ** 2 + 3 * (la["short_conv_kernel_size"] - 1) * P)
assert rows - ng == 7 * mark, (rows - ng, 7 * mark)
print("ok: plan: the Qwen3 draft adds %d bytes (tensors %d, logits, KV at 1024 positions); rows K 8 adds 7 marks of %d" % (want, tensors, mark))
PY

# --draft auto's decisions are in the trace, one record per change --stats counts (sampling:
# the decisions rest on accepted counts only, so the seed fixes them)
ids_of "$NANO" --prompt "$TEXT" --max-new 120 --draft auto --temperature 0.8 --seed 1 \
  --trace "$T/auto.trace" >/dev/null || fail "auto traced run"
python3 - "$T/auto.trace" "$(spec k_changes)" "$(spec switched_off)" <<'PY' || fail "auto's trace records"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"draft"' in l]
recs = [r for r in recs if r["k"] == "draft"]
changes = [r for r in recs if r["why"] != "probe"]
offs = [r for r in recs if r["why"] == "off"]
assert len(changes) == int(sys.argv[2]), (len(changes), sys.argv[2])
assert len(offs) == int(sys.argv[3]) and offs, (len(offs), sys.argv[3])
assert all(r["K"] == 0 for r in offs) and all(r["tpp"] < 1.5 for r in offs), offs
ts = [r["t"] for r in recs]
assert ts == sorted(ts), ts
print("ok: auto: %d decisions in the trace (%d off), as --json counts" % (len(changes), len(offs)))
PY

# --stats says what the draft did
"$BIN" run --model "$NANO" --prompt "$TEXT" --max-new 16 --heat "" --draft ngram --stats \
  >/dev/null 2>"$T/stats.err" || fail "--stats run"
grep -q "^draft    ngram, K 4" "$T/stats.err" || { cat "$T/stats.err"; fail "--stats has no draft line"; }

# bad values
for bad in "--draft qwen9" "--draft /nonexistent" "--draft-max 0" "--draft-max 17" "--draft-rollback undo"; do
  if "$BIN" run --model "$T/m" --prompt-ids 1,2 $bad >"$T/o" 2>"$T/e"; then fail "$bad accepted"; fi
  grep -q -- "--draft" "$T/e" || { cat "$T/e"; fail "$bad: the error does not name the option"; }
done
echo "test_spec: ok"

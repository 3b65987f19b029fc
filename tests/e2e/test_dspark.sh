#!/bin/sh
# K3's own drafter through `deltafin run`: a generated (random) DSpark for
# nano-K3 and for the tiny preset gives the ids of --draft off for K 1..7,
# 1 and 2 threads, no expert cache, a memory limit that streams spine
# layers (the LM head the draft shares included), experts packed on two
# drives and another prefill split; a folder is recognised by its model_type; --draft auto takes the
# DSpark installed as MODEL/dspark for chat prompts (n-gram for raw text) and cuts blocks by its
# confidence head;
# --json and --stats report the blocks; make-model's bytes follow the seed;
# a draft for another target is refused naming the key.
set -eu
BIN=${DF_BIN:-build/deltafin}
SRC=${DF_SRC:-.}
T=$(mktemp -d /tmp/df_e2e_dspark.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
NANO="$SRC/models/nano-k3"
TEXT="A list is a sequence of items. A list can hold other lists. A list"

"$BIN" make-model --preset dspark --target "$NANO" --seed 3 --out "$T/ds" -q || fail "make-model dspark"
"$BIN" make-model --preset dspark --target "$NANO" --seed 3 --out "$T/ds2" -q || fail "make-model again"
cmp -s "$T/ds/model.safetensors" "$T/ds2/model.safetensors" || fail "same seed, other bytes"
cmp -s "$T/ds/config.json" "$T/ds2/config.json" || fail "same seed, other config"
"$BIN" make-model --preset dspark --target "$NANO" --seed 4 --out "$T/ds4" -q || fail "make-model seed 4"
if cmp -s "$T/ds/model.safetensors" "$T/ds4/model.safetensors"; then fail "seed does not matter"; fi
python3 - "$T/ds" <<'EOF' || fail "generated checkpoint layout"
import json, struct, sys
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
assert c["model_type"] == "k3_dspark" and c["architectures"] == ["K3DSparkForCausalLM"], c
assert c["target_layer_ids"] == [1, 3, 4, 6, 7] and c["num_hidden_layers"] == 2, c
assert c["hidden_size"] == 256 and c["vocab_size"] == 4096 and c["mask_token_id"] == 3848, c
assert c["markov_rank"] == 32 and c["intermediate_size"] == 512 and c["block_size"] == 7, c
b = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
assert h["model.fc.weight"]["shape"] == [256, 5 * 256] and h["model.fc.weight"]["dtype"] == "BF16"
assert h["model.layers.1.self_attn.kv_a_proj_with_mqa.weight"]["shape"] == [64 + 16, 256]
assert h["model.layers.0.self_attn.q_b_proj.weight"]["shape"] == [4 * 48, 128]
assert h["model.layers.0.self_attn.kv_b_proj.weight"]["shape"] == [4 * 64, 64]
assert h["model.confidence_head.bias"]["dtype"] == "F32"
assert "model.layers.2.input_layernorm.weight" not in h
EOF
echo "ok: make-model --preset dspark: the published layout, bytes from the seed"

SPEC_NEW=32
. "$(dirname "$0")/lib_spec.sh"

D="--draft dspark:$T/ds"
check "nano, dspark" "$NANO" "--prompt \"$TEXT\"" \
  "$D --draft-max 1" "$D --draft-max 2" "$D --draft-max 3" "$D --draft-max 4" \
  "$D --draft-max 5" "$D --draft-max 6" "$D --draft-max 7" "$D --draft-max 7 --threads 1" \
  "$D --draft-max 5 --threads 2" "$D --draft-max 7 --cache-mb 0" "$D --draft-max 3 --prefill-chunk 5" \
  "--draft $T/ds --draft-max 7"

ids_of "$NANO" --prompt "$TEXT" --draft "$T/ds" --draft-max 7 >/dev/null || fail "folder run"
[ "$(spec draft)" = dspark ] || fail "a k3_dspark folder ran as $(spec draft)"
[ "$(spec verify_blocks)" -gt 0 ] || fail "no verify block"
python3 - "$T/last.json" <<'EOF' || fail "speculation report"
import json, sys
s = json.load(open(sys.argv[1]))["stats"]["speculation"]
bl, aa, cm = s["block_lengths"], s["accepted_at"], s["confidence_mean"]
assert sum(bl) == s["verify_blocks"], s
assert sum((k + 1) * n for k, n in enumerate(bl)) == s["drafted"], s
assert sum(aa) == s["accepted"], s
assert len(cm) == len(bl) and all(c is None or 0 < c < 1 for c in cm), s
assert cm[-1] is not None, s
EOF
echo "ok: --json: block lengths, accepts and confidences by position add up"

"$BIN" run --model "$NANO" --prompt "$TEXT" --max-new 16 --heat "" $D --draft-max 7 --stats \
  >/dev/null 2>"$T/stats.err" || fail "--stats run"
grep -q "^draft    dspark, K 7" "$T/stats.err" || { cat "$T/stats.err"; fail "--stats: no draft line"; }
grep -q "^draft    blocks by length:.*mean confidence by position: 0\." "$T/stats.err" ||
  { cat "$T/stats.err"; fail "--stats: no block lengths or confidences"; }

# --draft auto: the DSpark beside the model (MODEL/dspark), blocks cut by confidence, for chat
# prompts (raw text gets n-gram, below)
CHAT='--chat --prompt "What is a list?"'
mkdir "$T/nk"
for f in "$NANO"/*; do ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$T/nk/"; done
cp -r "$T/ds" "$T/nk/dspark"
check "nano chat, auto with MODEL/dspark" "$T/nk" "$CHAT" "--draft auto --draft-max 7" \
  "--draft auto --draft-max 3 --threads 2"
eval ids_of "\"$T/nk\"" $CHAT --draft auto --draft-max 7 >/dev/null || fail "auto run"
[ "$(spec verify_blocks)" -gt 0 ] || fail "auto: no DSpark block"
[ "$(spec draft)" = dspark ] || fail "auto, chat prompt: ran $(spec draft), not dspark"
python3 - "$T/last.json" <<'EOF2' || fail "auto: blocks not cut by confidence"
import json, sys
s = json.load(open(sys.argv[1]))["stats"]["speculation"]
# a random draft's confidences are about 0.25: the 0.5 cut leaves one draft per block
assert s["auto"] is True and s["block_lengths"][0] == s["verify_blocks"], s
EOF2
echo "ok: --draft auto takes MODEL/dspark and cuts its blocks by confidence"

# --draft auto chooses per prompt: the trained nano-DSpark (models/nano-dspark as MODEL/dspark)
# for a chat prompt (its ids hold <|open|>), n-gram for raw text; the ids are --draft off's in both
mkdir "$T/nt"
for f in "$NANO"/*; do ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$T/nt/"; done
ln -s "$(cd "$SRC/models/nano-dspark" && pwd)" "$T/nt/dspark"
for kind in chat raw; do
  if [ $kind = chat ]; then args=$CHAT want=dspark; else args="--prompt \"$TEXT\"" want=ngram; fi
  check "nano $kind, auto with nano-DSpark" "$T/nt" "$args" "--draft auto --draft-max 7"
  [ "$(spec draft)" = $want ] || fail "auto, $kind prompt: ran $(spec draft), not $want"
  [ "$(spec auto)" = True ] || fail "auto, $kind prompt: speculation.auto is $(spec auto)"
  [ "$(spec verify_blocks)" -gt 0 ] || fail "auto, $kind prompt: no block verified"
  eval "\"$BIN\"" run --model "\"$T/nt\"" $args --max-new 32 --heat "''" --draft auto --draft-max 7 --stats \
    >/dev/null 2>"$T/stats.err" || fail "auto, $kind: --stats run"
  grep -q "^draft    $want (auto), K 7" "$T/stats.err" || { cat "$T/stats.err"; fail "auto, $kind: --stats draft line"; }
done
echo "ok: --draft auto: nano-DSpark for the chat prompt, n-gram for raw text, the ids of --draft off"

# the tiny preset's dims, and a memory limit that streams spine layers and the head
"$BIN" make-model --preset tiny --seed 9 --out "$T/m" -q >/dev/null 2>&1
"$BIN" make-model --preset dspark --target "$T/m" --out "$T/tds" -q || fail "make-model dspark tiny"
IDS=$(python3 -c "print(','.join(str(300 + (i * 7) % 23) for i in range(40)))")
lim=$("$BIN" run --model "$T/m" --prompt-ids 1,2 --max-new 1 --ctx 512 --mem-limit 1M --heat "" --draft "$T/tds" 2>&1 |
  sed -n 's/.*at least [0-9.]* MB (\([0-9]*\) bytes).*/\1/p')
[ -n "$lim" ] || fail "no least memory in the plan's refusal"
ids_of "$T/m" --prompt-ids "$IDS" --ctx 512 --mem-limit "$lim" --draft "$T/tds" >/dev/null || fail "streamed run"
python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['stats']['plan']; sys.exit(0 if 'head' in p['streamed'] else 1)" \
  "$T/last.json" || fail "--mem-limit $lim does not stream the LM head the draft shares"
check "tiny, dspark" "$T/m" "--prompt-ids $IDS" "--draft $T/tds --draft-max 1" \
  "--draft $T/tds --draft-max 4" "--draft $T/tds --draft-max 7 --threads 2" \
  "--draft $T/tds --draft-max 7 --cache-mb 0"
check "tiny, dspark, --mem-limit $lim (spine streamed)" "$T/m" "--prompt-ids $IDS --ctx 512 --mem-limit $lim" \
  "--draft $T/tds --draft-max 7" "--draft $T/tds --draft-max 2 --threads 2"
# the experts packed on two drives (read from there from now on)
"$BIN" pack --model "$T/m" --drives "$T/d0,$T/d1" -q >/dev/null 2>&1 || fail "pack on two drives"
check "tiny, dspark, 2 drives" "$T/m" "--prompt-ids $IDS --cache-mb 0" "--draft $T/tds --draft-max 7" \
  "--draft $T/tds --draft-max 3 --threads 2"

# a draft made for another target is refused naming the key
if "$BIN" run --model "$T/m" --prompt-ids 1,2 --draft "$T/ds" >"$T/o" 2>"$T/e"; then fail "nano draft on tiny accepted"; fi
grep -q "'hidden_size' = 256 does not match the target model's" "$T/e" || { cat "$T/e"; fail "refusal does not name the key"; }
if "$BIN" run --model "$T/m" --prompt-ids 1,2 --draft dspark:/nonexistent >"$T/o" 2>"$T/e"; then fail "missing dspark accepted"; fi
grep -q -- "--draft" "$T/e" || { cat "$T/e"; fail "missing folder: the error does not name the option"; }
echo "test_dspark: ok"

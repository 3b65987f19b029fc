#!/bin/sh
# The Qwen3 draft forward (src/qwen3, deltafin draft-run) against the
# independent float64 reference tools/reference/qwen3_ref.py, every fed
# position's full logits, on models/nano-draft (trained) and on generated
# random checkpoints in the release's layout (sharded and untied with the 4.x
# config; single-file and tied with transformers 5's rope_parameters). The
# tolerance is the fp32 error of the reference itself run in float32, times 4
# (qwen3_ref.py compare). Then: nano-draft against the committed transformers
# fixture (tests/fixtures/qwen3); bit-identical logits for every prefill split,
# thread count and kernel table; bad checkpoints rejected with errors naming
# the tensor or field.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
PY=/usr/bin/python3
REF="$DF_SRC/tools/reference/qwen3_ref.py"
GEN="$DF_SRC/tools/reference/gen_qwen3.py"
NANO="$DF_SRC/models/nano-draft"
T=$(mktemp -d "${TMPDIR:-/tmp}/df-qwen3.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# fed_ids JSON: the ids the model was fed (the prompt, then each generated id but the last)
fed_ids() {
  $PY -c "import json,sys;j=json.load(open(sys.argv[1]));print(','.join(map(str,j['prompt_ids']+j['ids'][:-1])))" "$1"
}

# compare NAME DIR draft-run-args...: greedy run with a dump, then the reference
# (with --int8 among the args, against the reference's row-int8 weights)
compare() {
  name=$1 dir=$2
  shift 2
  q=""
  for x in "$@"; do [ "$x" = --int8 ] && q=--int8; done
  if ! "$DF_BIN" draft-run --model "$dir" "$@" --ignore-eos --json --dump-logits "$T/$name.f32" >"$T/$name.json"; then
    fail "$name: draft-run exited non-zero"
    return
  fi
  printf '%s: ' "$name"
  $PY "$REF" compare --model "$dir" --ids "$(fed_ids "$T/$name.json")" --c-logits "$T/$name.f32" $q ||
    fail "$name: logits differ from the float64 reference"
}

compare nano "$NANO" --prompt "Once upon a time, there was a little" --max-new 24
compare nano-chat "$NANO" --prompt "<|im_start|>user
What is 2+2?<|im_end|>
<|im_start|>assistant
" --max-new 16

$PY "$GEN" "$T/gen1" --seed 7 --untied --shards 3 --hidden 64 --layers 3 --heads 4 --kv-heads 2 \
  --head-dim 32 --inter 96 --vocab 300
compare gen-sharded-untied "$T/gen1" --prompt-ids 5,17,250,3,99,42,42,42,7,8,9,10,11,12 --max-new 60
$PY "$GEN" "$T/gen2" --seed 8 --rope-parameters --hidden 96 --layers 2 --heads 6 --kv-heads 3 \
  --head-dim 16 --inter 160 --vocab 500 --theta 10000
compare gen-tied-ropeparams "$T/gen2" --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20 \
  --max-new 40

# row-int8 weights: against the reference given the same codes and scales
compare nano-int8 "$NANO" --prompt "Once upon a time, there was a little" --max-new 24 --int8
compare gen-sharded-untied-int8 "$T/gen1" --prompt-ids 5,17,250,3,99,42,42,42,7,8,9,10,11,12 \
  --max-new 30 --int8
# and the int8 run is not the bf16 one (the flag took effect)
if cmp -s "$T/nano.f32" "$T/nano-int8.f32"; then fail "--int8 gave the bf16 logits"; fi

# nano-draft against transformers 5.17 (the committed fixture, made on the GPU machine)
FX="$DF_SRC/tests/fixtures/qwen3/qwen3_nano-draft.json"
ids=$($PY -c "import json,sys;print(','.join(map(str,json.load(open(sys.argv[1]))['ids'])))" "$FX")
"$DF_BIN" draft-run --model "$NANO" --prompt-ids "$ids" --max-new 1 --dump-logits "$T/fx.f32" >/dev/null
printf 'nano-draft vs the transformers fixture: '
$PY "$REF" check-fixture --model "$NANO" --fixture "$FX" --c-logits "$T/fx.f32" | tr '\n' ' '
$PY "$REF" check-fixture --model "$NANO" --fixture "$FX" --c-logits "$T/fx.f32" >/dev/null ||
  fail "nano-draft differs from the transformers fixture"
echo

# Determinism: the same bits for every prefill split, thread count and kernel table.
P="--prompt-ids $ids --max-new 6 --ignore-eos"
"$DF_BIN" draft-run --model "$NANO" $P --threads 1 --dump-logits "$T/d0.f32" >"$T/d0.out"
for v in "--chunk 1" "--chunk 3" "--chunk 7 --threads 3" "--threads 2" "--threads 4 --chunk 2" \
  "--kernels scalar"; do
  "$DF_BIN" draft-run --model "$NANO" $P $v --dump-logits "$T/d1.f32" >"$T/d1.out"
  if cmp -s "$T/d0.f32" "$T/d1.f32" && cmp -s "$T/d0.out" "$T/d1.out"; then
    echo "bit-identical logits with $v"
  else
    fail "logits with $v differ from one prefill call on one thread"
  fi
done

"$DF_BIN" draft-run --model "$NANO" $P --int8 --dump-logits "$T/q0.f32" >"$T/q0.out"
"$DF_BIN" draft-run --model "$NANO" $P --int8 --chunk 3 --threads 3 --dump-logits "$T/q1.f32" >"$T/q1.out"
if cmp -s "$T/q0.f32" "$T/q1.f32" && cmp -s "$T/q0.out" "$T/q1.out"; then
  echo "bit-identical int8 logits with --chunk 3 --threads 3"
else
  fail "int8 logits depend on the prefill split or threads"
fi

# Bad checkpoints: the error names the tensor or the field.
bad() { # bad NAME EXPECTED-SUBSTRING DIR
  if "$DF_BIN" draft-run --model "$3" --prompt-ids 1,2 --max-new 1 >/dev/null 2>"$T/err"; then
    fail "$1: accepted"
  elif grep -qF -- "$2" "$T/err"; then
    echo "$1: $(cat "$T/err")"
  else
    fail "$1: error does not name '$2': $(cat "$T/err")"
  fi
}
small="--hidden 32 --layers 2 --heads 2 --kv-heads 1 --head-dim 16 --inter 48 --vocab 64"
$PY "$GEN" "$T/b1" $small --drop model.layers.1.self_attn.k_norm.weight
bad "missing tensor" "tensor 'model.layers.1.self_attn.k_norm.weight' is missing" "$T/b1"
$PY "$GEN" "$T/b2" $small --bad-shape model.layers.0.mlp.down_proj.weight
bad "wrong shape" "tensor 'model.layers.0.mlp.down_proj.weight' has shape [48, 32] (expected [32, 48])" "$T/b2"
$PY "$GEN" "$T/b3" $small --f16 model.layers.0.self_attn.q_proj.weight
bad "wrong dtype" "tensor 'model.layers.0.self_attn.q_proj.weight' has dtype F16" "$T/b3"
$PY "$GEN" "$T/b4" $small --untied --drop lm_head.weight
bad "untied without lm_head" "tensor 'lm_head.weight' is missing" "$T/b4"
$PY "$GEN" "$T/b5" $small --bad-shape model.norm.weight
bad "norm shape" "tensor 'model.norm.weight' has shape [33] (expected [32])" "$T/b5"
edit_cfg() { # edit_cfg DIR PYTHON-STATEMENT-ON-c
  $PY -c "import json,sys;p=sys.argv[1]+'/config.json';c=json.load(open(p));$2;json.dump(c,open(p,'w'))" "$1"
}
cp -r "$T/b1" "$T/c1" && $PY "$GEN" "$T/c1" $small
edit_cfg "$T/c1" "del c['hidden_size']"
bad "config without hidden_size" "field 'hidden_size' is missing" "$T/c1"
$PY "$GEN" "$T/c2" $small && edit_cfg "$T/c2" "c['rope_scaling']={'rope_type':'yarn','factor':4.0}"
bad "yarn rope" "rope_type 'yarn' is not supported" "$T/c2"
$PY "$GEN" "$T/c3" $small && edit_cfg "$T/c3" "c['model_type']='qwen2'"
bad "model_type" "field 'model_type' must be \"qwen3\"" "$T/c3"
$PY "$GEN" "$T/c4" $small && edit_cfg "$T/c4" "c['num_attention_heads']=3;c['num_key_value_heads']=2"
bad "heads not a multiple" "'num_attention_heads' = 3 is not a multiple of 'num_key_value_heads'" "$T/c4"
$PY "$GEN" "$T/c7" $small && edit_cfg "$T/c7" "c['layer_types']=['full_attention','sliding_attention']"
bad "sliding layer" "layer_types[1] is not \"full_attention\"" "$T/c7"
$PY "$GEN" "$T/c5" $small && edit_cfg "$T/c5" "del c['rope_theta']"
bad "no rope_theta" "rope_theta" "$T/c5"
$PY "$GEN" "$T/c6" $small && edit_cfg "$T/c6" "c['max_position_embeddings']=4"
if "$DF_BIN" draft-run --model "$T/c6" --prompt-ids 1,2,3 --max-new 4 --ignore-eos >/dev/null 2>"$T/err"; then
  fail "running past max_position_embeddings was accepted"
else
  grep -q "exceed max_position_embeddings 4" "$T/err" || fail "past max_pos: $(cat "$T/err")"
fi
if "$DF_BIN" draft-run --model "$T/c6" --prompt-ids 64 --max-new 1 >/dev/null 2>"$T/err"; then
  fail "id 64 of a 64-id vocabulary was accepted"
else
  grep -q "id 64 at row 0 is outside the vocabulary" "$T/err" || fail "bad id: $(cat "$T/err")"
fi

if [ "$fails" -ne 0 ]; then
  echo "FAIL: $fails checks failed"
  exit 1
fi
echo "PASS"

#!/bin/sh
# Broken checkpoints fail at load: `deltafin run` exits non-zero with a
# message naming the tensor, the file or the config field. Each case breaks a
# fresh copy of a generated tiny model: a tensor removed (shard header and
# index), a wrong shape, a wrong dtype, a config contradicting the tensors, a
# truncated shard, an E8M0 scale of 255, a missing int8-spine tensor.
set -eu
BIN=${DF_BIN:?set DF_BIN}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" make-model --preset tiny --seed 11 --out "$tmp/good" >/dev/null 2>&1
"$BIN" run --model "$tmp/good" --prompt-ids 1,2,3 --max-new 2 >/dev/null || fail "good model fails"

# Rewrites one shard header (python3: the data bytes stay, the header is
# re-serialised; offsets are relative to the header end so they stay valid).
cat >"$tmp/edit.py" <<'EOF'
import json, struct, sys
path, op, name = sys.argv[1:4]
arg = sys.argv[4] if len(sys.argv) > 4 else None
with open(path, "rb") as f:
    data = f.read()
n = struct.unpack("<Q", data[:8])[0]
hdr = json.loads(data[8:8 + n])
body = data[8 + n:]
if op == "remove":
    del hdr[name]
elif op == "dtype":
    hdr[name]["dtype"] = arg
elif op == "shape":
    hdr[name]["shape"] = json.loads(arg)
elif op == "shrink":  # a shorter 1-D tensor: shape [k], data_offsets cut to match
    k = int(arg)
    es = {"F32": 4, "BF16": 2, "U8": 1}[hdr[name]["dtype"]]
    hdr[name]["shape"] = [k]
    hdr[name]["data_offsets"][1] = hdr[name]["data_offsets"][0] + k * es
elif op == "scale255":  # set the first byte of the tensor's data to 255
    b = hdr[name]["data_offsets"][0]
    body = body[:b] + b"\xff" + body[b + 1:]
h = json.dumps(hdr).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(path + ".new", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + body)
EOF

fresh() { rm -rf "$tmp/bad"; cp -r "$tmp/good" "$tmp/bad"; }
shard_of() { jq -r --arg n "$1" '.weight_map[$n]' "$tmp/bad/${2:-}model.safetensors.index.json"; }
edit() { # edit SUBDIR TENSOR OP [ARG]
  sub=$1; name=$2; op=$3; shift 3
  f="$tmp/bad/$sub$(shard_of "$name" "$sub")"
  /usr/bin/python3 "$tmp/edit.py" "$f" "$op" "$name" "$@"
  mv "$f.new" "$f"
  if [ "$op" = remove ]; then
    jq --arg n "$name" 'del(.weight_map[$n])' "$tmp/bad/${sub}model.safetensors.index.json" >"$tmp/idx"
    mv "$tmp/idx" "$tmp/bad/${sub}model.safetensors.index.json"
  fi
}
expect() { # expect WHAT-TEXT [run args...]
  want=$1; shift
  if "$BIN" run --model "$tmp/bad" --prompt-ids 1,2,3 --max-new 2 "$@" >/dev/null 2>"$tmp/err"; then
    fail "broken model ($want) ran"
  fi
  grep -qF -- "$want" "$tmp/err" || fail "message does not name '$want': $(cat "$tmp/err")"
  echo "ok: $(cat "$tmp/err")"
}
L=language_model.model.layers

fresh; edit "" $L.2.self_attn.q_proj.weight remove
expect "missing tensor $L.2.self_attn.q_proj.weight"

fresh; edit "" $L.1.block_sparse_moe.routed_expert_norm.weight remove
expect "missing tensor $L.1.block_sparse_moe.routed_expert_norm.weight"

fresh; edit "" $L.3.block_sparse_moe.experts.5.w2.weight_scale remove
expect "$L.3.block_sparse_moe.experts.5.w2.weight_scale"

fresh; edit "" $L.1.self_attn.f_a_proj.weight shape '[64, 16]'
expect "$L.1.self_attn.f_a_proj.weight: shape [64, 16], expected [16, 64]"

fresh; edit "" $L.0.input_layernorm.weight dtype F16
expect "$L.0.input_layernorm.weight: dtype F16, expected BF16"

fresh; edit "" $L.0.self_attn.dt_bias dtype I32
expect "$L.0.self_attn.dt_bias: dtype I32, expected F32"

fresh; edit "" $L.0.self_attn.A_log shrink 2
expect "$L.0.self_attn.A_log: 2 values, fewer than linear_attn_config num_heads 4"

# config contradicting the tensors: the message names the tensor and the field
fresh
jq '.text_config.linear_attn_config.num_heads = 2' "$tmp/good/config.json" >"$tmp/bad/config.json"
expect "num_heads"
grep -qF "$L.0.self_attn.q_proj.weight" "$tmp/err" || fail "no tensor named: $(cat "$tmp/err")"
fresh
jq '.text_config.moe_intermediate_size = 32' "$tmp/good/config.json" >"$tmp/bad/config.json"
expect "moe_intermediate_size"
fresh
jq '.text_config.hidden_size = 32' "$tmp/good/config.json" >"$tmp/bad/config.json"
expect "hidden_size"

# truncated shard: the reader names the file
fresh
last=$(ls "$tmp/bad"/model-*.safetensors | tail -n 1)
size=$(stat -c %s "$last")
truncate -s $((size - 100)) "$last"
expect "$(basename "$last")"

# an E8M0 scale byte of 255 (NaN)
fresh; edit "" $L.2.block_sparse_moe.experts.7.w1.weight_scale scale255
expect "$L.2.block_sparse_moe.experts.7.w1.weight_scale"

# int8 spine: a tensor missing from the converted copy
fresh
"$BIN" convert-spine --model "$tmp/bad" 2>/dev/null
"$BIN" run --model "$tmp/bad" --prompt-ids 1,2,3 --max-new 2 --spine int8 >/dev/null || fail "int8 run"
edit spine-int8/ $L.4.self_attn.o_proj.weight.scale remove
expect "spine-int8: missing tensor $L.4.self_attn.o_proj.weight.scale" --spine int8
grep -q "convert-spine" "$tmp/err" || fail "no convert-spine hint: $(cat "$tmp/err")"
echo "all broken checkpoints rejected"

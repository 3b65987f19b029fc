#!/usr/bin/python3
"""Writes a random Qwen3 checkpoint in the layout of the published releases:
config.json with the fields transformers writes for Qwen3ForCausalLM, bf16
safetensors with the Hugging Face tensor names, one file or sharded with
model.safetensors.index.json. Seeded: the same arguments give the same bytes.

usage: gen_qwen3.py OUT_DIR [--seed N] [--hidden 64] [--layers 3] [--heads 4]
         [--kv-heads 2] [--head-dim 32] [--inter 96] [--vocab 300] [--untied]
         [--shards N] [--theta 1e6] [--rope-parameters] [--max-pos 512]
         [--std 0.08] [--qwen3-0.6b] [--drop NAME] [--bad-shape NAME] [--f16 NAME]
--qwen3-0.6b sets the real Qwen3-0.6B dimensions (hidden 1024, 28 layers,
16 q heads, 8 kv heads, head_dim 128, intermediate 3072, vocab 151936, tied,
rope_theta 1e6).
--rope-parameters writes rope_theta inside rope_parameters (transformers 5.x)
instead of at the top level (4.x, as the Qwen3 releases have it).
--drop / --bad-shape / --f16 write a broken checkpoint for the loader's error
tests: NAME left out, declared with its dimensions swapped, or stored as F16."""
import argparse
import json
import os
import struct

import numpy as np


def to_bf16(a):
    """float32 -> bf16 bits, round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


BROKEN = {"drop": set(), "bad_shape": set(), "f16": set()}


def write_st(path, tensors):
    hdr, off = {}, 0
    tensors[:] = [(n, a) for n, a in tensors if n not in BROKEN["drop"]]
    for name, arr in tensors:
        n = arr.nbytes
        shape = list(arr.shape)
        if name in BROKEN["bad_shape"]:
            shape = shape[::-1] if len(shape) == 2 else [shape[0] + 1]
            if len(arr.shape) == 1:
                n += 2
        hdr[name] = {"dtype": "F16" if name in BROKEN["f16"] else "BF16", "shape": shape,
                     "data_offsets": [off, off + n]}
        off += n
    hdr["__metadata__"] = {"format": "pt"}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, arr in tensors:
            f.write(arr.tobytes())
            if name in BROKEN["bad_shape"] and arr.ndim == 1:
                f.write(b"\0\0")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--inter", type=int, default=96)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--untied", action="store_true")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--theta", type=float, default=1e6)
    ap.add_argument("--rope-parameters", action="store_true")
    ap.add_argument("--max-pos", type=int, default=512)
    ap.add_argument("--std", type=float, default=0.08)
    ap.add_argument("--qwen3-0.6b", dest="q06", action="store_true")
    ap.add_argument("--drop", action="append", default=[])
    ap.add_argument("--bad-shape", action="append", default=[])
    ap.add_argument("--f16", action="append", default=[])
    a = ap.parse_args()
    BROKEN["drop"], BROKEN["bad_shape"], BROKEN["f16"] = set(a.drop), set(a.bad_shape), set(a.f16)
    if a.q06:
        a.hidden, a.layers, a.heads, a.kv_heads, a.head_dim = 1024, 28, 16, 8, 128
        a.inter, a.vocab, a.untied, a.theta, a.max_pos = 3072, 151936, False, 1e6, 40960
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    H, D, I, V = a.hidden, a.head_dim, a.inter, a.vocab

    def mat(r, c, std=a.std):
        return to_bf16(rng.standard_normal((r, c), dtype=np.float32) * np.float32(std))

    def norm(n):
        return to_bf16(1.0 + 0.2 * rng.standard_normal(n, dtype=np.float32))

    tensors = [("model.embed_tokens.weight", mat(V, H, 1.0))]
    for i in range(a.layers):
        p = "model.layers.%d." % i
        tensors += [
            (p + "input_layernorm.weight", norm(H)),
            (p + "self_attn.q_proj.weight", mat(a.heads * D, H)),
            (p + "self_attn.k_proj.weight", mat(a.kv_heads * D, H)),
            (p + "self_attn.v_proj.weight", mat(a.kv_heads * D, H)),
            (p + "self_attn.o_proj.weight", mat(H, a.heads * D)),
            (p + "self_attn.q_norm.weight", norm(D)),
            (p + "self_attn.k_norm.weight", norm(D)),
            (p + "post_attention_layernorm.weight", norm(H)),
            (p + "mlp.gate_proj.weight", mat(I, H)),
            (p + "mlp.up_proj.weight", mat(I, H)),
            (p + "mlp.down_proj.weight", mat(H, I)),
        ]
    tensors.append(("model.norm.weight", norm(H)))
    if a.untied:
        tensors.append(("lm_head.weight", mat(V, H)))
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "head_dim": D,
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "max_position_embeddings": a.max_pos,
        "max_window_layers": a.layers,
        "model_type": "qwen3",
        "num_attention_heads": a.heads,
        "num_hidden_layers": a.layers,
        "num_key_value_heads": a.kv_heads,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": a.theta,
        "sliding_window": None,
        "tie_word_embeddings": not a.untied,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": V,
    }
    if a.rope_parameters:
        del cfg["rope_theta"], cfg["rope_scaling"]
        cfg["rope_parameters"] = {"rope_theta": a.theta, "rope_type": "default"}
        cfg["dtype"] = cfg.pop("torch_dtype")
    with open(os.path.join(a.out, "config.json.tmp"), "w") as f:
        json.dump(cfg, f, indent=2)
    os.replace(os.path.join(a.out, "config.json.tmp"), os.path.join(a.out, "config.json"))
    if a.shards <= 1:
        write_st(os.path.join(a.out, "model.safetensors"), tensors)
        return
    per = -(-len(tensors) // a.shards)
    wm, total = {}, 0
    for s in range(a.shards):
        part = tensors[s * per:(s + 1) * per]
        name = "model-%05d-of-%05d.safetensors" % (s + 1, a.shards)
        write_st(os.path.join(a.out, name), part)
        for n, arr in part:
            if n in BROKEN["drop"]:
                continue
            wm[n] = name
            total += arr.nbytes
    idx = {"metadata": {"total_size": total}, "weight_map": wm}
    with open(os.path.join(a.out, "model.safetensors.index.json.tmp"), "w") as f:
        json.dump(idx, f, indent=2)
    os.replace(os.path.join(a.out, "model.safetensors.index.json.tmp"),
               os.path.join(a.out, "model.safetensors.index.json"))


if __name__ == "__main__":
    main()

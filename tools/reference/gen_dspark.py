#!/usr/bin/python3
"""A random DSpark checkpoint in the published layout (config.json + model.safetensors, bf16 with
the confidence bias F32), for a given target's dims: the Python side's own generator, independent
of `deltafin make-model --preset dspark` (the goldens can be made on either's output).

  gen_dspark.py --target models/nano-k3 --seed 1 --out DIR [--layers 2] [--taps 1,3,4,6,7]

Weights are drawn so that every part moves the result: matrices N(0, 1/in) (so activations keep
their scale through each projection), norm weights 1 + N(0, 0.1^2), the Markov head at the same
scale as the rest, the confidence bias N(0, 1). Written with dspark_ref.save (temp dir, renamed).
"""
import argparse
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dspark_ref as D  # noqa: E402
import k3_ref as K  # noqa: E402


def config_for(tc, layers, taps, mask_id):
    j = D.nano_config()
    j.update({"hidden_size": tc.hidden, "target_hidden_size": tc.hidden, "vocab_size": tc.vocab,
              "target_num_hidden_layers": tc.n_layers, "num_hidden_layers": layers,
              "num_attention_heads": tc.mla_heads, "q_lora_rank": tc.tc["q_lora_rank"],
              "kv_lora_rank": tc.kv_lora, "qk_nope_head_dim": tc.nope, "qk_rope_head_dim": tc.rope,
              "v_head_dim": tc.vdim, "rms_norm_eps": tc.eps, "target_layer_ids": list(taps),
              "mask_token_id": mask_id, "intermediate_size": 2 * tc.hidden})
    return j


def random_weights(c, seed):
    g = torch.Generator().manual_seed(seed)
    W = {}
    for name, (shape, _) in sorted(D.tensor_shapes(c).items()):
        if len(shape) == 2:
            W[name] = torch.randn(*shape, generator=g, dtype=torch.float64) / math.sqrt(shape[1])
        elif name.endswith("confidence_head.bias"):
            W[name] = torch.randn(*shape, generator=g, dtype=torch.float64)
        else:
            W[name] = 1.0 + 0.1 * torch.randn(*shape, generator=g, dtype=torch.float64)
    return W


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--taps", help="comma-separated 0-based target layers (default: spread over the target)")
    ap.add_argument("--mask-id", type=int, help="default: the target's vocab - 248 (nano-K3: 3848)")
    a = ap.parse_args()
    tc = K.Config(a.target)
    if a.taps:
        taps = [int(x) for x in a.taps.split(",")]
    elif tc.n_layers == 8:
        taps = [1, 3, 4, 6, 7]
    else:
        taps = sorted({round(i * (tc.n_layers - 1) / 4) for i in range(5)})
    j = config_for(tc, a.layers, taps, a.mask_id if a.mask_id is not None else tc.vocab - 248)
    c = D.DConfig(j, tc)
    D.save(a.out, j, random_weights(c, a.seed))
    print(f"wrote {a.out}: {len(D.tensor_shapes(c))} tensors, taps {taps}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Trains nano-K3: Kimi K3's architecture at small dimensions, on the corpus of corpus.py.

The blocks are tools/reference/k3_ref.py's functions (kda_block, mla_block,
situ_ffn, router_scores, route_weights, expert_ffn, moe_out, forward_layers),
called on batched float32 tensors, so what is trained is what the reference
computes. Two things differ only in how they are computed, not in what:
  - the KDA recurrence is the same sequential delta rule written with matmuls
    (checked against k3_ref.kda_recurrence by --selftest);
  - the routed experts run densely (every expert on every token, weighted by
    the renormalised top-k weights, zero elsewhere), which equals the sparse sum.
The router's correction bias is not trained by gradient: after every step it
moves by --bias-rate towards balance (up for experts that got fewer than the
mean number of tokens, down for those that got more), DeepSeek-V3 / K3's
auxiliary-loss-free balancing. The last --qat fraction of the steps sees the
routed experts through MXFP4 fake quantisation (straight-through), and the
export quantises them with the same function.

  train_k3.py --tokens train.u16 --heldout heldout.u16 --tokenizer DIR --out DIR \\
      --minutes 7 [--device cuda] [--seed 1]
  train_k3.py --selftest        (CPU: recurrence equivalence, export round trip)
  train_k3.py --init-only --tokenizer DIR --out DIR   (the untrained model, same layout)

Writes DIR (the release layout: config.json, generation_config.json,
tokenizer_config.json, tiktoken.model, model.safetensors.index.json, shards)
and DIR/../train_k3.log.jsonl (one JSON record per logged step). The model is
exported every --export-every minutes too, so a run cut short leaves a model.
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import k3_ref as R  # noqa: E402

torch.set_default_dtype(torch.float32)  # k3_ref sets float64 for its own use

# ---------------------------------------------------------------- the nano-K3 config (release spellings)

N_RANKS = 3840  # tiktoken ranks; 256 specials follow


def nano_config(n_ranks=N_RANKS):
    L = 8
    full = [4, 8]  # MLA every 4th layer and the last (1-based), as K3's 4, 8, ..., 92, 93
    text = {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "dtype": "bfloat16",
        "vocab_size": n_ranks + 256,
        "hidden_size": 256,
        "num_hidden_layers": L,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 4096,
        "bos_token_id": n_ranks, "eos_token_id": n_ranks + 2, "pad_token_id": n_ranks + 255,
        "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
        "attn_res_block_size": 3,
        "linear_attn_config": {
            "full_attn_layers": full,
            "kda_layers": [i for i in range(1, L + 1) if i not in full],
            "num_heads": 4, "head_dim": 32, "short_conv_kernel_size": 4,
            "gate_lower_bound": -5.0, "use_full_rank_gate": True,
        },
        "num_attention_heads": 4, "num_key_value_heads": 4,
        "q_lora_rank": 128, "kv_lora_rank": 64,
        "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
        "mla_use_nope": True, "mla_use_output_gate": True,
        "first_k_dense_replace": 1, "intermediate_size": 512, "moe_layer_freq": 1,
        "num_experts": 32, "num_experts_per_token": 4, "num_shared_experts": 2,
        "moe_intermediate_size": 96, "routed_expert_hidden_size": 128, "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid", "topk_method": "noaux_tc", "use_grouped_topk": True,
        "num_expert_group": 1, "topk_group": 1, "moe_renormalize": True, "routed_scaling_factor": 1.0,
        "num_nextn_predict_layers": 0, "tie_word_embeddings": False,
        "quantization_config": {
            "quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
            "ignore": ["re:.*shared_experts.*", "lm_head"],
            "config_groups": {"group_0": {"format": "mxfp4-pack-quantized", "targets": ["Linear"],
                                          "input_activations": None,
                                          "weights": {"num_bits": 4, "group_size": 32, "type": "float",
                                                      "strategy": "group", "symmetric": True}}},
        },
    }
    return {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "model_type": "kimi_k3",
        "bos_token_id": n_ranks, "eos_token_id": n_ranks + 2, "pad_token_id": n_ranks + 255,
        "media_placeholder_token_id": n_ranks + 21,
        "tie_word_embeddings": False,
        "text_config": text,
        "vision_config": {"patch_size": 14, "vt_hidden_size": 32},
    }


def write_json(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)


def cfg_from(root, tmpdir):
    os.makedirs(tmpdir, exist_ok=True)
    write_json(os.path.join(tmpdir, "config.json"), root)
    return R.Config(tmpdir)


# ---------------------------------------------------------------- parameters

F32_NAMES = ("conv1d.weight", "A_log", "dt_bias", "o_norm.weight", "e_score_correction_bias")


def init_params(c, gen):
    """name (without the language_model.model. prefix) -> tensor; experts stacked per layer."""
    H, V = c.hidden, c.vocab
    std = 0.02
    out_std = 0.02 / math.sqrt(2 * c.n_layers)
    P = {}

    def n(name, *shape, s=std):
        P[name] = torch.randn(*shape, generator=gen) * s

    def ones(name, k):
        P[name] = torch.ones(k)

    n("embed_tokens.weight", V, H, s=1.0)
    n("language_model.lm_head.weight", V, H)
    ones("norm.weight", H)
    ones("output_attn_res_norm.weight", H)
    P["output_attn_res_proj.weight"] = torch.zeros(1, H)
    for l in range(c.n_layers):
        b = f"layers.{l}."
        for nm in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"):
            ones(b + nm + ".weight", H)
        P[b + "self_attention_res_proj.weight"] = torch.zeros(1, H)
        P[b + "mlp_res_proj.weight"] = torch.zeros(1, H)
        a = b + "self_attn."
        if c.kind[l] == "kda":
            NH, D = c.kda_heads, c.kda_dim
            Pd = NH * D
            for p in ("q", "k", "v", "g"):
                n(a + p + "_proj.weight", Pd, H)
            n(a + "o_proj.weight", H, Pd, s=out_std)
            n(a + "f_a_proj.weight", D, H)
            n(a + "f_b_proj.weight", Pd, D)
            n(a + "b_proj.weight", NH, H)
            for p in ("q", "k", "v"):
                P[a + p + "_conv1d.weight"] = (torch.rand(Pd, 1, c.kda_conv, generator=gen) - 0.5)
            P[a + "A_log"] = torch.zeros(max(NH, D))
            # dt_bias spreads the initial decays over ~0.26..0.99 per step
            P[a + "dt_bias"] = -1.0 - 5.0 * torch.rand(Pd, generator=gen)
            ones(a + "o_norm.weight", D)
        else:
            Hh, NO, RO, VD, KL = c.mla_heads, c.nope, c.rope, c.vdim, c.kv_lora
            QL = json_get(c, "q_lora_rank")
            n(a + "q_a_proj.weight", QL, H)
            ones(a + "q_a_layernorm.weight", QL)
            n(a + "q_b_proj.weight", Hh * (NO + RO), QL)
            n(a + "kv_a_proj_with_mqa.weight", KL + RO, H)
            ones(a + "kv_a_layernorm.weight", KL)
            n(a + "kv_b_proj.weight", Hh * (NO + VD), KL)
            n(a + "g_proj.weight", Hh * VD, H)
            n(a + "o_proj.weight", H, Hh * VD, s=out_std)
        if l < c.first_dense:
            I = json_get(c, "intermediate_size")
            n(b + "mlp.gate_proj.weight", I, H)
            n(b + "mlp.up_proj.weight", I, H)
            n(b + "mlp.down_proj.weight", H, I, s=out_std)
        else:
            m = b + "block_sparse_moe."
            E, M, Lt = c.n_experts, json_get(c, "moe_intermediate_size"), json_get(c, "routed_expert_hidden_size")
            S = json_get(c, "num_shared_experts") * M
            n(m + "gate.weight", E, H)
            P[m + "gate.e_score_correction_bias"] = torch.zeros(E)
            n(m + "routed_expert_down_proj.weight", Lt, H)
            ones(m + "routed_expert_norm.weight", Lt)
            n(m + "routed_expert_up_proj.weight", H, Lt, s=out_std)
            n(m + "shared_experts.gate_proj.weight", S, H)
            n(m + "shared_experts.up_proj.weight", S, H)
            n(m + "shared_experts.down_proj.weight", H, S, s=out_std)
            n(m + "experts.w1", E, M, Lt, s=0.06)
            n(m + "experts.w3", E, M, Lt, s=0.06)
            n(m + "experts.w2", E, Lt, M, s=0.06)
    return P


def json_get(c, key):
    return c.tc[key]


# ---------------------------------------------------------------- MXFP4

E2M1_POS = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def mxfp4_quant(w, group=32):
    """w [..., rows, cols] -> (codes u8 [..., rows, cols], E8M0 exps u8 [..., rows, cols/group], dequantised).
    Scale 2^ceil(log2(amax/6)) per group of 32 columns (no value clips); nearest E2M1 value, ties to the
    even code."""
    sh = w.shape
    g = w.reshape(*sh[:-1], sh[-1] // group, group)
    amax = g.abs().amax(-1, keepdim=True)
    e = torch.ceil(torch.log2(torch.clamp(amax, min=2.0 ** -120) / 6.0))
    e = torch.clamp(e, -127, 127)
    e = torch.where(amax > 0, e, torch.full_like(e, -127))
    x = (g / torch.exp2(e)).abs()
    grid = E2M1_POS.to(w.device, w.dtype)
    d = (x.unsqueeze(-1) - grid).abs()  # [..., group, 8]
    idx = d.argmin(-1)  # first minimum = lower code on a tie
    mag = grid[idx]
    sign = (g < 0) & (idx > 0)
    codes = idx + 8 * sign.long()
    deq = torch.where(g < 0, -mag, mag) * torch.exp2(e)
    return (codes.reshape(sh).to(torch.uint8), (e.squeeze(-1) + 127).to(torch.uint8), deq.reshape(sh))


def fake_quant(w):
    return w + (mxfp4_quant(w.detach())[2] - w).detach()


# ---------------------------------------------------------------- the model on batches

def kda_matmul(q, k, v, alpha, beta):
    """k3_ref.kda_recurrence with matmuls (same recurrence, read after update)."""
    T = q.shape[-3]
    S = q.new_zeros(*q.shape[:-3], q.shape[-2], q.shape[-1], v.shape[-1])
    bv = beta.unsqueeze(-1) * v
    outs = []
    for t in range(T):
        S = alpha[..., t, :, :].unsqueeze(-1) * S
        kt = k[..., t, :, :].unsqueeze(-2)  # [..., NH, 1, D]
        u = kt @ S  # [..., NH, 1, Dv]
        d = bv[..., t, :, :].unsqueeze(-2) - beta[..., t, :, None, None] * u
        S = S + kt.transpose(-1, -2) @ d
        outs.append((q[..., t, :, :].unsqueeze(-2) @ S).squeeze(-2))
    return torch.stack(outs, -3)


class Nano:
    def __init__(self, c, P):
        self.c = c
        self.P = P
        self.qat = False
        self.loads = {}  # layer -> tokens per expert of the last forward

    def LW(self, l, n):
        return self.P[f"layers.{l}.{n}"]

    def GW(self, n):
        return self.P[n]

    def moe(self, l, x):
        c = self.c
        L = lambda n: self.LW(l, n)
        s = R.router_scores(L, x)  # [..., E]
        b = L("block_sparse_moe.gate.e_score_correction_bias")
        ids = torch.topk(s.detach() + b, c.top_k, dim=-1).indices
        w = R.route_weights(c, s, ids)
        with torch.no_grad():
            self.loads[l] = torch.bincount(ids.reshape(-1), minlength=c.n_experts)
        dense_w = torch.zeros_like(s).scatter(-1, ids, w)  # [..., E]
        z = x @ L("block_sparse_moe.routed_expert_down_proj.weight").T  # [..., Lt]
        q = fake_quant if self.qat else (lambda t: t)
        w1, w2, w3 = (q(L(f"block_sparse_moe.experts.w{i}")) for i in (1, 2, 3))
        # every expert on every token: [..., E, M] then [..., E, Lt], weighted and summed over E
        h = R.situ(torch.einsum("...l,eml->...em", z, w1), torch.einsum("...l,eml->...em", z, w3),
                   c.situ_beta, c.situ_lin)
        y = torch.einsum("...em,elm->...el", h, w2)
        r = (dense_w.unsqueeze(-1) * y).sum(-2)
        return R.moe_out(c, L, x, r)

    def forward(self, ids):
        c = self.c
        h = self.P["embed_tokens.weight"][ids]
        return R.forward_layers(
            c, self.LW, self.GW, h,
            lambda l, x: (R.kda_block(c, lambda n: self.LW(l, n), x, kda_matmul) if c.kind[l] == "kda"
                          else R.mla_block(c, lambda n: self.LW(l, n), x)),
            lambda l, x: (R.situ_ffn(c, lambda n: self.LW(l, n), "mlp.", x) if l < c.first_dense
                          else self.moe(l, x)))


# ---------------------------------------------------------------- export (release layout)

PM = "language_model.model."


def st_write(path, tensors):
    """tensors: list of (name, dtype str, shape, bytes), written in that order (offsets ascending)."""
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, shape, data in tensors:
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    hj = json.dumps(hdr, separators=(",", ":")).encode()
    hj += b" " * ((8 - (8 + len(hj)) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for t in tensors:
            f.write(t[3])
    os.replace(path + ".tmp", path)


def tbytes(t, dt):
    t = t.detach().to("cpu").contiguous()
    if dt == "BF16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    if dt == "F32":
        return t.to(torch.float32).numpy().astype("<f4").tobytes()
    if dt == "U8":
        return t.to(torch.uint8).numpy().tobytes()
    raise ValueError(dt)


def export(c, root_cfg, P, tokdir, out):
    """Writes the model directory `out` atomically (a temporary directory, renamed at the end)."""
    tmp = out.rstrip("/") + ".part"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    spine, experts = [], []
    for name, t in P.items():
        if ".experts.w" in name:
            continue
        full = name if name.startswith("language_model.") else PM + name
        dt = "F32" if name.endswith(F32_NAMES) else "BF16"
        spine.append((full, dt, tuple(t.shape), tbytes(t, dt)))
    for l in range(c.first_dense, c.n_layers):
        layer = []
        qs = {i: mxfp4_quant(P[f"layers.{l}.block_sparse_moe.experts.w{i}"].detach()) for i in (1, 2, 3)}
        for e in range(c.n_experts):
            base = f"{PM}layers.{l}.block_sparse_moe.experts.{e}."
            for i in (1, 2, 3):
                codes, sc, _ = qs[i]
                cd = codes[e]
                packed = (cd[:, 0::2] | (cd[:, 1::2] << 4)).to(torch.uint8)
                layer.append((base + f"w{i}.weight_packed", "U8", tuple(packed.shape), tbytes(packed, "U8")))
                layer.append((base + f"w{i}.weight_scale", "U8", tuple(sc[e].shape), tbytes(sc[e], "U8")))
        experts.append(layer)
    # a few vision / projector tensors, as the release has (a text engine ignores them)
    g = torch.Generator().manual_seed(7)
    spine.append(("vision_tower.patch_embed.proj.weight", "BF16", (32, 3, 2, 2),
                  tbytes(torch.randn(32, 3, 2, 2, generator=g) * 0.02, "BF16")))
    spine.append(("mm_projector.proj.0.weight", "BF16", (c.hidden, 32),
                  tbytes(torch.randn(c.hidden, 32, generator=g) * 0.02, "BF16")))
    # shard 1: the spine; then the experts, layers split over two shards
    half = (len(experts) + 1) // 2
    shards = [spine, [t for lay in experts[:half] for t in lay], [t for lay in experts[half:] for t in lay]]
    n = len(shards)
    wmap, total = {}, 0
    for i, ts in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{n:06d}.safetensors"
        st_write(os.path.join(tmp, fn), ts)
        for t in ts:
            wmap[t[0]] = fn
            total += len(t[3])
    write_json(os.path.join(tmp, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(wmap.items()))})
    tc = root_cfg["text_config"]
    write_json(os.path.join(tmp, "generation_config.json"),
               {"bos_token_id": tc["bos_token_id"], "eos_token_id": tc["eos_token_id"],
                "pad_token_id": tc["pad_token_id"]})
    for f in ("tiktoken.model", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokdir, f), os.path.join(tmp, f))
    write_json(os.path.join(tmp, "config.json"), root_cfg)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.replace(tmp, out)


# ---------------------------------------------------------------- training

def load_u16(path):
    return torch.from_numpy(np.fromfile(path, dtype="<u2").astype(np.int64))


def lr_at(step, total, peak, warm):
    if step < warm:
        return peak * (step + 1) / warm
    p = min(1.0, (step - warm) / max(1, total - warm))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


@torch.no_grad()
def heldout_loss(net, held, T, B, dev, max_windows=64):
    n = min(max_windows, (len(held) - 1) // T)
    tot, cnt = 0.0, 0
    for i in range(0, n, B):
        idx = torch.arange(i, min(n, i + B)) * T
        x = torch.stack([held[j:j + T] for j in idx]).to(dev)
        y = torch.stack([held[j + 1:j + T + 1] for j in idx]).to(dev)
        lg = net.forward(x)
        tot += float(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1),
                                                       reduction="sum"))
        cnt += y.numel()
    return tot / max(1, cnt)


@torch.no_grad()
def greedy_text(net, prompt_ids, n, dev):
    seq = list(prompt_ids)
    for _ in range(n):
        lg = net.forward(torch.tensor([seq], device=dev))
        seq.append(int(lg[0, -1].argmax()))
    return seq[len(prompt_ids):]


def train(a):
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    root = nano_config()
    c = cfg_from(root, os.path.join(a.work, "cfg"))
    gen = torch.Generator().manual_seed(a.seed)
    P = {k: v.to(dev) for k, v in init_params(c, gen).items()}
    bias_names = {k for k in P if k.endswith("e_score_correction_bias")}
    for k, v in P.items():
        v.requires_grad_(k not in bias_names)
    decay = [v for k, v in P.items() if v.ndim >= 2 and "res_proj" not in k and k not in bias_names]
    nodecay = [v for k, v in P.items() if not (v.ndim >= 2 and "res_proj" not in k) and k not in bias_names]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    net = Nano(c, P)
    data = load_u16(a.tokens)
    held = load_u16(a.heldout)
    log = open(a.log, "w")
    T, B = a.seq, a.batch
    t0 = time.time()
    budget = a.minutes * 60.0
    total = a.steps if a.steps else None
    step, last_export = 0, t0
    dgen = torch.Generator().manual_seed(a.seed + 1)
    qat_from = None
    best = None
    while True:
        if total is None and step == 20:
            per = (time.time() - t0) / 20
            total = max(40, int(budget * 0.93 / per))  # leave room for evaluation and export
            print(f"step time {per:.3f}s -> {total} steps", flush=True)
        cur_total = total or 10 ** 9
        if step >= cur_total:
            break
        if qat_from is None and total is not None:
            qat_from = int(total * (1 - a.qat))
        net.qat = qat_from is not None and step >= qat_from
        lr = lr_at(step, cur_total, a.lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        st = torch.randint(0, len(data) - T - 1, (B,), generator=dgen)
        x = torch.stack([data[s:s + T] for s in st]).to(dev, non_blocking=True)
        y = torch.stack([data[s + 1:s + T + 1] for s in st]).to(dev, non_blocking=True)
        try:
            lg = net.forward(x)
            loss = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
        except torch.cuda.OutOfMemoryError:
            if step > 2 or B <= 8:
                raise
            lg = loss = None
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            B //= 2
            print(f"out of memory: batch {B}", flush=True)
            t0 = time.time()
            continue
        gn = torch.nn.utils.clip_grad_norm_([v for v in P.values() if v.requires_grad], a.clip)
        opt.step()
        with torch.no_grad():  # aux-loss-free balancing of the router's correction bias
            for l, cnt in net.loads.items():
                b = P[f"layers.{l}.block_sparse_moe.gate.e_score_correction_bias"]
                b += a.bias_rate * torch.sign(cnt.float().mean() - cnt.float())
        step += 1
        if step % a.log_every == 0 or step == 1 or step == cur_total:
            rec = {"step": step, "time_s": round(time.time() - t0, 2), "loss": round(float(loss.detach()), 4),
                   "lr": lr, "grad_norm": round(float(gn), 3), "qat": net.qat}
            imb = []
            for l, cnt in sorted(net.loads.items()):
                cf = cnt.float()
                imb.append(round(float(cf.max() / cf.mean()), 2))
            rec["max_load_over_mean"] = imb
            if step % a.eval_every == 0 or step == cur_total:
                hl = heldout_loss(net, held, T, B, dev)
                rec["heldout_loss"] = round(hl, 4)
                if best is None or hl < best[0]:  # keep the best held-out state (a small model overfits)
                    best = (hl, step, {k: v.detach().clone() for k, v in P.items()})
            print(json.dumps(rec), flush=True)
            log.write(json.dumps(rec) + "\n")
            log.flush()
        if a.export_every and time.time() - last_export > a.export_every * 60:
            export(c, root, P, a.tokenizer, a.out)
            last_export = time.time()
    if best is not None and best[1] != step:
        with torch.no_grad():
            for k, v in best[2].items():
                P[k].copy_(v)
    net.qat = True
    final = {"step": step, "kept_step": best[1] if best else step, "time_s": round(time.time() - t0, 2),
             "final": True,
             "heldout_loss_mxfp4": round(heldout_loss(net, held, T, B, dev, 256), 4)}
    net.qat = False
    final["heldout_loss_f32_experts"] = round(heldout_loss(net, held, T, B, dev, 256), 4)
    final["sample_ids"] = greedy_text(net, held[:32].tolist(), 24, dev)
    print(json.dumps(final), flush=True)
    log.write(json.dumps(final) + "\n")
    log.close()
    export(c, root, P, a.tokenizer, a.out)


# ---------------------------------------------------------------- self-test (CPU)

def selftest():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    B, T, NH, D = 2, 7, 3, 8
    q = R.l2n(torch.randn(B, T, NH, D, generator=g, dtype=torch.float64)) / math.sqrt(D)
    k = R.l2n(torch.randn(B, T, NH, D, generator=g, dtype=torch.float64))
    v = torch.randn(B, T, NH, D, generator=g, dtype=torch.float64)
    al = torch.rand(B, T, NH, D, generator=g, dtype=torch.float64)
    be = torch.rand(B, T, NH, generator=g, dtype=torch.float64)
    d = float((kda_matmul(q, k, v, al, be) - R.kda_recurrence(q, k, v, al, be)).abs().max())
    print(f"kda_matmul vs k3_ref.kda_recurrence: max diff {d:.1e}")
    assert d < 1e-12
    # batched reference blocks == per-sequence reference blocks
    w = torch.randn(64, 96, generator=g)
    codes, sc, deq = mxfp4_quant(w)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).numpy()
    ref = R.mxfp4_dequant(packed, sc.numpy()).float()
    assert torch.equal(ref, deq), "MXFP4: our dequantised values differ from k3_ref's decoder"
    err = float((deq - w).abs().max() / w.abs().max())
    print(f"mxfp4 quantise -> k3_ref decode: exact; max rel error {err:.3f}")
    # the exported directory, read by k3_ref.Model, computes what the trainer computes (float64, on the
    # bf16-rounded spine and the MXFP4 experts)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = nano_config()
        c = cfg_from(root, os.path.join(tmp, "cfg"))
        P = init_params(c, torch.Generator().manual_seed(3))
        tok = os.path.join(tmp, "tok")
        os.makedirs(tok)
        for f in ("tiktoken.model", "tokenizer_config.json"):
            open(os.path.join(tok, f), "w").close()
        export(c, root, P, tok, os.path.join(tmp, "m"))
        Q = {}
        for k2, t in P.items():
            if ".experts.w" in k2:
                Q[k2] = mxfp4_quant(t)[2].double()
            elif k2.endswith(F32_NAMES):
                Q[k2] = t.double()
            else:
                Q[k2] = t.to(torch.bfloat16).double()
        c64 = R.Config(os.path.join(tmp, "m"))
        ids = [5, 17, 300, 2, 99, 1000, 7, 7, 64, 3000]
        mine = Nano(c64, Q).forward(torch.tensor([ids]))[0]
        ref, _ = R.Model(os.path.join(tmp, "m")).forward(ids)
        d = float((mine - ref).abs().max() / ref.abs().max())
        print(f"trainer forward vs k3_ref.Model on the export: max rel diff {d:.1e}")
        assert d < 1e-9, d
    print("selftest ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--init-only", action="store_true",
                    help="export the untrained (initialised) model: the random baseline of the eval test")
    ap.add_argument("--tokens")
    ap.add_argument("--heldout")
    ap.add_argument("--tokenizer", help="directory with tiktoken.model and tokenizer_config.json")
    ap.add_argument("--out")
    ap.add_argument("--work", default="/tmp/nano-k3-work")
    ap.add_argument("--log")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=7.0)
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (0: fit --minutes)")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=384)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--qat", type=float, default=0.1, help="fraction of the steps with MXFP4 experts")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--export-every", type=float, default=2.0, help="minutes (0: only at the end)")
    a = ap.parse_args()
    if a.selftest:
        return selftest()
    if a.init_only:
        c = cfg_from(nano_config(), os.path.join(a.work, "cfg"))
        return export(c, nano_config(), init_params(c, torch.Generator().manual_seed(a.seed)), a.tokenizer, a.out)
    if not a.log:
        a.log = os.path.join(os.path.dirname(a.out.rstrip("/")) or ".", "train_k3.log.jsonl")
    train(a)


if __name__ == "__main__":
    main()

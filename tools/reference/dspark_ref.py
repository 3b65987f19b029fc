#!/usr/bin/python3
"""Independent float64 reference of the DSpark draft's forward (K3's own block drafter).

Written from /work/dspark-spec.md (the architecture deltafin pins; docs/DSPARK.md) and
kimi-k3.md 5.3 / 5.5 only, not from the engine's C code. The target's taps come from
k3_ref.py's float64 forward of the target over the prompt (the per-layer output h).

  dspark_ref.py --draft DIR --target DIR --prompt-ids 1,2,3 [--n N] [--anchor ID] [--k K] --out F.json
      one block: context = prompt[:n], anchor x_n (default: the target's greedy token after
      prompt[:n]), proposals d_1..d_k (greedy, lowest id on ties), logits and confidences
  dspark_ref.py --goldens OUTDIR --draft DIR --target DIR --prompt-ids IDS --cases '[[n,k,anchor|null]]'
      the fixture set of tests/fixtures/dspark/ (README.md there says what each file holds)
  dspark_ref.py --selftest     refusals, save/load, RoPE, non-causal block, taps after n unread

Conventions (the spec's): y = W x with W [out, in]; RMS(x, w) = w * x / sqrt(mean(x^2) + eps);
RoPE rotate-half (pairs (i, i + d/2)), inv_freq_i = theta^(-2i/d), angle = position * inv_freq_i;
block row j = 0..k sits at position n + j; row 0 reads E[x_n], rows 1..k read E[mask_token_id];
every block row attends to the n context rows and to all k + 1 block rows.

The math is plain functions of tensors and a weight getter, generic in dtype, device and leading
batch dimensions, so tools/train/train_dspark.py trains exactly what this file computes. Importing
it imports k3_ref, which sets torch's default dtype to float64; an importer may set it back.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import k3_ref as K  # noqa: E402

F64 = torch.float64

# ---------------------------------------------------------------- config

REQUIRED = ["model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "q_lora_rank",
            "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "intermediate_size",
            "rms_norm_eps", "vocab_size", "target_hidden_size", "target_num_hidden_layers",
            "target_layer_ids", "aux_hidden_stream", "block_size", "mask_token_id", "fc_norm",
            "markov_rank", "markov_head_type", "enable_confidence_head", "confidence_head_with_markov",
            "tie_word_embeddings"]


class DConfig:
    """A DSpark config.json (flat), checked as the spec asks; errors name the key."""

    def __init__(self, d_or_dict, target=None):
        if isinstance(d_or_dict, dict):
            j = d_or_dict
        else:
            with open(os.path.join(d_or_dict, "config.json")) as f:
                j = json.load(f)
        for k in REQUIRED:
            if k not in j:
                raise KeyError(f"config.json: {k} missing")
        if j["model_type"] != "k3_dspark":
            raise ValueError(f"config.json: model_type {j['model_type']!r} is not k3_dspark")
        if j["aux_hidden_stream"] != "hidden":
            raise ValueError(f"config.json: aux_hidden_stream {j['aux_hidden_stream']!r} (only \"hidden\")")
        if j["markov_head_type"] != "low_rank":
            raise ValueError(f"config.json: markov_head_type {j['markov_head_type']!r} (only \"low_rank\")")
        if j["tie_word_embeddings"] is not True:
            raise ValueError("config.json: tie_word_embeddings must be true (no separate head is shipped)")
        if j.get("mla_use_output_gate", True) is not True:
            raise ValueError("config.json: mla_use_output_gate must be true (the pinned MLA has the output gate)")
        if j.get("hidden_act", "situ") != "situ":
            raise ValueError(f"config.json: hidden_act {j['hidden_act']!r} (only \"situ\")")
        self.j = j
        self.hidden = j["hidden_size"]
        self.n_layers = j["num_hidden_layers"]
        self.heads = j["num_attention_heads"]
        self.q_lora = j["q_lora_rank"]
        self.kv_lora = j["kv_lora_rank"]
        self.nope = j["qk_nope_head_dim"]
        self.rope = j["qk_rope_head_dim"]
        self.vdim = j["v_head_dim"]
        self.inter = j["intermediate_size"]
        self.eps = float(j["rms_norm_eps"])
        self.theta = float(j.get("rope_theta", 10000.0))
        self.situ_beta = float(j.get("activation_situ_beta", 4.0))
        self.situ_lin = float(j.get("activation_situ_linear_beta", 25.0))
        self.vocab = j["vocab_size"]
        self.taps = list(j["target_layer_ids"])
        self.block = j["block_size"]
        self.mask_id = j["mask_token_id"]
        self.fc_norm = bool(j["fc_norm"])
        self.r = j["markov_rank"]
        self.conf = bool(j["enable_confidence_head"])
        self.conf_markov = bool(j["confidence_head_with_markov"])
        if self.rope % 2:
            raise ValueError("config.json: qk_rope_head_dim must be even (rotate-half pairs)")
        if not (1 <= self.block):
            raise ValueError("config.json: block_size must be >= 1")
        if target is not None:
            self.check_target(target)

    def check_target(self, tc):
        """tc: a k3_ref.Config of the target."""
        for key, mine, theirs in (("hidden_size", self.hidden, tc.hidden),
                                  ("target_hidden_size", self.j["target_hidden_size"], tc.hidden),
                                  ("vocab_size", self.vocab, tc.vocab),
                                  ("target_num_hidden_layers", self.j["target_num_hidden_layers"], tc.n_layers)):
            if mine != theirs:
                raise ValueError(f"config.json: {key} {mine} does not match the target's {theirs}")
        for l in self.taps:
            if not (0 <= l < tc.n_layers):
                raise ValueError(f"config.json: target_layer_ids entry {l} outside the target's {tc.n_layers} layers")
        if not (0 <= self.mask_id < tc.vocab):
            raise ValueError(f"config.json: mask_token_id {self.mask_id} outside the vocabulary")


def nano_config():
    """The spec's nano-DSpark for nano-K3 (config.json contents)."""
    return {
        "architectures": ["K3DSparkForCausalLM"], "model_type": "k3_dspark", "dtype": "bfloat16",
        "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "q_lora_rank": 128, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
        "v_head_dim": 32, "mla_use_output_gate": True, "rope_theta": 10000.0,
        "intermediate_size": 512, "hidden_act": "situ", "activation_situ_beta": 4.0,
        "activation_situ_linear_beta": 25.0, "rms_norm_eps": 1e-5, "vocab_size": 4096,
        "target_hidden_size": 256, "target_num_hidden_layers": 8, "target_layer_ids": [1, 3, 4, 6, 7],
        "aux_hidden_stream": "hidden", "block_size": 7, "mask_token_id": 3848, "fc_norm": True,
        "markov_rank": 32, "markov_head_type": "low_rank", "enable_confidence_head": True,
        "confidence_head_with_markov": True, "tie_word_embeddings": True,
    }


def tensor_shapes(c):
    """name -> (shape, dtype) of the published layout (the spec's tensor list)."""
    H, Hh, NO, RO, VD, KL, QL, I = c.hidden, c.heads, c.nope, c.rope, c.vdim, c.kv_lora, c.q_lora, c.inter
    s = {"model.fc.weight": ((H, len(c.taps) * H), "BF16")}
    if c.fc_norm:
        s["model.fc_norm.weight"] = ((H,), "BF16")
    for i in range(c.n_layers):
        b = f"model.layers.{i}."
        s[b + "input_layernorm.weight"] = ((H,), "BF16")
        s[b + "post_attention_layernorm.weight"] = ((H,), "BF16")
        a = b + "self_attn."
        s[a + "q_a_proj.weight"] = ((QL, H), "BF16")
        s[a + "q_a_layernorm.weight"] = ((QL,), "BF16")
        s[a + "q_b_proj.weight"] = ((Hh * (NO + RO), QL), "BF16")
        s[a + "kv_a_proj_with_mqa.weight"] = ((KL + RO, H), "BF16")
        s[a + "kv_a_layernorm.weight"] = ((KL,), "BF16")
        s[a + "kv_b_proj.weight"] = ((Hh * (NO + VD), KL), "BF16")
        s[a + "g_proj.weight"] = ((Hh * VD, H), "BF16")
        s[a + "o_proj.weight"] = ((H, Hh * VD), "BF16")
        s[b + "mlp.gate_proj.weight"] = ((I, H), "BF16")
        s[b + "mlp.up_proj.weight"] = ((I, H), "BF16")
        s[b + "mlp.down_proj.weight"] = ((H, I), "BF16")
    s["model.norm.weight"] = ((H,), "BF16")
    s["model.markov.down_proj.weight"] = ((c.r, H), "BF16")
    s["model.markov.up_proj.weight"] = ((H, c.r), "BF16")
    if c.conf:
        s["model.confidence_head.weight"] = ((1, H), "BF16")
        s["model.confidence_head.bias"] = ((1,), "F32")
    return s


# ---------------------------------------------------------------- checkpoint I/O

def load(d, target_cfg=None, device="cpu", dtype=F64):
    """(DConfig, {name: tensor}) of a DSpark checkpoint directory; shapes checked against the spec."""
    c = DConfig(d, target_cfg)
    ck = K.Checkpoint(d)
    want = tensor_shapes(c)
    W = {}
    for name, (shape, _) in want.items():
        if not ck.has(name):
            raise KeyError(f"{d}: tensor {name} missing")
        t = ck.get(name)
        if tuple(t.shape) != shape:
            raise ValueError(f"{d}: {name} has shape {tuple(t.shape)}, the config gives {shape}")
        W[name] = t.to(device, dtype)
    return c, W


def tensor_bytes(t, dt):
    t = t.detach().to("cpu").contiguous()
    if dt == "BF16":  # round to nearest even, as torch does
        return t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    if dt == "F32":
        return t.to(torch.float32).numpy().astype("<f4").tobytes()
    raise ValueError(dt)


def save(d, cfg_json, W):
    """Writes config.json + model.safetensors (the published layout) to d atomically: a temporary
    directory renamed at the end. W: name -> tensor (any float dtype)."""
    c = DConfig(cfg_json)
    want = tensor_shapes(c)
    if set(W) != set(want):
        raise ValueError(f"tensors differ from the layout: missing {sorted(set(want) - set(W))}, "
                         f"extra {sorted(set(W) - set(want))}")
    tmp = d.rstrip("/") + ".part"
    if os.path.exists(tmp):
        for f in os.listdir(tmp):
            os.remove(os.path.join(tmp, f))
    else:
        os.makedirs(tmp)
    hdr, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(want):
        shape, dt = want[name]
        if tuple(W[name].shape) != shape:
            raise ValueError(f"{name}: shape {tuple(W[name].shape)} != {shape}")
        b = tensor_bytes(W[name], dt)
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    hj = json.dumps(hdr, separators=(",", ":")).encode()
    hj += b" " * ((8 - (8 + len(hj)) % 8) % 8)
    with open(os.path.join(tmp, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg_json, f, indent=2)
        f.write("\n")
    if os.path.exists(d):
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        os.rmdir(d)
    os.replace(tmp, d)


# ---------------------------------------------------------------- math

rms = K.rms
situ = K.situ


def rope(x, pos, theta):
    """Rotate-half RoPE. x [..., R, (heads,) d]; pos [..., R] (int or float tensor)."""
    d = x.shape[-1]
    half = d // 2
    inv = theta ** (-2.0 * torch.arange(half, dtype=x.dtype, device=x.device) / d)
    ang = pos.to(x.dtype).unsqueeze(-1) * inv  # [..., R, half]
    if x.dim() == ang.dim() + 1:  # per-head tensor: broadcast over the head axis
        ang = ang.unsqueeze(-2)
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def context_features(c, W, taps):
    """taps [..., T, n_taps, H] (target_layer_ids order) -> f [..., T, H]."""
    f = taps.reshape(*taps.shape[:-2], -1) @ W["model.fc.weight"].T
    if c.fc_norm:
        f = rms(f, W["model.fc_norm.weight"], c.eps)
    return f


def latent_rows(c, W, i, x, pos):
    """The MLA cache row of draft layer i for normalised inputs x [..., R, H] at positions pos:
    (latent [..., R, kv_lora] after kv_a_layernorm, k_pe [..., R, rope] rotated)."""
    A = f"model.layers.{i}.self_attn."
    cc = x @ W[A + "kv_a_proj_with_mqa.weight"].T
    lat = rms(cc[..., :c.kv_lora], W[A + "kv_a_layernorm.weight"], c.eps)
    return lat, rope(cc[..., c.kv_lora:], pos, c.theta)


def context_cache(c, W, f, pos):
    """Per draft layer, the cache rows of context features f [..., T, H] at positions pos [..., T]."""
    return [latent_rows(c, W, i, rms(f, W[f"model.layers.{i}.input_layernorm.weight"], c.eps), pos)
            for i in range(c.n_layers)]


def mla(c, W, i, x, pos, ctx, allow):
    """Draft layer i's attention for block rows x [..., R, H] (normalised) at positions pos [..., R].
    ctx = (latent [..., Tc, KL], k_pe [..., Tc, RO]) of the context; keys = context rows then the
    block rows; allow [..., R, Tc + R] (bool) says which keys each row sees."""
    A = f"model.layers.{i}.self_attn."
    Hh, NO, RO, VD = c.heads, c.nope, c.rope, c.vdim
    lead = x.shape[:-1]
    qa = rms(x @ W[A + "q_a_proj.weight"].T, W[A + "q_a_layernorm.weight"], c.eps)
    q = (qa @ W[A + "q_b_proj.weight"].T).reshape(*lead, Hh, NO + RO)
    q_nope, q_pe = q[..., :NO], rope(q[..., NO:], pos, c.theta)
    lat_b, kpe_b = latent_rows(c, W, i, x, pos)
    lat = torch.cat([ctx[0], lat_b], -2)
    kpe = torch.cat([ctx[1], kpe_b], -2)
    kv = (lat @ W[A + "kv_b_proj.weight"].T).reshape(*lat.shape[:-1], Hh, NO + VD)
    kn, vv = kv[..., :NO], kv[..., NO:]
    sc = (torch.einsum("...rhd,...shd->...hrs", q_nope, kn) +
          torch.einsum("...rhd,...sd->...hrs", q_pe, kpe)) / math.sqrt(NO + RO)
    sc = sc.masked_fill(~allow.unsqueeze(-3), float("-inf"))
    P = torch.softmax(sc, -1)
    o = torch.einsum("...hrs,...shd->...rhd", P, vv).reshape(*lead, Hh * VD)
    o = o * torch.sigmoid(x @ W[A + "g_proj.weight"].T)
    return o @ W[A + "o_proj.weight"].T


def block_hidden(c, W, h, pos, cache, allow):
    """The draft layers over block rows h [..., R, H] (embeddings); returns h before the final norm."""
    for i in range(c.n_layers):
        b = f"model.layers.{i}."
        x = rms(h, W[b + "input_layernorm.weight"], c.eps)
        h = h + mla(c, W, i, x, pos, cache[i], allow)
        x = rms(h, W[b + "post_attention_layernorm.weight"], c.eps)
        h = h + situ(x @ W[b + "mlp.gate_proj.weight"].T, x @ W[b + "mlp.up_proj.weight"].T,
                     c.situ_beta, c.situ_lin) @ W[b + "mlp.down_proj.weight"].T
    return h


def head_inputs(c, W, E, h, prev):
    """u = RMS(h, norm) + markov.up(markov.down(E[prev])) and v (the confidence head's input).
    h [..., H], prev [...] token ids."""
    hn = rms(h, W["model.norm.weight"], c.eps)
    u = hn + (E[prev] @ W["model.markov.down_proj.weight"].T) @ W["model.markov.up_proj.weight"].T
    return u, (u if c.conf_markov else hn)


def confidence(c, W, v):
    """sigmoid(w . v + b) [...], or None without the head; also the logit."""
    if not c.conf:
        return None, None
    z = (v @ W["model.confidence_head.weight"].T).squeeze(-1) + W["model.confidence_head.bias"][0]
    return torch.sigmoid(z), z


def argmax_low(v):
    """argmax, the lowest id on ties."""
    return int(torch.nonzero(v == v.max())[0])


# ---------------------------------------------------------------- one block (the reference)

def propose(c, W, E, LM, taps, n, x_n, k):
    """taps [T >= n, n_taps, H] of the target; context = rows 0..n-1; anchor token x_n.
    Returns dict: proposals d_1..d_k, logits [k, V], confidences [k] (or None), h rows."""
    if not (1 <= k <= c.block):
        raise ValueError(f"k {k} outside 1..block_size {c.block}")
    dev, dt = E.device, E.dtype
    f = context_features(c, W, taps[:n])
    cache = context_cache(c, W, f, torch.arange(n, device=dev))
    ids = torch.tensor([x_n] + [c.mask_id] * k, device=dev)
    pos = torch.arange(n, n + k + 1, device=dev)
    allow = torch.ones(k + 1, n + k + 1, dtype=torch.bool, device=dev)
    h = block_hidden(c, W, E[ids], pos, cache, allow)
    props, logits, confs = [], [], []
    prev = x_n
    for j in range(1, k + 1):
        u, v = head_inputs(c, W, E, h[j], torch.tensor(prev, device=dev))
        lg = u @ LM.T
        d = argmax_low(lg)
        cf, _ = confidence(c, W, v)
        props.append(d)
        logits.append(lg)
        confs.append(None if cf is None else float(cf))
        prev = d
    return {"proposals": props, "logits": torch.stack(logits), "confidences": confs, "h": h}


class Target:
    """The target through k3_ref (float64): taps at the draft's layers, embedding and LM head."""

    def __init__(self, d, device="cpu", dtype=F64):
        self.m = K.Model(d, dtype=dtype, device=device)
        self.cfg = self.m.cfg
        self.E = self.m.w("embed_tokens.weight")
        self.LM = self.m.w("language_model.lm_head.weight")

    def taps(self, ids, layers):
        """(logits [T, V], taps [T, n_taps, H]) of one causal forward over ids."""
        logits, hidden = self.m.forward(list(ids), True)
        return logits, torch.stack([hidden[l]["h"] for l in layers], 1)


def block_json(c, res, n, x_n, k, top=8):
    """The JSON record of one block (what the goldens store)."""
    out = {"n": n, "anchor": x_n, "k": k, "proposals": res["proposals"], "confidences": res["confidences"],
           "positions": []}
    for j in range(k):
        lg = res["logits"][j]
        tv, ti = torch.topk(lg, top)
        s = torch.sort(tv, descending=True)
        out["positions"].append({
            "j": j + 1, "top_ids": [int(ti[i]) for i in s.indices], "top_logits": [float(v) for v in s.values],
            "margin": float(s.values[0] - s.values[1]),
            "logits_head": [float(v) for v in lg[:16]],
            "logits_sum": float(lg.sum()), "logits_sumsq": float((lg * lg).sum()),
            "h_head": [float(v) for v in res["h"][j + 1][:8]]})
    return out


# ---------------------------------------------------------------- goldens

def goldens(out_dir, draft_dir, target_dir, prompt, cases, name="blocks", npz=True):
    """cases: list of (n, k, anchor or None). Writes NAME.json (+ NAME.npz: full logits, taps)."""
    tgt = Target(target_dir)
    c, W = load(draft_dir, tgt.cfg)
    logits_t, taps = tgt.taps(prompt, c.taps)
    rec = {"draft": os.path.basename(draft_dir.rstrip("/")), "target": os.path.basename(target_dir.rstrip("/")),
           "prompt_ids": list(prompt), "target_layer_ids": c.taps, "blocks": []}
    full = {}
    for bi, (n, k, anchor) in enumerate(cases):
        x_n = anchor if anchor is not None else argmax_low(logits_t[n - 1])
        res = propose(c, W, tgt.E, tgt.LM, taps, n, x_n, k)
        rec["blocks"].append(block_json(c, res, n, x_n, k))
        full[f"block{bi}_logits"] = res["logits"].numpy().astype(np.float32)
    # the taps the blocks read: lets a C test separate the target's error from the draft's
    full["taps"] = taps.numpy().astype(np.float32)
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, name + ".json.tmp")
    with open(tmp, "w") as f:
        json.dump(rec, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(out_dir, name + ".json"))
    if npz:
        K.save_npz(os.path.join(out_dir, name + ".npz"), full)
    return rec


def selftest():
    """Properties of the reference itself (no target needed: random taps, embedding and head)."""
    import tempfile
    j = nano_config()
    j.update({"vocab_size": 64, "mask_token_id": 60, "target_num_hidden_layers": 8})
    c = DConfig(j)
    g = torch.Generator().manual_seed(3)
    W = {n: (torch.randn(*s, generator=g) / math.sqrt(s[-1]) if len(s) == 2 else 1 + 0.1 * torch.randn(*s, generator=g))
         for n, (s, _) in tensor_shapes(c).items()}
    E = torch.randn(64, c.hidden, generator=g)
    LM = torch.randn(64, c.hidden, generator=g) / math.sqrt(c.hidden)
    taps = torch.randn(12, len(c.taps), c.hidden, generator=g) * 3
    ok = True

    def check(name, cond):
        nonlocal ok
        print(("ok   " if cond else "FAIL ") + name)
        ok = ok and bool(cond)

    # refusals name the key
    for key in ("markov_rank", "target_layer_ids", "mask_token_id"):
        bad = dict(j)
        del bad[key]
        try:
            DConfig(bad)
            check(f"missing {key} refused", False)
        except KeyError as e:
            check(f"missing {key} refused naming it", key in str(e))
    for key, val in (("aux_hidden_stream", "pre_norm"), ("markov_head_type", "full"), ("tie_word_embeddings", False)):
        try:
            DConfig(dict(j, **{key: val}))
            check(f"{key}={val!r} refused", False)
        except ValueError as e:
            check(f"{key}={val!r} refused naming it", key in str(e))
    # save / load: bf16 rounding only
    with tempfile.TemporaryDirectory() as d:
        save(os.path.join(d, "ds"), j, W)
        c2, W2 = load(os.path.join(d, "ds"))
        err = max(float((W2[n] - W[n].to(torch.bfloat16).double()).abs().max()) for n in W
                  if n != "model.confidence_head.bias")
        check("save/load round trip equals the bf16 rounding", err == 0.0 and
              float(W2["model.confidence_head.bias"][0]) == float(W["model.confidence_head.bias"][0].float()))
    # RoPE scores depend on the position difference only
    q, k = torch.randn(1, 16, generator=g), torch.randn(1, 16, generator=g)
    s1 = (rope(q, torch.tensor([7]), c.theta) * rope(k, torch.tensor([3]), c.theta)).sum()
    s2 = (rope(q, torch.tensor([104]), c.theta) * rope(k, torch.tensor([100]), c.theta)).sum()
    check("RoPE is relative", abs(float(s1 - s2)) < 1e-12)
    # taps after n are not read; the block is non-causal (row 1 sees the rows after it)
    r1 = propose(c, W, E, LM, taps, 9, 5, 7)
    r2 = propose(c, W, E, LM, taps[:9], 9, 5, 7)
    check("rows >= n of the taps are not read", bool(torch.equal(r1["logits"], r2["logits"])))
    r3 = propose(c, W, E, LM, taps, 9, 5, 3)
    check("non-causal block: row 1 depends on k", float((r1["h"][1] - r3["h"][1]).abs().max()) > 1e-6)
    # the Markov chain: position j's logits depend on d_{j-1} (moving the anchor moves position 1)
    r4 = propose(c, W, E, LM, taps, 9, 6, 7)
    check("proposals are argmaxes of their logits", all(
        int(torch.argmax(r1["logits"][i])) == r1["proposals"][i] for i in range(7)))
    check("the anchor token changes position 1's logits", float((r1["logits"][0] - r4["logits"][0]).abs().max()) > 1e-6)
    return ok


def parse_ids(s):
    return [int(x) for x in s.replace(",", " ").split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draft")
    ap.add_argument("--target")
    ap.add_argument("--selftest", action="store_true", help="check the reference's own properties")
    ap.add_argument("--prompt-ids")
    ap.add_argument("--n", type=int, help="context length (default: the whole prompt)")
    ap.add_argument("--anchor", type=int, help="x_n (default: the target's greedy token at n-1)")
    ap.add_argument("--k", type=int, help="proposals (default: block_size)")
    ap.add_argument("--out")
    ap.add_argument("--goldens", help="write the fixture set to this folder")
    ap.add_argument("--cases", help='goldens: JSON [[n, k, anchor|null], ...]')
    ap.add_argument("--name", default="blocks", help="goldens: the files' base name")
    ap.add_argument("--no-npz", action="store_true", help="goldens: the JSON only")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.selftest:
        sys.exit(0 if selftest() else 1)
    if not a.draft or not a.target:
        ap.error("give --draft and --target")
    if a.goldens:
        prompt = parse_ids(a.prompt_ids)
        cases = [tuple(x) for x in json.loads(a.cases)]
        rec = goldens(a.goldens, a.draft, a.target, prompt, cases, a.name, not a.no_npz)
        for b in rec["blocks"]:
            print(b["n"], b["anchor"], b["k"], b["proposals"],
                  [None if x is None else round(x, 4) for x in b["confidences"]])
        return
    if not a.prompt_ids or not a.out:
        ap.error("give --prompt-ids and --out (or --goldens)")
    prompt = parse_ids(a.prompt_ids)
    tgt = Target(a.target)
    c, W = load(a.draft, tgt.cfg)
    n = a.n or len(prompt)
    if not (1 <= n <= len(prompt)):
        ap.error(f"--n {n} outside 1..{len(prompt)}")
    logits_t, taps = tgt.taps(prompt[:n], c.taps)
    x_n = a.anchor if a.anchor is not None else argmax_low(logits_t[n - 1])
    res = propose(c, W, tgt.E, tgt.LM, taps, n, x_n, a.k or c.block)
    rec = block_json(c, res, n, x_n, a.k or c.block)
    rec["prompt_ids"] = prompt
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f)
        f.write("\n")
    os.replace(tmp, a.out)
    print(json.dumps({"proposals": rec["proposals"], "confidences": rec["confidences"]}))


if __name__ == "__main__":
    main()

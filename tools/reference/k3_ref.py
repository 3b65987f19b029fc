#!/usr/bin/python3
"""Independent float64 reference of the Kimi K3 forward pass.

Written from ../shared/docs/kimi-k3.md section 5 only (no engine code): its own
safetensors reader, MXFP4 dequantisation and config reader. It recomputes the
whole sequence for every generated token (no caches), so there is nothing
incremental to get wrong.

  k3_ref.py --model DIR --prompt-ids 1,2,3 --new N --out FILE.json [--hidden]
  k3_ref.py --model DIR --prompt-ids-file F --all-out FILE.npz [--dtype f32] [--force-routes F.json]

Output JSON: prompt_ids, greedy_ids, margins (top1 - top2 logit at each greedy
step), logits (the last prompt position, float64), step_top (id/logit of the
best 5 at each step), experts (per MoE layer, per prompt position: chosen ids
in selection order and their weights), hidden (if --hidden: h after every layer
for every prompt position, plus the attention / FFN outputs of the last one).

--all-out: ONE batched causal forward over the prompt (no greedy steps) written as
numpy arrays: logits [T, V] (every position), hidden [L, T, H] (every layer's
output), route_scores [M, T, E] (sigmoid, before the bias), route_bias [M, E],
route_ids [M, T, K] (selection order), moe_layers [M]. --dtype f32 runs the same
code in float32 (to measure how far float32 rounding alone moves each value);
--force-routes {"layer": {"position": [ids]}} replaces the router's choice
there (the scan replays an engine's near-tie choice to look past it).

Pinned choices (kimi-k3.md): L2 norm u/sqrt(sum u^2 + 1e-6); A_log per head;
q/kv_a norm eps = rms_norm_eps; router ties to the lower expert id.

Needs only python3, numpy and torch (Debian python3-torch), CPU.

The math and the blocks below are plain functions of tensors and a weight
getter, generic in dtype, device and leading batch dimensions ([..., T, H]),
so tools/train/train_k3.py trains exactly what this file computes. Importing
this module sets torch's default dtype to float64 (the reference's own use);
an importer that wants another sets it back.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)
F64 = torch.float64

# ---------------------------------------------------------------- safetensors

_DT = {"BF16": (2, None), "F16": (2, np.float16), "F32": (4, np.float32),
       "F64": (8, np.float64), "U8": (1, np.uint8), "I8": (1, np.int8),
       "I32": (4, np.int32), "I64": (8, np.int64)}


class Checkpoint:
    """Tensors of a sharded (index.json) or single-file checkpoint."""

    def __init__(self, d):
        self.dir = d
        self.where = {}  # name -> (path, dtype, shape, abs offset, nbytes)
        idx = os.path.join(d, "model.safetensors.index.json")
        if os.path.exists(idx):
            with open(idx) as f:
                index = json.load(f)
            # make-model --spine int8 leaves the bf16 spine as holes (zeros):
            # the reference reads bf16, so it must never take such a model
            if (index.get("metadata") or {}).get("deltafin_bf16_spine") == "holes":
                raise ValueError(f"{d}: written by `make-model --spine int8`: its bf16 spine "
                                 "matrices are holes, not weights; the reference needs the bf16 model")
            files = sorted(set(index["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        for fn in files:
            self._scan(os.path.join(d, fn))

    def _scan(self, path):
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 100_000_000 or 8 + n > size:
                raise ValueError(f"{path}: bad header length {n}")
            hdr = json.loads(f.read(n).decode("utf-8"))
        for name, t in hdr.items():
            if name == "__metadata__":
                continue
            es = _DT[t["dtype"]][0]
            b, e = t["data_offsets"]
            nel = 1
            for s in t["shape"]:
                nel *= s
            if e - b != nel * es or 8 + n + e > size:
                raise ValueError(f"{path}: {name}: size/offset mismatch")
            if name in self.where:
                raise ValueError(f"{name}: duplicate")
            self.where[name] = (path, t["dtype"], tuple(t["shape"]), 8 + n + b, e - b)

    def raw(self, name):
        path, dt, shape, off, nb = self.where[name]
        with open(path, "rb") as f:
            f.seek(off)
            buf = f.read(nb)
        return dt, shape, buf

    def get(self, name):
        """A float64 torch tensor (BF16/F16/F32) or a uint8 numpy array (U8)."""
        dt, shape, buf = self.raw(name)
        if dt == "BF16":
            u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            a = u.view(np.float32).astype(np.float64)
        elif dt == "U8":
            return np.frombuffer(buf, dtype=np.uint8).reshape(shape)
        else:
            a = np.frombuffer(buf, dtype=np.dtype(_DT[dt][1]).newbyteorder("<")).astype(np.float64)
        return torch.from_numpy(a.reshape(shape).copy())

    def has(self, name):
        return name in self.where


# ---------------------------------------------------------------- MXFP4

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def mxfp4_dequant(packed, scales, group=32):
    """packed u8 [rows, cols/2] (low nibble = even column), scales u8 [rows, cols/group]."""
    packed = np.asarray(packed, dtype=np.uint8)
    scales = np.asarray(scales, dtype=np.uint8)
    rows, half = packed.shape
    cols = half * 2
    if scales.shape != (rows, cols // group):
        raise ValueError(f"scale shape {scales.shape} does not fit codes {packed.shape}")
    if (scales == 255).any():
        raise ValueError("E8M0 scale 255 (NaN)")
    codes = np.empty((rows, cols), dtype=np.uint8)
    codes[:, 0::2] = packed & 15
    codes[:, 1::2] = packed >> 4
    vals = E2M1[codes]
    sc = np.ldexp(1.0, scales.astype(np.int64) - 127)
    vals = vals * np.repeat(sc, group, axis=1)
    return torch.from_numpy(vals)


# ---------------------------------------------------------------- config

def pick(tc, key, alias=None, default=None):
    """A text_config field in the release's kimi_linear spelling `key`, or its
    older (DeepSeek / earlier deltafin) spelling `alias`; both present and
    different is an error naming both, as in the engine's parser."""
    have, old = key in tc, alias is not None and alias in tc
    if have and old and tc[key] != tc[alias]:
        raise ValueError(f"config.json: {key} ({tc[key]!r}) and {alias} ({tc[alias]!r}) "
                         "are two spellings of one field and disagree")
    if have:
        return tc[key]
    if old:
        return tc[alias]
    if default is None:
        raise KeyError(f"config.json: {key} missing (nor is {alias} given)" if alias
                       else f"config.json: {key} missing")
    return default


class Config:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            root = json.load(f)
        tc = root.get("text_config", root)
        self.root, self.tc = root, tc
        g = tc.get

        self.hidden = g("hidden_size")
        self.n_layers = g("num_hidden_layers")
        self.vocab = g("vocab_size")
        self.eps = float(g("rms_norm_eps"))
        self.situ_beta = float(pick(tc, "activation_situ_beta", "situ_beta"))
        self.situ_lin = float(pick(tc, "activation_situ_linear_beta", "situ_linear_beta"))
        self.block = g("attn_res_block_size")
        la = g("linear_attn_config")
        full = set(la["full_attn_layers"])  # 1-based
        self.kind = ["mla" if (l + 1) in full else "kda" for l in range(self.n_layers)]
        if "kda_layers" in la:
            assert set(la["kda_layers"]) == {l + 1 for l in range(self.n_layers) if self.kind[l] == "kda"}
        self.kda_heads = la["num_heads"]
        self.kda_dim = la["head_dim"]
        self.kda_conv = la["short_conv_kernel_size"]
        self.gate_lb = float(la.get("gate_lower_bound", -5.0))
        self.mla_heads = g("num_attention_heads")
        self.nope = g("qk_nope_head_dim")
        self.rope = g("qk_rope_head_dim")
        self.vdim = g("v_head_dim")
        self.kv_lora = g("kv_lora_rank")
        self.first_dense = g("first_k_dense_replace")
        self.n_experts = pick(tc, "num_experts", "n_routed_experts")
        self.top_k = pick(tc, "num_experts_per_token", "num_experts_per_tok")
        self.n_shared = pick(tc, "num_shared_experts", "n_shared_experts")
        self.latent_norm = g("latent_moe_use_norm", True)
        self.norm_topk = pick(tc, "moe_renormalize", "norm_topk_prob", True)
        self.routed_scale = float(g("routed_scaling_factor", 1.0))
        assert pick(tc, "num_expert_group", "n_group", 1) == 1
        # the release keeps quantization_config inside text_config
        qc = tc.get("quantization_config", root.get("quantization_config"))
        self.group = 32
        if qc:
            for grp in qc.get("config_groups", {}).values():
                self.group = grp["weights"].get("group_size", 32)
        assert pick(tc, "moe_router_activation_func", "scoring_func", "sigmoid") == "sigmoid"
        assert g("hidden_act", "situ") == "situ"


# ---------------------------------------------------------------- math

def rms(x, w, eps):
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def rms_now(x, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def situ(g, u, beta=4.0, lin=25.0):
    return (beta * torch.tanh(g / beta) * torch.sigmoid(g)) * (lin * torch.tanh(u / lin))


def l2n(u, eps=1e-6):
    return u / torch.sqrt((u * u).sum(-1, keepdim=True) + eps)


def attn_res(vs, n, r, eps):
    """AR(V, n, r): softmax over the vectors of dot(RMS_noweight(v_i) * n, r), sum of RAW v_i.
    vs: list of [T, H]; n [H]; r [1, H]."""
    V = torch.stack(vs, 0)  # [N, T, H]
    sc = (rms_now(V, eps) * n * r.reshape(-1)).sum(-1)  # [N, T]
    p = torch.softmax(sc, 0)
    return (p.unsqueeze(-1) * V).sum(0)


def kda_recurrence(q, k, v, alpha, beta):
    """Sequential delta rule, read after update. q,k [...,T,NH,D] (normalised, q scaled),
    v [...,T,NH,D], alpha [...,T,NH,D] (per key row), beta [...,T,NH]. Returns o [...,T,NH,D]."""
    T, NH, D = q.shape[-3:]
    S = q.new_zeros(*q.shape[:-3], NH, D, v.shape[-1])
    out = []
    for t in range(T):
        kt = k[..., t, :, :]
        S = alpha[..., t, :, :].unsqueeze(-1) * S
        u = torch.einsum("...hkv,...hk->...hv", S, kt)
        S = S + torch.einsum("...hk,...hv->...hkv", kt, beta[..., t, :].unsqueeze(-1) * (v[..., t, :, :] - u))
        out.append(torch.einsum("...hkv,...hk->...hv", S, q[..., t, :, :]))
    return torch.stack(out, -3)


def causal_conv_silu(x, w):
    """x [..., T, P], w [P, 1, K]: out_t = silu(sum_j win_t[j] w[:,0,j]), win = last K inputs, new one last."""
    T, P = x.shape[-2:]
    K = w.shape[-1]
    xp = torch.cat([x.new_zeros(*x.shape[:-2], K - 1, P), x], -2)
    acc = x.new_zeros(x.shape)
    for j in range(K):
        acc = acc + xp[..., j:j + T, :] * w[:, 0, j]
    return torch.nn.functional.silu(acc)


# ---------------------------------------------------------------- blocks
# L(name) returns the layer's tensor `name` (e.g. "self_attn.q_proj.weight");
# x is the normalised layer input [..., T, H].

def kda_block(c, L, x, recurrence=None):
    NH, D = c.kda_heads, c.kda_dim
    lead = x.shape[:-1]  # [..., T]
    A = lambda n: L("self_attn." + n)
    q = causal_conv_silu(x @ A("q_proj.weight").T, A("q_conv1d.weight"))
    k = causal_conv_silu(x @ A("k_proj.weight").T, A("k_conv1d.weight"))
    v = causal_conv_silu(x @ A("v_proj.weight").T, A("v_conv1d.weight"))
    q = l2n(q.reshape(*lead, NH, D)) * (1.0 / math.sqrt(D))
    k = l2n(k.reshape(*lead, NH, D))
    v = v.reshape(*lead, NH, D)
    f = (x @ A("f_a_proj.weight").T) @ A("f_b_proj.weight").T
    Al = A("A_log")[:NH]  # per head; entries >= NH are padding
    gl = c.gate_lb * torch.sigmoid(
        torch.exp(Al).reshape(NH, 1) * (f + A("dt_bias")).reshape(*lead, NH, D))
    alpha = torch.exp(gl)
    beta = torch.sigmoid(x @ A("b_proj.weight").T)
    o = (recurrence or kda_recurrence)(q, k, v, alpha, beta)
    o = rms(o, A("o_norm.weight"), c.eps).reshape(*lead, NH * D)
    o = o * torch.sigmoid(x @ A("g_proj.weight").T)
    return o @ A("o_proj.weight").T


MLA_QBLOCK = 1024


def mla_block(c, L, x):
    T = x.shape[-2]
    lead = x.shape[:-1]
    Hh, NO, RO, VD, KL = c.mla_heads, c.nope, c.rope, c.vdim, c.kv_lora
    A = lambda n: L("self_attn." + n)
    qa = rms(x @ A("q_a_proj.weight").T, A("q_a_layernorm.weight"), c.eps)
    q = (qa @ A("q_b_proj.weight").T).reshape(*lead, Hh, NO + RO)
    cc = x @ A("kv_a_proj_with_mqa.weight").T
    lat = rms(cc[..., :KL], A("kv_a_layernorm.weight"), c.eps)
    kpe = cc[..., KL:]
    kv = (lat @ A("kv_b_proj.weight").T).reshape(*lead, Hh, NO + VD)
    kn, vv = kv[..., :NO], kv[..., NO:]
    # queries in blocks of MLA_QBLOCK rows (the same math row by row; bounds the T x T scores' memory)
    outs = []
    for t0 in range(0, T, MLA_QBLOCK):
        t1 = min(T, t0 + MLA_QBLOCK)
        qb = q[..., t0:t1, :, :]
        sc = torch.einsum("...thd,...shd->...hts", qb[..., :NO], kn) + torch.einsum("...thd,...sd->...hts", qb[..., NO:], kpe)
        sc = sc / math.sqrt(NO + RO)
        mask = torch.arange(T, device=x.device).unsqueeze(0) > torch.arange(t0, t1, device=x.device).unsqueeze(1)
        sc = sc.masked_fill(mask, float("-inf"))
        P = torch.softmax(sc, -1)
        outs.append(torch.einsum("...hts,...shd->...thd", P, vv))
    o = (outs[0] if len(outs) == 1 else torch.cat(outs, -3)).reshape(*lead, Hh * VD)
    o = o * torch.sigmoid(x @ A("g_proj.weight").T)
    return o @ A("o_proj.weight").T


def situ_ffn(c, L, prefix, x):
    """down( SiTU(gate x, up x) ): the dense layer-0 FFN ("mlp.") and the shared experts."""
    return situ(x @ L(prefix + "gate_proj.weight").T, x @ L(prefix + "up_proj.weight").T,
                c.situ_beta, c.situ_lin) @ L(prefix + "down_proj.weight").T


def expert_ffn(c, z, w1, w2, w3):
    """One routed expert on latent inputs z [..., latent]: w2( SiTU(w1 z, w3 z) )."""
    return situ(z @ w1.T, z @ w3.T, c.situ_beta, c.situ_lin) @ w2.T


def router_scores(L, x):
    """Sigmoid scores [..., E] (the bias is added for selection only)."""
    return torch.sigmoid(x @ L("block_sparse_moe.gate.weight").T)


def route_weights(c, s, ids):
    """The chosen experts' unbiased scores, renormalised over the top k, times the scaling factor."""
    chosen = torch.gather(s, -1, ids)
    w = chosen / chosen.sum(-1, keepdim=True) if c.norm_topk else chosen
    return w * c.routed_scale


def moe_out(c, L, x, r):
    """routed = up( RMS(r, routed_expert_norm) ) plus the shared experts on x."""
    B = "block_sparse_moe."
    if c.latent_norm:
        r = rms(r, L(B + "routed_expert_norm.weight"), c.eps)
    return r @ L(B + "routed_expert_up_proj.weight").T + situ_ffn(c, L, B + "shared_experts.", x)


def forward_layers(c, LW, GW, h, attn, ffn, on_layer=None):
    """The AttnRes spine (kimi-k3.md 5.1) over embeddings h [..., T, H]. LW(l, name) / GW(name) give
    tensors; attn(l, x) and ffn(l, x) are the layer's blocks. Returns the final logits."""
    S, p = [], None
    for l in range(c.n_layers):
        L = lambda n, l=l: LW(l, n)
        x_attn = h if not S else attn_res(S + [h], L("self_attention_res_norm.weight"),
                                          L("self_attention_res_proj.weight"), c.eps)
        if l % c.block == 0:
            S.append(h)
            p = None
        else:
            p = h
        xa = rms(x_attn, L("input_layernorm.weight"), c.eps)
        a = attn(l, xa)
        p = a if p is None else p + a
        x_mlp = attn_res(S + [p], L("mlp_res_norm.weight"), L("mlp_res_proj.weight"), c.eps)
        xm = rms(x_mlp, L("post_attention_layernorm.weight"), c.eps)
        m = ffn(l, xm)
        h = p + m
        if on_layer is not None:
            on_layer(l, h, a, m)
    xo = attn_res(S + [h], GW("output_attn_res_norm.weight"), GW("output_attn_res_proj.weight"), c.eps)
    return rms(xo, GW("norm.weight"), c.eps) @ GW("language_model.lm_head.weight").T


# ---------------------------------------------------------------- model

class Model:
    PM = "language_model.model."

    def __init__(self, d, expert_cache_mb=1024, dtype=F64, device="cpu"):
        self.dtype = dtype
        self.device = torch.device(device)  # "cuda": the same code on a GPU (float64 there too)  # float64 (the reference) or float32 (to measure float32 rounding)
        # layer -> {position: expert ids} or an array [T, k]: choices replayed instead of the router's
        self.force = {}
        self.cfg = Config(d)
        self.ck = Checkpoint(d)
        self._w = {}
        self._experts = {}
        self._cache_budget = expert_cache_mb << 20
        self._cache_used = 0

    def w(self, name):
        if name not in self._w:
            self._w[name] = self.ck.get(self.PM + name if not name.startswith("language_model.") else name).to(self.device, self.dtype)
        return self._w[name]

    def lw(self, l, name):
        return self.w(f"layers.{l}.{name}")

    def expert(self, l, e):
        key = (l, e)
        if key in self._experts:
            return self._experts[key]
        base = f"{self.PM}layers.{l}.block_sparse_moe.experts.{e}."
        ws = []
        for i in (1, 2, 3):
            ws.append(mxfp4_dequant(self.ck.get(base + f"w{i}.weight_packed"),
                                    self.ck.get(base + f"w{i}.weight_scale"), self.cfg.group).to(self.device, self.dtype))
        nb = sum(x.numel() * x.element_size() for x in ws)
        if self._cache_used + nb <= self._cache_budget:
            self._experts[key] = ws
            self._cache_used += nb
        return ws

    # --- blocks
    def kda(self, l, x, trace=None):
        return kda_block(self.cfg, lambda n: self.lw(l, n), x)

    def mla(self, l, x, trace=None):
        return mla_block(self.cfg, lambda n: self.lw(l, n), x)

    def dense(self, l, x):
        return situ_ffn(self.cfg, lambda n: self.lw(l, n), "mlp.", x)

    def route(self, l, x):
        """Returns (ids [T, k] in selection order, weights [T, k])."""
        ids, w, _ = self.route_scored(l, x)
        return ids, w

    def route_scored(self, l, x):
        """route() and the sigmoid scores [T, E] it chose from."""
        c = self.cfg
        s = router_scores(lambda n: self.lw(l, n), x)  # [T, E]
        b = self.lw(l, "block_sparse_moe.gate.e_score_correction_bias")
        sel = (s + b).cpu().numpy()
        T, E = sel.shape
        # descending score, ties -> lower id (lexsort: last key primary), every row at once
        order = np.lexsort((np.broadcast_to(np.arange(E), sel.shape), -sel), axis=-1)
        ids = np.ascontiguousarray(order[:, : c.top_k]).astype(np.int64)
        f = self.force.get(l)
        if isinstance(f, np.ndarray):  # every row's choice given
            ids = f[:T].astype(np.int64).copy()
        elif f:
            for t, forced in f.items():
                if t < T:
                    ids[t] = forced
        return ids, route_weights(c, s, torch.from_numpy(ids).to(s.device)), s

    def moe(self, l, x, trace=None):
        c = self.cfg
        B = "block_sparse_moe."
        ids, wts, s = self.route_scored(l, x)
        if trace is not None:
            trace.append({"layer": l, "ids": ids.tolist(), "weights": wts.tolist(), "ids_np": ids,
                          "scores": s.cpu().numpy()})
        z = x @ self.lw(l, B + "routed_expert_down_proj.weight").T  # [T, latent]
        T = x.shape[0]
        r = torch.zeros(T, z.shape[1], dtype=x.dtype, device=x.device)
        for e in sorted(set(ids.reshape(-1).tolist())):
            w1, w2, w3 = self.expert(l, e)
            rows, slots = np.nonzero(ids == e)
            rows_t, slots_t = torch.from_numpy(rows).to(x.device), torch.from_numpy(slots).to(x.device)
            zt = z[rows_t]
            y = expert_ffn(c, zt, w1, w2, w3)
            r[rows_t] += wts[rows_t, slots_t].unsqueeze(-1) * y
        return moe_out(c, lambda n: self.lw(l, n), x, r)

    def forward(self, ids, want_hidden=False, trace=None):
        """ids: list of int. Returns logits [T, V] and (if want_hidden) per-layer records."""
        c = self.cfg
        h = self.w("embed_tokens.weight")[torch.tensor(ids, dtype=torch.long, device=self.device)]
        hidden = []

        def on_layer(l, h, a, m):
            if want_hidden:
                hidden.append({"layer": l, "kind": c.kind[l], "h": h, "attn_last": a[-1], "ffn_last": m[-1]})

        logits = forward_layers(
            c, self.lw, self.w, h,
            lambda l, x: self.kda(l, x) if c.kind[l] == "kda" else self.mla(l, x),
            lambda l, x: self.dense(l, x) if l < c.first_dense else self.moe(l, x, trace),
            on_layer)
        return logits, hidden


def forward_all(model, prompt):
    """One batched causal forward over prompt: a dict of numpy arrays (see the module doc)."""
    c = model.cfg
    trace, hs = [], []
    logits, hidden = model.forward(list(prompt), True, trace)
    moe = [t["layer"] for t in trace]
    out = {
        "prompt_ids": np.asarray(prompt, dtype=np.int64),
        "logits": logits.cpu().numpy(),
        "hidden": np.stack([r["h"].cpu().numpy() for r in hidden]),
        "moe_layers": np.asarray(moe, dtype=np.int64),
    }
    if trace:
        out["route_scores"] = np.stack([t["scores"] for t in trace])
        out["route_ids"] = np.stack([t["ids_np"] for t in trace])
        out["route_bias"] = np.stack([model.lw(l, "block_sparse_moe.gate.e_score_correction_bias").cpu().numpy()
                                      for l in moe])
    else:
        T = len(prompt)
        out["route_scores"] = np.zeros((0, T, c.n_experts))
        out["route_ids"] = np.zeros((0, T, c.top_k), dtype=np.int64)
        out["route_bias"] = np.zeros((0, c.n_experts))
    del hs
    return out


def save_npz(path, arrays):
    """np.savez to a temporary name, renamed when complete."""
    tmp = path + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def greedy(model, prompt, n_new):
    seq = list(prompt)
    out, margins, tops = [], [], []
    for _ in range(n_new):
        logits, _ = model.forward(seq)
        last = logits[-1]
        top = torch.topk(last, 5)
        # ties -> lower id
        best = int(torch.nonzero(last == last.max())[0])
        out.append(best)
        margins.append(float(top.values[0] - top.values[1]))
        tops.append({"ids": [int(i) for i in top.indices], "logits": [float(v) for v in top.values]})
        seq.append(best)
    return out, margins, tops


def run(model_dir, prompt, n_new, want_hidden):
    m = Model(model_dir)
    trace = []
    logits, hidden = m.forward(prompt, want_hidden, trace)
    res = {
        "prompt_ids": list(prompt),
        "logits": [float(v) for v in logits[-1]],
        "experts": [{"layer": t["layer"], "ids": t["ids"], "weights": t["weights"]} for t in trace],
    }
    if want_hidden:
        res["hidden"] = [{"layer": r["layer"], "kind": r["kind"], "h": r["h"].tolist(),
                          "attn_last": r["attn_last"].tolist(), "ffn_last": r["ffn_last"].tolist()}
                         for r in hidden]
    g, margins, tops = greedy(m, prompt, n_new)
    res["greedy_ids"] = g
    res["margins"] = margins
    res["step_top"] = tops
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", help="comma-separated token ids")
    ap.add_argument("--prompt-ids-file", help="token ids separated by commas and/or whitespace")
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--out", help="the JSON result (greedy steps from the prompt)")
    ap.add_argument("--hidden", action="store_true")
    ap.add_argument("--all-out", help="every position's logits, hidden states and routes (.npz)")
    ap.add_argument("--dtype", choices=("f64", "f32"), default="f64",
                    help="with --all-out: float64 (the reference) or float32 (its rounding)")
    ap.add_argument("--force-routes", help='with --all-out: JSON {"layer": {"position": [ids]}}')
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if (a.prompt_ids is None) == (a.prompt_ids_file is None):
        ap.error("give exactly one of --prompt-ids or --prompt-ids-file")
    if not a.out and not a.all_out:
        ap.error("give --out FILE.json and/or --all-out FILE.npz")
    if a.prompt_ids_file:
        with open(a.prompt_ids_file) as f:
            text = f.read()
    else:
        text = a.prompt_ids
    prompt = [int(x) for x in text.replace(",", " ").split()]
    if not prompt:
        ap.error("no prompt ids")
    if a.all_out:
        m = Model(a.model, dtype=torch.float32 if a.dtype == "f32" else F64)
        if a.force_routes:
            with open(a.force_routes) as f:
                m.force = {int(l): {int(t): list(v) for t, v in d.items()} for l, d in json.load(f).items()}
        save_npz(a.all_out, forward_all(m, prompt))
    if not a.out:
        return
    res = run(a.model, prompt, a.new, a.hidden)
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f)
        f.write("\n")
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()

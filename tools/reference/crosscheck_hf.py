#!/usr/bin/env python3
"""Cross-check k3_ref.py's KDA, MLA and router against Hugging Face transformers'
own modules (transformers.models.kimi_linear, transformers.models.deepseek_v3),
with the weights of a generated checkpoint. Meant for the GPU machine (falls back
to the CPU); see CROSSCHECK.md for how it was run and what it printed.

transformers implements Kimi-Linear-48B, not K3. Where they differ we replace
the HF submodule with K3's form and say so in the output:
  - forget gate: K3 is g = -5 * sigmoid(exp(A_log[h]) * (f + dt_bias)); the
    Kimi-Linear gate is -exp(A_log) * softplus(f + dt_bias) (no lower bound).
    When the HF module has a lower-bound path we use HF's own code with the
    bound set; otherwise we swap in a K3 gate module.
  - output gate: K3's g_proj is full rank; Kimi-Linear's is g_b(g_a(x)). We
    make it full rank (g_a = identity, g_b = g_proj) or use HF's full-rank path.
  - MLA: HF has no output gate; we wrap o_proj so it sees a * sigmoid(g_proj x).
Everything else (conv, L2 norm, chunked/recurrent delta rule, gated o_norm,
MLA attention, router top-k) is HF's code.

  crosscheck_hf.py --model DIR --out DIR [--T 80]
"""
import argparse
import inspect
import json
import math
import os
import re
import sys
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_ref as R  # noqa: E402

RESULTS = {}


def note(key, val):
    RESULTS[key] = val
    print(f"{key}: {val}", flush=True)


def diff(a, b):
    a = a.detach().double().cpu().reshape(-1)
    b = b.detach().double().cpu().reshape(-1)
    d = (a - b).abs()
    return {"max_abs": float(d.max()), "max_rel": float(d.max() / b.abs().max()),
            "ref_max": float(b.abs().max()), "cos": float((a @ b) / (a.norm() * b.norm()))}


def set_param(mod, name, val):
    p = getattr(mod, name)
    if p.numel() != val.numel():
        raise ValueError(f"{type(mod).__name__}.{name}: {tuple(p.shape)} vs {tuple(val.shape)}")
    p.data = val.reshape(p.shape).to(p.dtype).to(p.device).clone()


def linear(w):
    m = nn.Linear(w.shape[1], w.shape[0], bias=False)
    m.weight.data = w.clone()
    return m


class K3Gate(nn.Module):
    """K3's decay gate: lb * sigmoid(exp(A_log[h]) * (f_b(f_a x) + dt_bias)), per head A_log."""

    def __init__(self, fa, fb, A, dtb, nh, d, lb):
        super().__init__()
        self.f_a_proj, self.f_b_proj = linear(fa), linear(fb)
        self.A_log = nn.Parameter(A[:nh].clone())
        self.dt_bias = nn.Parameter(dtb.clone())
        self.nh, self.d, self.lb = nh, d, lb

    def forward(self, x):
        B, T = x.shape[:2]
        f = (self.f_b_proj(self.f_a_proj(x)) + self.dt_bias).view(B, T, self.nh, self.d)
        return self.lb * torch.sigmoid(torch.exp(self.A_log).view(1, 1, self.nh, 1) * f)


class GatedO(nn.Module):
    """o_proj(a * sigmoid(g_proj x)) where x is set before the attention call."""

    def __init__(self, o, g):
        super().__init__()
        self.o, self.g = o, g
        self.x = None

    def forward(self, a):
        return self.o(a * torch.sigmoid(self.g(self.x)))


def make_hf_config(KL, c):
    try:
        hc = KL.KimiLinearConfig()
    except Exception as e:  # pragma: no cover - depends on the installed version
        note("config_default_error", repr(e))
        hc = KL.KimiLinearConfig.__new__(KL.KimiLinearConfig)
    kinds = ["full_attention" if k == "mla" else "linear_attention" for k in c.kind]
    vals = dict(
        hidden_size=c.hidden, num_attention_heads=c.mla_heads, num_key_value_heads=c.mla_heads,
        q_lora_rank=c.tc["q_lora_rank"], kv_lora_rank=c.kv_lora, qk_nope_head_dim=c.nope,
        qk_rope_head_dim=c.rope, v_head_dim=c.vdim, rms_norm_eps=c.eps, hidden_act="silu",
        attention_bias=False, attention_dropout=0.0, mlp_bias=False,
        linear_num_heads=c.kda_heads, linear_head_dim=c.kda_dim, linear_conv_kernel_dim=c.kda_conv,
        linear_attn_key_heads=c.kda_heads, linear_attn_key_head_dim=c.kda_dim,
        linear_attn_value_heads=c.kda_heads, linear_attn_value_head_dim=c.kda_dim,
        forget_gate_lower_bound=c.gate_lb, use_full_rank_output_gate=True,
        num_hidden_layers=c.n_layers, layer_types=kinds, first_k_dense_replace=c.first_dense,
        num_local_experts=c.n_experts, n_routed_experts=c.n_experts, num_experts_per_tok=c.top_k,
        n_group=1, topk_group=1, norm_topk_prob=True, routed_scaling_factor=c.routed_scale,
        moe_intermediate_size=c.tc["moe_intermediate_size"], n_shared_experts=c.n_shared,
        intermediate_size=c.tc["intermediate_size"], linear_attn_config=c.tc["linear_attn_config"],
    )
    for k, v in vals.items():
        try:
            setattr(hc, k, v)
        except Exception as e:
            note(f"config_set_{k}", repr(e))
    try:
        hc._attn_implementation = "eager"
    except Exception as e:
        note("config_attn_impl", repr(e))
    return hc


def hf_kda(KL, hc, m, l, x, dev, dt):
    c = m.cfg
    NH, D = c.kda_heads, c.kda_dim
    W = lambda n: m.lw(l, "self_attn." + n)
    mod = KL.KimiLinearDeltaAttention(hc, layer_idx=l)
    note(f"kda{l}_hf_params", {n: list(p.shape) for n, p in mod.named_parameters()})
    actions = []
    for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
        set_param(getattr(mod, n), "weight", W(n + ".weight"))
    if hasattr(mod, "conv1d"):
        set_param(mod.conv1d, "weight", torch.cat([W("q_conv1d.weight"), W("k_conv1d.weight"),
                                                   W("v_conv1d.weight")], 0))
        actions.append("conv1d packed q|k|v")
    else:
        for n in ("q_conv1d", "k_conv1d", "v_conv1d"):
            set_param(getattr(mod, n), "weight", W(n + ".weight"))
    A = W("A_log")[:NH]
    if hasattr(mod, "forget_gate"):
        src = inspect.getsource(type(mod.forget_gate))
        bounded = bool(re.search(r"lower_bound\s*\*|\*\s*self\.\w*lower_bound", src))
        actions.append(f"forget_gate {type(mod.forget_gate).__name__} replaced by K3Gate "
                       f"(HF gate has softplus={'softplus' in src.lower() or 'log(1.0 + torch.exp' in src}, "
                       f"lower_bound={bounded})")
        mod.forget_gate = K3Gate(W("f_a_proj.weight"), W("f_b_proj.weight"), A, W("dt_bias"), NH, D, c.gate_lb)
    elif hasattr(mod, "forget_gate_down"):
        set_param(mod.forget_gate_down, "weight", W("f_a_proj.weight"))
        set_param(mod.forget_gate_up, "weight", W("f_b_proj.weight"))
        set_param(mod, "A_log", A)
        set_param(mod, "dt_bias", W("dt_bias"))
        mod.forget_gate_lower_bound = c.gate_lb
        actions.append("HF's own lower-bounded gate (forget_gate_lower_bound=-5), per-head A_log")
    else:
        raise RuntimeError("no forget gate found")
    for n in ("b_proj", "beta_proj"):
        if hasattr(mod, n):
            set_param(getattr(mod, n), "weight", W("b_proj.weight"))
    if hasattr(mod, "g_a_proj"):
        mod.g_a_proj = nn.Identity()
        mod.g_b_proj = linear(W("g_proj.weight"))
        actions.append("low-rank g_a/g_b output gate replaced by full-rank g_proj")
    elif getattr(mod, "use_full_rank_output_gate", False) and hasattr(mod, "output_gate"):
        set_param(mod.output_gate, "weight", W("g_proj.weight"))
        actions.append("HF's own full-rank output_gate")
    else:
        raise RuntimeError("no output gate found")
    set_param(mod.o_norm, "weight", W("o_norm.weight"))
    act = getattr(mod.o_norm, "activation", None)
    eps = getattr(mod.o_norm, "variance_epsilon", None)
    actions.append(f"o_norm activation={act} eps={eps}")
    if act is not None and act != "sigmoid":
        mod.o_norm.activation = "sigmoid"
        actions.append("o_norm activation set to sigmoid (K3)")
    note(f"kda{l}_actions", actions)
    mod = mod.to(dev).to(dt)
    with torch.no_grad():
        out = mod(hidden_states=x.unsqueeze(0).to(dev).to(dt))
    if isinstance(out, tuple):
        out = out[0]
    return out[0]


def hf_kda_core(KL, m, l, x, dev):
    """Feed HF's chunked and recurrent delta-rule functions our conv'd q,k,v, gate and beta."""
    c = m.cfg
    NH, D = c.kda_heads, c.kda_dim
    T = x.shape[0]
    W = lambda n: m.lw(l, "self_attn." + n)
    q = R.causal_conv_silu(x @ W("q_proj.weight").T, W("q_conv1d.weight")).reshape(T, NH, D)
    k = R.causal_conv_silu(x @ W("k_proj.weight").T, W("k_conv1d.weight")).reshape(T, NH, D)
    v = R.causal_conv_silu(x @ W("v_proj.weight").T, W("v_conv1d.weight")).reshape(T, NH, D)
    f = (x @ W("f_a_proj.weight").T) @ W("f_b_proj.weight").T
    g = c.gate_lb * torch.sigmoid(torch.exp(W("A_log")[:NH]).reshape(1, NH, 1) * (f + W("dt_bias")).reshape(T, NH, D))
    beta = torch.sigmoid(x @ W("b_proj.weight").T)
    ref = R.kda_recurrence(R.l2n(q) / math.sqrt(D), R.l2n(k), v, torch.exp(g), beta)
    res = {}
    fns = {n: f for n, f in vars(KL).items() if callable(f) and re.search(r"(kda|delta_attention)", n, re.I)
           and not inspect.isclass(f)}
    note("kda_core_functions", sorted(fns))
    for name, fn in sorted(fns.items()):
        try:
            o = fn(q[None].to(dev), k[None].to(dev), v[None].to(dev), g=g[None].to(dev), beta=beta[None].to(dev),
                   initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=True)
            if isinstance(o, tuple):
                o = o[0]
            res[name] = diff(o[0], ref)
        except Exception as e:
            res[name] = "error: " + repr(e)[:300]
    return res


def hf_mla(KL, hc, m, l, x, dev, dt):
    c = m.cfg
    W = lambda n: m.lw(l, "self_attn." + n)
    mod = KL.KimiLinearAttention(hc, layer_idx=l)
    note(f"mla{l}_hf_params", {n: list(p.shape) for n, p in mod.named_parameters()})
    for n in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
        set_param(getattr(mod, n), "weight", W(n + ".weight"))
    actions = []
    for n in ("q_a_layernorm", "kv_a_layernorm"):
        ln = getattr(mod, n)
        set_param(ln, "weight", W(n + ".weight"))
        actions.append(f"{n} default eps {ln.variance_epsilon} -> {c.eps}")
        ln.variance_epsilon = c.eps
    gated = GatedO(mod.o_proj, linear(W("g_proj.weight")))
    mod.o_proj = gated
    actions.append("o_proj wrapped with K3's sigmoid(g_proj x) output gate")
    note(f"mla{l}_actions", actions)
    mod = mod.to(dev).to(dt)
    T = x.shape[0]
    xin = x.unsqueeze(0).to(dev).to(dt)
    gated.x = xin
    mask = torch.full((T, T), float("-inf"), dtype=dt, device=dev).triu(1)[None, None]
    with torch.no_grad():
        try:
            out = mod(hidden_states=xin, attention_mask=mask)
        except TypeError:
            out = mod(hidden_states=xin, attention_mask=mask, position_embeddings=None)
    if isinstance(out, tuple):
        out = out[0]
    return out[0]


def hf_router(mod_module, cls_name, cfg_obj, m, l, x, dev):
    c = m.cfg
    r = getattr(mod_module, cls_name)(cfg_obj)
    set_param(r, "weight", m.lw(l, "block_sparse_moe.gate.weight"))
    r.e_score_correction_bias.data = m.lw(l, "block_sparse_moe.gate.e_score_correction_bias").to(
        r.e_score_correction_bias.dtype).clone()
    r = r.to(dev)
    xin = x.to(dev).to(r.weight.dtype)
    with torch.no_grad():
        out = r(xin)
    idx = w = None
    if isinstance(out, tuple):
        ints = [t for t in out if torch.is_tensor(t) and not t.is_floating_point()]
        flts = [t for t in out if torch.is_tensor(t) and t.is_floating_point() and t.shape[-1] == c.top_k]
        if ints and flts:
            idx, w = ints[0], flts[0]
    if idx is None:
        logits = out if torch.is_tensor(out) else out[0]
        moe_cls = [v for k, v in vars(mod_module).items() if k.endswith("MoE") and inspect.isclass(v)][0]
        moe = moe_cls(cfg_obj).to(dev)
        moe.gate = r
        idx, w = moe.route_tokens_to_experts(logits)
    ids_ref, w_ref = m.route(l, x)
    same = 0
    wmax = 0.0
    for t in range(x.shape[0]):
        a = {int(i): float(v) for i, v in zip(idx[t].tolist(), w[t].tolist())}
        b = {int(i): float(v) for i, v in zip(ids_ref[t].tolist(), w_ref[t].tolist())}
        if set(a) == set(b):
            same += 1
            wmax = max(wmax, max(abs(a[i] - b[i]) for i in a))
    return {"tokens": x.shape[0], "same_expert_set": same, "max_weight_abs_diff": wmax}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--T", type=int, default=80)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    import transformers
    note("versions", {"torch": torch.__version__, "transformers": transformers.__version__, "device": dev,
                      "gpu": torch.cuda.get_device_name(0) if dev == "cuda" else None})
    import transformers.models.kimi_linear.modeling_kimi_linear as KL
    src = inspect.getsource(KL)
    with open(os.path.join(a.out, "modeling_kimi_linear.py"), "w") as f:
        f.write(src)
    keys = [ln.strip() for ln in src.splitlines()
            if re.search(r"^class |softplus|lower_bound|g_a_proj|g_b_proj|self\.activation =|def l2norm|"
                         r"inv_norm =|variance_epsilon = eps|use_full_rank", ln)]
    note("kimi_linear_source_summary", keys[:60])

    m = R.Model(a.model)
    c = m.cfg
    ids = [(i * 37 + 11) % (c.vocab - 256) for i in range(a.T)]
    inputs = {}
    kda0, mla0, moe0 = m.kda, m.mla, m.moe

    def rec(kind, fn):
        def w(l, x, *r, **k):
            inputs.setdefault((kind, l), x.clone())
            return fn(l, x, *r, **k)
        return w

    m.kda, m.mla, m.moe = rec("kda", kda0), rec("mla", mla0), rec("moe", moe0)
    m.forward(ids)
    m.kda, m.mla, m.moe = kda0, mla0, moe0
    hc = make_hf_config(KL, c)

    kda_layers = [l for l in range(c.n_layers) if c.kind[l] == "kda"][:2]
    mla_layers = [l for l in range(c.n_layers) if c.kind[l] == "mla"]
    for l in kda_layers:
        x = inputs[("kda", l)]
        ref = m.kda(l, x)
        for dt in (torch.float64, torch.float32):
            try:
                note(f"kda{l}_module_{str(dt)[6:]}", diff(hf_kda(KL, hc, m, l, x, dev, dt), ref))
            except Exception:
                note(f"kda{l}_module_{str(dt)[6:]}", "error: " + traceback.format_exc()[-1500:])
        try:
            note(f"kda{l}_core", hf_kda_core(KL, m, l, x, dev))
        except Exception:
            note(f"kda{l}_core", "error: " + traceback.format_exc()[-1500:])
    for l in mla_layers:
        x = inputs[("mla", l)]
        ref = m.mla(l, x)
        for dt in (torch.float64, torch.float32):
            try:
                note(f"mla{l}_module_{str(dt)[6:]}", diff(hf_mla(KL, hc, m, l, x, dev, dt), ref))
            except Exception:
                note(f"mla{l}_module_{str(dt)[6:]}", "error: " + traceback.format_exc()[-1500:])
    moe_layers = [l for l in range(c.n_layers) if l >= c.first_dense]
    try:
        import transformers.models.deepseek_v3.modeling_deepseek_v3 as DS
        dcfg = DS.DeepseekV3Config(hidden_size=c.hidden, n_routed_experts=c.n_experts,
                                   num_experts_per_tok=c.top_k, n_group=1, topk_group=1, norm_topk_prob=True,
                                   routed_scaling_factor=c.routed_scale, moe_intermediate_size=32,
                                   n_shared_experts=1, intermediate_size=64, num_hidden_layers=2)
        for l in moe_layers:
            note(f"router{l}_deepseek_v3", hf_router(DS, "DeepseekV3TopkRouter", dcfg, m, l, inputs[("moe", l)], dev))
    except Exception:
        note("router_deepseek_v3", "error: " + traceback.format_exc()[-1500:])
    try:
        for l in moe_layers[:2]:
            note(f"router{l}_kimi_linear", hf_router(KL, "KimiLinearTopkRouter", hc, m, l, inputs[("moe", l)], dev))
    except Exception:
        note("router_kimi_linear", "error: " + traceback.format_exc()[-1500:])
    with open(os.path.join(a.out, "crosscheck.json"), "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Self-checks of the generator and the reference, each against an independent
computation (used by tests/e2e/test_reference_selfcheck.sh).

  selfcheck.py --models DIR --golden DIR

DIR holds tiny-s1, tiny-s2, tiny-s3 written by `deltafin make-model`.
Checks:
  - every generated file matches the golden sha256 (else: "generator changed");
  - the generator's weight recipe (splitmix64/xoshiro256**, integer uniform,
    bf16 round-to-nearest-even, A_log padding, MXFP4 quantisation) re-derived
    here in plain Python reproduces the checkpoint bytes;
  - MXFP4 dequantisation of the reference == bit-level decoding here;
  - KDA recurrence == the 2-step formula written out by hand; conv window order;
  - MLA at position 0 returns v0; AttnRes corner cases; SiTU; router ties;
  - the reference reproduces the golden logits and greedy ids.
Prints 'N passed, M failed' and exits non-zero on any failure.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402
import k3_ref as R  # noqa: E402

M64 = (1 << 64) - 1
PASSED, FAILED = [], []


def check(name, ok, detail=""):
    (PASSED if ok else FAILED).append(name)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{(': ' + detail) if detail else ''}", flush=True)


# ---------------------------------------------------------------- generator recipe


def splitmix(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


class Xoshiro:
    def __init__(self, seed, name):
        h = 0xCBF29CE484222325
        for b in name.encode():
            h = ((h ^ b) * 0x100000001B3) & M64
        _, x = splitmix(seed ^ 0x5EED5EED5EED5EED)
        st = x ^ h
        self.s = []
        for _ in range(4):
            st, v = splitmix(st)
            self.s.append(v)

    def next(self):
        s = self.s
        rotl = lambda x, k: ((x << k) | (x >> (64 - k))) & M64
        out = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return out

    def uniform(self, a):
        i = (self.next() >> 40) - (1 << 23)
        return float(i) * (a * 2.0 ** -23)


def bf16_bits(x64):
    f = np.array([x64], dtype=np.float64).astype(np.float32)
    b = int(f.view(np.uint32)[0])
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def recipe_values(seed, name, n, a, off=0.0, used=None):
    r = Xoshiro(seed, name)
    out = []
    for i in range(n):
        v = off + r.uniform(a)
        if used is not None and i >= used:
            v = 0.0
        out.append(v)
    return out


E2M1_MAG = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def quant_group(xs):
    """Smallest power-of-two scale with max|x|/scale <= 6; nearest E2M1, ties to the even code."""
    m = max(abs(x) for x in xs)
    e = -127
    while m / 2.0 ** e > 6.0:
        e += 1
    vals = []
    for x in xs:
        y = abs(x) / 2.0 ** e
        best = min(range(8), key=lambda c: (abs(E2M1_MAG[c] - y), c & 1))
        vals.append(math.copysign(E2M1_MAG[best] * 2.0 ** e, x))
    return e + 127, vals


def check_recipe(model_dir, seed, cfg):
    ck = R.Checkpoint(model_dir)
    H = cfg.hidden
    P = "language_model.model."
    amp = lambda g, fan: g * math.sqrt(3.0 / fan)
    cases = [  # name, n (prefix checked), a, off, used, dtype
        (P + "embed_tokens.weight", 2048, 1.0, 0.0, None),
        (P + "layers.1.self_attn.q_proj.weight", cfg.kda_heads * cfg.kda_dim * H, amp(1.0, H), 0.0, None),
        (P + "layers.1.mlp_res_proj.weight", H, amp(1.5, H), 0.0, None),
        (P + "norm.weight", H, 0.1, 1.0, None),
        (P + "layers.2.block_sparse_moe.gate.weight", cfg.n_experts * H, amp(2.0, H), 0.0, None),
        ("language_model.lm_head.weight", 4096, amp(2.5, H), 0.0, None),
        (P + "layers.0.self_attn.A_log", max(cfg.kda_heads, cfg.kda_dim), 1.0, 0.0, cfg.kda_heads),
        (P + "layers.0.self_attn.dt_bias", cfg.kda_heads * cfg.kda_dim, 1.5, -2.5, None),
        (P + "layers.0.self_attn.k_conv1d.weight", cfg.kda_heads * cfg.kda_dim * cfg.kda_conv,
         amp(1.0, cfg.kda_conv), 0.0, None),
        (P + "layers.5.block_sparse_moe.gate.e_score_correction_bias", cfg.n_experts, 0.1, 0.0, None),
    ]
    for name, n, a, off, used in cases:
        dt, shape, buf = ck.raw(name)
        want = recipe_values(seed, name, n, a, off, used)
        if dt == "BF16":
            got = np.frombuffer(buf, dtype="<u2")[:n].tolist()
            exp = [bf16_bits(v) for v in want]
        else:
            got = np.frombuffer(buf, dtype="<f4")[:n].tolist()
            exp = np.array(want, dtype=np.float64).astype(np.float32).tolist()
        bad = sum(1 for x, y in zip(got, exp) if x != y)
        check(f"s{seed} recipe {name.split('model.')[-1]} ({dt}, {n} values)", bad == 0, f"{bad} differ" if bad else "")
    # expert 3 of layer 1: quantisation re-derived here
    L, M = cfg.tc["routed_expert_hidden_size"], cfg.tc["moe_intermediate_size"]
    for w, rows, cols in (("w1", M, L), ("w2", L, M)):
        base = f"{P}layers.1.block_sparse_moe.experts.3.{w}."
        r = Xoshiro(seed, base + "weight_packed")
        a = amp(1.0, cols)
        deq = R.mxfp4_dequant(ck.get(base + "weight_packed"), ck.get(base + "weight_scale")).numpy()
        scales = ck.get(base + "weight_scale")
        bad = 0
        for i in range(rows):
            x = [float(np.float32(r.uniform(a))) for _ in range(cols)]
            for g in range(cols // 32):
                s, vals = quant_group(x[32 * g:32 * g + 32])
                if s != scales[i, g] or any(v != d for v, d in zip(vals, deq[i, 32 * g:32 * g + 32])):
                    bad += 1
        check(f"s{seed} recipe expert 1.3.{w} MXFP4 quantisation", bad == 0, f"{bad} groups differ" if bad else "")


# ---------------------------------------------------------------- reference invariants


def check_mxfp4_bits(model_dir):
    ck = R.Checkpoint(model_dir)
    base = "language_model.model.layers.4.block_sparse_moe.experts.7.w2."
    _, (rows, half), pk = ck.raw(base + "weight_packed")
    _, _, sc = ck.raw(base + "weight_scale")
    deq = R.mxfp4_dequant(ck.get(base + "weight_packed"), ck.get(base + "weight_scale")).numpy()
    cols = half * 2
    bad = 0
    for i in range(rows):
        for j in range(cols):
            byte = pk[i * half + j // 2]
            code = (byte >> 4) if (j & 1) else (byte & 15)
            sign = -1.0 if code & 8 else 1.0
            e, m = (code >> 1) & 3, code & 1
            mag = (m * 0.5) if e == 0 else (1.0 + m * 0.5) * 2.0 ** (e - 1)
            s = sc[i * (cols // 32) + j // 32]
            v = sign * mag * struct.unpack("<f", struct.pack("<I", s << 23))[0]
            if v != deq[i, j]:
                bad += 1
    check("mxfp4 dequant == bit-level E2M1 x E8M0 decode", bad == 0, f"{bad} differ" if bad else "")


def check_kda_unrolled():
    g = torch.Generator().manual_seed(5)
    NH, D = 2, 3
    q, k, v = [torch.randn(2, NH, D, generator=g, dtype=torch.float64) for _ in range(3)]
    k = R.l2n(k)
    a = torch.rand(2, NH, D, generator=g, dtype=torch.float64)
    b = torch.rand(2, NH, generator=g, dtype=torch.float64)
    o = R.kda_recurrence(q, k, v, a, b)
    worst = 0.0
    for h in range(NH):
        # step 1 from zero state: S1 = b1 k1 v1^T, o1 = S1^T q1
        S1 = [[b[0, h] * k[0, h, i] * v[0, h, j] for j in range(D)] for i in range(D)]
        o1 = [sum(S1[i][j] * q[0, h, i] for i in range(D)) for j in range(D)]
        # step 2: decay rows, read u = S^T k2, write b2 k2 (v2 - u)^T, read o2 = S2^T q2
        Sd = [[a[1, h, i] * S1[i][j] for j in range(D)] for i in range(D)]
        u = [sum(Sd[i][j] * k[1, h, i] for i in range(D)) for j in range(D)]
        S2 = [[Sd[i][j] + k[1, h, i] * b[1, h] * (v[1, h, j] - u[j]) for j in range(D)] for i in range(D)]
        o2 = [sum(S2[i][j] * q[1, h, i] for i in range(D)) for j in range(D)]
        for j in range(D):
            worst = max(worst, abs(float(o[0, h, j] - o1[j])), abs(float(o[1, h, j] - o2[j])))
    check("KDA recurrence == 2-step unrolled formula", worst < 1e-12, f"max diff {worst:.2e}")


def check_conv():
    x = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    w = torch.tensor([[[0.5, -1.0, 2.0, 3.0]]], dtype=torch.float64)  # taps oldest..newest
    out = R.causal_conv_silu(x, w)
    silu = lambda z: z / (1 + math.exp(-z))
    want = [silu(1 * 3.0), silu(1 * 2.0 + 2 * 3.0), silu(1 * -1.0 + 2 * 2.0 + 3 * 3.0)]
    worst = max(abs(float(out[t, 0]) - want[t]) for t in range(3))
    check("causal conv: last tap multiplies the newest input, zeros before the start", worst < 1e-12)


def check_small_blocks():
    eps = 1e-5
    v = [torch.randn(3, 8, dtype=torch.float64) for _ in range(3)]
    n = torch.ones(8, dtype=torch.float64)
    mean = R.attn_res(v, n, torch.zeros(1, 8, dtype=torch.float64), eps)
    check("AttnRes with r = 0 is the plain mean of the raw vectors",
          float((mean - (v[0] + v[1] + v[2]) / 3).abs().max()) < 1e-14)
    one = R.attn_res(v[:1], n, torch.randn(1, 8, dtype=torch.float64), eps)
    check("AttnRes of one vector is that vector", float((one - v[0]).abs().max()) < 1e-14)
    gs = [-30.0, -2.0, -0.1, 0.0, 0.7, 5.0, 40.0]
    us = [-60.0, -1.0, 0.0, 0.3, 12.0, 100.0]
    worst = 0.0
    for gg in gs:
        for uu in us:
            want = (4 * math.tanh(gg / 4) / (1 + math.exp(-gg))) * (25 * math.tanh(uu / 25))
            got = float(R.situ(torch.tensor(gg, dtype=torch.float64), torch.tensor(uu, dtype=torch.float64)))
            worst = max(worst, abs(got - want))
    check("SiTU == 4 tanh(g/4) sigmoid(g) * 25 tanh(u/25)", worst < 1e-12, f"max diff {worst:.1e}")


def check_router_ties(model_dir):
    m = R.Model(model_dir)
    E, H = m.cfg.n_experts, m.cfg.hidden
    # all-equal scores and zero bias: the selection must be experts 0..k-1
    m._w["layers.1.block_sparse_moe.gate.weight"] = torch.zeros(E, H, dtype=torch.float64)
    m._w["layers.1.block_sparse_moe.gate.e_score_correction_bias"] = torch.zeros(E, dtype=torch.float64)
    ids, w = m.route(1, torch.randn(2, H, dtype=torch.float64))
    k = m.cfg.top_k
    check("router ties go to the lower expert id", ids.tolist() == [list(range(k))] * 2)
    check("router weights renormalise the unbiased scores", float((w - 1.0 / k).abs().max()) < 1e-15)
    # bias only selects: a large bias on expert E-1 picks it, its weight stays the unbiased share
    m._w["layers.1.block_sparse_moe.gate.e_score_correction_bias"] = torch.zeros(E, dtype=torch.float64)
    m._w["layers.1.block_sparse_moe.gate.e_score_correction_bias"][E - 1] = 1.0
    ids, w = m.route(1, torch.randn(1, H, dtype=torch.float64))
    check("router bias selects but does not weight", ids[0][0] == E - 1 and float((w - 1.0 / k).abs().max()) < 1e-15)


def check_mla_first(model_dir):
    m = R.Model(model_dir)
    c = m.cfg
    l = c.kind.index("mla")
    x = torch.randn(1, c.hidden, dtype=torch.float64)
    out = m.mla(l, x)
    W = lambda n: m.lw(l, "self_attn." + n)
    cc = x @ W("kv_a_proj_with_mqa.weight").T
    lat = R.rms(cc[:, :c.kv_lora], W("kv_a_layernorm.weight"), c.eps)
    v = (lat @ W("kv_b_proj.weight").T).reshape(1, c.mla_heads, c.nope + c.vdim)[..., c.nope:].reshape(1, -1)
    want = (v * torch.sigmoid(x @ W("g_proj.weight").T)) @ W("o_proj.weight").T
    check("MLA at the first position returns its own gated v", float((out - want).abs().max()) < 1e-12)


def check_goldens(models, gold):
    for seed in (1, 2, 3):
        d = os.path.join(models, f"tiny-s{seed}")
        fp = golden.fingerprint(d)
        with open(os.path.join(gold, f"tiny-s{seed}-short.json")) as f:
            g = json.load(f)
        want = g["model"]["sha256"]
        for fn in sorted(set(want) | set(fp)):
            if fn == "config.json" and fp.get(fn) != want.get(fn):
                with open(os.path.join(d, fn)) as f:
                    same = json.load(f) == g["model"]["config"]
                check(f"s{seed} config.json has the golden content", same,
                      "" if same else "generator changed: config differs")
                continue
            check(f"s{seed} {fn} sha256 matches the golden", fp.get(fn) == want.get(fn),
                  "" if fp.get(fn) == want.get(fn) else
                  "generator changed (regenerate goldens with tools/reference/make_goldens.sh if intended)")


def check_reference_reproduces(models, gold):
    with open(os.path.join(gold, "tiny-s1-short.json")) as f:
        g = json.load(f)
    res = R.run(os.path.join(models, "tiny-s1"), g["prompt_ids"], 8, True)
    lg, gl = np.array(res["logits"]), np.array(g["logits"])
    err = float(np.abs(lg - gl).max())
    check("reference reproduces the golden logits (s1 short)", err < 1e-9, f"max diff {err:.1e}")
    check("reference reproduces the golden greedy ids (first 8)", res["greedy_ids"] == g["greedy_ids"][:8])
    h = np.array(res["hidden"][-1]["h"])
    hg = np.array(g["hidden"][-1]["h"])
    check("reference reproduces the golden hidden states", float(np.abs(h - hg).max()) < 1e-9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--golden", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    check_goldens(a.models, a.golden)
    for seed in (1, 2):
        d = os.path.join(a.models, f"tiny-s{seed}")
        check_recipe(d, seed, R.Config(d))
    d1 = os.path.join(a.models, "tiny-s1")
    check_mxfp4_bits(d1)
    check_kda_unrolled()
    check_conv()
    check_small_blocks()
    check_router_ties(d1)
    check_mla_first(d1)
    check_reference_reproduces(a.models, a.golden)
    print(f"{len(PASSED)} passed, {len(FAILED)} failed")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()

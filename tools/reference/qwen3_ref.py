#!/usr/bin/python3
"""Independent float64 reference of the dense Qwen3 decoder (deltafin's draft model).

Written from the architecture description (not from transformers' code):
  x = embed[ids]
  per layer:  n = rms(x) * input_layernorm
              q, k, v = n Wq^T, n Wk^T, n Wv^T       (heads x head_dim, kv heads shared by groups)
              q, k = rms(q) * q_norm, rms(k) * k_norm (per head, before RoPE)
              q, k = rope(q), rope(k)                 (rotate-half: pairs (i, i + d/2))
              a = softmax(q k^T / sqrt(d), causal) v
              x = x + a Wo^T
              m = rms(x) * post_attention_layernorm
              x = x + (silu(m Wg^T) * (m Wu^T)) Wd^T
  logits = (rms(x) * norm) E^T (E = lm_head, or the embedding when tied)

The safetensors reader is numpy on the raw bytes (bf16 widened exactly), so the
reference shares no code with deltafin or transformers.

usage:
  qwen3_ref.py logits --model DIR --ids 1,2,3 --out FILE.npy [--dtype float64|float32]
  qwen3_ref.py compare --model DIR --ids LIST --c-logits FILE.f32 [--int8]
      every row of deltafin's dump (raw float32, one vocab row per id) against
      the float64 reference; the tolerance is derived from fp32 error: the
      same reference run in float32 gives the error an fp32 forward makes on
      this input, and deltafin's may be at most TOL_FACTOR times that (plus a
      floor of a few ulps of the logit scale). Exits 1 when it is exceeded or a
      greedy choice with a margin above the tolerance differs.
  qwen3_ref.py check-fixture --model DIR --fixture F.json --c-logits FILE.f32
      deltafin's logits against a committed fixture (tests/fixtures/qwen3).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

TOL_FACTOR = 4.0

_NP = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, t in hdr.items():
            if name == "__metadata__":
                continue
            b, e = t["data_offsets"]
            f.seek(base + b)
            raw = f.read(e - b)
            if t["dtype"] == "BF16":
                u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
                a = u.view(np.float32)
            else:
                a = np.frombuffer(raw, dtype=_NP[t["dtype"]])
            out[name] = a.reshape(t["shape"])
    return out


def load(dirname):
    cfg = json.load(open(os.path.join(dirname, "config.json")))
    idx = os.path.join(dirname, "model.safetensors.index.json")
    w = {}
    if os.path.exists(idx):
        for shard in sorted(set(json.load(open(idx))["weight_map"].values())):
            w.update(read_safetensors(os.path.join(dirname, shard)))
    else:
        w = read_safetensors(os.path.join(dirname, "model.safetensors"))
    return cfg, w


PROJ = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def int8_rows(w):
    """Row-int8 as deltafin --int8 stores it (scale = absmax/127 in fp32, codes
    round-half-even of the fp32 quotient, clamped), given back dequantized in
    float64 (exact: code x scale)."""
    w = np.asarray(w, dtype=np.float32)
    s = (np.abs(w).max(axis=1) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.rint(w / s[:, None])
    v = np.nan_to_num(np.clip(v, -127, 127), nan=0.0)
    v[s == 0] = 0
    return v.astype(np.float64) * s.astype(np.float64)[:, None]


def quantize_int8(cfg, w):
    """The checkpoint as deltafin sees it after df_qwen3_quantize_int8: every
    projection and the lm_head (a copy when tied; the embedding stays exact)."""
    w = dict(w)
    for i in range(cfg["num_hidden_layers"]):
        for p in PROJ:
            n = "model.layers.%d.%s.weight" % (i, p)
            w[n] = int8_rows(w[n])
    tied = cfg.get("tie_word_embeddings", False)
    w["lm_head.weight"] = int8_rows(w["model.embed_tokens.weight" if tied else "lm_head.weight"])
    return dict(cfg, tie_word_embeddings=False), w


def rope_theta(cfg):
    if cfg.get("rope_theta") is not None:
        return float(cfg["rope_theta"])
    return float(cfg["rope_parameters"]["rope_theta"])


class Qwen3Ref:
    def __init__(self, cfg, w, dtype=torch.float64, device="cpu"):
        self.cfg, self.dt, self.dev = cfg, dtype, device
        self.H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg.get("num_key_value_heads") or self.nh
        self.hd = cfg.get("head_dim") or self.H // self.nh
        self.eps = float(cfg["rms_norm_eps"])
        self.theta = rope_theta(cfg)
        self.L = cfg["num_hidden_layers"]

        def T(name):
            return torch.from_numpy(np.ascontiguousarray(w[name])).to(device=device, dtype=dtype)

        self.embed = T("model.embed_tokens.weight")
        self.norm = T("model.norm.weight")
        self.head = self.embed if cfg.get("tie_word_embeddings", False) else T("lm_head.weight")
        self.layers = []
        for i in range(self.L):
            p = "model.layers.%d." % i
            self.layers.append({k: T(p + n) for k, n in [
                ("q", "self_attn.q_proj.weight"), ("k", "self_attn.k_proj.weight"),
                ("v", "self_attn.v_proj.weight"), ("o", "self_attn.o_proj.weight"),
                ("qn", "self_attn.q_norm.weight"), ("kn", "self_attn.k_norm.weight"),
                ("g", "mlp.gate_proj.weight"), ("u", "mlp.up_proj.weight"),
                ("d", "mlp.down_proj.weight"), ("n1", "input_layernorm.weight"),
                ("n2", "post_attention_layernorm.weight")]})

    def rms(self, x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, pos):
        # x: [T, heads, d]; angles in float64 whatever the run's dtype
        d = self.hd
        i = torch.arange(d // 2, dtype=torch.float64)
        inv = self.theta ** (-2.0 * i / d)
        ang = pos.to(torch.float64)[:, None] * inv[None, :]
        c = torch.cos(ang).to(self.dt).to(self.dev)[:, None, :]
        s = torch.sin(ang).to(self.dt).to(self.dev)[:, None, :]
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)

    @torch.no_grad()
    def forward(self, ids):
        T = len(ids)
        pos = torch.arange(T)
        x = self.embed[torch.tensor(ids, device=self.dev)]
        mask = torch.ones(T, T, dtype=torch.bool, device=self.dev).tril()
        g = self.nh // self.nkv
        for l in self.layers:
            n = self.rms(x, l["n1"])
            q = (n @ l["q"].T).view(T, self.nh, self.hd)
            k = (n @ l["k"].T).view(T, self.nkv, self.hd)
            v = (n @ l["v"].T).view(T, self.nkv, self.hd)
            q = self.rope(self.rms(q, l["qn"]), pos)
            k = self.rope(self.rms(k, l["kn"]), pos)
            out = torch.empty(T, self.nh, self.hd, dtype=self.dt, device=self.dev)
            for h in range(self.nh):
                s = (q[:, h, :] @ k[:, h // g, :].T) / math.sqrt(self.hd)
                s = s.masked_fill(~mask, float("-inf"))
                p = torch.softmax(s, dim=-1)
                out[:, h, :] = p @ v[:, h // g, :]
            x = x + out.reshape(T, self.nh * self.hd) @ l["o"].T
            m = self.rms(x, l["n2"])
            gate = m @ l["g"].T
            x = x + ((gate * torch.sigmoid(gate)) * (m @ l["u"].T)) @ l["d"].T
        return self.rms(x, self.norm) @ self.head.T


def parse_ids(s):
    return [int(t) for t in s.replace(" ", "").split(",") if t]


def tolerance(ref64, ref32):
    """fp32 error of an independent fp32 forward on this input, scaled."""
    scale = float(np.abs(ref64).max())
    err32 = float(np.abs(ref32 - ref64).max())
    floor = 8 * scale * 2.0 ** -24
    return TOL_FACTOR * err32 + floor, err32, scale


def greedy_check(ref64, c, tol):
    bad = 0
    for r in range(ref64.shape[0]):
        top2 = np.sort(ref64[r])[-2:]
        if top2[1] - top2[0] > 2 * tol and int(np.argmax(c[r])) != int(np.argmax(ref64[r])):
            bad += 1
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["logits", "compare", "check-fixture"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids")
    ap.add_argument("--out")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--c-logits")
    ap.add_argument("--fixture")
    ap.add_argument("--int8", action="store_true",
                    help="compare against the row-int8 weights deltafin --int8 uses")
    a = ap.parse_args()
    if a.cmd == "check-fixture":  # needs only the vocabulary size
        cfg, w = json.load(open(os.path.join(a.model, "config.json"))), None
    else:
        cfg, w = load(a.model)
        if a.int8:
            cfg, w = quantize_int8(cfg, w)
    V = cfg["vocab_size"]
    if a.cmd == "logits":
        m = Qwen3Ref(cfg, w, getattr(torch, a.dtype))
        np.save(a.out, m.forward(parse_ids(a.ids)).numpy())
        return 0
    if a.cmd == "compare":
        ids = parse_ids(a.ids)
        ref64 = Qwen3Ref(cfg, w, torch.float64).forward(ids).numpy()
        ref32 = Qwen3Ref(cfg, w, torch.float32).forward(ids).double().numpy()
        c = np.fromfile(a.c_logits, dtype="<f4").astype(np.float64)
        if c.size != len(ids) * V:
            print("FAIL: deltafin dumped %d floats, expected %d rows x %d" % (c.size, len(ids), V))
            return 1
        c = c.reshape(len(ids), V)
        tol, err32, scale = tolerance(ref64, ref32)
        err = np.abs(c - ref64)
        row = err.max(axis=1)
        bad_greedy = greedy_check(ref64, c, tol)
        print("rows %d vocab %d | logit scale %.4g | fp32-reference max err %.3g | deltafin max err "
              "%.3g (row %d), mean %.3g | tolerance %.3g | argmax agree %d/%d" % (
                  len(ids), V, scale, err32, row.max(), int(row.argmax()), err.mean(), tol,
                  int((c.argmax(1) == ref64.argmax(1)).sum()), len(ids)))
        if row.max() > tol or bad_greedy:
            print("FAIL: max error %.3g > tolerance %.3g or %d greedy choices with a clear margin "
                  "differ" % (row.max(), tol, bad_greedy))
            return 1
        print("PASS")
        return 0
    # check-fixture
    fx = json.load(open(a.fixture))
    ids = fx["ids"]
    c = np.fromfile(a.c_logits, dtype="<f4").astype(np.float64).reshape(len(ids), V)
    fails = 0
    for src in fx["references"]:
        r = fx["references"][src]
        tol = r["tolerance"]
        worst = 0.0
        for row in r["rows"]:
            t = row["pos"]
            for i, v in zip(row["top_ids"], row["top_logits"]):
                worst = max(worst, abs(c[t, i] - v))
            if int(np.argmax(c[t])) != row["top_ids"][0] and row["margin"] > 2 * tol:
                fails += 1
                print("FAIL: %s pos %d: deltafin argmax %d, fixture %d" % (
                    src, t, int(np.argmax(c[t])), row["top_ids"][0]))
            s = float(c[t].sum())
            if abs(s - row["sum"]) > tol * V ** 0.5 * 4:
                fails += 1
                print("FAIL: %s pos %d: logit sum %.6f vs %.6f" % (src, t, s, row["sum"]))
        ok = worst <= tol
        print("%s: top-logit max err %.3g (tolerance %.3g) %s" % (src, worst, tol,
                                                               "ok" if ok else "FAIL"))
        fails += not ok
    print("PASS" if not fails else "FAIL")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

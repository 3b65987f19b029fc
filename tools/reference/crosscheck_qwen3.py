#!/usr/bin/env python3
"""Cross-check of qwen3_ref.py (and so of deltafin's Qwen3 draft forward)
against transformers' Qwen3ForCausalLM, meant for the GPU machine.

Models: models/nano-draft (trained, 1.6M parameters) and a checkpoint generated
here by gen_qwen3.py --qwen3-0.6b (the real Qwen3-0.6B dimensions, seeded
random weights; generated on the device so the repository stays small; its
sha256 is recorded so a local copy can be checked to be the same bytes).

For each model and a fixed id sequence it computes every position's logits with
  - qwen3_ref.py in float64,
  - transformers in float64 and in float32 (eager attention, TF32 off),
and writes OUT/qwen3_<name>.json: the ids, the full-vocab max errors between
the sources, and per position the top logits, sum and sum of squares of each
source (a fixture, not whole vocab rows).

  crosscheck_qwen3.py --out DIR [--skip-big]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import qwen3_ref  # noqa: E402

TOPK = 8
# nano-draft: the ids of "Once upon a time, there was a little" through
# deltafin's tokenizer followed by the greedy continuation (tests/e2e/test_qwen3_ref.sh)
NANO_IDS = [79, 110, 347, 654, 264, 260, 781, 44, 889, 700, 260, 337, 281, 1500, 719, 10, 262,
            277, 475, 45, 119, 371, 410, 307, 267]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 24), b""):
            h.update(b)
    return h.hexdigest()


def hf_logits(d, ids, dtype, dev):
    from transformers import AutoModelForCausalLM
    try:
        m = AutoModelForCausalLM.from_pretrained(d, dtype=dtype, attn_implementation="eager")
    except TypeError:
        m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=dtype, attn_implementation="eager")
    m = m.to(dev).eval()
    with torch.no_grad():
        out = m(torch.tensor([ids], device=dev)).logits[0].double().cpu().numpy()
    cls = type(m).__name__
    del m
    torch.cuda.empty_cache() if dev == "cuda" else None
    return out, cls


def summarize(name, d, ids, dev, extra):
    t0 = time.time()
    cfg, w = qwen3_ref.load(d)
    ref = qwen3_ref.Qwen3Ref(cfg, w, torch.float64, dev).forward(ids).cpu().numpy()
    ref32 = qwen3_ref.Qwen3Ref(cfg, w, torch.float32, dev).forward(ids).double().cpu().numpy()
    del w
    try:
        hf64, cls = hf_logits(d, ids, torch.float64, dev)
    except Exception as ex:
        # transformers 5 reads rope_theta from rope_parameters; should it refuse
        # the 4.x layout the releases have, retry with the 5.x one and say so
        print("transformers refused %s/config.json (%r): retrying with rope_parameters" % (d, ex))
        c = json.load(open(os.path.join(d, "config.json")))
        c["rope_parameters"] = {"rope_theta": c.pop("rope_theta"), "rope_type": "default"}
        c.pop("rope_scaling", None)
        json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
        extra["config_rewritten_for_transformers"] = repr(ex)
        hf64, cls = hf_logits(d, ids, torch.float64, dev)
    hf32, _ = hf_logits(d, ids, torch.float32, dev)
    srcs = {"qwen3_ref_f64": ref, "transformers_f64": hf64, "transformers_f32": hf32,
            "qwen3_ref_f32": ref32}
    scale = float(np.abs(ref).max())
    err = {}
    for a in srcs:
        for b in srcs:
            if a < b:
                err["%s vs %s" % (a, b)] = float(np.abs(srcs[a] - srcs[b]).max())
    e32 = float(np.abs(hf32 - hf64).max())
    floor = 8 * scale * 2.0 ** -24
    refs = {}
    for s in ["qwen3_ref_f64", "transformers_f64", "transformers_f32"]:
        x = srcs[s]
        # an fp32 forward (deltafin) may differ from a float64 source by a few
        # times transformers' own fp32 error, from the fp32 one by twice that
        tol = (4 if s.endswith("f64") else 8) * e32 + floor
        rows = []
        for t in range(len(ids)):
            top = np.argsort(-x[t])[:TOPK]
            rows.append({"pos": t, "top_ids": [int(i) for i in top],
                         "top_logits": [float(x[t, i]) for i in top],
                         "margin": float(x[t, top[0]] - x[t, top[1]]),
                         "sum": float(x[t].sum()), "sumsq": float((x[t] ** 2).sum())})
        refs[s] = {"tolerance": tol, "rows": rows}
    agree = {s: int((srcs[s].argmax(1) == ref.argmax(1)).sum()) for s in srcs}
    out = {"model": name, "ids": ids, "vocab": int(cfg["vocab_size"]), "logit_scale": scale,
           "max_abs_err_full_vocab": err, "argmax_agree_with_ref64": agree,
           "transformers_class": cls, "torch": torch.__version__, "device": dev,
           "seconds": round(time.time() - t0, 1), "references": refs}
    out.update(extra)
    import transformers
    out["transformers"] = transformers.__version__
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--skip-big", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    root = os.path.dirname(os.path.dirname(HERE))
    jobs = [("nano-draft", os.path.join(root, "models", "nano-draft"), NANO_IDS, {})]
    if not a.skip_big:
        big = os.path.join(os.environ.get("TMPDIR", "/tmp"), "qwen3-0.6b-random")
        t0 = time.time()
        subprocess.check_call([sys.executable, os.path.join(HERE, "gen_qwen3.py"), big,
                               "--qwen3-0.6b", "--seed", "1", "--std", "0.02"])
        rng = np.random.default_rng(2)
        ids = [int(i) for i in rng.integers(0, 151936, 32)]
        jobs.append(("qwen3-0.6b-random-s1", big, ids, {
            "generator": "tools/reference/gen_qwen3.py DIR --qwen3-0.6b --seed 1 --std 0.02",
            "generate_seconds": round(time.time() - t0, 1),
            "model_safetensors_sha256": sha256(os.path.join(big, "model.safetensors"))}))
    for name, d, ids, extra in jobs:
        try:
            r = summarize(name, d, ids, dev, extra)
        except Exception as ex:  # report, keep going with the next model
            import traceback
            traceback.print_exc()
            r = {"model": name, "error": repr(ex)}
        p = os.path.join(a.out, "qwen3_%s.json" % name)
        with open(p + ".tmp", "w") as f:
            json.dump(r, f, indent=1)
        os.replace(p + ".tmp", p)
        print(json.dumps({k: v for k, v in r.items() if k != "references"}, indent=1))


if __name__ == "__main__":
    main()

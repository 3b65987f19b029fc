#!/usr/bin/python3
"""Golden fixtures from the reference (tests/fixtures/golden/).

  golden.py write --model DIR --preset tiny --seed N --out DIR [--hidden-prompt short]
  golden.py fingerprint --model DIR            # prints {file: sha256}

One file per (preset, seed, prompt): <preset>-s<seed>-<prompt>.json with
  model:      preset, seed, sha256 of every file make-model wrote (so a failing
              test can tell "the generator changed" from "the engine is wrong")
  prompt_ids, logits (float64, last prompt position), greedy_ids (NEW tokens),
  margins (top1 - top2 logit per greedy step: compare ids only while the margin
  is above the engine's error), step_top, experts (per MoE layer, per prompt
  position, chosen ids in selection order + weights), and for one prompt
  hidden (h after every layer, all positions; attn/ffn output of the last).
"""
import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Prompts are ids (no tokenizer involved). BOS of the synthetic vocabulary is
# 768 (n_ranks); the rest are ordinary ranks.
PROMPTS = {
    "short": [768, 262, 300, 415, 290, 33, 500, 612],
    "long": [768] + [(i * 97 + 13) % 768 for i in range(23)],
}
N_NEW = 32


def fingerprint(model_dir):
    out = {}
    for fn in sorted(os.listdir(model_dir)):
        p = os.path.join(model_dir, fn)
        if not os.path.isfile(p):
            continue
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        out[fn] = h.hexdigest()
    return out


def write(model_dir, preset, seed, out_dir, hidden_prompt):
    import k3_ref
    fp = fingerprint(model_dir)
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    os.makedirs(out_dir, exist_ok=True)
    for name, ids in PROMPTS.items():
        res = k3_ref.run(model_dir, ids, N_NEW, name == hidden_prompt)
        doc = {"model": {"preset": preset, "seed": seed, "sha256": fp, "config": cfg},
               "prompt": name, "n_new": N_NEW}
        doc.update(res)
        path = os.path.join(out_dir, f"{preset}-s{seed}-{name}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
        os.replace(path + ".tmp", path)
        print(f"{path}: greedy {res['greedy_ids'][:8]}... min margin {min(res['margins']):.3g}")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--model", required=True)
    w.add_argument("--preset", required=True)
    w.add_argument("--seed", type=int, required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--hidden-prompt", default="")
    fpp = sub.add_parser("fingerprint")
    fpp.add_argument("--model", required=True)
    a = ap.parse_args()
    if a.cmd == "write":
        write(a.model, a.preset, a.seed, a.out, a.hidden_prompt)
    else:
        json.dump(fingerprint(a.model), sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""The float64 reference's perplexity on given token ids, scored as `deltafin eval` scores them:
consecutive windows of --window ids, each from an empty state, every position predicting the next
id of its window (k3_ref.Model.forward computes a window's logits in one causal pass).

  ref_ppl.py --model DIR --ids FILE (comma-separated) [--window 128] [--threads N]
Prints one JSON object: scored, nll_sum, mean_nll, perplexity, top1.
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import k3_ref as R  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ids = [int(x) for x in open(a.ids).read().split(",") if x.strip()]
    m = R.Model(a.model)
    nll, scored, top1 = 0.0, 0, 0
    for w0 in range(0, len(ids) - 1, a.window):
        w = ids[w0:w0 + a.window]
        if len(w) < 2:
            break
        logits, _ = m.forward(w)
        lp = torch.log_softmax(logits[:-1], -1)
        tgt = torch.tensor(w[1:])
        nll -= float(lp.gather(1, tgt[:, None]).sum())
        top1 += int((logits[:-1].argmax(-1) == tgt).sum())
        scored += len(w) - 1
    mean = nll / scored
    print(json.dumps({"scored": scored, "nll_sum": nll, "mean_nll": mean, "perplexity": math.exp(mean),
                      "top1": top1 / scored}))


if __name__ == "__main__":
    main()

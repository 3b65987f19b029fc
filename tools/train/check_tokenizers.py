#!/usr/bin/python3
"""Independent checks of bpe.py's output with the reference libraries (run where they are installed,
e.g. the GPU machine): tiktoken with K3's pattern on tiktoken.model, and Hugging Face tokenizers on
tokenizer.json, both against the ids bpe.py wrote.

  check_tokenizers.py --text heldout.txt --k3 DIR --k3-ids k3.u16 --hf DIR --hf-ids hf.u16
"""
import argparse
import base64
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bpe import K3_PATTERN  # noqa: E402


def report(name, got, want):
    first = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), None)
    ok = got == want
    print(json.dumps({"check": name, "tokens": len(got), "ours": len(want), "identical": ok,
                      "first_difference": first}))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", required=True)
    ap.add_argument("--k3")
    ap.add_argument("--k3-ids")
    ap.add_argument("--hf")
    ap.add_argument("--hf-ids")
    a = ap.parse_args()
    text = open(a.text, encoding="utf-8").read()
    ok = True
    if a.k3:
        import tiktoken
        ranks = {}
        for line in open(os.path.join(a.k3, "tiktoken.model")):
            b, r = line.split()
            ranks[base64.b64decode(b)] = int(r)
        enc = tiktoken.Encoding(name="nano-k3", pat_str=K3_PATTERN, mergeable_ranks=ranks, special_tokens={})
        ok &= report("tiktoken " + tiktoken.__version__, enc.encode_ordinary(text),
                     np.fromfile(a.k3_ids, dtype="<u2").tolist())
    if a.hf:
        import tokenizers
        tk = tokenizers.Tokenizer.from_file(os.path.join(a.hf, "tokenizer.json"))
        ok &= report("tokenizers " + tokenizers.__version__, tk.encode(text, add_special_tokens=False).ids,
                     np.fromfile(a.hf_ids, dtype="<u2").tolist())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

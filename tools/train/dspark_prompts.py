#!/usr/bin/python3
"""Prompt sets for nano-DSpark's training and acceptance checks, tokenized by the engine itself
(`deltafin tokenize`, nano-K3's tiktoken BPE and the K3 chat format), so the ids are the ones the
engine would see.

  dspark_prompts.py --deltafin build/deltafin --model models/nano-k3 --train corpus/train.txt \\
      --heldout corpus/heldout.txt --out DIR [--train-chars 3400000]

Writes DIR/train_ids.u16 (a spread sample of the training text: 48 evenly spaced slices cut at
paragraph ends, little-endian uint16), DIR/train_chat.json and DIR/heldout_prompts.json:
  {"raw": [[ids]...], "chat": [[ids]...], "chat_text": [...], "raw_from": "..."}
A chat prompt is one user message after the default thinking-effort system message, with the
assistant generation prompt (what `deltafin tokenize --chat TEXT` gives); the user messages are
sentences of the text (questions where the text has them). Held-out prompts come from the held-out
documents only (corpus.py's rule), never trained on.
"""
import argparse
import json
import os
import random
import re
import subprocess
import tempfile

import numpy as np


def tok(deltafin, model, texts, chat=False):
    """ids of each text (one engine call for plain text; one per text with --chat)."""
    if chat:
        out = []
        for t in texts:
            r = subprocess.run([deltafin, "tokenize", "--model", model, "--chat", t], check=True,
                               capture_output=True, text=True)
            out.append([int(x) for x in r.stdout.strip().split(",")])
        return out
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(texts, f)
        name = f.name
    try:
        r = subprocess.run([deltafin, "tokenize", "--model", model, "--batch", name], check=True,
                           capture_output=True, text=True)
    finally:
        os.remove(name)
    lines = r.stdout.strip("\n").split("\n")
    assert len(lines) == len(texts)
    return [[int(x) for x in ln.split(",")] if ln else [] for ln in lines]


def chat_frame(deltafin, model):
    """(prefix, suffix) ids around a user message in the chat format, checked on two messages."""
    probe = ["How do I open a file?", "What does the print function return?"]
    plain = tok(deltafin, model, probe)
    chat = tok(deltafin, model, probe, chat=True)
    frames = []
    for p, c in zip(plain, chat):
        for i in range(len(c) - len(p) + 1):
            if c[i:i + len(p)] == p:
                frames.append((c[:i], c[i + len(p):]))
                break
        else:
            raise SystemExit("chat format: the message's ids are not a run of the chat prompt's")
    if frames[0] != frames[1]:
        raise SystemExit("chat format: the frame around the message depends on the message")
    return frames[0]


SENT = re.compile(r"[A-Z][^.?!\n]{24,180}[.?!]")


def sentences(text, rng, n, prefer_q=0.5):
    all_s = [m.group(0).strip() for m in SENT.finditer(text)]
    qs = [s for s in all_s if s.endswith("?")]
    rng.shuffle(all_s)
    rng.shuffle(qs)
    nq = min(len(qs), int(n * prefer_q))
    out = qs[:nq] + all_s[:n - nq]
    rng.shuffle(out)
    return out


def sample_slices(text, k, width):
    n = len(text)
    parts = []
    for i in range(k):
        s = i * (n - width) // (k - 1)
        a = text.find("\n\n", s)
        b = text.find("\n\n", a + width)
        parts.append(text[a + 2:b if b > 0 else n])
    return "\n\n".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deltafin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--train-chars", type=int, default=3_400_000)
    ap.add_argument("--train-chat", type=int, default=6000)
    ap.add_argument("--heldout-raw", type=int, default=64)
    ap.add_argument("--heldout-chat", type=int, default=64)
    ap.add_argument("--raw-len", type=int, default=48)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    pre, suf = chat_frame(a.deltafin, a.model)
    with open(a.train, encoding="utf-8") as f:
        train = f.read()
    with open(a.heldout, encoding="utf-8") as f:
        held = f.read()
    sample = sample_slices(train, 48, a.train_chars // 48)
    ids = tok(a.deltafin, a.model, [sample])[0]
    np.asarray(ids, dtype="<u2").tofile(os.path.join(a.out, "train_ids.u16"))
    # training chat prompts: the frame around each sentence's plain ids (the check above shows
    # the frame does not depend on the message)
    ts = sentences(train, rng, a.train_chat)
    tchat = [pre + x + suf for x in tok(a.deltafin, a.model, ts)]
    with open(os.path.join(a.out, "train_chat.json"), "w") as f:
        json.dump({"chat": tchat}, f)
    # held-out: raw windows of raw-len ids spread over the held-out ids; chat from held-out sentences
    hid = tok(a.deltafin, a.model, [held])[0]
    step = (len(hid) - a.raw_len) // a.heldout_raw
    raw = [hid[i * step:i * step + a.raw_len] for i in range(a.heldout_raw)]
    hs = sentences(held, rng, a.heldout_chat)
    hchat = tok(a.deltafin, a.model, hs, chat=True)
    rec = {"raw": raw, "chat": hchat, "chat_text": hs,
           "raw_from": f"heldout.txt ids, {a.heldout_raw} windows of {a.raw_len} every {step} ids"}
    with open(os.path.join(a.out, "heldout_prompts.json"), "w") as f:
        json.dump(rec, f)
    print(json.dumps({"train_ids": len(ids), "train_chat": len(tchat), "heldout_raw": len(raw),
                      "heldout_chat": len(hchat), "chat_frame": [len(pre), len(suf)]}))


if __name__ == "__main__":
    main()

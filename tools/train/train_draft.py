#!/usr/bin/python3
"""Trains nano-draft: a small dense Qwen3 (transformers' Qwen3ForCausalLM) on the same corpus as
nano-K3, with the tokenizer.json of bpe.py --kind hf (a different vocabulary from nano-K3's).

  train_draft.py --tokens hf_train.u16 --heldout hf_heldout.u16 --heldout-text heldout.txt \\
      --tokenizer DIR --out DIR --minutes 6 [--seed 1]

Needs torch and transformers (the GPU machine has both); tokenizers, when present, is used to
check that the tokenizer.json encodes the held-out text to the ids bpe.py gave (logged as
tokenizer_check). Writes DIR (config.json, generation_config.json, model.safetensors in bf16,
tokenizer.json, tokenizer_config.json) and DIR/../train_draft.log.jsonl.
"""
import argparse
import json
import math
import os
import shutil
import time

import numpy as np
import torch


def lr_at(step, total, peak, warm):
    if step < warm:
        return peak * (step + 1) / warm
    p = min(1.0, (step - warm) / max(1, total - warm))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--heldout-text")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--log")
    ap.add_argument("--minutes", type=float, default=6.0)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    log_path = a.log or os.path.join(os.path.dirname(a.out.rstrip("/")) or ".", "train_draft.log.jsonl")
    log = open(log_path, "w")

    def emit(rec):
        print(json.dumps(rec), flush=True)
        log.write(json.dumps(rec) + "\n")
        log.flush()

    from transformers import Qwen3Config, Qwen3ForCausalLM

    with open(os.path.join(a.tokenizer, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    vocab = len(tj["model"]["vocab"]) + len(tj["added_tokens"])
    eos = [t["id"] for t in tj["added_tokens"] if t["content"] == "<|endoftext|>"][0]
    data = torch.from_numpy(np.fromfile(a.tokens, dtype="<u2").astype(np.int64))
    held = torch.from_numpy(np.fromfile(a.heldout, dtype="<u2").astype(np.int64))
    if a.heldout_text:
        try:
            from tokenizers import Tokenizer
            tk = Tokenizer.from_file(os.path.join(a.tokenizer, "tokenizer.json"))
            with open(a.heldout_text, encoding="utf-8") as f:
                ids = tk.encode(f.read(), add_special_tokens=False).ids
            same = ids == held.tolist()
            first = next((i for i, (x, y) in enumerate(zip(ids, held.tolist())) if x != y), None)
            emit({"tokenizer_check": "tokenizers " + __import__("tokenizers").__version__,
                  "tokens": len(ids), "ours": len(held), "identical": same, "first_difference": first})
        except ImportError as ex:
            emit({"tokenizer_check": f"skipped: {ex}"})

    torch.manual_seed(a.seed)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=160, intermediate_size=448, num_hidden_layers=4,
                      num_attention_heads=5, num_key_value_heads=1, head_dim=32,
                      max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=True,
                      bos_token_id=None, eos_token_id=eos, pad_token_id=eos, attention_dropout=0.0)
    dev = torch.device(a.device)
    model = Qwen3ForCausalLM(cfg).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    emit({"params": nparams, "config": cfg.to_dict().get("model_type")})
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    T, B = a.seq, a.batch
    g = torch.Generator().manual_seed(a.seed + 1)
    t0 = time.time()
    total = None  # fixed after 30 steps: --steps, or fewer if --minutes would not fit them
    step = 0
    best = None

    def held_loss(nwin=256):
        model.eval()
        n = min(nwin, (len(held) - 1) // T)
        tot, cnt = 0.0, 0
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            for i in range(0, n, B):
                idx = torch.arange(i, min(n, i + B)) * T
                x = torch.stack([held[j:j + T + 1] for j in idx]).to(dev)
                lg = model(input_ids=x[:, :-1]).logits.float()
                tot += float(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]),
                                                               x[:, 1:].reshape(-1), reduction="sum"))
                cnt += x[:, 1:].numel()
        model.train()
        return tot / max(1, cnt)

    model.train()
    while True:
        if total is None and step == 30:
            per = (time.time() - t0) / 30
            total = max(60, int(a.minutes * 60 * 0.95 / per))
            if a.steps:
                total = min(total, a.steps)
            emit({"step_time_s": round(per, 4), "steps": total})
        cur = total or 10 ** 9
        if step >= cur:
            break
        lr = lr_at(step, cur, a.lr, a.warmup)
        for pg in opt.param_groups:
            pg["lr"] = lr
        st = torch.randint(0, len(data) - T - 1, (B,), generator=g)
        x = torch.stack([data[s:s + T + 1] for s in st]).to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            lg = model(input_ids=x[:, :-1]).logits.float()
        loss = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 20 == 0 or step == 1 or step == cur:
            rec = {"step": step, "time_s": round(time.time() - t0, 2), "loss": round(float(loss), 4),
                   "lr": lr, "grad_norm": round(float(gn), 3)}
            if step % 200 == 0 or step == cur:
                hl = held_loss(64)
                rec["heldout_loss"] = round(hl, 4)
                if best is None or hl < best[0]:  # keep the best held-out state (a small model overfits)
                    best = (hl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
            emit(rec)
    if best is not None:
        model.load_state_dict(best[2])
    final = {"final": True, "step": step, "kept_step": best[1] if best else step, "time_s": round(time.time() - t0, 2), "heldout_loss": held_loss()}
    model.eval()
    with torch.no_grad():
        seq = held[:32].tolist()
        for _ in range(24):
            seq.append(int(model(input_ids=torch.tensor([seq], device=dev)).logits[0, -1].argmax()))
    final["sample_ids"] = seq[32:]
    tmp = a.out.rstrip("/") + ".part"
    shutil.rmtree(tmp, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(a.tokenizer, f), os.path.join(tmp, f))
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.replace(tmp, a.out)
    final["files"] = sorted(os.listdir(a.out))
    emit(final)


if __name__ == "__main__":
    main()

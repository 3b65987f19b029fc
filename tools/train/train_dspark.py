#!/usr/bin/python3
"""Trains nano-DSpark (the spec's nano sizes, /work/dspark-spec.md, docs/DSPARK.md) for nano-K3 on
nano-K3's own hidden states and greedy outputs.

  train_dspark.py --target models/nano-k3 --prompts DIR --out models/nano-dspark \\
      --budget-s 220 [--device cuda] [--seed 1]
  (DIR: what dspark_prompts.py wrote: train_ids.u16, train_chat.json, heldout_prompts.json)

Data: nano-K3 (tools/reference/k3_ref.py's blocks through train_k3.py's batched Nano, float32, no
TF32) continues prompts greedily: raw-text windows of the training sample and chat prompts (one
user message, a training sentence) each get --gen greedy tokens, so every label is the target's
own greedy choice. One more forward over each whole sequence gives the taps (the output h of the
target_layer_ids layers, the "hidden" stream).

Training examples are blocks exactly as the draft runs them (dspark_ref.py's functions, batched):
an anchor n inside the generated part (context rows 0..n-1 are the target's taps, x_n = seq[n]),
block rows x_n, mask x k at positions n..n+k (k = 7, or 1..6 for a quarter of the blocks, so short
blocks are seen too), every row attending to the context before n and to its own block. Loss: the
cross-entropy of position j's logits (teacher-forced Markov input prev_j = seq[n+j-1]) against
seq[n+j], weighted exp(-(j-1)/7) (later positions count only when the earlier ones were accepted),
plus the BCE of the confidence head (on a detached input: it estimates, it does not steer) against
whether position j's greedy proposal equalled seq[n+j]. Embedding and LM head are the target's,
frozen.

Acceptance (held-out prompts, logged): nano-K3's greedy continuation of each prompt; from n = the
prompt's length, the draft proposes k = 7 with the Markov chain fed its own proposals, the longest
matching prefix m is accepted, n moves by m + 1 (the target's own next token); near the end a pass
proposes one fewer than the tokens still wanted and a single token left is a plain decode (the
engine's accounting, as tools/reference/dspark_accept.py). Reported: tokens per target pass (m + 1)
and the rate at which position j is accepted, for raw text and chat.

Writes --out atomically (config.json + model.safetensors, bf16; the confidence bias F32) and
--log (JSON lines). The acceptance is measured on the bf16-rounded weights that are written.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
sys.path.insert(0, HERE)
import k3_ref as R  # noqa: E402
import dspark_ref as D  # noqa: E402
import dspark_accept  # noqa: E402
import train_k3 as TK  # noqa: E402

torch.set_default_dtype(torch.float32)


# ---------------------------------------------------------------- the target, batched

def load_target(d, dev):
    """nano-K3 as train_k3.Nano (experts dequantised from MXFP4 and stacked), float32 on dev."""
    c = R.Config(d)
    ck = R.Checkpoint(d)
    P = {}
    for name in ck.where:
        if ".experts." in name or not name.startswith("language_model."):
            continue
        key = name[len(R.Model.PM):] if name.startswith(R.Model.PM) else name
        P[key] = ck.get(name).to(dev, torch.float32)
    for l in range(c.first_dense, c.n_layers):
        for i in (1, 2, 3):
            ws = []
            for e in range(c.n_experts):
                base = f"{R.Model.PM}layers.{l}.block_sparse_moe.experts.{e}.w{i}."
                ws.append(R.mxfp4_dequant(ck.get(base + "weight_packed"), ck.get(base + "weight_scale"), c.group))
            P[f"layers.{l}.block_sparse_moe.experts.w{i}"] = torch.stack(ws).to(dev, torch.float32)
    return c, TK.Nano(c, P)


def target_forward(net, ids, tap_layers=None):
    """logits [B, T, V] and (if tap_layers) taps [B, T, n_taps, H] of one causal forward."""
    c = net.c
    got = {}

    def on_layer(l, h, a, m):
        if tap_layers is not None and l in tap_layers:
            got[l] = h

    h = net.P["embed_tokens.weight"][ids]
    logits = R.forward_layers(
        c, net.LW, net.GW, h,
        lambda l, x: (R.kda_block(c, lambda n: net.LW(l, n), x, TK.kda_matmul) if c.kind[l] == "kda"
                      else R.mla_block(c, lambda n: net.LW(l, n), x)),
        lambda l, x: (R.situ_ffn(c, lambda n: net.LW(l, n), "mlp.", x) if l < c.first_dense
                      else net.moe(l, x)),
        on_layer)
    taps = torch.stack([got[l] for l in tap_layers], -2) if tap_layers is not None else None
    return logits, taps


@torch.no_grad()
def greedy_batch(net, prompts, gen, taps_at, dev):
    """Right-padded batch: every row continues its own prompt by gen greedy tokens (a causal model's
    earlier positions do not see the padding after them). Returns (seq [B, Pmax+gen] int64,
    lens [B] = P_i + gen, plens [B], taps [B, Pmax+gen, n_taps, H] float32)."""
    B = len(prompts)
    pl = torch.tensor([len(p) for p in prompts], device=dev)
    Tm = int(pl.max()) + gen
    seq = torch.zeros(B, Tm, dtype=torch.long, device=dev)
    for i, p in enumerate(prompts):
        seq[i, :len(p)] = torch.tensor(p, device=dev)
    cur = pl.clone()
    rows = torch.arange(B, device=dev)
    for s in range(gen):
        L = int(cur.max())
        lg, _ = target_forward(net, seq[:, :L])
        nxt = lg[rows, cur - 1].argmax(-1)
        seq[rows, cur] = nxt
        cur = cur + 1
    _, taps = target_forward(net, seq, taps_at)
    return seq, cur, pl, taps


# ---------------------------------------------------------------- the draft on batches of blocks

def init_draft(c, gen):
    W = {}
    out_std = 0.02 / math.sqrt(2 * c.n_layers)
    for name, (shape, _) in sorted(D.tensor_shapes(c).items()):
        if len(shape) == 1:
            W[name] = torch.zeros(shape) if name.endswith("bias") else torch.ones(shape)
        elif name.endswith(("o_proj.weight", "down_proj.weight")) and "markov" not in name:
            W[name] = torch.randn(*shape, generator=gen) * out_std
        elif name.endswith("markov.up_proj.weight"):
            W[name] = torch.zeros(shape)  # the Markov term starts at zero and grows as it helps
        elif name.endswith("confidence_head.weight"):
            W[name] = torch.zeros(shape)
        else:
            W[name] = torch.randn(*shape, generator=gen) * 0.02
    return W


def block_batch(c, W, E, taps, seq, anchors, ks):
    """Blocks at anchors [B, A] (context rows 0..n-1 of each sequence), k per block ks [B, A].
    Returns h [B, A, K+1, H] before the final norm (K = block_size)."""
    B, T = seq.shape
    A = anchors.shape[1]
    Kb = c.block
    dev = seq.device
    f = D.context_features(c, W, taps)  # [B, T, H]
    cache = D.context_cache(c, W, f, torch.arange(T, device=dev).expand(B, T))
    j = torch.arange(Kb + 1, device=dev)
    pos = (anchors.unsqueeze(-1) + j).reshape(B, A * (Kb + 1))  # [B, R]
    ids = torch.full((B, A, Kb + 1), c.mask_id, dtype=torch.long, device=dev)
    ids[:, :, 0] = torch.gather(seq, 1, anchors)
    h = E[ids].reshape(B, A * (Kb + 1), -1)
    # row (a, j) sees context t < n_a, and block rows (a, j') with j' <= k_a
    ctx_ok = torch.arange(T, device=dev).view(1, 1, T) < anchors.unsqueeze(-1)  # [B, A, T]
    live = j.view(1, 1, -1) <= ks.unsqueeze(-1)  # [B, A, K+1]
    same = torch.eye(A, dtype=torch.bool, device=dev).view(1, A, 1, A, 1)
    blk_ok = same & live.view(B, 1, 1, A, Kb + 1)  # [B, A, 1, A, K+1]
    allow = torch.cat([ctx_ok.unsqueeze(2).expand(B, A, Kb + 1, T).reshape(B, A * (Kb + 1), T),
                       blk_ok.expand(B, A, Kb + 1, A, Kb + 1).reshape(B, A * (Kb + 1), A * (Kb + 1))], -1)
    h = D.block_hidden(c, W, h, pos, cache, allow)
    return h.reshape(B, A, Kb + 1, -1)


def sample_anchors(lens, plens, A, gen_g, Kb, short_frac=0.25):
    """A anchors per row in [P_i, len_i - Kb - 1], and the block length of each."""
    B = lens.shape[0]
    lo = plens.unsqueeze(-1).float()
    hi = (lens - Kb - 1).unsqueeze(-1).float()
    u = torch.rand(B, A, generator=gen_g).to(lens.device)
    anchors = (lo + u * (hi - lo + 1)).floor().long()
    anchors = torch.minimum(anchors, hi.long())
    ks = torch.full((B, A), Kb, dtype=torch.long)
    short = torch.rand(B, A, generator=gen_g) < short_frac
    ks[short] = torch.randint(1, Kb, (int(short.sum()),), generator=gen_g)
    return anchors, ks.to(lens.device)


def loss_on(c, W, E, LM, taps, seq, anchors, ks, pos_w):
    Kb = c.block
    h = block_batch(c, W, E, taps, seq, anchors, ks)[:, :, 1:]  # [B, A, K, H]
    j = torch.arange(1, Kb + 1, device=seq.device)
    tpos = anchors.unsqueeze(-1) + j  # [B, A, K]
    B, A = anchors.shape
    flat = seq.unsqueeze(1).expand(B, A, -1)
    labels = torch.gather(flat, 2, tpos)
    prev = torch.gather(flat, 2, tpos - 1)
    u, v = D.head_inputs(c, W, E, h, prev)
    logits = u @ LM.T
    live = (j.view(1, 1, -1) <= ks.unsqueeze(-1))
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                           reduction="none").view(B, A, Kb)
    wts = pos_w.view(1, 1, -1) * live
    loss_ce = (ce * wts).sum() / wts.sum()
    with torch.no_grad():
        hit = (logits.argmax(-1) == labels).float()
    _, z = D.confidence(c, W, v.detach())
    bce = torch.nn.functional.binary_cross_entropy_with_logits(z, hit, reduction="none")
    loss_bce = (bce * live).sum() / live.sum()
    with torch.no_grad():
        acc = (hit * live).sum((0, 1)) / live.sum((0, 1)).clamp(min=1)
    return loss_ce, loss_bce, acc


# ---------------------------------------------------------------- acceptance simulation

@torch.no_grad()
def accept_sim(c, W, E, LM, seq, lens, plens, taps, k=None):
    """Greedy speculative decoding against the target's own greedy sequences (seq [B, T]).
    Returns per-pass records: list of (m accepted, k proposed) and the confidences seen."""
    k = k or c.block
    B, T = seq.shape
    dev = seq.device
    n = plens.clone()
    passes = []  # (row, m, kk, conf list)
    conf_hits = [[] for _ in range(k)]
    rows = torch.arange(B, device=dev)
    while True:
        # the engine's accounting (dspark_accept.py): a pass yields at most the tokens still wanted,
        # so it proposes one fewer than those; a single token left is decoded without a draft
        act = (n + 2) < lens
        if not bool(act.any()):
            break
        kk = torch.clamp(lens - n - 2, min=1, max=k)
        na = torch.where(act, n, torch.zeros_like(n))
        # pad the block to k for the batch but make rows beyond kk invisible (as a shorter block)
        h = block_batch(c, W, E, taps, seq, na.unsqueeze(-1), kk.unsqueeze(-1))[:, 0]
        prev = seq[rows, na]
        m = torch.zeros(B, dtype=torch.long, device=dev)
        alive = act.clone()
        for jj in range(1, k + 1):
            u, v = D.head_inputs(c, W, E, h[:, jj], prev)
            d = (u @ LM.T).argmax(-1)
            cf, _ = D.confidence(c, W, v)
            tgt_pos = torch.clamp(na + jj, max=T - 1)
            ok = (d == seq[rows, tgt_pos]) & (jj <= kk)
            for b in torch.nonzero(alive & (jj <= kk)).reshape(-1).tolist():
                conf_hits[jj - 1].append((float(cf[b]), bool(ok[b])))
            alive = alive & ok
            m = m + alive.long()
            prev = d
        for b in torch.nonzero(act).reshape(-1).tolist():
            passes.append((int(m[b]), int(kk[b])))
        n = torch.where(act, n + m + 1, n)
    return passes, conf_hits


def summarise(passes, conf_hits, k):
    """dspark_accept.py's acceptance summary (one definition) over the run's passes; conf_hits
    holds (confidence, matched) per position."""
    return dspark_accept.summarise(passes, [[x for x, _ in ch] for ch in conf_hits], k)


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--eval-out", help="the held-out prompts' greedy continuations (JSON), for the reference check")
    ap.add_argument("--budget-s", type=float, default=220.0, help="wall clock for everything")
    ap.add_argument("--gen-frac", type=float, default=0.3, help="share of the budget for data")
    ap.add_argument("--gen", type=int, default=96, help="greedy tokens per training prompt")
    ap.add_argument("--raw-len", type=int, default=48)
    ap.add_argument("--gen-batch", type=int, default=1024)
    ap.add_argument("--chat-frac", type=float, default=0.35)
    ap.add_argument("--max-seqs", type=int, default=0, help="stop data at this many (smoke tests)")
    ap.add_argument("--eval-gen", type=int, default=96)
    ap.add_argument("--eval-n", type=int, default=64, help="held-out prompts per kind")
    ap.add_argument("--batch", type=int, default=96)
    ap.add_argument("--anchors", type=int, default=24)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--steps", type=int, default=0, help="cap (smoke tests)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    t0 = time.time()
    dev = torch.device(a.device)
    torch.manual_seed(a.seed)
    log = open(a.log + ".tmp", "w")

    def emit(rec):
        rec["t"] = round(time.time() - t0, 2)
        print(json.dumps(rec), flush=True)
        log.write(json.dumps(rec) + "\n")
        log.flush()

    tc, net = load_target(a.target, dev)
    cj = D.nano_config()
    c = D.DConfig(cj, tc)
    E = net.P["embed_tokens.weight"]
    LM = net.P["language_model.lm_head.weight"]
    emit({"phase": "loaded", "device": str(dev), "torch": torch.__version__,
          "tf32": bool(torch.backends.cuda.matmul.allow_tf32)})

    # --- data: greedy continuations with taps
    ids = torch.from_numpy(np.fromfile(os.path.join(a.prompts, "train_ids.u16"), dtype="<u2").astype(np.int64))
    with open(os.path.join(a.prompts, "train_chat.json")) as f:
        tchat = json.load(f)["chat"]
    with open(os.path.join(a.prompts, "heldout_prompts.json")) as f:
        held = json.load(f)
    g = torch.Generator().manual_seed(a.seed)
    data = []  # (seq, lens, plens, taps) chunks on dev
    nseq, ci, gen_deadline = 0, 0, a.budget_s * a.gen_frac
    order = torch.randperm(len(tchat), generator=g).tolist()
    last = 0.0  # the last batch's duration: no batch is started that would end past the deadline
    while time.time() - t0 + last < gen_deadline or not data:
        if a.max_seqs and nseq >= a.max_seqs:
            break
        tb = time.time()
        B = a.gen_batch if not a.max_seqs else min(a.gen_batch, a.max_seqs - nseq)
        nchat = int(round(B * a.chat_frac))
        st = torch.randint(0, len(ids) - a.raw_len, (B - nchat,), generator=g)
        prompts = [ids[s:s + a.raw_len].tolist() for s in st]
        for _ in range(nchat):
            prompts.append(tchat[order[ci % len(order)]])
            ci += 1
        # the chat prompts (longer) as their own batch: less padding
        for part in (prompts[:B - nchat], prompts[B - nchat:]):
            if part:
                data.append(greedy_batch(net, part, a.gen, c.taps, dev))
        nseq += B
        last = time.time() - tb
        emit({"phase": "data", "seqs": nseq, "chat_seqs": ci, "batch_s": round(last, 2)})
    # held-out sets for the acceptance checks
    evsets = {}
    for kind in ("raw", "chat"):
        ps = held[kind][:a.eval_n]
        evsets[kind] = greedy_batch(net, ps, a.eval_gen, c.taps, dev)
    if a.eval_out:
        rec = {k: [seq[i, :int(lens[i])].tolist() for i in range(seq.shape[0])] for k, (seq, lens, _, _) in evsets.items()}
        rec["prompt_lens"] = {k: v[2].tolist() for k, v in evsets.items()}
        rec["note"] = "nano-K3 greedy (float32 torch, train_dspark.py) of heldout_prompts.json"
        with open(a.eval_out + ".tmp", "w") as f:
            json.dump(rec, f)
        os.replace(a.eval_out + ".tmp", a.eval_out)
    emit({"phase": "eval_data", "raw": len(held["raw"][:a.eval_n]), "chat": len(held["chat"][:a.eval_n])})

    # --- training
    gw = torch.Generator().manual_seed(a.seed + 1)
    W = {k: v.to(dev).requires_grad_(True) for k, v in init_draft(c, gw).items()}
    nparams = sum(v.numel() for v in W.values())
    emit({"phase": "init", "params": nparams, "bf16_bytes": 2 * nparams})
    opt = torch.optim.AdamW(list(W.values()), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.05)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # the draft's training only; the data above is fp32
    pos_w = torch.exp(-torch.arange(c.block, dtype=torch.float32, device=dev) / 7.0)
    eval_reserve = 25.0 if dev.type == "cuda" else 5.0
    train_deadline = a.budget_s - eval_reserve
    sizes = [d[0].shape[0] for d in data]
    wsum = float(sum(sizes))
    step, total, t_train = 0, None, time.time()
    while True:
        if total is None and step == 20:
            per = (time.time() - t_train) / 20
            total = max(40, int((train_deadline - (time.time() - t0)) / per) + 20)
            if a.steps:
                total = min(total, a.steps)
            emit({"phase": "train", "step_time_s": round(per, 4), "steps": total})
        cur = total or (a.steps if a.steps and a.steps < 20 else 10 ** 9)
        if step >= cur or (total is not None and time.time() - t0 > train_deadline):
            break
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (
            0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / max(1, cur)))))
        for pg in opt.param_groups:
            pg["lr"] = lr
        ch = int(torch.multinomial(torch.tensor(sizes, dtype=torch.float) / wsum, 1, generator=gw))
        seq, lens, plens, taps = data[ch]
        rows = torch.randint(0, seq.shape[0], (min(a.batch, seq.shape[0]),), generator=gw).to(dev)
        anchors, ks = sample_anchors(lens[rows], plens[rows], a.anchors, gw, c.block)
        lce, lbce, acc = loss_on(c, W, E, LM, taps[rows], seq[rows], anchors, ks, pos_w)
        opt.zero_grad(set_to_none=True)
        (lce + lbce).backward()
        gn = torch.nn.utils.clip_grad_norm_(list(W.values()), 1.0)
        opt.step()
        step += 1
        if step % 25 == 0 or step == 1:
            emit({"step": step, "lr": round(lr, 6), "loss_ce": round(float(lce), 4),
                  "loss_bce": round(float(lbce), 4), "grad_norm": round(float(gn), 3),
                  "teacher_forced_acc": [round(float(x), 3) for x in acc]})
    emit({"phase": "trained", "steps": step})

    # --- bf16 as written, then the held-out acceptance
    Wb = {k: (v.detach().to(torch.bfloat16).float() if D.tensor_shapes(c)[k][1] == "BF16" else v.detach().float())
          for k, v in W.items()}
    torch.backends.cuda.matmul.allow_tf32 = False
    res = {"phase": "acceptance", "k": c.block}
    for kind, (seq, lens, plens, taps) in evsets.items():
        passes, ch = accept_sim(c, Wb, E, LM, seq, lens, plens, taps)
        res[kind] = summarise(passes, ch, c.block)
    emit(res)
    D.save(a.out, cj, {k: v.cpu() for k, v in Wb.items()})
    emit({"phase": "saved", "out": a.out, "bytes": os.path.getsize(os.path.join(a.out, "model.safetensors"))})
    log.close()
    os.replace(a.log + ".tmp", a.log)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Acceptance of a DSpark draft against its target's greedy output, in the float64 reference
(k3_ref.py's target, dspark_ref.py's draft): an independent cross-check of the engine's
speculative-decoding measurements (`deltafin run --draft dspark:DIR --stats`).

  dspark_accept.py --draft models/nano-dspark --target models/nano-k3 \\
      --sequences models/logs/dspark_heldout_greedy.json [--kinds raw,chat] [--limit 8] [--k 7] \\
      [--out FILE.json]

--sequences: {"raw": [[ids]], "chat": [[ids]], "prompt_lens": {"raw": [P], "chat": [P]}}: each
sequence is a prompt of P ids and a greedy continuation (train_dspark.py --eval-out writes one from
the held-out prompts). Nothing in it is trusted: one float64 forward of the target over each
sequence checks that every continuation token is the target's own greedy choice (lowest id on
ties) and cuts the sequence at the first one that is not (the float32 generator can differ at a
near-tie), and gives the taps.

Then, as the engine runs it greedily: n = P (context = the prompt's rows, x_n = the first greedy
token); the draft proposes k tokens (the Markov chain fed its own proposals); the longest prefix
equal to the target's continuation, m tokens, is accepted; the target's next token follows, so the
pass yields m + 1 tokens and n moves by m + 1. Near the end a pass proposes one fewer than the
tokens still wanted (its own next token is the last one), and a single token left is decoded
without a draft: the engine's accounting, so --engine's counts can be compared one for one.
Reported per kind: passes, tokens, tokens per pass (all passes, and over full k-blocks), the rate
at which position j is accepted (d_1..d_j all accepted) and the conditional rate, and the draft's
mean confidence by position.
"""
import argparse
import json
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dspark_ref as D  # noqa: E402


def verified(tgt, seq, P, taps_layers):
    """(sequence cut at the first non-greedy token, taps [T, n_taps, H], how many were cut)."""
    logits, taps = tgt.taps(seq, taps_layers)
    for t in range(P, len(seq)):
        if D.argmax_low(logits[t - 1]) != seq[t]:
            return seq[:t], taps[:t], len(seq) - t
    return seq, taps, 0


def simulate(c, W, E, LM, seq, taps, P, k):
    passes, confs = [], [[] for _ in range(k)]
    n = P
    while n + 2 < len(seq):
        # as the engine does: a pass yields at most the tokens still wanted (its own next token
        # included), so the last proposals are cut to fit; one token left is a plain decode
        kk = min(k, len(seq) - n - 2)
        res = D.propose(c, W, E, LM, taps, n, seq[n], kk)
        m = 0
        for j, d in enumerate(res["proposals"]):
            if res["confidences"][j] is not None:
                confs[j].append(res["confidences"][j])
            if d != seq[n + 1 + j]:
                break
            m += 1
        passes.append((m, kk))
        n += m + 1
    return passes, confs


def summarise(passes, confs, k):
    full = [m for m, kk in passes if kk == k]
    tokens = sum(m + 1 for m, _ in passes)
    return {
        # the engine's --json speculation fields: passes where position j was accepted, blocks of length k
        "accepted_at": [sum(1 for m, _ in passes if m >= j) for j in range(1, k + 1)],
        "block_lengths": [sum(1 for _, kk in passes if kk == j) for j in range(1, k + 1)],
        "passes": len(passes), "tokens": tokens,
        "tokens_per_pass": round(tokens / max(1, len(passes)), 4),
        "tokens_per_pass_full_blocks": round(sum(m + 1 for m in full) / max(1, len(full)), 4),
        "full_blocks": len(full),
        "accept_rate_by_position": [round(sum(1 for m in full if m >= j) / max(1, len(full)), 4)
                                    for j in range(1, k + 1)],
        "conditional_rate_by_position": [round(sum(1 for m in full if m >= j) /
                                               max(1, sum(1 for m in full if m >= j - 1)), 4)
                                         for j in range(1, k + 1)],
        "mean_confidence_by_position": [round(sum(x) / len(x), 4) if x else None for x in confs],
    }


def engine_run(binary, target, draft, seq, P, k):
    """The engine's greedy run of the same prompt with the draft: (ids, its speculation record)."""
    r = subprocess.run([binary, "run", "--model", target, "--prompt-ids", ",".join(map(str, seq[:P])),
                        "--max-new", str(len(seq) - P), "--draft", "dspark:" + draft, "--draft-max", str(k),
                        "--json"], check=True, capture_output=True, text=True)
    j = json.loads(r.stdout)
    ids = j.get("ids") or j.get("token_ids") or j.get("output_ids")
    return ids, j["stats"]["speculation"] if "stats" in j else j["speculation"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--sequences", required=True)
    ap.add_argument("--kinds", default="raw,chat")
    ap.add_argument("--limit", type=int, default=8, help="sequences per kind (the first ones)")
    ap.add_argument("--k", type=int, help="block length (default: block_size)")
    ap.add_argument("--out")
    ap.add_argument("--engine", help="also run this deltafin binary on the same prompts (--draft dspark:DRAFT) "
                    "and report its speculation counts beside the reference's")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(a.sequences) as f:
        S = json.load(f)
    tgt = D.Target(a.target)
    c, W = D.load(a.draft, tgt.cfg)
    k = a.k or c.block
    if not (1 <= k <= c.block):
        ap.error(f"--k {k} outside 1..{c.block}")
    out = {"draft": a.draft, "target": a.target, "k": k, "limit": a.limit}
    engine = []
    for kind in a.kinds.split(","):
        allp, allc, cut, ntok = [], [[] for _ in range(k)], 0, 0
        for i, seq in enumerate(S[kind][:a.limit]):
            P = S["prompt_lens"][kind][i]
            seq, taps, dropped = verified(tgt, seq, P, c.taps)
            cut += dropped
            ntok += len(seq) - P
            p, cf = simulate(c, W, tgt.E, tgt.LM, seq, taps, P, k)
            if a.engine:
                eng_ids, sp = engine_run(a.engine, a.target, a.draft, seq, P, k)
                mine = summarise(p, [[] for _ in range(k)], k)
                rec = {"kind": kind, "i": i, "ref_accepted_at": mine["accepted_at"],
                       "engine_accepted_at": sp.get("accepted_at"), "ref_passes": len(p),
                       "engine_verify_blocks": sp.get("verify_blocks"),
                       "engine_block_lengths": sp.get("block_lengths"), "ref_block_lengths": mine["block_lengths"]}
                if eng_ids is not None:
                    rec["same_ids"] = list(eng_ids)[-(len(seq) - P):] == seq[P:]
                engine.append(rec)
                print(json.dumps(rec), flush=True)
            allp += p
            for j in range(k):
                allc[j] += cf[j]
        out[kind] = summarise(allp, allc, k)
        out[kind]["sequences"] = min(a.limit, len(S[kind]))
        out[kind]["continuation_tokens"] = ntok
        out[kind]["cut_non_greedy_tokens"] = cut
        print(json.dumps({kind: out[kind]}), flush=True)
    if a.engine:
        out["engine"] = engine
    if a.out:
        with open(a.out + ".tmp", "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()

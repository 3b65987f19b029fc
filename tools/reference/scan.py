#!/usr/bin/python3
"""Scan a checkpoint for positions where the engine is not exact.

  scan.py --model DIR --bin deltafin [--n 20 --len 300-1000 --seed 1 | --prompt-ids-file F]
          [--engine "ARGS"]... [--safety 8] [--json OUT] [-- ENGINE ARGS...]

For each prompt (N drawn at random, seeded, lengths uniform in the range; or
the one given), the float64 reference (k3_ref.py, one batched forward) and
`deltafin logits --hidden --routes` (once per --engine configuration; the
arguments after `--` are added to every one, e.g. --threads 2 --cache-mb 0
--mem-limit 8M --prefill-chunk 7 --precision f64) are compared at every
position: logits, every layer's hidden state, every MoE layer's router scores
and chosen experts.

Tolerances come from float32 rounding measured on the same prompt: the same
reference runs in float32 with every routing decision forced to the float64
one (so it measures rounding only, no discrete flips), and for each quantity
the tolerance at position t is SAFETY (default 8) times the largest
float32-vs-float64 error of that quantity at positions 0..t (the running
maximum: error grows along the sequence through the KDA state and MLA sums),
and at least SAFETY times its 90th percentile over all positions (the first
few positions' running maximum rests on a handful of values, which rounding
can make arbitrarily small by luck):
  hidden (per layer):  max_j |h - h64| / rms(h64) of the row
  router (per layer):  max_e |s - s64| of the sigmoid scores of the row
  logits:              max_v |z - z64| of the row
A cell (layer, position) diverges when its router chose another expert set,
or its router scores or hidden state are beyond tolerance. The first
divergence is the cell with the lowest position, then the lowest layer (the
router of a layer before its output). It is a "near-tie" when it is a
changed expert choice whose router scores are within tolerance there, and the
reference's margin between its k-th and (k+1)-th biased scores is below 2 x
the measured score error d of that row (a flip needs margin <= |da| + |db|):
float32 rounding alone can make that choice. The engine's choice is then
replayed in the reference (--force-routes) and the comparison repeated, so
what the near-tie changes downstream is not mistaken for agreement, and a
later bug is not hidden behind it. Anything else is a "BUG". A top-1
difference with every cell within tolerance is a near-tie when the
reference's top-2 logit margin is below 2 x the logit error of that row.

Prints every flagged position (top-1 differs or logit error beyond
tolerance, against the plain reference) with its cause, the logit error
distribution (max, median, p99 over positions), and exits 1 on any BUG.
"""
import argparse
import json
import os
import random
import shlex
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_ref as R  # noqa: E402
import torch  # noqa: E402

MAX_REPLAYS = 16

_ST = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read_st(path):
    """A safetensors file as {name: numpy array} and its metadata."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
        data = f.read()
    meta = hdr.pop("__metadata__", {})
    out = {}
    for name, t in hdr.items():
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=np.dtype(_ST[t["dtype"]]).newbyteorder("<")).reshape(t["shape"])
    return out, meta


def row_err_hidden(h, h64):
    """[L, T]: max |h - h64| / rms(h64) per row."""
    rms = np.sqrt((h64 * h64).mean(-1))
    return np.abs(h - h64).max(-1) / np.maximum(rms, 1e-30)


def log_softmax(z):
    z = z.astype(np.float64)
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


class Ref:
    """float64 and float32 reference models of one checkpoint (weights loaded once)."""

    def __init__(self, model_dir, device="cpu"):
        self.m64 = R.Model(model_dir, device=device)
        self.m32 = R.Model(model_dir, dtype=torch.float32, device=device)
        self.cfg = self.m64.cfg
        self.seconds = 0.0

    def run(self, m, ids, force):
        m.force = force
        t0 = time.time()
        try:
            return R.forward_all(m, ids)
        finally:
            m.force = {}
            self.seconds += time.time() - t0


def engine_logits(args, ids, work, extra):
    pf = os.path.join(work, "ids.txt")
    with open(pf, "w") as f:
        f.write(",".join(map(str, ids)))
    out = os.path.join(work, "engine.safetensors")
    cmd = [args.bin, "logits", "--model", args.model, "--prompt-ids-file", pf, "--hidden", "--routes",
           "--out", out] + extra
    if "--heat" not in extra:
        cmd += ["--heat", ""]  # a scan never writes into the model folder
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"scan: {shlex.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    t, meta = read_st(out)
    os.unlink(out)
    return t, meta, p.stderr


def tolerances(r64, r32, safety):
    """SAFETY x the running maximum over positions of the float32 error, at least SAFETY x its
    90th percentile over positions: hidden [L, T], scores [M, T], logits [T]."""
    def run(e):
        if e.size == 0:
            return e
        return safety * np.maximum(np.maximum.accumulate(e, axis=-1), np.quantile(e, 0.9, axis=-1, keepdims=True))
    return {
        "hidden": run(row_err_hidden(r32["hidden"], r64["hidden"])),
        "logits": run(np.abs(r32["logits"] - r64["logits"]).max(-1)),
        "scores": run(np.abs(r32["route_scores"] - r64["route_scores"]).max(-1)),
    }


def first_divergence(eng, ref, tol, moe_layers):
    """The first diverging cell (see the module doc) as a dict, or None."""
    L, T, _ = ref["hidden"].shape
    herr = row_err_hidden(eng["hidden"].astype(np.float64), ref["hidden"])  # [L, T]
    hbad = herr > tol["hidden"]
    cand = []  # (t, order within position, kind, layer, m)
    if hbad.any():
        l, t = np.nonzero(hbad)
        i = np.lexsort((l, t))[0]
        cand.append((int(t[i]), 2 * int(l[i]) + 1, "hidden", int(l[i]), -1))
    M = len(moe_layers)
    if M:
        es = eng["route_scores"].astype(np.float64)
        serr = np.abs(es - ref["route_scores"]).max(-1)  # [M, T]
        sbad = serr > tol["scores"]
        eset = np.sort(eng["route_ids"], -1)
        rset = np.sort(ref["route_ids"], -1)
        flip = (eset != rset).any(-1)  # [M, T]
        bad = sbad | flip
        if bad.any():
            m, t = np.nonzero(bad)
            order = np.lexsort((np.asarray(moe_layers)[m], t))[0]
            mi, ti = int(m[order]), int(t[order])
            cand.append((ti, 2 * int(moe_layers[mi]), "route", int(moe_layers[mi]), mi))
    if not cand:
        return None
    t, _, kind, layer, mi = min(cand)
    d = {"position": t, "layer": layer, "kind": kind}
    if kind == "hidden":
        d["error"] = float(herr[layer, t])
        d["tolerance"] = float(tol["hidden"][layer, t])
        return d
    K = ref["route_ids"].shape[-1]
    sel = ref["route_scores"][mi, t] + ref["route_bias"][mi]
    srt = np.sort(sel)[::-1]
    d["margin"] = float(srt[K - 1] - srt[K])
    d["score_error"] = float(serr[mi, t])
    d["score_tolerance"] = float(tol["scores"][mi, t])
    d["engine_ids"] = [int(x) for x in np.sort(eng["route_ids"][mi, t])]
    d["reference_ids"] = [int(x) for x in np.sort(ref["route_ids"][mi, t])]
    d["flip"] = d["engine_ids"] != d["reference_ids"]
    d["moe_index"] = mi
    return d


def classify(d):
    if d["kind"] != "route":
        return "BUG", (f"layer {d['layer']} hidden state at position {d['position']} is off by "
                       f"{d['error']:.3g} (relative) with every routing decision before it equal; "
                       f"float32 tolerance {d['tolerance']:.3g}")
    if not d["flip"]:
        return "BUG", (f"layer {d['layer']} router scores at position {d['position']} are off by "
                       f"{d['score_error']:.3g}, beyond the float32 tolerance {d['score_tolerance']:.3g}")
    if d["score_error"] > d["score_tolerance"]:
        return "BUG", (f"layer {d['layer']} position {d['position']}: other experts chosen "
                       f"{d['engine_ids']} vs {d['reference_ids']} and the router scores are off by "
                       f"{d['score_error']:.3g}, beyond the float32 tolerance {d['score_tolerance']:.3g}")
    if not d["margin"] < 2 * d["score_error"]:
        return "BUG", (f"layer {d['layer']} position {d['position']}: other experts chosen with a "
                       f"reference margin {d['margin']:.3g} that the score error {d['score_error']:.3g} "
                       f"cannot explain (the selection itself differs)")
    return "near-tie", (f"layer {d['layer']} position {d['position']}: the reference's k-th and "
                        f"(k+1)-th biased router scores differ by {d['margin']:.3g}, below 2 x the "
                        f"measured float32 score error {d['score_error']:.3g} (tolerance "
                        f"{d['score_tolerance']:.3g}); engine chose {d['engine_ids']}, reference "
                        f"{d['reference_ids']}")


def logit_stats(eng, ref):
    e = np.abs(eng["logits"].astype(np.float64) - ref["logits"]).max(-1)  # [T]
    return e


def compare(ref, eng, r64, tol, moe_layers):
    """One engine run against the reference: near-ties replayed until none is left."""
    force = {}
    ties, bugs = [], []
    cur = r64
    for _ in range(MAX_REPLAYS + 1):
        d = first_divergence(eng, cur, tol, moe_layers)
        if d is None:
            break
        verdict, why = classify(d)
        d["verdict"], d["why"] = verdict, why
        if verdict == "BUG":
            bugs.append(d)
            break
        ties.append(d)
        f = force.setdefault(d["layer"], {})
        f[d["position"]] = [int(x) for x in eng["route_ids"][d["moe_index"], d["position"]]]
        cur = ref.run(ref.m64, [int(x) for x in r64["prompt_ids"]], force)
    else:
        bugs.append({"verdict": "BUG", "why": f"more than {MAX_REPLAYS} near-ties in one prompt"})
    # logits against the reference that follows the engine's near-tie choices
    le = logit_stats(eng, cur)
    top_e = eng["logits"].argmax(-1)
    top_r = cur["logits"].argmax(-1)
    T = le.shape[0]
    if not bugs:
        for t in range(T):
            if le[t] > tol["logits"][t]:
                bugs.append({"verdict": "BUG", "position": t, "kind": "logits",
                             "why": f"position {t}: logits off by {le[t]:.3g} (tolerance "
                                    f"{tol['logits'][t]:.3g}) with every hidden state and routing within "
                                    "tolerance"})
                break
            if top_e[t] != top_r[t]:
                z = np.sort(cur["logits"][t])[::-1]
                marg = float(z[0] - z[1])
                if marg < 2 * le[t]:
                    ties.append({"verdict": "near-tie", "kind": "logits", "position": t, "margin": marg,
                                 "logit_error": float(le[t]),
                                 "why": f"position {t}: top-2 logit margin {marg:.3g} below 2 x the "
                                        f"logit error {le[t]:.3g}"})
                else:
                    bugs.append({"verdict": "BUG", "kind": "logits", "position": t,
                                 "why": f"position {t}: top-1 {top_e[t]} vs {top_r[t]} with margin "
                                        f"{marg:.3g} and logit error {le[t]:.3g}"})
                    break
    # flagged positions against the plain reference
    raw = logit_stats(eng, r64)
    flagged = [t for t in range(T) if raw[t] > tol["logits"][t] or top_e[t] != r64["logits"][t].argmax()]
    used = float((le / np.maximum(tol["logits"], 1e-300)).max())
    return {"ties": ties, "bugs": bugs, "raw_err": raw, "err": le, "flagged": flagged, "used": used,
            "raw_top": [int(x) for x in r64["logits"].argmax(-1)], "eng_top": [int(x) for x in top_e]}


def selftest():
    """The divergence finder and classifier on made-up data with known answers."""
    rng = np.random.default_rng(5)
    L, T, H, M, E, K, V = 4, 50, 16, 3, 12, 4, 30
    moe = [1, 2, 3]
    ref = {"hidden": rng.normal(size=(L, T, H)), "logits": rng.normal(size=(T, V)),
           "route_scores": rng.uniform(0.1, 0.9, size=(M, T, E)), "route_bias": rng.normal(0, 0.01, size=(M, E))}
    sel = ref["route_scores"] + ref["route_bias"][:, None, :]
    ref["route_ids"] = np.argsort(-sel, -1, kind="stable")[..., :K]
    tol = {"hidden": np.full((L, T), 1e-4), "scores": np.full((M, T), 1e-4), "logits": np.full(T, 1e-3)}

    def eng_like():
        e = {k: v.copy() for k, v in ref.items()}
        e["hidden"] = e["hidden"] * (1 + 1e-6 * rng.normal(size=e["hidden"].shape))
        e["route_scores"] = e["route_scores"] + 1e-7 * rng.normal(size=e["route_scores"].shape)
        e["route_ids"] = np.sort(e["route_ids"], -1)
        return e

    def check(what, got, want):
        if got != want:
            raise SystemExit(f"scan selftest FAILED: {what}: got {got}, expected {want}")
        print(f"ok   {what}")

    check("agreeing runs have no divergence", first_divergence(eng_like(), ref, tol, moe), None)
    e = eng_like()
    e["hidden"][2, 30] += 0.01 * np.abs(ref["hidden"][2, 30]).max()
    e["hidden"][3, 31:] += 1.0
    d = first_divergence(e, ref, tol, moe)
    check("a hidden-state error is found where it starts", (d["kind"], d["layer"], d["position"]), ("hidden", 2, 30))
    check("... and is a BUG", classify(d)[0], "BUG")

    # a near-tie: the reference's k-th and (k+1)-th biased scores 2e-6 apart, the engine's
    # scores off by 1.5e-6 (within tolerance) the other way
    r2 = {k: v.copy() for k, v in ref.items()}
    m, t = 1, 20
    order = np.argsort(-(r2["route_scores"][m, t] + r2["route_bias"][m]), kind="stable")
    a_, b_ = order[K - 1], order[K]
    r2["route_scores"][m, t, b_] = r2["route_scores"][m, t, a_] + r2["route_bias"][m, a_] - r2["route_bias"][m, b_] - 2e-6
    sel = r2["route_scores"] + r2["route_bias"][:, None, :]
    r2["route_ids"] = np.argsort(-sel, -1, kind="stable")[..., :K]
    ref_saved = ref
    ref = r2
    e = eng_like()
    e["route_scores"][m, t, a_] -= 1.5e-6
    e["route_scores"][m, t, b_] += 1.5e-6
    ids = list(r2["route_ids"][m, t])
    ids[ids.index(a_)] = b_
    e["route_ids"][m, t] = np.sort(ids)
    e["hidden"][2:, t:] += 1.0  # what the other expert changes downstream
    d = first_divergence(e, r2, tol, moe)
    check("a changed expert choice is the first divergence", (d["kind"], d["layer"], d["position"]),
          ("route", moe[m], t))
    check("... a near-tie when its margin is within the measured score error", classify(d)[0], "near-tie")
    check("... with the reference's margin", round(d["margin"], 9), 2e-6)
    # the same flip with scores off beyond tolerance is a bug
    e2 = {k: v.copy() for k, v in e.items()}
    e2["route_scores"][m, t, a_] -= 1e-3
    check("a flip with router scores beyond tolerance is a BUG", classify(first_divergence(e2, r2, tol, moe))[0], "BUG")
    # a flip the scores cannot explain (margin far above the score error) is a bug
    ref = ref_saved
    e3 = eng_like()
    ids = list(ref["route_ids"][0, 10])
    ids[0] = next(x for x in range(E) if x not in ids)
    e3["route_ids"][0, 10] = np.sort(ids)
    d = first_divergence(e3, ref, tol, moe)
    check("a flip with a large reference margin is a BUG", (classify(d)[0], d["position"]), ("BUG", 10))
    e4 = eng_like()
    e4["route_scores"][2, 5, 3] += 1e-3
    d = first_divergence(e4, ref, tol, moe)
    check("router scores beyond tolerance (same choice) are a BUG", (d["kind"], d["position"], classify(d)[0]),
          ("route", 5, "BUG"))
    print("scan selftest passed")


def draw_prompts(cfg, n, lo, hi, seed):
    rng = random.Random(seed)
    top = cfg.tc.get("bos_token_id", cfg.vocab)
    top = top if isinstance(top, int) and 0 < top <= cfg.vocab else cfg.vocab
    out = []
    for _ in range(n):
        T = rng.randint(lo, hi)
        out.append([rng.randrange(top) for _ in range(T)])
    return out


def fmt_dist(e):
    return f"max {e.max():.3g}, median {np.median(e):.3g}, p99 {np.quantile(e, 0.99):.3g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--bin", required=True, help="the deltafin binary")
    ap.add_argument("--n", type=int, default=10, help="random prompts (default 10)")
    ap.add_argument("--len", default="300-1000", help="prompt lengths, A-B or N (default 300-1000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompt-ids-file", help="scan this one prompt instead of random ones")
    ap.add_argument("--engine", action="append", default=[],
                    help="engine arguments of one configuration (repeatable; each runs against the "
                         "same reference)")
    ap.add_argument("--safety", type=float, default=8.0,
                    help="tolerance = SAFETY x the measured float32 error (default 8)")
    ap.add_argument("--json", help="write the findings as JSON")
    ap.add_argument("--threads", type=int, default=1, help="reference torch threads")
    ap.add_argument("--ref-device", default="cpu", help="where the reference runs: cpu (default) or cuda")
    ap.add_argument("--time-limit", type=float, default=0,
                    help="draw no new prompt after this many seconds (0 = none); the report says how many ran")
    ap.add_argument("-q", "--quiet", action="store_true", help="only the summary lines")
    ap.add_argument("--selftest", action="store_true", help="check the classifier on made-up data and exit")
    ap.add_argument("extra", nargs="*", help="after --: engine arguments for every configuration")
    if "--selftest" in sys.argv[1:]:
        selftest()
        return
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.ref_device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32
    ref = Ref(a.model, a.ref_device)
    t_start = time.time()
    cfg = ref.cfg
    if a.prompt_ids_file:
        with open(a.prompt_ids_file) as f:
            txt = f.read()
        prompts = [[int(x) for x in txt.replace(",", " ").split()]]
    else:
        lo, _, hi = a.len.partition("-")
        lo, hi = int(lo), int(hi or lo)
        if not 1 <= lo <= hi:
            ap.error("--len: A-B with 1 <= A <= B")
        prompts = draw_prompts(cfg, a.n, lo, hi, a.seed)
    configs = a.engine or [""]
    report = {"model": a.model, "safety": a.safety, "configs": [], "prompts": []}
    nbug = 0
    all_err = []
    with tempfile.TemporaryDirectory() as work:
        for pi, ids in enumerate(prompts):
            if a.time_limit and time.time() - t_start > a.time_limit:
                print(f"scan: --time-limit reached after {pi} of {len(prompts)} prompts", flush=True)
                break
            r64 = ref.run(ref.m64, ids, {})
            # float32 rounding only: the float32 run follows the float64 run's expert choices
            moe = [int(x) for x in r64["moe_layers"]]
            r32 = ref.run(ref.m32, ids, {l: r64["route_ids"][i] for i, l in enumerate(moe)})
            tol = tolerances(r64, r32, a.safety)
            f32_err = np.abs(r32["logits"] - r64["logits"]).max(-1)
            prec = {"index": pi, "length": len(ids), "tolerance_logits_max": float(tol["logits"].max()),
                    "float32_logit_error": {"max": float(f32_err.max()), "median": float(np.median(f32_err)),
                                            "p99": float(np.quantile(f32_err, 0.99))},
                    "runs": []}
            first = None
            for ci, conf in enumerate(configs):
                extra = shlex.split(conf) + a.extra
                eng, meta, _ = engine_logits(a, ids, work, extra)
                if json.loads(meta.get("moe_layers", "[]")) != moe:
                    raise SystemExit(f"scan: engine MoE layers {meta.get('moe_layers')} != reference {moe}")
                res = compare(ref, eng, r64, tol, moe)
                # the engine's contract: bit-identical logits for any batch split and thread count
                same = None
                if first is None:
                    first = eng["logits"].copy()
                else:
                    same = bool(np.array_equal(first, eng["logits"]))
                all_err.append(res["err"])
                run = {"config": " ".join(extra), "ties": [{k: v for k, v in d.items() if k != "moe_index"}
                                                           for d in res["ties"]],
                       "bugs": [{k: v for k, v in d.items() if k != "moe_index"} for d in res["bugs"]],
                       "flagged": res["flagged"],
                       "error": {"max": float(res["err"].max()), "median": float(np.median(res["err"])),
                                 "p99": float(np.quantile(res["err"], 0.99))},
                       "raw_error_max": float(res["raw_err"].max()),
                       "tolerance_used": res["used"],
                       "identical_to_first_config": same,
                       "spine_stream_bytes": int(meta.get("spine_stream_bytes", "0")),
                       "last_top1": {"engine": res["eng_top"][-1], "reference": res["raw_top"][-1]}}
                prec["runs"].append(run)
                nbug += len(res["bugs"])
                tag = "BUG" if res["bugs"] else ("near-tie" if res["ties"] else "ok")
                print(f"prompt {pi} ({len(ids)} positions) [{run['config'] or 'defaults'}]: {tag}; "
                      f"logit error {fmt_dist(res['err'])}; float32's {fmt_dist(f32_err)}; at most "
                      f"{res['used']:.2f} of the tolerance ({a.safety:g} x float32's running max, p90 floor); "
                      f"flagged positions vs the plain reference: {len(res['flagged'])}"
                      f"{'' if same is None else '; logits bit-identical to the first configuration' if same else '; logits DIFFER from the first configuration'}",
                      flush=True)
                if not a.quiet:
                    for d in res["ties"] + res["bugs"]:
                        print(f"  {d['verdict']}: {d['why']}")
                    if res["flagged"]:
                        fl = res["flagged"]
                        print(f"  flagged: {fl[:20]}{' ...' if len(fl) > 20 else ''}"
                              f" (explained by the near-ties above: "
                              f"{'yes' if not res['bugs'] else 'no'})")
            report["prompts"].append(prec)
            if a.json:  # after every prompt, so a run stopped early still leaves its findings
                write_json(a.json, summarise(report, all_err, nbug, ref, configs))
    report = summarise(report, all_err, nbug, ref, configs)
    e = np.concatenate(all_err)
    print(f"scan: {len(report['prompts'])} prompts x {len(configs)} configurations, {e.size} positions: "
          f"logit error {fmt_dist(e)}; {report['near_ties']} near-ties, {nbug} BUG; reference "
          f"{ref.seconds:.1f} s")
    if a.json:
        write_json(a.json, report)
    sys.exit(1 if nbug else 0)


def summarise(report, all_err, nbug, ref, configs):
    report["configs"] = list(configs)
    e = np.concatenate(all_err)
    report["error"] = {"max": float(e.max()), "median": float(np.median(e)), "p99": float(np.quantile(e, 0.99)),
                       "positions": int(e.size)}
    report["bugs"] = nbug
    report["near_ties"] = sum(len(r["ties"]) for p in report["prompts"] for r in p["runs"])
    report["reference_seconds"] = ref.seconds
    return report


def write_json(path, report):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    main()

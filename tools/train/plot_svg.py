#!/usr/bin/python3
"""Loss curves of the training logs as one SVG (no plotting library).

  plot_svg.py --out docs/nano-training.svg LABEL=LOG.jsonl:TOKENS_PER_STEP ...
Each log contributes its training loss (thin) and held-out loss (thick, dots) against the tokens seen.
"""
import argparse
import json

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="nano-K3 and nano-draft training")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    series = []
    for r in a.runs:
        label, rest = r.split("=", 1)
        path, tps = rest.rsplit(":", 1)
        tr, he = [], []
        for line in open(path):
            d = json.loads(line)
            if "step" not in d or d.get("final"):
                continue
            x = d["step"] * int(tps) / 1e6
            if "loss" in d:
                tr.append((x, d["loss"]))
            if "heldout_loss" in d:
                he.append((x, d["heldout_loss"]))
        series.append((label, tr, he))
    W, H, L, R, T, B = 760, 440, 60, 190, 40, 50
    xmax = max(p[0] for _, tr, he in series for p in tr + he)
    ymin, ymax = 2.0, 8.5
    X = lambda x: L + (W - L - R) * x / xmax
    Y = lambda y: T + (H - T - B) * (ymax - min(max(y, ymin), ymax)) / (ymax - ymin)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2 - 60}" y="22" font-size="15" text-anchor="middle">{a.title}</text>']
    for k in range(int(ymin), int(ymax) + 1):
        o.append(f'<line x1="{L}" y1="{Y(k):.1f}" x2="{W - R}" y2="{Y(k):.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{L - 8}" y="{Y(k) + 4:.1f}" text-anchor="end">{k}</text>')
    step = 5 if xmax > 20 else 2
    x = 0
    while x <= xmax + 1e-9:
        o.append(f'<line x1="{X(x):.1f}" y1="{T}" x2="{X(x):.1f}" y2="{H - B}" stroke="#eee"/>')
        o.append(f'<text x="{X(x):.1f}" y="{H - B + 16}" text-anchor="middle">{x:g}</text>')
        x += step
    o.append(f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="#333"/>')
    o.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">training tokens seen (millions)</text>')
    o.append(f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" '
             f'text-anchor="middle">cross-entropy (nats per token of its own tokenizer)</text>')
    ly = T + 10
    for i, (label, tr, he) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        if tr:
            pts = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in tr)
            o.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1" opacity="0.6"/>')
        if he:
            pts = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in he)
            o.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2.5"/>')
            for x, y in he:
                o.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="2.5" fill="{c}"/>')
        o.append(f'<line x1="{W - R + 12}" y1="{ly}" x2="{W - R + 30}" y2="{ly}" stroke="{c}" stroke-width="1"/>')
        o.append(f'<text x="{W - R + 34}" y="{ly + 4}">{label} train</text>')
        o.append(f'<line x1="{W - R + 12}" y1="{ly + 16}" x2="{W - R + 30}" y2="{ly + 16}" stroke="{c}" stroke-width="2.5"/>')
        o.append(f'<text x="{W - R + 34}" y="{ly + 20}">{label} held-out</text>')
        ly += 44
    o.append("</svg>")
    with open(a.out + ".tmp", "w") as f:
        f.write("\n".join(o) + "\n")
    import os
    os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()

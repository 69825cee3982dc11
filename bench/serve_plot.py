#!/usr/bin/env python3
"""serve_plot.py OUT.svg RESULT.json...: decode tokens/s against batch, dense
and sparse, for each result of bench/serve.py, as one SVG (standard library
only, so it runs anywhere the JSON is). Results of one label (one model
measured in several runs of some batches each) are one series."""

import json
import math
import sys

W, H = 720, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 200, 40, 50
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: serve_plot.py OUT.svg RESULT.json...")
    runs = []
    for path in sys.argv[2:]:
        with open(path) as f:
            r = json.load(f)
        same = next((q for q in runs if q["label"] == r["label"]), None)
        if same is None:
            runs.append(r)
        else:
            for rows in ("sparse_rows", "dense_rows"):
                same[rows] = {**same[rows], **r[rows]}
    batches = sorted({int(b) for r in runs for b in r["sparse_rows"]})
    top = max(row["decode_tok_s"] for r in runs for rows in ("sparse_rows", "dense_rows") for row in r[rows].values())
    ymax = 10 ** math.ceil(math.log10(top))
    ymax = next(v for v in (ymax / 4, ymax / 2, ymax) if v >= top)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    lo, hi = math.log2(batches[0]), math.log2(batches[-1])

    def x(b):
        return LEFT + (math.log2(b) - lo) / max(hi - lo, 1) * pw

    def y(v):
        return TOP + ph - v / ymax * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT}" y="22" font-size="14">Decode tokens/s, transformers generate (static cache, '
           f'torch.compile), {runs[0]["env"]["gpu"]}</text>']
    for i in range(5):
        v = ymax * i / 4
        out.append(f'<line x1="{LEFT}" y1="{y(v):.1f}" x2="{LEFT + pw}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    for b in batches:
        out.append(f'<text x="{x(b):.1f}" y="{TOP + ph + 18}" text-anchor="middle">{b}</text>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 12}" text-anchor="middle">batch (prompt {runs[0]["prompt"]}, '
               f'{runs[0]["new"]} new tokens)</text>')
    out.append(f'<line x1="{LEFT}" y1="{TOP + ph}" x2="{LEFT + pw}" y2="{TOP + ph}" stroke="black"/>')
    out.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + ph}" stroke="black"/>')
    legend = 0
    for i, r in enumerate(runs):
        c = COLOURS[i % len(COLOURS)]
        for kind, dash in (("sparse", ""), ("dense", ' stroke-dasharray="5,4"')):
            rows = r[f"{kind}_rows"]
            pts = [(x(b), y(rows[str(b)]["decode_tok_s"])) for b in batches if str(b) in rows]
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
            for px, py in pts:
                out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{c}"/>')
            ly = TOP + 10 + 18 * legend
            out.append(f'<line x1="{LEFT + pw + 12}" y1="{ly}" x2="{LEFT + pw + 40}" y2="{ly}" stroke="{c}" stroke-width="2"{dash}/>')
            out.append(f'<text x="{LEFT + pw + 46}" y="{ly + 4}">{r["label"]} {"2:4 (ours)" if kind == "sparse" else "dense"}</text>')
            legend += 1
    out.append("</svg>")
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()

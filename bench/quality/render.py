#!/usr/bin/env python3
"""render.py: the quality document from run.py's JSON (with throughput.py's
figures where it added them).

    python3 bench/quality/render.py docs/quality-h200.json > docs/quality-h200.md

Standard library only; python/tests/test_quality_doc.py renders a
synthetic result and checks every figure, and checks that a committed
document is the rendering of its committed JSON.
"""

import json
import os
import sys
from typing import List, Mapping, Optional

# The bounds, stated beside the figures they bound.
SERVED_BOUND = 0.001  # served ampere vs dense-pruned perplexity, relative
HELDOUT_BOUND = 0.10  # held-out vs train-window perplexity of the dense model, relative
SPEED_TARGET = 1.1  # served 2:4 tokens/s over dense, 8B shape
OVERHEAD_BOUND = 1.10  # dense evaluation time over a bare model(input_ids) loop's


def ppl(x: float) -> str:
    return f"{x:.4f}"


def pct(x: float) -> str:
    """A signed relative difference in percent: 4 decimals below 1%."""
    return f"{x * 100:+.4f}%" if abs(x) < 0.01 else f"{x * 100:+.1f}%"


def count(n: float) -> str:
    return f"{n:,.0f}"


def millions(n: float) -> str:
    return f"{n / 1e6:.1f}M"


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def rel(a: float, b: float) -> float:
    return (a - b) / b


def shape_name(shape: str) -> str:
    """A synth shape as a model name: llama3-8b is Llama-3-8B."""
    names = {"llama3-8b": "Llama-3-8B", "llama3-70b": "Llama-3-70B", "llama2-7b": "Llama-2-7B", "tinyllama": "TinyLlama"}
    return names.get(shape, shape)


def method_label(row: Mapping) -> str:
    label = f"{row['method']} 2:4"
    return label if row.get("seed") is None else f"{label} (seed {row['seed']})"


def table(header: List[str], rows: List[List[str]]) -> List[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def divergence(c: Mapping) -> str:
    return "none" if c["first_divergence"] is None else str(c["first_divergence"])


def summary(doc: Mapping) -> List[str]:
    d = doc["dense"]["heldout"]["perplexity"]
    mag = next((r for r in doc["rows"] if r["method"] == "magnitude"), doc["rows"][0])
    p, s = mag["dense_pruned"]["perplexity"], mag["ampere"]["perplexity"]
    worst = max(abs(r["served_vs_dense_pruned"]) for r in doc["rows"])
    most = f"; over all rows at most {worst * 100:.4f}% either way" if len(doc["rows"]) > 1 else ""
    out = [f"{method_label(mag).capitalize()} raises the test model's held-out perplexity from {ppl(d)} to {ppl(p)} "
           f"({pct(rel(p, d))}). Served through sfsurgery's kernels, its `ampere` output scores {ppl(s)}: "
           f"{pct(mag['served_vs_dense_pruned'])} from the same pruned weights run densely by transformers "
           f"(the bound is {SERVED_BOUND:.1%}{most})."]
    t = doc.get("throughput")
    if t:
        out[0] += (f" On a {shape_name(t['shape'])}-shaped checkpoint the served 2:4 model evaluates at {t['served_vs_dense']:.2f}x the "
                   f"dense model's tokens/s, and the dense evaluation takes {t['dense_eval_vs_bare']:.3f}x the time of a "
                   f"bare `model(input_ids)` loop.")
    return out


def model_section(doc: Mapping) -> List[str]:
    m = doc["model"]
    r, c = m["recipe"], m["corpus"]
    rows = [
        ["parameters", f"{millions(m['parameters'])} (hidden {r['hidden']}, intermediate {r['intermediate']}, "
                       f"{r['layers']} layers, {r['heads']} heads, {r['kv_heads']} KV heads, vocabulary "
                       f"{m['tokenizer']['vocab']:,}, untied embeddings, {r['max_positions']} positions)"],
        ["corpus", f"{c['bytes'] / 1e6:.1f} MB in {count(c['files'])} files of the host's Python installation "
                   f"(standard library and site-packages): {count(c['train_files'])} training files "
                   f"({millions(c['train_tokens'])} tokens), {count(c['heldout_files'])} held out by a hash of their names"],
        ["tokenizer", f"byte-level BPE of {m['tokenizer']['vocab']:,} trained on {count(m['tokenizer']['files'])} training files"],
        ["training", f"{count(m['steps'])} steps of {r['batch']} × {r['seqlen']} tokens: {millions(m['tokens_trained'])} "
                     f"tokens, {m['epochs']:.2f} of an epoch, {m['train_seconds']:.0f} s; AdamW {tuple(r['betas'])}, "
                     f"weight decay {r['weight_decay']}, peak learning rate {r['peak_lr']:g}, {r['warmup']} warm-up steps "
                     f"then cosine to {r['final_lr_fraction']:.0%}, bf16 autocast; final loss {m['final_loss']:.4f}"],
        ["recipe", f"`bench/quality/train.py`{' --quick' if r['name'] == 'quick' else ''}, seed {m['seed']}, "
                   f"{m['seconds']['total']:.0f} s in all on one {m['gpu']}"],
    ]
    return ["## The test model", "",
            "transformers' `LlamaForCausalLM` (RMSNorm, RoPE, grouped-query attention, SwiGLU MLP), trained from "
            "scratch on the GPU host, written as an ordinary Hugging Face directory with its own tokenizer.", ""] + table(["", ""], rows)


def perplexity_section(doc: Mapping) -> List[str]:
    dh, dt = doc["dense"]["heldout"], doc["dense"]["train"]
    d = dh["perplexity"]
    rows = [["dense", ppl(d), "", "", ""]]
    for r in doc["rows"]:
        p, s = r["dense_pruned"]["perplexity"], r["ampere"]["perplexity"]
        rows.append([f"{method_label(r)}, dense-pruned (transformers)", ppl(p), pct(rel(p, d)), "",
                     f"{r['kept_magnitude_fraction']:.4f}"])
        rows.append([f"{method_label(r)}, ampere (sfsurgery's kernels)", ppl(s), pct(rel(s, d)),
                     pct(r["served_vs_dense_pruned"]), f"{r['kept_magnitude_fraction_ampere']:.4f}"])
    split = doc["dense"].get("train_split")
    out = ["## Perplexity", "",
           f"Each figure is `python -m sfsurgery perplexity` over {count(dh['windows'])} windows of {dh['seqlen']} tokens "
           f"of heldout.txt ({count(dh['text_tokens'])} tokens{heads(doc)} of held-out files, never trained on), scored as the Wanda "
           f"and SparseGPT papers score: the mean negative log-likelihood of every token after a window's first, exp. "
           f"Kept magnitude is Σ|kept| / Σ|all| over the pruned weights, from each output's prune report.", ""]
    out += table(["model", "held-out perplexity", "vs dense", "served vs dense-pruned", "kept magnitude"], rows)
    out += ["", f"The dense model on {count(dt['windows'])} windows of train.txt (the heads of files it trained on): "
                f"{ppl(dt['perplexity'])}; held-out is {pct(rel(d, dt['perplexity']))} from it (the bound for a model that is "
                f"not overfit: {HELDOUT_BOUND:.0%})."]
    if split:
        out[-1] += (f" On {count(split['windows'])} windows of trainsplit.txt (training files drawn as the held-out files are, "
                    f"whether or not training reached them): {ppl(split['perplexity'])}, held-out "
                    f"{pct(rel(d, split['perplexity']))} from it.")
    return out


def heads(doc: Mapping) -> str:
    """How much of each file the evaluation texts hold, as a phrase after
    "N tokens" (nothing for a recipe that took whole files)."""
    cap = doc["model"].get("recipe", {}).get("file_bytes")
    return f": the heads, up to {cap // 1024} KiB of whole lines," if cap else ""


def mean(xs: List[float]) -> float:
    return sum(xs) / len(xs)


def seed_figures(row: Mapping) -> List[float]:
    """A row's dense-pruned held-out perplexity at each calibration seed
    (the row's own alone where it has no seeds)."""
    return [s["perplexity"] for s in row.get("seeds") or [dict(perplexity=row["dense_pruned"]["perplexity"])]]


# The order of the methods on the test model, best first, and its
# bound on SparseGPT's increase over dense relative to magnitude's.
ORDER = (("sparsegpt", "ria"), ("sparsegpt", "wanda"), ("ria", "magnitude"), ("wanda", "magnitude"))
SPARSEGPT_BOUND = 0.4


def methods_section(doc: Mapping) -> List[str]:
    """The calibrated methods: perplexity over seeds, the reference
    implementations, calibration time and memory, and the order of the
    methods against the spread over seeds."""
    cal = [r for r in doc["rows"] if r.get("calibration")]
    if not cal:
        return []
    d = doc["dense"]["heldout"]["perplexity"]
    by = {r["method"]: r for r in doc["rows"]}
    rows = []
    for r in cal:
        figs = seed_figures(r)
        ref = r.get("reference")
        rows.append([r["method"], ppl(r["dense_pruned"]["perplexity"]), ppl(r["ampere"]["perplexity"]),
                     f"{ppl(min(figs))} – {ppl(max(figs))} ({len(figs)} seed{'s' if len(figs) != 1 else ''})", f"{max(figs) - min(figs):.4f}",
                     ppl(ref["perplexity"]) if ref else "", f"{ref['ours_over_reference']:.4f}" if ref else "",
                     f"{r['calibration']['seconds']:.1f}", gib(r["calibration"]["peak_gpu_bytes"])])
    c0 = cal[0]["calibration"]
    out = ["## Calibrated methods", "",
           f"`python -m sfsurgery calibrate` on {doc.get('samples', c0.get('samples'))} samples of {c0.get('seqlen', doc['seqlen'])} "
           f"tokens of train.txt (seeded random windows), block by block, then `sfsurgery prune --decisions`. The row's "
           f"figures are at calibration seed {cal[0]['seed']}; the seeds column gives the dense-pruned perplexity's range over "
           f"every seed run. The reference is the plain implementation of the published algorithm in "
           f"`python/tests/reference_calibration.py` (the whole model on the GPU, hooks, one sample at a time), run on the "
           f"same samples and scored the same way.", ""]
    out += table(["method", "held-out, dense-pruned", "served (ampere)", "over seeds", "spread", "reference", "ours / reference",
                  "calibration s", "peak GPU memory"], rows)
    checks = []
    for a, b in ORDER:
        if a in by and b in by:
            fa, fb = seed_figures(by[a]), seed_figures(by[b])
            gap = mean(fb) - mean(fa)
            spread = max(max(fa) - min(fa), max(fb) - min(fb))
            checks.append([f"{a} < {b}", f"{mean(fa):.4f} < {mean(fb):.4f}", f"{gap:.4f}", f"{spread:.4f}",
                           "yes" if gap > spread else "no"])
    if checks:
        out += ["", "The order of the methods (mean held-out perplexity over the seeds; a gap counts when it is larger "
                    "than the larger spread over seeds of the two):", ""]
        out += table(["order", "perplexity", "gap", "larger spread", "holds"], checks)
    if "sparsegpt" in by and "magnitude" in by:
        sg = mean(seed_figures(by["sparsegpt"])) - d
        mg = by["magnitude"]["dense_pruned"]["perplexity"] - d
        out += ["", f"SparseGPT raises held-out perplexity by {sg:.4f} over dense, {sg / mg:.2f}x magnitude's {mg:.4f} "
                    f"(the bound: {SPARSEGPT_BOUND}x)."]
    return out


# The bounds on calibration at scale: seconds on the 8B shape
# (model loading excluded), and the deeper 70B-shaped checkpoint's peak
# GPU memory over the shallower one's.
TIME_BOUNDS = {"wanda": 45.0, "ria": 45.0, "sparsegpt": 240.0}
DEPTH_BOUND = 1.10


def scale_section(doc: Mapping) -> List[str]:
    """Calibration time on the 8B shape and peak memory against depth
    (scale.py)."""
    sc = doc.get("scale")
    if not sc:
        return []
    out = ["## Calibration at model scale", ""]
    t = sc["times"]
    if t["methods"]:
        rows = [[m, f"{r['seconds']:.1f}", f"{r['load_seconds']:.1f}", f"{r['compute_seconds']:.1f}",
                 f"{TIME_BOUNDS[m]:.0f}" if m in TIME_BOUNDS else "", gib(r["peak_gpu_bytes"])] for m, r in t["methods"].items()]
        first = next(iter(t["methods"].values()))
        out += [f"A {shape_name(t['shape'])}-shaped checkpoint (`sfsurgery synth`: random weights, the test model's tokenizer), "
                f"{first['samples']} samples of {first['seqlen']} tokens of train.txt, one calibration each (seconds from the "
                f"first sample's embedding to the last decision written; of those, the seconds spent waiting for a layer's "
                f"weights from the page cache):", ""]
        out += table(["method", "seconds", "waiting for weights", "the rest", "bound (s)", "peak GPU memory"], rows)
    dp = sc["depth"]
    if dp["layers"]:
        rows = [[n, gib(r["peak_gpu_bytes"]), f"{r['seconds']:.1f}"] for n, r in dp["layers"].items()]
        out += ["", f"Peak GPU memory of {dp['method']} against depth: {shape_name(dp['shape'])}-shaped checkpoints of a few "
                    f"decoder layers, {dp['samples']} samples of {sc['seqlen']} tokens:", ""]
        out += table(["decoder layers", "peak GPU memory", "seconds"], rows)
        if "deepest_over_shallowest" in dp:
            out += ["", f"The deepest needs {dp['deepest_over_shallowest']:.3f}x the shallowest's peak (the bound: "
                        f"{DEPTH_BOUND:.2f}x)."]
    return out


def quoted(s: str) -> str:
    """A continuation as a one-line Python literal."""
    return repr(s)


def greedy_section(doc: Mapping) -> List[str]:
    g = doc["greedy"]
    n = g["new_tokens"]
    out = ["## Greedy continuations", "",
           f"{len(g['prompts'])} held-out prompts of {g['prompt_tokens']} tokens, {n} tokens each, greedy: how many "
           f"positions agree and the first that does not. Where the served model parts from the dense-pruned one, the "
           f"gap is the dense-pruned model's margin between its two best logits there.", ""]
    for r in doc["rows"]:
        if len(doc["rows"]) > 1:
            out += [f"### {method_label(r)}", ""]
        rows = []
        for i, (p, c) in enumerate(zip(g["prompts"], r["greedy"]), 1):
            pv, av = c["pruned_vs_dense"], c["ampere_vs_pruned"]
            gap = "" if av.get("gap") is None else f" (gap {av['gap']:.3g})"
            rows.append([f"{i} (token {count(p['offset'])})", f"{pv['same']} of {n}", divergence(pv),
                         f"{av['same']} of {n}", divergence(av) + gap])
        out += table(["prompt", "dense-pruned = dense", "first divergence", "ampere = dense-pruned", "first divergence"], rows)
        out += [""]
    r = doc["rows"][0]
    out += [f"The texts ({method_label(r)}):", "", "```text"]
    for i, (p, c) in enumerate(zip(g["prompts"], r["greedy"]), 1):
        out += [f"prompt {i}:      {quoted(p['prompt'])}", f"dense:         {quoted(p['dense_text'])}",
                f"dense-pruned:  {quoted(c['dense_pruned_text'])}", f"ampere:        {quoted(c['ampere_text'])}"]
        if i < len(g["prompts"]):
            out.append("")
    return out + ["```"]


def speed_section(doc: Mapping) -> List[str]:
    r = doc["rows"][0]
    rows = [["test model, dense", count(doc["dense"]["heldout"]["tokens_per_s"]), f"{doc['dense']['heldout']['seconds']:.2f}",
             str(doc["dense"]["heldout"]["batch"])],
            [f"test model, {method_label(r)}, ampere (sfsurgery's kernels)", count(r["ampere"]["tokens_per_s"]),
             f"{r['ampere']['seconds']:.2f}", str(r["ampere"]["batch"])]]
    out = ["## Evaluation speed", "",
           "The held-out evaluations above, timed from a synchronized start to a synchronized end of the loop (model "
           "loading excluded):", ""]
    out += table(["model", "tokens/s", "seconds", "windows a pass"], rows)
    t = doc.get("throughput")
    if t:
        d, a = t["dense"], t["ampere"]
        layers = f", {t['layers']} layers" if t.get("layers") else ""
        out += ["", f"A {shape_name(t['shape'])}-shaped checkpoint (`sfsurgery synth`{layers}: random weights, the test model's tokenizer), "
                    f"{t['windows']} windows of {t['seqlen']} tokens of heldout.txt, {t['batch']} a pass; both models loaded "
                    f"in one process, each loop the best of two visits in alternating order:", ""]
        out += table(["", "dense", "served 2:4 (ampere)"], [
            ["evaluation (`sfsurgery.perplexity.evaluate`), tokens/s", count(d["eval_tokens_per_s"]), count(a["eval_tokens_per_s"])],
            ["bare `model(input_ids)` loop, tokens/s", count(d["bare_tokens_per_s"]), count(a["bare_tokens_per_s"])],
            ["evaluation time / bare loop time", f"{t['dense_eval_vs_bare']:.3f}", f"{t['ampere_eval_vs_bare']:.3f}"],
        ])
        out += ["", f"Served 2:4 evaluates at {t['served_vs_dense']:.2f}x the dense model's tokens/s (the target: "
                    f"{SPEED_TARGET}x); the dense evaluation takes {t['dense_eval_vs_bare']:.3f}x the bare loop's time "
                    f"(the bound: {OVERHEAD_BOUND:.2f})."]
    return out


def reproduce_section(doc: Mapping, name: str) -> List[str]:
    cmds = [doc["command"]]
    t = doc.get("throughput")
    if t:
        cmds.append(t["command"])
    if doc.get("scale"):
        cmds.append(doc["scale"]["command"])
    cmds.append(f"python3 bench/quality/render.py {name} > {os.path.splitext(name)[0]}.md")
    out = ["## Reproduce", "",
           "From the repository root on a GPU host, with the sfsurgery binary built for it (`--work` keeps the test model "
           "for throughput.py):", "", "```sh"] + cmds + ["```", "", "The commands they ran ($WORK is run.py's work directory, $DIR throughput.py's and scale.py's, $TESTMODEL the test model's):",
                                                         "", "```sh"] + doc["commands"]
    if t:
        out += t["commands"]
    if doc.get("scale"):
        out += doc["scale"]["commands"]
    return out + ["```"]


def environment_section(doc: Mapping) -> List[str]:
    e = doc["env"]
    keys = [("GPU", "gpu"), ("driver", "driver"), ("CUDA (torch)", "cuda"), ("torch", "torch"), ("transformers", "transformers"),
            ("tokenizers", "tokenizers"), ("Python", "python"), ("sfsurgery", "sfsurgery")]
    rows = [[k, f"{e[v]}"] for k, v in keys if e.get(v)]
    cal = sorted({s["seed"] for r in doc["rows"] for s in r.get("seeds") or []}
                 | {r["seed"] for r in doc["rows"] if r.get("seed") is not None})
    rows.append(["seeds", f"training and prompts {doc['seed']}" + (f"; calibration {', '.join(map(str, cal))}" if cal else "")])
    rows.append(["run time", f"{doc['seconds']:.0f} s (run.py, training included)"])
    return ["## Environment", ""] + table(["", ""], rows)


def render(doc: Mapping, name: str = "quality-h200.json") -> str:
    """The markdown document of run.py's result doc (name: the JSON's path
    as the reproduce commands give it)."""
    gpu = doc["env"].get("gpu") or "GPU"
    parts = [[f"# What 2:4 pruning costs: the test model on an {gpu}", "",
              f"<!-- Generated by bench/quality/render.py from {os.path.basename(name)}: change the generator or rerun "
              f"the measurement, do not edit. -->", ""] + summary(doc)]
    parts += [p for p in (model_section(doc), perplexity_section(doc), methods_section(doc), scale_section(doc),
                          greedy_section(doc), speed_section(doc), reproduce_section(doc, name), environment_section(doc)) if p]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: render.py QUALITY.json > QUALITY.md", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        doc = json.load(f)
    sys.stdout.write(render(doc, argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

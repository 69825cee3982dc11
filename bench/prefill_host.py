#!/usr/bin/env python3
"""prefill_host.py: where a prompt's prefill spends its time, the host's
launches or the GPU, for the 2:4 model against the dense model it was
pruned from.

    python3 bench/prefill_host.py --sparse DIR --dense DIR [--tokens 512]
        [--batch 1] [--reps 20] [--top 12] [--json OUT] [--package DIR]

Both checkpoints are loaded at once with transformers (the ampere one
through the package, so its projections run our kernels) and measured
alternately (sparse, dense, dense, sparse), each a prompt of `tokens`
random ids × `batch`, under torch.no_grad():

- forward: `model(ids, use_cache=False, logits_to_keep=1)` (the logits
  of the last token, as `generate` computes them), eager, synchronized
  before and after: the wall time;
- host: the same forward from an idle GPU, until the call returns: the
  host's time to issue it (at most the wall time; close to it where the
  GPU keeps up with the launches, and also where a GPU-bound forward has
  queued the launches the driver holds, about a thousand, and each next
  one waits);
- ttft: `generate` of one new token with a static cache (the prefill as
  bench/serve.py times the time to first token): the wall time;
- from one profiled forward (torch.profiler): the GPU's busy time, the
  device time of the kernels and copies it records, and their count; and
  the operators with the most host time (self), their calls and their
  host µs.

Each time is the median and the best of `reps` runs a visit, over both
visits. A forward whose GPU is busy for less than 90% of its wall time
is bound by the host's launches ("host"; else "GPU"): there the GPU time
the 2:4 products save does not reach the time to first token. Headline: dense's time over ours for
each (above 1: ours faster). Needs torch, transformers, a CUDA GPU and the
sfsurgery binary (to plan the launches: $SFSURGERY_BIN or PATH); the
arguments, the summary and the table need none of them
(python/tests/test_prefill_host.py).
"""

import argparse
import os
import shlex
import statistics
import sys
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import op_host  # noqa: E402  (positive, run_on_gpu: the same conventions)

SCHEMA = "sfsurgery-prefill-host/1"
# What is timed per model, in the table's order: (key, header).
TIMES = [("forward", "forward"), ("host", "host"), ("ttft", "ttft")]
# The visits, so that a drift of the host's or the GPU's speed hits both.
ORDER = ("sparse", "dense", "dense", "sparse")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="prefill_host.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sparse", required=True, metavar="DIR", help="the ampere checkpoint")
    ap.add_argument("--dense", required=True, metavar="DIR", help="the dense checkpoint it was pruned from")
    ap.add_argument("--tokens", type=op_host.positive, default=512, help="prompt tokens (default 512)")
    ap.add_argument("--batch", type=op_host.positive, default=1, help="prompts (default 1)")
    ap.add_argument("--reps", type=op_host.positive, default=20, help="timed runs a visit (default 20)")
    ap.add_argument("--top", type=op_host.positive, default=12, help="operators listed by host time (default 12)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    ap.add_argument("--package", default=op_host.PACKAGE, metavar="DIR",
                    help="the directory to import sfsurgery from (default this repository's python/)")
    return ap


def summary(samples: Sequence[float]) -> Dict[str, float]:
    """The median and the best (least) of samples, in ms."""
    return {"median_ms": statistics.median(samples) * 1e3, "best_ms": min(samples) * 1e3}


def ratios(models: Dict[str, dict]) -> Dict[str, Optional[float]]:
    """Dense's median over ours for each time and the GPU's busy time
    (None where either is missing or zero)."""
    out: Dict[str, Optional[float]] = {}
    s, d = models.get("sparse", {}), models.get("dense", {})
    for key, _ in TIMES:
        a, b = (s.get(key) or {}).get("median_ms"), (d.get(key) or {}).get("median_ms")
        out[key] = b / a if a and b else None
    a, b = s.get("gpu_busy_ms"), d.get("gpu_busy_ms")
    out["gpu_busy"] = b / a if a and b else None
    return out


def top_ops(events: Iterable, n: int) -> List[dict]:
    """The n profiler rows (key_averages) with the most self host time:
    name, calls, self and total host µs."""
    rows = [{"name": e.key, "calls": e.count, "self_host_us": e.self_cpu_time_total, "host_us": e.cpu_time_total}
            for e in events]
    rows.sort(key=lambda r: (-r["self_host_us"], r["name"]))
    return rows[:n]


def device_us(event) -> float:
    """An averaged profiler event's self device µs (torch ≥ 2.4 names it
    self_device_time_total, older ones self_cuda_time_total)."""
    v = getattr(event, "self_device_time_total", None)
    if v is None:
        v = getattr(event, "self_cuda_time_total", 0.0)
    return float(v or 0.0)


def device_events(events: Iterable) -> List:
    """The device's own events (its kernels and copies) among a profiler's
    averaged events: not the operators that launched them (which carry
    the same device time), nor user annotations."""
    out = []
    for e in events:
        kind = str(getattr(e, "device_type", "")).rsplit(".", 1)[-1]
        if kind in ("", "CPU") or getattr(e, "is_user_annotation", False):
            continue
        out.append(e)
    return out


def gpu_busy_ms(events: Iterable) -> float:
    """The GPU's busy time in a profiled run, ms: the self device time of
    its device events, as the profiler's table totals it."""
    return sum(device_us(e) for e in device_events(events)) / 1e3


def kernel_count(events: Iterable) -> int:
    """The kernels and copies the device ran in a profiled run."""
    return sum(int(e.count) for e in device_events(events))


def render(doc: dict) -> str:
    """The results as text: per model the times (median, best), the GPU's
    busy time, the ratios, then each model's operators with the most host
    time."""
    lines = [f"{doc['device']}, torch {doc['torch']}, transformers {doc['transformers']}; "
             f"{doc['batch']} x {doc['tokens']} tokens, eager, no_grad; ms, median (best) of {doc['reps']} runs a visit"]
    head = ["model"] + [h for _, h in TIMES] + ["GPU busy", "kernels", "bound"]
    rows = []
    for name in ("sparse", "dense"):
        m = doc["models"].get(name)
        if not m:
            continue
        cells = [name]
        for key, _ in TIMES:
            t = m.get(key)
            cells.append("-" if not t else f"{t['median_ms']:.2f} ({t['best_ms']:.2f})")
        cells.append("-" if m.get("gpu_busy_ms") is None else f"{m['gpu_busy_ms']:.2f}")
        cells.append("-" if m.get("kernels") is None else str(m["kernels"]))
        cells.append(bound(m))
        rows.append(cells)
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    for row in [head] + rows:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    r = doc.get("ratio") or {}
    parts = [f"{key} {r[key]:.2f}x" for key in [k for k, _ in TIMES] + ["gpu_busy"] if r.get(key) is not None]
    if parts:
        lines.append("dense over ours: " + ", ".join(parts))
    for name in ("sparse", "dense"):
        ops = (doc["models"].get(name) or {}).get("top_ops")
        if not ops:
            continue
        lines.append("")
        lines.append(f"{name}: the operators with the most host time in one forward (profiled; calls, self µs, total µs)")
        w = max(len(o["name"]) for o in ops)
        for o in ops:
            lines.append(f"  {o['name'].ljust(w)}  {o['calls']:5d}  {o['self_host_us']:9.1f}  {o['host_us']:9.1f}")
    return "\n".join(lines) + "\n"


def bound(m: dict) -> str:
    """"host" where the GPU is busy for less than 90% of the forward's
    median wall time (it waits for the launches), else "GPU"; "-" without
    both."""
    f, g = (m.get("forward") or {}).get("median_ms"), m.get("gpu_busy_ms")
    if not f or g is None:
        return "-"
    return "host" if g < 0.9 * f else "GPU"


# Everything below needs torch, transformers and a GPU.


def wall_s(fn: Callable[[], object]) -> float:
    """Seconds of fn from a synchronized start to a synchronized end."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def visit(model, ids, reps: int) -> Dict[str, List[float]]:
    """One visit of a model: reps samples of each time (module doc)."""
    import torch

    gen = dict(do_sample=False, cache_implementation="static", max_new_tokens=1, min_new_tokens=1)

    def forward():
        with torch.no_grad():
            model(ids, use_cache=False, logits_to_keep=1)

    def first_token():
        model.generate(ids, **gen)

    for _ in range(2):
        forward()
        first_token()
    out: Dict[str, List[float]] = {"forward": [], "host": [], "ttft": []}
    for _ in range(reps):
        out["forward"].append(wall_s(forward))
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        forward()
        out["host"].append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    for _ in range(reps):
        out["ttft"].append(wall_s(first_token))
    return out


def profiled(model, ids, top: int) -> dict:
    """The GPU's busy time, the kernels and the top operators of one
    profiled forward (after one profiled run thrown away, so that the
    profiler's first-use cost lands in neither model's)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        for _ in range(2):
            model(ids, use_cache=False, logits_to_keep=1)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                model(ids, use_cache=False, logits_to_keep=1)
                torch.cuda.synchronize()
    events = prof.key_averages()
    return {"gpu_busy_ms": gpu_busy_ms(events), "kernels": kernel_count(events), "top_ops": top_ops(events, top)}


def measure(args) -> dict:
    """Both models, visited in ORDER (module doc), as the JSON document."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    import sfsurgery  # noqa: F401  (registers the quantizer for ampere checkpoints)

    models = {
        "sparse": AutoModelForCausalLM.from_pretrained(args.sparse, device_map="cuda"),
        "dense": AutoModelForCausalLM.from_pretrained(args.dense, device_map="cuda", dtype=torch.bfloat16),
    }
    vocab = models["dense"].config.vocab_size
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    ids = torch.randint(3, vocab, (args.batch, args.tokens), device="cuda", generator=gen)
    samples: Dict[str, Dict[str, List[float]]] = {name: {key: [] for key, _ in TIMES} for name in models}
    for name in ORDER:
        for key, got in visit(models[name], ids, args.reps).items():
            samples[name][key] += got
        print(f"{name}: " + ", ".join(f"{k} {statistics.median(v) * 1e3:.2f} ms" if v else f"{k} -"
                                      for k, v in samples[name].items()),
              file=sys.stderr)
    out = {}
    for name, model in models.items():
        out[name] = {key: summary(v) if v else None for key, v in samples[name].items()}
        out[name].update(profiled(model, ids, args.top))
    return {"schema": SCHEMA, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "transformers": transformers.__version__, "sparse": os.path.abspath(args.sparse),
            "dense": os.path.abspath(args.dense), "tokens": args.tokens, "batch": args.batch, "reps": args.reps,
            "command": shlex.join(["python3"] + sys.argv), "models": out, "ratio": ratios(out)}


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    for flag, path in (("--sparse", args.sparse), ("--dense", args.dense)):
        if not os.path.isfile(os.path.join(path, "config.json")):
            print(f"prefill_host.py: {flag} {path}: no config.json in it", file=sys.stderr)
            return 2
    return op_host.run_on_gpu("prefill_host.py", args, measure, render)


if __name__ == "__main__":
    sys.exit(main())

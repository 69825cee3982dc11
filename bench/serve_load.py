"""serve_load.py: the time `from_pretrained` takes to load an ampere
checkpoint onto the GPU with this repository's package, against another
copy of the package (a baseline, e.g. an earlier commit's python/), in
one run.

    python3 bench/serve_load.py --model DIR --baseline OLD/python [--runs 3] [--out FILE]

Each load runs in a fresh process (so each pays the same imports, CUDA
context and module loads), and the two packages alternate (baseline,
ours, ours, baseline, …) after one warm-up load of each that brings the
checkpoint into the page cache. Prints the median seconds of each and
their ratio; --out writes the JSON. Needs torch, transformers, a GPU, and
the sfsurgery binary ($SFSURGERY_BIN) where a package plans its launches.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = r"""
import sys, time, warnings
warnings.simplefilter("ignore")
import torch
torch.cuda.init()
torch.zeros(1, device="cuda")
import sfsurgery
from transformers import AutoModelForCausalLM
t0 = time.perf_counter()
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], device_map="cuda")
torch.cuda.synchronize()
print(time.perf_counter() - t0)
"""

_HERE = os.path.dirname(os.path.abspath(__file__))
OURS = os.path.join(os.path.dirname(_HERE), "python")


def load_seconds(model: str, package: str) -> float:
    """Loads model in a fresh process with the sfsurgery package at
    package (a directory holding sfsurgery/); returns from_pretrained's
    seconds."""
    env = dict(os.environ, PYTHONPATH=package)
    r = subprocess.run([sys.executable, "-c", _CHILD, model], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"serve_load: loading {model} with {package}: {r.stderr.strip().splitlines()[-1:]}")
    return float(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="an sfsurgery prune --format ampere output")
    ap.add_argument("--baseline", required=True, help="the directory holding the baseline's sfsurgery package")
    ap.add_argument("--runs", type=int, default=3, help="timed loads of each, alternated")
    ap.add_argument("--out", help="write the JSON result here")
    a = ap.parse_args()
    pkgs = {"baseline": a.baseline, "ours": OURS}
    for name, p in pkgs.items():
        load_seconds(a.model, p)  # warm-up: page cache, driver's PTX cache
    times = {"baseline": [], "ours": []}
    order = ["baseline", "ours", "ours", "baseline"]
    for i in range(2 * a.runs):
        name = order[i % 4]
        times[name].append(load_seconds(a.model, pkgs[name]))
    med = {k: statistics.median(v) for k, v in times.items()}
    res = {"model": a.model, "seconds": times, "median_s": med, "ours_over_baseline": med["ours"] / med["baseline"]}
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()

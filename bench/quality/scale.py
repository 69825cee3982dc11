#!/usr/bin/env python3
"""scale.py: calibration at model scale, on synthetic checkpoints of real
shapes: the time of each method on a Llama-3-8B shape, and peak GPU
memory at two depths of a Llama-3-70B shape (which must not grow with
depth: the layers are streamed one at a time).

    SFSURGERY_BIN=path/to/sfsurgery PYTHONPATH=python python3 bench/quality/scale.py \\
        --model TESTMODEL --into OUT.json [--methods wanda,ria,sparsegpt] [--samples 128] [--seqlen 2048] \\
        [--depth-shape llama3-70b] [--depths 8,16] [--depth-method wanda] [--depth-samples N] [--dir DIR]

TESTMODEL is a directory train.py wrote: its tokenizer files go into the
synthetic checkpoints (`sfsurgery synth`: real names and shapes, random
weights, no tokenizer; the ids of the test model's tokenizer are valid in
their vocabularies) and its train.txt is the calibration text. Each
calibration is `python -m sfsurgery calibrate` (in this process, as
run.py runs it), whose seconds exclude loading the model's config and
tokenizing the text, and include reading each layer's weights (reported
beside as load_seconds). The result goes into OUT.json under "scale"
(render.py reads it), or to stdout without --into. Each checkpoint is
removed as soon as it is done with (the 70B shape's take 2.7 GB a layer).
"""

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PYTHON_DIR, REPO, Failure, Log, copy_tokenizer, environment, sfsurgery_bin, write_json  # noqa: E402



def parse_list(s: str, conv=str) -> list:
    return [conv(x) for x in s.split(",") if x.strip()]


class Scale:
    def __init__(self, a, scratch: str):
        self.a = a
        self.scratch = scratch
        self.bin = sfsurgery_bin()
        os.environ["SFSURGERY_BIN"] = self.bin
        self.testmodel = os.path.abspath(a.model)
        self.log = Log({scratch: "$DIR", self.bin: "$SFSURGERY_BIN", self.testmodel: "$TESTMODEL", sys.executable: "python3",
                        REPO + os.sep: ""})

    def save(self, out: dict) -> None:
        """Writes the figures so far beside --into (INTO.scale.partial),
        removed when they are added to it."""
        if self.a.into:
            write_json(self.a.into + ".scale.partial", out)

    def synth(self, shape: str, layers: int = 0) -> str:
        out = os.path.join(self.scratch, shape + (f"-{layers}l" if layers else ""))
        self.log.run([self.bin, "synth", "--shape", shape, "-o", out] + (["--layers", str(layers)] if layers else []))
        copy_tokenizer(self.testmodel, out)
        return out

    def calibrate(self, model: str, method: str, samples: int) -> dict:
        import torch

        from sfsurgery.calibrate import command

        dec = os.path.join(self.scratch, f"{os.path.basename(model)}-{method}.decisions.safetensors")
        train = os.path.join(self.testmodel, "train.txt")
        argv = [sys.executable, "-m", "sfsurgery", "calibrate", model, "--method", method, "--text", train,
                "--samples", str(samples), "--seqlen", str(self.a.seqlen), "--json", "-o", dec]
        line = self.log.shown(argv)
        self.log.commands.append(line)
        self.log(f"$ {line}")
        ns = argparse.Namespace(model=model, method=method, text=train, samples=samples, seqlen=self.a.seqlen, seed=0,
                                scope="all", output=dec, force=True, json=True)
        r = command.calibrate(ns)
        os.remove(dec)
        torch.cuda.empty_cache()
        r.update(command=line, model=self.log.named(r["model"]), output=self.log.named(r["output"]),
                 compute_seconds=r["seconds"] - r["load_seconds"])
        self.log(f"  {r['seconds']:.1f} s ({r['load_seconds']:.1f} s waiting for weights), "
                 f"peak GPU memory {r['peak_gpu_bytes'] / 2**30:.2f} GiB")
        return r

    def main(self) -> dict:
        a = self.a
        out = dict(seqlen=a.seqlen, samples=a.samples, times=dict(shape=a.time_shape, methods={}),
                   depth=dict(shape=a.depth_shape, method=a.depth_method, samples=a.depth_samples, layers={}))
        if a.methods:
            model = self.synth(a.time_shape)
            for m in a.methods:
                out["times"]["methods"][m] = self.calibrate(model, m, a.samples)
                self.save(out)
            shutil.rmtree(model)
        for n in a.depths:
            model = self.synth(a.depth_shape, n)
            out["depth"]["layers"][str(n)] = self.calibrate(model, a.depth_method, a.depth_samples)
            self.save(out)
            shutil.rmtree(model)
        peaks = [v["peak_gpu_bytes"] for v in out["depth"]["layers"].values()]
        if len(peaks) >= 2:
            out["depth"]["deepest_over_shallowest"] = peaks[-1] / peaks[0]
        out.update(commands=self.log.commands, env=environment(self.bin),
                   command="SFSURGERY_BIN=... PYTHONPATH=python " + shlex.join(["python3", "bench/quality/scale.py"] + sys.argv[1:]))
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a test model directory train.py wrote (its tokenizer and train.txt)")
    ap.add_argument("--into", help="the JSON to add the result to, under \"scale\" (default: print it)")
    ap.add_argument("--methods", default="wanda,ria,sparsegpt", type=parse_list, help="methods timed on --time-shape")
    ap.add_argument("--time-shape", default="llama3-8b")
    ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--depth-shape", default="llama3-70b")
    ap.add_argument("--depths", default="8,16", type=lambda s: parse_list(s, int), help="decoder layers of the --depth-shape checkpoints")
    ap.add_argument("--depth-method", default="wanda")
    ap.add_argument("--depth-samples", type=int, default=128)
    ap.add_argument("--dir", help="where the checkpoints go (default: a temporary directory)")
    a = ap.parse_args()
    if a.into and not os.path.isfile(a.into):
        print(f"scale.py: {a.into}: no such file (run.py writes it)", file=sys.stderr)
        return 2
    sys.path.insert(0, PYTHON_DIR)
    from sfsurgery.errors import SfsurgeryError

    scratch = tempfile.mkdtemp(prefix="sfsurgery-scale-", dir=a.dir)
    try:
        result = Scale(a, scratch).main()
    except (Failure, SfsurgeryError) as e:
        print(f"scale.py: {e}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if a.into:
        with open(a.into) as f:
            doc = json.load(f)
        doc["scale"] = result
        write_json(a.into, doc)
        if os.path.exists(a.into + ".scale.partial"):
            os.remove(a.into + ".scale.partial")
        print(f"added the scale figures to {a.into}", file=sys.stderr)
    else:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

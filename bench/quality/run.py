#!/usr/bin/env python3
"""run.py: what 2:4 pruning costs on the test model, by method, in one
command on a GPU host, written as one JSON that render.py turns into
docs/quality-h200.md.

    SFSURGERY_BIN=path/to/sfsurgery PYTHONPATH=python python3 bench/quality/run.py -o OUT.json \\
        [--model DIR] [--work DIR] [--quick] [--seed N] [--methods magnitude,M,...] [--seeds S,...] \\
        [--samples N] [--no-reference] [--windows N] [--prompts N] [--prompt-tokens N] [--new-tokens N]

1. The test model: train.py into $WORK/testmodel, or --model, a directory
   train.py wrote.
2. One row per method. "magnitude" is `sfsurgery prune --format dense` and
   `--format ampere` of the model. Any other method M is `python -m
   sfsurgery calibrate MODEL --method M --text train.txt --seed S -o DEC`
   at the first of --seeds, then the same two prunes with `--decisions
   DEC`; at every other seed, the calibration and the dense prune only
   (the spread over seeds); and, unless --no-reference, the plain reference
   implementation of the method (python/tests/reference_calibration.py) on
   the same samples, whose pruned model is saved and scored the same way.
   The kept-magnitude fraction is read from each output's prune report.
3. Perplexity, each as `python -m sfsurgery perplexity --json` computes it
   (sfsurgery.perplexity.measure, in this process) at the model's
   max_position_embeddings: held-out (heldout.txt) of the dense model, of
   every output, and of the dense model on its training text (train.txt:
   files it trained on whole; trainsplit.txt: training files drawn as the
   held-out ones are).
4. Greedy continuations of --prompts held-out prompts, dense against each
   row's dense-pruned output, and that against its ampere output, token by
   token: how many positions agree, the first that does not, and there the
   top-2 logit gap of the reference.

Perplexity and calibration run in this process (the commands the JSON
lists are their command-line equivalents); pruning runs the sfsurgery
binary. After each step the result so far is written to OUT.json.partial,
removed when OUT.json is written. The work directory is removed at the
end unless --work names one; throughput.py adds the Llama-3-8B-shaped
speed figures to the same JSON (it needs --work's test model).
"""

import argparse
import json
import os
import random
import shlex
import shutil
import sys
import tempfile
import time
from typing import List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PYTHON_DIR, REPO, Failure, Log, environment, sfsurgery_bin, write_json  # noqa: E402

SCHEMA = "sfsurgery-quality/1"
TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")
TESTS_DIR = os.path.join(PYTHON_DIR, "tests")


def compare(a: Sequence[int], b: Sequence[int]) -> dict:
    """Token-by-token agreement of two continuations of one prompt: how
    many positions hold the same token, and the first that does not (None
    when none differs)."""
    same = sum(1 for x, y in zip(a, b) if x == y)
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first is None and len(a) != len(b):
        first = min(len(a), len(b))
    return dict(same=same, first_divergence=first)


def rel_diff(a: float, b: float) -> float:
    """(a − b) / b."""
    return (a - b) / b


def kept_fraction(out: str) -> float:
    """The kept-magnitude fraction (Σ|kept| / Σ|all| over every pruned
    weight) from an output's prune report, sfsurgery.json."""
    path = os.path.join(out, "sfsurgery.json")
    try:
        with open(path) as f:
            v = json.load(f)["kept_magnitude_fraction"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Failure(f"{path}: no kept_magnitude_fraction: {e}") from None
    if not isinstance(v, (int, float)):
        raise Failure(f"{path}: kept_magnitude_fraction is {v!r}")
    return float(v)


def row_name(method: str, seed: Optional[int]) -> str:
    """The directory name part of a row: method, and seed where there is one."""
    return method if seed is None else f"{method}-seed{seed}"


class Quality:
    """One run: the work directory, the model, the commands."""

    def __init__(self, a, work: str):
        self.a = a
        self.work = work
        self.bin = sfsurgery_bin()
        self.log = Log({work: "$WORK", self.bin: "$SFSURGERY_BIN", sys.executable: "python3", REPO + os.sep: ""})
        os.environ["SFSURGERY_BIN"] = self.bin  # for the ampere models and calibrations run in this process
        self.tokens: dict = {}  # perplexity's token ids, by tokenizer and text
        self.doc: dict = {}

    def save(self) -> None:
        """Writes the result so far beside the output (OUT.partial)."""
        write_json(self.a.output + ".partial", self.doc)

    def model(self) -> str:
        """The trained test model's directory (train.py's output)."""
        if self.a.model:
            return os.path.abspath(self.a.model)
        out = os.path.join(self.work, "testmodel")
        self.log.run([sys.executable, TRAIN, "-o", out, "--seed", str(self.a.seed)] + (["--quick"] if self.a.quick else []),
                     capture=False)
        return out

    def perplexity(self, model: str, textfile: str, seqlen: int) -> dict:
        """perplexity.measure of model on textfile, with its command line."""
        from sfsurgery import perplexity

        argv = [sys.executable, "-m", "sfsurgery", "perplexity", model, "--text", textfile, "--seqlen", str(seqlen), "--json"]
        if self.a.windows:
            argv += ["--windows", str(self.a.windows)]
        line = self.log.shown(argv)
        self.log.commands.append(line)
        self.log(f"$ {line}")
        r = perplexity.measure(model, textfile, seqlen, self.a.windows, None, self.tokens)
        r["command"] = line
        r["model"] = self.log.named(r["model"])
        self.log(f"  perplexity {r['perplexity']:.4f} over {r['windows']} windows, {r['tokens_per_s'] or 0:,.0f} tokens/s")
        return r

    def prune(self, src: str, out: str, fmt: str, decisions: Optional[str]) -> None:
        argv = [self.bin, "prune", src, "-o", out, "--format", fmt, "--quiet", "--force"]
        if decisions:
            argv += ["--decisions", decisions]
        self.log.run(argv)

    def calibrate(self, model: str, method: str, seed: int, textfile: str, dec: str) -> dict:
        """calibrate's --json result for one calibration, in this process."""
        from sfsurgery.calibrate import command

        argv = [sys.executable, "-m", "sfsurgery", "calibrate", model, "--method", method, "--text", textfile,
                "--samples", str(self.a.samples), "--seed", str(seed), "--force", "--json", "-o", dec]
        line = self.log.shown(argv)
        self.log.commands.append(line)
        self.log(f"$ {line}")
        ns = argparse.Namespace(model=model, method=method, text=textfile, samples=self.a.samples, seqlen=None, seed=seed,
                                scope="all", output=dec, force=True, json=True)
        r = command.calibrate(ns)
        r["command"] = line
        r["model"] = self.log.named(r["model"])
        r["output"] = self.log.named(r["output"])
        self.log(f"  {r['seconds']:.1f} s, peak GPU memory {r['peak_gpu_bytes'] / 2**30:.2f} GiB")
        return r

    def outputs(self, name: str) -> dict:
        return {fmt: os.path.join(self.work, f"{name}-{fmt}") for fmt in ("dense", "ampere")}

    def row(self, model: str, heldout: str, train: str, seqlen: int, method: str, seed: Optional[int]) -> dict:
        """A method's row: calibration (where it has one), both prunes, and
        the held-out perplexity of both outputs."""
        name = row_name(method, seed)
        self.log(f"{name}:")
        row = dict(method=method, seed=seed, calibration=None)
        dec = None
        if method != "magnitude":
            dec = os.path.join(self.work, f"decisions-{name}.safetensors")
            row["calibration"] = self.calibrate(model, method, seed, train, dec)
        outs = self.outputs(name)
        for fmt, out in outs.items():
            self.prune(model, out, fmt, dec)
        row["kept_magnitude_fraction"] = kept_fraction(outs["dense"])
        row["kept_magnitude_fraction_ampere"] = kept_fraction(outs["ampere"])
        row["dense_pruned"] = self.perplexity(outs["dense"], heldout, seqlen)
        row["ampere"] = self.perplexity(outs["ampere"], heldout, seqlen)
        row["served_vs_dense_pruned"] = rel_diff(row["ampere"]["perplexity"], row["dense_pruned"]["perplexity"])
        if method != "magnitude":
            row["seeds"] = [dict(seed=seed, perplexity=row["dense_pruned"]["perplexity"],
                                 kept_magnitude_fraction=row["kept_magnitude_fraction"],
                                 seconds=row["calibration"]["seconds"], peak_gpu_bytes=row["calibration"]["peak_gpu_bytes"])]
        row["dirs"] = outs
        return row

    def another_seed(self, model: str, heldout: str, train: str, seqlen: int, row: dict, seed: int) -> None:
        """A calibration of row's method at another seed: its dense-pruned
        output's held-out perplexity, added to row["seeds"]."""
        name = row_name(row["method"], seed)
        self.log(f"{name}:")
        dec = os.path.join(self.work, f"decisions-{name}.safetensors")
        cal = self.calibrate(model, row["method"], seed, train, dec)
        out = self.outputs(name)["dense"]
        self.prune(model, out, "dense", dec)
        r = self.perplexity(out, heldout, seqlen)
        row["seeds"].append(dict(seed=seed, perplexity=r["perplexity"], kept_magnitude_fraction=kept_fraction(out),
                                 seconds=cal["seconds"], peak_gpu_bytes=cal["peak_gpu_bytes"], command=r["command"]))
        shutil.rmtree(out, ignore_errors=True)
        os.remove(dec)

    def reference(self, model: str, heldout: str, train: str, seqlen: int, row: dict) -> None:
        """The plain reference implementation of row's method on the same
        samples as its calibration: the pruned model saved with the
        model's tokenizer and scored as the rows are (row["reference"])."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from sfsurgery import text
        from sfsurgery.calibrate import data
        from sfsurgery.calibrate import plan as planning

        sys.path.insert(0, TESTS_DIR)
        import reference_calibration as ref

        method, seed = row["method"], row["seed"]
        self.log(f"{method} reference (python/tests/reference_calibration.py):")
        pl = planning.make(model, "all", None)
        ids = data.calibration_ids(pl.directory, text.read(train), self.a.samples, pl.seqlen, seed, pl.config["vocab_size"])
        lm = AutoModelForCausalLM.from_pretrained(model, dtype="auto", attn_implementation="sdpa").cuda().eval()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        ref.calibrate(lm, torch.tensor(ids, dtype=torch.long).cuda(), method, targets=[t.name for t in pl.targets])
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        out = os.path.join(self.work, f"reference-{method}")
        lm.save_pretrained(out)
        AutoTokenizer.from_pretrained(pl.directory).save_pretrained(out)
        del lm
        torch.cuda.empty_cache()
        r = self.perplexity(out, heldout, seqlen)
        ours = row["dense_pruned"]["perplexity"]
        row["reference"] = dict(perplexity=r["perplexity"], seconds=seconds, ours_over_reference=ours / r["perplexity"],
                                samples=self.a.samples, seqlen=pl.seqlen, seed=seed, command=r["command"])
        self.log(f"  reference {r['perplexity']:.4f}, ours {ours:.4f}: {ours / r['perplexity']:.5f}")
        shutil.rmtree(out, ignore_errors=True)

    def greedy(self, model: str, heldout: str, rows: List[dict]) -> dict:
        """Greedy continuations (module doc, 4.), in this process."""
        import torch
        from transformers import AutoTokenizer

        from sfsurgery import perplexity

        tok = AutoTokenizer.from_pretrained(model)
        with open(heldout, encoding="utf-8") as f:
            ids = perplexity.tokenize(tok, f.read())
        p, n = self.a.prompt_tokens, self.a.new_tokens
        rng = random.Random(self.a.seed)
        offsets = sorted(rng.sample(range(0, len(ids) - p), self.a.prompts))
        prompts = [ids[o : o + p] for o in offsets]

        def run(path, ampere):
            m = perplexity.load_model(path, ampere)
            out = []
            for q in prompts:
                x = torch.tensor([q], device=m.device)
                with torch.inference_mode():
                    r = m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, min_new_tokens=n,
                                   do_sample=False, output_scores=True, return_dict_in_generate=True,
                                   pad_token_id=tok.eos_token_id, disable_compile=True)
                toks = r.sequences[0, len(q) :].tolist()
                tops = [s[0].float().topk(2).values for s in r.scores]
                gaps = [(t[0] - t[1]).item() for t in tops]
                out.append((toks, gaps))
            del m
            torch.cuda.empty_cache()
            return out

        self.log("greedy continuations")
        dense = run(model, False)
        doc = dict(prompt_tokens=p, new_tokens=n, prompts=[
            dict(offset=o, prompt=tok.decode(q), dense_tokens=d[0], dense_text=tok.decode(d[0]))
            for o, q, d in zip(offsets, prompts, dense)])
        for row in rows:
            pruned = run(row["dirs"]["dense"], False)
            served = run(row["dirs"]["ampere"], True)
            row["greedy"] = []
            for d, pr, s in zip(dense, pruned, served):
                vs = compare(s[0], pr[0])
                at = vs["first_divergence"]
                vs["gap"] = pr[1][at] if at is not None and at < len(pr[1]) else None
                row["greedy"].append(dict(
                    dense_pruned_tokens=pr[0], dense_pruned_text=tok.decode(pr[0]), ampere_tokens=s[0],
                    ampere_text=tok.decode(s[0]), pruned_vs_dense=compare(pr[0], d[0]), ampere_vs_pruned=vs))
            self.log(f"  {row_name(row['method'], row['seed'])}: ampere = dense-pruned on "
                     f"{sum(g['ampere_vs_pruned']['same'] for g in row['greedy'])} of {n * len(prompts)} tokens")
        return doc

    def main(self) -> dict:
        a = self.a
        root = self.model()
        model = os.path.join(root, "model")
        heldout, train = os.path.join(root, "heldout.txt"), os.path.join(root, "train.txt")
        with open(os.path.join(root, "train.json")) as f:
            trained = json.load(f)
        with open(os.path.join(model, "config.json")) as f:
            seqlen = json.load(f)["max_position_embeddings"]
        command = "SFSURGERY_BIN=... PYTHONPATH=python " + shlex.join(["python3", "bench/quality/run.py"] + sys.argv[1:])
        d = self.doc
        d.update(schema=SCHEMA, command=command, seconds=None, env=environment(self.bin), seed=a.seed, model=trained,
                 seqlen=seqlen, windows_asked=a.windows, samples=a.samples, rows=[], commands=self.log.commands)
        self.log("dense:")
        d["dense"] = dict(heldout=self.perplexity(model, heldout, seqlen), train=self.perplexity(model, train, seqlen))
        split = os.path.join(root, "trainsplit.txt")
        if os.path.exists(split):  # test models from before train.py wrote it have none
            d["dense"]["train_split"] = self.perplexity(model, split, seqlen)
        self.save()
        first = a.seeds[0]
        for method in a.methods:
            d["rows"].append(self.row(model, heldout, train, seqlen, method, None if method == "magnitude" else first))
            self.save()
        calibrated = [r for r in d["rows"] if r["method"] != "magnitude"]
        if a.reference:
            for row in calibrated:
                self.reference(model, heldout, train, seqlen, row)
                self.save()
        for seed in a.seeds[1:]:
            for row in calibrated:
                self.another_seed(model, heldout, train, seqlen, row, seed)
                self.save()
        d["greedy"] = self.greedy(model, heldout, d["rows"])
        for row in d["rows"]:
            row.pop("dirs")
        d["seconds"] = self.log.elapsed()
        return d


# The sections other scripts add to run.py's output (throughput.py and
# scale.py --into), each with its own command and environment: a rerun of
# run.py keeps them.
OTHERS = ("throughput", "scale")


def keep(path: str, doc: dict) -> None:
    """Copies into doc the OTHERS sections of the document at path, if one
    is there."""
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return
    if isinstance(old, dict):
        for key in OTHERS:
            if key in old and key not in doc:
                doc[key] = old[key]


def parse_list(s: str, conv=str) -> list:
    return [conv(x) for x in s.split(",") if x.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True, help="the JSON to write")
    ap.add_argument("--model", help="a test model directory train.py wrote (default: train one)")
    ap.add_argument("--work", help="the work directory, kept (default: a temporary one, removed)")
    ap.add_argument("--quick", action="store_true", help="train the quick variant")
    ap.add_argument("--seed", type=int, default=0, help="the training and prompt seed")
    ap.add_argument("--methods", default="magnitude", type=parse_list, help="comma-separated: magnitude and calibrate's methods")
    ap.add_argument("--seeds", default="0", type=lambda s: parse_list(s, int),
                    help="calibration seeds: the first gives each method's row, every seed its spread")
    ap.add_argument("--samples", type=int, default=128, help="calibration samples (of the model's max_position_embeddings tokens)")
    ap.add_argument("--no-reference", dest="reference", action="store_false",
                    help="skip the reference implementations of the calibrated methods")
    ap.add_argument("--windows", type=int, default=0, help="windows of each perplexity (default 0: all)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    a = ap.parse_args()
    if not a.methods or not a.seeds:
        ap.error("--methods and --seeds need at least one entry each")
    sys.path.insert(0, PYTHON_DIR)
    from sfsurgery.errors import SfsurgeryError

    work = os.path.abspath(a.work) if a.work else tempfile.mkdtemp(prefix="sfsurgery-quality-")
    os.makedirs(work, exist_ok=True)
    try:
        doc = Quality(a, work).main()
        keep(a.output, doc)
        write_json(a.output, doc)
    except (Failure, SfsurgeryError) as e:
        print(f"run.py: {e} (work directory {work})", file=sys.stderr)
        return 2
    if os.path.exists(a.output + ".partial"):
        os.remove(a.output + ".partial")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {a.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""throughput.py: the perplexity evaluation's speed on a Llama-3-8B-shaped
synthetic checkpoint, dense against its ampere output served by
sfsurgery's kernels, and the dense evaluation against a bare
model(input_ids) loop over the same batches, all in one process.

    SFSURGERY_BIN=path/to/sfsurgery PYTHONPATH=python python3 bench/quality/throughput.py \\
        --model TESTMODEL --into OUT.json [--shape llama3-8b] [--layers N] [--windows 128] \\
        [--seqlen 2048] [--batch N] [--dir DIR] [--keep]

TESTMODEL is a directory train.py wrote (run.py --work keeps one): the
synthetic checkpoint (`sfsurgery synth`, random weights, no tokenizer)
gets its tokenizer files, whose ids are valid in the larger vocabulary,
and its heldout.txt is the text. The ampere output is `sfsurgery prune
--format ampere`. Both models are loaded at once; after a warm-up pass
of two batches each, the four loops (dense and ampere, each by
sfsurgery.perplexity.evaluate and bare) are timed in the order
dense-eval, dense-bare, ampere-eval, ampere-bare and back, each the best
of its two visits, so that a drift of the GPU's clocks hits all alike.
The result goes into OUT.json under "throughput" (render.py reads it
there), or to stdout without --into. The checkpoints (25 GB for the 8B
shape) are removed at the end unless --keep.
"""

import argparse
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PYTHON_DIR, REPO, Failure, Log, copy_tokenizer, environment, sfsurgery_bin, write_json  # noqa: E402

ORDER = (("dense", "eval"), ("dense", "bare"), ("ampere", "eval"), ("ampere", "bare"),
         ("ampere", "bare"), ("ampere", "eval"), ("dense", "bare"), ("dense", "eval"))


def bare(model, ids, batch: int) -> float:
    """Seconds of a bare loop of model(input_ids) over the windows ids,
    batch at a time, the logits dropped (synchronized start and end)."""
    import torch

    with torch.inference_mode():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(0, ids.shape[0], batch):
            model(input_ids=ids[i : i + batch], use_cache=False)
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def measure(a, log: Log, dense_dir: str, ampere_dir: str, text: str) -> dict:
    import torch
    from transformers import AutoTokenizer

    sys.path.insert(0, PYTHON_DIR)
    from sfsurgery import perplexity

    tok = AutoTokenizer.from_pretrained(dense_dir)
    with open(text, encoding="utf-8") as f:
        ids = perplexity.tokenize(tok, f.read())
    need = a.windows * a.seqlen
    if len(ids) < need:
        raise Failure(f"{text}: {len(ids)} tokens, fewer than {a.windows} windows of {a.seqlen}")
    models = {"dense": perplexity.load_model(dense_dir, False), "ampere": perplexity.load_model(ampere_dir, True)}
    vocab = models["dense"].config.vocab_size
    batch = perplexity.choose_batch(a.batch, a.windows, a.seqlen, vocab)
    x = torch.tensor(ids[:need], dtype=torch.long, device="cuda").view(a.windows, a.seqlen)
    log(f"models loaded; {a.windows} windows of {a.seqlen} tokens, {batch} a pass")
    nll = {}
    for name, m in models.items():  # warm-up: kernels, plans, allocator
        perplexity.evaluate(m, x[: 2 * batch], batch)
        bare(m, x[: 2 * batch], batch)
    visits = {k: [] for k in ORDER}
    for name, kind in ORDER:
        m = models[name]
        if kind == "eval":
            s, seconds = perplexity.evaluate(m, x, batch)
            nll[name] = s
        else:
            seconds = bare(m, x, batch)
        visits[(name, kind)].append(seconds)
        log(f"  {name} {kind}: {seconds:.3f} s, {need / seconds:,.0f} tokens/s")
    out = dict(windows=a.windows, seqlen=a.seqlen, batch=batch, tokens=need)
    for name in models:
        ev, br = min(visits[(name, "eval")]), min(visits[(name, "bare")])
        out[name] = dict(eval_s=ev, bare_s=br, eval_visits=visits[(name, "eval")], bare_visits=visits[(name, "bare")],
                         eval_tokens_per_s=need / ev, bare_tokens_per_s=need / br,
                         perplexity=math.exp(nll[name] / (a.windows * (a.seqlen - 1))),
                         dtype=str(models[name].dtype).replace("torch.", ""))
    out["served_vs_dense"] = out["dense"]["eval_s"] / out["ampere"]["eval_s"]
    out["dense_eval_vs_bare"] = out["dense"]["eval_s"] / out["dense"]["bare_s"]
    out["ampere_eval_vs_bare"] = out["ampere"]["eval_s"] / out["ampere"]["bare_s"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a test model directory train.py wrote (its tokenizer and heldout.txt)")
    ap.add_argument("--into", help="the JSON to add the result to, under \"throughput\" (default: print it)")
    ap.add_argument("--shape", default="llama3-8b", help="sfsurgery synth --shape")
    ap.add_argument("--layers", type=int, default=0, help="decoder layers (default: the shape's)")
    ap.add_argument("--windows", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=None, help="windows a pass (default: perplexity's)")
    ap.add_argument("--dir", help="where the checkpoints go (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoints")
    a = ap.parse_args()
    if a.windows < 1 or a.seqlen < 2 or (a.batch is not None and a.batch < 1):
        ap.error("--windows, --seqlen and --batch want positive values")
    testmodel = os.path.abspath(a.model)
    if a.into and not os.path.isfile(a.into):
        print(f"throughput.py: {a.into}: no such file (run.py writes it)", file=sys.stderr)
        return 2
    scratch = tempfile.mkdtemp(prefix="sfsurgery-throughput-", dir=a.dir)
    try:
        binary = sfsurgery_bin()
        os.environ["SFSURGERY_BIN"] = binary
        log = Log({scratch: "$DIR", binary: "$SFSURGERY_BIN", testmodel: "$TESTMODEL", sys.executable: "python3",
                   REPO + os.sep: ""})
        dense, ampere = os.path.join(scratch, "dense"), os.path.join(scratch, "ampere")
        synth = [binary, "synth", "--shape", a.shape, "-o", dense] + (["--layers", str(a.layers)] if a.layers else [])
        log.run(synth)
        copy_tokenizer(testmodel, dense)
        log.run([binary, "prune", dense, "-o", ampere, "--format", "ampere", "--quiet"])
        result = measure(a, log, dense, ampere, os.path.join(testmodel, "heldout.txt"))
        result.update(shape=a.shape, layers=a.layers or None, commands=log.commands, env=environment(binary),
                      command="SFSURGERY_BIN=... PYTHONPATH=python " + shlex.join(["python3", "bench/quality/throughput.py"] + sys.argv[1:]))
    except Failure as e:
        print(f"throughput.py: {e}", file=sys.stderr)
        return 2
    finally:
        if not a.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    log(f"served 2:4 {result['served_vs_dense']:.3f}x dense tokens/s; dense evaluation {result['dense_eval_vs_bare']:.3f}x "
        f"the bare loop's time")
    if a.into:
        with open(a.into) as f:
            doc = json.load(f)
        doc["throughput"] = result
        write_json(a.into, doc)
        print(f"added the throughput to {a.into}", file=sys.stderr)
    else:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m sfsurgery calibrate`: the command line of calibration.

HELP is the one-line summary, DESCRIPTION the --help text;
add_arguments(parser) fills a parser (and sets its description);
run(args) calibrates and returns the exit status (0, or 2 when
calibration itself fails); input it cannot use raises SfsurgeryError (one
line naming what and where; nothing written), which `python -m sfsurgery`
prints and exits 2 for (cli.py). The checks that need no torch run first,
so CI tests them with the standard library alone.
"""

import argparse
import json
import os
import sys
from typing import Callable, Optional

from .. import text
from ..errors import DeviceError, InputError
from . import plan as planning
from .errors import CalibrationError

HELP = "decide 2:4 pruning with Wanda, RIA or SparseGPT from calibration text (one GPU)"

DESCRIPTION = """\
calibrate runs MODEL's decoder layers one at a time on one GPU over
--samples windows of --seqlen tokens of --text (plain text, or JSON Lines
with a "text" field; windows at random offsets, seeded by --seed, tokenized
by the model's tokenizer), decides which 2 of every 4 consecutive input
weights of each projection to keep, and writes those decisions to OUT.
sfsurgery prune then writes the pruned checkpoint in any format:

  python -m sfsurgery calibrate MODEL --method wanda --text calib.txt -o MODEL.decisions.safetensors
  sfsurgery prune MODEL --decisions MODEL.decisions.safetensors -o MODEL-2of4

methods (block-sequential: each layer is decided from the outputs of the
layers already pruned):
  wanda      keep the largest |W_ij|·‖X_j‖₂ (Sun et al., 2023)
  ria        keep the largest (|W_ij|/Σ_i|W_ij| + |W_ij|/Σ_j|W_ij|)·‖X_j‖₂^0.5
             (Zhang et al., 2024)
  sparsegpt  OBS: prune the smallest w²/[H⁻¹]²_jj and update the kept weights,
             H = 2XᵀX/n, 1% dampening, blocks of 128 columns (Frantar and
             Alistarh, 2023)

The targets are the projections `sfsurgery prune --scope S` selects: give
prune the same --scope. Models: llama, mistral, qwen2 (a model directory,
or a hub id in the local cache)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds calibrate's arguments to parser and sets its description."""
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("model", metavar="MODEL", help="model directory with config.json, a tokenizer and safetensors weights")
    parser.add_argument("--method", required=True, choices=planning.METHODS, help="wanda, ria or sparsegpt")
    parser.add_argument("--text", required=True, metavar="FILE", help="calibration text: plain, or JSON Lines with a \"text\" field")
    parser.add_argument("--samples", type=int, default=128, metavar="N", help="calibration samples (default 128)")
    parser.add_argument("--seqlen", type=int, metavar="N",
                        help=f"tokens per sample (default: the model's max_position_embeddings, at most {planning.DEFAULT_SEQLEN})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the samples' offsets (default 0)")
    parser.add_argument("--scope", choices=planning.SCOPES, default="all", help="prune's default targets: all, attn or mlp (default all)")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="decisions file to write (safetensors)")
    parser.add_argument("--force", action="store_true", help="replace an existing OUT")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def run(args: argparse.Namespace) -> int:
    """Runs calibrate with parsed args; returns the exit status: 0, or 2
    (said in one line on stderr, nothing written) when calibration itself
    fails. Input it cannot use raises SfsurgeryError before anything is
    written (the command line prints it and exits 2)."""
    try:
        doc = calibrate(args)
    except CalibrationError as e:
        print(f"sfsurgery: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        if "out of memory" not in str(e):
            raise
        print(f"sfsurgery: out of GPU memory: {(str(e).strip().splitlines() or [''])[0]}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(doc))
    else:
        gib = doc["peak_gpu_bytes"] / (1 << 30)
        print(
            f"wrote {args.output}: {doc['method']} decisions for {doc['targets']} tensors in {doc['layers']} layers "
            f"from {doc['samples']} × {doc['seqlen']} tokens of {doc['text']['file']}, {doc['seconds']:.1f} s "
            f"({doc['load_seconds']:.1f} s reading weights), peak GPU memory {gib:.1f} GiB"
        )
    return 0


def _torch():
    try:
        import torch
    except ImportError:
        raise DeviceError("calibrate needs torch and transformers (pip install torch transformers)") from None
    return torch


def _device(torch):
    if not torch.cuda.is_available():
        raise DeviceError("no CUDA GPU: calibrate runs on one NVIDIA GPU")
    return torch.device("cuda", torch.cuda.current_device())


def _progress(layers: int) -> "tuple[Optional[Callable[[int], None]], Callable[[], None]]":
    """A tqdm bar over the layers when stderr is a terminal."""
    if not sys.stderr.isatty():
        return None, lambda: None
    try:
        from tqdm import tqdm
    except ImportError:
        return None, lambda: None
    bar = tqdm(total=layers, unit="layer", desc="calibrating", file=sys.stderr)
    return (lambda i: bar.update(1)), bar.close


def calibrate(args: argparse.Namespace) -> dict:
    """Calibrates with parsed args (add_arguments' names) and writes the
    decisions file; returns what --json prints. Raises SfsurgeryError for
    input it cannot use and CalibrationError when calibration fails, with
    nothing written."""
    if args.samples < 1:
        raise InputError(f"--samples {args.samples}: want at least 1")
    if args.seqlen is not None and args.seqlen < 2:
        raise InputError(f"--seqlen {args.seqlen}: want at least 2 tokens")
    if not -(1 << 63) <= args.seed < 1 << 63:
        raise InputError(f"--seed {args.seed}: want a 64-bit integer")
    if args.method not in planning.METHODS:
        raise InputError(f"--method {args.method!r}: want one of {', '.join(planning.METHODS)}")
    out = planning.output_path(args.output, args.force)
    pl = planning.make(args.model, args.scope, args.seqlen)
    seqlen = pl.seqlen
    vocab = pl.config.get("vocab_size")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        raise InputError(f"{os.path.join(pl.directory, 'config.json')}: vocab_size {vocab!r}: want a positive integer")
    txt = text.read(args.text)
    torch = _torch()
    device = _device(torch)
    from . import data, output, stream

    ids = data.calibration_ids(pl.directory, txt, args.samples, seqlen, args.seed, vocab)
    described = text.describe(txt)
    meta = output.metadata(args.method, args.model, described, args.samples, seqlen, args.seed)
    progress, done = _progress(pl.layers)
    try:
        result = stream.calibrate(pl, ids, args.method, out, meta, device, progress=progress)
    finally:
        done()
    return {
        "method": args.method,
        "model": args.model,
        "text": described,
        "samples": args.samples,
        "seqlen": seqlen,
        "seed": args.seed,
        "params": meta["params"],
        "layers": result.layers,
        "targets": result.targets,
        "seconds": round(result.seconds, 3),
        "load_seconds": round(result.load_seconds, 3),
        "peak_gpu_bytes": result.peak_gpu_bytes,
        "output": args.output,
    }

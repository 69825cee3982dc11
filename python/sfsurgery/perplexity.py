"""`python -m sfsurgery perplexity MODEL --text FILE`: a causal LM's
perplexity on a text, measured as the Wanda and SparseGPT papers measure
it.

The text (plain or JSON Lines: sfsurgery.text) is tokenized whole, once,
by the model's tokenizer, and cut into the non-overlapping windows of
seqlen tokens it holds (the tail is dropped). Each window is one forward
pass from its first token, in which every position but the last predicts
the next token. The result is the mean negative log-likelihood (natural
log) of all those predictions, windows × (seqlen − 1), and its exp. That
is the papers' number: they average each window's mean loss, and every
window has seqlen − 1 predictions.

MODEL is a directory or a Hugging Face model id (org/name[@revision]) in
the local cache, read offline (resolved by the sfsurgery binary, as every
sfsurgery command resolves it): a dense or dense-pruned checkpoint loads
with transformers' AutoModelForCausalLM, on the GPU when there is one; an
`sfsurgery prune --format ampere` output loads through the package's
quantizer and runs its projections on sfsurgery's kernels (a GPU is
required). The evaluation is a plain loop of model(input_ids) over
batches of windows, under torch.inference_mode, whose logits (in the
model's dtype) are scored by the cross entropy in float32, a window or
less at a time (CE_CHUNK_BYTES), and summed in float64 on the device.

The arguments, the model's directory and config, the result and its
arithmetic are checked without torch (python/tests/test_perplexity.py,
in CI); torch and transformers are imported by run().
"""

import argparse
import hashlib
import json
import math
import os
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import layout, text
from .errors import CheckpointError, DeviceError, InputError, SfsurgeryError

HELP = "a causal LM's perplexity on a text, windowed as in the Wanda and SparseGPT papers"

# SCHEMA names the layout of the --json result.
SCHEMA = "sfsurgery-perplexity/1"

# The window length when --seqlen is not given: the model's
# max_position_embeddings, at most this.
DEFAULT_SEQLEN = 2048

# The default batch: this many tokens' worth of windows per forward
# pass, fewer where a batch's logits would pass LOGITS_BUDGET bytes.
BATCH_TOKENS = 16384
LOGITS_BUDGET = 4 << 30

# The most float32 logits the cross entropy takes at once, in bytes.
CE_CHUNK_BYTES = 1 << 30

# Files of which a model directory must hold one to have a tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tekken.json", "tiktoken.model", "spiece.model", "vocab.txt")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The command's arguments."""
    p.add_argument("model", metavar="MODEL",
                   help="a model directory, or a Hugging Face model id (org/name[@revision]) in the local cache: "
                        "dense, dense-pruned, or an sfsurgery ampere output (served on sfsurgery's kernels)")
    p.add_argument("--text", required=True, metavar="FILE",
                   help='the evaluation text: plain text, or JSON Lines with a string field "text" per line')
    p.add_argument("--seqlen", type=int, metavar="N",
                   help=f"tokens per window (default: the model's max_position_embeddings, at most {DEFAULT_SEQLEN})")
    p.add_argument("--windows", type=int, default=0, metavar="N", help="evaluate the first N windows (default 0: all)")
    p.add_argument("--batch", type=int, metavar="N",
                   help=f"windows per forward pass (default: {BATCH_TOKENS} tokens' worth, fewer where the logits "
                        f"would pass {LOGITS_BUDGET >> 30} GiB)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (model, text, seqlen, windows, tokens, nll, perplexity, speed)")


def check_args(args: argparse.Namespace) -> None:
    """Refuses argument values out of range (InputError)."""
    if args.seqlen is not None and args.seqlen < 2:
        raise InputError(f"--seqlen {args.seqlen}: want at least 2 tokens (a window predicts its tokens after the first)")
    if args.windows < 0:
        raise InputError(f"--windows {args.windows}: want 0 (all) or more")
    if args.batch is not None and args.batch < 1:
        raise InputError(f"--batch {args.batch}: want at least 1 window")


def find_tokenizer(path: str) -> str:
    """The first of TOKENIZER_FILES in the model directory, or InputError
    for a directory without a tokenizer."""
    for name in TOKENIZER_FILES:
        if os.path.isfile(os.path.join(path, name)):
            return name
    raise InputError(f"{path}: no tokenizer (none of {', '.join(TOKENIZER_FILES)}): "
                     f"copy the tokenizer files of the model it was made from into it")


def is_ampere(config: Mapping[str, Any]) -> bool:
    """Whether config.json is an `sfsurgery prune --format ampere`
    output's (its quantization_config names sfsurgery's method)."""
    q = config.get("quantization_config")
    return isinstance(q, dict) and q.get("quant_method") == layout.QUANT_METHOD


def check_causal(config: Mapping[str, Any], causal: Mapping[str, Any], where: str) -> None:
    """Refuses (CheckpointError) a config whose model type has no causal
    LM in causal (transformers' MODEL_FOR_CAUSAL_LM_MAPPING_NAMES: model
    type to class name, or names), or whose architectures name no causal
    LM: neither that class nor a *ForCausalLM or *LMHeadModel."""
    mt = config.get("model_type")
    if not isinstance(mt, str) or not mt:
        raise CheckpointError(f"{where}: no model_type: not a transformers model's config")
    if mt not in causal:
        raise CheckpointError(f"{where}: model type {mt!r} is not a causal LM in transformers")
    want = causal[mt]
    names = {want} if isinstance(want, str) else set(want)
    archs = config.get("architectures") or []
    if isinstance(archs, list) and archs and not any(
            isinstance(a, str) and (a in names or a.endswith("ForCausalLM") or a.endswith("LMHeadModel")) for a in archs):
        raise CheckpointError(f"{where}: architectures {archs} name no causal LM (for {mt!r}: {', '.join(sorted(names))})")


def choose_seqlen(asked: Optional[int], max_positions: Optional[int], where: str) -> int:
    """The window length: asked, which must not pass the model's
    max_position_embeddings (InputError), or by default that, at most
    DEFAULT_SEQLEN."""
    if asked is None:
        return min(DEFAULT_SEQLEN, max_positions) if max_positions else DEFAULT_SEQLEN
    if max_positions and asked > max_positions:
        raise InputError(f"--seqlen {asked}: above the model's max_position_embeddings {max_positions} ({where})")
    return asked


def choose_batch(asked: Optional[int], windows: int, seqlen: int, vocab: int, logit_bytes: int = 2) -> int:
    """Windows per forward pass: asked, or BATCH_TOKENS tokens' worth of
    windows whose logits (vocab × logit_bytes per token) stay within
    LOGITS_BUDGET; at least 1, at most windows."""
    if asked is None:
        asked = min(max(1, BATCH_TOKENS // seqlen), max(1, LOGITS_BUDGET // (seqlen * vocab * logit_bytes)))
    return max(1, min(asked, windows))


def ce_chunk_rows(vocab: int) -> int:
    """Positions whose float32 logits the cross entropy takes at once."""
    return max(1, CE_CHUNK_BYTES // (4 * vocab))


def result(model: str, fmt: str, described: Dict[str, str], text_tokens: int, seqlen: int, windows: int, batch: int,
           nll_sum: float, seconds: float, dtype: str, device: str) -> Dict[str, Any]:
    """The --json result: the model and text, the windows, the mean
    negative log-likelihood (natural log) of the windows × (seqlen − 1)
    predictions and its exp, and the evaluation loop's speed in tokens
    (windows × seqlen) per second."""
    tokens = windows * seqlen
    predicted = windows * (seqlen - 1)
    nll = nll_sum / predicted
    return {
        "schema": SCHEMA,
        "model": model,
        "format": fmt,
        "text": described,
        "text_tokens": text_tokens,
        "seqlen": seqlen,
        "windows": windows,
        "batch": batch,
        "tokens": tokens,
        "predicted": predicted,
        "nll": nll,
        "perplexity": math.exp(nll),
        "seconds": seconds,
        "tokens_per_s": tokens / seconds if seconds > 0 else None,
        "dtype": dtype,
        "device": device,
    }


def summary(r: Mapping[str, Any]) -> str:
    """The result as one line for a person."""
    speed = f"{r['tokens_per_s']:,.0f} tokens/s" if r["tokens_per_s"] else "instant"
    return (f"{r['model']}: perplexity {r['perplexity']:.4f} (NLL {r['nll']:.5f}) over {r['windows']} windows of "
            f"{r['seqlen']} tokens of {r['text']['file']}; {speed} ({r['dtype']}, {r['device']})")


def nll_sum(logits, ids, chunk_rows: int, out) -> None:
    """Adds to out (a float64 scalar tensor) the negative log-likelihood
    of every window's tokens after the first: logits [b, s, vocab] of the
    windows ids [b, s], scored in float32 chunk_rows positions at a time
    as logsumexp(logits) − logits[next token] (the cross entropy, without
    writing the log-softmax of every logit)."""
    import torch

    b, s, _ = logits.shape
    for j in range(b):
        for a in range(0, s - 1, chunk_rows):
            e = min(a + chunk_rows, s - 1)
            chunk = logits[j, a:e]
            target = chunk.gather(-1, ids[j, a + 1 : e + 1, None]).squeeze(-1).float()
            out += (torch.logsumexp(chunk.float(), dim=-1) - target).sum(dtype=torch.float64)


def evaluate(model, ids, batch: int, progress=None) -> Tuple[float, float]:
    """Runs model over the windows ids ([windows, seqlen] on the model's
    device), batch windows per pass, and returns the summed negative
    log-likelihood and the seconds the loop took (on a GPU from a
    synchronized start to a synchronized end)."""
    import torch

    cuda = ids.device.type == "cuda"
    total = torch.zeros((), dtype=torch.float64, device=ids.device)
    with torch.inference_mode():
        if cuda:
            torch.cuda.synchronize(ids.device)
        t0 = time.perf_counter()
        for i in range(0, ids.shape[0], batch):
            x = ids[i : i + batch]
            logits = model(input_ids=x, use_cache=False).logits
            nll_sum(logits, x, ce_chunk_rows(logits.shape[-1]), total)
            del logits  # before the next pass allocates its own
            if progress is not None:
                progress.update(x.shape[0])
        s = total.item()
        if cuda:
            torch.cuda.synchronize(ids.device)
        seconds = time.perf_counter() - t0
    return s, seconds


def tokenize(tokenizer, s: str) -> List[int]:
    """The whole text's token ids, with the special tokens the tokenizer
    adds to a sequence (a LLaMA tokenizer's BOS), as the papers tokenize."""
    tokenizer.model_max_length = sys.maxsize  # one sequence, cut into windows by us: no length warning
    return list(tokenizer(s)["input_ids"])


def _load_errors() -> tuple:
    """The exceptions from_pretrained raises for a checkpoint it cannot
    read (a missing or malformed file), not for a bug."""
    errors = (OSError, ValueError, KeyError)
    try:
        from safetensors import SafetensorError

        errors += (SafetensorError,)
    except ImportError:
        pass
    return errors


def load_model(path: str, ampere: bool):
    """The model in eval mode: an ampere output through the package's
    quantizer on the GPU (serve.load), anything else through
    AutoModelForCausalLM, on the GPU when there is one; both in the
    checkpoint's dtype."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        if ampere:
            from . import serve

            model = serve.load(path, dtype="auto")
        elif torch.cuda.is_available():
            model = AutoModelForCausalLM.from_pretrained(path, dtype="auto", device_map="cuda")
        else:
            model = AutoModelForCausalLM.from_pretrained(path, dtype="auto")
    except SfsurgeryError:
        raise
    except _load_errors() as e:
        raise CheckpointError(f"{path}: cannot load as a causal LM: {type(e).__name__}: {e}") from None
    return model.eval()


def _progress(total: int):
    """A tqdm bar over the windows on stderr when it is a terminal."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="window", desc="perplexity", file=sys.stderr, leave=False)


def measure(model: str, textfile: str, seqlen: Optional[int] = None, windows: int = 0, batch: Optional[int] = None,
            tokens: Optional[Dict[Tuple[str, str], List[int]]] = None) -> Dict[str, Any]:
    """The perplexity of model on textfile (the command's MODEL, --text,
    --seqlen, --windows and --batch): checks everything it can before
    loading the model, then evaluates and returns the --json result.
    tokens, where given, caches the text's token ids by (tokenizer file
    digest, text digest) across calls in one process."""
    check_args(argparse.Namespace(seqlen=seqlen, windows=windows, batch=batch))
    t = text.read(textfile)
    path = layout.model_directory(model)
    cfg_path = os.path.join(path, "config.json")
    cfg = layout.read_config(path)
    tok_file = find_tokenizer(path)
    ampere = is_ampere(cfg)
    try:
        import torch
        from transformers import AutoConfig, AutoTokenizer
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError as e:
        raise SfsurgeryError(f"perplexity needs torch and transformers 5 (pip install torch transformers): {e}") from None
    check_causal(cfg, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, cfg_path)
    try:
        conf = AutoConfig.from_pretrained(path)
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"{cfg_path}: {e}") from None
    tc = conf.get_text_config() if hasattr(conf, "get_text_config") else conf
    max_positions = getattr(tc, "max_position_embeddings", None) or getattr(tc, "n_positions", None)
    vocab = tc.vocab_size
    seqlen = choose_seqlen(seqlen, max_positions, cfg_path)
    if ampere:
        from . import serve

        try:
            serve.check_gpu()
        except DeviceError as e:
            raise DeviceError(f"{path}: an sfsurgery ampere checkpoint runs on sfsurgery's GPU kernels: {e}") from None
    key = (_digest(os.path.join(path, tok_file)), t.sha256)
    ids = tokens.get(key) if tokens is not None else None
    if ids is None:
        try:
            tok = AutoTokenizer.from_pretrained(path)
        except Exception as e:  # tokenizers raises plain Exceptions for a malformed file
            raise InputError(f"{path}: cannot load its tokenizer: {type(e).__name__}: {e}") from None
        ids = tokenize(tok, t.text)
        if tokens is not None:
            tokens[key] = ids
    try:
        starts = text.windows(len(ids), seqlen, windows)
    except InputError as e:
        raise InputError(f"{textfile}: {e}") from None
    n = len(starts)
    used = ids[: n * seqlen]
    text.check_ids(used, vocab, f"{textfile} tokenized by {path}")

    lm = load_model(path, ampere)
    dtype = str(lm.dtype).replace("torch.", "")
    batch = choose_batch(batch, n, seqlen, vocab, torch.empty((), dtype=lm.dtype).element_size())
    x = torch.tensor(used, dtype=torch.long, device=lm.device).view(n, seqlen)
    dev = lm.device
    device = torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev)
    bar = _progress(n)
    oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    try:
        nll, seconds = evaluate(lm, x, batch, bar)
    except oom:
        raise DeviceError(f"out of GPU memory with {batch} windows of {seqlen} tokens per pass: use a smaller --batch") from None
    finally:
        if bar is not None:
            bar.close()
        del x
    del lm
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return result(model, "ampere" if ampere else "dense", text.describe(t), len(ids), seqlen, n, batch, nll, seconds,
                  dtype, device)


def _digest(path: str) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def run(args: argparse.Namespace) -> int:
    """The command: measure, then print the result."""
    r = measure(args.model, args.text, args.seqlen, args.windows, args.batch)
    print(json.dumps(r) if args.json else summary(r))
    return 0

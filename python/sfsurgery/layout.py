"""What an `ampere` checkpoint holds, read without torch.

`sfsurgery prune --format ampere` writes, for each pruned projection P,
the tensors P.packed ([n][k/2], the kept values), P.meta ([n][k/16] int16,
PyTorch's CUTLASS metadata as stored) and P.shape (int64 [2][1]: n, k),
keeps P.bias where the model has one, and records `quant_method:
"sfsurgery"` in config.json's quantization_config. This module reads the
config, takes the tensors' names, dtypes and shapes from the Go reader
(`sfsurgery inspect --json`, whose strict rules refuse every malformed
safetensors header: one checkpoint reader for the whole project), and
checks that every projection is one the decode kernels serve, so that
loading fails before any weight is read rather than computing garbage.
The values of P.shape are checked once loaded (SparseLinear.check_shape).
"""

import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from . import tool
from .errors import CheckpointError

QUANT_METHOD = "sfsurgery"
FORMAT = "ampere"

# The element types the decode kernels take, by safetensors dtype.
KERNEL_DTYPES = {"BF16": "bf16", "F16": "f16"}

@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a checkpoint: name, dtype, shape, the safetensors
    file holding it, and its size in bytes."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    path: str
    bytes: int


@dataclass(frozen=True)
class SparseModule:
    """One pruned projection: its module name, its weight's n × k, element
    type ("bf16" or "f16"), and the name of its bias tensor or None."""

    name: str
    n: int
    k: int
    dtype: str
    bias: Optional[str]


def inspect(path: str) -> dict:
    """Returns `sfsurgery inspect PATH --json`: a checkpoint (a directory,
    an index file, one .safetensors file or a hub id in the local cache)
    as the Go reader sees it, or CheckpointError with its one-line refusal
    (a malformed header, a shard the index names that is missing, …)."""
    out = tool.run(["inspect", path, "--json"], CheckpointError, f"{path}: checkpoints are read by the Go reader (sfsurgery inspect)")
    try:
        doc = json.loads(out)
        shards, tensors = doc["shards"], doc["tensors"]
        if not isinstance(shards, list) or not isinstance(tensors, list):
            raise TypeError("shards or tensors is not a list")
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"sfsurgery inspect {path}: output is not an inspect document ({e})") from None
    return doc


def read_tensors(path: str) -> Dict[str, TensorInfo]:
    """Returns every tensor of a checkpoint by name (inspect)."""
    doc = inspect(path)
    base = doc.get("path") or path
    where = base if os.path.isdir(base) else os.path.dirname(base)
    out = {}
    for t in doc["tensors"]:
        try:
            out[t["name"]] = TensorInfo(t["name"], t["dtype"], tuple(int(d) for d in t["shape"]),
                                        os.path.join(where, t["shard"]), int(t["bytes"]))
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"sfsurgery inspect {path}: a tensor entry is not what inspect writes ({e})") from None
    return out


def model_directory(model: str) -> str:
    """The directory of a model given as a directory or as a Hugging Face
    model id (org/name[@revision]): a directory as it is, an id as the Go
    reader resolves it in the local cache, offline (inspect); a file, or
    anything the reader cannot resolve, raises CheckpointError naming it."""
    if os.path.isdir(model):
        return model
    if os.path.isfile(model):
        raise CheckpointError(f"{model}: a file; want a model directory (config.json, tokenizer, safetensors)")
    path = inspect(model).get("path") or ""
    d = path if os.path.isdir(path) else os.path.dirname(path)
    if not os.path.isdir(d):
        raise CheckpointError(f"{model}: sfsurgery inspect resolved it to {path!r}, which is not a directory here")
    return d


def read_config(path: str) -> dict:
    """Reads a checkpoint directory's config.json."""
    cfg = os.path.join(path, "config.json")
    try:
        with open(cfg) as f:
            out = json.load(f)
    except OSError as e:
        raise CheckpointError(f"{cfg}: {e.strerror or e}") from None
    except ValueError as e:
        raise CheckpointError(f"{cfg}: not JSON: {e}") from None
    if not isinstance(out, dict):
        raise CheckpointError(f"{cfg}: not a JSON object")
    return out


def sparse_config(config: dict, where: str = "config.json") -> dict:
    """Returns the quantization_config of an sfsurgery ampere output, or
    raises CheckpointError saying what the config is instead."""
    q = config.get("quantization_config")
    if q is None:
        raise CheckpointError(f"{where}: no quantization_config: not an `sfsurgery prune --format ampere` output")
    if not isinstance(q, dict):
        raise CheckpointError(f"{where}: quantization_config is not an object")
    method = q.get("quant_method")
    if method != QUANT_METHOD:
        raise CheckpointError(f"{where}: quantization_config is {method!r}, not sfsurgery's")
    if q.get("format") != FORMAT:
        raise CheckpointError(f"{where}: sfsurgery format {q.get('format')!r}, want {FORMAT!r}")
    targets = q.get("targets")
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise CheckpointError(f"{where}: quantization_config.targets is not a list of module names")
    return q


def sparse_modules(tensors: Dict[str, TensorInfo], targets: Sequence[str]) -> List[SparseModule]:
    """Checks the packed, meta and shape tensors of every target module and
    returns them as SparseModules, in the order of targets."""
    out = []
    for mod in targets:
        parts = {}
        for part in ("packed", "meta", "shape"):
            t = tensors.get(f"{mod}.{part}")
            if t is None:
                raise CheckpointError(f"{mod}: no {mod}.{part} tensor in the checkpoint")
            parts[part] = t
        p, m, s = parts["packed"], parts["meta"], parts["shape"]
        if s.dtype != "I64" or s.shape != (2, 1):
            raise CheckpointError(f"{s.path}: {s.name}: {s.dtype} {list(s.shape)}, want I64 [2, 1]")
        where = f"{p.path}: {mod}"
        if p.dtype not in KERNEL_DTYPES:
            raise CheckpointError(f"{where}: packed is {p.dtype}; the kernels take BF16 and F16")
        if len(p.shape) != 2:
            raise CheckpointError(f"{where}: packed {list(p.shape)}, want [n, k/2]")
        # The weight is n × k: packed holds k/2 of each row's k values.
        n, k = p.shape[0], 2 * p.shape[1]
        if n < 32 or n % 32 or k < 64 or k % 64:
            raise CheckpointError(f"{where}: weight {n}x{k}; the kernels need rows % 32 == 0 and columns % 64 == 0")
        if m.dtype != "I16" or m.shape != (n, k // 16):
            raise CheckpointError(f"{where}: meta {m.dtype} {list(m.shape)}, want I16 [{n}, {k // 16}]")
        bias = tensors.get(f"{mod}.bias")
        if bias is not None and (bias.dtype != p.dtype or bias.shape != (n,)):
            raise CheckpointError(f"{bias.path}: {bias.name}: {bias.dtype} {list(bias.shape)}, want {p.dtype} [{n}]")
        out.append(SparseModule(mod, n, k, KERNEL_DTYPES[p.dtype], bias.name if bias is not None else None))
    return out

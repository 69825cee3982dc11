"""What an `ampere` checkpoint holds, read from its files without torch.

`sfsurgery prune --format ampere` writes, for each pruned projection P,
the tensors P.packed ([n][k/2], the kept values), P.meta ([n][k/16] int16,
PyTorch's CUTLASS metadata as stored) and P.shape (int64 [2][1]: n, k),
keeps P.bias where the model has one, and records `quant_method:
"sfsurgery"` in config.json's quantization_config. This module reads the
safetensors headers and the config, and checks that every projection is
one the decode kernels serve, so that loading fails before any weight is
read rather than computing garbage.
"""

import json
import os
import struct
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .errors import CheckpointError

QUANT_METHOD = "sfsurgery"
FORMAT = "ampere"

# The element types the decode kernels take, by safetensors dtype.
KERNEL_DTYPES = {"BF16": "bf16", "F16": "f16"}

# Stacks a serving engine multiplies as one weight: (the stacked name, the
# modules' last name parts, in row order).
STACKS = (
    ("qkv", ("q_proj", "k_proj", "v_proj")),
    ("gate_up", ("gate_proj", "up_proj")),
)

_MAX_HEADER = 100 << 20


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a safetensors file: dtype, shape and byte range."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    path: str
    begin: int  # absolute file offset of the first byte
    end: int


@dataclass(frozen=True)
class SparseModule:
    """One pruned projection: its module name, its weight's n × k, element
    type ("bf16" or "f16"), and the name of its bias tensor or None."""

    name: str
    n: int
    k: int
    dtype: str
    bias: Optional[str]


@dataclass(frozen=True)
class Stack:
    """Modules of one layer stacked along n: `parent` (e.g.
    "model.layers.0.mlp"), the stacked op name, and the parts in row order."""

    parent: str
    op: str
    parts: Tuple[SparseModule, ...]

    @property
    def n(self) -> int:
        """The stacked weight's rows: the sum of the parts'."""
        return sum(p.n for p in self.parts)

    @property
    def k(self) -> int:
        """The shared input size."""
        return self.parts[0].k


def read_header(path: str) -> Dict[str, TensorInfo]:
    """Reads the tensors of one safetensors file from its header."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path}: shorter than a safetensors header")
            (size,) = struct.unpack("<Q", head)
            if size > _MAX_HEADER:
                raise CheckpointError(f"{path}: header of {size} bytes")
            raw = f.read(size)
            f.seek(0, os.SEEK_END)
            total = f.tell()
    except OSError as e:
        raise CheckpointError(f"{path}: {e.strerror or e}") from None
    if len(raw) != size:
        raise CheckpointError(f"{path}: header cut short")
    try:
        header = json.loads(raw)
    except ValueError as e:
        raise CheckpointError(f"{path}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: header is not an object")
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (b, e) = v["dtype"], tuple(v["shape"]), v["data_offsets"]
            ok = isinstance(dtype, str) and all(isinstance(d, int) and d >= 0 for d in shape)
            ok = ok and isinstance(b, int) and isinstance(e, int) and 0 <= b <= e <= total - 8 - size
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok:
            raise CheckpointError(f"{path}: tensor {name!r}: malformed header entry")
        out[name] = TensorInfo(name, dtype, shape, path, 8 + size + b, 8 + size + e)
    return out


def checkpoint_files(path: str) -> List[str]:
    """Returns the safetensors files of a checkpoint directory (those its
    index names, else model.safetensors) or of a single file."""
    if os.path.isfile(path):
        return [path]
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        try:
            with open(index) as f:
                wm = json.load(f)["weight_map"]
            files = sorted(set(wm.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"{index}: not a safetensors index ({e})") from None
        return [os.path.join(path, f) for f in files]
    single = os.path.join(path, "model.safetensors")
    if os.path.isfile(single):
        return [single]
    raise CheckpointError(f"{path}: no model.safetensors or model.safetensors.index.json")


def read_tensors(path: str) -> Dict[str, TensorInfo]:
    """Reads the headers of every safetensors file of a checkpoint."""
    out = {}
    for f in checkpoint_files(path):
        for name, t in read_header(f).items():
            if name in out:
                raise CheckpointError(f"{f}: tensor {name!r} also in {out[name].path}")
            out[name] = t
    return out


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


def _read_shape(t: TensorInfo) -> Tuple[int, int]:
    with open(t.path, "rb") as f:
        f.seek(t.begin)
        raw = f.read(16)
    if len(raw) != 16:
        raise CheckpointError(f"{t.path}: tensor {t.name!r} cut short")
    return struct.unpack("<qq", raw)


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
        n, k = _read_shape(s)
        where = f"{p.path}: {mod}"
        if p.dtype not in KERNEL_DTYPES:
            raise CheckpointError(f"{where}: packed is {p.dtype}; the kernels take BF16 and F16")
        if n < 32 or n % 32 or k < 64 or k % 64:
            raise CheckpointError(f"{where}: weight {n}x{k}; the kernels need rows % 32 == 0 and columns % 64 == 0")
        if p.shape != (n, k // 2):
            raise CheckpointError(f"{where}: packed {list(p.shape)}, want [{n}, {k // 2}] for a {n}x{k} weight")
        if m.dtype != "I16" or m.shape != (n, k // 16):
            raise CheckpointError(f"{where}: meta {m.dtype} {list(m.shape)}, want I16 [{n}, {k // 16}]")
        bias = tensors.get(f"{mod}.bias")
        if bias is not None and (bias.dtype != p.dtype or bias.shape != (n,)):
            raise CheckpointError(f"{bias.path}: {bias.name}: {bias.dtype} {list(bias.shape)}, want {p.dtype} [{n}]")
        out.append(SparseModule(mod, n, k, KERNEL_DTYPES[p.dtype], bias.name if bias is not None else None))
    return out


def stacks(modules: Sequence[SparseModule]) -> List[Stack]:
    """Returns the complete stacks (STACKS) among modules: every part of a
    stack present under one parent, all with one k, dtype and bias-ness."""
    by_name = {m.name: m for m in modules}
    parents = sorted({m.name.rsplit(".", 1)[0] for m in modules if "." in m.name})
    out = []
    for parent in parents:
        for op, names in STACKS:
            parts = tuple(by_name.get(f"{parent}.{n}") for n in names)
            if any(p is None for p in parts):
                continue
            if len({(p.k, p.dtype, p.bias is None) for p in parts}) != 1:
                continue
            out.append(Stack(parent, op, parts))
    return out

"""The decisions file, schema sfsurgery-decisions/1 (the contract with
`sfsurgery prune --decisions`, docs/formats.md): one safetensors file whose
__metadata__ key "sfsurgery_decisions" holds the calibration's identity as
JSON, and per target weight P.weight the tensors P.weight.mask (U8
[n, ceil(k/8)]: bit j, least significant first, of byte b of row r is
W[r][8b + j] kept) and, for SparseGPT only, P.weight.update (W's dtype and
shape: the updated weight, 0 wherever the mask is 0).

The header is known before calibration starts (every target's name, dtype
and shape are), so the file is laid out first and each tensor written at
its place as its layer is decided: a 70B model's SparseGPT updates never
sit in memory together. Updates come first in the data section, then the
masks, so every tensor starts at a multiple of its element size. The file
is built as a temporary beside the output and renamed over it only when
every tensor is written; a failure removes it.

The header, metadata and writer need only the standard library;
pack_mask and write_tensor need torch.
"""

import ctypes
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from .. import __version__
from ..errors import InputError
from .plan import METHOD_PARAMS

SCHEMA = "sfsurgery-decisions/1"
METADATA_KEY = "sfsurgery_decisions"
TOOL = f"sfsurgery-python {__version__}"
MASK_SUFFIX = ".mask"
UPDATE_SUFFIX = ".update"

# Bytes per element of the dtypes a decisions file holds.
DTYPE_SIZES = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1}


@dataclass(frozen=True)
class Entry:
    """A target weight: tensor name (P.weight), safetensors dtype, [n, k]."""

    name: str
    dtype: str
    shape: Tuple[int, int]


def mask_name(weight: str) -> str:
    """The mask tensor's name for a target weight."""
    return weight + MASK_SUFFIX


def update_name(weight: str) -> str:
    """The update tensor's name for a target weight."""
    return weight + UPDATE_SUFFIX


def mask_shape(shape: Tuple[int, int]) -> Tuple[int, int]:
    """The mask's [n, ceil(k/8)] for a weight of shape [n, k]."""
    n, k = shape
    return n, (k + 7) // 8


def params(method: str) -> dict:
    """The method's parameters as the metadata records them."""
    return dict(METHOD_PARAMS[method])


def metadata(method: str, model: str, text: dict, samples: int, seqlen: int, seed: int) -> dict:
    """The "sfsurgery_decisions" object of a calibration."""
    return {
        "schema": SCHEMA,
        "method": method,
        "model": model,
        "text": text,
        "samples": samples,
        "seqlen": seqlen,
        "seed": seed,
        "params": params(method),
        "tool": TOOL,
    }


def layout(meta: dict, entries: Sequence[Entry], updates: bool) -> Tuple[bytes, Dict[str, Tuple[int, int]], int]:
    """Returns the safetensors header (JSON padded with spaces to a
    multiple of 8 bytes), each tensor's [begin, end) in the data section,
    and the data section's length, for the decisions on entries (with
    update tensors when updates)."""
    tensors = []
    for e in sorted(entries, key=lambda e: e.name):
        if updates:
            tensors.append((update_name(e.name), e.dtype, e.shape))
    for e in sorted(entries, key=lambda e: e.name):
        tensors.append((mask_name(e.name), "U8", mask_shape(e.shape)))
    head: Dict[str, object] = {"__metadata__": {"format": "pt", METADATA_KEY: json.dumps(meta, separators=(",", ":"))}}
    extents = {}
    off = 0
    for name, dtype, shape in tensors:
        size = DTYPE_SIZES[dtype] * shape[0] * shape[1]
        head[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + size]}
        extents[name] = (off, off + size)
        off += size
    raw = json.dumps(head, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return raw, extents, off


class Writer:
    """Writes one decisions file: the header at once, each tensor when it
    is ready (write), then commit renames the complete file over path. Used
    as a context manager; leaving it without commit removes the
    temporary."""

    def __init__(self, path: str, header: bytes, extents: Dict[str, Tuple[int, int]], size: int):
        self.path = path
        self.header = header
        self.extents = extents
        self.size = size
        self.written: set = set()
        self.tmp: Optional[str] = None
        self._f = None

    def __enter__(self) -> "Writer":
        d, base = os.path.split(self.path)
        fd, self.tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=d or ".")
        # mkstemp makes the file owner-only; the output gets a plain file's
        # mode, as open() would have given it (0666 less the umask).
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        self._f = os.fdopen(fd, "wb")
        self._f.write(len(self.header).to_bytes(8, "little"))
        self._f.write(self.header)
        self._f.truncate(8 + len(self.header) + self.size)
        return self

    def write(self, name: str, data) -> None:
        """Writes tensor name's bytes (any bytes-like object of exactly its
        size) at its place."""
        if name not in self.extents:
            raise KeyError(f"{name}: not a tensor of {self.path}")
        if name in self.written:
            raise ValueError(f"{name}: written twice")
        b, e = self.extents[name]
        view = memoryview(data).cast("B")
        if len(view) != e - b:
            raise ValueError(f"{name}: {len(view)} bytes, want {e - b}")
        self._f.seek(8 + len(self.header) + b)
        self._f.write(view)
        self.written.add(name)

    def commit(self) -> None:
        """Checks that every tensor was written, syncs the file and renames
        it over the output path."""
        missing = sorted(set(self.extents) - self.written)
        if missing:
            raise ValueError(f"{self.path}: {len(missing)} tensors never written, the first {missing[0]}")
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        os.replace(self.tmp, self.path)
        self.tmp = None
        try:
            dfd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)

    def __exit__(self, *exc) -> None:
        if self._f is not None and not self._f.closed:
            self._f.close()
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None


def open_writer(path: str, meta: dict, entries: Sequence[Entry], updates: bool) -> Writer:
    """A Writer for the decisions on entries at path."""
    header, extents, size = layout(meta, entries, updates)
    return Writer(path, header, extents, size)


def read_metadata(path: str) -> dict:
    """The "sfsurgery_decisions" object and tensor table of a decisions
    file: {"decisions": {...}, "tensors": {name: {dtype, shape,
    data_offsets}}}. Raises InputError for a file that is not one."""
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            head = json.loads(f.read(n))
        meta = head.pop("__metadata__")
        return {"decisions": json.loads(meta[METADATA_KEY]), "tensors": head}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: not a decisions file ({e})") from None


def pack_mask(keep):
    """Packs a bool keep mask [n, k] (torch, any device) into the U8
    [n, ceil(k/8)] layout, on the same device."""
    import torch

    n, k = keep.shape
    b = keep.to(torch.uint8)
    pad = -k % 8
    if pad:
        b = torch.nn.functional.pad(b, (0, pad))
    bits = torch.tensor([1 << j for j in range(8)], dtype=torch.uint8, device=keep.device)
    return (b.view(n, -1, 8) * bits).sum(dim=-1, dtype=torch.int32).to(torch.uint8)


def unpack_mask(packed, k: int):
    """The bool [n, k] mask of a packed U8 [n, ceil(k/8)] mask (torch)."""
    import torch

    n = packed.shape[0]
    bits = torch.tensor([1 << j for j in range(8)], dtype=torch.uint8, device=packed.device)
    full = (packed.unsqueeze(-1) & bits) != 0
    return full.reshape(n, -1)[:, :k]


def write_tensor(w: Writer, name: str, t) -> None:
    """Writes a torch tensor's bytes (moved to the CPU, contiguous; the
    host is little-endian, as safetensors is) as tensor name."""
    t = t.detach().to("cpu").contiguous()
    size = t.numel() * t.element_size()
    if size == 0:
        w.write(name, b"")
        return
    w.write(name, (ctypes.c_ubyte * size).from_address(t.data_ptr()))

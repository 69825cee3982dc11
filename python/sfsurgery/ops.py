"""The kernels as PyTorch custom ops, so CUDA graphs and torch.compile
capture them.

- `torch.ops.sfsurgery.linear(x, packed, meta, bias, table)`: y = x·Wᵀ (+ b)
  for a 2:4 weight W stored as packed + meta, by the decode kernel whose
  launch record the table holds for (n, k, m), m the tokens in x; y in x's
  dtype.
- `torch.ops.sfsurgery.decode(packed, meta)`: W itself, dense, in packed's
  dtype (the kernel `verify` and `unpack` check against).

Both have fake implementations (shapes and dtypes only) for tracing.
Tables are registered once (`register`) and named by an int, which is what
the op takes; registering allocates the device's split-K workspace, so a
capture never allocates one.
"""

import threading
from typing import Dict, List, Optional, Tuple

import torch

from . import driver
from .errors import CheckpointError, RecordError
from .records import Table, check_device

_LOCK = threading.Lock()
_TABLES: List[Table] = []
# Per device ordinal: the workspace tensor, the address of its partial sums,
# and the counters and partial sums it holds. Earlier, smaller workspaces
# stay alive in _RETIRED: graphs captured with them still point there.
_WORKSPACES: Dict[int, Tuple[torch.Tensor, int, int, int]] = {}
_RETIRED: List[torch.Tensor] = []

_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def register(table: Table, device: torch.device) -> int:
    """Checks table against the GPU, prepares every record (modules loaded,
    entry points looked up), sizes the workspace, and returns the table's id
    for the ops."""
    if device.type != "cuda":
        raise RecordError(f"the sparse kernels run on CUDA devices, not {device}")
    ordinal = device.index if device.index is not None else torch.cuda.current_device()
    k = driver.kernels(ordinal)
    check_device(table, k.sms, k.shared_optin, k.major, k.minor, torch.cuda.get_device_name(ordinal))
    for per_m in table.launches.values():
        for rec in per_m.values():
            k.prepare(rec)
    counters, partials = table.workspace()
    with _LOCK:
        have = _WORKSPACES.get(ordinal)
        if have is None or have[2] < counters or have[3] < partials:
            if have is not None:
                counters, partials = max(counters, have[2]), max(partials, have[3])
                _RETIRED.append(have[0])
            ws = torch.zeros(4 * (counters + partials) + 16, dtype=torch.uint8, device=torch.device("cuda", ordinal))
            base = (ws.data_ptr() + 15) // 16 * 16
            _WORKSPACES[ordinal] = (ws, base + 4 * counters, counters, partials)
        for i, t in enumerate(_TABLES):
            if t is table:
                return i
        _TABLES.append(table)
        return len(_TABLES) - 1


def table(i: int) -> Table:
    """Returns a registered table."""
    return _TABLES[i]


def _check_operands(x, packed, meta, bias):
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise RecordError(f"sfsurgery.linear: activations of {x.dtype}, want bfloat16 or float16")
    if packed.dtype != x.dtype:
        raise RecordError(f"sfsurgery.linear: weight of {packed.dtype} with activations of {x.dtype}")
    n, half = packed.shape
    k = 2 * half
    if x.shape[-1] != k:
        raise RecordError(f"sfsurgery.linear: activations of {x.shape[-1]} features for a {n}x{k} weight")
    if meta.dtype != torch.int16 or meta.numel() * 16 != n * k:
        raise RecordError(f"sfsurgery.linear: meta {meta.dtype} of {meta.numel()} values for a {n}x{k} weight")
    if bias is not None and (bias.dtype != x.dtype or bias.shape != (n,)):
        raise RecordError(f"sfsurgery.linear: bias {bias.dtype} {tuple(bias.shape)} for a {n}x{k} weight")
    return n, k


def _aligned(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


@torch.library.custom_op("sfsurgery::linear", mutates_args=())
def linear(x: torch.Tensor, packed: torch.Tensor, meta: torch.Tensor, bias: Optional[torch.Tensor], table: int) -> torch.Tensor:
    """y = x·Wᵀ (+ bias) by the launch record for (n, k, m)."""
    n, k = _check_operands(x, packed, meta, bias)
    x2 = _aligned(x.reshape(-1, k))
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return y.reshape(*x.shape[:-1], n)
    t = _TABLES[table]
    rec = t.lookup(n, k, m)
    if rec is None:
        raise RecordError(f"sfsurgery.linear: no launch record for {n}x{k} at m = {m}")
    ordinal = x.device.index
    ws = _WORKSPACES[ordinal]
    ptrs = {
        "y": y.data_ptr(),
        "x": x2.data_ptr(),
        "packed": packed.data_ptr(),
        "meta": meta.data_ptr(),
        # Always the workspace: a record without one ignores it, and its
        # fallback (launched if the driver refuses it) may need it.
        "workspace": ws[1],
        "bias": bias.data_ptr() if bias is not None else 0,
        "out": 1,
    }
    driver.kernels(ordinal).launch(rec, ptrs, torch.cuda.current_stream(x.device).cuda_stream)
    return y.reshape(*x.shape[:-1], n)


@linear.register_fake
def _(x, packed, meta, bias, table):
    n = packed.shape[0]
    return x.new_empty((*x.shape[:-1], n))


@torch.library.custom_op("sfsurgery::decode", mutates_args=())
def decode(packed: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    """The dense pruned weight [n][k] from packed + meta."""
    n, half = packed.shape
    k = 2 * half
    if packed.dtype not in (torch.bfloat16, torch.float16) or meta.dtype != torch.int16 or meta.numel() * 16 != n * k:
        raise CheckpointError(f"sfsurgery.decode: packed {packed.dtype} {tuple(packed.shape)}, meta {meta.dtype} {tuple(meta.shape)}")
    if n % 32 or k % 64:
        raise CheckpointError(f"sfsurgery.decode: a {n}x{k} weight; the kernels need n % 32 == 0 and k % 64 == 0")
    w = torch.empty((n, k), dtype=packed.dtype, device=packed.device)
    packed, meta = packed.contiguous(), meta.contiguous()
    driver.kernels(packed.device.index).launch_decode(
        w.data_ptr(), packed.data_ptr(), meta.data_ptr(), n, k, torch.cuda.current_stream(packed.device).cuda_stream
    )
    return w


@decode.register_fake
def _(packed, meta):
    return packed.new_empty((packed.shape[0], 2 * packed.shape[1]))

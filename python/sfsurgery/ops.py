"""The kernels as PyTorch custom ops, so CUDA graphs and torch.compile
capture them.

- `torch.ops.sfsurgery.linear(x, packed, meta, bias, table)`: y = x·Wᵀ (+ b)
  for a 2:4 weight W stored as packed + meta, by the decode kernel whose
  launch record the table holds for (n, k, m), m the tokens in x, or above
  the decode kernels' tokens by the prefill kernel (sm_90a) whose record
  the table holds for that m; y in x's dtype.
- `torch.ops.sfsurgery.decode(packed, meta)`: W itself, dense, in packed's
  dtype (the kernel `verify` and `unpack` check against).

Both have fake implementations (shapes and dtypes only) for tracing.
Tables are registered once (`register`) and named by an int, which is what
the op takes; registering allocates the device's split-K workspace, so a
capture never allocates one.
"""

import threading
from typing import Dict, List, Optional, Set, Tuple

import torch

from . import driver
from .errors import CheckpointError, DeviceError, RecordError
from .records import Table, check_device

_LOCK = threading.Lock()
_TABLES: List[Table] = []
# The (table id, device ordinal) pairs registered: a table's records are
# checked against each device they run on.
_ON: Set[Tuple[int, int]] = set()
# Per device ordinal: the workspace tensor, the address of its partial sums,
# and the counters and partial sums it holds. Workspaces that a larger one
# replaced stay alive in _RETIRED: graphs captured with them point there.
_WORKSPACES: Dict[int, Tuple[torch.Tensor, int, int, int]] = {}
_RETIRED: List[torch.Tensor] = []

_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def register(table: Table, device: torch.device) -> int:
    """Checks table against the GPU, prepares every record (modules loaded,
    entry points looked up, the fallback chosen where the device cannot take
    a cooperative launch or clusters), sizes the device's split-K workspace,
    and returns the table's id for the ops. All of it happens here, before
    any capture."""
    if device.type != "cuda":
        raise DeviceError(f"the sparse kernels run on CUDA devices, not {device}")
    ordinal = device.index if device.index is not None else torch.cuda.current_device()
    with _LOCK:
        tid = next((i for i, t in enumerate(_TABLES) if t is table), None)
        if tid is None:
            _TABLES.append(table)
            tid = len(_TABLES) - 1
        if (tid, ordinal) in _ON:
            return tid
    k = driver.kernels(ordinal)
    check_device(table, k.sms, k.shared_optin, k.major, k.minor, torch.cuda.get_device_name(ordinal))
    for per_m in table.launches.values():
        for rec in per_m.values():
            k.prepare(rec)
    for ranges in table.prefill.values():
        for pf in ranges:
            k.function(pf.module, pf.entry)
    k.function("kernels/ptx/sfsurgery.ptx", "decode_ampere16")  # the prefill's decode
    counters, partials = table.workspace()
    with _LOCK:
        have = _WORKSPACES.get(ordinal)
        if have is None or have[2] < counters or have[3] < partials:
            if have is not None:
                counters, partials = max(counters, have[2]), max(partials, have[3])
                _RETIRED.append(have[0])
            ws = torch.zeros(4 * (counters + partials) + 16, dtype=torch.uint8, device=torch.device("cuda", ordinal))
            # The counters must be zero before a launch on any stream reads them.
            torch.cuda.synchronize(ordinal)
            base = (ws.data_ptr() + 15) // 16 * 16
            _WORKSPACES[ordinal] = (ws, base + 4 * counters, counters, partials)
        _ON.add((tid, ordinal))
    return tid


def table(i: int) -> Table:
    """Returns a registered table."""
    return _TABLES[i]


def _check_weight(op: str, packed: torch.Tensor, meta: torch.Tensor, device: torch.device) -> Tuple[int, int]:
    """Checks packed and meta as one weight on device; returns (n, k)."""
    if packed.dim() != 2 or packed.dtype not in (torch.bfloat16, torch.float16):
        raise CheckpointError(f"{op}: packed {packed.dtype} {tuple(packed.shape)}, want a 2-D bfloat16 or float16 tensor")
    n, k = packed.shape[0], 2 * packed.shape[1]
    if meta.dtype != torch.int16 or meta.numel() * 16 != n * k:
        raise CheckpointError(f"{op}: meta {meta.dtype} of {meta.numel()} values for a {n}x{k} weight, want int16 of {n * k // 16}")
    if n % 32 or k % 64 or n == 0:
        raise CheckpointError(f"{op}: a {n}x{k} weight; the kernels need n % 32 == 0 and k % 64 == 0")
    for name, t in (("packed", packed), ("meta", meta)):
        if t.device != device:
            raise DeviceError(f"{op}: {name} on {t.device}, want {device}")
        if not t.is_contiguous():
            raise CheckpointError(f"{op}: {name} is not contiguous (a view of another tensor?)")
    return n, k


def _aligned(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


@torch.library.custom_op("sfsurgery::linear", mutates_args=())
def linear(x: torch.Tensor, packed: torch.Tensor, meta: torch.Tensor, bias: Optional[torch.Tensor], table: int) -> torch.Tensor:
    """y = x·Wᵀ (+ bias) by the launch record for (n, k, m), m the tokens
    of x, on PyTorch's current stream; y in x's dtype."""
    if x.device.type != "cuda":
        raise DeviceError(f"sfsurgery.linear: activations on {x.device}, want a CUDA device")
    n, k = _check_weight("sfsurgery.linear", packed, meta, x.device)
    t = _TABLES[table]
    if x.dtype != packed.dtype or x.dtype != _DTYPES[t.dtype]:
        raise RecordError(f"sfsurgery.linear: activations of {x.dtype}, weight of {packed.dtype}, launch records for {t.dtype}")
    if x.shape[-1] != k:
        raise RecordError(f"sfsurgery.linear: activations of {x.shape[-1]} features for a {n}x{k} weight")
    if bias is not None and (bias.dtype != x.dtype or tuple(bias.shape) != (n,) or bias.device != x.device or not bias.is_contiguous()):
        raise RecordError(f"sfsurgery.linear: bias {bias.dtype} {tuple(bias.shape)} on {bias.device}, want contiguous {x.dtype} [{n}] on {x.device}")
    ordinal = x.device.index
    if (table, ordinal) not in _ON:
        raise RecordError(f"sfsurgery.linear: launch records {table} are not registered on cuda:{ordinal} (SparseLinear.attach there)")
    x2 = _aligned(x.reshape(-1, k))
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return y.reshape(*x.shape[:-1], n)
    rec = t.lookup(n, k, m)
    pf = t.lookup_prefill(n, k, m) if rec is None else None
    if rec is None and pf is None:
        raise RecordError(f"sfsurgery.linear: no launch record for {n}x{k} at m = {m}")
    ptrs = {
        "y": y.data_ptr(),
        "x": x2.data_ptr(),
        "packed": packed.data_ptr(),
        "meta": meta.data_ptr(),
        # Always the workspace: a record without one ignores it, and its
        # fallback may need it.
        "workspace": _WORKSPACES[ordinal][1],
        "bias": bias.data_ptr() if bias is not None else 0,
        "out": 1,
    }
    stream = torch.cuda.current_stream(x.device).cuda_stream
    if pf is not None:
        driver.kernels(ordinal).launch_prefill(pf, ptrs, m, n, k, stream)
    else:
        driver.kernels(ordinal).launch(rec, ptrs, stream)
    return y.reshape(*x.shape[:-1], n)


@linear.register_fake
def _(x, packed, meta, bias, table):
    n = packed.shape[0]
    return x.new_empty((*x.shape[:-1], n))


@torch.library.custom_op("sfsurgery::decode", mutates_args=())
def decode(packed: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    """The dense pruned weight [n][k] from packed + meta, in packed's dtype."""
    if packed.device.type != "cuda":
        raise DeviceError(f"sfsurgery.decode: packed on {packed.device}, want a CUDA device")
    n, k = _check_weight("sfsurgery.decode", packed, meta, packed.device)
    w = torch.empty((n, k), dtype=packed.dtype, device=packed.device)
    driver.kernels(packed.device.index).launch_decode(
        w.data_ptr(), packed.data_ptr(), meta.data_ptr(), n, k, torch.cuda.current_stream(packed.device).cuda_stream
    )
    return w


@decode.register_fake
def _(packed, meta):
    return packed.new_empty((packed.shape[0], 2 * packed.shape[1]))

"""The kernels as PyTorch operators, so CUDA graphs and torch.compile
capture them.

- `torch.ops.sfsurgery.linear(x, packed, meta, bias, table)`: y = x·Wᵀ (+ b)
  for a 2:4 weight W stored as packed + meta, by the decode kernel whose
  launch record the table holds for (n, k, m), m the tokens in x, or above
  the decode kernels' tokens by the prefill kernel (sm_90a) whose record
  the table holds for that m; y in x's dtype, on PyTorch's current
  stream. Every call checks its arguments (one-line errors), then runs
  the weight's prepared launch for m (prepared.py), made at its first
  call and kept per (table, device, shape, addresses). A plain
  `torch.library` operator with a CUDA kernel and a fake implementation:
  the dispatcher calls the kernel with nothing else in Python.
- `torch.ops.sfsurgery.decode(packed, meta)`: W itself, dense, in packed's
  dtype (the kernel `verify` and `unpack` check against); a
  `torch.library.custom_op` with a fake implementation.

`bind` checks a weight as linear does and returns its prepared launches:
what SparseLinear.forward runs in eager mode, without the dispatcher.
Tables are registered once (`register`) and named by an int, which is what
the op takes; registering allocates the device's split-K workspace, so a
capture never allocates one.
"""

import threading
from typing import Callable, Dict, List, Optional, Set, Tuple

import torch

from . import driver, prepared
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
# The prepared launches of the weights linear has run (_weight), by all
# they depend on: table, device, shape and addresses (a weight at the
# addresses of one before it, with its table and shape, launches exactly
# as that one did, so it may share its launches). Emptied when it holds
# MAX_WEIGHTS, which is more than a model has weights.
_WEIGHTS: Dict[Tuple[int, int, int, int, int, int, int], prepared.Weight] = {}
MAX_WEIGHTS = 4096

# PyTorch's current stream of a device, as a number: the raw handle where
# torch has the call for it (no Stream object made), else the public way.
stream: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda ordinal: torch.cuda.current_stream(ordinal).cuda_stream
)


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


def _check_weight(op: str, packed: torch.Tensor, meta: torch.Tensor, ordinal: int) -> Tuple[int, int]:
    """Checks packed and meta as one weight on CUDA device ordinal; returns
    (n, k). Device checks compare ordinals (get_device), which costs less
    per call than making torch.device objects."""
    if packed.dim() != 2 or packed.dtype not in (torch.bfloat16, torch.float16):
        raise CheckpointError(f"{op}: packed {packed.dtype} {tuple(packed.shape)}, want a 2-D bfloat16 or float16 tensor")
    n, k = packed.shape[0], 2 * packed.shape[1]
    if meta.dtype != torch.int16 or meta.numel() * 16 != n * k:
        raise CheckpointError(f"{op}: meta {meta.dtype} of {meta.numel()} values for a {n}x{k} weight, want int16 of {n * k // 16}")
    if n % 32 or k % 64 or n == 0 or k == 0:
        raise CheckpointError(f"{op}: a {n}x{k} weight; the kernels need n and k above 0, n % 32 == 0 and k % 64 == 0")
    for name, t in (("packed", packed), ("meta", meta)):
        if not t.is_cuda or t.get_device() != ordinal:
            raise DeviceError(f"{op}: {name} on {t.device}, want cuda:{ordinal}")
        if not t.is_contiguous():
            raise CheckpointError(f"{op}: {name} is not contiguous (a view of another tensor?)")
    return n, k


def _aligned(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _weight(table: int, ordinal: int, n: int, k: int, packed: int, meta: int, bias: int) -> prepared.Weight:
    """Returns the prepared launches of a weight at those addresses with
    registered table on device ordinal, made once."""
    key = (table, ordinal, n, k, packed, meta, bias)
    w = _WEIGHTS.get(key)
    if w is None:
        with _LOCK:
            w = _WEIGHTS.get(key)
            if w is None:
                if len(_WEIGHTS) >= MAX_WEIGHTS:
                    _WEIGHTS.clear()
                w = prepared.Weight(driver.kernels(ordinal), _TABLES[table], n, k, packed, meta, bias, _WORKSPACES[ordinal][1])
                _WEIGHTS[key] = w
    return w


def _check_linear(packed: torch.Tensor, meta: torch.Tensor, bias: Optional[torch.Tensor], table: int, ordinal: int,
                  dtype: torch.dtype) -> Tuple[int, int]:
    """Checks a weight and its bias as linear takes them for activations of
    dtype on CUDA device ordinal, and that table is registered there;
    returns (n, k)."""
    n, k = _check_weight("sfsurgery.linear", packed, meta, ordinal)
    if not 0 <= table < len(_TABLES):
        raise RecordError(f"sfsurgery.linear: no launch records {table} (SparseLinear.attach registers them)")
    t = _TABLES[table]
    if dtype != packed.dtype or dtype != _DTYPES[t.dtype]:
        raise RecordError(f"sfsurgery.linear: activations of {dtype}, weight of {packed.dtype}, launch records for {t.dtype}")
    if bias is not None and (bias.dtype != dtype or bias.dim() != 1 or bias.shape[0] != n or not bias.is_cuda
                             or bias.get_device() != ordinal or not bias.is_contiguous()):
        raise RecordError(f"sfsurgery.linear: bias {bias.dtype} {tuple(bias.shape)} on {bias.device}, want contiguous {dtype} [{n}] on cuda:{ordinal}")
    if (table, ordinal) not in _ON:
        raise RecordError(f"sfsurgery.linear: launch records {table} are not registered on cuda:{ordinal} (SparseLinear.attach there)")
    return n, k


def bind(packed: torch.Tensor, meta: torch.Tensor, bias: Optional[torch.Tensor], table: int) -> prepared.Weight:
    """Checks a weight on the GPU as linear does (for activations of its
    dtype on its device) and returns its prepared launches, which run
    linear's kernels for it without the op (SparseLinear.forward in eager
    mode)."""
    if packed.device.type != "cuda":
        raise DeviceError(f"sfsurgery.linear: packed on {packed.device}, want a CUDA device")
    ordinal = packed.get_device()
    n, k = _check_linear(packed, meta, bias, table, ordinal, packed.dtype)
    return _weight(table, ordinal, n, k, packed.data_ptr(), meta.data_ptr(), bias.data_ptr() if bias is not None else 0)


def _linear(x: torch.Tensor, packed: torch.Tensor, meta: torch.Tensor, bias: Optional[torch.Tensor], table: int) -> torch.Tensor:
    """sfsurgery::linear on CUDA (and on the CPU, to refuse it in one line).
    y is made in its final shape and x is used in place where it is
    contiguous and 16-byte aligned (no views made on that path: each
    costs the host about a microsecond a call)."""
    if not x.is_cuda:
        raise DeviceError(f"sfsurgery.linear: activations on {x.device}, want a CUDA device")
    ordinal = x.get_device()
    n, k = _check_linear(packed, meta, bias, table, ordinal, x.dtype)
    if x.dim() == 0 or x.shape[-1] != k:
        raise RecordError(f"sfsurgery.linear: activations of {x.shape[-1] if x.dim() else 0} features for a {n}x{k} weight")
    y = x.new_empty(x.shape[:-1] + (n,))
    m = x.numel() // k
    if m == 0:
        return y
    if x.is_contiguous() and x.data_ptr() % 16 == 0:
        xp = x.data_ptr()
    else:
        x2 = _aligned(x.reshape(-1, k))  # kept until the launch is queued
        xp = x2.data_ptr()
    w = _weight(table, ordinal, n, k, packed.data_ptr(), meta.data_ptr(), bias.data_ptr() if bias is not None else 0)
    w.launcher(m)(y.data_ptr(), xp, m, stream(ordinal))
    return y


def _linear_fake(x, packed, meta, bias, table):
    return x.new_empty((*x.shape[:-1], packed.shape[0]))


# A plain torch.library operator rather than torch.library.custom_op,
# whose eager calls add an autograd kernel in Python, a redispatch, a
# torch._dynamo.disable wrapper and an aliasing check to each launch: here
# the dispatcher calls _linear directly (its autograd fallback is in C++;
# nothing here has a gradient). The fake implementation is what
# torch.compile traces.
_LIB = torch.library.Library("sfsurgery", "FRAGMENT")
_LIB.define("linear(Tensor x, Tensor packed, Tensor meta, Tensor? bias, int table) -> Tensor",
            tags=(torch.Tag.pt2_compliant_tag,))
_LIB.impl("linear", _linear, "CUDA")
_LIB.impl("linear", _linear, "CPU")
torch.library.register_fake("sfsurgery::linear", _linear_fake, lib=_LIB)
linear = torch.ops.sfsurgery.linear.default


@torch.library.custom_op("sfsurgery::decode", mutates_args=())
def decode(packed: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    """The dense pruned weight [n][k] from packed + meta, in packed's dtype."""
    if packed.device.type != "cuda":
        raise DeviceError(f"sfsurgery.decode: packed on {packed.device}, want a CUDA device")
    n, k = _check_weight("sfsurgery.decode", packed, meta, packed.get_device())
    w = torch.empty((n, k), dtype=packed.dtype, device=packed.device)
    driver.kernels(packed.device.index).launch_decode(
        w.data_ptr(), packed.data_ptr(), meta.data_ptr(), n, k, torch.cuda.current_stream(packed.device).cuda_stream
    )
    return w


@decode.register_fake
def _(packed, meta):
    return packed.new_empty((packed.shape[0], 2 * packed.shape[1]))

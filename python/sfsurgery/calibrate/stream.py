"""Block-sequential calibration, as the published methods run it, in
bounded GPU memory.

The calibration samples' hidden states stay on the GPU (two buffers of
samples × seqlen × hidden, this layer's inputs and the next one's); the
decoder layers come one at a time. For each layer in order:

1. the layer is loaded on the GPU (Layers.layer);
2. forward hooks on its target linears gather, in one pass over the
   samples, what the method needs, once per distinct input (q, k, v read
   one tensor, and gate, up another): Σ_tokens x_j² in float32 (Wanda,
   RIA) or Σ_tokens x xᵀ in float32 (SparseGPT, whose H = 2XᵀX/n);
3. every target is decided from the statistics of the unpruned layer (the
   reference code's order), its mask applied to the layer (and SparseGPT's
   updated weights copied in), and the decisions handed to emit;
4. the samples run through the pruned layer, giving the next layer's
   inputs;
5. the layer is released.

Nothing of a layer outlives its step on the GPU, so peak GPU memory does
not grow with depth. tests/test_calibrate_methods.py runs prune_layers on
small float64 layers against the plain reference in
tests/reference_calibration.py.
"""

import collections
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Deque, Dict, List, Optional, Protocol, Sequence, Tuple

import torch
from torch import Tensor, nn

from . import methods, output
from .errors import CalibrationError
from .plan import Plan, Target

# The projections of one module that read one input tensor: the
# attention's q, k, v and the MLP's gate, up.
SHARED_INPUTS = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up", "up_proj": "gate_up"}

# Tokens that go through a layer at once (whole samples, at least one).
TOKENS_PER_BATCH = 8192

# Decisions copied to the host but not yet written may take this much
# host memory before the calibration waits for the writer.
PENDING_BYTES = 8 << 30

TORCH_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}

Emit = Callable[[Target, Tensor, Optional[Tensor]], None]


def input_key(module: str) -> str:
    """The name of a projection's input: its module path with q/k/v and
    gate/up folded into one ("self_attn.qkv", "mlp.gate_up")."""
    parent, _, leaf = module.rpartition(".")
    leaf = SHARED_INPUTS.get(leaf, leaf)
    return f"{parent}.{leaf}" if parent else leaf


def _accumulator(x: Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def sum_of_squares(x: Tensor) -> Tensor:
    """Σ over the rows of x [tokens, k] of x², in float32 (float64 for
    float64 x)."""
    xf = x.to(_accumulator(x))
    if xf is x:
        return (x * x).sum(dim=0)
    return xf.square_().sum(dim=0)


def gram(x: Tensor) -> Tensor:
    """xᵀx for x [tokens, k], in float32 (float64 for float64 x). BF16 and
    F16 on a GPU multiply with float32 accumulation and output where torch
    offers it (torch.mm's out_dtype): the products of 16-bit values are
    exact in float32, so the result is float32 arithmetic on the same
    values."""
    if x.is_cuda and x.dtype in (torch.bfloat16, torch.float16):
        try:
            return torch.mm(x.t(), x, out_dtype=torch.float32)
        except (TypeError, RuntimeError):
            pass
    xf = x.to(_accumulator(x))
    return xf.t() @ xf


class Statistics:
    """What a method needs from one layer's inputs, gathered by forward
    hooks on the layer's target linears: per distinct input (input_key),
    the running sum (sum_of_squares or gram) and the token count. A hook
    adds an input only when it is not the tensor the last projection of its
    group saw, so q, k, v add their shared input once; check verifies that
    every projection saw exactly its group's inputs."""

    def __init__(self, layer: nn.Module, targets: Sequence[Target], hessian: bool):
        self.hessian = hessian
        self.keys = {t.module: input_key(t.module) for t in targets}
        self.sums: Dict[str, Tensor] = {}
        self.tokens: Dict[str, int] = {}
        self._adds: Dict[str, int] = {}
        self._calls: Dict[str, int] = {t.module: 0 for t in targets}
        self._last: Dict[str, Tensor] = {}
        self._handles = []
        for t in targets:
            mod = layer.get_submodule(t.module)
            if not isinstance(mod, nn.Linear):
                raise CalibrationError(f"{t.name}: {t.module} is a {type(mod).__name__}, not a linear layer")
            self._handles.append(mod.register_forward_hook(self._hook(t.module)))

    def _hook(self, module: str):
        key = self.keys[module]

        def hook(_mod, args, _out):
            x = args[0]
            self._calls[module] += 1
            if self._last.get(key) is x:
                return
            self._last[key] = x
            self._adds[key] = self._adds.get(key, 0) + 1
            rows = x.reshape(-1, x.shape[-1])
            s = gram(rows) if self.hessian else sum_of_squares(rows)
            if key in self.sums:
                self.sums[key] += s
            else:
                self.sums[key] = s
            self.tokens[key] = self.tokens.get(key, 0) + rows.shape[0]

        return hook

    def remove(self) -> None:
        """Removes the hooks and the reference to the last input."""
        for h in self._handles:
            h.remove()
        self._handles = []
        self._last.clear()

    def check(self, where: str) -> None:
        """Raises CalibrationError when a projection was never called or
        did not see exactly the inputs of its group."""
        for module, key in self.keys.items():
            calls, adds = self._calls[module], self._adds.get(key, 0)
            if calls == 0:
                raise CalibrationError(f"{where}.{module}: never called in the layer's forward")
            if calls != adds:
                raise CalibrationError(
                    f"{where}.{module}: {calls} inputs, {adds} distinct ones in its group {key}: the projections that should share an input do not"
                )


def decide(layer: nn.Module, targets: Sequence[Target], method: str, stats: Statistics, emit: Emit) -> None:
    """Decides every target of layer from stats, applies the decisions to
    the layer, and hands each to emit(target, keep mask, update or None).
    SparseGPT prunes the projections of one input stacked along their rows
    (the rows are independent, and they share H)."""
    if method in ("wanda", "ria"):
        score = methods.wanda if method == "wanda" else methods.ria
        for t in targets:
            w = layer.get_submodule(t.module).weight
            keep = score(w, stats.sums[input_key(t.module)])
            w.mul_(keep)
            emit(t, keep, None)
            del keep
        return
    if method != "sparsegpt":
        raise ValueError(f"method {method!r}")
    groups: Dict[str, List[Target]] = collections.OrderedDict()
    for t in targets:
        groups.setdefault(input_key(t.module), []).append(t)
    for key, group in groups.items():
        weights = [layer.get_submodule(t.module).weight for t in group]
        ft = torch.float64 if weights[0].dtype == torch.float64 else torch.float32
        stacked = torch.cat([w.to(ft) for w in weights])
        h = stats.sums.pop(key)
        h.mul_(2.0 / stats.tokens[key])
        q, keep = methods.sparsegpt(stacked, h, overwrite=True, where=", ".join(t.name for t in group))
        del h, stacked
        r = 0
        for t, w in zip(group, weights):
            n = w.shape[0]
            w.copy_(q[r : r + n])
            want = TORCH_DTYPES[t.dtype]
            emit(t, keep[r : r + n], w if w.dtype == want else q[r : r + n].to(want))
            r += n
        del q, keep


class Layers(Protocol):
    """The decoder layers of a model, one at a time (model.Checkpoint)."""

    def layer(self, i: int) -> nn.Module:
        """Layer i, its weights loaded on the calibration device."""

    def release(self, i: int) -> None:
        """Frees layer i's weights."""

    def forward(self, layer: nn.Module, x: Tensor) -> Tensor:
        """The layer's output hidden states for x [batch, seqlen, hidden]."""


def batches(count: int, size: int) -> List[slice]:
    """The slices of count samples in batches of size."""
    return [slice(i, min(i + size, count)) for i in range(0, count, size)]


@torch.no_grad()
def prune_layers(layers: Layers, hidden: Tensor, targets: Sequence[Sequence[Target]], method: str, emit: Emit, batch: int,
                 progress: Optional[Callable[[int], None]] = None) -> None:
    """Calibrates the layers block by block (module doc) from hidden
    [samples, seqlen, hidden], the first layer's inputs (overwritten);
    targets[i] are layer i's targets; batch samples go through a layer at
    once."""
    inps = hidden
    outs = torch.empty_like(hidden)
    parts = batches(hidden.shape[0], batch)
    for i, layer_targets in enumerate(targets):
        layer = layers.layer(i)
        try:
            if layer_targets:
                stats = Statistics(layer, layer_targets, method == "sparsegpt")
                try:
                    for b in parts:
                        layers.forward(layer, inps[b])
                finally:
                    stats.remove()
                stats.check(f"layer {i}")
                decide(layer, layer_targets, method, stats, emit)
                del stats
            for b in parts:
                outs[b] = layers.forward(layer, inps[b])
        finally:
            del layer
            layers.release(i)
        inps, outs = outs, inps
        if progress is not None:
            progress(i)


@dataclass(frozen=True)
class Result:
    """What a calibration did: decoder layers and targets decided; seconds
    from the first sample's embedding to the last decision written, and of
    those the seconds spent waiting for weights from the checkpoint; the
    peak GPU memory allocated (torch.cuda.max_memory_allocated)."""

    layers: int
    targets: int
    seconds: float
    load_seconds: float
    peak_gpu_bytes: int


class _Sink:
    """Hands decisions to a writer thread: the mask packed on the device,
    mask and update copied to the host, written in the background, with at
    most PENDING_BYTES waiting."""

    def __init__(self, w: output.Writer, pool: ThreadPoolExecutor):
        self.w = w
        self.pool = pool
        self.pending: Deque[Tuple[Future, int]] = collections.deque()
        self.bytes = 0

    def __call__(self, t: Target, keep: Tensor, update: Optional[Tensor]) -> None:
        packed = output.pack_mask(keep).to("cpu", copy=True)
        upd = None if update is None else update.detach().to("cpu", copy=True)
        size = packed.numel() + (0 if upd is None else upd.numel() * upd.element_size())
        while self.pending and self.bytes + size > PENDING_BYTES:
            self._wait_one()
        self.pending.append((self.pool.submit(self._write, t, packed, upd), size))
        self.bytes += size

    def _write(self, t: Target, packed: Tensor, upd: Optional[Tensor]) -> None:
        output.write_tensor(self.w, output.mask_name(t.name), packed)
        if upd is not None:
            output.write_tensor(self.w, output.update_name(t.name), upd)

    def _wait_one(self) -> None:
        f, size = self.pending.popleft()
        f.result()
        self.bytes -= size

    def drain(self) -> None:
        """Waits for every write; raises the first write's error."""
        while self.pending:
            self._wait_one()


def calibrate(plan: Plan, ids: Sequence[Sequence[int]], method: str, path: str, meta: dict, device: torch.device,
              batch: int = 0, progress: Optional[Callable[[int], None]] = None) -> Result:
    """Calibrates plan's model on the samples ids (samples × seqlen token
    ids) with method on device, and writes the decisions file at path with
    metadata meta (output.metadata). batch is the samples per forward
    (default: TOKENS_PER_BATCH tokens' worth). progress(i) is called after
    layer i."""
    from .model import Checkpoint

    seqlen = len(ids[0])
    batch = batch or max(1, TOKENS_PER_BATCH // seqlen)
    entries = [output.Entry(t.name, t.dtype, t.shape) for t in plan.targets]
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    with Checkpoint(plan, device, seqlen) as ck, output.open_writer(path, meta, entries, method == "sparsegpt") as w:
        with ThreadPoolExecutor(1, thread_name_prefix="sfsurgery-decisions") as pool:
            sink = _Sink(w, pool)
            start = time.perf_counter()
            try:
                hidden = ck.embed(torch.tensor(ids, dtype=torch.long), batch)
                prune_layers(ck, hidden, plan.by_layer(), method, sink, batch, progress)
                del hidden
            finally:
                sink.drain()
            seconds = time.perf_counter() - start
        w.commit()
        load = ck.load_seconds
    peak = torch.cuda.max_memory_allocated(device) if cuda else 0
    return Result(plan.layers, len(plan.targets), seconds, load, peak)

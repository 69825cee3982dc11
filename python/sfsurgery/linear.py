"""SparseLinear: a projection whose weight is a 2:4 weight in PyTorch's
CUTLASS layout, as `sfsurgery prune --format ampere` stores it.

Its buffers are named as the checkpoint's tensors (packed, meta, shape,
bias), so a state dict loads into it as is. What runs, per token count m
(all tokens of the call):

- m = 1 … max_tokens, the token counts from 1 up to the table's first
  gap in its decode records (m ≤ 64): our decode kernel, reading packed +
  meta, output in the activation dtype with the bias added in the
  kernel. Records after a gap are not used: one bound keeps the forward
  free of a lookup that torch.compile would specialise on;
- any other m (prefill), by `prefill`:
  - "ours" (the default where the table has prefill records for the
    shape: launch documents planned on an H100 or H200): our prefill
    kernel (wgmma.sp) above 64 tokens, reading the same packed + meta,
    output in the activation dtype with the bias added in the kernel. One
    weight copy. Token counts from max_tokens + 1 up to 64 (above a gap
    in the decode records) take "decode".
  - "decode" (the default elsewhere): the weight decoded to dense by our
    kernel into a temporary of n·k elements, then torch's dense matmul.
    One weight copy (56% of dense), and prefill a little slower than
    dense: the decode reads 0.56 and writes 1.0 of the dense weight bytes
    per call.
  - "cusparselt": `torch._cslt_sparse_mm` on a second, cuSPARSELt-
    compressed copy made at `attach`: prefill faster than dense where
    cuSPARSELt wins, at 56% more weight memory (112% of dense in all).

Our kernels run through torch.ops.sfsurgery.linear where something must
see the op (torch.compile, torch.jit tracing, a dispatch mode) or where
the activation needs the op's checks or a copy; otherwise, in eager mode,
forward runs the weight's prepared launch itself (ops.bind, prepared.py):
the launch the op makes, without the dispatcher, its per-call argument
checks of the buffers (made at attach, and again when one changes) and
anything else in Python.
"""

import weakref
from typing import Optional, Sequence

import torch
from torch import nn

from . import ops
from .errors import CheckpointError, RecordError
from .records import MAX_TOKENS as DECODE_TOKENS
from .records import Table

PREFILL = ("ours", "decode", "cusparselt")

# What forward asks before it launches without the dispatcher (in eager
# mode a flag or a C call each): torch.compile tracing and torch.jit
# tracing, which must record the op; a Python dispatch mode (such as
# FakeTensorMode), which must see it; the profiler, which then records the
# launch under DIRECT. torch's private calls where it has them.
_compiling = torch.compiler.is_compiling
_tracing = getattr(torch._C, "_get_tracing_state", lambda: None)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_mode", lambda: 0)
_profiling = getattr(torch._C._autograd, "_profiler_enabled", lambda: False)
DIRECT = "sfsurgery::linear (direct)"


class SparseLinear(nn.Module):
    """y = x·Wᵀ + b with W n × k (out_features × in_features) stored as
    packed [n][k/2] and meta (int16 [n][k/16])."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, dtype=torch.bfloat16, device=None):
        super().__init__()
        n, k = out_features, in_features
        if n % 32 or k % 64 or n <= 0 or k <= 0:
            raise CheckpointError(f"SparseLinear: a {n}x{k} weight; the kernels need n % 32 == 0 and k % 64 == 0")
        if dtype not in (torch.bfloat16, torch.float16):
            raise CheckpointError(f"SparseLinear: {dtype}; the kernels take bfloat16 and float16")
        self.in_features, self.out_features = k, n
        # Buffers, not parameters: nothing here trains, and loaders keep a
        # buffer's dtype (transformers turns loaded float parameters into
        # ones that require grad).
        self.register_buffer("packed", torch.empty((n, k // 2), dtype=dtype, device=device))
        self.register_buffer("meta", torch.empty((n, k // 16), dtype=torch.int16, device=device))
        self.register_buffer("shape", torch.tensor([[n], [k]], dtype=torch.int64, device=device))
        self.register_buffer("bias", torch.empty((n,), dtype=dtype, device=device) if bias else None)
        self.table_id: Optional[int] = None
        self.max_tokens = 0
        self.prefill = "decode"
        self.cslt: Optional[torch.Tensor] = None
        # The weight's prepared launches (ops.bind) with the buffers and
        # addresses they were made for: (weak references to packed, meta
        # and bias (None for none), their addresses, the launches, device
        # ordinal, dtype, device). One tuple, replaced whole. Weak, so that
        # buffers replaced by .cpu(), .to() or load_state_dict(assign=True)
        # are freed, not kept on the GPU until the next forward.
        self._direct: Optional[tuple] = None

    def extra_repr(self) -> str:
        """The shape, dtype, kernels' token range and prefill path."""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"dtype={self.packed.dtype}, kernels={'up to m=%d' % self.max_tokens if self.table_id is not None else 'none'}, "
            f"prefill={self.prefill}"
        )

    def check_shape(self, where: str = "") -> None:
        """Refuses a loaded shape tensor that disagrees with the module."""
        got = [int(v) for v in self.shape.flatten().tolist()]
        if got != [self.out_features, self.in_features]:
            raise CheckpointError(f"{where or 'SparseLinear'}: shape tensor says {got}, the module is {self.out_features}x{self.in_features}")

    def attach(self, table: Table, prefill: Optional[str] = None) -> None:
        """Registers the launch records for this module's device and picks
        the prefill path (PREFILL; None: "ours" where the table has prefill
        records for this shape, else "decode"). Call after the weights are
        on the GPU."""
        n, k = self.out_features, self.in_features
        has_ours = bool(table.prefill.get((n, k)))
        if prefill is None:
            prefill = "ours" if has_ours else "decode"
        if prefill not in PREFILL:
            raise RecordError(f"prefill {prefill!r}: want one of {', '.join(PREFILL)}")
        if prefill == "ours" and not has_ours:
            raise RecordError(f"prefill 'ours': the launch records have no prefill records for {n}x{k} (plan them on an H100 or H200)")
        dt = {"bf16": torch.bfloat16, "f16": torch.float16}[table.dtype]
        if dt != self.packed.dtype:
            raise RecordError(f"launch records for {table.dtype}, the weight is {self.packed.dtype}")
        per_m = table.launches.get((n, k), {})
        self.table_id = ops.register(table, self.packed.device)
        # The decode kernels serve m = 1 … max_tokens: every m up to it has
        # a record (a policy may have ranges with gaps). Above the first
        # gap, up to DECODE_TOKENS, the prefill path's other forms serve
        # ("decode" for "ours", whose records start above DECODE_TOKENS).
        self.max_tokens = 0
        while self.max_tokens + 1 in per_m:
            self.max_tokens += 1
        self.prefill = prefill
        self.cslt = None
        if prefill == "cusparselt":
            self.cslt = torch._cslt_compress(ops.decode(self.packed, self.meta))
        self._direct = None
        self._bind()

    def _bind(self) -> tuple:
        """Checks the buffers as the op does (ops.bind) and keeps their
        prepared launches with what they were made for."""
        packed, meta, bias = self.packed, self.meta, self.bias
        weight = ops.bind(packed, meta, bias, self.table_id)
        d = (weakref.ref(packed), weakref.ref(meta), weakref.ref(bias) if bias is not None else None, packed.data_ptr(),
             meta.data_ptr(), bias.data_ptr() if bias is not None else 0, weight, packed.device.index, packed.dtype,
             packed.device)
        self._direct = d
        return d

    def __getstate__(self):
        """The module's state for copy and pickle, without the prepared
        launches (ctypes and a lock; the copy's buffers are elsewhere)."""
        state = self.__dict__.copy()
        state["_direct"] = None
        return state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y = x·Wᵀ + b: our decode kernel up to max_tokens tokens, our
        prefill kernel above DECODE_TOKENS where the prefill path is
        "ours", else the weight decoded to dense (or cuSPARSELt's copy).
        Our kernels run by the prepared launch in eager mode for a plain
        contiguous activation of the weight's dtype on its device, 16-byte
        aligned; otherwise through torch.ops.sfsurgery.linear (module
        doc)."""
        m = x.numel() // max(x.shape[-1], 1) if x.dim() else 0
        if self.table_id is not None and (0 < m <= self.max_tokens or m > DECODE_TOKENS and self.prefill == "ours"):
            # A forward autograd records runs the op, whose output carries
            # what autograd says of a backward through it.
            recorded = x.requires_grad and torch.is_grad_enabled()
            if not recorded and not _compiling() and _tracing() is None and not _dispatch_modes():
                if _profiling():
                    with torch.profiler.record_function(DIRECT):
                        y = self._launch(x, m)
                else:
                    y = self._launch(x, m)
                if y is not None:
                    return y
            return ops.linear(x, self.packed, self.meta, self.bias, self.table_id)
        if self.cslt is not None:
            # cuSPARSELt takes the dense operand's rows in multiples of 8,
            # as torch's own semi-structured linear pads them.
            x2 = x.reshape(-1, self.in_features)
            pad = -x2.shape[0] % 8
            if pad:
                x2 = nn.functional.pad(x2, (0, 0, 0, pad))
            y = torch._cslt_sparse_mm(self.cslt, x2.t(), bias=self.bias, transpose_result=True)
            return y[: x2.shape[0] - pad].reshape(*x.shape[:-1], self.out_features)
        return nn.functional.linear(x, ops.decode(self.packed, self.meta), self.bias)

    def _launch(self, x: torch.Tensor, m: int) -> Optional[torch.Tensor]:
        """Runs the prepared launch for x (m tokens) and returns y, or
        returns None where x is not one it takes as it is (the op then
        checks x, and refuses it or copies it). forward calls it only
        where autograd does not record the call."""
        if type(x) is not torch.Tensor:
            return None
        d = self._direct
        if d is None:  # a copy (__getstate__)
            d = self._bind()
        rp, rm, rb, pp, mp, bp, weight, ordinal, dtype, _ = d
        b = self._buffers
        packed, meta, bias = b["packed"], b["meta"], b["bias"]
        if (packed is not rp() or meta is not rm() or bias is not (rb() if rb is not None else None)
                or packed.data_ptr() != pp or meta.data_ptr() != mp or (bias is not None and bias.data_ptr() != bp)):
            _, _, _, pp, mp, bp, weight, ordinal, dtype, _ = self._bind()
        if x.dtype is not dtype or x.get_device() != ordinal or not x.is_contiguous():
            return None
        shape = x.shape
        xp = x.data_ptr()
        if shape[-1] != weight.k or xp % 16:
            return None
        y = x.new_empty(shape[:-1] + (weight.n,))  # x's dtype and device (checked above): fewer arguments to parse
        weight.launcher(m)(y.data_ptr(), xp, m, ops.stream(ordinal))
        return y

    @classmethod
    def stack(cls, parts: Sequence["SparseLinear"]) -> "SparseLinear":
        """Returns one module whose weight is the parts' stacked along n, in
        order (q, k, v or gate, up), with the parts' biases stacked. The
        meta of the stacked weight interleaves the parts': its stored words
        are [k/32][n] as int32 (docs/formats.md §1.5)."""
        k = parts[0].in_features
        dt = parts[0].packed.dtype
        if any(p.in_features != k or p.packed.dtype != dt or (p.bias is None) != (parts[0].bias is None) for p in parts):
            raise CheckpointError("SparseLinear.stack: parts differ in in_features, dtype or bias")
        n = sum(p.out_features for p in parts)
        out = cls(k, n, bias=parts[0].bias is not None, dtype=dt, device=parts[0].packed.device)
        with torch.no_grad():
            out.packed.copy_(torch.cat([p.packed for p in parts], dim=0))
            words = [p.meta.contiguous().view(-1).view(torch.int32).view(k // 32, p.out_features) for p in parts]
            out.meta.copy_(torch.cat(words, dim=1).contiguous().view(torch.int16).view(n, k // 16))
            if out.bias is not None:
                out.bias.copy_(torch.cat([p.bias for p in parts]))
        return out


class SparseMLP(nn.Module):
    """A LLaMA-family MLP, down(act(gate(x)) · up(x)), with gate and up
    stacked into one SparseLinear (one launch instead of two)."""

    def __init__(self, gate_up: SparseLinear, down_proj: nn.Module, act_fn: nn.Module):
        super().__init__()
        self.gate_up = gate_up
        self.down_proj = down_proj
        self.act_fn = act_fn
        self.intermediate = gate_up.out_features // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """down(act(gate(x)) · up(x)) with one product for gate and up."""
        gu = self.gate_up(x)
        g, u = gu.split(self.intermediate, dim=-1)
        return self.down_proj(self.act_fn(g) * u)


class Columns(nn.Module):
    """Takes columns [start, end) of its input's last dimension: what the
    q, k and v projections of an attention whose qkv is stacked return
    from the stacked product (serve.stack_attention)."""

    def __init__(self, start: int, end: int):
        super().__init__()
        self.start, self.end = start, end

    def extra_repr(self) -> str:
        """The columns taken."""
        return f"start={self.start}, end={self.end}"

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        """The columns [start, end) of the stacked product."""
        return qkv[..., self.start : self.end]

"""Turning a transformers model into one that runs our kernels.

`replace` swaps every pruned projection's nn.Linear for a SparseLinear
before the weights load (the checkpoint's packed, meta, shape and bias
tensors then load into its buffers by name); `finish` checks the loaded
shapes, stacks q, k, v and gate, up per layer, finds the launch records and
attaches them, once the weights are on the GPU. transformers' loader calls
both through the quantizer (hf.py); `load` is from_pretrained with the
quantizer registered.
"""

import json
import os
import types
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch import nn

from . import driver, layout, records
from .discover import ENV_LAUNCHES, find_table
from .errors import CheckpointError, DeviceError, RecordError
from .linear import Columns, SparseLinear, SparseMLP

ENV_PREFILL = "SFSURGERY_PREFILL"

# The model types whose attention and MLP forwards the stacking is written
# for (transformers 5.x): the attention uses its hidden states only for
# their shape and the q, k, v projections; the MLP is
# down(act(gate(x)) · up(x)).
STACKED_FAMILIES = ("llama", "mistral", "qwen2")

_TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def check_gpu(ordinal: Optional[int] = None) -> torch.device:
    """Returns the CUDA device to serve on, or raises DeviceError saying why
    there is none."""
    if not torch.cuda.is_available():
        raise DeviceError("no CUDA GPU: sfsurgery's kernels run on NVIDIA GPUs of compute capability 8.0 or newer")
    i = torch.cuda.current_device() if ordinal is None else ordinal
    major, minor = torch.cuda.get_device_capability(i)
    if major < 8:
        raise DeviceError(f"{torch.cuda.get_device_name(i)} is sm_{major}{minor}; the 2:4 kernels need sm_80 or newer")
    return torch.device("cuda", i)


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def replace(model: nn.Module, modules: Sequence[layout.SparseModule]) -> None:
    """Replaces each named nn.Linear of model by a SparseLinear of the same
    shape, on the device the Linear's weight is on (meta while loading)."""
    for sm in modules:
        try:
            lin = model.get_submodule(sm.name)
        except AttributeError:
            raise CheckpointError(f"{sm.name}: no such module in {type(model).__name__}") from None
        if not isinstance(lin, nn.Linear):
            raise CheckpointError(f"{sm.name}: a {type(lin).__name__}, not an nn.Linear")
        if (lin.out_features, lin.in_features) != (sm.n, sm.k):
            raise CheckpointError(
                f"{sm.name}: the checkpoint's weight is {sm.n}x{sm.k}, the model's {lin.out_features}x{lin.in_features}"
            )
        if (lin.bias is not None) != (sm.bias is not None):
            raise CheckpointError(f"{sm.name}: bias in the model {lin.bias is not None}, in the checkpoint {sm.bias is not None}")
        _set_module(model, sm.name, SparseLinear(sm.k, sm.n, bias=sm.bias is not None, dtype=_TORCH_DTYPES[sm.dtype], device=lin.weight.device))


def stack_mlps(model: nn.Module) -> List[str]:
    """Replaces every MLP whose gate_proj and up_proj are SparseLinears with
    one input size by a SparseMLP (gate and up stacked), and returns the
    names of the MLPs stacked."""
    done = []
    for name, mod in list(model.named_modules()):
        g, u, d = (getattr(mod, a, None) for a in ("gate_proj", "up_proj", "down_proj"))
        if not (isinstance(g, SparseLinear) and isinstance(u, SparseLinear) and d is not None and hasattr(mod, "act_fn")):
            continue
        if g.in_features != u.in_features or g.out_features != u.out_features or (g.bias is None) != (u.bias is None):
            continue
        _set_module(model, name, SparseMLP(SparseLinear.stack([g, u]), d, mod.act_fn))
        done.append(name)
    return done


def _qkv_forward(self, *args, **kwargs):
    """An attention's forward with q, k and v stacked: the class's own
    forward, given the stacked product in place of the hidden states, which
    its q_proj, k_proj and v_proj (Columns) take apart. The hidden states
    are used for nothing else there (LlamaAttention, MistralAttention,
    Qwen2Attention: their shape, and the three projections)."""
    if "hidden_states" in kwargs:
        kwargs["hidden_states"] = self.qkv(kwargs["hidden_states"])
    else:
        args = (self.qkv(args[0]),) + args[1:]
    return type(self).forward(self, *args, **kwargs)


def stack_attention(model: nn.Module) -> List[str]:
    """Stacks q, k and v of every attention whose three projections are
    SparseLinears with one input size into one SparseLinear (qkv); the
    attention's forward multiplies once and q_proj, k_proj and v_proj
    become Columns of the product. Returns the attentions stacked."""
    done = []
    for name, mod in list(model.named_modules()):
        parts = [getattr(mod, a, None) for a in ("q_proj", "k_proj", "v_proj")]
        if not all(isinstance(p, SparseLinear) for p in parts):
            continue
        if len({(p.in_features, p.packed.dtype, p.bias is None) for p in parts}) != 1:
            continue
        mod.qkv = SparseLinear.stack(parts)
        start = 0
        for attr, p in zip(("q_proj", "k_proj", "v_proj"), parts):
            setattr(mod, attr, Columns(start, start + p.out_features))
            start += p.out_features
        mod.forward = types.MethodType(_qkv_forward, mod)
        done.append(name)
    return done


def sparse_linears(model: nn.Module) -> Dict[str, SparseLinear]:
    """Returns the model's SparseLinears by name."""
    return {n: m for n, m in model.named_modules() if isinstance(m, SparseLinear)}


def shapes(model: nn.Module) -> List[Tuple[int, int]]:
    """Returns the distinct (n, k) the model's SparseLinears multiply."""
    return sorted({(m.out_features, m.in_features) for m in sparse_linears(model).values()})


def finish(model: nn.Module, path: str, launches: Optional[str] = None, prefill: Optional[str] = None, stack: bool = True) -> records.Table:
    """After the weights load: checks every SparseLinear's shape tensor,
    stacks q, k, v and gate, up in the STACKED_FAMILIES (as `sfsurgery
    plan --fuse` plans and `bench --fuse` measures), and attaches the
    launch records to every SparseLinear: the Go planner's, for the
    choices of the source launches names (discover.find_table: "plan",
    the default, "checkpoint" or a file; default $SFSURGERY_LAUNCHES),
    with the prefill path (SparseLinear; default $SFSURGERY_PREFILL, else
    each module's own default: "ours" where the records have prefill
    records, "decode" elsewhere). The model must be on the GPU."""
    prefill = prefill or os.environ.get(ENV_PREFILL) or None
    linears = sparse_linears(model)
    if not linears:
        raise CheckpointError(f"{path}: no pruned projection in the model")
    for name, lin in linears.items():
        lin.check_shape(name)
        if lin.packed.device.type != "cuda":
            raise DeviceError(f"{name} is on {lin.packed.device}; the sparse kernels run on a CUDA GPU")
    check_gpu(next(iter(linears.values())).packed.device.index)
    if stack and getattr(getattr(model, "config", None), "model_type", None) in STACKED_FAMILIES:
        stack_attention(model)
        stack_mlps(model)
    dtypes = {lin.packed.dtype for lin in sparse_linears(model).values()}
    if len(dtypes) != 1:
        raise CheckpointError(f"{path}: pruned projections of several dtypes {sorted(map(str, dtypes))}")
    dt = {v: k for k, v in _TORCH_DTYPES.items()}[dtypes.pop()]
    ordinal = next(iter(linears.values())).packed.device.index or 0
    # The planner plans for this GPU's limits, read here, rather than
    # opening the GPU in another process (from_pretrained's time).
    limits = json.dumps(driver.kernels(ordinal).limits())
    table = find_table(path, shapes(model), dt, launches, ordinal, limits=limits, gpu_name=torch.cuda.get_device_name(ordinal))
    for lin in sparse_linears(model).values():
        lin.attach(table, prefill)
    return table


def load(path: str, device: Optional[int] = None, launches: Optional[str] = None, prefill: Optional[str] = None, **kwargs):
    """Loads an `sfsurgery prune --format ampere` output as a transformers
    causal LM on the GPU: AutoModelForCausalLM.from_pretrained with
    sfsurgery's quantizer registered and the device mapped, launches
    ("plan", "checkpoint" or a launch file: where the planner's choices
    come from, discover.find_table) and prefill standing in for
    $SFSURGERY_LAUNCHES and $SFSURGERY_PREFILL during the call. kwargs go
    to from_pretrained."""
    from transformers import AutoModelForCausalLM

    from . import hf

    hf.register()
    dev = check_gpu(device)
    layout.sparse_config(layout.read_config(path), os.path.join(path, "config.json"))
    saved = {k: os.environ.get(k) for k in (ENV_LAUNCHES, ENV_PREFILL)}
    try:
        for k, v in ((ENV_LAUNCHES, launches), (ENV_PREFILL, prefill)):
            if v is not None:
                os.environ[k] = v
        return AutoModelForCausalLM.from_pretrained(path, device_map=str(dev), **kwargs)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

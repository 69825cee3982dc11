"""A plain reference of Wanda, RIA and SparseGPT 2:4, written to be read
beside the papers and their reference code, not to be fast.

It follows the reference repositories' structure: the whole model on one
GPU; the first decoder layer's inputs caught by a module that stands in
for it; then for each layer in order, forward hooks on every nn.Linear of
the layer (each its own statistics, one sample at a time), one pass over
the samples, every target pruned, a second pass through the pruned layer
for the next layer's inputs.

- Wanda (locuslab/wanda lib/prune.py prune_wanda, lib/layerwrapper.py):
  scaler_row is the running mean over samples of ‖x_j‖² summed over a
  sample's tokens; W_metric = |W| · sqrt(scaler_row); in each group of 4
  columns the 2 lowest are pruned.
- RIA (Relative-importance-and-activation-pruning lib/prune.py prune_ria):
  W_metric = (|W| / Σ_dim0 |W| + |W| / Σ_dim1 |W|) · sqrt(scaler_row)^a,
  a = 0.5.
- SparseGPT (IST-DASLab/sparsegpt sparsegpt.py): H is the running 2XᵀX/n
  over samples; fasterprune with prunen=2, prunem=4, blocksize=128,
  percdamp=0.01.

Two choices of ours, shared with sfsurgery.calibrate: the pruned pair of a
group is the 2 lowest scores with ties to the higher index (the kept pair
is the 2 highest, ties to the lower index), where the reference code uses
torch.topk, whose order among ties is unspecified; and the metrics are
computed in float32 (the reference code mixes in the weight's dtype).

The method functions are pure torch on any device (the CPU tests use them
in float64); `calibrate` runs a transformers causal LM (or anything with
its model.layers structure, as the CPU tests' toy model).
"""

import math
from typing import Dict, List, Optional, Sequence

import torch
from torch import nn

PRUNE_N, PRUNE_M = 2, 4


def pruned_in_group(tmp: torch.Tensor) -> torch.Tensor:
    """The column indices (within the group) of the 2 weights to prune in
    each row of tmp [rows, 4]: the 2 lowest scores, ties to the higher
    index. A stable descending sort keeps equal scores in index order, so
    its last 2 are those."""
    order = torch.sort(tmp, dim=1, descending=True, stable=True).indices
    return order[:, PRUNE_M - PRUNE_N :]


def nm_mask(w_metric: torch.Tensor) -> torch.Tensor:
    """W_mask (True = pruned) of a metric [n, k], as the reference repos
    build it: one group of 4 columns at a time."""
    w_mask = torch.zeros_like(w_metric, dtype=torch.bool)
    for ii in range(w_metric.shape[1]):
        if ii % PRUNE_M == 0:
            tmp = w_metric[:, ii : ii + PRUNE_M]
            w_mask.scatter_(1, ii + pruned_in_group(tmp), True)
    return w_mask


def wanda_mask(w: torch.Tensor, scaler_row: torch.Tensor) -> torch.Tensor:
    """Wanda's W_mask (True = pruned)."""
    w = w.to(scaler_row.dtype)
    w_metric = torch.abs(w) * torch.sqrt(scaler_row.reshape((1, -1)))
    return nm_mask(w_metric)


def ria_mask(w: torch.Tensor, scaler_row: torch.Tensor, a: float = 0.5) -> torch.Tensor:
    """RIA's W_mask (True = pruned)."""
    w = w.to(scaler_row.dtype)
    w_metric = (torch.abs(w) / torch.sum(torch.abs(w), dim=0) + torch.abs(w) / torch.sum(torch.abs(w), dim=1).reshape(-1, 1)) * (
        torch.sqrt(scaler_row.reshape((1, -1)))
    ) ** a
    return nm_mask(w_metric)


def fasterprune(w: torch.Tensor, h: torch.Tensor, blocksize: int = 128, percdamp: float = 0.01):
    """SparseGPT's fasterprune with prunen=2, prunem=4 on a copy of w [rows,
    columns] with the Hessian h (not modified). Returns the pruned and
    updated weight in h's dtype and W_mask (True = pruned)."""
    W = w.clone().to(h.dtype)
    H = h.clone()
    rows, columns = W.shape
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0

    damp = percdamp * torch.mean(torch.diag(H))
    diag = torch.arange(columns, device=W.device)
    H[diag, diag] += damp
    H = torch.linalg.cholesky(H)
    H = torch.cholesky_inverse(H)
    H = torch.linalg.cholesky(H, upper=True)
    Hinv = H

    mask = torch.zeros_like(W, dtype=torch.bool)
    for i1 in range(0, columns, blocksize):
        i2 = min(i1 + blocksize, columns)
        count = i2 - i1

        W1 = W[:, i1:i2].clone()
        Q1 = torch.zeros_like(W1)
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        mask1 = torch.zeros_like(W1, dtype=torch.bool)

        for i in range(count):
            w_col = W1[:, i]
            d = Hinv1[i, i]

            if i % PRUNE_M == 0:
                tmp = W1[:, i : (i + PRUNE_M)] ** 2 / (torch.diag(Hinv1)[i : (i + PRUNE_M)].reshape((1, -1))) ** 2
                mask1.scatter_(1, i + pruned_in_group(tmp), True)

            q = w_col.clone()
            q[mask1[:, i]] = 0
            Q1[:, i] = q

            err1 = (w_col - q) / d
            W1[:, i:] -= err1.unsqueeze(1).matmul(Hinv1[i, i:].unsqueeze(0))
            Err1[:, i] = err1

        W[:, i1:i2] = Q1
        mask[:, i1:i2] = mask1
        W[:, i2:] -= Err1.matmul(Hinv[i1:i2, i2:])
    return W, mask


class Wrapped:
    """One linear layer's statistics, gathered one sample at a time as the
    reference layer wrappers do: scaler_row (Wanda, RIA) and H
    (SparseGPT), both running means over the samples seen, in float32
    (float64 for a float64 layer, as in the CPU tests)."""

    def __init__(self, layer: nn.Linear, hessian: bool):
        self.layer = layer
        columns = layer.weight.shape[1]
        dev = layer.weight.device
        self.dtype = torch.float64 if layer.weight.dtype == torch.float64 else torch.float32
        self.scaler_row = torch.zeros((columns,), device=dev, dtype=self.dtype)
        self.H = torch.zeros((columns, columns), device=dev, dtype=self.dtype) if hessian else None
        self.nsamples = 0

    def add_batch(self, inp: torch.Tensor) -> None:
        if len(inp.shape) == 2:
            inp = inp.unsqueeze(0)
        tmp = inp.shape[0]
        inp = inp.reshape((-1, inp.shape[-1])).t().type(self.dtype)
        self.scaler_row *= self.nsamples / (self.nsamples + tmp)
        if self.H is not None:
            self.H *= self.nsamples / (self.nsamples + tmp)
        self.nsamples += tmp
        self.scaler_row += torch.norm(inp, p=2, dim=1) ** 2 / self.nsamples
        if self.H is not None:
            x = math.sqrt(2 / self.nsamples) * inp
            self.H += x.matmul(x.t())


def _linears(module: nn.Module) -> Dict[str, nn.Linear]:
    return {name: m for name, m in module.named_modules() if isinstance(m, nn.Linear)}


class _Caught(Exception):
    pass


class _Catcher(nn.Module):
    """Stands in for the first decoder layer: records its inputs and the
    keyword arguments the model passes, then stops the forward."""

    def __init__(self, module: nn.Module, inps: List[torch.Tensor], cache: dict):
        super().__init__()
        self.module = module
        self.inps = inps
        self.cache = cache
        if hasattr(module, "attention_type"):
            self.attention_type = module.attention_type

    def forward(self, hidden_states, *args, **kwargs):
        self.inps.append(hidden_states[0].detach().clone())
        self.cache.update(kwargs)
        raise _Caught


def _layer_out(out):
    return out[0] if isinstance(out, tuple) else out


@torch.no_grad()
def calibrate(model: nn.Module, ids: torch.Tensor, method: str, targets: Optional[Sequence[str]] = None) -> Dict[str, dict]:
    """Prunes model (a transformers causal LM on one GPU) in place with
    method, calibrated on ids [samples, seqlen]. targets names the weights
    to prune ("model.layers.0.self_attn.q_proj.weight", ...); default every
    nn.Linear of the decoder layers. Returns, per target weight name,
    {"keep": bool mask on the CPU, "weight": the pruned weight on the CPU}."""
    if method not in ("wanda", "ria", "sparsegpt"):
        raise ValueError(method)
    model.config.use_cache = False
    layers = model.model.layers
    dev = next(model.parameters()).device

    inps: List[torch.Tensor] = []
    cache: dict = {}
    layers[0] = _Catcher(layers[0], inps, cache)
    for j in range(ids.shape[0]):
        try:
            model(ids[j : j + 1].to(dev), use_cache=False)
        except _Caught:
            pass
    layers[0] = layers[0].module
    kwargs = {k: v for k, v in cache.items() if k not in ("past_key_values", "past_key_value", "use_cache")}
    kwargs["use_cache"] = False
    outs: List[Optional[torch.Tensor]] = [None] * len(inps)

    decisions: Dict[str, dict] = {}
    for i in range(len(layers)):
        layer = layers[i]
        subset = _linears(layer)
        prefix = f"model.layers.{i}."
        if targets is not None:
            subset = {n: m for n, m in subset.items() if prefix + n + ".weight" in targets}
        wrapped = {name: Wrapped(subset[name], method == "sparsegpt") for name in subset}

        def add_batch(name):
            def tmp(_, inp, out):
                wrapped[name].add_batch(inp[0].data)

            return tmp

        handles = [subset[name].register_forward_hook(add_batch(name)) for name in wrapped]
        for j in range(len(inps)):
            outs[j] = _layer_out(layer(inps[j].unsqueeze(0), **kwargs))[0]
        for h in handles:
            h.remove()

        for name in subset:
            w = subset[name].weight.data
            if method == "sparsegpt":
                new, w_mask = fasterprune(w, wrapped[name].H)
                subset[name].weight.data = new.to(w.dtype)
            else:
                pick = wanda_mask if method == "wanda" else ria_mask
                w_mask = pick(w, wrapped[name].scaler_row)
                subset[name].weight.data[w_mask] = 0
            decisions[prefix + name + ".weight"] = {"keep": (~w_mask).cpu(), "weight": subset[name].weight.data.cpu()}
        del wrapped

        for j in range(len(inps)):
            outs[j] = _layer_out(layer(inps[j].unsqueeze(0), **kwargs))[0]
        inps, outs = outs, inps
    return decisions

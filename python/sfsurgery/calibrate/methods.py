"""Wanda, RIA and SparseGPT on one linear layer, as their reference code
computes them, with the 2:4 pattern along the input dimension.

Every method scores the weights of a group of 4 consecutive input columns
of one output row and keeps the 2 with the highest scores; ties go to the
lower column (keep_2_of_4). Statistics come from the layer's inputs X
(tokens × k):

- Wanda (locuslab/wanda): S_ij = |W_ij| · ‖X_j‖₂.
- RIA (biomedical-cybernetics/Relative-importance-and-activation-pruning):
  S_ij = (|W_ij| / Σ_i |W_ij| + |W_ij| / Σ_j |W_ij|) · ‖X_j‖₂^0.5; a sum of
  zero (a row or column of zeros) contributes 0 instead of 0/0.
- SparseGPT (IST-DASLab/sparsegpt, fasterprune): the OBS update with
  H = 2XᵀX/n, dead inputs (H_jj = 0) zeroed, 1% of mean(diag H) added to
  the diagonal, the upper Cholesky factor U of H⁻¹, columns in blocks of
  128; at each group of 4 columns the 2 with the smallest w²/U_jj² are
  pruned, and each column's error (w − q)/U_jj is propagated to the later
  columns through U's row.

Pure torch on whatever device the tensors are on; arithmetic in float32
(float64 when given float64, as the tests do). tests/test_calibrate_methods.py
checks each against the plain reference in tests/reference_calibration.py
and against loop-by-loop definitions.
"""

from typing import Tuple

import torch
from torch import Tensor

from .errors import CalibrationError
from .plan import METHOD_PARAMS

GROUP = 4
KEEP = 2
RIA_ALPHA = METHOD_PARAMS["ria"]["alpha"]
SPARSEGPT_DAMPENING = METHOD_PARAMS["sparsegpt"]["dampening"]
SPARSEGPT_BLOCK = METHOD_PARAMS["sparsegpt"]["block"]

# keep_2_of_4 works on at most this many scores at a time (its temporaries
# are 12 bytes per score).
_CHUNK = 1 << 24


def _float(t: Tensor) -> Tensor:
    """t in float32, or float64 when it already is."""
    return t if t.dtype == torch.float64 else t.float()


def _lower(device: torch.device) -> Tensor:
    """[j, l] = l < j over one group."""
    idx = torch.arange(GROUP, device=device)
    return idx.unsqueeze(0) < idx.unsqueeze(1)


def _keep_ranked(s: Tensor, lower: Tensor) -> Tensor:
    """s [..., 4] without NaN → bool [..., 4]: element j is kept when fewer
    than 2 others beat it; l beats j when s_l > s_j, or s_l == s_j and
    l < j. That order is total, so exactly 2 of every 4 are kept."""
    mine = s.unsqueeze(-1)  # [..., j, 1]
    other = s.unsqueeze(-2)  # [..., 1, l]
    beats = (other > mine) | ((other == mine) & lower)
    return beats.sum(dim=-1) < KEEP


def _keep_groups(s: Tensor) -> Tensor:
    """_keep_ranked with NaN counted as -inf."""
    s = torch.where(torch.isnan(s), torch.full_like(s, float("-inf")), s)
    return _keep_ranked(s, _lower(s.device))


def keep_2_of_4(scores: Tensor) -> Tensor:
    """Returns a bool tensor shaped like scores [..., k] (k % 4 == 0): in
    each group of 4 consecutive elements along the last dimension, True for
    the 2 highest scores, ties to the lower index, NaN below every number."""
    k = scores.shape[-1]
    if k % GROUP:
        raise ValueError(f"scores of {k} columns: want a multiple of {GROUP}")
    s = scores.reshape(-1, k // GROUP, GROUP)
    out = torch.empty(s.shape, dtype=torch.bool, device=s.device)
    rows = max(1, _CHUNK // max(k, 1))
    for r in range(0, s.shape[0], rows):
        out[r : r + rows] = _keep_groups(s[r : r + rows])
    return out.reshape(scores.shape)


def wanda_scores(weight: Tensor, sumsq: Tensor) -> Tensor:
    """|W_ij| · ‖X_j‖₂ for W [n, k] and sumsq [k] = Σ_tokens x_j²."""
    return weight.abs().to(_float(sumsq).dtype) * _float(sumsq).sqrt().unsqueeze(0)


def _share(a: Tensor, total: Tensor) -> Tensor:
    """a / total, 0 where total is 0."""
    return torch.where(total > 0, a / torch.where(total > 0, total, torch.ones_like(total)), torch.zeros_like(a))


def ria_scores(weight: Tensor, sumsq: Tensor, alpha: float = RIA_ALPHA) -> Tensor:
    """(|W_ij| / Σ_i |W_ij| + |W_ij| / Σ_j |W_ij|) · ‖X_j‖₂^alpha for W
    [n, k] and sumsq [k] = Σ_tokens x_j²."""
    a = weight.abs().to(_float(sumsq).dtype)
    rel = _share(a, a.sum(dim=0, keepdim=True))  # Σ_i: over the rows, per input column
    rel += _share(a, a.sum(dim=1, keepdim=True))  # Σ_j: over the columns, per output row
    return rel.mul_(_float(sumsq).sqrt().pow(alpha).unsqueeze(0))


def wanda(weight: Tensor, sumsq: Tensor) -> Tensor:
    """Wanda's 2:4 keep mask of weight [n, k]."""
    return keep_2_of_4(wanda_scores(weight, sumsq))


def ria(weight: Tensor, sumsq: Tensor, alpha: float = RIA_ALPHA) -> Tensor:
    """RIA's 2:4 keep mask of weight [n, k]."""
    return keep_2_of_4(ria_scores(weight, sumsq, alpha))


def inverse_factor(hessian: Tensor, weight: Tensor, dampening: float = SPARSEGPT_DAMPENING, where: str = "") -> Tensor:
    """SparseGPT's preparation, in place on hessian [k, k] (float) and
    weight [n, k] (float): dead inputs (H_jj = 0) get H_jj = 1 and W[:, j] =
    0, the diagonal gains dampening · mean(diag H), and the upper Cholesky
    factor of H⁻¹ is returned. Raises CalibrationError naming where when H
    is not positive definite."""
    diag = hessian.diagonal()
    dead = diag == 0
    diag[dead] = 1
    weight[:, dead] = 0
    diag += dampening * diag.mean()
    lower, info = torch.linalg.cholesky_ex(hessian)
    if int(info) != 0:
        raise CalibrationError(f"{where}: the Hessian is not positive definite after {dampening:g} dampening (Cholesky failed at column {int(info) - 1})")
    inv = torch.cholesky_inverse(lower)
    del lower
    upper, info = torch.linalg.cholesky_ex(inv, upper=True)
    if int(info) != 0:
        raise CalibrationError(f"{where}: the inverse Hessian is not positive definite (Cholesky failed at column {int(info) - 1})")
    return upper


def sparsegpt(weight: Tensor, hessian: Tensor, block: int = SPARSEGPT_BLOCK, dampening: float = SPARSEGPT_DAMPENING,
              overwrite: bool = False, where: str = "") -> Tuple[Tensor, Tensor]:
    """SparseGPT 2:4 on weight [n, k] with the layer Hessian [k, k]
    (2XᵀX/n; any positive scale gives the same result). Returns the updated
    weight (float32, or float64 for float64 input; pruned elements exactly
    0) and the keep mask. The rows are independent, so weights that share an
    input may be stacked along n and pruned in one call. With overwrite,
    weight and hessian (already float) are used as scratch space.

    The column loop is the reference's, with one change of order that
    leaves the arithmetic the same: within a block, a group's 4 columns
    receive the earlier groups' errors in one product just before the
    group is decided, instead of after every column."""
    n, k = weight.shape
    if k % GROUP or block % GROUP:
        raise ValueError(f"{where}: {k} columns, blocks of {block}: want multiples of {GROUP}")
    ft = torch.float64 if hessian.dtype == torch.float64 else torch.float32
    w = weight.to(ft)
    if w is weight and not overwrite:
        w = w.clone()
    h = hessian.to(ft)
    if h is hessian and not overwrite:
        h = h.clone()
    u = inverse_factor(h, w, dampening, where)
    del h
    lower = _lower(w.device)
    keep = torch.empty((n, k), dtype=torch.bool, device=w.device)
    for i1 in range(0, k, block):
        i2 = min(i1 + block, k)
        w1 = w[:, i1:i2]  # a view: the block is updated in place
        u1 = u[i1:i2, i1:i2]
        d = u1.diagonal()
        d2 = d.square()
        rd = d.reciprocal()
        err = torch.zeros((n, i2 - i1), dtype=ft, device=w.device)
        for g in range(0, i2 - i1, GROUP):
            cols = w1[:, g : g + GROUP]
            if g:
                cols.addmm_(err[:, :g], u1[:g, g : g + GROUP], alpha=-1)
            # The scores w²/U_jj² are finite while w is (the result is
            # checked below), so the ranking needs no NaN handling.
            kg = _keep_ranked(cols.square().div_(d2[g : g + GROUP]), lower)
            keep[:, i1 + g : i1 + g + GROUP] = kg
            # A pruned column's error is w / U_jj (q = 0), a kept one's is 0.
            scale = torch.mul(kg.logical_not(), rd[g : g + GROUP])
            for j in range(GROUP):
                e = torch.mul(cols[:, j], scale[:, j], out=err[:, g + j])
                if j + 1 < GROUP:
                    cols[:, j + 1 :].addcmul_(e.unsqueeze(1), u1[g + j, g + j + 1 : g + GROUP].unsqueeze(0), value=-1)
            cols.mul_(kg)
        if i2 < k:
            w[:, i2:].addmm_(err, u[i1:i2, i2:], alpha=-1)
    if not bool(torch.isfinite(w).all()):
        raise CalibrationError(f"{where}: the SparseGPT update is not finite")
    return w, keep

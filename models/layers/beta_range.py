"""The beta-range intervention every delta-rule mixer shares: beta = lo + (hi - lo) * sigmoid(logit).

[lo, hi] is [0, 1] by default and [0, 2] with allow_neg_eigval (fla: 2 * sigmoid), per head, or per
head and Householder factor for a DeltaProduct (`factor_axis`). The range lives in the buffers
beta_lo / beta_hi ([H], or [H, n_h]): they follow .to(device) but stay out of state_dict (fla has
no such tensors), so weights move freely between models whatever their ranges.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Union

import torch

from deltalens.core.errors import DeltalensError

__all__ = ["BetaRangeMixin", "Index"]

Index = Union[int, Sequence[int], None]  # a head or factor, a list of them, or None for all


class BetaRangeMixin:
    """set_beta_range / reset_beta_range for an nn.Module mixer with `num_heads` heads of the recurrence
    (and `n_factors` factors per token where `factor_axis`); its __init__ calls `_init_beta_range`."""

    factor_axis = False  # one range per head and factor (DeltaProduct) or per head

    # what the nn.Module mixer provides, and the buffers _init_beta_range registers (for the type checker)
    num_heads: int
    n_factors: int
    beta_lo: torch.Tensor
    beta_hi: torch.Tensor
    register_buffer: Callable[..., None]

    def _init_beta_range(self, allow_neg_eigval: bool) -> None:
        self.default_beta_hi = 2.0 if allow_neg_eigval else 1.0
        shape = (self.num_heads, self.n_factors) if self.factor_axis else (self.num_heads,)
        self.register_buffer("beta_lo", torch.zeros(shape), persistent=False)
        self.register_buffer("beta_hi", torch.full(shape, self.default_beta_hi), persistent=False)

    def _heads(self, head: Index):
        """`head` as an index into the head axis (a slice for None), refused when out of range."""
        if head is None:
            return slice(None)
        heads = torch.as_tensor(head, dtype=torch.long).reshape(-1)
        if heads.min() < 0 or heads.max() >= self.num_heads:
            raise IndexError(f"head {head} is out of range for a layer with {self.num_heads} heads.")
        return heads

    def set_beta_range(self, lo: float, hi: float, head: Index = None, factor: Index = None) -> None:
        """beta = lo + (hi - lo) * sigmoid(logit) for `head` and Householder `factor` (None = all)."""
        lo, hi = float(lo), float(hi)
        if not 0.0 <= lo <= hi <= 2.0:  # NaN fails too
            raise DeltalensError(
                f"a beta range needs 0 <= lo <= hi <= 2 (eigenvalues 1 - beta in [-1, 1]), got [{lo}, {hi}]"
            )
        heads = self._heads(head)
        if not self.factor_axis:
            if factor not in (None, 0):
                raise IndexError(f"factor {factor} is out of range: this layer applies one factor per token.")
            self.beta_lo[heads] = lo
            self.beta_hi[heads] = hi
            return
        factors: slice | torch.Tensor = slice(None)
        if factor is not None:
            factors = torch.as_tensor(factor, dtype=torch.long).reshape(-1)
            if factors.min() < 0 or factors.max() >= self.n_factors:
                raise IndexError(f"factor {factor} is out of range for {self.n_factors} factor(s) per token.")
        if isinstance(heads, torch.Tensor) and isinstance(factors, torch.Tensor):
            heads, factors = heads[:, None], factors[None, :]
        self.beta_lo[heads, factors] = lo
        self.beta_hi[heads, factors] = hi

    def _in_range(self, logit: torch.Tensor) -> torch.Tensor:
        """lo + (hi - lo) * sigmoid(logit), in fp32 at least whatever the matmuls' dtype (it drives the recurrence:
        models/ops/precision.py). logit (B, T, H[, n], ...): the range spreads over the axes after its own."""
        wide = torch.promote_types(logit.dtype, torch.float32)
        lo, hi = self.beta_lo.to(wide), self.beta_hi.to(wide)
        spread = (1,) * (logit.ndim - 2 - lo.ndim)  # e.g. RWKV-7's a (B, T, H, d_k) over a per-head range
        lo, hi = lo.view(*lo.shape, *spread), hi.view(*hi.shape, *spread)
        return lo + (hi - lo) * torch.sigmoid(logit.to(wide))

    def reset_beta_range(self) -> None:
        """Back to the config's range: [0, 2] with allow_neg_eigval, else [0, 1]."""
        self.beta_lo.fill_(0.0)
        self.beta_hi.fill_(self.default_beta_hi)

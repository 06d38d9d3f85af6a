"""One code path for numpy arrays and torch tensors: the belief filters' linear steps run on either.

torch is imported only when a tensor is given, so `deltalens belief` (numpy only) starts without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def is_numpy(x: Any) -> bool:
    return isinstance(x, np.ndarray)


def take(x: Any, index: np.ndarray, axis: int = 0) -> Any:
    """x[index] along axis 0 (gather), for numpy arrays and torch tensors alike."""
    if is_numpy(x):
        return x[index]
    import torch  # only when given tensors: `deltalens belief` runs on numpy without torch (~1.6 s)

    return x[torch.from_numpy(index).to(x.device)]


def like(x: Any, arr: np.ndarray) -> Any:
    """arr as an array of x's kind, dtype and device."""
    if is_numpy(x):
        return arr.astype(x.dtype)
    import torch  # only when given tensors: `deltalens belief` runs on numpy without torch (~1.6 s)

    return torch.from_numpy(np.ascontiguousarray(arr)).to(dtype=x.dtype, device=x.device)


def mass(x: Any) -> float:
    """||x||_1 of a non-negative belief, summed in float64 (so the sum itself never underflows)."""
    if is_numpy(x):
        return float(x.sum(dtype=np.float64))
    return float(x.double().sum())


def max_entry(x: Any) -> float:
    return float(x.max()) if is_numpy(x) else float(x.double().max())


def to_numpy(x: Any) -> np.ndarray:
    return x.astype(np.float64) if is_numpy(x) else x.detach().double().cpu().numpy()

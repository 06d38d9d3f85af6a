"""How big a capture will be, known before it runs, and how to stream it so that it fits.

A capture keeps, for every selected token (a row), every named activation in float32. At the sizes
people study (24 layers x 16 heads x a 128 x 128 state per token: 1 MiB of hook_state per layer and
token) keeping everything is impossible; keeping beta and one layer's states at the reveal tokens is
cheap. `plan_capture` measures the bytes one row takes under each hook name by a forward on one
token of the first trace (every architecture, every hook, no shape table to keep in step with the
models), multiplies by the rows the filters select, and then

* refuses, in one sentence with the estimate and the limit, when the kept result alone exceeds it;
* otherwise picks how many traces to run at once, so that one slice's working set (the full (b, T, ...)
  hook tensors of its traces, and its logits when asked for) fits beside the result: the capture
  streams over slices of the batch and keeps only the selected rows of each.

The limit: `max_bytes`, else $DELTALENS_MAX_CAPTURE_GB, else half the memory this process may still
allocate (core/memory.available_memory).
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformer_lens import HookedRootModule

from deltalens.core.errors import DeltalensError
from deltalens.core.memory import available_memory
from deltalens.models.io.footprint import gigabytes_from_env

__all__ = ["CAPTURE_LIMIT_ENV", "CapturePlan", "capture_limit", "plan_capture", "row_bytes", "query_axis_names"]

CAPTURE_LIMIT_ENV = "DELTALENS_MAX_CAPTURE_GB"
LABEL_BYTES = 9 * 8  # the nine int64 labels of a row (trace, position, token, kind, ...)
QUERY_AXIS = ("hook_pattern", "hook_attn_scores")  # (B, H, T_q, T_k): the row axis is dim 2, not 1


def query_axis_names(name: str) -> bool:
    """True for hooks laid out (batch, head, query_pos, key_pos) (attention patterns and scores)."""
    return name.endswith(QUERY_AXIS)


@dataclass(frozen=True)
class CapturePlan:
    rows: int  # tokens the filters keep
    row_bytes: dict[str, int]  # hook name -> float32 bytes one row takes (a pattern's row at the batch's T)
    result_bytes: int  # rows x (sum of row_bytes + labels + states [+ logits])
    slice_traces: int  # traces run at once
    limit: int  # bytes allowed

    @property
    def slices(self) -> int:
        return -(-self.n_traces // self.slice_traces) if self.n_traces else 0

    n_traces: int = 0


def capture_limit(max_bytes: int | None = None) -> tuple[int, str]:
    """The byte limit of a capture and where it comes from."""
    if max_bytes is not None:
        bad = isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, float))
        if bad or not math.isfinite(max_bytes) or max_bytes <= 0:  # inf is no limit: int(inf) would overflow
            raise DeltalensError(f"max_bytes must be a finite positive number of bytes, got {max_bytes!r}")
        return int(max_bytes), "max_bytes"
    stated = gigabytes_from_env(CAPTURE_LIMIT_ENV)
    if stated is not None:
        return stated, f"${CAPTURE_LIMIT_ENV}={os.environ[CAPTURE_LIMIT_ENV]}"
    free = available_memory()
    return (int(free // 2), "half of this machine's available memory") if free else (2**63, "no limit known")


class _Measured(Exception):
    """Raised by the last measuring hook: the probe forward stops there (the rest is not needed)."""


_sizes_seen: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {(names, T): sizes}


@torch.no_grad()
def row_bytes(
    model, tokens: torch.Tensor, names_filter: Callable[[str], bool], full_T: int, names: Sequence[str] | None = None
) -> dict[str, int]:
    """hook name -> float32 bytes per (trace, position) row, from a forward on one token of one trace.

    With `names` (the exact hooks wanted) the probe stops once each has fired, and the answer is kept
    per model, so repeated captures of the same hooks cost no probe at all (a 1-token forward of a 1.3B
    model still reads all 5 GB of its weights)."""
    key = (tuple(names), full_T) if names is not None else None
    seen = _sizes_seen.get(model) if key is not None else None
    if seen is not None and key in seen:
        return dict(seen[key])
    probe = tokens[:1, :1]
    sizes: dict[str, int] = {}

    def measure(tensor: torch.Tensor, name: str) -> None:
        per_row = tensor.numel() // tensor.shape[0]  # T = 1
        if query_axis_names(name):  # (1, H, 1, 1): a row holds H x (the batch's T) weights
            per_row *= full_T
        sizes[name] = per_row * 4
        if names is not None and len(sizes) == len(names):
            raise _Measured

    device = next(model.parameters()).device
    if isinstance(model, HookedRootModule):
        try:
            with model.hooks(fwd_hooks=[(names_filter, lambda tensor, hook: measure(tensor, hook.name))]):
                model(probe.to(device))
        except _Measured:
            pass
    else:  # TransformerLens's bridge resolves its hook names in its own run_with_cache
        _, cache = model.run_with_cache(probe.to(device), names_filter=names_filter)
        for name, tensor in cache.items():
            sizes[name] = (tensor.numel() // tensor.shape[0]) * (full_T if query_axis_names(name) else 1) * 4
    if key is not None and (names is None or len(sizes) == len(names)):
        _sizes_seen.setdefault(model, {})[key] = dict(sizes)
    return sizes


def plan_capture(
    *,
    rows: int,
    row_sizes: dict[str, int],
    n_traces: int,
    T: int,
    extra_row_bytes: int,
    slice_extra_per_token: int,
    slice_traces: int | None,
    max_bytes: int | None,
    on_disk: bool = False,
) -> CapturePlan:
    """The plan (or the refusal) for keeping `rows` rows of `row_sizes` out of n_traces traces of T tokens.

    extra_row_bytes: kept per row besides the activations (labels, states, logits);
    slice_extra_per_token: working bytes per token of a slice besides its hook tensors (logits);
    on_disk: the kept rows go to disk (capture(..., to=)), so only a slice has to fit in the limit."""
    limit, source = capture_limit(max_bytes)
    per_row = sum(row_sizes.values()) + extra_row_bytes
    result = rows * per_row
    if result > limit and not on_disk:
        largest = max(row_sizes, key=lambda name: row_sizes[name]) if row_sizes else "the labels"
        raise DeltalensError(
            f"this capture would keep {_gb(result)} ({rows:,} tokens x {per_row:,} bytes over {len(row_sizes)} "
            f"hooks, the largest {largest}), more than the {_gb(limit)} limit ({source}); keep fewer layers "
            "(layers=...), fewer tokens (kinds=..., positions=...) or fewer traces, or raise max_bytes"
        )
    per_trace = T * (sum(row_sizes.values()) + slice_extra_per_token)
    if slice_traces is None:
        room = limit if on_disk else max(limit - result, 0)
        slice_traces = max(1, min(n_traces, math.floor(room / per_trace) if per_trace else n_traces))
    elif isinstance(slice_traces, bool) or not isinstance(slice_traces, int) or slice_traces < 1:
        raise DeltalensError(f"batch_size must be a whole number of traces >= 1, got {slice_traces!r}")
    return CapturePlan(rows, dict(row_sizes), result, min(slice_traces, max(n_traces, 1)), limit, n_traces)


def _gb(n: int) -> str:
    return f"{n / 2**30:,.2f} GB" if n >= 2**27 else f"{n / 2**20:,.1f} MB"

"""The precision a model's weights are loaded in, chosen and checked against memory before anything is built.

    dtype = load_dtype(folder, "auto")     # folder: a ModelFolder (models/io/model_folder.py)
    models.load(folder, dtype=dtype)       # what load_checkpoint does with any dtype it is given

The folder's reading carries its weights estimate (exact from the safetensors headers, else the config's
bound) and the memory budget. A model of AUTO_MIN_PARAMS weights or more is "big": before its load one
line goes to stderr with the estimate in fp32 and bf16, the memory available, the precision chosen and why.

"auto" (dl.load's and the CLI's default):
    small models       as built (fp32), every shipped checkpoint: outputs never change (bf16 where only it fits)
    big models         bf16 where this CPU's bf16 matmuls beat fp32 at the model's width (models/ops/bf16_check.py)
                       and bf16 fits; else fp32 where fp32 fits; else bf16 where only bf16 fits (a 7B model in
                       24 GB: slower beats not running); else refused, naming both figures
A precision asked for by name is checked as it is: fp32 that does not fit is refused in one sentence that
names the bf16 figure too when bf16 would fit.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from deltalens.core.errors import DeltalensError
from deltalens.models.io import footprint
from deltalens.models.io.footprint import check_fits, estimate_weights, gigabytes
from deltalens.models.io.model_folder import ModelFolder
from deltalens.models.ops.precision import precision_name, resolve_dtype

__all__ = ["load_dtype"]


def load_dtype(folder: ModelFolder, requested: Any) -> torch.dtype | None:
    """The dtype to build `folder`'s model in (None: as built, fp32) for `requested` (None, a precision
    name, a torch dtype or "auto"), checked against the memory budget; one line on stderr for a big model."""
    from deltalens.models.ops.bf16_check import AUTO_MIN_PARAMS

    estimate = folder.estimate
    if estimate is None or (estimate.source == "config" and _has_weights(folder)):
        estimate = estimate_weights(folder.arch, folder.build_config, folder.weights_file)  # a Hub folder, fetched
    budget = folder.budget or footprint.memory_budget()
    big = estimate.values >= AUTO_MIN_PARAMS
    auto = isinstance(requested, str) and requested.strip().lower() == "auto"
    if auto and not big:  # as built (fp32) when it fits: a small model runs in milliseconds either way
        fits = budget[0] is None or estimate.bytes("fp32") <= budget[0]
        dtype, why = (None, "") if fits else (torch.bfloat16, "fp32 would not fit")
    elif auto:
        dtype, why = _auto(folder, estimate, budget[0])
    else:
        dtype, why = resolve_dtype(requested), "as asked"
    name = precision_name(dtype or torch.float32)
    if big:
        free = "no memory figure" if budget[0] is None else f"{gigabytes(budget[0])} GB {budget[1]}"
        print(
            f"deltalens: {folder.path.name}: {estimate.line()}; {free}; loading in {name} ({why})",
            file=sys.stderr,
            flush=True,
        )
    try:
        if name in ("fp32", "bf16"):
            check_fits(folder.arch, folder.build_config, estimate=estimate, dtype=name, budget=budget)
        else:  # fp16 / fp64, asked for by torch dtype
            size = torch.empty(0, dtype=dtype).element_size()
            check_fits(folder.arch, folder.build_config, estimate.values * size, budget=budget)
    except DeltalensError as err:
        raise DeltalensError(f"{folder.path}: {err}") from None
    return dtype


def _has_weights(folder: ModelFolder) -> bool:
    index = folder.weights_file.with_name(folder.weights_file.name + ".index.json")
    return folder.weights_file.is_file() or index.is_file()


def _auto(folder: ModelFolder, estimate, budget: int | None) -> tuple[torch.dtype | None, str]:
    """(dtype, why) for a big model: the faster precision that fits, else the one that fits."""
    from deltalens.models.ops.bf16_check import TOKENS, bf16_check

    width = _width(folder.build_config)
    check = bf16_check((TOKENS, width, width))
    speed = f"bf16 matmuls run at {check.ratio:.2f}x fp32 on this CPU at width {width}"

    def fits(name: str) -> bool:
        return budget is None or estimate.bytes(name) <= budget

    if check.bf16_faster and fits("bf16"):
        return torch.bfloat16, speed
    if fits("fp32"):
        return torch.float32, speed
    return torch.bfloat16, f"fp32 would not fit; {speed}"  # refused by check_fits if bf16 does not fit either


def _width(config: dict[str, Any]) -> int:
    """The model's hidden size (a multimodal config's text tower's), the width of its projections."""
    inner = config.get("text_config")
    text = inner if isinstance(inner, dict) else config
    for key in ("hidden_size", "d_model"):
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return min(value, 16384)  # the timed matmul's size: a hostile width is refused elsewhere
    return 1024

"""The precision policy: what runs in bf16 and what stays fp32, written once for every device.

deltalens runs a model in one of two precisions, named "fp32" and "bf16" (`resolve_dtype` reads the
names; `deltalens train --precision`, `dl.load(..., dtype=)`, `--dtype` on eval / probe / intervene).
"auto" (`cast_model`, the CLI's default) picks one per machine: bf16 only where a measured bf16 matmul
beats fp32 (models/ops/bf16_check.py), the saved dtype for small models:

bf16 (autocast while training, or weights cast to bf16 for inference):
    the matmuls: every linear projection (q/k/v/beta/gate/output projections, the MLP, the LM head,
    the Transformer baseline's attention), the short convolution, the embeddings' outputs; on CUDA
    fla's chunk kernels take bf16 q, k, v and beta (they accumulate in fp32 inside).

fp32, always:
    the recurrence and its state. Every torch / C kernel of the delta-rule family (the references,
    the chunked WY kernels, replay after a state edit, the hook_state read-out, token transitions)
    runs with autocast switched off (`fp32_recurrence`), upcasts q, k, v, beta and g to fp32 and
    returns o in the caller's dtype; every S_t (hook_state, the final state, the carry between
    chunks) is fp32. Also fp32: the L2 norms of q and k, RMSNorm (computed in fp32, returned in its
    input's dtype), the log-decay g, the renormalisation S / ||S||_F, the loss (autocast's own
    fp32 list), parameters and optimiser state (autocast keeps fp32 master weights).

Where the two meet (`fla_dtype`): an fla kernel needs q, k, v (and beta) in one dtype (fla asserts
it), chooses chunk (bf16/fp16) or fused recurrent (fp32: its chunk kernel refuses fp32) from it, and
the kernel selector must see the dtype the call will use. The rule: under autocast, autocast's dtype
(the caller asked for bf16 compute); otherwise the widest of q, k and v (a hook that returns fp32 q in a
bf16 model gets an fp32 call, nothing is silently narrowed).

Stated tolerances, tested (tests/models/test_precision.py): bf16 (weights or autocast) against fp32,
on random tiny models of the family logits within 5e-2 absolute and an RMS error ratio <= 2e-2,
captured states within 5e-2; on the shipped S3 DeltaNet logits at the reveal positions within 0.25
(measured 0.09) with the same predicted values, RMS ratio over all positions <= 3e-2 (measured 0.018:
between reveals, where nothing was supervised, a logit can move by ~4.5). bf16 keeps 8 bits of
mantissa (a relative step of 4e-3) and the projections feed k, whose errors reflections carry on
undamped. The torch kernels under autocast give exactly their fp32 results. On CUDA fla's fp32 gated
chunk kernels multiply in TF32 (parity about 1e-3, not 1e-5).
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import warnings
from collections.abc import Callable
from typing import Any, Optional, TypeVar

import torch

from deltalens.core.errors import DeltalensError

__all__ = [
    "PRECISIONS",
    "resolve_dtype",
    "precision_name",
    "autocast_dtype",
    "no_autocast",
    "fp32_recurrence",
    "fla_dtype",
    "training_autocast",
    "cast_model",
    "auto_dtype",
]

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}
_ALIASES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16"}

F = TypeVar("F", bound=Callable[..., Any])


_RUNNABLE = (torch.float32, torch.bfloat16, torch.float16, torch.float64)  # what every kernel computes in


def resolve_dtype(value) -> Optional[torch.dtype]:
    """A precision name ("fp32", "bf16", "float32", "bfloat16") -> its dtype; a floating torch dtype and None
    pass through (fp64 for long-horizon studies, fp16 at the caller's risk)."""
    if value is None or value in _RUNNABLE:
        return value
    if isinstance(value, torch.dtype):  # fp8, complex, integers: the kernels and the short conv have no such path
        raise DeltalensError(
            f"deltalens runs models in {', '.join(str(d).replace('torch.', '') for d in _RUNNABLE)}, not "
            f"{str(value).replace('torch.', '')}; "
            f"choose one of {', '.join(PRECISIONS)}."
        )
    if isinstance(value, str):
        name = value.strip().lower().removeprefix("torch.")
        name = _ALIASES.get(name, name)
        if name in PRECISIONS:
            return PRECISIONS[name]
    raise DeltalensError(f"unknown precision {value!r}; choose one of {', '.join(PRECISIONS)}.")


def precision_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> "bf16" (the inverse of `resolve_dtype`)."""
    return next((name for name, d in PRECISIONS.items() if d == dtype), str(dtype).replace("torch.", ""))


def _autocast_devices() -> tuple[str, ...]:
    return ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)


def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """The dtype autocast computes matmuls in on this device type now, None when autocast is off."""
    if device_type not in ("cpu", "cuda") or not torch.is_autocast_enabled(device_type):
        return None
    return torch.get_autocast_dtype(device_type)


@contextlib.contextmanager
def no_autocast():
    """Autocast off on every device type for the block (the recurrence's matmuls stay fp32)."""
    with contextlib.ExitStack() as stack:
        for device in _autocast_devices():
            if torch.is_autocast_enabled(device):
                stack.enter_context(torch.autocast(device, enabled=False))
        yield


def fp32_recurrence(fn: F) -> F:
    """Run a recurrence kernel with autocast off: it upcasts its inputs to fp32 itself and returns o in
    the caller's dtype, so under autocast its matmuls (and torch.linalg.solve_triangular, which has
    no bf16 kernel) stay fp32."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not any(torch.is_autocast_enabled(d) for d in _autocast_devices()):
            return fn(*args, **kwargs)
        with no_autocast():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def fla_dtype(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.dtype:
    """The one dtype an fla call takes q, k, v and beta in (module docstring): autocast's, else the widest."""
    under_autocast = autocast_dtype(q.device.type)
    if under_autocast is not None:
        return under_autocast
    return torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)


def training_autocast(device: torch.device, precision: str):
    """The context a training step runs in: bf16 autocast on the step's device for "bf16", nothing for "fp32"."""
    dtype = resolve_dtype(precision)
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def cast_model(model, dtype):
    """The model with its weights in `dtype` (a name or torch dtype; None = as it is), for inference. Its
    kernels keep the recurrence in fp32 whatever the weights (module docstring).

    "auto": the dtype this CPU runs the model fastest in (`auto_dtype`); bf16 asked for on a CPU whose
    bf16 matmuls are slower than fp32 is done, with one warning that gives the measured ratio."""
    if isinstance(dtype, str) and dtype.strip().lower() == "auto":
        dtype = auto_dtype(model)
    else:
        dtype = resolve_dtype(dtype)
        if dtype == torch.bfloat16 and _on_cpu(model) and _big_enough(model):
            _warn_if_bf16_slow(model)
    if dtype is None:
        return model
    with contextlib.redirect_stdout(sys.stderr):  # TransformerLens prints "Changing model dtype to ..."
        model = model.to(dtype)
    return _keep_fp32_parts(model, dtype)


def _keep_fp32_parts(model, dtype):
    """Put back in fp32 what a wrapped transformers model keeps there in half precision
    (`_keep_in_fp32_modules_strict`, and `_keep_in_fp32_modules` for fp16: Kimi Linear's router weight,
    its correction bias and dt_bias), as transformers' own `from_pretrained(dtype=...)` does: a router in
    bf16 can pick other experts."""
    if dtype not in (torch.float16, torch.bfloat16):
        return model
    for module in model.modules():
        names = set(getattr(module, "_keep_in_fp32_modules_strict", None) or ())
        if dtype == torch.float16:
            names |= set(getattr(module, "_keep_in_fp32_modules", None) or ())
        if not names:
            continue
        pattern = re.compile("|".join(rf"(^|\.){re.escape(name)}($|\.)" for name in sorted(names)))
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if pattern.search(name) and tensor.is_floating_point():
                tensor.data = tensor.data.float()
    return model


def _on_cpu(model) -> bool:
    parameter = next(iter(model.parameters()), None)
    return parameter is None or parameter.device.type == "cpu"


def _n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def _big_enough(model) -> bool:
    """Big enough for precision to matter: a tiny model runs in milliseconds either way (no timing taken)."""
    from deltalens.models.ops.bf16_check import AUTO_MIN_PARAMS

    return _n_params(model) >= AUTO_MIN_PARAMS


def auto_dtype(model) -> Optional[torch.dtype]:
    """What `--dtype auto` gives `model`: None (as saved) below AUTO_MIN_PARAMS parameters or off the CPU;
    else bf16 where this CPU's bf16 matmuls beat fp32 at the model's shapes (models/ops/bf16_check.py),
    fp32 where they do not, unless the fp32 weights would not fit in the memory left (then as saved)."""
    if not _on_cpu(model) or not _big_enough(model):
        return None
    from deltalens.models.ops.bf16_check import bf16_check, model_shape

    if bf16_check(model_shape(model)).bf16_faster:
        return torch.bfloat16
    parameter = next(model.parameters())
    if parameter.dtype != torch.float32:
        from deltalens.core.memory import available_memory

        free = available_memory()
        growth = _n_params(model) * (4 - parameter.element_size())
        if free is not None and growth > free:
            return None  # a bf16 7B model stays bf16 in 24 GB: slower beats not running
    return torch.float32


def _warn_if_bf16_slow(model) -> None:
    from deltalens.models.ops.bf16_check import bf16_check, model_shape

    check = bf16_check(model_shape(model))
    if not check.bf16_faster:
        M, K, N = check.shape
        native = f"flags {', '.join(check.native_flags)}" if check.native_flags else "no native bf16"
        warnings.warn(
            f"deltalens: bf16 matmuls run at {check.ratio:.2f}x fp32 on this CPU ({check.bf16_gflops:.1f} vs "
            f"{check.fp32_gflops:.1f} GFLOP/s at {M}x{K}x{N}, {native}), so this bf16 model will be "
            "slower than fp32; use --dtype auto or fp32 unless memory is what you need.",
            RuntimeWarning,
            stacklevel=3,
        )

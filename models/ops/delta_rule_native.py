"""The delta rule's C kernel (models/ops/csrc/delta_rule.c) as a differentiable torch function.

`chunk_delta_rule` calls it for CPU inputs when it builds here (models/ops/native.py); it computes
what `delta_rule_recurrence` computes, token by token, forward and backward, several times faster
than the chunked torch kernel at this project's sizes (benchmarks/delta_rule.py).
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional

import torch
from torch.autograd.function import once_differentiable

from deltalens.models.ops.native import library, library_error, pointer

__all__ = ["native_delta_rule", "native_delta_rule_with_states", "native_kernel_available", "native_kernel_error"]

NAME = "delta_rule"


def _kernels() -> Optional[ctypes.CDLL]:
    lib = library(NAME)
    if lib is not None and lib.delta_rule_forward.argtypes is None:
        sizes: list[Any] = [ctypes.c_int64] * 5  # Any: ctypes' argtypes mix pointer and integer types
        decay: list[Any] = [ctypes.c_void_p] * 5 + [ctypes.c_int64]  # q, k, v, beta, alpha and alpha's width A
        lib.delta_rule_forward.argtypes = decay + [ctypes.c_void_p] * 3 + sizes
        lib.delta_rule_backward.argtypes = decay + [ctypes.c_void_p] * 9 + sizes
        lib.delta_rule_forward_states.argtypes = decay + [ctypes.c_void_p] * 3 + [ctypes.c_int64] + sizes
        lib.delta_rule_forward_rows.argtypes = decay + [ctypes.c_void_p] * 4 + [ctypes.c_int64] + sizes
        lib.delta_rule_forward.restype = lib.delta_rule_backward.restype = None
        lib.delta_rule_forward_states.restype = lib.delta_rule_forward_rows.restype = None
        lib.delta_rule_block.restype = ctypes.c_int64
    return lib


def _loaded() -> ctypes.CDLL:
    """The kernels, for a caller past `_checked_inputs` (which refuses a machine without them)."""
    lib = _kernels()
    if lib is None:
        raise RuntimeError(f"the C delta-rule kernel is not available: {native_kernel_error()}")
    return lib


def native_kernel_available() -> bool:
    """True when the C delta-rule kernel builds (or is built) and loads on this machine."""
    return _kernels() is not None


def native_kernel_error() -> Optional[str]:
    """Why the C kernel is not available (None when it is)."""
    return library_error(NAME)


class _NativeDeltaRule(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, beta, S0, alpha):
        B, T, H, K = q.shape
        V = v.shape[-1]
        q, k, v, beta = (x.contiguous() for x in (q, k, v, beta))
        alpha = None if alpha is None else alpha.contiguous()
        S = S0.clone(memory_format=torch.contiguous_format)
        o = q.new_empty(B, T, H, V)
        block = _loaded().delta_rule_block()
        # every block-th state, for the backward pass (which recomputes the states in between)
        ckpt = q.new_empty(B, -(-T // block), H, K, V) if any(ctx.needs_input_grad) else None
        decay = (*map(pointer, (q, k, v, beta, alpha)), _width(alpha))
        _loaded().delta_rule_forward(*decay, *map(pointer, (S, o, ckpt)), B, T, H, K, V)
        if ckpt is not None:
            ctx.save_for_backward(q, k, v, beta, ckpt, alpha)
        return o, S

    @staticmethod
    @once_differentiable  # the C backward builds no graph: a second derivative must fail loudly
    def backward(ctx, dO, dS_final):
        q, k, v, beta, ckpt, alpha = ctx.saved_tensors
        B, T, H, K = q.shape
        V = v.shape[-1]
        dO = q.new_zeros(B, T, H, V) if dO is None else dO.float().contiguous()
        dS = (
            q.new_zeros(B, H, K, V)
            if dS_final is None
            else dS_final.float().clone(memory_format=torch.contiguous_format)
        )  # in: dL/dS_T; out: dL/dS_0
        dq, dk, dv, dbeta = (torch.empty_like(x) for x in (q, k, v, beta))
        dalpha = None if alpha is None else torch.empty_like(alpha)
        scratch = q.new_empty(_loaded().delta_rule_block(), H, K, V)
        decay = (*map(pointer, (q, k, v, beta, alpha)), _width(alpha))
        _loaded().delta_rule_backward(
            *decay, *map(pointer, (ckpt, dO, dS, dq, dk, dv, dbeta, dalpha, scratch)), B, T, H, K, V
        )
        return dq, dk, dv, dbeta, dS, dalpha


def _width(alpha: Optional[torch.Tensor]) -> int:
    """A, the decays per head and token: 1 (alpha [B, T, H]; or none) or V (alpha [B, T, H, V], per value column)."""
    return 1 if alpha is None or alpha.dim() == 3 else int(alpha.shape[-1])


def _checked_inputs(q, k, v, beta, initial_state, alpha) -> torch.Tensor:
    """The initial state (zeros for None), after refusing anything the C code must not read."""
    if not native_kernel_available():
        raise RuntimeError(f"the C delta-rule kernel is not available: {native_kernel_error()}")
    B, T, H, K = q.shape
    V = v.shape[-1]
    S0 = q.new_zeros(B, H, K, V) if initial_state is None else initial_state
    tensors = {"q": q, "k": k, "v": v, "beta": beta, "initial_state": S0, **({} if alpha is None else {"alpha": alpha})}
    wrong = [n for n, x in tensors.items() if x.device.type != "cpu" or x.dtype != torch.float32]
    if wrong:  # C reads raw float32 memory: anything else must never reach it
        raise ValueError(f"the C delta-rule kernel takes float32 CPU tensors; {', '.join(wrong)} are not.")
    if (
        k.shape != q.shape
        or v.shape[:3] != (B, T, H)
        or beta.shape != (B, T, H)
        or S0.shape != (B, H, K, V)
        or (alpha is not None and alpha.shape not in ((B, T, H), (B, T, H, V)))
    ):
        raise ValueError(
            "shapes must be q, k [B, T, H, K], v [B, T, H, V], beta [B, T, H], alpha [B, T, H] or [B, T, H, V], "
            "state [B, H, K, V]."
        )
    return S0


def native_delta_rule(q, k, v, beta, initial_state: Optional[torch.Tensor], alpha: Optional[torch.Tensor] = None):
    """(o [B, T, H, V], S_T [B, H, K, V]) for prepared fp32 CPU inputs (q already scaled).

    alpha [B, T, H]: a decay applied to the state before each token's update (the gated delta rule;
    None: none); alpha [B, T, H, V]: one per value column, S_{t-1} Diag(alpha_t) (the value-gated delta
    rule). Differentiable in every input; for the backward it keeps every 16th state (B*T*H*K*V/16 floats).
    """
    S0 = _checked_inputs(q, k, v, beta, initial_state, alpha)
    return _NativeDeltaRule.apply(q, k, v, beta, S0, alpha)


def native_delta_rule_with_states(
    q,
    k,
    v,
    beta,
    initial_state: Optional[torch.Tensor],
    alpha: Optional[torch.Tensor] = None,
    stride: int = 1,
    rows: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
):
    """`native_delta_rule` that also returns the state after every stride-th token,
    [B, T / stride, H, K, V] (T a multiple of stride; stride n_h: one state per DeltaProduct token).
    rows = (b, step) index tensors: only those states, [len(b), H, K, V] in that order; the others are
    never written anywhere (a capture of the reveal positions allocates only theirs).

    Inference only (no graph): the states are copied out as the recurrence passes them, so capturing
    them costs little more than the forward itself; with gradients use the chunked torch kernel.
    """
    S0 = _checked_inputs(q, k, v, beta, initial_state, alpha)
    if torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (q, k, v, beta, S0, alpha)):
        raise RuntimeError(
            "native_delta_rule_with_states builds no graph; call it under torch.no_grad() or "
            "use the chunked torch kernel (with_states) when gradients are needed."
        )
    B, T, H, K = q.shape
    V = v.shape[-1]
    if stride < 1 or T % stride:
        raise ValueError(f"stride must divide the sequence length T = {T}; got {stride}.")
    q, k, v, beta = (x.contiguous() for x in (q, k, v, beta))
    alpha = None if alpha is None else alpha.contiguous()
    S = S0.clone(memory_format=torch.contiguous_format)
    o = q.new_empty(B, T, H, V)
    if rows is None:
        states = q.new_empty(B, T // stride, H, K, V)
        decay = (*map(pointer, (q, k, v, beta, alpha)), _width(alpha))
        _loaded().delta_rule_forward_states(*decay, *map(pointer, (S, o, states)), stride, B, T, H, K, V)
        return o, S, states
    b_idx, step_idx = (torch.as_tensor(x, dtype=torch.long).cpu() for x in rows)
    slots = torch.full((B, T // stride), -1, dtype=torch.long)
    slots[b_idx, step_idx] = torch.arange(len(b_idx))
    if int((slots >= 0).sum()) != len(b_idx):
        raise ValueError("rows must name each (batch, step) once.")
    states = q.new_empty(len(b_idx), H, K, V)
    decay = (*map(pointer, (q, k, v, beta, alpha)), _width(alpha))
    _loaded().delta_rule_forward_rows(*decay, *map(pointer, (S, o, states, slots)), stride, B, T, H, K, V)
    return o, S, states

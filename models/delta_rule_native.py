"""The delta rule's C kernel (models/csrc/delta_rule.c) as a differentiable torch function.

`chunk_delta_rule` calls it for CPU inputs when it builds here (models/native.py); it computes
what `delta_rule_recurrence` computes, token by token, forward and backward, several times faster
than the chunked torch kernel at this project's sizes (benchmarks/delta_rule.py).
"""

from __future__ import annotations

import ctypes
from typing import Optional

import torch

from deltalens.models.native import library, library_error, pointer

__all__ = ["native_delta_rule", "native_kernel_available", "native_kernel_error"]

NAME = "delta_rule"


def _kernels() -> Optional[ctypes.CDLL]:
    lib = library(NAME)
    if lib is not None and lib.delta_rule_forward.argtypes is None:
        sizes = [ctypes.c_int64] * 5
        lib.delta_rule_forward.argtypes = [ctypes.c_void_p] * 7 + sizes
        lib.delta_rule_backward.argtypes = [ctypes.c_void_p] * 12 + sizes
        lib.delta_rule_forward.restype = lib.delta_rule_backward.restype = None
        lib.delta_rule_block.restype = ctypes.c_int64
    return lib


def native_kernel_available() -> bool:
    """True when the C delta-rule kernel builds (or is built) and loads on this machine."""
    return _kernels() is not None


def native_kernel_error() -> Optional[str]:
    """Why the C kernel is not available (None when it is)."""
    return library_error(NAME)


class _NativeDeltaRule(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, beta, S0):
        B, T, H, K = q.shape
        V = v.shape[-1]
        q, k, v, beta = (x.contiguous() for x in (q, k, v, beta))
        S = S0.clone(memory_format=torch.contiguous_format)
        o = q.new_empty(B, T, H, V)
        block = _kernels().delta_rule_block()
        # every block-th state, for the backward pass (which recomputes the states in between)
        ckpt = q.new_empty(B, -(-T // block), H, K, V) if any(ctx.needs_input_grad) else None
        _kernels().delta_rule_forward(*map(pointer, (q, k, v, beta, S, o, ckpt)), B, T, H, K, V)
        if ckpt is not None:
            ctx.save_for_backward(q, k, v, beta, ckpt)
        return o, S

    @staticmethod
    def backward(ctx, dO, dS_final):
        q, k, v, beta, ckpt = ctx.saved_tensors
        B, T, H, K = q.shape
        V = v.shape[-1]
        dO = q.new_zeros(B, T, H, V) if dO is None else dO.float().contiguous()
        dS = q.new_zeros(B, H, K, V) if dS_final is None else dS_final.float().clone(
            memory_format=torch.contiguous_format)  # in: dL/dS_T; out: dL/dS_0
        dq, dk, dv, dbeta = (torch.empty_like(x) for x in (q, k, v, beta))
        scratch = q.new_empty(_kernels().delta_rule_block(), H, K, V)
        _kernels().delta_rule_backward(*map(pointer, (q, k, v, beta, ckpt, dO, dS, dq, dk, dv, dbeta, scratch)),
                                       B, T, H, K, V)
        return dq, dk, dv, dbeta, dS


def native_delta_rule(q, k, v, beta, initial_state: Optional[torch.Tensor]):
    """(o [B, T, H, V], S_T [B, H, K, V]) for prepared fp32 CPU inputs (q already scaled).

    Differentiable in every input; for the backward it keeps every 16th state (B*T*H*K*V/16 floats).
    """
    if not native_kernel_available():
        raise RuntimeError(f"the C delta-rule kernel is not available: {native_kernel_error()}")
    B, T, H, K = q.shape
    S0 = q.new_zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state.float()
    return _NativeDeltaRule.apply(q, k, v, beta, S0)

"""The delta rule: a readable recurrence and its fast paths (the C kernel, a chunked torch kernel, fla's).

DeltaNet (Yang, Wang, Zhang, Shen, Kim, "Parallelizing Linear Transformers with the Delta Rule
over Sequence Length", NeurIPS 2024, arXiv 2406.06484) keeps a matrix-valued state S_t and, at
every token, overwrites what S_t stores under the key k_t with the value v_t, by an amount beta_t.

Code symbol -> paper notation (one head; the batch and head dims are carried along everywhere):

    q[:, t], k[:, t]   q_t, k_t in R^K       query / key (DeltaNet L2-normalises both)
    v[:, t]            v_t in R^V            value
    beta[:, t]         beta_t                write strength; beta_t in [0, 1] in DeltaNet,
                                             [0, 2] with negative eigenvalues (below)
    S                  S_t in R^{K x V}      the state, in fla's [K, V] layout
    u                  u_t = beta_t (v_t - S_{t-1}^T k_t)   the "new value" actually written
    o[:, t]            o_t = S_t^T (scale q_t)              the read-out, scale = K ** -0.5

    update   S_t = S_{t-1} + k_t u_t^T = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T

The paper writes the state transposed ([V, K]): S_t = S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T.
Same thing. The transition I - beta_t k_t k_t^T has eigenvalue 1 - beta_t ||k_t||^2 along k_t and 1
elsewhere. With unit keys and beta_t in [0, 2] that eigenvalue lies in [-1, 1]; at beta_t = 2 the
transition is the Householder reflection I - 2 k k^T, the building block of permutations. That is
the point of Grazzi, Siems, Zela, Franke, Hutter, Pontil, "Unlocking State-Tracking in Linear RNNs
Through Negative Eigenvalues" (ICLR 2025, arXiv 2411.12537), which fla exposes as allow_neg_eigval.

The ways to compute it, all agreeing to ~1e-5 in fp32 (tests/models/test_delta_rule.py):

* `delta_rule_recurrence`: the readable reference. A Python loop over tokens; returns every S_t
  and accepts an `edit(t, S) -> S` callback applied right after each update.
* `chunk_delta_rule`: the fast path, fla's signature and [B, T, H, D] layout. On CPU the
  token-by-token C kernel (models/ops/delta_rule_native.py: forward and backward; 4-16x faster than
  the chunked torch kernel at this project's head sizes, benchmarks/inference.py) when a C compiler
  is there, else the chunked WY/UT torch kernel (models/ops/delta_rule_chunked.py); on CUDA (fla
  importable) fla's Triton kernels (models/ops/fla_kernels.py). All differentiable.
* `chunk_delta_rule_with_states`: also every S_t, for the `hook_state` hook: without gradients on a
  CPU the C kernel copies each state out as it passes; else the chunked kernel, vectorised per chunk.
* `replay_with_state_edits` (models/ops/replay.py): continue from states a hook replaced.

Which of them runs is decided by one function, `select_kernel` (models/ops/kernel_select.py, whose
docstring tables every path); both entry points ask it, or run the `kernel` a caller passes.

Renormalised delta rule (`renorm_every = R > 0`; deltalens's extension, the "hybrid with periodic
non-linear normalisation" that Siems et al. 2026 name as future work): after every R-th token, i.e.
after token t whenever (t + 1) % R == 0, each (batch, head) state is rescaled to unit Frobenius norm,
S_t <- S_t / max(||S_t||_F, eps) (`renormalise_state`; a zero state stays zero). A linear RNN cannot
renormalise its belief, so its state mass can decay geometrically and underflow; this puts the mass
back at every renormalisation point. Order within a step: update, then renormalise (at those t),
then the `edit` callback; o_t reads the result, so o_t = S_t^T (scale q_t) holds with the states
every function returns. The chunked paths cut the sequence into segments of R tokens (chunk size
min(chunk_size, R), chunks never straddle a segment boundary) and renormalise the carried state
between segments; R = 0 (the default) is the plain delta rule, bit for bit.
"""

from __future__ import annotations

from typing import Optional

import torch

from deltalens.models.ops.common import (
    RENORM_EPS,
    StateEdit,
    check_renorm_every,
    check_shapes,
    check_state_every,
    l2_normalize,
    prepare,
    renormalise_state,
    scan_tokens,
)
from deltalens.models.ops.delta_rule_chunked import chunk_forward
from deltalens.models.ops.delta_rule_native import native_delta_rule, native_delta_rule_with_states
from deltalens.models.ops.fla_kernels import fla_delta_rule, fla_delta_rule_renorm, fla_kernels_available
from deltalens.models.ops.fla_state_rows import fla_state_rows
from deltalens.models.ops.kernel_select import (
    C_STATES,
    CHUNKED,
    CHUNKED_STATES,
    FLA_CHUNK,
    FLA_RECURRENT,
    FLA_ROWS,
    C,
    KernelChoice,
    select_kernel_for,
)
from deltalens.models.ops.precision import fp32_recurrence, no_autocast
from deltalens.models.ops.replay import replay_with_state_edits

__all__ = [
    "l2_normalize",
    "renormalise_state",
    "RENORM_EPS",
    "delta_rule_recurrence",
    "chunk_delta_rule",
    "chunk_delta_rule_with_states",
    "replay_with_state_edits",
    "fla_kernels_available",
]


# --------------------------------------------------------------------------------------------
# Reference: one token at a time.
# --------------------------------------------------------------------------------------------


@fp32_recurrence
def delta_rule_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    edit: Optional[StateEdit] = None,
    renorm_every: int = 0,
) -> tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
    """The delta rule token by token (readable reference; fp32 inside).

    Args:
        q, k: [B, T, H, K]. v: [B, T, H, V]. beta: [B, T, H].
        scale: multiplies q before the read-out; default K ** -0.5 (as fla).
        initial_state: S_0, [B, H, K, V]; zeros if None.
        output_final_state: return S_T as the second element (else None).
        use_qk_l2norm_in_kernel: L2-normalise q and k first (fla's `l2norm`, eps 1e-6).
        edit: optional `edit(t, S) -> S`, called right after the update at step t with S of shape
            [B, H, K, V]; what it returns is S_t: the read-out o_t and every later step use it.
        renorm_every: R > 0 renormalises S to unit Frobenius norm per (batch, head) after token t
            whenever (t + 1) % R == 0 (`renormalise_state`); 0 (default) never. Order in a step:
            update, renormalise, then `edit` (which sees, and may replace, the renormalised state;
            its result is not renormalised again until the next renormalisation point).

    Returns:
        (o [B, T, H, V] in q's dtype, final_state [B, H, K, V] fp32 or None, states [B, T, H, K, V]
        fp32 with states[:, t] = S_t, the state after token t).
    """
    check_shapes(q, k, v, beta, initial_state)
    renorm_every = check_renorm_every(renorm_every)
    out_dtype = q.dtype
    q, k, v, beta = prepare(q, k, v, beta, scale, use_qk_l2norm_in_kernel)

    def step(t: int, S: torch.Tensor) -> torch.Tensor:
        k_t, v_t, b_t = k[:, t], v[:, t], beta[:, t, :, None]  # (B, H, K), (B, H, V), (B, H, 1)
        v_old = torch.einsum("bhkv,bhk->bhv", S, k_t)  # S^T k: what S stores under k_t now
        u_t = b_t * (v_t - v_old)  # (B, H, V)
        S = S + torch.einsum("bhk,bhv->bhkv", k_t, u_t)  # (B, H, K, V)
        if renorm_every and (t + 1) % renorm_every == 0:
            S = renormalise_state(S)  # the non-linear step: unit Frobenius norm per (batch, head)
        return S

    # then edit(t, S_t), then o_t = S_t^T (scale q_t)
    o, S, states = scan_tokens(step, q, initial_state, v.shape[-1], edit, out_dtype)
    return o, (S if output_final_state else None), states


# --------------------------------------------------------------------------------------------
# Fast paths: the selector's choice among fla, the C kernel and the chunked torch kernel.
# --------------------------------------------------------------------------------------------


def chunk_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    chunk_size: int = 64,
    use_fla: Optional[bool] = None,
    renorm_every: int = 0,
    native: Optional[bool] = None,
    kernel: Optional[KernelChoice] = None,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Chunked delta rule with fla's signature and layout (`fla.ops.delta_rule.chunk_delta_rule`).

    Args:
        q, k: [B, T, H, K]. v: [B, T, H, V]. beta: [B, T, H] (any range; [0, 2] is the useful one).
        scale: multiplies q; default K ** -0.5.
        initial_state: [B, H, K, V] or None (zeros).
        output_final_state: also return S_T.
        use_qk_l2norm_in_kernel: L2-normalise q and k first (fla's `l2norm`, eps 1e-6).
        chunk_size: tokens per chunk C of the torch path; T need not be a multiple of it.
        use_fla: None = fla's Triton kernels when q is on CUDA and fla imports, else ours;
            True = require fla's kernels (error if impossible); False = always ours.
            fla's chunk kernel rejects fp32, so fp32 CUDA inputs go to fla's fused recurrent kernel.
        renorm_every: R > 0 renormalises the state to unit Frobenius norm after every R-th token (as
            `delta_rule_recurrence`): the sequence runs as segments of R tokens, each from the
            previous segment's renormalised final state, with chunk size min(chunk_size, R). The
            torch path does this in one call; fla's kernels are called once per segment.
        native: the CPU path's kernel. None = the C kernel (models/ops/delta_rule_native.py) for CPU
            inputs without renormalisation when it builds here, else the chunked torch kernel;
            False = always the chunked torch kernel; True = require the C kernel.
        kernel: the path to run (fla_chunk, fla_recurrent, c or chunked), as `select_kernel` chose
            it for these inputs; None (default) = choose here from use_fla and native.

    Returns:
        (o [B, T, H, V] in q's dtype, final_state [B, H, K, V] (fp32 on the torch path) or None).
        The torch path computes in fp32 (bf16/fp16 inputs are upcast) and is differentiable.
    """
    check_shapes(q, k, v, beta, initial_state)
    renorm_every = check_renorm_every(renorm_every)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}.")
    if kernel is None:
        kernel = select_kernel_for(
            q, k, v, beta, initial_state=initial_state, renorm_every=renorm_every, use_fla=use_fla, native=native
        )
    kernel.require((FLA_CHUNK, FLA_RECURRENT, C, CHUNKED), "chunk_delta_rule")
    if kernel.path in (FLA_CHUNK, FLA_RECURRENT):
        recurrent = kernel.path == FLA_RECURRENT
        args = (q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, chunk_size)
        if renorm_every:
            return fla_delta_rule_renorm(*args, renorm_every, recurrent=recurrent)
        return fla_delta_rule(*args, recurrent=recurrent)

    out_dtype = q.dtype
    with no_autocast():  # the recurrence in fp32 (models/ops/precision.py)
        qp, kp, vp, bp = prepare(q, k, v, beta, scale, use_qk_l2norm_in_kernel)
        if kernel.path == C:
            o, S = native_delta_rule(qp, kp, vp, bp, None if initial_state is None else initial_state.float())
        else:
            o, S, _ = chunk_forward(
                qp, kp, vp, bp, initial_state, chunk_size, with_states=False, renorm_every=renorm_every
            )
    return o.to(out_dtype), (S if output_final_state else None)


def chunk_delta_rule_with_states(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    chunk_size: int = 64,
    renorm_every: int = 0,
    state_every: int = 1,
    native: Optional[bool] = None,
    kernel: Optional[KernelChoice] = None,
    rows: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
) -> tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
    """The chunked kernel plus every per-step state S_t.

    Same arguments as `chunk_delta_rule`; same returns as `delta_rule_recurrence`:
    (o [B, T, H, V], final_state or None, states [B, T, H, K, V] fp32). Memory is B*T*H*K*V floats.
    With renorm_every = R > 0, states[:, t] at a renormalisation point ((t + 1) % R == 0) is the
    state after the renormalisation, as in `delta_rule_recurrence`. state_every = n keeps only the
    state after every n-th step (T a multiple of n): [B, T / n, H, K, V], one per DeltaProduct token.

    native None: without gradients on a CPU the C kernel copies each kept state out as it passes
    (about the cost of the forward, and o equals `chunk_delta_rule`'s to the bit); otherwise (and with
    native=False) the chunked torch kernel, vectorised chunk by chunk and differentiable. kernel:
    c_states, chunked_states or fla_rows (with rows) as `select_kernel` chose it (None = choose here).

    rows = (b, step) index tensors: only those states, [len(b), H, K, V]. The C kernel writes just
    those rows (no [B, T, H, K, V] tensor exists); the chunked kernel builds every state and indexes;
    kernel fla_rows (CUDA) runs fla's forward and rebuilds just those rows (models/ops/fla_state_rows.py).
    """
    check_shapes(q, k, v, beta, initial_state)
    if kernel is not None and kernel.path == FLA_ROWS:  # under the caller's autocast: fla's dtype rule
        check_state_every(state_every, q.shape[1])
        if check_renorm_every(renorm_every):
            raise ValueError("the fla_rows path does not renormalise (the selector runs renorm_every > 0 elsewhere).")
        return fla_state_rows(
            q, k, v, beta, None, scale, initial_state, output_final_state, chunk_size, rows, state_every,
            use_qk_l2norm_in_kernel,
        )  # fmt: skip
    return _with_states_fp32(
        q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, chunk_size, renorm_every,
        state_every, native, kernel, rows,
    )  # fmt: skip


@fp32_recurrence
def _with_states_fp32(
    q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, chunk_size, renorm_every,
    state_every, native, kernel, rows,
):  # fmt: skip
    """`chunk_delta_rule_with_states`'s C and chunked torch paths, autocast off."""
    renorm_every = check_renorm_every(renorm_every)
    check_state_every(state_every, q.shape[1])
    if kernel is None:
        kernel = select_kernel_for(
            q, k, v, beta, initial_state=initial_state, wants_states=True, renorm_every=renorm_every, native=native
        )
    kernel.require((C_STATES, CHUNKED_STATES), "chunk_delta_rule_with_states")
    out_dtype = q.dtype
    qp, kp, vp, bp = prepare(q, k, v, beta, scale, use_qk_l2norm_in_kernel)
    if kernel.path == C_STATES:
        o, S, states = native_delta_rule_with_states(
            qp, kp, vp, bp, None if initial_state is None else initial_state.float(), stride=state_every, rows=rows
        )
    else:
        o, S, states = chunk_forward(
            qp, kp, vp, bp, initial_state, chunk_size, with_states=True, renorm_every=renorm_every
        )
        states = states[:, state_every - 1 :: state_every]
        if rows is not None:
            states = states[rows[0].to(states.device), rows[1].to(states.device)]
    return o.to(out_dtype), (S if output_final_state else None), states

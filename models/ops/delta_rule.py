"""The delta rule: a readable recurrence, a chunked (WY/UT) pure-torch kernel, and fla's kernels on CUDA.

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

Three ways to compute it, all agreeing to ~1e-5 in fp32 (tests/test_delta_rule.py):

* `delta_rule_recurrence`: the readable reference. A Python loop over tokens; returns every S_t
  and accepts an `edit(t, S) -> S` callback applied right after each update.
* `chunk_delta_rule`: the fast path, fla's signature and [B, T, H, D] layout. On CPU it runs the
  token-by-token C kernel (models/ops/delta_rule_native.py: forward and backward; 4-16x faster than the
  chunked torch kernel at this project's head sizes, benchmarks/inference.py) when a C compiler is
  there, else the
  chunked torch kernel: tokens cut into chunks of C, inside a chunk the C updates folded into one
  triangular solve (the WY/UT form, DeltaNet paper sec. 3), across chunks a short Python loop
  carries S (T / C steps). Both differentiable; on CUDA (fla importable) fla's Triton kernels.
* `chunk_delta_rule_with_states`: also every S_t, for the `hook_state` hook: without gradients on a
  CPU the C kernel copies each state out as it passes; else the chunked kernel, vectorised per chunk
  (S_t = S_chunk_start + cumsum of k_s u_s^T).

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

Chunked (WY/UT) form, for one chunk with starting state S_0 and rows t = 1..C:
    u_t = beta_t (v_t - S_0^T k_t - sum_{s<t} (k_s . k_t) u_s)
=>  (I + strict_tril(diag(beta) K K^T)) U = diag(beta) V - diag(beta) K S_0
=>  U = U0 - W S_0     with  A U0 = diag(beta) V,  A W = diag(beta) K,  A = I + strict_tril(...)
    O = Q S_0 + tril(Q K^T) U            (tril includes the diagonal: o_t reads S_t, not S_{t-1})
    S_C = S_0 + K^T U = S_0 + K^T U0 - (K^T W) S_0
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Optional

import torch
import torch.nn.functional as F
from einops import rearrange

from deltalens.models.ops.delta_rule_native import (
    native_delta_rule,
    native_delta_rule_with_states,
    native_kernel_available,
    native_kernel_error,
)

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

StateEdit = Callable[[int, torch.Tensor], torch.Tensor]

RENORM_EPS = 1e-12  # floor of the Frobenius norm in `renormalise_state` (as F.normalize's eps)


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim, in fp32, returned in x's dtype.

    This is fla's `l2norm` (used by `use_qk_l2norm_in_kernel`), not `F.normalize`, which clamps the
    norm at eps instead of adding eps under the square root.
    """
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.square().sum(-1, keepdim=True) + eps)).to(x.dtype)


def _at_least_fp32(S: torch.Tensor) -> torch.Tensor:
    return S if S.dtype in (torch.float32, torch.float64) else S.float()


def _renorm_denominator(S: torch.Tensor, eps: float = RENORM_EPS) -> torch.Tensor:
    """max(||S||_F, eps) over the last two dims (in fp32 or fp64), keepdim: shape (..., 1, 1)."""
    return torch.linalg.vector_norm(_at_least_fp32(S), dim=(-2, -1), keepdim=True).clamp_min(eps)


def renormalise_state(S: torch.Tensor, eps: float = RENORM_EPS) -> torch.Tensor:
    """S / max(||S||_F, eps) per matrix: unit Frobenius norm over the last two dims (K, V).

    S is [..., K, V] (e.g. a state [B, H, K, V]); computed in fp32 (fp64 stays fp64) and returned
    in S's dtype. A zero state stays zero; a state with norm below eps is divided by eps instead
    (no inf or NaN; its gradient there is 1 / eps). Differentiable. This is the non-linear step of
    the renormalised delta rule (`renorm_every`).
    """
    return (_at_least_fp32(S) / _renorm_denominator(S, eps)).to(S.dtype)


def _check_renorm_every(renorm_every) -> int:
    try:
        value = operator.index(renorm_every) if not isinstance(renorm_every, bool) else -1
    except TypeError:
        value = -1
    if value < 0:
        raise ValueError(
            f"renorm_every must be a non-negative integer (0 = never renormalise the state), got {renorm_every!r}."
        )
    return value


def check_shapes(q, k, v, beta, initial_state) -> None:
    if q.ndim != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must both be [B, T, H, K]; got {tuple(q.shape)} and {tuple(k.shape)}.")
    B, T, H, _ = q.shape
    if v.ndim != 4 or v.shape[:3] != (B, T, H):
        raise ValueError(f"v must be [B, T, H, V] = [{B}, {T}, {H}, V]; got {tuple(v.shape)}.")
    if beta.shape != (B, T, H):
        raise ValueError(
            f"beta must be [B, T, H] = [{B}, {T}, {H}] (one scalar per head and token); got {tuple(beta.shape)}."
        )
    if initial_state is not None and initial_state.shape != (B, H, q.shape[-1], v.shape[-1]):
        raise ValueError(
            f"initial_state must be [B, H, K, V] = [{B}, {H}, {q.shape[-1]}, {v.shape[-1]}]; "
            f"got {tuple(initial_state.shape)}."
        )


def _prepare(q, k, v, beta, scale, use_qk_l2norm_in_kernel):
    """fp32 copies of the inputs with q already multiplied by scale (default K ** -0.5)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q, k, v, beta = q.float(), k.float(), v.float(), beta.float()
    if use_qk_l2norm_in_kernel:
        q, k = l2_normalize(q), l2_normalize(k)
    return q * scale, k, v, beta


# --------------------------------------------------------------------------------------------
# Reference: one token at a time.
# --------------------------------------------------------------------------------------------


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
    renorm_every = _check_renorm_every(renorm_every)
    B, T, H, K = q.shape
    V = v.shape[-1]
    out_dtype = q.dtype
    q, k, v, beta = _prepare(q, k, v, beta, scale, use_qk_l2norm_in_kernel)

    S = q.new_zeros(B, H, K, V) if initial_state is None else initial_state.float()
    outputs, states = [], []
    for t in range(T):
        k_t, v_t, b_t = k[:, t], v[:, t], beta[:, t, :, None]  # (B, H, K), (B, H, V), (B, H, 1)
        v_old = torch.einsum("bhkv,bhk->bhv", S, k_t)  # S^T k: what S stores under k_t now
        u_t = b_t * (v_t - v_old)  # (B, H, V)
        S = S + torch.einsum("bhk,bhv->bhkv", k_t, u_t)  # (B, H, K, V)
        if renorm_every and (t + 1) % renorm_every == 0:
            S = renormalise_state(S)  # the non-linear step: unit Frobenius norm per (batch, head)
        if edit is not None:
            S = edit(t, S)
        states.append(S)
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))  # o_t = S_t^T (scale q_t)
    if T == 0:
        o = v.new_zeros(B, 0, H, V)
        all_states = v.new_zeros(B, 0, H, K, V)
    else:
        o = torch.stack(outputs, dim=1)  # (B, T, H, V)
        all_states = torch.stack(states, dim=1)  # (B, T, H, K, V)
    return o.to(out_dtype), (S if output_final_state else None), all_states


# --------------------------------------------------------------------------------------------
# Fast path: chunked WY/UT form, a triangular solve per chunk and a loop over chunks.
# --------------------------------------------------------------------------------------------


def _chunk_forward(
    q, k, v, beta, initial_state, chunk_size: int, with_states: bool, renorm_every: int = 0, phase: int = 0
):
    """Chunked delta rule on prepared fp32 inputs (q already scaled). See the module docstring.

    renorm_every > 0 renormalises the state after every renorm_every-th token; `phase` says how many
    tokens of the first renormalisation segment came before q[:, 0] (0 <= phase < renorm_every),
    so that token i here is token phase + i of the segment grid.

    Returns (o [B, T, H, V], final_state [B, H, K, V], states [B, T, H, K, V] or None).
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    S = q.new_zeros(B, H, K, V) if initial_state is None else initial_state.float()
    if T == 0:
        return v.new_zeros(B, 0, H, V), S, (v.new_zeros(B, 0, H, K, V) if with_states else None)
    if renorm_every:
        return _chunk_forward_renorm(q, k, v, beta, S, chunk_size, with_states, renorm_every, phase)
    C = min(chunk_size, T)  # a short sequence is one chunk, not one padded to chunk_size
    pad = (-T) % C
    if pad:
        # Zero keys and zero beta make the padded steps the identity on S: u = 0, S unchanged.
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
        beta = F.pad(beta, (0, 0, 0, pad))
    o, S, states = _chunk_core(q, k, v, beta, S, C, with_states)
    return o[:, :T], S, (states[:, :T] if with_states else None)


def _chunk_core(q, k, v, beta, S, C: int, with_states: bool, renorm_after: Optional[list] = None):
    """The chunked WY/UT kernel on a length that is a multiple of C, from state S.

    renorm_after[n] True renormalises the carried state after chunk n; the last position of such a
    chunk then reads (and, with states, shows) the renormalised state.
    Returns (o [B, L, H, V], final_state [B, H, K, V], states [B, L, H, K, V] or None).
    """
    B, L, H, K = q.shape
    V = v.shape[-1]
    N = L // C

    qc, kc, vc = (rearrange(x, "b (n c) h d -> b h n c d", c=C) for x in (q, k, v))  # (B, H, N, C, D)
    bc = rearrange(beta, "b (n c) h -> b h n c 1", c=C)  # (B, H, N, C, 1)
    k_beta, v_beta = kc * bc, vc * bc

    # A = I + strict_tril(diag(beta) K K^T); unitriangular=True supplies the unit diagonal.
    A = torch.tril(k_beta @ kc.transpose(-1, -2), diagonal=-1)  # (B, H, N, C, C)
    X = torch.linalg.solve_triangular(A, torch.cat([v_beta, k_beta], dim=-1), upper=False, unitriangular=True)
    U0, W = X.split([V, K], dim=-1)  # (B, H, N, C, V), (B, H, N, C, K)

    # Chunk-to-chunk carry: S_{n+1} = S_n + K_n^T U0_n - (K_n^T W_n) S_n. Only this loop is sequential.
    kt = kc.transpose(-1, -2)  # (B, H, N, K, C)
    KtU0 = kt @ U0  # (B, H, N, K, V)
    KtW = kt @ W  # (B, H, N, K, K)
    starts, denominators = [], []
    for n in range(N):
        starts.append(S)
        S = S + KtU0[:, :, n] - KtW[:, :, n] @ S
        if renorm_after is not None:
            d = _renorm_denominator(S) if renorm_after[n] else S.new_ones(B, H, 1, 1)  # (B, H, 1, 1)
            S = S / d if renorm_after[n] else S
            denominators.append(d)
    S_start = torch.stack(starts, dim=2)  # (B, H, N, K, V): state before each chunk

    U = U0 - W @ S_start  # (B, H, N, C, V): the values actually written, u_t
    attn = torch.tril(qc @ kc.transpose(-1, -2))  # (B, H, N, C, C), diagonal kept
    o = qc @ S_start + attn @ U  # (B, H, N, C, V)
    if renorm_after is not None:
        # The last token of a renormalised chunk reads S_t after the renormalisation: o_t / d.
        d = torch.stack(denominators, dim=2)  # (B, H, N, 1, 1)
        o = torch.cat([o[:, :, :, : C - 1], o[:, :, :, C - 1 :] / d], dim=3)
    o = rearrange(o, "b h n c d -> b (n c) h d")

    states = None
    if with_states:
        k_n = rearrange(kc, "b h n c d -> b n c h d")
        u_n = rearrange(U, "b h n c d -> b n c h d")
        S_n = rearrange(S_start, "b h n k v -> b n h k v")
        states = _chunk_prefix_states(k_n, u_n, S_n)  # (B, N, C, H, K, V)
        if renorm_after is not None:
            d_n = rearrange(d, "b h n 1 1 -> b n 1 h 1 1")
            states = torch.cat([states[:, :, : C - 1], states[:, :, C - 1 :] / d_n], dim=2)
        states = states.reshape(B, N * C, H, K, V)
    return o, S, states


def _chunk_forward_renorm(q, k, v, beta, S, chunk_size: int, with_states: bool, R: int, phase: int):
    """`_chunk_forward` with renormalisation after every R-th token (T > 0, S already fp32).

    Layout: `phase` identity steps are put in front, so that the renormalisation points fall at the
    ends of segments of R steps. Each complete segment is front-padded with identity steps (zero
    q, k, v and beta: u = 0, S unchanged) to a multiple of C = min(chunk_size, R), so its last token
    ends a chunk and the state is renormalised in the chunk-to-chunk carry; the incomplete last
    segment (if any) is end-padded to a multiple of C and not renormalised. One kernel call.
    """
    B, T, H, K = q.shape
    C = min(chunk_size, R)
    L_seg = -(-R // C) * C  # segment length after padding: a multiple of C
    front = L_seg - R
    total = phase + T
    n_full = total // R
    tail = total - n_full * R

    def layout(x: torch.Tensor) -> torch.Tensor:  # (B, T, ...) -> (B, n_full * L_seg + tail padded, ...)
        extra = (0, 0) * (x.ndim - 2)
        x = F.pad(x, (*extra, phase, 0))
        pieces = []
        if n_full:
            full = x[:, : n_full * R].unflatten(1, (n_full, R))  # (B, n_full, R, ...)
            full = F.pad(full, (*extra, front, 0))  # (B, n_full, L_seg, ...)
            pieces.append(full.flatten(1, 2))
        if tail:
            pieces.append(F.pad(x[:, n_full * R :], (*extra, 0, (-tail) % C)))
        return torch.cat(pieces, dim=1) if len(pieces) > 1 else pieces[0]

    def unlayout(x: torch.Tensor) -> torch.Tensor:  # inverse of layout, dropping the padding
        pieces = []
        if n_full:
            full = x[:, : n_full * L_seg].unflatten(1, (n_full, L_seg))[:, :, front:]
            pieces.append(full.flatten(1, 2))
        if tail:
            pieces.append(x[:, n_full * L_seg : n_full * L_seg + tail])
        x = torch.cat(pieces, dim=1) if len(pieces) > 1 else pieces[0]
        return x[:, phase:]

    per_seg = L_seg // C
    renorm_after = [(n + 1) % per_seg == 0 for n in range(n_full * per_seg)]
    renorm_after += [False] * (-(-tail // C))
    o, S, states = _chunk_core(
        layout(q), layout(k), layout(v), layout(beta), S, C, with_states, renorm_after=renorm_after
    )
    return unlayout(o), S, (unlayout(states) if with_states else None)


def _chunk_prefix_states(k_n: torch.Tensor, u_n: torch.Tensor, S_start: torch.Tensor) -> torch.Tensor:
    """S_t = S_start + sum_{s <= t} k_s u_s^T for every position t of every chunk.

    k_n (B, N, C, H, K), u_n (B, N, C, H, V), S_start (B, N, H, K, V) -> (B, N, C, H, K, V), laid out
    so that merging (N, C) into T is a view. Every operation covers all N chunks at once.
    """
    B, N, C, H, K = k_n.shape
    V = u_n.shape[-1]
    if torch.is_grad_enabled() and any(t.requires_grad for t in (k_n, u_n, S_start)):
        # Differentiable: all outer products, then the within-chunk prefix sum as one matmul with
        # a lower-triangular ones matrix (torch.cumsum over a middle dim is ~10x slower on CPU).
        outer = torch.einsum("bnchk,bnchv->bnchkv", k_n, u_n)  # (B, N, C, H, K, V)
        outer[:, :, 0] += S_start
        ones_tril = torch.ones(C, C, dtype=outer.dtype, device=outer.device).tril()
        return (ones_tril @ outer.reshape(B, N, C, H * K * V)).reshape(B, N, C, H, K, V)
    # Inference: write each position's state once, S_c = S_{c-1} + k_c u_c^T, as fused
    # multiply-adds straight into the output (C steps, each over all chunks, batch and heads).
    states = k_n.new_empty(B, N, C, H, K, V)
    prev = S_start
    for c in range(C):
        torch.addcmul(prev, k_n[:, :, c, :, :, None], u_n[:, :, c, :, None, :], out=states[:, :, c])
        prev = states[:, :, c]
    return states


def fla_kernels_available() -> bool:
    """True when fla's Triton delta-rule kernels can run here (CUDA device and fla importable)."""
    if not torch.cuda.is_available():
        return False
    try:
        import fla.ops.delta_rule  # noqa: F401
    except Exception:  # fla is optional at run time; any import failure means "no kernels"
        return False
    return True


def _fla_delta_rule(q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, chunk_size):
    """fla's CUDA kernels. Its chunk kernel refuses fp32, so fp32 goes to its fused recurrent kernel."""
    from fla.ops.delta_rule import chunk_delta_rule as fla_chunk
    from fla.ops.delta_rule import fused_recurrent_delta_rule as fla_recurrent

    common = dict(
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
    )
    if q.dtype == torch.float32:
        return fla_recurrent(q, k, v, beta.to(q.dtype), **common)
    return fla_chunk(q, k, v, beta.to(q.dtype), chunk_size=chunk_size if chunk_size in (16, 32, 64) else 64, **common)


def _fla_delta_rule_renorm(
    q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, chunk_size, R: int
):
    """fla's kernels one segment of R tokens at a time, renormalising the state between segments."""
    B, T, H, _ = q.shape
    S = initial_state
    outputs = []
    for start in range(0, T, R):
        stop = min(start + R, T)
        o_seg, S = _fla_delta_rule(
            *(x[:, start:stop].contiguous() for x in (q, k, v, beta)),
            scale,
            S,
            True,
            use_qk_l2norm_in_kernel,
            min(chunk_size, R),
        )
        if stop - start == R:  # a complete segment: renormalise; its last token reads the result
            d = _renorm_denominator(S)  # (B, H, 1, 1)
            S = S.float() / d
            last = (o_seg[:, -1:].float() / rearrange(d, "b h 1 1 -> b 1 h 1")).to(o_seg.dtype)
            o_seg = torch.cat([o_seg[:, :-1], last], dim=1)
        outputs.append(o_seg)
    o = torch.cat(outputs, dim=1) if outputs else q.new_zeros(*q.shape[:3], v.shape[-1])
    if output_final_state and S is None:  # T == 0 and no initial state
        S = q.new_zeros(B, H, q.shape[-1], v.shape[-1], dtype=torch.float32)
    return o, (S if output_final_state else None)


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

    Returns:
        (o [B, T, H, V] in q's dtype, final_state [B, H, K, V] (fp32 on the torch path) or None).
        The torch path computes in fp32 (bf16/fp16 inputs are upcast) and is differentiable.
    """
    check_shapes(q, k, v, beta, initial_state)
    renorm_every = _check_renorm_every(renorm_every)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}.")
    if use_fla is None:
        use_fla = q.is_cuda and fla_kernels_available()
    if use_fla:
        if not (q.is_cuda and fla_kernels_available()):
            raise RuntimeError(
                "use_fla=True needs CUDA tensors and an importable fla; pass use_fla=None or False "
                "to use the pure-torch kernel."
            )
        if renorm_every:
            return _fla_delta_rule_renorm(
                q,
                k,
                v,
                beta,
                scale,
                initial_state,
                output_final_state,
                use_qk_l2norm_in_kernel,
                chunk_size,
                renorm_every,
            )
        return _fla_delta_rule(
            q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, chunk_size
        )

    out_dtype = q.dtype
    qp, kp, vp, bp = _prepare(q, k, v, beta, scale, use_qk_l2norm_in_kernel)
    if use_native_kernel(native, qp, renorm_every, initial_state) and kp.device == vp.device == bp.device == qp.device:
        o, S = native_delta_rule(qp, kp, vp, bp, None if initial_state is None else initial_state.float())
    else:
        o, S, _ = _chunk_forward(
            qp, kp, vp, bp, initial_state, chunk_size, with_states=False, renorm_every=renorm_every
        )
    return o.to(out_dtype), (S if output_final_state else None)


def use_native_kernel(
    native: Optional[bool], q: torch.Tensor, renorm_every: int, initial_state: Optional[torch.Tensor] = None
) -> bool:
    on_cpu = q.device.type == "cpu" and (initial_state is None or initial_state.device.type == "cpu")
    possible = on_cpu and not renorm_every and q.shape[1] > 0
    if native is None:
        return possible and native_kernel_available()
    if native and not (possible and native_kernel_available()):
        raise RuntimeError(
            "native=True needs CPU tensors, renorm_every=0 and a C kernel that builds here"
            + ("" if native_kernel_available() else f" ({native_kernel_error()})")
        )
    return bool(native)


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
) -> tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
    """The chunked kernel plus every per-step state S_t.

    Same arguments as `chunk_delta_rule`; same returns as `delta_rule_recurrence`:
    (o [B, T, H, V], final_state or None, states [B, T, H, K, V] fp32). Memory is B*T*H*K*V floats.
    With renorm_every = R > 0, states[:, t] at a renormalisation point ((t + 1) % R == 0) is the
    state after the renormalisation, as in `delta_rule_recurrence`. state_every = n keeps only the
    state after every n-th step (T a multiple of n): [B, T / n, H, K, V], one per DeltaProduct token.

    native None: without gradients on a CPU the C kernel copies each kept state out as it passes
    (about the cost of the forward, and o equals `chunk_delta_rule`'s to the bit); otherwise (and with
    native=False) the chunked torch kernel, vectorised chunk by chunk and differentiable.
    """
    check_shapes(q, k, v, beta, initial_state)
    renorm_every = _check_renorm_every(renorm_every)
    check_state_every(state_every, q.shape[1])
    out_dtype = q.dtype
    qp, kp, vp, bp = _prepare(q, k, v, beta, scale, use_qk_l2norm_in_kernel)
    if native_states_apply(native, qp, renorm_every, initial_state, (qp, kp, vp, bp)):
        o, S, states = native_delta_rule_with_states(
            qp, kp, vp, bp, None if initial_state is None else initial_state.float(), stride=state_every
        )
    else:
        o, S, states = _chunk_forward(
            qp, kp, vp, bp, initial_state, chunk_size, with_states=True, renorm_every=renorm_every
        )
        states = states[:, state_every - 1 :: state_every]
    return o.to(out_dtype), (S if output_final_state else None), states


def check_state_every(state_every: int, T: int) -> None:
    """Keeping every n-th state needs n >= 1 dividing the sequence length (a DeltaProduct's n_h sub-tokens)."""
    if state_every < 1 or T % state_every:
        raise ValueError(f"state_every must divide the sequence length T = {T}; got {state_every}.")


def native_states_apply(
    native: Optional[bool], q: torch.Tensor, renorm_every: int, initial_state: Optional[torch.Tensor], inputs: tuple
) -> bool:
    """Whether the C kernel returns the states: `native` as `chunk_delta_rule`'s, and with None only
    when no gradient is wanted (the C states carry no graph)."""
    if (
        native is None
        and torch.is_grad_enabled()
        and any(x is not None and x.requires_grad for x in (*inputs, initial_state))
    ):
        return False
    return use_native_kernel(native, q, renorm_every, initial_state)


# --------------------------------------------------------------------------------------------
# State edits: continue the recurrence from states a hook replaced.
# --------------------------------------------------------------------------------------------


def replay_segments(
    original_states: torch.Tensor,
    edited_states: torch.Tensor,
    run_segment: Callable[[int, int, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """The trajectory [B, T, H, K, V] (fp32) that continues from every state an edit changed.

    Wherever (b, t) of `edited_states` differs from `original_states`, S_t := the edited one for that
    sequence and the steps after it are recomputed; steps before the first edit are kept.
    `run_segment(start, stop, S)` gives the states of tokens start .. stop - 1 continuing from S
    (the state after token start - 1): the chunked kernel of the model, so a handful of edits cost
    about one extra forward.
    """
    if original_states.shape != edited_states.shape:
        raise ValueError(
            f"a state hook must return the shape it was given, {tuple(original_states.shape)}; "
            f"got {tuple(edited_states.shape)}."
        )
    B, T = edited_states.shape[:2]
    edited_states = edited_states.float()
    changed = (edited_states != original_states.float()).flatten(2).any(-1)  # (B, T)
    times = torch.nonzero(changed.any(0)).flatten().tolist()
    if not times:
        return edited_states
    pieces = [edited_states[:, : times[0]]]  # untouched prefix (equal to the original there)
    current = edited_states[:, times[0]]  # (B, H, K, V); rows not edited here are original too
    pieces.append(current[:, None])
    for start, stop in zip(times, times[1:] + [T]):
        if start + 1 >= T:
            continue
        seg_states = run_segment(start + 1, stop + 1 if stop < T else T, current)  # (B, L, H, K, V)
        if stop < T:
            # At the next edited step, sequences edited there take the hook's state.
            keep = changed[:, stop].view(B, 1, 1, 1)
            current = torch.where(keep, edited_states[:, stop], seg_states[:, -1])
            seg_states = torch.cat([seg_states[:, :-1], current[:, None]], dim=1)
        pieces.append(seg_states)
    return torch.cat(pieces, dim=1)


def replay_with_state_edits(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    original_states: torch.Tensor,
    edited_states: torch.Tensor,
    scale: Optional[float] = None,
    chunk_size: int = 64,
    renorm_every: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Re-run the delta rule so that every state an edit changed is what the recurrence continues from.

    `original_states` is the trajectory [B, T, H, K, V] a hook was shown; `edited_states` is what it
    returned. Wherever (b, t) differs, S_t := edited_states[b, t] for that sequence, the read-out o_t
    uses it, and S_{t+1}, S_{t+2}, ... are recomputed from it (so later entries of `edited_states`
    for that sequence matter only where they too differ from `original_states`: "replacement"
    semantics, exact for patching states in from another run). Steps before the first edit are
    kept. Between edited steps the chunked kernel runs from the edited state, so a handful of edits
    cost about one extra forward; an edit at every step degrades to one tiny segment per token.

    renorm_every must be the one the trajectory was computed with: the replayed steps renormalise
    after token t whenever (t + 1) % renorm_every == 0 (absolute t). An edited S_t is taken as it is
    (it was shown after that step's renormalisation; the edit comes last, as the recurrence's `edit`).

    q, k must be what the recurrence used (already normalised); q is scaled here. The initial state
    needs no argument: it is already folded into `original_states`. Returns
    (o [B, T, H, V] in q's dtype, states [B, T, H, K, V] fp32: the trajectory actually followed).
    """
    check_shapes(q, k, v, beta, None)
    renorm_every = _check_renorm_every(renorm_every)
    scale = q.shape[-1] ** -0.5 if scale is None else scale

    def run_segment(start: int, stop: int, S: torch.Tensor) -> torch.Tensor:
        # q's scale does not matter here, only the states are used. The phase puts token `start` at
        # its place on the renormalisation grid.
        return _chunk_forward(
            *(x[:, start:stop].float() for x in (q, k, v, beta)),
            S,
            chunk_size,
            with_states=True,
            renorm_every=renorm_every,
            phase=start % renorm_every if renorm_every else 0,
        )[2]

    states = replay_segments(original_states, edited_states, run_segment)
    o = torch.einsum("bthkv,bthk->bthv", states, q.float() * scale)  # o_t = S_t^T (scale q_t)
    return o.to(q.dtype), states

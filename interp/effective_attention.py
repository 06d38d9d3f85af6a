"""Exact effective attention of a delta-rule head: which earlier values each read-out is made of.

Given its keys, write strengths and decays, a delta-rule head's read-out is linear in its values
(models/ops/delta_rule.py, gated_delta_rule.py; state in fla's [K, V] layout, q~_t = q_t / sqrt(d_k)):

    S_t = M_t S_{t-1} + sum_j (writes of token t),   o_t = S_t^T q~_t

so o_t = sum_{s <= t} sum_j A[t, s, j] v_{s, j} with

    A[t, s, j] = beta_{s,j} q~_t^T  M_t M_{t-1} ... M_{s+1}  H_{s,n-1} ... H_{s,j+1}  k_{s,j}

where H_{s,j} = I - beta_{s,j} k_{s,j} k_{s,j}^T is one Householder-like factor and the per-token
transition is M_s = H_{s,n-1} ... H_{s,0} alpha_s (alpha_s = exp(g_s), the decay; 1 without a gate;
n = 1 factor except in DeltaProduct). DeltaNet: n = 1, alpha = 1; Gated DeltaNet: n = 1 with decay;
DeltaProduct: n = n_h factors, the last axis of A; Kimi Delta Attention (KDA): n = 1 with a decay per
key channel, M_s = H_s Diag(alpha_s), which does not commute with H_s (the scan applies it after H_s^T).
Unlike the heuristic that drops the erase terms (A ~ q_t . k_s), this keeps every -beta k k^T, so
z = hook_z is reconstructed from hook_v exactly.

How it is computed (`effective_pattern`): a backward scan over key positions s = T-1 .. 0 carrying
one query-side vector w_t per query (w_t = q~_t when s reaches t, then w_t <- H^T w_t factor by
factor and w_t <- alpha_s w_t): A[t, s, j] = beta_{s,j} k_{s,j} . w_t at the moment factor (s, j)
is reached (w_t <- Diag(alpha_s) w_t channel-wise for KDA). Cost O(T * T_q * d_k) per head, memory
O(T_q * d_k) plus the output (T_q x T): no T x T product of d_k x d_k matrices is formed, so T = 2,048
runs in about a second on a CPU. Queries can be restricted (`queries=`) to the rows one needs (e.g. the
reveal positions), which makes it O(T).

The renormalised variant (state_norm_every > 0) rescales the state by a data-dependent norm and is
refused. Hooks read: blocks.{l}.attn.hook_q, hook_k, hook_beta (+ hook_gate); z from hook_v.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Union

import plotly.graph_objects as go
import torch

from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices
from deltalens.interp.capture_plan import capture_limit
from deltalens.models.architecture import (
    architecture_of,
    delta_layers_of,
    is_delta_rule,
    require_delta_rule,
    require_householder,
    require_one_pattern,
)

__all__ = [
    "EFFECTIVE_PATTERN",
    "effective_attention",
    "effective_pattern",
    "run_with_effective_pattern",
    "reconstruct_z",
    "effective_attention_figure",
    "layer_inputs",
]

EFFECTIVE_PATTERN = "blocks.{layer}.attn.hook_effective_pattern"  # (batch, head, query, key[, factor])


def _check_model(model, layer: int) -> None:
    require_delta_rule(model, "delta-rule recurrence to unroll")
    require_householder(model, "effective attention")
    if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < model.cfg.n_layers:
        raise DeltalensError(f"layer {layer!r} is out of range: this model has {model.cfg.n_layers} layers.")
    require_one_pattern(model, "effective attention")
    if getattr(model, "state_norm_every", 0):
        raise DeltalensError(
            "this model renormalises its state (state_norm_every > 0), which is not linear in the values; "
            "effective attention is exact only for the plain delta rule."
        )


def layer_inputs(model, cache, layer: int) -> dict[str, torch.Tensor]:
    """q (B, T, H, d_k), k (B, T, H, n, d_k), v (B, T, H, n, d_v), beta (B, T, H, n), log_gate (B, T, H),
    (B, T, H, d_k) per channel (KDA), or None, z (B, T, H, d_v) of one layer from a run_with_cache cache (v
    and z None where not cached); a factor axis is added where absent."""
    name = f"blocks.{layer}.attn.hook_"
    hooks = getattr(model, "hook_dict", None)
    if hooks is not None and f"{name}beta" not in hooks:  # no beta: not a delta-rule layer
        raise DeltalensError(
            f"layer {layer} has no delta rule to unroll (a hybrid's softmax-attention or M²RNN layer); "
            f"its delta-rule layers: {delta_layers_of(model)}"
        )
    try:
        q, k, beta = (cache[name + x] for x in ("q", "k", "beta"))
    except KeyError:
        raise DeltalensError(
            f"the cache lacks layer {layer}'s q, k or beta; run the model with run_with_cache on those hooks."
        ) from None
    v = cache[name + "v"] if (name + "v") in cache else None
    if k.ndim == 4:  # no factor axis (DeltaNet, Gated DeltaNet)
        k, beta = k[:, :, :, None], beta[:, :, :, None]
        v = None if v is None else v[:, :, :, None]
    gate = cache[name + "gate"] if (name + "gate") in cache else None
    log_gate = None if gate is None else gate.double().clamp_min(torch.finfo(torch.float64).tiny).log()
    z = cache[name + "z"] if (name + "z") in cache else None
    return {"q": q, "k": k, "v": v, "beta": beta, "log_gate": log_gate, "z": z}


def check_pattern_size(B: int, H: int, Tq: int, T: int, n: int, dtype=torch.float64, max_bytes=None) -> None:
    """Refuse, before anything is allocated, a pattern (B, H, Tq, T, n) bigger than the capture limit
    (max_bytes, $DELTALENS_MAX_CAPTURE_GB, or half the available memory: interp/capture_plan.py)."""
    need = B * H * Tq * T * n * (torch.finfo(dtype).bits // 8)
    limit, source = capture_limit(max_bytes)
    if need > limit:
        raise DeltalensError(
            f"the effective attention of {B} trace(s) x {H} head(s) x {Tq:,} queries x {T:,} keys would take "
            f"{need / 2**30:,.2f} GB, more than the {limit / 2**30:,.2f} GB limit ({source}); pass queries= (e.g. the "
            f"reveal positions), one head, or shorter inputs"
        )


@torch.no_grad()
def effective_pattern(
    q: torch.Tensor,
    k: torch.Tensor,
    beta: torch.Tensor,
    log_gate: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    queries: Optional[torch.Tensor] = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """A (B, H, T_q, T, n): the exact read-out weights of every head (module docstring).

    q (B, T, H, d_k) as hook_q; k (B, T, H, n, d_k); beta (B, T, H, n); log_gate (B, T, H) = log alpha,
    (B, T, H, d_k) for a per-channel decay (KDA), or None; scale default d_k ** -0.5; queries: the query
    positions (1-D, increasing; None = all T).
    """
    B, T, H, K = q.shape
    n = k.shape[3]
    if k.shape != (B, T, H, n, K) or beta.shape != (B, T, H, n):
        raise DeltalensError(f"k {tuple(k.shape)} and beta {tuple(beta.shape)} do not match q {tuple(q.shape)}.")
    scale = K**-0.5 if scale is None else scale
    qpos = torch.arange(T) if queries is None else torch.as_tensor(queries, dtype=torch.long).flatten().cpu()
    if qpos.numel() and (int(qpos.min()) < 0 or int(qpos.max()) >= T):
        raise DeltalensError(f"query positions must lie in [0, {T}); got {qpos.tolist()[:8]}...")
    if qpos.numel() > 1 and bool((qpos[1:] <= qpos[:-1]).any()):
        raise DeltalensError("query positions must be strictly increasing.")
    Tq = qpos.numel()
    check_pattern_size(B, H, Tq, T, n, dtype)
    device = q.device
    qs = (q.to(dtype) * scale).permute(0, 2, 1, 3)  # (B, H, T, K)
    ks = k.to(dtype).permute(0, 2, 1, 3, 4)  # (B, H, T, n, K)
    bs = beta.to(dtype).permute(0, 2, 1, 3)  # (B, H, T, n)
    alpha = None  # (B, H, T, 1), or (B, H, T, K) per channel: what w_t is multiplied by at each s
    if log_gate is not None:
        if log_gate.shape not in ((B, T, H), (B, T, H, K)):
            raise DeltalensError(f"log_gate {tuple(log_gate.shape)} must be (B, T, H) or (B, T, H, d_k) as q.")
        alpha = log_gate.to(dtype).exp().reshape(B, T, H, -1).transpose(1, 2)
    A = torch.zeros(B, H, Tq, T, n, dtype=dtype, device=device)
    W = torch.zeros(B, H, Tq, K, dtype=dtype, device=device)  # query-side vectors, zero until s reaches t
    slot = {int(p): i for i, p in enumerate(qpos.tolist())}
    first = int(qpos.max()) if Tq else -1  # nothing to do after the last query
    for s in range(first, -1, -1):
        if s in slot:
            W[:, :, slot[s]] = qs[:, :, s]
        for j in range(n - 1, -1, -1):
            kj = ks[:, :, s, j]  # (B, H, K)
            proj = torch.einsum("bhqk,bhk->bhq", W, kj)  # k_{s,j} . w_t
            bj = bs[:, :, s, j, None]  # (B, H, 1)
            A[:, :, :, s, j] = bj * proj
            W = W - (bj * proj)[..., None] * kj[:, :, None, :]  # w <- (I - beta k k^T) w
        if alpha is not None:
            W = W * alpha[:, :, s, None, :]  # M_s^T = Diag(alpha_s) H_s^T: the decay after the factors
    return A


def reconstruct_z(A: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """z (B, T_q, H, d_v) = sum over key positions and factors of A (B, H, T_q, T, n) times v (B, T, H, n, d_v)."""
    return torch.einsum("bhqsn,bshnd->bqhd", A.to(v.dtype), v)


def _cache_for(model, tokens, layers: Sequence[int]):
    names = {f"blocks.{layer}.attn.hook_{x}" for layer in layers for x in ("q", "k", "v", "beta", "gate", "z")}
    tokens = torch.as_tensor(tokens)
    if tokens.ndim == 1:
        tokens = tokens[None]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits, cache = model.run_with_cache(tokens.to(model.device), names_filter=lambda name: name in names)
    finally:
        model.train(was_training)
    return logits, cache


@integer_indices("layer", "head")
def effective_attention(
    model,
    tokens,
    layer: int,
    head: Optional[int] = None,
    *,
    queries: Optional[Union[Sequence[int], torch.Tensor]] = None,
    cache=None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The exact effective attention of one delta-rule head (or all heads of the layer with head=None).

    Returns (batch, query, key) for DeltaNet and Gated DeltaNet, (batch, query, key, factor) for
    DeltaProduct, so that hook_z[:, t, head] = sum over keys (and factors) of A[:, t, s(, j)] v_{s(, j)};
    with head=None a head axis comes second (batch, head, query, key[, factor]), as TransformerLens's
    hook_pattern. tokens (batch, pos); queries: keep only those rows (positions); cache: a
    run_with_cache cache of these tokens to read q, k, beta (and the gate) from instead of running.
    Computed in float64 and returned in `dtype`.

    >>> A = dl.effective_attention(model, batch["tokens"][:1], 0, 3)   # (batch, query, key)
    >>> A.shape[-1] == batch["tokens"].shape[1]
    True
    """
    _check_model(model, layer)
    if head is not None and not (isinstance(head, int) and 0 <= head < model.cfg.n_heads):
        raise DeltalensError(f"head {head!r} is out of range: layer {layer} has {model.cfg.n_heads} heads.")
    if cache is None:
        shape = torch.as_tensor(tokens).shape
        B, T = (1, shape[-1]) if len(shape) == 1 else (shape[0], shape[-1])
        n_q = T if queries is None else torch.as_tensor(queries).numel()
        check_pattern_size(B, 1 if head is not None else model.cfg.n_heads, n_q, T, 1)  # before the forward
        _, cache = _cache_for(model, tokens, [layer])
    inp = layer_inputs(model, cache, layer)
    pick = slice(None) if head is None else slice(head, head + 1)
    A = effective_pattern(
        inp["q"][:, :, pick],
        inp["k"][:, :, pick],
        inp["beta"][:, :, pick],
        None if inp["log_gate"] is None else inp["log_gate"][:, :, pick],
        queries=queries,
    ).to(dtype)
    if architecture_of(model) != "deltaproduct":
        A = A[..., 0]
    return A[:, 0] if head is not None else A


@integer_indices("layers")
def run_with_effective_pattern(model, tokens, layers: Optional[Sequence[int]] = None, names_filter=None):
    """(logits, cache) of `model.run_with_cache(tokens)` plus blocks.{l}.attn.hook_effective_pattern for each
    layer in `layers` (None = every delta-rule layer: a hybrid's attention layers have their own hook_pattern):
    (batch, head, query, key[, factor]), TransformerLens's pattern layout.

    names_filter: what else to cache (None = everything, as run_with_cache).

    >>> logits, cache = dl.run_with_effective_pattern(model, batch["tokens"][:1], layers=[0])
    >>> cache["blocks.0.attn.hook_effective_pattern"].shape[1]     # heads
    4
    """
    layers = delta_layers_of(model) if layers is None and is_delta_rule(architecture_of(model)) else layers
    layers = list(range(model.cfg.n_layers)) if layers is None else list(layers)
    for layer in layers:
        _check_model(model, layer)
    needed = {f"blocks.{layer}.attn.hook_{x}" for layer in layers for x in ("q", "k", "v", "beta", "gate")}
    tokens = torch.as_tensor(tokens)
    tokens = tokens[None] if tokens.ndim == 1 else tokens
    keep = names_filter if callable(names_filter) else (lambda name: True)
    if isinstance(names_filter, (list, tuple, set)):
        wanted = set(names_filter)
        keep = lambda name: name in wanted  # noqa: E731
    with torch.no_grad():
        logits, cache = model.run_with_cache(
            tokens.to(model.device), names_filter=lambda name: keep(name) or name in needed
        )
    store = cache.cache_dict if hasattr(cache, "cache_dict") else cache
    for layer in layers:
        store[EFFECTIVE_PATTERN.format(layer=layer)] = effective_attention(model, tokens, layer, cache=cache)
    return logits, cache


@integer_indices("factor")
def effective_attention_figure(
    A: torch.Tensor,
    labels: Optional[Sequence[str]] = None,
    batch_index: int = 0,
    factor: Optional[int] = None,
    title: str = "Effective attention",
) -> go.Figure:
    """Heatmap of one sequence's effective attention (query rows, key columns); a DeltaProduct's factors are
    summed unless `factor` picks one. labels: one string per position (e.g. the decoded tokens).

    >>> A = dl.effective_attention(model, batch["tokens"][:1], 0, 3)
    >>> fig = dl.effective_attention_figure(A)
    >>> fig.data[0].type
    'heatmap'
    """
    M = A[batch_index].detach().float().cpu()
    if M.ndim == 3:
        M = M.sum(-1) if factor is None else M[..., factor]
    if M.ndim != 2:
        raise DeltalensError(f"expected (batch, query, key[, factor]) for one head, got shape {tuple(A.shape)}.")
    axis = None if labels is None else [f"{i}:{label}" for i, label in enumerate(labels)]
    limit = float(M.abs().max()) or 1.0
    fig = go.Figure(
        go.Heatmap(
            z=M.numpy(),
            x=axis[: M.shape[1]] if axis else None,
            y=axis[: M.shape[0]] if axis and M.shape[0] == M.shape[1] else None,
            colorscale="RdBu",
            zmid=0.0,
            zmin=-limit,
            zmax=limit,
            colorbar={"title": "A[t, s]"},
        )
    )
    fig.update_layout(
        title=title, xaxis_title="key position s", yaxis_title="query position t", yaxis_autorange="reversed"
    )
    return fig

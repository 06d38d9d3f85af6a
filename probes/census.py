"""A transition census: per layer and head of any delta-rule model, what its per-token transitions do.

    c = census(model, tokens)                 # token ids (B, T), or a batch of traces (its "kinds" too)
    c.heads                                   # one row per (layer, head): the table below
    c.table(), c.to_dict()                    # text and JSON; census_figure(c) the layer x head heatmap

The transition of one token in one head is A_t = alpha_t (I - beta_t k_t k_t^T) (times further factors in a
DeltaProduct): its eigenvalues are alpha_t (on k_t's complement) and alpha_t (1 - beta_t) along k_t, so
beta_t > 1 is a negative eigenvalue (a reflection at beta = 2). Per head, over the tokens given (padding
left out):

    tokens          transitions counted (tokens x factors)
    beta_gt1        share with beta > 1: a negative eigenvalue 1 - beta
    beta_gt1_action the same on action tokens alone (traces only): where a tracking head reflects
    reflection_fraction  share whose eigenvalue 1 - beta_t ||k_t||^2 is below -0.9: a near-reflection (the
                    eigenvalue report's threshold); what singles out a tracking head where several heads have
                    beta > 1 on every action but only one reaches beta = 2
    reflection_fraction_action  the same on action tokens alone (traces only)
    mean_beta       mean beta
    min_eigenvalue  the smallest delta-factor eigenvalue 1 - beta_t ||k_t||^2 over the tokens (and factors): the
                    eigenvalue report's column, by the same function (probes/eigenvalues.py `min_eigenvalue`)
    min_decayed_eigenvalue  the smallest eigenvalue of the whole transition over the tokens, the decay in:
                    alpha_t (1 - beta_t ||k_t||^2) (one factor), or with a decay per key channel (KDA:
                    A_t = (I - beta_t k_t k_t^T) Diag(alpha_t)) that of the similar symmetric
                    Diag(alpha_t) - beta_t (sqrt(alpha_t) * k_t)(sqrt(alpha_t) * k_t)^T; for Comba's
                    A_t = alpha_t I - beta_t k_t p_t^T (hook_p) the smaller of alpha_t and alpha_t - beta_t p_t.k_t
                    (its eigenvalues, all real; min_eigenvalue is then 1 - beta_t p_t.k_t, the transition at
                    alpha = 1, which beta in [0, 1] keeps >= 0: Comba's negative eigenvalues come from the decay);
                    for RWKV-7's A_t = Diag(alpha_t) - (kk_t * a_t) kk_t^T (hook_kk; hook_beta is its learning
                    rate a_t, one per key channel) the smallest eigenvalue of the matrix itself: with a_t >= 0 on
                    every channel it is similar (by Diag(sqrt(a_t))) to the symmetric Diag(alpha_t) - c c^T,
                    c = sqrt(a_t) * kk_t, so all its eigenvalues are real; otherwise the smallest real part of its
                    eigenvalues. min_eigenvalue is 1 - kk_t.(a_t * kk_t), the transition at alpha = 1 (its other
                    eigenvalues are 1), >= 0 with fla's a in (0, 1): RWKV-7's negative eigenvalues come from the decay
    neg_gate        share of negative decay channels (NaN: no family here allows alpha < 0)
    complex_fraction  share of transitions with a pair of complex eigenvalues (RWKV-7, counted: none while every
                    a_t >= 0, as fla's sigmoid keeps it; an edit that makes a channel's a_t negative can rotate);
                    NaN for the families whose transitions have real eigenvalues by their form
    effective_rank  mean Roy-Vetterli effective rank of S_t, at up to `rank_positions` positions per trace

Every number comes from the hooks (hook_beta, hook_gate, hook_state), so the census reads the shipped
checkpoints, fla's folders and the transformers families (Qwen3.5, OLMo-Hybrid, Kimi Linear) alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from deltalens.core.colour_scales import scale_for
from deltalens.core.errors import DeltalensError
from deltalens.probes.eigenvalues import REFLECTION_THRESHOLD, min_eigenvalue, transition_eigenvalues
from deltalens.probes.subspace import effective_rank

__all__ = ["Census", "census", "census_figure"]

COLUMNS = (
    "tokens",
    "beta_gt1",
    "beta_gt1_action",
    "reflection_fraction",
    "reflection_fraction_action",
    "mean_beta",
    "min_eigenvalue",
    "min_decayed_eigenvalue",
    "neg_gate",
    "complex_fraction",
    "effective_rank",
)
ACTION = 2  # tasks' TokenKind.ACTION


@dataclass
class Census:
    """A transition census: one row per head of what its transitions do over a batch (columns: COLUMNS).

    >>> result = dl.census(model, batch)
    >>> len(result.heads)                                  # one row per head
    8
    """

    heads: pd.DataFrame  # one row per (layer, head): COLUMNS
    architecture: str

    def table(self) -> str:
        return self.heads.to_string(index=False, float_format=lambda x: f"{x:.3f}")

    def to_dict(self) -> dict[str, Any]:
        rows = self.heads.astype(object).where(self.heads.notna(), None)
        return {"architecture": self.architecture, "heads": rows.to_dict(orient="records")}

    def top(self, column: str = "beta_gt1") -> tuple[int, int]:
        """(layer, head) with the largest value of `column`; a tie goes to the larger mean beta (two heads with
        beta > 1 on every action: the one nearer a reflection)."""
        ranked = self.heads.assign(_key=self.heads[column].fillna(-1)).sort_values(
            ["_key", "mean_beta"], ascending=False, kind="stable"
        )
        row = ranked.iloc[0]
        return int(row["layer"]), int(row["head"])

    def most_reflecting(self) -> tuple[str, tuple[int, int] | None]:
        """The column that singles out a reflecting head here (on action tokens where the census has them) and the
        head it names; None when no head has a near-reflection (eigenvalue below -0.9) on these tokens."""
        column = "reflection_fraction_action" if self.heads["beta_gt1_action"].notna().any() else "reflection_fraction"
        if not self.heads[column].max() > 0:
            return column, None
        return column, self.top(column)

    def negative_clause(self) -> str:
        """Whether any transition has a negative eigenvalue 1 - beta ||k||^2, in words: beta > 1 alone does not
        say so (keys shorter than unit length, as in a barely trained model, keep the eigenvalue above 0)."""
        lowest = float(self.heads["min_eigenvalue"].min())
        if lowest < 0:
            return f"some transitions have a negative eigenvalue (the smallest {lowest:.3f})"
        return f"some have beta > 1, but with keys that short no eigenvalue is negative (the smallest {lowest:.3f})"


def _inputs(tokens, model=None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(token ids, kinds or None, lengths or None) from ids, REPL text or a batch of traces."""
    if isinstance(tokens, str) or (isinstance(tokens, list) and tokens and isinstance(tokens[0], str)):
        from deltalens.interp.batch_inputs import as_batch

        tokens = as_batch(model, tokens)
    if isinstance(tokens, dict):
        return tokens["tokens"], tokens.get("kinds"), tokens.get("lengths")
    tokens = torch.as_tensor(tokens)
    return (tokens[None] if tokens.ndim == 1 else tokens), None, None


@torch.no_grad()
def rwkv7_eigenvalues(alpha: torch.Tensor, a: torch.Tensor, kk: torch.Tensor, block: int = 4096):
    """Smallest eigenvalue of Diag(alpha) - (kk * a) kk^T per token (the smallest real part where it has complex
    ones) and whether it has complex ones: alpha, a, kk (N, d_k) -> ((N,), (N,) bool). With a >= 0 it is similar
    to the symmetric Diag(alpha) - c c^T, c = sqrt(a) * kk (eigvalsh: exact and real); else torch.linalg.eigvals."""
    smallest, rotates = [], []
    for rows in torch.split(torch.arange(alpha.shape[0]), block):  # (block, d_k, d_k) at a time
        d, lr, u = alpha[rows].double(), a[rows].double(), kk[rows].double()
        low = torch.empty(len(rows), dtype=torch.float64)
        complex_ = torch.zeros(len(rows), dtype=torch.bool)
        real = (lr >= 0).all(-1)
        c = lr[real].sqrt() * u[real]
        low[real] = torch.linalg.eigvalsh(torch.diag_embed(d[real]) - c[:, :, None] * c[:, None, :])[:, 0]
        if not bool(real.all()):
            other = ~real
            low_rank = (lr[other] * u[other])[:, :, None] * u[other][:, None]
            eig = torch.linalg.eigvals(torch.diag_embed(d[other]) - low_rank)
            low[other] = eig.real.amin(-1)
            complex_[other] = (eig.imag.abs() > 1e-9 * (1 + eig.abs())).any(-1)
        smallest.append(low)
        rotates.append(complex_)
    if not smallest:
        return alpha.new_zeros(0), torch.zeros(0, dtype=torch.bool)
    return torch.cat(smallest).float(), torch.cat(rotates)


@torch.no_grad()
def per_channel_min_eigenvalue(alpha: torch.Tensor, beta: torch.Tensor, k: torch.Tensor, block: int = 4096):
    """Smallest eigenvalue of (I - beta k k^T) Diag(alpha) per token: alpha, k (N, d_k), beta (N,) -> (N,).
    It is similar (by Diag(sqrt(alpha))) to a symmetric matrix, so its eigenvalues are real."""
    out = []
    for rows in torch.split(torch.arange(alpha.shape[0]), block):  # (block, d_k, d_k) at a time
        a, b, w = alpha[rows].double(), beta[rows].double(), (alpha[rows].double().sqrt() * k[rows].double())
        out.append(torch.linalg.eigvalsh(torch.diag_embed(a) - b[:, None, None] * w[:, :, None] * w[:, None, :])[:, 0])
    return torch.cat(out).float() if out else alpha.new_zeros(0)


def _delta_layers(model) -> list[int]:
    from deltalens.models.architecture import architecture_of, article_of, delta_layers_of

    layers = delta_layers_of(model)
    hooks = getattr(model, "hook_dict", {})
    if not layers or not all(f"blocks.{layer}.attn.hook_beta" in hooks for layer in layers):
        raise DeltalensError(
            f"a census needs beta and the state S_t; {article_of(architecture_of(model))} has no delta-rule layer."
        )
    return layers


def census_bytes(model, n_traces: int, T: int, rank_positions: int = 16) -> int:
    """What a census of n_traces sequences of T tokens holds at once, roughly: the logits of one forward, and per
    delta-rule layer beta, the gate and the keys at every token and the states at the rank positions."""
    cfg = model.cfg
    H, d_k, d_v = int(cfg.n_heads), int(getattr(cfg, "d_k", 0) or 1), int(getattr(cfg, "d_v", 0) or 1)
    per_token = 4 * len(_delta_layers(model)) * H * (getattr(cfg, "n_factors", 1) * (1 + d_k) + d_k)
    states = 4 * len(_delta_layers(model)) * H * d_k * d_v * min(rank_positions, T)
    return n_traces * (T * (per_token + 4 * int(cfg.d_vocab) + 8 * int(cfg.d_model)) + states)


def check_census_size(model, n_traces: int, T: int, rank_positions: int = 16) -> None:
    """One sentence, before any work, for a census that would not fit in memory."""
    from deltalens.interp.capture_plan import capture_limit

    need = census_bytes(model, n_traces, T, rank_positions)
    limit, where = capture_limit()
    if need > limit:
        raise DeltalensError(
            f"a census of {n_traces:,} sequences of {T:,} tokens would hold about {need / 2**30:,.1f} GB at once, "
            f"over the limit of {limit / 2**30:,.1f} GB ({where}); count fewer traces or a shorter text"
        )


def _checked_ids(model, ids: torch.Tensor) -> torch.Tensor:
    if ids.dtype not in (torch.long, torch.int, torch.int32, torch.int16, torch.uint8) or ids.ndim != 2:
        raise DeltalensError(f"a census reads token ids (batch, pos) of integers, got {ids.dtype} {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise DeltalensError("a census needs at least one token; give some text or traces")
    vocab = int(model.cfg.d_vocab)
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab:
        raise DeltalensError(
            f"token ids run from {low} to {high}, outside this model's vocabulary of {vocab}; encode the text with "
            "the model's own tokenizer"
        )
    return ids.long()


@torch.no_grad()
def census(model, tokens, rank_positions: int = 16) -> Census:
    """The transition census of `model` over `tokens` (ids (B, T), REPL text, or a batch with "kinds" and
    "lengths"). Memory stays bounded: the states are kept at the rank positions only (each layer's kernel writes
    just those rows: models/layers/hooked_recurrence.StateTap), and a census that would not fit is refused first.

    >>> result = dl.census(model, batch)                   # every head's transitions over the batch
    >>> isinstance(result, dl.Census), result.architecture
    (True, 'deltanet')
    """
    layers = _delta_layers(model)
    if isinstance(rank_positions, bool) or not isinstance(rank_positions, int) or rank_positions < 1:
        raise DeltalensError(f"rank_positions must be a whole number >= 1, got {rank_positions!r}")
    ids, kinds, lengths = _inputs(tokens, model)
    ids = _checked_ids(model, ids)
    B, T = ids.shape
    check_census_size(model, B, T, rank_positions)
    valid = torch.ones(B, T, dtype=torch.bool) if lengths is None else torch.arange(T)[None] < lengths[:, None]
    step = max(1, -(-T // rank_positions))
    at = torch.arange(T - 1, -1, -step).flip(0)  # the last position and every step-th before it
    wanted = {f"blocks.{l}.attn.hook_{n}" for l in layers for n in ("beta", "gate", "k", "p", "kk")}
    wanted &= set(model.hook_dict)  # hook_p: Comba's correction key only; hook_kk: RWKV-7's removal key
    cache, states_at = _tapped_states(model, layers, ids, at, wanted)
    action = None if kinds is None else (kinds == ACTION)[valid]  # (N,): which counted tokens are actions
    rows = [row for l in layers for row in _layer_rows(cache, states_at[l], l, valid, valid[:, at], action)]
    frame = pd.DataFrame(rows, columns=["layer", "head", *COLUMNS])
    return Census(frame, str(getattr(model, "arch", type(model).__name__)))


def _layer_rows(cache, states, layer: int, valid, rank_ok, action) -> list[dict[str, Any]]:
    """One layer's rows: its hooks read off the cache, then one row per head (`_head_row`)."""

    def hook(name: str):
        full = f"blocks.{layer}.attn.hook_{name}"
        return cache[full].float().cpu() if full in cache else None

    beta = hook("beta")  # (B, T, H[, n]); RWKV-7: (B, T, H, d_k)
    beta = beta[..., None] if beta.ndim == 3 else beta
    removal = hook("kk")  # RWKV-7: (B, T, H, d_k)
    alpha = hook("gate")
    alpha = torch.ones(beta.shape[:3]) if alpha is None else alpha
    states = states.float().cpu()  # (B, P, H, d_k, d_v)
    if not bool(torch.isfinite(states).all()):
        raise DeltalensError(
            f"layer {layer}'s states are not finite on these tokens, so their rank cannot be measured; the "
            "model's weights or its inputs overflow (check the checkpoint)"
        )
    ranks = effective_rank(states)  # (B, P, H)
    keys = hook("k")  # (B, T, H[, n], d_k)
    keys = keys[:, :, :, None] if keys.ndim == 4 else keys
    corrections = hook("p")  # Comba: (B, T, H, d_k)
    rows = []
    for head in range(beta.shape[2]):
        p = None if corrections is None else corrections[:, :, head, None][valid]  # (N, 1, d_k)
        kk = None if removal is None else removal[:, :, head][valid]
        rank = float(ranks[:, :, head][rank_ok].nanmean())
        b, a, k = beta[:, :, head][valid], alpha[:, :, head][valid], keys[:, :, head][valid]
        rows.append(_head_row(layer, head, b, a, k, p, kk, rank, action))
    return rows


def _head_row(layer: int, head: int, b, a, k, p, kk, rank: float, action) -> dict[str, Any]:
    """One head's census over its N tokens: b (N, n) beta (RWKV-7: (N, d_k) its learning rate), a (N,) or
    (N, d_k) the decay, k (N, n, d_k), p (N, 1, d_k) Comba's key or None, kk (N, d_k) RWKV-7's or None."""
    if kk is None:
        factor, decayed = _eigenvalues(a, b, k, p)
        rotating = np.nan
    else:  # RWKV-7: one transition per token, Diag(a) - (kk * b) kk^T
        factor = 1 - (b * kk * kk).sum(-1, keepdim=True)  # (N, 1): along kk at alpha = 1 (its others are 1)
        decayed, complex_ = rwkv7_eigenvalues(a, b, kk)
        rotating = float(complex_.float().mean()) if len(complex_) else np.nan
    row = {
        "layer": layer,
        "head": head,
        "tokens": int(b.numel() if kk is None else b.shape[0]),
        "beta_gt1": float((b > 1).float().mean()),
        "beta_gt1_action": np.nan,
        "reflection_fraction": float((factor < REFLECTION_THRESHOLD).float().mean()),
        "reflection_fraction_action": np.nan,
        "mean_beta": float(b.mean()),
        "min_eigenvalue": min_eigenvalue(factor),
        "min_decayed_eigenvalue": min_eigenvalue(decayed),
        "neg_gate": np.nan,
        "complex_fraction": rotating,
        "effective_rank": rank,
    }
    if action is not None and action.any():
        row["beta_gt1_action"] = float((b[action] > 1).float().mean())
        row["reflection_fraction_action"] = float((factor[action] < REFLECTION_THRESHOLD).float().mean())
    return row


def _eigenvalues(a, b, k, p=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(per factor, the transition's eigenvalue along k with the decay left out; with it, the smallest one) over
    one head's tokens: a (N,) or (N, d_k) per channel, b (N, n), k (N, n, d_k), p (N, 1, d_k) Comba's key or None."""
    if p is not None:  # Comba: alpha I - beta k p^T, eigenvalues alpha and alpha - beta p.k
        pk = (p * k).sum(-1)  # (N, 1)
        return 1 - b * pk, torch.minimum(a[:, None], a[:, None] - b * pk)  # (alpha = 1: the transition undecayed)
    factor = transition_eigenvalues(b, k)  # (N, n): 1 - beta ||k||^2 per factor
    if a.ndim == 2:  # KDA: one factor, a decay per key channel
        return factor, per_channel_min_eigenvalue(a, b[:, 0], k[:, 0])
    return factor, a[:, None] * factor


def _tapped_states(model, layers: list[int], ids: torch.Tensor, at: torch.Tensor, wanted: set[str]):
    """(cached hooks in `wanted`, layer -> S_t (B, P, H, d_k, d_v) at positions `at`): one forward, each layer's
    kernel writing only those rows of its states."""
    from deltalens.models.layers.hooked_recurrence import StateTap

    B, P = ids.shape[0], len(at)
    rows = (torch.arange(B).repeat_interleave(P), at.repeat(B))
    states: dict[int, torch.Tensor] = {}
    mixers = {layer: model.blocks[layer].attn for layer in layers}
    for layer, mixer in mixers.items():

        def deliver(found: torch.Tensor, layer: int = layer) -> None:
            states[layer] = found.reshape(B, P, *found.shape[1:]).detach()

        mixer.state_tap = StateTap(rows, deliver)
    try:
        _, cache = model.run_with_cache(ids, names_filter=lambda name: name in wanted)
    finally:
        for mixer in mixers.values():
            mixer.state_tap = None
    return {name: cache[name] for name in wanted if name in cache.cache_dict}, states


def census_figure(result: Census, value: str = "beta_gt1"):
    """Layer x head heatmap of one census column (default: the share of transitions with beta > 1).

    >>> fig = dl.census_figure(dl.census(model, batch))
    >>> fig.data[0].type
    'heatmap'
    """
    import plotly.graph_objects as go

    if value not in result.heads.columns or value in ("layer", "head"):
        known = ", ".join(c for c in COLUMNS if c != "tokens")
        raise DeltalensError(f"census_figure shows one of the census's statistics ({known}); got {value!r}")
    grid = result.heads.pivot(index="layer", columns="head", values=value)
    # fixed by what the statistic is (core/colour_scales.py): a share 0-1, an eigenvalue -1..1, beta 0-2
    scale = scale_for(value, value.replace("_", " ")) or {"colorscale": "Viridis", "colorbar": {"title": value}}
    fig = go.Figure(
        go.Heatmap(
            z=grid.values,
            x=[f"H{h}" for h in grid.columns],
            y=[f"L{l}" for l in grid.index],
            **scale,
        )
    )
    fig.update_layout(title=f"{result.architecture}: {value.replace('_', ' ')} per layer and head")
    fig.update_yaxes(autorange="reversed")
    return fig

"""How many dimensions does each head's state S_t use?

Paper notation -> code. S_t (d_k x d_v, hook_state, fla's [K, V] layout) is the state of one head
after token t. Three measures per (layer, head):

* effective rank of S_t (Roy & Vetterli, "The effective rank: a measure of effective
  dimensionality", EUSIPCO 2007): with singular values sigma_i of S_t and p_i = sigma_i / sum_j
  sigma_j, erank(S_t) = exp(-sum_i p_i log p_i). It is 1 for a rank-1 state and r for r equal
  singular values (e.g. r for c times an r x r permutation matrix). Averaged over tokens whose
  state is not zero; `spectra` keeps the mean normalised spectrum sigma_i / sigma_1.
* PCA of the flattened states vec(S_t) across tokens and traces (centred): how many principal
  components explain 90% / 99% of the variance (`pca_dim_90`, `pca_dim_99`). A head that holds
  c x (an n x n permutation matrix) has states on the Birkhoff polytope, whose affine span has
  dimension (n - 1)^2: 4 for S3.
* dimension of the span of the keys k_t written on action tokens: the numerical rank of the
  stacked keys, counting singular values sigma_i > rtol * sigma_1 (`key_rank`, rtol stated in
  `key_rtol`), and the number of them holding 90% / 99% of the squared singular values
  (`key_dim_90`, `key_dim_99`; a trained head's keys carry context noise from the short
  convolution, which the energy-based count ignores and the rank does not).
  Transpositions of n variables as reflections need keys e_i - e_j: span n - 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import Capture, delta_rule_capture, require_layers
from deltalens.tasks.groups import VARIABLE_NAMES
from deltalens.tasks.tokenizers import TokenKind

__all__ = [
    "NAMES",
    "SubspaceReport",
    "subspace_report",
    "effective_rank",
    "pca_dims",
    "numerical_rank",
    "singular_value_figure",
    "pca_figure",
]

NAMES = ("state", "k")
KEY_RTOL = 1e-2


def effective_rank(matrices: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Roy & Vetterli effective rank of each matrix (..., m, n) -> (...); NaN for a zero matrix."""
    sigma = torch.linalg.svdvals(matrices.double())
    total = sigma.sum(-1, keepdim=True)
    p = sigma / total.clamp_min(eps)
    entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
    out = torch.exp(entropy)
    return torch.where(total[..., 0] > eps, out, torch.full_like(out, float("nan")))


def pca_dims(x: torch.Tensor, levels: Sequence[float] = (0.9, 0.99)) -> tuple[list[int], np.ndarray]:
    """Components needed for each variance level, and the explained-variance ratios, of rows x (N, D)."""
    x = x.double()
    x = x - x.mean(0, keepdim=True)
    sigma = torch.linalg.svdvals(x)
    var = sigma.square()
    total = float(var.sum())
    if total <= 1e-20 * max(1, x.numel()):
        return [0 for _ in levels], np.zeros(len(var))
    ratio = (var / total).numpy()
    cumulative = np.cumsum(ratio)
    # smallest k with cumulative[k-1] >= level (tiny slack for float round-off at exactly 100%)
    return [int(np.searchsorted(cumulative, level - 1e-12) + 1) for level in levels], ratio


def numerical_rank(x: torch.Tensor, rtol: float = KEY_RTOL) -> tuple[int, int, int, np.ndarray]:
    """Of the rows x: (rank = #{sigma_i > rtol sigma_1}, components for 90% and for 99% of sum sigma^2,
    sigma / sigma_1)."""
    if x.shape[0] == 0:
        return 0, 0, 0, np.zeros(0)
    sigma = torch.linalg.svdvals(x.double()).numpy()
    if sigma[0] <= 0:
        return 0, 0, 0, sigma
    energy = np.cumsum(sigma**2) / np.sum(sigma**2)
    dim90, dim99 = (int(np.searchsorted(energy, level - 1e-12) + 1) for level in (0.9, 0.99))
    return int((sigma > rtol * sigma[0]).sum()), dim90, dim99, sigma / sigma[0]


@dataclass(repr=False)
class SubspaceReport(Summary):
    """Per-head state dimensionality (see the module docstring).

    >>> report = dl.subspace_report(cap)
    >>> set(["layer", "head"]) <= set(report.heads.columns)
    True
    """

    heads: (
        pd.DataFrame
    )  # layer, head, effective_rank, effective_rank_std, pca_dim_90, pca_dim_99, key_rank, key_dim_90, ...
    spectra: pd.DataFrame  # layer, head, index, singular_value (mean of sigma_i / sigma_1 over tokens)
    pca: pd.DataFrame  # layer, head, component, explained_variance_ratio, cumulative
    key_spectra: pd.DataFrame  # layer, head, index, singular_value (sigma_i / sigma_1 of the action keys)
    key_rtol: float = KEY_RTOL

    def title(self) -> str:
        return "SubspaceReport: dimensionality of each head's state S_t"

    def display_frame(self) -> pd.DataFrame:
        return self.heads


def _head_measures(S, pca_states, action_keys, key_rtol: float) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
    """One head's measures from its states S (N, d_k, d_v) on the chosen tokens, the states for PCA and
    the action keys (M, d_k): (the numbers of SubspaceReport.heads, the mean normalised state spectrum,
    the PCA explained-variance ratios, the keys' sigma / sigma_1)."""
    erank = effective_rank(S)
    sigma = torch.linalg.svdvals(S.double())
    top = sigma[:, :1]
    nonzero = top[:, 0] > 1e-12
    mean_spectrum = (sigma[nonzero] / top[nonzero]).mean(0).numpy() if bool(nonzero.any()) else np.zeros(sigma.shape[1])
    (dim90, dim99), ratio = pca_dims(pca_states.flatten(1))
    k_rank, k_dim90, k_dim99, k_sigma = numerical_rank(action_keys, key_rtol)
    valid = erank[~torch.isnan(erank)]
    numbers = {
        "effective_rank": float(valid.mean()) if len(valid) else float("nan"),
        "effective_rank_std": float(valid.std()) if len(valid) > 1 else 0.0,
        "pca_dim_90": dim90,
        "pca_dim_99": dim99,
        "key_rank": k_rank,
        "key_dim_90": k_dim90,
        "key_dim_99": k_dim99,
        "state_dim": int(S.shape[-2] * S.shape[-1]),
    }
    return numbers, mean_spectrum, ratio, k_sigma


def _indexed(layer: int, head: int, values) -> list[dict]:
    """Rows (layer, head, index, singular_value) of a spectrum."""
    return [{"layer": layer, "head": head, "index": i, "singular_value": float(v)} for i, v in enumerate(values)]


def _pca_rows(layer: int, head: int, ratio: np.ndarray, pca_components: int) -> list[dict]:
    """Rows of SubspaceReport.pca: the first `pca_components` ratios and their running sum."""
    shown = ratio[:pca_components]
    cumulative = np.cumsum(ratio)[:pca_components]
    return [
        {"layer": layer, "head": head, "component": i + 1, "explained_variance_ratio": float(r), "cumulative": float(c)}
        for i, (r, c) in enumerate(zip(shown, cumulative))
    ]


@torch.no_grad()
def subspace_report(
    source,
    batch=None,
    kinds: int | Sequence[int] | None = None,
    key_rtol: float = KEY_RTOL,
    max_tokens: int = 4000,
    pca_components: int = 32,
    seed: int = 0,
) -> SubspaceReport:
    """Effective rank, PCA dimension and action-key span of every head's state.

    source: a Capture with hook_state and hook_k (NAMES), or a model with `batch`.
    kinds: TokenKind(s) whose states enter effective rank and PCA (None: every real token).
    max_tokens: PCA runs on at most this many tokens, drawn at random with `seed`.

    >>> report = dl.subspace_report(cap)                   # cap holds hook_state
    >>> isinstance(report, dl.SubspaceReport)
    True
    """
    cap = delta_rule_capture(source, batch, NAMES)
    layers = require_layers(cap, NAMES, "subspace_report")
    chosen = cap.mask(kinds)
    if not bool(chosen.any()):
        raise DeltalensError("no tokens of the requested kinds in this batch.")
    rows_all = torch.nonzero(chosen).flatten()
    generator = torch.Generator().manual_seed(seed)
    pca_rows = (
        rows_all
        if len(rows_all) <= max_tokens
        else rows_all[torch.randperm(len(rows_all), generator=generator)[:max_tokens]]
    )
    action = cap.mask(TokenKind.ACTION)
    heads, spectra, pca, key_spectra = [], [], [], []
    for l in layers:
        states = cap.layer("state", l)  # (N, H, d_k, d_v)
        keys = cap.layer("k", l)  # (N, H, d_k), or (N, H, n_h, d_k)
        for h in range(states.shape[1]):
            # every factor's key counts (DeltaProduct: (N, H, n_h, d_k))
            action_keys = keys[action, h].reshape(-1, keys.shape[-1])
            numbers, mean_spectrum, ratio, k_sigma = _head_measures(
                states[rows_all, h], states[pca_rows, h], action_keys, key_rtol
            )
            heads.append(
                {"layer": l, "head": h, **numbers, "n_tokens": int(len(rows_all)), "n_action_keys": int(action.sum())}
            )
            spectra += _indexed(l, h, mean_spectrum)
            pca += _pca_rows(l, h, ratio, pca_components)
            key_spectra += _indexed(l, h, k_sigma)
    return SubspaceReport(
        heads=pd.DataFrame(heads),
        spectra=pd.DataFrame(spectra),
        pca=pd.DataFrame(pca),
        key_spectra=pd.DataFrame(key_spectra),
        key_rtol=key_rtol,
    )


# ---- figures --------------------------------------------------------------------------------


def singular_value_figure(report: SubspaceReport, which: str = "state", log: bool = True):
    """Mean normalised singular values sigma_i / sigma_1 of every head's state (or action keys).

    >>> fig = dl.singular_value_figure(dl.subspace_report(cap))
    >>> len(fig.data) > 0
    True
    """
    frame = report.spectra if which == "state" else report.key_spectra
    fig = go.Figure()
    for (l, h), part in frame.groupby(["layer", "head"]):
        fig.add_trace(
            go.Scatter(x=part["index"] + 1, y=part["singular_value"], mode="lines+markers", name=f"L{l} H{h}")
        )
    what = "state S_t (mean over tokens)" if which == "state" else "keys on action tokens"
    fig.update_layout(
        title=f"singular value spectra: {what}",
        xaxis_title="index i",
        yaxis_title="sigma_i / sigma_1",
        yaxis_type="log" if log else "linear",
    )
    return fig


def pca_figure(report: SubspaceReport):
    """Cumulative explained variance of the flattened states, one line per head.

    >>> fig = dl.pca_figure(dl.subspace_report(cap))
    >>> len(fig.data) > 0
    True
    """
    fig = go.Figure()
    for (l, h), part in report.pca.groupby(["layer", "head"]):
        fig.add_trace(go.Scatter(x=part["component"], y=part["cumulative"], mode="lines+markers", name=f"L{l} H{h}"))
    for level in (0.9, 0.99):
        fig.add_hline(y=level, line_dash="dot")
    fig.update_layout(
        title="PCA of vec(S_t): cumulative explained variance",
        xaxis_title="components",
        yaxis_title="cumulative variance",
    )
    return fig


def state_points(
    source: Capture, layer: int, head: int, variable: int = 0, max_points: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """The first two principal components of one head's states vec(S_t), one row per token (at most
    `max_points`, drawn at random), with the true value of `variable` and the token's kind."""
    cap = delta_rule_capture(source, None, NAMES)
    states = cap.layer("state", layer)[:, head].flatten(1).double()  # (N, d_k * d_v)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(states), min(max_points, len(states)), replace=False))
    x = states[rows] - states[rows].mean(0)
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    pcs = (x @ vh[:2].T).numpy()
    kinds = cap.labels["kind"][rows].numpy()
    return pd.DataFrame(
        {
            "pc1": pcs[:, 0],
            "pc2": pcs[:, 1] if pcs.shape[1] > 1 else 0.0,
            "value": cap.states[rows, variable].numpy(),
            "kind": [TokenKind(int(k)).name.lower() for k in kinds],
        }
    )


def state_scatter_figure(points: pd.DataFrame, layer: int, head: int, variable: int = 0):
    """PCA scatter of a head's states, coloured by the true value of one variable."""
    fig = go.Figure()
    for value, part in points.groupby("value"):
        fig.add_trace(
            go.Scatter(
                x=part["pc1"],
                y=part["pc2"],
                mode="markers",
                name=f"value {value}",
                marker={"size": 5, "opacity": 0.6},
                text=part["kind"],
            )
        )
    fig.update_layout(
        title=f"layer {layer} head {head}: states S_t in their first two principal components, "
        f"coloured by variable {VARIABLE_NAMES[variable]}'s value",
        xaxis_title="PC 1",
        yaxis_title="PC 2",
    )
    return fig

"""Per-head beta and transition eigenvalues: is some head applying Householder reflections?

Paper notation -> code. One DeltaNet head updates its state at token t as

    S_t = A_t S_{t-1} + beta_t k_t v_t^T,   A_t = I - beta_t k_t k_t^T   (the transition)

A_t is the identity except along k_t, where its eigenvalue is 1 - beta_t ||k_t||^2. Keys are
L2-normalised (hook_k shows them after the norm, ||k_t|| = 1 up to fla's eps), so the non-trivial
eigenvalue is ~ 1 - beta_t: in [0, 1] for beta in [0, 1], in [-1, 1] for beta in [0, 2]. At
beta_t = 2 the transition is the Householder reflection I - 2 k k^T (eigenvalue -1): with
k = (e_i - e_j) / sqrt 2 exactly the transposition (i j) acting on the rows of S. The paper's
claim: in a trained [0, 2] DeltaNet one head does this on action tokens.

    eigenvalue        1 - beta_t ||k_t||^2 of each token's transition (hook_beta, hook_k)
    neg_eig_fraction  fraction of ACTION tokens with eigenvalue < 0
    reflection_fraction  fraction of ACTION tokens with eigenvalue < -0.9 (`threshold`)

DeltaProduct-like products. With the `code` tokenizer one action line is ~9 tokens, so the state
update for one action is the product of the transitions over the line's tokens,
P = A_{t_m} ... A_{t_1} (later tokens on the left). Its eigenvalues are 1 on the orthogonal
complement of span{k_t} and otherwise those of P restricted to that span (complex in general:
a product of two reflections is a rotation). Per action we keep the non-trivial ones
(|lambda - 1| > `trivial_tol`), whether one lies within 1 + threshold of -1 (a reflection), and
det P = prod_t (1 - beta_t ||k_t||^2), whose sign should match the parity of the permutation
(a transposition is odd: det -1) if the head implements the permutation by reflections.
With the `statement` tokenizer an action is one token and P = A_t.

DeltaProduct: each token applies n_h factors I - beta_{t,j} k_{t,j} k_{t,j}^T (j = 0 first), so hook_beta
is (B, T, H, n_h) and hook_k (B, T, H, n_h, d_k). Every factor is one row of `tokens` (column
`factor`), and a token's factors enter the products in order: P = A_{t,n-1} ... A_{t,0}. The decay
gate of gated models scales every eigenvalue by alpha_t and is left out here (read hook_gate).
probes/products.py asks whether each action's product IS the action's permutation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from deltalens.core.colour_scales import scale_for
from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices
from deltalens.interp.capture import delta_rule_capture, require_layers
from deltalens.models.architecture import require_householder
from deltalens.tasks.groups import is_even, lex_unrank
from deltalens.tasks.tokenizers import TokenKind

__all__ = [
    "NAMES",
    "EigenvalueReport",
    "eigenvalue_report",
    "factor_rows",
    "min_eigenvalue",
    "transition_eigenvalues",
    "transition_products",
    "beta_heatmap",
    "eigenvalue_histogram",
    "product_eigenvalue_figure",
]

NAMES = ("beta", "k")  # what a capture needs for this probe
REFLECTION_THRESHOLD = -0.9
KIND_NAMES = {int(kind): kind.name.lower() for kind in TokenKind}
UNLABELLED = "unlabelled"  # a token without a kind (-1): ids that are no trace of the task


def transition_eigenvalues(beta: torch.Tensor, k: torch.Tensor | None = None) -> torch.Tensor:
    """1 - beta ||k||^2 (..., H) from beta (..., H) and keys (..., H, d_k); 1 - beta without keys: the delta
    factor's eigenvalue along k (-1: a reflection), the decay left out."""
    if k is None:
        return 1.0 - beta
    return 1.0 - beta * k.double().square().sum(-1).to(beta.dtype)


def min_eigenvalue(eigenvalues) -> float:
    """A head's `min_eigenvalue`: the smallest `transition_eigenvalues` value over its tokens (and factors).
    The one definition the eigenvalue report and the census (probes/census.py) both use."""
    values = eigenvalues.numpy() if isinstance(eigenvalues, torch.Tensor) else np.asarray(eigenvalues)
    return float(values.min()) if values.size else float("nan")


def factor_rows(beta: torch.Tensor, k: torch.Tensor, group: torch.Tensor | None = None):
    """DeltaProduct's factors as consecutive rows: beta (N, H, n), k (N, H, n, d) -> (N*n, H), (N*n, H, d)
    and group repeated n times (factor order kept). DeltaNet-shaped inputs pass through."""
    if beta.ndim == 2:
        return beta, k, group
    n = beta.shape[-1]
    beta = beta.transpose(1, 2).reshape(-1, beta.shape[1])
    k = k.transpose(1, 2).reshape(-1, k.shape[1], k.shape[-1])
    return beta, k, (None if group is None else group.repeat_interleave(n))


def transition_products(beta: torch.Tensor, k: torch.Tensor, group: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Products of transitions over the tokens of each group (e.g. each action line).

    beta (N, H), k (N, H, d_k), group (N,) long: group id of each token, -1 = no group; tokens of a
    group are taken in the order they appear (time order for a Capture). A DeltaProduct's (N, H, n)
    and (N, H, n, d_k) are accepted: its factors count as consecutive tokens. Returns
    (P (A, H, d_k, d_k) float64 with P = A_last ... A_first, ids (A,) the group ids in sorted order).
    """
    beta, k, group = factor_rows(beta, k, group)
    keep = group >= 0
    beta, k, group = beta[keep].double(), k[keep].double(), group[keep]
    ids, inverse, counts = torch.unique(group, return_inverse=True, return_counts=True)
    A, H, d = len(ids), beta.shape[1], k.shape[-1]
    if A == 0:
        return torch.zeros(0, H, d, d, dtype=torch.float64), ids
    # rank of each token inside its group, in order of appearance (stable sort keeps time order)
    order = torch.sort(inverse, stable=True).indices
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(inverse)
    rank[order] = torch.arange(len(inverse)) - starts[inverse[order]]
    G = int(counts.max())
    betas = torch.zeros(A, G, H, dtype=torch.float64)  # padding: beta 0, transition I
    keys = torch.zeros(A, G, H, d, dtype=torch.float64)
    betas[inverse, rank] = beta
    keys[inverse, rank] = k
    P = torch.eye(d, dtype=torch.float64).expand(A, H, d, d).clone()
    for g in range(G):
        kg, bg = keys[:, g], betas[:, g, :, None, None]  # (A, H, d), (A, H, 1, 1)
        P = P - bg * kg[..., :, None] * (kg[..., None, :] @ P)  # (I - b k k^T) P
    return P, ids


@dataclass(repr=False)
class EigenvalueReport(Summary):
    """Beta and transition eigenvalues per layer and head (see the module docstring).

    >>> report = dl.eigenvalue_report(cap)
    >>> isinstance(report, dl.EigenvalueReport)
    True
    """

    tokens: pd.DataFrame  # one row per (token, layer, head): trace, position, kind, layer, head, beta, eigenvalue
    by_kind: pd.DataFrame  # per (layer, head, kind): n, mean_beta, mean_eigenvalue, neg_fraction, reflection_fraction
    heads: pd.DataFrame  # per (layer, head): the headline numbers, action tokens
    products: pd.DataFrame  # per (layer, head, action): n_tokens, perm_id, odd, det, min_real, reflection
    product_eigenvalues: pd.DataFrame  # per non-trivial eigenvalue of each product: real, imag, abs
    threshold: float = REFLECTION_THRESHOLD
    beta_range: list = field(default_factory=list)  # [(layer, head, lo, hi)] the model's ranges

    def title(self) -> str:
        return "EigenvalueReport: beta and the transition eigenvalue 1 - beta per head, on action tokens"

    def display_frame(self) -> pd.DataFrame:
        return self.heads

    def highlight(self) -> tuple[int, int] | None:
        return self.tracking_head()

    def tracking_head(self) -> tuple[int, int] | None:
        """(layer, head) with the highest reflection fraction on action tokens (then mean beta); None when no
        head reflects on any action token (no eigenvalue below `threshold`): then no head is singled out."""
        if self.heads.empty or not (self.heads["reflection_fraction"].fillna(0) > 0).any():
            return None
        ranked = self.heads.sort_values(
            ["reflection_fraction", "mean_beta_action"], ascending=False, na_position="last"
        )
        row = ranked.iloc[0]
        return int(row["layer"]), int(row["head"])

    def require_tracking_head(self) -> tuple[int, int]:
        """tracking_head(), or one sentence saying that no head reflects."""
        found = self.tracking_head()
        if found is None:
            raise DeltalensError(
                f"no head reflects: no action token's transition eigenvalue is below {self.threshold:g} in any head, "
                "so no head is the tracking head by this rule (beta_heatmap shows where beta sits)"
            )
        return found

    def head(self, layer: int, head: int) -> dict:
        rows = self.heads[(self.heads["layer"] == layer) & (self.heads["head"] == head)]
        if rows.empty:
            raise DeltalensError(f"no head ({layer}, {head}) in this report.")
        return rows.iloc[0].to_dict()


def _perm_odd(perm_ids: np.ndarray, n: int) -> np.ndarray:
    cache: dict[int, bool] = {}
    out = np.zeros(len(perm_ids), dtype=bool)
    for i, pid in enumerate(perm_ids.tolist()):
        if pid not in cache:
            cache[pid] = (not is_even(lex_unrank(pid, n))) if pid >= 0 and n > 0 else False
        out[i] = cache[pid]
    return out


def _token_frame(
    cap, betas: np.ndarray, eigs: np.ndarray, kinds: np.ndarray, n_f: int, layers: list[int]
) -> pd.DataFrame:
    """One row per (token factor, layer, head) from betas and eigenvalues (N * n_f, L, H) of `layers`."""
    N, L, H = betas.shape
    return pd.DataFrame(
        {
            "trace": np.repeat(cap.labels["trace"].numpy().repeat(n_f), L * H),
            "position": np.repeat(cap.labels["position"].numpy().repeat(n_f), L * H),
            "factor": np.repeat(np.tile(np.arange(n_f), len(cap)), L * H),
            "kind": pd.Categorical(
                np.repeat([KIND_NAMES.get(k, UNLABELLED) for k in kinds], L * H),
                categories=[*KIND_NAMES.values(), UNLABELLED],
            ),
            "layer": np.tile(np.repeat(np.asarray(layers), H), N),
            "head": np.tile(np.arange(H), N * L),
            "beta": betas.reshape(-1),
            "eigenvalue": eigs.reshape(-1),
        }
    )


def _by_kind(tokens: pd.DataFrame) -> pd.DataFrame:
    """Per (layer, head, kind): beta and eigenvalue statistics."""
    return (
        tokens.groupby(["layer", "head", "kind"], observed=True)
        .agg(
            n=("beta", "size"),
            mean_beta=("beta", "mean"),
            std_beta=("beta", "std"),
            mean_eigenvalue=("eigenvalue", "mean"),
            min_eigenvalue=("eigenvalue", "min"),
            neg_fraction=("negative", "mean"),
            reflection_fraction=("reflection", "mean"),
        )
        .reset_index()
    )


def _head_rows(
    betas: np.ndarray, eigs: np.ndarray, act: np.ndarray, threshold: float, n_f: int, layers: list[int]
) -> pd.DataFrame:
    """Per (layer, head): the headline numbers on action tokens (`act`, one flag per factor row)."""
    _, L, H = betas.shape
    rows = []
    for i, l in enumerate(layers):
        for h in range(H):
            b, e = betas[:, i, h], eigs[:, i, h]
            rows.append(
                {
                    "layer": l,
                    "head": h,
                    "n_action_tokens": int(act.sum()) // n_f,
                    "mean_beta_action": float(b[act].mean()) if act.any() else float("nan"),
                    "mean_beta_other": float(b[~act].mean()) if (~act).any() else float("nan"),
                    "neg_eig_fraction": float((e[act] < 0).mean()) if act.any() else float("nan"),
                    "reflection_fraction": float((e[act] < threshold).mean()) if act.any() else float("nan"),
                    "neg_eig_fraction_all": float((e < 0).mean()),
                    "min_eigenvalue": min_eigenvalue(e),
                }
            )
    return pd.DataFrame(rows)


def _with_product_stats(heads: pd.DataFrame, products: pd.DataFrame) -> pd.DataFrame:
    """heads plus the per-action product statistics (NaN without action products)."""
    if products.empty:
        for column in ("product_reflection_fraction", "parity_agreement", "tokens_per_action"):
            heads[column] = float("nan")
        return heads
    stats = (
        products.groupby(["layer", "head"])
        .agg(
            product_reflection_fraction=("reflection", "mean"),
            parity_agreement=("parity_match", "mean"),
            tokens_per_action=("n_tokens", "mean"),
        )
        .reset_index()
    )
    return heads.merge(stats, on=["layer", "head"], how="left")


@torch.no_grad()
def eigenvalue_report(
    source, batch=None, threshold: float = REFLECTION_THRESHOLD, trivial_tol: float = 1e-4
) -> EigenvalueReport:
    """Beta and eigenvalue statistics of every head; `source` is a Capture (with NAMES) or a model + batch.

    >>> report = dl.eigenvalue_report(cap)                 # cap holds beta and k
    >>> report.tracking_head()
    (0, 3)
    """
    require_householder(source, "eigenvalue_report")
    cap = delta_rule_capture(source, batch, NAMES)
    layers = require_layers(cap, NAMES, "eigenvalue_report")
    if len(cap) and bool((cap.labels["kind"] < 0).all()):
        raise DeltalensError(
            "eigenvalue_report reads the transitions of action tokens, and this capture's tokens carry no token kinds "
            "(ids or text that are not a REPL trace of the model's task): capture a batch of traces or REPL text, "
            "or read any text with dl.census"
        )
    first = cap.layer("beta", layers[0])
    n_f = first.shape[-1] if first.ndim == 3 else 1  # factors per token
    rows_of = [factor_rows(cap.layer("beta", l), cap.layer("k", l)) for l in layers]  # one row per factor
    kinds = cap.labels["kind"].numpy().repeat(n_f)
    betas = np.stack([b.numpy() for b, _, _ in rows_of], 1)  # (N, L, H)
    eigs = np.stack([transition_eigenvalues(b, k).numpy() for b, k, _ in rows_of], 1)
    tokens = _token_frame(cap, betas, eigs, kinds, n_f, layers)
    tokens["negative"] = tokens["eigenvalue"] < 0
    tokens["reflection"] = tokens["eigenvalue"] < threshold
    heads = _head_rows(betas, eigs, kinds == int(TokenKind.ACTION), threshold, n_f, layers)
    products, product_eigs = _products(cap, threshold, trivial_tol, layers)
    return EigenvalueReport(
        tokens=tokens,
        by_kind=_by_kind(tokens),
        heads=_with_product_stats(heads, products),
        products=products,
        product_eigenvalues=product_eigs,
        threshold=threshold,
    )


def _products(cap, threshold: float, trivial_tol: float, layers: list[int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per action (trace, action_pos): eigenvalues of the product of its tokens' transitions."""
    action_pos, trace = cap.labels["action_pos"], cap.labels["trace"]
    is_action = (cap.labels["kind"] == int(TokenKind.ACTION)) & (action_pos >= 0)
    width = int(action_pos.max()) + 1 if len(action_pos) else 1
    group = torch.where(is_action, trace * width + action_pos, torch.full_like(trace, -1))
    if not bool(is_action.any()):
        return pd.DataFrame(), pd.DataFrame()
    first = {}  # group id -> first token row: perm id and token count
    rows = torch.nonzero(is_action).flatten()
    for row, gid in zip(rows.tolist(), group[rows].tolist()):
        first.setdefault(gid, row)
    frames, eig_frames = [], []
    for l in layers:
        P, ids = transition_products(cap.layer("beta", l), cap.layer("k", l), group)  # (A, H, d, d)
        A, H = P.shape[:2]
        lam = torch.linalg.eigvals(P).numpy()  # (A, H, d) complex
        beta_rows, k_rows, group_rows = factor_rows(cap.layer("beta", l).double(), cap.layer("k", l), group)
        eig = transition_eigenvalues(beta_rows, k_rows)  # (N * n_h, H): one row per factor
        factors = torch.nonzero(group_rows >= 0).flatten()
        det = torch.zeros(A, H, dtype=torch.float64)
        det_log = torch.zeros(A, H, dtype=torch.float64)
        sign = torch.ones(A, H, dtype=torch.float64)
        inverse = torch.searchsorted(ids, group_rows[factors])
        # det P = prod of the per-factor eigenvalues; sum logs and count signs (no underflow)
        det_log.index_add_(0, inverse, eig[factors].abs().clamp_min(1e-300).log())
        negatives = torch.zeros(A, H, dtype=torch.float64).index_add_(0, inverse, (eig[factors] < 0).double())
        sign = torch.where(negatives % 2 == 1, -sign, sign)
        det = sign * det_log.exp()
        n_tokens = torch.bincount(inverse, minlength=A).numpy() // (len(group_rows) // len(group))
        first_rows = torch.tensor([first[g] for g in ids.tolist()])
        traces = trace[first_rows].numpy()
        positions = action_pos[first_rows].numpy()
        perm = cap.labels["perm_id"][first_rows].numpy()
        odd = _perm_odd(perm, cap.n_vars)
        nontrivial = np.abs(lam - 1.0) > trivial_tol  # (A, H, d)
        near_minus_one = (np.abs(lam + 1.0) < 1.0 + threshold) & nontrivial
        min_real = np.where(nontrivial, lam.real, np.inf).min(-1)
        frames.append(
            pd.DataFrame(
                {
                    "layer": l,
                    "head": np.tile(np.arange(H), A),
                    "trace": np.repeat(traces, H),
                    "action_pos": np.repeat(positions, H),
                    "perm_id": np.repeat(perm, H),
                    "odd": np.repeat(odd, H),
                    "n_tokens": np.repeat(n_tokens, H),
                    "det": det.numpy().reshape(-1),
                    "min_real": np.where(np.isfinite(min_real), min_real, 1.0).reshape(-1),
                    "n_nontrivial": nontrivial.sum(-1).reshape(-1),
                    "reflection": near_minus_one.any(-1).reshape(-1),
                }
            )
        )
        a_idx, h_idx, e_idx = np.nonzero(nontrivial)
        values = lam[a_idx, h_idx, e_idx]
        eig_frames.append(
            pd.DataFrame(
                {
                    "layer": l,
                    "head": h_idx,
                    "trace": traces[a_idx],
                    "action_pos": positions[a_idx],
                    "perm_id": perm[a_idx],
                    "real": values.real,
                    "imag": values.imag,
                    "abs": np.abs(values),
                }
            )
        )
    products = pd.concat(frames, ignore_index=True)
    products["parity_match"] = (products["det"] < 0) == products["odd"]
    return products, pd.concat(eig_frames, ignore_index=True)


# ---- figures --------------------------------------------------------------------------------


def beta_heatmap(report: EigenvalueReport, column: str = "mean_beta_action"):
    """Layer x head heatmap of one column of `report.heads` (default: mean beta on action tokens).

    >>> fig = dl.beta_heatmap(dl.eigenvalue_report(cap))
    >>> fig.data[0].type
    'heatmap'
    """
    grid = report.heads.pivot(index="layer", columns="head", values=column)
    fig = go.Figure(
        go.Heatmap(
            z=grid.values,
            x=[f"head {h}" for h in grid.columns],
            y=[f"layer {l}" for l in grid.index],
            text=np.round(grid.values, 3),
            texttemplate="%{text}",
            **(scale_for(column, column.replace("_", " ")) or {"colorscale": "RdBu_r", "colorbar": {"title": column}}),
        )
    )
    fig.update_layout(title=f"{column.replace('_', ' ')} per head", yaxis={"autorange": "reversed"})
    return fig


def beta_kind_heatmap(report: EigenvalueReport, value: str = "mean_beta"):
    """Heads x token kinds heatmap of `report.by_kind` (default: mean beta)."""
    frame = report.by_kind.assign(label=[f"L{l} H{h}" for l, h in zip(report.by_kind["layer"], report.by_kind["head"])])
    grid = frame.pivot_table(index="label", columns="kind", values=value, observed=True, sort=False)
    fig = go.Figure(
        go.Heatmap(
            z=grid.values,
            x=[str(k) for k in grid.columns],
            y=list(grid.index),
            text=np.round(grid.values, 2),
            texttemplate="%{text}",
            **(scale_for(value, value.replace("_", " ")) or {"colorscale": "RdBu_r", "colorbar": {"title": value}}),
        )
    )
    fig.update_layout(title=f"{value.replace('_', ' ')} per head and token kind", yaxis={"autorange": "reversed"})
    return fig


@integer_indices("layer", "head")
def eigenvalue_histogram(
    report: EigenvalueReport, layer: int | None = None, head: int | None = None, value: str = "eigenvalue"
):
    """Histogram of one head's eigenvalues (or betas), one colour per token kind; default: the tracking head.

    >>> fig = dl.eigenvalue_histogram(dl.eigenvalue_report(cap), layer=0, head=3)
    >>> len(fig.data) > 0
    True
    """
    if layer is None or head is None:
        layer, head = report.require_tracking_head()
    rows = report.tokens[(report.tokens["layer"] == layer) & (report.tokens["head"] == head)]
    fig = go.Figure()
    for kind, part in rows.groupby("kind", observed=True):
        fig.add_trace(
            go.Histogram(x=part[value], name=str(kind), opacity=0.6, xbins={"start": -1.0, "end": 2.0, "size": 0.05})
        )
    if value == "eigenvalue":
        fig.add_vline(x=report.threshold, line_dash="dash", annotation_text="reflection")
    fig.update_layout(
        barmode="overlay",
        title=f"layer {layer} head {head}: {value} by token kind",
        xaxis_title=value if value != "eigenvalue" else "eigenvalue 1 - beta ||k||^2",
        yaxis_title="tokens",
    )
    return fig


@integer_indices("layer", "head")
def product_eigenvalue_figure(report: EigenvalueReport, layer: int | None = None, head: int | None = None):
    """Non-trivial eigenvalues of the per-action transition products in the complex plane.

    >>> fig = dl.product_eigenvalue_figure(dl.eigenvalue_report(cap), layer=0, head=3)
    >>> len(fig.data) > 0
    True
    """
    if layer is None or head is None:
        layer, head = report.require_tracking_head()
    rows = report.product_eigenvalues
    if not rows.empty:
        rows = rows[(rows["layer"] == layer) & (rows["head"] == head)]
    theta = np.linspace(0, 2 * np.pi, 200)
    fig = go.Figure(
        go.Scatter(x=np.cos(theta), y=np.sin(theta), mode="lines", name="unit circle", line={"color": "lightgrey"})
    )
    if not rows.empty:
        fig.add_trace(
            go.Scatter(
                x=rows["real"],
                y=rows["imag"],
                mode="markers",
                name="eigenvalues",
                marker={"color": rows["perm_id"], "opacity": 0.5},
            )
        )
    fig.update_layout(
        title=f"layer {layer} head {head}: eigenvalues of each action's transition product",
        xaxis_title="real",
        yaxis_title="imag",
        yaxis={"scaleanchor": "x"},
    )
    return fig

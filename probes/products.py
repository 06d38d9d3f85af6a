"""Does a head's per-token product of reflections apply the action's permutation?

One action token t of a delta-rule head moves the state by (decay and writes aside)

    P_t = (I - beta_{t,n-1} k_{t,n-1} k_{t,n-1}^T) ... (I - beta_{t,0} k_{t,0} k_{t,0}^T)     (d_k x d_k)

(n = n_h factors for DeltaProduct, 1 for DeltaNet; an action spread over several tokens, as with
the `code` tokenizer, multiplies all of them: probes/eigenvalues.transition_products). A head
"implements the permutation" pi_t of the action if, in one fixed basis for all tokens, P_t acts
on the variables' subspace as pi_t's permutation matrix. Two tests, both read only P_t, i.e. the
weights and the activations; the action identities enter only as the question asked:

1. spectrum (no basis needed): a permutation with cycles of lengths l_1, l_2, ... has eigenvalues
   exp(2 pi i j / l) (j = 1 .. l - 1) for each cycle, and 1 elsewhere. The cycle type read off P_t's
   spectrum (the partition of n whose spectrum is closest, `spectral_cycle_type`) is compared with
   the action's. A product of n_h reflections moves at most an n_h-dimensional subspace, and a
   cycle type with c cycles needs n - c dimensions: a 3-cycle needs 2 reflections, a 4-cycle 3.
2. intertwiner (the permutation itself): on half of the actions (`fit`), find the d_k x (n - 1) map F
   minimising sum_t ||P_t F - F rho(pi_t)||^2 with ||F|| = 1, where rho is the standard
   representation of S_n (permutation matrices restricted to the sum-zero subspace; it is
   irreducible, so an exact F is injective: Schur). rho(pi) and rho(pi^-1) are both tried (the head
   may move rows or columns). On the other half, each P_t is decoded as the permutation pi minimising
   ||P_t F - F rho(pi)|| over all of S_n; `decoded_accuracy` is how often that is the action's.

A head's verdict is "implements" when the held-out decoded accuracy is >= `accuracy_threshold`
(0.9) and the median held-out relative residual ||P_t F - F rho(pi_t)|| / ||F|| is <= `residual_threshold`
(0.25); the tracking head is the one with the highest decoded accuracy (then the lowest residual).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from scipy.optimize import linear_sum_assignment

from deltalens.interp.capture import deltanet_capture
from deltalens.probes.eigenvalues import transition_products
from deltalens.tasks.display import Summary
from deltalens.tasks.errors import DeltalensError
from deltalens.tasks.groups import lex_unrank
from deltalens.tasks.tokenizers import TokenKind

__all__ = ["NAMES", "ProductReport", "product_report", "cycle_type", "spectral_cycle_type", "standard_rep",
           "product_decoding_figure"]

NAMES = ("beta", "k")


def cycle_type(perm: tuple[int, ...]) -> tuple[int, ...]:
    """Cycle lengths of a permutation (given as images of 0..n-1), longest first, fixed points included."""
    seen, lengths = set(), []
    for start in range(len(perm)):
        if start in seen:
            continue
        length, i = 0, start
        while i not in seen:
            seen.add(i)
            i = perm[i]
            length += 1
        lengths.append(length)
    return tuple(sorted(lengths, reverse=True))


def _partitions(n: int, largest: int | None = None):
    largest = n if largest is None else largest
    if n == 0:
        yield ()
        return
    for part in range(min(n, largest), 0, -1):
        for rest in _partitions(n - part, part):
            yield (part, *rest)


def _spectrum(partition: tuple[int, ...], d: int) -> np.ndarray:
    """The d eigenvalues of a permutation of this cycle type acting on a d-dim space (1 elsewhere)."""
    values = [np.exp(2j * np.pi * j / length) for length in partition for j in range(1, length)]
    return np.array(values + [1.0] * (d - len(values)), dtype=complex)


def spectral_cycle_type(eigenvalues: np.ndarray, n: int) -> tuple[tuple[int, ...], float]:
    """The cycle type (a partition of n) whose spectrum is closest to `eigenvalues` (d complex values),
    by optimal matching; returns (cycle type, mean matching distance)."""
    d = len(eigenvalues)
    best, best_cost = (1,) * n, np.inf
    for partition in _partitions(n):
        if n - len(partition) > d:
            continue
        target = _spectrum(partition, d)
        cost = np.abs(eigenvalues[:, None] - target[None, :])
        rows, cols = linear_sum_assignment(cost)
        total = cost[rows, cols].mean()
        if total < best_cost - 1e-12:
            best, best_cost = partition, total
    return best, float(best_cost)


def standard_rep(perms: list[tuple[int, ...]]) -> np.ndarray:
    """rho(pi) (len(perms), n-1, n-1): pi's permutation matrix (e_i -> e_pi(i)) on the sum-zero subspace."""
    n = len(perms[0])
    basis = np.linalg.qr(np.eye(n) - 1.0 / n)[0][:, : n - 1]  # orthonormal basis of sum-zero vectors
    mats = np.zeros((len(perms), n, n))
    for a, p in enumerate(perms):
        mats[a, list(p), list(range(n))] = 1.0
    return basis.T @ mats @ basis


def _fit_intertwiner(P: np.ndarray, R: np.ndarray) -> tuple[np.ndarray, float]:
    """F (d, m) with ||F|| = 1 minimising sum ||P_t F - F R_t||^2; returns (F, rms relative residual)."""
    d, m = P.shape[-1], R.shape[-1]
    eye_m, eye_d = np.eye(m), np.eye(d)
    # vec(P F - F R) = (I_m kron P - R^T kron I_d) vec(F), vec column-major
    M = np.zeros((d * m, d * m))
    for P_t, R_t in zip(P, R):
        L = np.kron(eye_m, P_t) - np.kron(R_t.T, eye_d)
        M += L.T @ L
    values, vectors = np.linalg.eigh(M)
    F = vectors[:, 0].reshape(m, d).T
    return F, float(np.sqrt(max(values[0], 0.0) / len(P)))


@dataclass(repr=False)
class ProductReport(Summary):
    """Per head: does the per-token product of reflections apply the action's permutation?"""

    heads: pd.DataFrame  # per (layer, head): spectral_agreement, fit_residual, decoded_accuracy, ..., verdict
    actions: pd.DataFrame  # per (layer, head, action): perm, cycle types, held-out decoding
    n_vars: int
    factors: int
    accuracy_threshold: float = 0.9
    residual_threshold: float = 0.25

    def title(self) -> str:
        return (f"ProductReport: does each head's per-token product of {self.factors} reflection(s) apply the "
                f"action's permutation of {self.n_vars} variables?")

    def display_frame(self) -> pd.DataFrame:
        return self.heads

    def highlight(self) -> tuple[int, int] | None:
        return self.tracking_head() if len(self.heads) else None

    def tracking_head(self) -> tuple[int, int]:
        """(layer, head) with the highest held-out decoded accuracy, then the lowest residual."""
        row = self.heads.sort_values(["decoded_accuracy", "heldout_residual"], ascending=[False, True]).iloc[0]
        return int(row["layer"]), int(row["head"])

    def verdict(self) -> str:
        layer, head = self.tracking_head()
        row = self.heads[(self.heads["layer"] == layer) & (self.heads["head"] == head)].iloc[0]
        says = "implements" if row["implements"] else "does not implement"
        return (f"layer {layer} head {head} {says} the actions' permutations: held-out decoded accuracy "
                f"{row['decoded_accuracy']:.3f}, median residual {row['heldout_residual']:.3f}, spectral cycle type "
                f"agreement {row['spectral_agreement']:.3f} over {int(row['n_actions'])} actions")


@torch.no_grad()
def product_report(source, batch=None, max_actions: int = 400, accuracy_threshold: float = 0.9,
                   residual_threshold: float = 0.25, seed: int = 0) -> ProductReport:
    """The product probe on every head; `source` is a Capture (with beta and k) or a model with a batch.

    Up to `max_actions` action occurrences are used (a random subset, `seed`); even-numbered traces
    fit the intertwiner, odd-numbered ones are decoded.
    """
    cap = deltanet_capture(source, batch, NAMES)
    n = cap.n_vars
    if n < 2:
        raise DeltalensError("the product probe needs traces that carry their actions' permutations (perm_id).")
    action_pos, trace = cap.labels["action_pos"], cap.labels["trace"]
    is_action = (cap.labels["kind"] == int(TokenKind.ACTION)) & (action_pos >= 0) & (cap.labels["perm_id"] >= 0)
    if not bool(is_action.any()):
        raise DeltalensError("the batch has no action tokens with a known permutation; use a statement or code trace "
                             "batch from the checkpoint's task.")
    width = int(action_pos.max()) + 1
    group = torch.where(is_action, trace * width + action_pos, torch.full_like(trace, -1))
    first: dict[int, int] = {}
    for row in torch.nonzero(is_action).flatten().tolist():
        first.setdefault(int(group[row]), row)
    ids = sorted(first)
    rng = np.random.default_rng(seed)
    chosen = set(rng.permutation(ids)[:max_actions].tolist()) if len(ids) > max_actions else set(ids)
    group = torch.where(torch.isin(group, torch.tensor(sorted(chosen))), group, torch.full_like(group, -1))

    all_perms = list(itertools.permutations(range(n)))
    all_rho = standard_rep(all_perms)  # (n!, n-1, n-1)
    frames, head_rows = [], []
    factors = cap.layer("beta", 0).shape[-1] if cap.layer("beta", 0).ndim == 3 else 1
    for layer in range(cap.n_layers):
        P_all, gids = transition_products(cap.layer("beta", layer), cap.layer("k", layer), group)  # (A, H, d, d)
        rows = [first[g] for g in gids.tolist()]
        perms = [lex_unrank(int(cap.labels["perm_id"][r]), n) for r in rows]
        true_types = [cycle_type(p) for p in perms]
        fit = np.array([int(trace[r]) % 2 == 0 for r in rows])
        rho = standard_rep(perms)
        perm_index = np.array([all_perms.index(tuple(p)) for p in perms])
        for head in range(P_all.shape[1]):
            P = P_all[:, head].numpy()
            spectra = np.linalg.eigvals(P)
            spectral = [spectral_cycle_type(lam, n) for lam in spectra]
            best = None
            for inverse in (False, True):
                R = np.transpose(rho, (0, 2, 1)) if inverse else rho
                F, residual = _fit_intertwiner(P[fit], R[fit])
                if best is None or residual < best[1]:
                    best = (F, residual, inverse)
            F, fit_residual, inverse = best
            candidates = np.transpose(all_rho, (0, 2, 1)) if inverse else all_rho
            FR = np.einsum("dm,cmk->cdk", F, candidates)  # (n!, d, n-1)
            errors = np.linalg.norm(np.einsum("ade,em->adm", P, F)[:, None] - FR[None], axis=(2, 3))  # (A, n!)
            decoded = errors.argmin(1)
            residual_true = errors[np.arange(len(P)), perm_index]
            held = ~fit
            agree = np.array([s[0] == t for s, t in zip(spectral, true_types)])
            accuracy = float((decoded[held] == perm_index[held]).mean()) if held.any() else float("nan")
            held_residual = float(np.median(residual_true[held])) if held.any() else float("nan")
            head_rows.append({
                "layer": layer, "head": head, "n_actions": len(P), "spectral_agreement": float(agree.mean()),
                "fit_residual": fit_residual, "heldout_residual": held_residual, "decoded_accuracy": accuracy,
                "acts_as": "pi^-1" if inverse else "pi",
                "implements": bool(accuracy >= accuracy_threshold and held_residual <= residual_threshold),
            })
            frames.append(pd.DataFrame({
                "layer": layer, "head": head, "trace": trace[rows].numpy(), "action_pos": action_pos[rows].numpy(),
                "perm": ["".join(map(str, p)) for p in perms],
                "cycle_type": ["+".join(map(str, t)) for t in true_types],
                "spectral_cycle_type": ["+".join(map(str, s[0])) for s in spectral],
                "spectral_distance": [s[1] for s in spectral], "fit": fit,
                "decoded_perm": ["".join(map(str, all_perms[i])) for i in decoded],
                "residual": residual_true,
            }))
    return ProductReport(heads=pd.DataFrame(head_rows), actions=pd.concat(frames, ignore_index=True), n_vars=n,
                         factors=factors, accuracy_threshold=accuracy_threshold,
                         residual_threshold=residual_threshold)


def product_decoding_figure(report: ProductReport, layer: int | None = None, head: int | None = None):
    """Held-out actions of one head: true cycle type vs the cycle type read off P_t's spectrum."""
    if layer is None or head is None:
        layer, head = report.tracking_head()
    rows = report.actions[(report.actions["layer"] == layer) & (report.actions["head"] == head)]
    table = pd.crosstab(rows["cycle_type"], rows["spectral_cycle_type"])
    fig = go.Figure(go.Heatmap(z=table.values, x=list(table.columns), y=list(table.index), colorscale="Blues",
                               text=table.values, texttemplate="%{text}", colorbar={"title": "actions"}))
    fig.update_layout(title=f"layer {layer} head {head}: action's cycle type vs the spectrum of its product",
                      xaxis_title="cycle type read off the eigenvalues", yaxis_title="action's cycle type")
    return fig

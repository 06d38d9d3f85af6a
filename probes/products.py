"""Does a head's per-token product of reflections apply the action's permutation?

One action token t of a delta-rule head moves the state by (decay and writes aside)

    P_t = (I - beta_{t,n-1} k_{t,n-1} k_{t,n-1}^T) ... (I - beta_{t,0} k_{t,0} k_{t,0}^T)     (d_k x d_k)

(n = n_h factors for DeltaProduct, 1 for DeltaNet; an action spread over several tokens, as with
the `code` tokenizer, multiplies all of them: probes/eigenvalues.transition_products). A head
applies the actions' permutations if, in one fixed basis for all tokens, P_t acts on some subspace
as rho(pi_t) for a representation rho of the group G the actions generate: an intertwiner F
(d_k x dim rho) with P_t F = F rho(pi_t). The probe reads only P_t, i.e. the weights and the
activations; the action identities enter only as the question asked. The group maths (cycle
types, irreps, the intertwiner fit and decoding) is tasks/representations.py.

1. irreducible representations: every non-trivial irrep of G is tried (`irreps`: for S4 the
   standard 3-dim one (pi's permutation matrix on the sum-zero vectors), standard x sign, the 2-dim
   one through S4 -> S3, the sign; for A5 the 4-dim standard, two 3-dim (the icosahedron's
   rotations) and the 5-dim), in both orientations (g or g^-1: the model's composition order is its
   own). F is fitted on half of the actions (even-numbered traces, least squares with ||F|| = 1);
   on the other half each P_t is decoded as the group element g minimising ||P_t F - F rho(g)||.
   The irrep (and orientation) with the lowest rms residual on the fitting half is the head's (ties
   within 1e-3 go to the faithful, then the standard, irrep), judged on the held-out half: a median
   there can be ~0 for a wrong choice (the sign on a head that does nothing, when most
   permutations are even; g for g^-1 when most are their own inverse); `fits` lists every irrep
   whose held-out median residual is under the threshold. A faithful irrep decodes the permutation
   itself; a non-faithful one (the sign) only its image. How many reflections an irrep needs
   differs: a 4-cycle is 3 reflections in the standard representation of S4 but 2 in standard x
   sign; every rotation of the icosahedron (A5's 3-dim irreps) is 2.
2. context: `context_spread` is the mean distance of P_t from the mean P of the same action (per
   sqrt(d_k); elements seen once left out): 0 when the transition is a function of the action alone,
   never negative. Keys come out of a short
   causal convolution, so they can depend on the preceding tokens too; a head whose reflection axes
   move with the context has no fixed basis, and the intertwiner test fails even when each P_t
   is a reflection.
   Groups larger than S5 get the standard representation only, decoded among the elements that occur.
3. spectrum (no basis needed, standard representation): a permutation with cycles of lengths
   l_1, l_2, ... has eigenvalues exp(2 pi i j / l) (j = 1 .. l - 1) for each cycle and 1 elsewhere,
   plus a -1 where the head fixes the parity in one more dimension (`spectral_cycle_type`); the
   cycle type closest to P_t's spectrum is compared with the action's.
4. span="readout": the same tests on the product of every token's transition from one read-out
   (a token whose logits predict a revealed value) to the next, against the permutation composed
   in between (from the traces' state labels). Bases that move with the context can cancel there:
   the state only has to be in a fixed basis where it is read. The residual then also carries
   the other tokens' transitions (prints, values), so it stays above the per-action one even for
   a head that implements each action (the shipped no-conv S4 head: 0.17 per action, 0.65 here).

A head *implements* the permutations when its best irrep is faithful, >= `accuracy_threshold` (0.9)
of the held-out actions decode to the right element and the median held-out relative residual
||P_t F - F rho(pi_t)|| / ||F|| is <= `residual_threshold` (0.25). The tracking head is the one with
the highest decoded accuracy (then the lowest residual).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices
from deltalens.interp.capture import delta_rule_capture, require_layers
from deltalens.models.architecture import require_householder
from deltalens.probes.eigenvalues import transition_products
from deltalens.tasks.groups import lex_unrank
from deltalens.tasks.representations import (  # the group maths; its public names stay importable from here
    MAX_IRREP_ORDER,
    Irrep,
    RepresentationFit,
    cycle_type,
    fit_representation,
    generated_group,
    group_representations,
    irreps,
    spectral_cycle_type,
    standard_rep,
)
from deltalens.tasks.tokenizers import TokenKind

__all__ = [
    "NAMES",
    "SPANS",
    "MAX_IRREP_ORDER",
    "HeadFit",
    "Irrep",
    "ProductReport",
    "product_report",
    "fit_head",
    "cycle_type",
    "generated_group",
    "irreps",
    "spectral_cycle_type",
    "standard_rep",
    "product_decoding_figure",
]

NAMES = ("beta", "k")
SPANS = ("action", "readout")  # one product per action, or per stretch between consecutive read-outs
TIE = 1e-3  # fitting residuals closer than this count as equal when picking a head's irrep


@dataclass(repr=False)
class ProductReport(Summary):
    """Per head: does the per-token product of reflections apply the action's permutation?

    >>> report = dl.product_report(cap)
    >>> report.n_vars, report.group_order
    (3, 6)
    """

    heads: pd.DataFrame  # per (layer, head): the best-fitting irrep, residuals, decoded accuracy, verdict
    actions: pd.DataFrame  # per (layer, head, action): perm, cycle types, held-out decoding
    n_vars: int
    factors: int
    group_order: int
    accuracy_threshold: float = 0.9
    residual_threshold: float = 0.25
    span: str = "action"  # one product per action, or per stretch between read-outs (see product_report)

    def title(self) -> str:
        if self.span == "readout":
            return (
                f"ProductReport (span='readout'): does each head's product of transitions between consecutive "
                f"read-outs apply the permutation composed there (a group of order {self.group_order} on "
                f"{self.n_vars} variables)?"
            )
        return (
            f"ProductReport: does each head's per-token product of {self.factors} reflection(s) apply the "
            f"action's permutation (a group of order {self.group_order} on {self.n_vars} variables)?"
        )

    def display_frame(self) -> pd.DataFrame:
        return self.heads

    def highlight(self) -> tuple[int, int] | None:
        return self.tracking_head()

    def tracking_head(self) -> tuple[int, int] | None:
        """(layer, head) with the highest held-out decoded accuracy, then the lowest residual (None: no heads)."""
        if self.heads.empty:
            return None
        row = self.heads.sort_values(["decoded_accuracy", "heldout_residual"], ascending=[False, True]).iloc[0]
        return int(row["layer"]), int(row["head"])

    def standing(self, row: pd.Series) -> str:
        """Where a head's row stands under the rule (module docstring): "implements"; "loose", faithful and
        decoding at least accuracy_threshold but its products fitting loosely; or "none"."""
        if row["implements"]:
            return "implements"
        if row["faithful"] and row["decoded_accuracy"] >= self.accuracy_threshold:
            return "loose"
        return "none"

    def verdict(self) -> str:
        found = self.tracking_head()
        if found is None:
            return "no head was probed."
        layer, head = found
        row = self.heads[(self.heads["layer"] == layer) & (self.heads["head"] == head)].iloc[0]
        what, unit = (
            ("the actions' permutations", "actions")
            if self.span == "action"
            else ("the permutations composed between read-outs", "stretches between read-outs")
        )
        standing = self.standing(row)
        if standing == "implements":
            says = f"Layer {layer} head {head} implements {what}"
        elif standing == "loose":
            says = (
                f"Layer {layer} head {head} decodes {what}, but not cleanly (median residual > "
                f"{self.residual_threshold}), so no head implements them"
            )
        else:
            says = f"No head implements {what}; the best decoding, layer {layer} head {head}"
        return (
            f"{says}: best fit the {row['rep']} "
            f"representation ({'faithful' if row['faithful'] else 'not faithful'}, acting as {row['acts_as']}), "
            f"held-out decoded accuracy {row['decoded_accuracy']:.3f}, median residual "
            f"{row['heldout_residual']:.3f}; spectral cycle type agreement {row['spectral_agreement']:.3f} over "
            f"{int(row['n_actions'])} {unit}"
        )


def _action_spans(cap) -> tuple[torch.Tensor, dict[int, int], dict[int, tuple[int, ...]]]:
    """span="action": one group per action occurrence (its token or tokens), its permutation from perm_id.
    Returns (group id per row, -1 outside; the first row of each group; each group's permutation)."""
    n = cap.n_vars
    action_pos, trace = cap.labels["action_pos"], cap.labels["trace"]
    is_action = (cap.labels["kind"] == int(TokenKind.ACTION)) & (action_pos >= 0) & (cap.labels["perm_id"] >= 0)
    if not bool(is_action.any()):
        raise DeltalensError(
            "the batch has no action tokens with a known permutation; use a statement or code trace "
            "batch from the checkpoint's task."
        )
    width = int(action_pos.max()) + 1
    group = torch.where(is_action, trace * width + action_pos, torch.full_like(trace, -1))
    first: dict[int, int] = {}
    for row in torch.nonzero(is_action).flatten().tolist():
        first.setdefault(int(group[row]), row)
    return group, first, {g: lex_unrank(int(cap.labels["perm_id"][r]), n) for g, r in first.items()}


def _readout_spans(cap) -> tuple[torch.Tensor, dict[int, int], dict[int, tuple[int, ...]]]:
    """span="readout": one group per stretch of a trace from just after one read-out token (whose logits
    predict a revealed value) to the next one, inclusive: every token's transition in between. Its
    permutation sigma is what the stretch did to the variables, s_end[i] = s_start[sigma(i)] (the
    convention of an action's perm_id), read off the trace's state labels; stretches whose start
    holds a value twice (so sigma is not determined) are left out."""
    kind, trace = cap.labels["kind"], cap.labels["trace"]
    # rows are in (trace, position) order: row r + 1 is the next token of the same trace
    readout = torch.zeros(len(kind), dtype=torch.bool)
    readout[:-1] = (kind[1:] == int(TokenKind.REVEAL)) & (trace[1:] == trace[:-1])
    rows = torch.nonzero(readout).flatten().tolist()
    group = torch.full_like(trace, -1)
    first, perms = {}, {}
    for start, end in zip(rows, rows[1:]):
        before, after = cap.states[start].tolist(), cap.states[end].tolist()
        if trace[start] != trace[end] or len(set(before)) < len(before) or sorted(before) != sorted(after):
            continue
        gid = len(first)
        group[start + 1 : end + 1] = gid
        first[gid] = end
        perms[gid] = tuple(before.index(value) for value in after)
    if not first:
        raise DeltalensError(
            "span='readout' needs traces with at least two reveals after the variables hold "
            "distinct values (a statement or code trace batch of the checkpoint's task)."
        )
    return group, first, perms


@dataclass
class HeadFit:
    """One head's products P_t against the group: the best-fitting representation, what it decodes, the verdict."""

    best: RepresentationFit  # the lowest fitting residual; near-ties (within TIE) keep the earlier irrep
    fits: list[str]  # every irrep (either orientation) whose held-out median residual is under the threshold
    spectral: list[tuple[tuple[int, ...], float]]  # per product: (cycle type read off its spectrum, distance)
    spectral_agreement: float  # fraction of products whose spectral cycle type is the true one
    context_spread: float  # mean ||P_t - mean P of the same element|| / sqrt(d_k): 0 for a function of the action
    decoded_accuracy: float  # held-out products decoded to the right element (NaN: none held out)
    implements: bool

    def row(self) -> dict:
        """The head's columns of ProductReport.heads (after layer and head)."""
        best = self.best
        return {
            "n_actions": len(best.decoded),
            "spectral_agreement": self.spectral_agreement,
            "context_spread": self.context_spread,
            "rep": best.rep.name,
            "rep_dim": best.rep.dim,
            "faithful": best.rep.faithful,
            "acts_as": "g^-1" if best.inverse else "g",
            "fit_residual": best.fit_residual,
            "heldout_residual": best.heldout_residual,
            "decoded_accuracy": self.decoded_accuracy,
            "fits": ", ".join(dict.fromkeys(self.fits)),
            "implements": self.implements,
        }


def _context_spread(P: np.ndarray, element_index: np.ndarray, n_elements: int) -> float:
    """How much P_t varies between occurrences of the same element (0: a function of the action alone).

    The mean over products of ||P_t - mean P of its element||_F / sqrt(d_k): a mean of norms, so never
    negative. Elements seen once are left out (their distance to their own mean is 0 whatever the
    head does, which would pull the mean down); NaN when no element occurs twice."""
    counts = np.bincount(element_index, minlength=n_elements)
    repeated = counts[element_index] >= 2
    if not repeated.any():
        return float("nan")
    sums = np.zeros((n_elements, *P.shape[1:]))
    np.add.at(sums, element_index, P)
    means = sums / np.maximum(counts, 1)[:, None, None]
    distance = np.linalg.norm(P - means[element_index], axis=(1, 2)) / np.sqrt(P.shape[-1])
    return float(distance[repeated].mean())


def fit_head(
    P: np.ndarray,
    reps: list[Irrep],
    element_index: np.ndarray,
    fit: np.ndarray,
    true_types: list[tuple[int, ...]],
    n_elements: int,
    accuracy_threshold: float = 0.9,
    residual_threshold: float = 0.25,
) -> HeadFit:
    """Every representation in both orientations on one head's products P (A, d_k, d_k); the verdict.

    element_index (A,): each product's true element among the group's n_elements; fit (A,): the
    products that fit the intertwiners (the rest are decoded); true_types: their cycle types."""
    held = ~fit
    n = sum(true_types[0]) if true_types else 0  # a cycle type's lengths add up to n
    spectral = [spectral_cycle_type(lam, n) for lam in np.linalg.eigvals(P)]
    fits, best = [], None
    for rep in reps:
        for inverse in (False, True):
            candidate = fit_representation(P, rep, inverse, element_index, fit)
            if candidate.heldout_residual <= residual_threshold:
                fits.append(rep.name)
            # Chosen on the fitting half (rms residual), judged on the held-out half. Near-ties
            # (within TIE) keep the earlier irrep: faithful ones, the standard first.
            if best is None or candidate.fit_residual < best.fit_residual - TIE:
                best = candidate
    if best is None:
        raise DeltalensError("no representation to fit the products to: give fit_head at least one")
    accuracy = float((best.decoded[held] == element_index[held]).mean()) if held.any() else float("nan")
    agree = np.array([s[0] == t for s, t in zip(spectral, true_types)])
    implements = bool(
        best.rep.faithful and accuracy >= accuracy_threshold and best.heldout_residual <= residual_threshold
    )
    spread = _context_spread(P, element_index, n_elements)
    return HeadFit(best, fits, spectral, float(agree.mean()), spread, accuracy, implements)


def _chosen_spans(cap, span: str, max_actions: int, seed: int):
    """The spans (as `_action_spans`) with up to `max_actions` of them kept (a random subset, the others' group
    set to -1), plus the permutations of every span, kept or not: they define the group to decode in."""
    group, first, perm_of = (_action_spans if span == "action" else _readout_spans)(cap)
    ids = sorted(first)
    rng = np.random.default_rng(seed)
    chosen = set(rng.permutation(ids)[:max_actions].tolist()) if len(ids) > max_actions else set(ids)
    group = torch.where(torch.isin(group, torch.tensor(sorted(chosen))), group, torch.full_like(group, -1))
    return group, first, perm_of, [perm_of[g] for g in ids]


def _action_frame(cap, layer, head, rows, perms, true_types, fit, head_fit: HeadFit, elements) -> pd.DataFrame:
    """ProductReport.actions for one head: one row per product."""
    return pd.DataFrame(
        {
            "layer": layer,
            "head": head,
            "trace": cap.labels["trace"][rows].numpy(),
            "action_pos": cap.labels["action_pos"][rows].numpy(),
            "perm": ["".join(map(str, p)) for p in perms],
            "cycle_type": ["+".join(map(str, t)) for t in true_types],
            "spectral_cycle_type": ["+".join(map(str, s[0])) for s in head_fit.spectral],
            "spectral_distance": [s[1] for s in head_fit.spectral],
            "fit": fit,
            "decoded_perm": ["".join(map(str, elements[i])) for i in head_fit.best.decoded],
            "residual": head_fit.best.residual,
        }
    )


@torch.no_grad()
def product_report(
    source,
    batch=None,
    max_actions: int = 400,
    accuracy_threshold: float = 0.9,
    residual_threshold: float = 0.25,
    seed: int = 0,
    span: str = "action",
) -> ProductReport:
    """The product probe on every head; `source` is a Capture (with beta and k) or a model with a batch.

    span: "action" (default) takes one product per action (its token, or its tokens with the code
    tokenizer), decoded as the action's permutation. "readout" takes the product of every token's
    transition between consecutive read-outs (the tokens whose logits predict a revealed value),
    decoded as the permutation that stretch composed: a head whose keys move with the context (a
    short convolution) can apply each action in a basis of its own and still compose to the
    permutation, in a fixed basis, at the tokens where the state is read.
    Up to `max_actions` products are used (a random subset, `seed`); even-numbered traces fit the
    intertwiners, odd-numbered ones are decoded. Every non-trivial irreducible representation of
    the group the permutations generate is tried (`irreps`), in both orientations.

    >>> report = dl.product_report(cap)                    # per action token: is the head's product a permutation?
    >>> isinstance(report, dl.ProductReport)
    True
    """
    if span not in SPANS:
        raise DeltalensError(f"span must be one of {', '.join(SPANS)}; got {span!r}.")
    require_householder(source, "product_report")
    cap = delta_rule_capture(source, batch, NAMES)
    layers = require_layers(cap, NAMES, "product_report")
    n = cap.n_vars
    if n < 2:
        raise DeltalensError("the product probe needs traces that carry their actions' permutations (perm_id).")
    group, first, perm_of, observed = _chosen_spans(cap, span, max_actions, seed)
    elements, reps = group_representations(observed, n, seed=seed)
    where = {g: i for i, g in enumerate(elements)}
    frames, head_rows = [], []
    factors = cap.layer("beta", layers[0]).shape[-1] if cap.layer("beta", layers[0]).ndim == 3 else 1
    for layer in layers:
        P_all, gids = transition_products(cap.layer("beta", layer), cap.layer("k", layer), group)  # (A, H, d, d)
        rows = [first[g] for g in gids.tolist()]
        perms = [perm_of[g] for g in gids.tolist()]
        true_types = [cycle_type(p) for p in perms]
        fit = np.array([int(cap.labels["trace"][r]) % 2 == 0 for r in rows])
        element_index = np.array([where[tuple(p)] for p in perms])
        for head in range(P_all.shape[1]):
            P = P_all[:, head].numpy()
            head_fit = fit_head(
                P, reps, element_index, fit, true_types, len(elements), accuracy_threshold, residual_threshold
            )
            head_rows.append({"layer": layer, "head": head, **head_fit.row()})
            frames.append(_action_frame(cap, layer, head, rows, perms, true_types, fit, head_fit, elements))
    return ProductReport(
        heads=pd.DataFrame(head_rows),
        actions=pd.concat(frames, ignore_index=True),
        n_vars=n,
        factors=factors,
        group_order=len(elements),
        accuracy_threshold=accuracy_threshold,
        residual_threshold=residual_threshold,
        span=span,
    )


@integer_indices("layer", "head")
def product_decoding_figure(report: ProductReport, layer: int | None = None, head: int | None = None):
    """Held-out actions of one head: true cycle type vs the cycle type read off P_t's spectrum.

    >>> fig = dl.product_decoding_figure(dl.product_report(cap))
    >>> len(fig.data) > 0
    True
    """
    if layer is None or head is None:
        found = report.tracking_head()
        if found is None:
            raise DeltalensError("no head was probed: the product report has no actions to draw")
        layer, head = found
    rows = report.actions[(report.actions["layer"] == layer) & (report.actions["head"] == head)]
    table = pd.crosstab(rows["cycle_type"], rows["spectral_cycle_type"])
    fig = go.Figure(
        go.Heatmap(
            z=table.values,
            x=list(table.columns),
            y=list(table.index),
            colorscale="Blues",
            zmin=0,
            text=table.values,
            texttemplate="%{text}",
            colorbar={"title": "actions"},
        )
    )
    # cycle types such as "4" or "2+1+1" are labels, not numbers
    fig.update_layout(
        title=f"layer {layer} head {head}: action's cycle type vs the spectrum of its product",
        xaxis={"title": "cycle type read off the eigenvalues", "type": "category"},
        yaxis={"title": "action's cycle type", "type": "category"},
    )
    return fig

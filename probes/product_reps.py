"""Which representation does a head's product of reflections apply? The product probe, one row per representation.

`probes/products.py` picks, per head, the irrep that fits best and reports that one. This asks the
question the other way round, for named representations given exactly: for every head and every
representation rho in `representations(elements)` (the standard one of S_n, and for S4 and A5 their
3-dim rotation representations from tasks/rotation_reps.py), does P_t act as rho(pi_t) on some
d_k x dim rho subspace?

Method (the one of products.py, run per representation): P_t is the product of the token's
Householder factors read from beta and k (or, span="readout", of every token's transition between two
read-outs); an intertwiner F (d_k x dim rho, ||F|| = 1) with P_t F = F rho(pi_t) is fitted by least
squares on the even-numbered traces, in both orientations (rho(g) or rho(g^-1), chosen by the fitting
residual); each product of the odd-numbered traces is decoded as the element g minimising
||P_t F - F rho(g)||. A head *applies* rho when >= 90% of the held-out products decode right with a
median relative residual <= 0.25 (products.py's thresholds). Decoding is also split by cycle type,
beside the number of reflections an element of that type needs in rho (rank(rho(g) - I)): a head with
n_h factors cannot apply rho exactly where rho needs more than n_h, which is where the decoding of a
head that uses rho should fail.

In a representation that needs r reflections for g, a d_k x d_k product of n_h < r reflections can still
come near rho(g) on the subspace only by chance, so per-cycle-type decoding separates "this head uses
the standard representation and misses the 4-cycles" from "it uses the rotation one, which needs 2".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import delta_rule_capture, require_layers
from deltalens.probes.eigenvalues import transition_products
from deltalens.probes.products import NAMES, SPANS, _chosen_spans
from deltalens.tasks.groups import lex_unrank
from deltalens.tasks.representations import (
    Irrep,
    cycle_type,
    fit_representation,
    generated_group,
    standard_rep,
)
from deltalens.tasks.rotation_reps import reflections_needed, rotation_irreps
from deltalens.tasks.tokenizers import TokenKind

__all__ = ["RepresentationReport", "representations", "representation_report", "reflections_by_type"]


def representations(elements: list[tuple[int, ...]]) -> list[Irrep]:
    """The standard representation of S_n on the group's elements, and the 3-dim rotation ones where
    the group is S4 or A5."""
    reps = [Irrep("standard", len(elements[0]) - 1, True, standard_rep(elements))]
    order, points = len(elements), len(elements[0])
    if (points, order) in ((4, 24), (5, 60)):
        reps += rotation_irreps(elements)
    return reps


def reflections_by_type(rep: Irrep, elements: list[tuple[int, ...]]) -> dict[str, int]:
    """cycle type ("4", "3+1", ...) -> reflections an element of that type needs in `rep` (the most over
    the type's elements; in an irrep they agree, since conjugate matrices have the same rank)."""
    out: dict[str, int] = {}
    for g, m in zip(elements, rep.matrices):
        key = "+".join(map(str, cycle_type(g)))
        out[key] = max(out.get(key, 0), reflections_needed(m))
    return out


@dataclass(repr=False)
class RepresentationReport(Summary):
    """Per (layer, head, representation): does the head's product of transitions apply it?"""

    heads: pd.DataFrame  # one row per (layer, head, rep)
    by_type: pd.DataFrame  # one row per (layer, head, rep, cycle type): held-out decoded accuracy, reflections needed
    products: pd.DataFrame  # one row per (layer, head, rep, held-out product): right?, residual, its actions' needs
    span: str
    group_order: int
    accuracy_threshold: float = 0.9
    residual_threshold: float = 0.25

    def title(self) -> str:
        what = "per-token product" if self.span == "action" else "product between read-outs"
        return f"RepresentationReport: which representation does each head's {what} apply (|G| = {self.group_order})?"

    def display_frame(self) -> pd.DataFrame:
        return self.heads

    def best(self, rep: str) -> pd.Series:
        """The head that decodes best in representation `rep` (then the lowest residual)."""
        rows = self.heads[self.heads["rep"] == rep]
        if rows.empty:
            raise DeltalensError(f"no representation {rep!r} here; the report has {sorted(set(self.heads['rep']))}.")
        return rows.sort_values(["decoded_accuracy", "heldout_residual"], ascending=[False, True]).iloc[0]

    def verdict(self) -> str:
        parts = []
        for rep in dict.fromkeys(self.heads["rep"]):
            row = self.best(rep)
            says = "applies it" if row["applies"] else "does not apply it"
            parts.append(
                f"{rep} (needs up to {int(row['max_reflections'])} reflections): best L{int(row['layer'])}H"
                f"{int(row['head'])}, decoded {row['decoded_accuracy']:.3f}, residual "
                f"{row['heldout_residual']:.3f}, {says}"
            )
        return "; ".join(parts)


def _span_actions(cap, group: torch.Tensor) -> dict[int, tuple[tuple[int, ...], ...]]:
    """span id -> the permutations of the action tokens inside it, in order (one per action)."""
    n = cap.n_vars
    kind, action_pos, perm_id = cap.labels["kind"], cap.labels["action_pos"], cap.labels["perm_id"]
    out: dict[int, list] = {}
    last: dict[int, int] = {}
    for row in torch.nonzero(group >= 0).flatten().tolist():
        g = int(group[row])
        out.setdefault(g, [])
        if int(kind[row]) == int(TokenKind.ACTION) and int(perm_id[row]) >= 0 and last.get(g) != int(action_pos[row]):
            last[g] = int(action_pos[row])  # a code-tokenizer action spans several tokens: count it once
            out[g].append(lex_unrank(int(perm_id[row]), n))
    return {g: tuple(v) for g, v in out.items()}


@dataclass(frozen=True)
class _Spans:
    """One layer's spans: each one's element index, whether it is fitted (else held out), cycle type, actions."""

    index: np.ndarray
    fit: np.ndarray
    types: np.ndarray
    inside: list


def _rep_rows(P, rep, spans: _Spans, needs: dict, needs_of: dict, accuracy_threshold: float, residual_threshold: float):
    """One head under one representation: its summary row, a row per held-out product, a row per cycle type."""
    a, b = (fit_representation(P, rep, inverse, spans.index, spans.fit) for inverse in (False, True))
    best = a if a.fit_residual <= b.fit_residual else b
    right, held, types = best.decoded == spans.index, ~spans.fit, spans.types
    accuracy = float(right[held].mean()) if held.any() else float("nan")
    summary = {
        "dim": rep.dim,
        "max_reflections": max(needs.values()),
        "acts_as": "g^-1" if best.inverse else "g",
        "fit_residual": best.fit_residual,
        "heldout_residual": best.heldout_residual,
        "decoded_accuracy": accuracy,
        "applies": bool(accuracy >= accuracy_threshold and best.heldout_residual <= residual_threshold),
        "n_products": int(held.sum()),
    }
    most = [max((needs_of[a] for a in acts), default=0) for acts in spans.inside]
    products = [
        {
            "cycle_type": types[i],
            "actions": len(spans.inside[i]),
            "most_reflections_of_an_action": most[i],
            "right": bool(right[i]),
            "residual": float(best.residual[i]),
        }
        for i in np.flatnonzero(held)
    ]
    by_type = []
    for kind in sorted(set(types[held])):
        chosen = held & (types == kind)
        by_type.append(
            {
                "cycle_type": kind,
                "reflections": needs.get(kind),
                "decoded_accuracy": float(right[chosen].mean()),
                "median_residual": float(np.median(best.residual[chosen])),
                "n": int(chosen.sum()),
            }
        )
    return summary, products, by_type


@torch.no_grad()
def representation_report(
    source,
    batch=None,
    span: str = "action",
    max_actions: int = 400,
    seed: int = 0,
    accuracy_threshold: float = 0.9,
    residual_threshold: float = 0.25,
) -> RepresentationReport:
    """The per-representation product probe (module docstring) on every head of `source` (a Capture with
    beta and k, or a delta-rule model with a batch)."""
    if span not in SPANS:
        raise DeltalensError(f"span must be one of {', '.join(SPANS)}; got {span!r}.")
    cap = delta_rule_capture(source, batch, NAMES)
    layers = require_layers(cap, NAMES, "product_representations")
    group, first, perm_of, observed = _chosen_spans(cap, span, max_actions, seed)
    elements = generated_group(observed, limit=120)
    if elements is None:
        raise DeltalensError("the per-representation probe handles groups of up to 120 elements (S5).")
    reps = representations(elements)
    needs = {rep.name: reflections_by_type(rep, elements) for rep in reps}
    needs_of = {rep.name: {g: reflections_needed(m) for g, m in zip(elements, rep.matrices)} for rep in reps}
    where = {g: i for i, g in enumerate(elements)}
    contents = _span_actions(cap, group)
    head_rows, type_rows, product_rows = [], [], []
    for layer in layers:
        P_all, gids = transition_products(cap.layer("beta", layer), cap.layer("k", layer), group)
        rows = [first[g] for g in gids.tolist()]
        perms = [perm_of[g] for g in gids.tolist()]
        types = np.array(["+".join(map(str, cycle_type(p))) for p in perms])
        fit = np.array([int(cap.labels["trace"][r]) % 2 == 0 for r in rows])
        index = np.array([where[tuple(p)] for p in perms])
        inside = [contents.get(int(g), ()) for g in gids.tolist()]  # the actions of each span
        spans = _Spans(index, fit, types, inside)
        for head in range(P_all.shape[1]):
            P = P_all[:, head].numpy()
            for rep in reps:
                heads, products, by_type = _rep_rows(
                    P, rep, spans, needs[rep.name], needs_of[rep.name], accuracy_threshold, residual_threshold
                )
                at = {"layer": layer, "head": head, "rep": rep.name}
                head_rows.append({**at, **heads})
                product_rows += [{**at, **row} for row in products]
                type_rows += [{**at, **row} for row in by_type]
    return RepresentationReport(
        heads=pd.DataFrame(head_rows),
        by_type=pd.DataFrame(type_rows),
        products=pd.DataFrame(product_rows),
        span=span,
        group_order=len(elements),
        accuracy_threshold=accuracy_threshold,
        residual_threshold=residual_threshold,
    )

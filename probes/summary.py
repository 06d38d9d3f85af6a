"""Every per-head measurement of a model in one table: what `deltalens probe` prints.

For a delta-rule model (DeltaNet, Gated DeltaNet, DeltaProduct): one row per (layer, head) with the
beta / eigenvalue statistics on action tokens (eigenvalues.py), whether the per-token product of
reflections applies the action's permutation and the product between consecutive read-outs the
permutation composed there (products.py: perm_decoded, perm_decoded_readout), the state's effective
rank, PCA dimension and action-key span (subspace.py) and the linear-probe accuracy of its state
(linear_probes.py), plus the residual-stream probes per layer and the tracking head (highest
reflection fraction; for DeltaProduct the head whose products are the permutations, when one is). For a
Transformer or LSTM the beta and state parts are skipped with a note saying why, and the
residual-stream probes are still reported.

    summary = probe_summary(model, batch)       # a ProbeSummary: .heads, .layers, .tracking_head
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.interp.batch_inputs import as_batch
from deltalens.interp.capture import capture
from deltalens.models.architecture import architecture_of, article_of, delta_layers_of
from deltalens.models.capabilities import capabilities_of
from deltalens.models.registry import family
from deltalens.probes.eigenvalues import eigenvalue_report
from deltalens.probes.linear_probes import linear_probes
from deltalens.probes.products import product_report
from deltalens.probes.subspace import subspace_report

HEAD_COLUMNS = (
    "mean_beta_action",
    "neg_eig_fraction",
    "reflection_fraction",
    "perm_decoded",
    "perm_decoded_readout",
    "effective_rank",
    "pca_dim_90",
    "pca_dim_99",
    "key_rank",
    "key_dim_90",
    "probe_accuracy_value",
    "probe_accuracy_source",
)


@dataclass(repr=False)
class ProbeSummary(Summary):
    """One table per head and per layer of what the probes measure, with the tracking head named.

    >>> summary = dl.probe_summary(model, batch, probes=False)
    >>> isinstance(summary, dl.ProbeSummary), summary.architecture
    (True, 'deltanet')
    """

    architecture: str
    n_traces: int
    heads: pd.DataFrame  # one row per (layer, head); empty without beta / state
    layers: pd.DataFrame  # residual-stream probes: site, layer, target, accuracy, control_accuracy, majority_rate
    tracking_head: tuple[int, int] | None = None
    skipped: list[str] = field(default_factory=list)  # what was not measured, and why
    reports: dict[str, Any] = field(default_factory=dict)  # the full reports: eigenvalues, subspace, probes

    def title(self) -> str:
        return f"ProbeSummary of a {self.architecture} on {self.n_traces} held-out traces"

    def display_frame(self) -> pd.DataFrame:
        if self.heads.empty:
            return self.layers
        return self.heads[[c for c in ("layer", "head", *HEAD_COLUMNS) if c in self.heads]]

    def highlight(self) -> tuple[int, int] | None:
        return self.tracking_head

    def to_dict(self) -> dict[str, Any]:
        def clean(rows):
            return [
                {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()} for row in rows
            ]

        heads = clean(self.heads.to_dict(orient="records"))
        for row in heads:
            row["layer"], row["head"] = int(row["layer"]), int(row["head"])
            # headline probe accuracy: decoding each variable's current value from the head's state
            row["probe_accuracy"] = row.get("probe_accuracy_value")
        return {
            "architecture": self.architecture,
            "n_traces": self.n_traces,
            "tracking_head": None
            if self.tracking_head is None
            else {"layer": self.tracking_head[0], "head": self.tracking_head[1]},
            "heads": heads,
            "layers": clean(self.layers.to_dict(orient="records")),
            "skipped": self.skipped,
        }


def probe_summary(
    model, batch, probes: bool = True, probe_at: str = "readout", seed: int = 0, progress: bool = False
) -> ProbeSummary:
    """Every per-head measurement on one batch of held-out traces (the module docstring).

    >>> summary = dl.probe_summary(model, batch, probes=False)
    >>> summary.tracking_head
    (0, 3)
    """
    arch = architecture_of(model)
    batch = as_batch(model, batch)  # a batch, token ids or REPL text
    n_traces = int(batch["tokens"].shape[0])
    skipped, reports = [], {}
    heads = pd.DataFrame()
    tracking = None
    if delta_layers_of(model) and "householder" not in capabilities_of(model):  # Comba, RWKV-7
        cap = capture(model, batch, names=("beta", "k", "state", "resid"))
        sub = subspace_report(cap, seed=seed)
        reports["subspace"] = sub
        heads = sub.heads
        skipped.append(
            f"eigenvalues, per-token products and the tracking head: {article_of(arch)} has transitions "
            f"{family(arch).transition}, not alpha (I - beta k k^T); the census (dl.census) gives their exact "
            "eigenvalues."
        )
    elif delta_layers_of(model):
        cap = capture(model, batch, names=("beta", "k", "state", "resid"))
        eig = eigenvalue_report(cap)
        sub = subspace_report(cap, seed=seed)
        reports.update(eigenvalues=eig, subspace=sub)
        heads = eig.heads.merge(sub.heads, on=["layer", "head"])
        tracking = eig.tracking_head()
        try:
            products = product_report(cap, seed=seed)
        except DeltalensError as err:  # e.g. a batch without action permutations
            skipped.append(f"per-token products: {err}")
        else:
            reports["products"] = products
            columns = products.heads[
                ["layer", "head", "spectral_agreement", "decoded_accuracy", "heldout_residual", "implements"]
            ].rename(columns={"decoded_accuracy": "perm_decoded"})
            heads = heads.merge(columns, on=["layer", "head"], how="left")
            if getattr(model, "n_factors", 1) > 1 and bool(products.heads["implements"].any()):
                tracking = products.tracking_head()  # a head whose products are the permutations
        try:
            readout = product_report(cap, seed=seed, span="readout")
        except DeltalensError as err:  # e.g. fewer than two reveals per trace
            skipped.append(f"products between read-outs: {err}")
        else:
            reports["products_readout"] = readout
            columns = readout.heads[["layer", "head", "decoded_accuracy"]].rename(
                columns={"decoded_accuracy": "perm_decoded_readout"}
            )
            heads = heads.merge(columns, on=["layer", "head"], how="left")
    else:
        cap = capture(model, batch, names=("resid",))
        skipped.append(
            f"eigenvalues and state subspaces: {article_of(arch)} has no delta-rule layer (no beta, no matrix "
            f"state S_t); residual-stream probes only."
        )
    layers = pd.DataFrame()
    if probes:
        report = linear_probes(cap, at=probe_at, seed=seed, progress=progress)
        reports["probes"] = report
        layers = report.by_layer()
        if not heads.empty:
            heads = heads.merge(report.by_head(), on=["layer", "head"], how="left")
    else:
        skipped.append("linear probes: turned off (--no-probes).")
    return ProbeSummary(
        architecture=arch,
        n_traces=n_traces,
        heads=heads,
        layers=layers,
        tracking_head=tracking,
        skipped=skipped,
        reports=reports,
    )

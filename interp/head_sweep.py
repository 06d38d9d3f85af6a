"""Apply one intervention to every (layer, head) in turn and rank the heads by the accuracy left.

The paper's experiment: rescaling the tracking head's beta range from [0, 2] back to [0, 1]
collapses reveal accuracy; rescaling any other head leaves it nearly untouched. `sweep` runs that
(or a beta clip, a transition-only or write-only change, a zero / mean ablation of each head's
read-out or state) on held-out traces and returns a
`SweepResult`: the baseline accuracy and a pandas frame, one row per head, sorted from the
largest drop. A tqdm bar shows progress; pass the frame of an interrupted sweep as `done` to
skip the heads it already has.

Named interventions: `INTERVENTIONS`, the named sweeps of the kinds in interp/intervention_kinds.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

import pandas as pd
import plotly.graph_objects as go

from deltalens.core.display import Summary
from deltalens.core.display import progress as progress_bar
from deltalens.core.errors import DeltalensError, did_you_mean
from deltalens.core.indices import integer_indices
from deltalens.interp.batch_inputs import as_batch
from deltalens.interp.intervention_kinds import INTERVENTIONS, KINDS, kind_of_sweep
from deltalens.interp.interventions import (
    ablate_head,
    check_factor,
    head_means,
    reveal_accuracy,
)
from deltalens.models.architecture import (
    architecture_of,
    require_delta_rule,
    require_householder,
)
from deltalens.tasks.dataset import split_batch

__all__ = ["INTERVENTIONS", "SweepResult", "sweep", "sweep_figure"]

Builder = Callable[[Any, int, int], Any]  # (model, layer, head) -> Intervention


@dataclass(repr=False)
class SweepResult(Summary):
    """One intervention applied to each head in turn: the reveal accuracy it leaves, largest drop first.

    >>> result = dl.sweep(model, batch, "beta-range", progress=False)
    >>> isinstance(result, dl.SweepResult), result.baseline > 0.99
    (True, True)
    """

    baseline: float  # reveal accuracy without intervention
    frame: pd.DataFrame  # layer, head, label, accuracy, trace_accuracy, drop; largest drop first
    intervention: str
    n_traces: int

    def to_dict(self) -> dict[str, Any]:
        """{"baseline", "intervention", "n_traces", "heads": [{"layer", "head", "accuracy", ...}]}."""
        heads = [
            {key: (int(v) if key in ("layer", "head") else v) for key, v in row.items()}
            for row in self.frame.to_dict(orient="records")
        ]
        return {"baseline": self.baseline, "intervention": self.intervention, "n_traces": self.n_traces, "heads": heads}

    def title(self) -> str:
        return (
            f"SweepResult: reveal accuracy with {self.intervention} on one head at a time "
            f"(baseline {self.baseline:.3f}, {self.n_traces} traces)"
        )

    def display_frame(self) -> pd.DataFrame:
        return self.frame

    def highlight(self) -> tuple[int, int] | None:
        """The head whose intervention costs the most accuracy."""
        return None if self.frame.empty else (int(self.frame["layer"].iloc[0]), int(self.frame["head"].iloc[0]))

    def figure(self):
        return sweep_figure(self)


def _builder(model, intervention: Union[str, Builder], batches, factor: int | None = None) -> tuple[str, Builder]:
    if callable(intervention):
        if factor is not None:
            raise DeltalensError("factor picks the Householder factor a named sweep changes; a callable sets its own.")
        return getattr(intervention, "__name__", "custom"), intervention
    if intervention not in INTERVENTIONS:
        hint = did_you_mean(str(intervention), INTERVENTIONS)
        raise DeltalensError(
            f"unknown intervention {intervention!r}; use one of {', '.join(INTERVENTIONS)}{hint or '.'}"
        )
    record = kind_of_sweep(intervention)
    if factor is not None and not record.per_factor:
        factored = ", ".join(name for k in KINDS if k.per_factor for name in k.sweeps)
        raise DeltalensError(
            f"factor picks the Householder factor whose beta a sweep changes ({factored}); it does not apply to "
            f"{intervention!r}."
        )
    if record.key == "ablate":
        return intervention, _ablation_builder(model, intervention, batches)
    require_delta_rule(model, f"beta for the {intervention} sweep to change")
    if "householder" in record.needs:
        require_householder(model, f"the {intervention} sweep")
    values = record.sweeps[intervention].values
    if factor is None:
        return intervention, lambda m, layer, head: record.build(m, layer, head, values)
    check_factor(model, factor)  # before any head is run
    return f"{intervention} (factor {factor})", lambda m, layer, head: record.build(m, layer, head, values, factor)


def _ablation_builder(model, intervention: str, batches) -> Builder:
    """Each head's read-out z or state replaced by zeros or by its mean over the batches' real tokens."""
    method, site = intervention.split("-")
    if site == "state":
        require_delta_rule(model, "matrix state S_t")
    if architecture_of(model) == "lstm":
        raise DeltalensError(
            "an LSTM has no attention heads to sweep; per-head interventions need a DeltaNet or a Transformer."
        )
    means = None
    if method == "mean":
        # one pass for every layer's means (over all batches' real tokens, weighted by count)
        sums, count = {}, 0
        for batch in batches:
            n = int(batch["lengths"].sum()) if "lengths" in batch else int((batch["tokens"] != 0).sum())
            for layer, mean in head_means(model, batch, site).items():
                sums[layer] = sums.get(layer, 0) + mean * n
            count += n
        means = {layer: total / count for layer, total in sums.items()}
    return lambda m, layer, head: ablate_head(
        m, layer, head, method, site=site, mean=None if means is None else means[layer]
    )


@integer_indices("factor", "on_head")
def sweep(
    model,
    batch: Union[dict, list],
    intervention: Union[str, Builder] = "beta-range",
    batch_size: int = 64,
    progress: bool = True,
    done: pd.DataFrame | None = None,
    factor: int | None = None,
    top_k: int | None = None,
    on_head: Callable[[int, int], None] | None = None,
) -> SweepResult:
    """Reveal accuracy with `intervention` applied to each (layer, head), ranked (module docstring).

    batch: a batch of held-out traces (split into pieces of `batch_size`) or a list of batches.
    intervention: a name from INTERVENTIONS or a callable (model, layer, head) -> Intervention.
    factor: with "beta-range" or a split intervention on a DeltaProduct, change only Householder factor
        `factor` of each head.
    on_head(layer, head): called before each head is run (a dashboard's progress bar).
    top_k: for a model with many heads, rank every head first by attribution patching (the first-order
        change of the reveal margin under the intervention, one forward and backward:
        interp/attribution_patching.py) and verify only the `top_k` with the largest predicted drop;
        the frame then has those rows only, with the estimate in an "attribution" column.

    >>> result = dl.sweep(model, batch, "beta-range", progress=False)   # every head's beta range to [0, 1]
    >>> result.highlight()
    (0, 3)
    """
    given = batch if isinstance(batch, list) and not (batch and isinstance(batch[0], str)) else [batch]
    pieces = [p for b in given for p in split_batch(as_batch(model, b), batch_size)]  # batches, token ids, text
    name, build = _builder(model, intervention, pieces, factor)
    n_traces = sum(int(p["tokens"].shape[0]) for p in pieces)
    baseline = reveal_accuracy(model, pieces)
    layers = getattr(model, "delta_layers", None) or range(model.cfg.n_layers)  # a hybrid: its delta-rule layers
    heads = [(layer, head) for layer in layers for head in range(model.cfg.n_heads)]
    rows = [] if done is None else done.to_dict(orient="records")
    finished = {(int(r["layer"]), int(r["head"])) for r in rows}
    estimate = None
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise DeltalensError(f"top_k must be a whole number >= 1 (heads to verify), got {top_k!r}.")
        if isinstance(intervention, str) and "householder" in kind_of_sweep(intervention).needs:
            raise DeltalensError(
                f"{intervention} pairs two hooks (v and beta) that attribution estimates cannot read one at a "
                "time; sweep every head without top_k."
            )
        from deltalens.interp.attribution_patching import attribution_of_intervention

        estimate = attribution_of_intervention(model, pieces[0], build)  # (L, H), negative = predicted drop
        heads = sorted(heads, key=lambda lh: float(estimate[lh]))[:top_k]
    todo = [lh for lh in heads if lh not in finished]
    iterator = progress_bar(todo, enabled=progress, desc=f"sweep {name}", unit="head")
    for layer, head in iterator:
        if on_head is not None:
            on_head(layer, head)
        iv = build(model, layer, head)
        result = reveal_accuracy(model, pieces, iv)
        rows.append(
            {
                "layer": layer,
                "head": head,
                "label": iv.label,
                "accuracy": result.reveal_accuracy,
                "trace_accuracy": result.trace_accuracy,
                "drop": baseline.reveal_accuracy - result.reveal_accuracy,
                **({} if estimate is None else {"attribution": float(estimate[layer, head])}),
            }
        )
    columns = ["layer", "head", "label", "accuracy", "trace_accuracy", "drop"]
    frame = pd.DataFrame(rows, columns=columns + ([] if estimate is None else ["attribution"]))
    frame = frame.sort_values(["accuracy", "layer", "head"]).reset_index(drop=True)
    return SweepResult(baseline=baseline.reveal_accuracy, frame=frame, intervention=name, n_traces=n_traces)


def sweep_figure(result: SweepResult, ranked: bool = False):
    """Bar chart of reveal accuracy per head under the intervention, with the baseline as a line
    (heads in model order, or `ranked` from the largest drop).

    >>> fig = dl.sweep_figure(dl.sweep(model, batch, "beta-range", progress=False), ranked=True)
    >>> fig.data[0].type
    'bar'
    """
    frame = result.frame if ranked else result.frame.sort_values(["layer", "head"])
    labels = [f"L{l}H{h}" for l, h in zip(frame["layer"], frame["head"])]
    fig = go.Figure(
        go.Bar(
            x=labels,
            y=frame["accuracy"],
            name=result.intervention,
            text=[f"{a:.2f}" for a in frame["accuracy"]],
            textposition="outside",
        )
    )
    fig.add_hline(y=result.baseline, line_dash="dash", annotation_text=f"baseline {result.baseline:.3f}")
    fig.update_layout(
        title=f"reveal accuracy with {result.intervention} applied to one head at a time",
        xaxis_title="head",
        yaxis_title="reveal accuracy",
        yaxis={"range": [0, 1.08]},
    )
    return fig

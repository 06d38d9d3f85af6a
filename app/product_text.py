"""The product probe's result in sentences, composed from a ProductReport's fields (probes/products.py):
one sentence per span (each action; between read-outs) that names the best head and says what it
does without contradicting itself, and one for the head picked on the page."""

from __future__ import annotations

import pandas as pd

SPAN_WORDS = {  # span -> (heading, what is decoded, what is counted)
    "action": ("Per action", "the actions' permutations", "held-out actions"),
    "readout": ("Between read-outs", "the permutations composed between read-outs", "held-out stretches"),
}
TABLE_COLUMNS = [
    "layer",
    "head",
    "rep",
    "faithful",
    "acts_as",
    "decoded_accuracy",
    "heldout_residual",
    "spectral_agreement",
    "context_spread",
    "implements",
]


def _row(report, layer: int, head: int) -> pd.Series:
    heads = report.heads
    return heads[(heads["layer"] == layer) & (heads["head"] == head)].iloc[0]


def _rep(row: pd.Series) -> str:
    kind = "faithful" if row["faithful"] else "not faithful"
    return f"the {row['rep']} representation ({kind}, acting as {row['acts_as']})"


def _residual(row: pd.Series, report) -> str:
    return (
        f"median held-out residual {row['heldout_residual']:.3f}, where implementing needs "
        f"≤ {report.residual_threshold:g}"
    )


def span_sentence(report) -> str:
    """What the best head of this span does, in one sentence."""
    heading, what, unit = SPAN_WORDS[report.span]
    layer, head = report.tracking_head()
    row = _row(report, layer, head)
    decoded = f"decodes {row['decoded_accuracy']:.3f} of {unit} ({int(row['n_actions'])} in all)"
    fit, residual = _rep(row), _residual(row, report)
    standing = report.standing(row)
    if standing == "implements":
        says = f"layer {layer} head {head} implements {what}: it {decoded}; best fit {fit}, {residual}."
    elif standing == "loose":
        says = (
            f"layer {layer} head {head} {decoded} to the right permutation, but its products fit {fit} only "
            f"loosely ({residual}), so it does not count as implementing them, and no head does."
        )
    else:
        says = (
            f"no head implements {what}; the closest, layer {layer} head {head}, {decoded}; best fit {fit}, {residual}."
        )
    return f"**{heading}**: {says}"


def picked_sentence(reports: list, layer: int, head: int) -> str:
    """The picked head under every span measured."""
    parts = []
    for report in reports:
        row = _row(report, layer, head)
        heading, _, unit = SPAN_WORDS[report.span]
        verdict = "implements them" if row["implements"] else "does not implement them"
        parts.append(
            f"{heading.lower()}, it decodes {row['decoded_accuracy']:.3f} of {unit} (best fit {row['rep']}, "
            f"residual {row['heldout_residual']:.3f}): it {verdict}"
        )
    return f"**The head picked above, layer {layer} head {head}**: " + "; ".join(parts) + "."


def span_table(report) -> pd.DataFrame:
    return report.heads[[c for c in TABLE_COLUMNS if c in report.heads.columns]].round(3)

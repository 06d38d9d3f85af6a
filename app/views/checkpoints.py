"""Checkpoints: every checkpoint in the folder, its card, saved accuracies side by side, the family
table (which hooks and probes apply to which architecture), and the reproduce report's claims with
their verdicts (all from saved files: nothing is re-evaluated)."""

import pandas as pd
import streamlit as st

from deltalens import models
from deltalens.app.common import attempt, checkpoint_dir, checkpoint_table
from deltalens.models.architecture import DISPLAY, FAMILY
from deltalens.reports.claims import evaluate_claims
from deltalens.reports.figures import checkpoint_length_figure, length_figure, spacing_figure
from deltalens.reports.reproduce import expected_cells
from deltalens.training.grid import load_sweep, read_sweep
from deltalens.training.opened import SHIPPED

REPO = SHIPPED.parent

st.title("Checkpoints")
table = attempt(checkpoint_table, str(checkpoint_dir()))
if table is not None:
    for sentence in table.attrs.get("skipped", {}).values():
        st.error(sentence)
    st.caption(
        f"{len(table)} checkpoints in `{checkpoint_dir()}`; accuracies are the held-out reveal accuracy "
        "saved at export, at 1x / 2x / 4x the training length."
    )
    st.dataframe(table, hide_index=True, width="stretch")

    left, right = st.columns(2)
    with left:
        name = st.selectbox("card of", list(table["name"]), key="card")
        card = checkpoint_dir() / name / "CARD.md"
        st.markdown(card.read_text() if card.is_file() else f"*{name} has no CARD.md.*")
    with right:
        chosen = st.multiselect("compare", list(table["name"]), default=list(table["name"])[:3], key="compare")
        evals = {}
        for choice in chosen:
            meta = attempt(models.read_checkpoint_meta, checkpoint_dir() / choice)
            evals[choice] = ((meta or {}).get("metrics") or {}).get("eval") or {}
        st.plotly_chart(checkpoint_length_figure(evals), width="stretch")

with st.expander("Architectures: which hooks, probes and interventions apply"):
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "architecture": DISPLAY[arch],
                    "arch": arch,
                    "per-head hooks": hooks,
                    "probes": probes,
                    "interventions": interventions,
                }
                for arch, (hooks, probes, interventions) in FAMILY.items()
            ]
        ),
        hide_index=True,
        width="stretch",
    )

st.header("The paper's claims, from the sweep")
sweep = attempt(load_sweep, REPO / "sweep" / "paper.toml")
if sweep is not None:
    sweep, statuses, _ = read_sweep(sweep, REPO / "reports" / "sweep")
    results = [s.result for s in statuses if s.result is not None]
    claims = evaluate_claims(
        results,
        sweep.thresholds,
        settings=[c.setting for c in sweep.cells],
        seeds=len(sweep.seeds),
        expected=expected_cells(sweep),
        archs=set(sweep.models),
    )
    st.caption(
        f"{len(results)} of {len(sweep.cells)} sweep runs measured ({len(sweep.seeds)} seeds per cell; "
        "reports/sweep/*.json); `deltalens reproduce` writes the same table to reports/reproduce.md. "
        "*not measured*: a cell it needs is still training; *not testable*: its premise failed (no cell "
        "learned, or the model did not learn with dense reveals either)."
    )
    st.dataframe(
        pd.DataFrame(
            [{"claim": c.statement, "setting": c.setting, "verdict": c.verdict, "measured": c.evidence} for c in claims]
        ),
        hide_index=True,
        width="stretch",
    )
    if results:
        st.plotly_chart(spacing_figure(results, sweep.thresholds), width="stretch")
        st.plotly_chart(length_figure(results, sweep.thresholds), width="stretch")

"""Checkpoints: every checkpoint the dashboard was given (folders, model folders, Hub ids by their id),
its card, saved accuracies side by side, each run's training curves (the history it keeps), the family
table (which hooks and probes apply to which architecture), and the reproduce report's claims with
their verdicts (all from saved files: nothing is re-evaluated).

The first page a new server shows: it imports nothing that loads torch, TransformerLens or scikit-learn
(tests/app/test_first_page_imports.py), so it is drawn while the server's preload thread imports them;
only the claims section needs them, and it follows on a rerun once they have loaded (app/grid_claims.py)."""

import pandas as pd
import streamlit as st

from deltalens import models
from deltalens.app import figures, grid_claims
from deltalens.app.common import (
    PAPER_MODEL,
    attempt,
    checkpoint_sources,
    checkpoint_table,
    command_name,
    folder_of,
    shown,
)
from deltalens.loading.listing import read_card
from deltalens.models.capabilities import applicability_table
from deltalens.models.registry import families
from deltalens.reports.checkpoint_figures import checkpoint_length_figure, training_curve_figure
from deltalens.training.history import training_history

COMPARED = ("s3-deltanet-pos-statement", "s3-transformer-statement")  # the paper's baselines, compared by default

table = attempt(checkpoint_table, tuple(checkpoint_sources()))
if table is not None:
    for sentence in table.attrs.get("skipped", {}).values():
        st.error(sentence)
    st.caption(
        f"{len(table)} checkpoint{'s' if len(table) != 1 else ''} in `{', '.join(checkpoint_sources())}`; "
        "accuracies are the held-out reveal accuracy saved at export, at 1x / 2x / 4x the training length."
    )
    st.dataframe(shown(table), hide_index=True, width="stretch")

    names = list(table["name"])
    if st.session_state.get("card") not in names:  # opens on the paper's model, not the first name
        st.session_state["card"] = PAPER_MODEL if PAPER_MODEL in names else names[0]
    left, right = st.columns([1, 2])
    name = left.selectbox("card of", names, key="card")
    # two thirds of the width: a half-width box cut the names off
    chosen = right.multiselect("compare it with", names, default=[n for n in COMPARED if n in names], key="compare")
    left, right = st.columns(2)
    with left:
        card = attempt(read_card, folder_of(table, name))
        st.markdown(card if card is not None else f"*{name} has no CARD.md (or it cannot be shown).*")
    with right:
        evals, histories = {}, {}
        for choice in dict.fromkeys([name, *chosen]):  # the card's own checkpoint first, always
            meta = attempt(models.read_checkpoint_meta, folder_of(table, choice))
            evals[choice] = ((meta or {}).get("metrics") or {}).get("eval") or {}
            histories[choice] = attempt(training_history, folder_of(table, choice)) or []
        saved = {choice: report for choice, report in evals.items() if report.get("lengths")}
        if saved:
            figures.show(checkpoint_length_figure(saved))
        unsaved = [choice for choice in evals if choice not in saved]
        if unsaved:  # a model from elsewhere keeps no evaluation: say so rather than draw empty axes
            one = len(unsaved) == 1
            st.info(
                f"{', '.join(unsaved)} keep{'s' if one else ''} no saved accuracy (evaluate with "
                f"`deltalens eval {command_name(table, unsaved[0])}`), so {'it is' if one else 'they are'} "
                "not drawn here."
            )
        kept = {choice: history for choice, history in histories.items() if history}
        if kept:
            figures.show(training_curve_figure(kept))
        else:
            st.caption(
                "Training curves: none of these checkpoints keeps its training history (a run's last/ keeps it in "
                "trainer_state.json, an export made now keeps it in config.json; `deltalens train --log tensorboard` "
                "writes TensorBoard curves)."
            )

with st.expander("Architectures: which hooks, probes and interventions apply"):
    st.table(  # a table wraps its text: a dataframe cut the hooks column off
        pd.DataFrame(
            [
                {"architecture": record.display, "arch": record.arch, "per-head hooks": record.hooks}
                for record in families()
            ]
        ),
        hide_index=True,
    )
    st.caption(
        "Which tool applies to which family, from each family's declared capabilities and each tool's needs "
        "(models/capabilities.py, the same table the conformance matrix tests cell by cell): ✓ applies; "
        "otherwise what the family lacks."
    )
    st.dataframe(
        pd.DataFrame(
            [
                {k: ("✓" if v == "yes" else v.removeprefix("no: ")) if k != "tool" else v for k, v in row.items()}
                for row in applicability_table()
            ]
        ),
        hide_index=True,
    )


@st.cache_resource(show_spinner=False, max_entries=4)
def sweep_section(signature: tuple) -> tuple:
    """(caption, claims table, figures) of the sweep's saved results, built again only when a file
    changes (`signature`: their names and modification times), and kept on disk: the figures took
    6-9 s to build on 2 busy cores."""
    caption, table, shown = grid_claims.section(signature)
    for fig in shown:
        figures.explain_empty_panels(figures.label_reference_lines(fig), "no sweep runs at this spacing")
    return caption, table, shown


@st.fragment(run_every=5)
def claims_follow(key: tuple) -> None:
    """While the preload thread imports what the claims need, and then a thread builds them: a note; then
    the whole page again, which reads them from disk. A fragment: the page above stays as it is meanwhile."""
    grid_claims.start_building(key)  # a no-op until the imports are in, and after its first call
    if grid_claims.waiting(key):
        st.info(
            "The claims are judged from the sweep's results as soon as the library has loaded (the server's "
            "first seconds); they appear here then."
        )
        return
    st.rerun()


st.header("The paper's claims, from the sweep")
key = grid_claims.signature()
if grid_claims.waiting(key):
    claims_follow(key)
else:
    section = attempt(sweep_section, key)
    if section is not None:
        caption, claims, sweep_figures = section  # (not `shown`: that is the table helper imported above)
        st.caption(caption)
        st.table(claims, hide_index=True)  # wrapped, not cut: the measured column is the evidence
        for fig in sweep_figures:
            st.plotly_chart(fig, width="stretch")

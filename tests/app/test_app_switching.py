"""A checkpoint switch on every page keeps each control valid for the new model or resets it with a
sentence on the page, and what is computed is what the controls show (issue 24, items 1 and 7).

Controls are found by their label, not their key, so the tests read what a user reads.
"""

from __future__ import annotations

import re

import pytest
from test_app import page

PAPER, PRODUCT, TRANSFORMER = "s3-deltanet-neg-statement", "s4-deltaproduct-n3-full", "s3-transformer-statement"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DELTALENS_APP_CHECKPOINTS", raising=False)


def labelled(widgets, label: str):
    found = [w for w in widgets if w.label == label]
    assert found, f"no control labelled {label!r}; labels: {[w.label for w in widgets]}"
    return found[0]


def notes(app) -> str:
    return "\n".join(e.value for e in app.info)


def computed_heads(app) -> set[tuple[int, int]]:
    """The heads the accuracy under the intervention was computed with, read off its metric's label."""
    label = app.metric[1].label
    return {(int(layer), int(head)) for layer, head in re.findall(r"L(\d+) ?H(\d+)", label)}


def test_interventions_heads_after_a_switch_are_the_heads_computed():
    app = page("views/interventions.py")
    labelled(app.multiselect, "heads").set_value([(1, 0)]).run()
    assert computed_heads(app) == {(1, 0)}
    labelled(app.selectbox, "checkpoint").select(PRODUCT).run()
    assert not app.exception and not app.error
    shown = set(labelled(app.multiselect, "heads").value)
    assert shown == computed_heads(app) == {(0, 1)}  # the DeltaProduct's own default: its sweep's worst head
    assert "The heads box shows L0 H1" in notes(app) and "L1 H0 was chosen on " + PAPER in notes(app)
    after = app.metric[1].value
    labelled(app.number_input, "new hi").set_value(1.5).run()
    labelled(app.number_input, "new hi").set_value(1.0).run()  # the same visible settings: the same result
    assert app.metric[1].value == after and set(labelled(app.multiselect, "heads").value) == computed_heads(app)


def test_interventions_a_kind_the_new_model_lacks_is_reset_with_a_sentence():
    app = page("views/interventions.py")
    labelled(app.selectbox, "intervention").select("beta scale").run()
    labelled(app.selectbox, "checkpoint").select(TRANSFORMER).run()
    assert not app.exception and not app.error
    assert labelled(app.selectbox, "intervention").value == "zero ablation"
    assert "“beta scale”" in notes(app) and "a Transformer does not have" in notes(app)
    assert "zero-ablate" in app.metric[1].label  # computed: what the box shows
    labelled(app.selectbox, "checkpoint").select(PAPER).run()  # back: the choice made there
    assert labelled(app.selectbox, "intervention").value == "beta scale" and "x0.5" in app.metric[1].label


def test_interventions_a_choice_that_applies_carries_over():
    app = page("views/interventions.py")
    labelled(app.number_input, "seed").set_value(3).run()
    labelled(app.selectbox, "checkpoint").select(PRODUCT).run()
    assert labelled(app.number_input, "seed").value == 3 and "(seed 3)" in " ".join(c.value for c in app.caption)


def test_interventions_state_patching_says_whether_the_output_follows_the_donor():
    app = page("views/interventions.py")
    labelled(app.selectbox, "intervention").select("state patching").run()
    follows = next(m for m in app.metric if m.label == "follows the donor")
    assert float(follows.value) > 0.9  # the tracking head's state carries the donor trace's values
    assert float(app.metric[1].value) < 0.8  # while the trace's own accuracy drops


def test_heads_head_after_a_switch_is_the_new_models_tracking_head():
    app = page("views/heads.py")
    labelled(app.selectbox, "head").select((1, 0)).run()  # reruns only the head's views (a fragment) ...
    app.run()  # ... and AppTest then holds only those elements: a full rerun draws the page again
    labelled(app.selectbox, "checkpoint").select(PRODUCT).run()
    assert not app.exception and not app.error
    assert labelled(app.selectbox, "head").value == (0, 1)
    assert "The head box shows layer 0, head 1" in notes(app)
    assert any("layer 0 head 1: beta at each token" in c.proto.spec for c in app.get("plotly_chart"))


def test_heads_colour_by_variable_stays_a_variable_of_the_new_model():
    app = page("views/heads.py")
    labelled(app.selectbox, "checkpoint").select("s5-deltanet-neg-statement").run()
    app.session_state["heads-tab"] = "state subspace"
    app.run()
    labelled(app.selectbox, "colour by").select(4).run()  # variable e: S5 has five
    labelled(app.selectbox, "checkpoint").select(PAPER).run()  # S3: three
    assert not app.exception and not app.error
    assert labelled(app.selectbox, "colour by").value in (0, 1, 2)


def test_trace_explorer_line_box_belongs_to_the_trace_shown():
    app = page("views/trace_explorer.py")
    box = labelled(app.selectbox, "top-3 at line")
    box.select_index(len(box.options) - 1).run()  # the last line of this trace
    last = labelled(app.selectbox, "top-3 at line").value
    labelled(app.selectbox, "checkpoint").select("s3-deltanet-pos-statement").run()
    line = labelled(app.selectbox, "top-3 at line").value
    assert line != last  # not the line picked on another checkpoint: this trace's first reveal, said so
    assert "reveal" in set(app.dataframe[-1].value["kind"]) and f"line {last + 1} was picked on" in notes(app)


def test_trace_explorer_paste_mode_hides_the_generate_controls():
    app = page("views/trace_explorer.py")
    assert {"actions", "seed"} <= {w.label for w in app.number_input}
    labelled(app.radio, "trace").set_value("paste").run()
    assert not {"actions", "seed", "reveal spacing"} & {w.label for w in app.number_input}


def test_trace_explorer_correctness_is_shown_for_revealed_values_only():
    app = page("views/trace_explorer.py")
    table = app.dataframe[-1].value
    judged = dict(zip(table["kind"], table["model right?"]))
    assert judged["reveal"] == "yes" and judged["other"] == ""
    assert any("Only revealed values are predictions" in c.value for c in app.caption)


def test_interventions_transition_and_write_apart():
    app = page("views/interventions.py")  # the paper's model; the default head is its tracking head
    labelled(app.selectbox, "intervention").select("transition clip").run()
    assert not app.exception and not app.error
    assert "transition beta clipped at 1 (write kept)" in app.metric[1].label and float(app.metric[1].value) < 0.8
    labelled(app.selectbox, "intervention").select("write scale").run()
    assert "write x0.5 (transition kept)" in app.metric[1].label
    assert float(app.metric[1].value) == float(app.metric[0].value)  # a uniform write scale: o_norm undoes it
    labelled(app.selectbox, "intervention").select("write clip").run()
    assert "write beta clipped at 1 (transition kept)" in app.metric[1].label
    assert float(app.metric[1].value) == float(app.metric[0].value)  # the reflections, not the writes, track
    labelled(app.selectbox, "intervention").select("eigenvalue |1 - beta|").run()
    assert "|1 - beta|" in app.metric[1].label and float(app.metric[1].value) < 0.8


def test_interventions_the_sweep_is_of_the_chosen_kind():
    app = page("views/interventions.py")  # the paper's model: beta range [0, 2] -> [0, 1] by default
    assert any(h.value.startswith("Beta range [0, 2] -> [0, 1] on each head") for h in app.header)
    labelled(app.selectbox, "intervention").select("transition clip").run()
    assert not app.exception and not app.error
    assert any(h.value.startswith("Transition beta clipped at 1, write kept on each head") for h in app.header)
    assert any("(transition-clip;" in c.value for c in app.caption)
    labelled(app.selectbox, "intervention").select("beta scale").run()
    assert not any("on each head in turn" in h.value for h in app.header)
    assert any(c.value.startswith("No head sweep for beta scale") for c in app.caption)


def test_interventions_default_changes_something_on_a_beta_0_1_model():
    app = page("views/interventions.py")
    labelled(app.selectbox, "checkpoint").select("s3-deltanet-pos-statement").run()
    assert not app.exception and not app.error
    # beta range [0, 2] -> [0, 1] is the identity where beta is already in [0, 1]: the default ablates
    assert labelled(app.selectbox, "intervention").value == "zero ablation"
    assert "is the identity on s3-deltanet-pos-statement" in notes(app)
    assert any(h.value.startswith("Zero ablation of the read-out z on each head") for h in app.header)
    assert float(app.metric[1].value) < float(app.metric[0].value)  # the default head's ablation hurts

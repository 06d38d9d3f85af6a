"""What each page shows, as a reader meets it (issue 24, items 2, 5, 6 and 9): the Checkpoints page
opens on the paper's model, the product probe's text does not contradict itself, figures have named
colourbars and labelled lines, and the Heads page measures only the section on screen, once."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest
from test_app import PAPER, key, page

from deltalens.app import disk_cache, figures
from deltalens.loading.opened import open_checkpoint

PRODUCT = "s4-deltaproduct-n3-full"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DELTALENS_APP_CHECKPOINTS", raising=False)


def chart(app, words: str) -> dict:
    return json.loads(next(c.proto.spec for c in app.get("plotly_chart") if words in c.proto.spec))


def annotations(spec: dict) -> list[str]:
    return [a.get("text") for a in spec["layout"].get("annotations", [])]


def test_checkpoints_page_opens_on_the_papers_model_and_compares_it():
    app = page("views/checkpoints.py")
    assert app.selectbox(key="card").value == PAPER
    assert any(f"# {PAPER}" in m.value for m in app.markdown)
    compared = chart(app, "Saved accuracy vs trace length")
    assert [trace["name"] for trace in compared["data"]][0] == PAPER  # the card's own checkpoint, first
    app.multiselect(key="compare").set_value([]).run()
    assert [trace["name"] for trace in chart(app, "Saved accuracy vs trace length")["data"]] == [PAPER]


def test_checkpoints_page_tables_wrap_and_panels_are_labelled():
    app = page("views/checkpoints.py")
    claims = next(t.value for t in app.table if "measured" in t.value.columns)  # a table wraps: nothing cut
    assert len(claims) > 5
    extrapolation = chart(app, "Extrapolation")
    texts = annotations(extrapolation)
    assert None not in texts and "new text" not in texts  # every chance line named
    assert sum(t == "no sweep runs at this spacing" for t in texts) >= 1  # S3 code at k=1 and k=8


def test_heads_product_text_names_both_spans_and_never_contradicts_itself():
    app = page("views/heads.py")
    app.selectbox(key="heads-ckpt").select(PRODUCT).run()
    app.session_state["heads-tab"] = "products of reflections"
    app.run()
    assert not app.exception and not app.error
    paragraphs = [m.value for m in app.markdown]
    for text in paragraphs:
        assert not text.rstrip().endswith(":"), text  # no sentence that stops before its object
        assert not ("decoded accuracy 1.000" in text and "no head implements" in text), text
    between = next(t for t in paragraphs if t.startswith("**Between read-outs**"))
    assert "layer 0 head 1 decodes 1.000" in between and "does not count as implementing" in between
    assert any(t.startswith("**The head picked above, layer 0 head 1**") for t in paragraphs)
    spans = next(r for r in app.radio if r.label == "per head, products over")
    assert spans.value == "between read-outs"  # the span where a head decodes: its table is the one shown
    table = next(df.value for df in app.dataframe if "decoded_accuracy" in df.value.columns)
    assert table.set_index(["layer", "head"]).loc[(0, 1), "rep"] == "standard"


def test_heads_figures_are_readable():
    app = page("views/heads.py")
    heat = chart(app, "per head and token kind")
    assert heat["data"][0]["colorbar"]["title"]["text"] == "mean β (0 to 2, 1 white)"  # not mean_beta
    assert "mean_beta" not in json.dumps(chart(app, "on action tokens per head")["data"][0]["colorbar"])
    histogram = chart(app, "eigenvalue by token kind")
    colours = [trace["marker"]["color"] for trace in histogram["data"]]
    assert len(set(colours)) == len(colours) and set(colours) <= set(figures.PALETTE)
    app.session_state["heads-tab"] = "state subspace"
    app.run()
    pca = chart(app, "PC 1")
    assert "<br>" in pca["layout"]["title"]["text"]  # wrapped, not cut at "coloured by va"


def test_heads_a_one_cell_decoding_map_has_no_degenerate_colourbar():
    fig = go.Figure(go.Heatmap(z=[[400]], x=["2+1"], y=["2+1"], zmin=0, colorbar={"title": "actions"}))
    figures.count_heatmap(fig)
    assert fig.data[0].showscale is False and (fig.data[0].zmin, fig.data[0].zmax) == (0, 400.0)
    fig = go.Figure(go.Heatmap(z=[[3, 5], [0, 9]], zmin=0))
    assert figures.count_heatmap(fig).data[0].zmax == 9.0 and fig.data[0].showscale is not False


def test_interventions_sweep_labels_stay_off_the_baseline():
    app = page("views/interventions.py")
    bars = chart(app, "applied to one head at a time")["data"][0]
    assert bars["textposition"] == "inside"


def test_beliefs_tables_fit_and_the_decay_axes_read():
    app = page("views/beliefs.py")
    kl = app.dataframe[0].value
    assert len(kl.columns) <= 9 and not any(len(c) > 20 for c in kl.columns)  # no sideways scroll
    decay = chart(app, "Unnormalised joint belief mass")
    assert decay["layout"]["yaxis"]["exponentformat"] == "power"  # not "1p"
    assert decay["layout"]["yaxis"]["range"][0] >= -323  # no tick below a double's range, labelled "0"
    assert all(a.get("textangle") != -90 for a in decay["layout"]["annotations"])
    predictive = app.dataframe[1].value["model q"]
    assert all(len(q) <= 21 for q in predictive)  # "[0.026, 0.467, 0.507]": three decimals, it fits


def test_heads_between_readouts_map_counts_stretches():
    app = page("views/heads.py")
    app.selectbox(key="heads-ckpt").select(PRODUCT).run()
    app.session_state["heads-tab"] = "products of reflections"
    app.run()
    heat = chart(app, "the spectrum of the product between read-outs")
    assert heat["data"][0]["colorbar"]["title"]["text"] == "stretches"  # it counts stretches, not actions


def steps_on_disk(folder) -> list[str]:
    return sorted(path.name.split("-")[-2] for path in (folder / "cache" / "measures").glob("*.pkl"))


def test_heads_measures_the_open_section_only_and_keeps_it_on_disk(tmp_path):
    app = page("views/heads.py")
    before = steps_on_disk(tmp_path)  # seed 0 may be in memory already (another test measured it)
    app.number_input(key=key("heads-seed")).set_value(4321).run()  # a batch no test measures
    assert steps_on_disk(tmp_path) == sorted([*before, "eigenvalues"])  # the products, subspace, probes wait
    app.session_state["heads-tab"] = "linear probes"
    app.run()  # the probes, 10-20 s of fitting, wait for their button (issue 44: no first render over 3 s)
    assert not app.exception and steps_on_disk(tmp_path) == sorted([*before, "eigenvalues"])
    app.button(key=key("heads-fit-probes")).click().run()
    assert not app.exception and steps_on_disk(tmp_path) == sorted([*before, "eigenvalues", "probes"])
    app.selectbox(key=key("heads-head")).select((1, 0)).run()  # a head change slices: nothing new measured
    assert not app.exception and steps_on_disk(tmp_path) == sorted([*before, "eigenvalues", "probes"])
    assert not any(b.key == key("heads-fit-probes") for b in app.button)  # fitted once: shown, no button
    assert app.selectbox(key=key("heads-head")).value == (1, 0)  # no head view on this tab: a full rerun


def test_disk_cache_computes_once_per_weights_and_question(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path))
    folder = open_checkpoint(PAPER, load_model=False).path
    calls = []
    compute = lambda: calls.append(1) or {"answer": len(calls)}  # noqa: E731
    assert disk_cache.cached_result("step", folder, "64/0", compute) == {"answer": 1}
    assert disk_cache.cached_result("step", folder, "64/0", compute) == {"answer": 1} and len(calls) == 1
    assert disk_cache.cached_result("step", folder, "64/1", compute) == {"answer": 2}  # another question
    for file in (tmp_path / "measures").glob("*.pkl"):
        file.write_bytes(b"not a pickle")  # unreadable: computed again, no error
    assert disk_cache.cached_result("step", folder, "64/0", compute) == {"answer": 3}


def test_heads_a_head_change_reruns_only_the_heads_own_views():
    """The browser then redraws only the figures that change (issue 24: a head change < 3 s)."""
    app = page("views/heads.py")
    app.selectbox(key=key("heads-head")).select((1, 0)).run()
    specs = [c.proto.spec for c in app.get("plotly_chart")]  # AppTest holds what the fragment rerun drew
    assert not app.exception and not app.error and not app.selectbox  # the controls were not drawn again
    assert not any("per head and token kind" in spec for spec in specs)  # nor the all-heads heatmaps
    assert any("layer 1 head 0: beta at each token" in spec for spec in specs)
    app.run()  # a full rerun: the head box kept the choice, and the page computes with it
    assert app.selectbox(key=key("heads-head")).value == (1, 0)
    app.session_state["heads-tab"] = "state subspace"
    app.run()
    app.selectbox(key=key("heads-head")).select((0, 3)).run()
    assert not app.exception and any("layer 0 head 3" in c.proto.spec for c in app.get("plotly_chart"))

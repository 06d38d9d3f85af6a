"""The dashboard through Streamlit's AppTest: every page renders, its controls change what it
shows, and bad input gets one sentence on the page while nothing on disk changes."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parents[2]
HOME = str(REPO / "app" / "Home.py")
PAPER = "s3-deltanet-neg-statement"
PAGES = [
    "views/checkpoints.py",
    "views/trace_explorer.py",
    "views/heads.py",
    "views/interventions.py",
    "views/census.py",
    "views/beliefs.py",
]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))  # the sweep cache, never the user's
    monkeypatch.delenv("DELTALENS_APP_CHECKPOINTS", raising=False)


def page(path: str, checkpoints: Path | None = None, monkeypatch=None) -> AppTest:
    if checkpoints is not None:
        monkeypatch.setenv("DELTALENS_APP_CHECKPOINTS", str(checkpoints))
    app = AppTest.from_file(HOME, default_timeout=240)
    app.run()
    app.switch_page(path)
    app.run()
    return app


def key(name: str, checkpoint: str = PAPER) -> str:
    """The key of a control that belongs to one checkpoint (app/common.py Controls)."""
    return f"{name}@{checkpoint}"


def texts(app: AppTest) -> str:
    parts = [m.value for m in app.metric] + [e.value for e in app.markdown] + [e.value for e in app.info]
    parts += [df.value.to_csv() for df in [*app.dataframe, *app.table]]
    return "\n".join(map(str, parts))


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha1()
    for path in sorted(folder.rglob("*")):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_the_shipped_checkpoints(path):
    app = page(path)
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [e.value for e in app.error]
    assert len(app.title) == 1


def test_checkpoints_page_shows_cards_and_claims():
    app = page("views/checkpoints.py")
    shown = texts(app)
    assert "s3-deltanet-neg-statement" in app.selectbox(key="card").options
    # the claims table with its verdicts (which verdicts depends on the committed results)
    assert any("sweep runs measured" in c.value for c in app.caption)
    assert "holds" in shown or "not measured" in shown
    app.selectbox(key="card").select("s5-deltanet-neg-statement").run()
    assert "# s5-deltanet-neg-statement" in texts(app)


def test_trace_explorer_follows_its_controls():
    app = page("views/trace_explorer.py")
    before = [m.value for m in app.metric]
    assert before[0] == "1.000"  # the shipped DeltaNet [0, 2] tracks S3
    html = [e.proto.body for e in app.get("html")]
    app.number_input(key=key("trace-seed")).set_value(5).run()
    assert [e.proto.body for e in app.get("html")] != html  # another trace
    app.number_input(key=key("trace-actions")).set_value(64).run()
    assert int(app.metric[1].value) > int(before[1])  # longer trace, more reveals
    app.selectbox(key="trace-ckpt").select("s3-deltanet-pos-statement").run()
    assert not app.error and float(app.metric[0].value) < 1.0  # beta in [0, 1] does not track


def test_heads_page_points_out_the_tracking_head_and_follows_the_head():
    app = page("views/heads.py")
    assert "Tracking head: layer 0, head 3" in app.info[0].value
    charts = [c.proto.spec for c in app.get("plotly_chart")]
    app.selectbox(key=key("heads-head")).select((1, 0)).run()
    after = [c.proto.spec for c in app.get("plotly_chart")]
    assert after and not set(after) & set(charts) and all("layer 1 head 0" in spec for spec in after)


def test_interventions_page_rescaling_the_tracking_head_collapses_accuracy():
    app = page("views/interventions.py")
    assert app.multiselect(key=key("iv-heads")).value == [(0, 3)]  # the sweep's worst head is the default
    after = float(app.metric[1].value)
    assert float(app.metric[0].value) == 1.0 and after < 0.6
    app.multiselect(key=key("iv-heads")).set_value([(1, 0)]).run()
    assert float(app.metric[1].value) > 0.95  # another head does not matter
    app.multiselect(key=key("iv-heads")).set_value([(0, 3)]).run()
    app.selectbox(key=key("iv-kind")).select("state patching").run()  # states of other traces: their values
    assert not app.error and float(app.metric[1].value) < 0.8


def test_beliefs_page_compares_every_probabilistic_checkpoint():
    app = page("views/beliefs.py")
    table = app.dataframe[0].value
    assert sum(col.startswith("KL ") for col in table.columns) >= 2 and len(table) > 3
    app.number_input(key="belief-seed").set_value(11).run()
    assert not app.dataframe[0].value.equals(table)


def test_bad_input_gets_one_sentence_and_changes_nothing_on_disk(tmp_path, monkeypatch):
    before = tree_digest(REPO / "checkpoints")
    app = page("views/trace_explorer.py")
    app.radio(key=key("trace-source")).set_value("paste").run()
    app.text_area(key=key("trace-text")).input(">>> a = 1\n>>> b = 2\n>>> c = 3\n>>> a, b, c = b, c, a\n").run()
    assert "not in the vocabulary" in app.error[0].value and not app.exception
    app.text_area(key=key("trace-text")).input(">>> a = = 1\n").run()
    assert app.error and not app.exception
    app.radio(key=key("trace-source")).set_value("generate").run()
    app.selectbox(key="trace-ckpt").select("s3-transformer-code").run()
    app.number_input(key=key("trace-actions", "s3-transformer-code")).set_value(512).run()
    assert "context" in app.error[0].value and not app.exception  # past the Transformer's 1024 tokens

    heads = page("views/heads.py")
    heads.selectbox(key="heads-ckpt").select("s3-transformer-statement").run()  # no beta: its residual probes
    assert "Transformer has no beta" in heads.info[0].value and not heads.error and not heads.exception

    empty = tmp_path / "empty"
    empty.mkdir()
    for path in PAGES:
        app = page(path, empty, monkeypatch)
        assert app.error and "holds no checkpoints" in app.error[0].value and not app.exception, path
    broken = tmp_path / "broken"
    shutil.copytree(REPO / "checkpoints" / "s3-deltanet-neg-statement", broken / "good")
    (broken / "corrupt").mkdir()
    (broken / "corrupt" / "config.json").write_text("{not json")
    app = page("views/checkpoints.py", broken, monkeypatch)
    assert app.error and "not valid JSON" in app.error[0].value and not app.exception
    assert "good" in texts(app)  # the readable checkpoint is still listed
    assert tree_digest(REPO / "checkpoints") == before


def test_heads_page_opens_a_probabilistic_deltanet():
    app = page("views/heads.py")
    app.selectbox(key="heads-ckpt").select("s3-deltanet-neg-statement-prob").run()
    assert not app.exception and not app.error and app.info


def test_heads_and_interventions_pages_open_a_deltaproduct():
    """The family without special cases: beta per factor, the product probe's verdict, the sweep."""
    app = page("views/heads.py")
    app.selectbox(key="heads-ckpt").select("s4-deltaproduct-n3-full").run()
    assert not app.exception and not app.error, [e.value for e in app.exception]
    beta_chart = next(c for c in app.get("plotly_chart") if "beta at each token" in c.proto.spec)
    assert beta_chart.proto.spec.count('"name":"factor ') == 3  # one line per Householder factor
    app.session_state["heads-tab"] = "products of reflections"  # a tab is measured when opened
    app.run()
    assert not app.exception and any("Between read-outs" in m.value for m in app.markdown)
    app = page("views/interventions.py")
    app.selectbox(key="iv-ckpt").select("s4-deltaproduct-n3-noconv-full").run()
    assert not app.exception and not app.error
    assert float(app.metric[0].value) > 0.99
    noconv = "s4-deltaproduct-n3-noconv-full"
    assert app.multiselect(key=key("iv-heads", noconv)).value == [(0, 2)]  # the sweep's worst head: the tracking head
    every = float(app.metric[1].value)
    app.selectbox(key=key("iv-factor", noconv)).select(1).run()  # one factor of the three
    one = float(app.metric[1].value)
    assert every < one < 0.9 and "F1" in app.metric[1].label


def test_checkpoints_page_lists_the_family():
    app = page("views/checkpoints.py")
    family = next(t.value for t in app.table if "per-head hooks" in t.value.columns)
    assert {"DeltaNet", "Gated DeltaNet", "DeltaProduct"} <= set(family["architecture"])
    assert "gate" in family.set_index("arch").loc["gated_deltanet", "per-head hooks"]

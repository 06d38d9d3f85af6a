"""The dashboard on a Hub id (the offline stand-in, HF_HUB_OFFLINE=1) beside a folder: `--checkpoints`
takes both; every page works on the Hub model, which records no task (it is asked the CLI's default S3
traces with its own tokenizer), or says in one sentence what does not apply."""

from __future__ import annotations

from pathlib import Path

import pytest
from hub_standin import REPO, put_standin  # noqa: E402
from test_app import page

from deltalens.cli import app as app_cli
from deltalens.cli.main import main

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"
# every page opens a model that records no task (it is asked the default task with its own tokenizer)
PAGES = [
    "views/checkpoints.py",
    "views/trace_explorer.py",
    "views/heads.py",
    "views/interventions.py",
    "views/circuit.py",
    "views/census.py",
    "views/beliefs.py",
]


@pytest.fixture(scope="module")
def hub_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("hf")
    put_standin(home)
    return home


@pytest.fixture
def sources(hub_home, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(hub_home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # a Hub id is not mistaken for a folder of the working directory
    # what `deltalens app --checkpoints deltalens/s3-deltanet-bpe checkpoints/s3-transformer-statement` sets
    given = [app_cli.source(REPO), app_cli.source(str(SHIPPED / "s3-transformer-statement"))]
    monkeypatch.setenv("DELTALENS_APP_CHECKPOINTS", "\n".join(given))
    return given


def test_app_command_takes_hub_ids_and_folders_and_refuses_neither(tmp_path):
    assert app_cli.source(REPO) == REPO
    assert app_cli.source(str(tmp_path)) == str(tmp_path.resolve())
    with pytest.raises(app_cli.DeltalensError, match="neither a folder nor a Hub id"):
        app_cli.source(str(tmp_path / "missing" / "folder" / "x"))


def test_checkpoints_page_names_the_hub_model_by_its_id(sources):
    app = page("views/checkpoints.py")
    assert not app.exception and not app.error
    names = list(app.dataframe[0].value["name"])
    assert names == [REPO, "s3-transformer-statement"]
    assert not any("snapshots" in str(n) for n in names) and "2 checkpoints in" in app.caption[1].value
    app.selectbox(key="card").select(REPO).run()
    app.multiselect(key="compare").set_value([]).run()
    assert not app.exception and not app.error
    assert any("keeps no saved accuracy" in i.value for i in app.info)  # a sentence, not an empty chart
    assert not any("Saved accuracy" in c.proto.spec for c in app.get("plotly_chart"))


@pytest.mark.slow  # every page on the Hub model: about a minute on a 2-core CPU
@pytest.mark.parametrize("view", PAGES)
def test_every_page_works_on_the_hub_model(sources, view):
    app = page(view)
    key = {
        "views/heads.py": "heads-ckpt",
        "views/circuit.py": "circuit-ckpt",
        "views/trace_explorer.py": "trace-ckpt",
        "views/interventions.py": "iv-ckpt",
        "views/census.py": "census-ckpt",
    }
    if view in key:
        app.selectbox(key=key[view]).select(REPO).run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    text = " ".join(str(m.value) for m in [*app.markdown, *app.info, *app.caption])
    assert "records no tokenizer or task" not in text


def test_app_help_names_every_page_and_the_sources_it_takes(capsys):
    with pytest.raises(SystemExit):
        main(["app", "--help"])
    text = " ".join(capsys.readouterr().out.split()).lower()
    for title in ("checkpoints", "trace explorer", "heads", "interventions", "circuit", "census", "beliefs"):
        assert title in text
    assert "hub id" in text and "model folder" in text

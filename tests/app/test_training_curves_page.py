"""The Checkpoints page draws a run's training curves from the history its checkpoint keeps
(trainer_state.json in a run's last/), with the longer lengths a `--log tensorboard` run evaluates."""

from __future__ import annotations

from test_app import page
from tiny_runs import tiny_config

from deltalens.training.loop import train


def test_checkpoints_page_draws_the_run_s_training_curves(tmp_path, monkeypatch):
    run = train(tiny_config(steps=6), tmp_path / "run", progress=False, log="tensorboard")  # evaluates at 3 and 6
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    app = page("views/checkpoints.py", run.checkpoint, monkeypatch)  # one model folder: the run's last/
    assert not app.exception and not app.error
    curves = [c.proto.spec for c in app.get("plotly_chart") if "Training curves" in c.proto.spec]
    assert len(curves) == 1
    assert '"x":[3,6]' in curves[0].replace(" ", "") and "at 4x the length" in curves[0]
    assert "1 checkpoint in" in " ".join(c.value for c in app.caption)

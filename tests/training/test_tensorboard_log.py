"""`deltalens train --log tensorboard`: a short run's event file, read back with tensorboard's own reader."""

from __future__ import annotations

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_runs import tiny_config

from deltalens.cli.main import main
from deltalens.training.config import dump_toml
from deltalens.training.loop import training_history


def test_train_log_tensorboard_writes_loss_lr_and_validation_at_each_length(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(dump_toml(tiny_config(steps=6)))  # evaluates at steps 3 and 6
    run = tmp_path / "run"
    assert main(["train", str(config), "--out", str(run), "--log", "tensorboard", "--no-progress"]) == 0
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/reveal_accuracy"} <= tags
    assert {"val/reveal_accuracy_1x", "val/reveal_accuracy_2x", "val/reveal_accuracy_4x"} <= tags
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4, 5, 6]
    assert all(e.value > 0 for e in events.Scalars("train/loss"))
    lr = [e.value for e in events.Scalars("train/lr")]
    assert lr[0] < lr[1]  # warm-up: the schedule, not a constant
    history = training_history(run / "last")
    assert [e.step for e in events.Scalars("val/reveal_accuracy_1x")] == [h["step"] for h in history] == [3, 6]
    for event, entry in zip(events.Scalars("val/reveal_accuracy_4x"), history):
        assert event.value == pytest.approx(entry["reveal_accuracy_by_length"]["4x"])


def test_unknown_logger_is_refused_by_the_parser(tmp_path, capsys):
    config = tmp_path / "tiny.toml"
    config.write_text(dump_toml(tiny_config(steps=2)))
    with pytest.raises(SystemExit):
        main(["train", str(config), "--out", str(tmp_path / "run"), "--log", "wandb"])
    assert "tensorboard" in capsys.readouterr().err

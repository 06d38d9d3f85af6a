"""`deltalens train --precision` / `run.precision`, and `train --json` printing nothing but JSON on stdout."""

import json

import pytest
import torch
from tiny_runs import tiny_config

from deltalens.cli.main import main
from deltalens.core.errors import DeltalensError
from deltalens.training.config import TrainConfig, dump_toml, load_config
from deltalens.training.loop import train


def test_precision_is_a_checked_config_field(tmp_path):
    assert tiny_config().run.precision == "fp32"
    config = load_config(None, ["run.precision=bf16"])
    assert config.run.precision == "bf16" and 'precision = "bf16"' in dump_toml(config)
    with pytest.raises(DeltalensError, match=r"\[run\] precision = 'fp16' must be one of fp32, bf16"):
        load_config(None, ["run.precision=fp16"])


@pytest.mark.parametrize("arch", ["deltanet", "transformer"])
def test_a_bf16_run_autocasts_its_steps_and_keeps_fp32_weights(tmp_path, arch, monkeypatch):
    config = TrainConfig.from_dict({**tiny_config(arch, steps=2).to_dict(), "run": {"steps": 2, "eval_traces": 4}})
    config.run.precision = "bf16"
    seen = []
    original = torch.nn.Linear.forward

    def spy(self, x):
        out = original(self, x)
        seen.append(out.dtype)
        return out

    monkeypatch.setattr(torch.nn.Linear, "forward", spy)
    result = train(config, tmp_path / "run", progress=False)
    assert result.step == 2 and torch.bfloat16 in seen  # the matmuls ran in bf16
    from deltalens import models

    assert {p.dtype for p in models.load(result.checkpoint).parameters()} == {torch.float32}


def test_train_json_is_pure_json_on_stdout(tmp_path, capsys):
    """Issue 30 point 5: moving the Transformer baseline to its device printed "Moving model to device:" on stdout."""
    config = tmp_path / "train.toml"
    config.write_text(dump_toml(tiny_config("transformer", steps=2)))
    argv = ["train", str(config), "run.eval_traces=4", "--out", str(tmp_path / "run"), "--json", "--no-progress"]
    assert main([*argv, "--precision", "bf16"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)  # the whole of stdout is one JSON object
    assert report["step"] == 2 and "Moving model" not in out
    assert 'precision = "bf16"' in (tmp_path / "run" / "train.toml").read_text()

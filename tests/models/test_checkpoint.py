"""Checkpoint directories: round trips for every architecture, fla interchange, atomic writes,
and one clear sentence for every kind of broken checkpoint."""

import dataclasses
import json
import os
import pickle
import stat

import pytest
import torch
from safetensors.torch import load_file, save_file

import deltalens.models.checkpoint as checkpoint
import deltalens.models.io.hf_folder as hf_folder
from deltalens import models
from deltalens.core.errors import DeltalensError

VOCAB = 9
CONFIGS = {
    "lstm": ("lstm", dict(d_vocab=VOCAB, d_model=16, n_layers=2)),
    "transformer-rotary": ("transformer", dict(d_vocab=VOCAB, d_model=16, n_layers=1, n_heads=2, n_ctx=12)),
    "transformer-learned": (
        "transformer",
        dict(d_vocab=VOCAB, d_model=16, n_layers=1, n_heads=2, n_ctx=12, positional_embedding_type="standard"),
    ),
    "deltanet": (
        "deltanet",
        dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_heads=2, allow_neg_eigval=True),
    ),
}
EXTRA = {
    "tokenizer": {"kind": "char", "vocab": list("abc=1234\n")},
    "task": {"group": "S3", "reveal_spacing": 2},
    "training": {"lr": 1e-3, "steps": 10},
    "metrics": {"accuracy": 0.75},
}


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(0))


@pytest.fixture()
def lstm_checkpoint(tmp_path):
    """A saved small LSTM and the path to it."""
    model = models.build("lstm", **CONFIGS["lstm"][1])
    path = models.save(model, tmp_path / "ck", extra=EXTRA)
    return model, path


def one_sentence(message: str) -> bool:
    return "\n" not in message and ". " not in message and "Traceback" not in message


def load_error(path, **overrides) -> str:
    with pytest.raises(DeltalensError) as info:
        models.load(path, **overrides)
    message = str(info.value)
    assert one_sentence(message), message
    return message


# ----------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_save_load_round_trip_gives_identical_logits(name, tmp_path, tokens):
    arch, config = CONFIGS[name]
    model = models.build(arch, **config)
    with torch.no_grad():  # move weights away from init so a silent re-init would show
        for parameter in model.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    path = models.save(model, tmp_path / name, extra=EXTRA)
    assert sorted(os.listdir(path)) == ["config.json", "model.safetensors"]

    loaded = models.load(path)
    assert loaded.arch == arch
    assert loaded.model_config == model.model_config
    assert not loaded.training  # loaded for analysis
    model.eval()
    with torch.no_grad():
        assert torch.equal(loaded(tokens), model(tokens))

    config = json.loads((path / "config.json").read_text())
    section = config["deltalens"]
    assert section["format_version"] == checkpoint.FORMAT_VERSION
    assert section["architecture"] == arch
    for key, value in EXTRA.items():
        assert section[key] == value
    if arch != "deltanet":
        assert set(config) == {"deltalens"}

    meta = models.read_checkpoint_meta(path)
    assert meta["architecture"] == arch
    assert meta["model_config"] == json.loads(json.dumps(model.model_config))
    assert meta["metrics"] == {"accuracy": 0.75} and meta["tokenizer"] == EXTRA["tokenizer"]


def test_deltanet_checkpoint_is_an_fla_checkpoint(tmp_path):
    from fla.models import DeltaNetForCausalLM

    arch, config = CONFIGS["deltanet"]
    model = models.build(arch, **config)
    path = models.save(model, tmp_path / "dn", extra=EXTRA)
    on_disk = json.loads((path / "config.json").read_text())
    assert on_disk["model_type"] == "delta_net" and on_disk["hidden_size"] == 16
    assert on_disk["deltalens"]["architecture"] == "deltanet"

    fla_model = DeltaNetForCausalLM.from_pretrained(str(path))
    assert fla_model.config.allow_neg_eigval is True
    ours = model.state_dict()
    theirs = fla_model.state_dict()
    assert set(ours) == set(theirs)
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)


def test_directory_saved_by_fla_itself_loads(tmp_path, tokens):
    from fla.models import DeltaNetConfig, DeltaNetForCausalLM

    fla_model = DeltaNetForCausalLM(DeltaNetConfig(**CONFIGS["deltanet"][1]))
    fla_model.save_pretrained(str(tmp_path / "fla"))

    meta = models.read_checkpoint_meta(tmp_path / "fla")
    assert meta["architecture"] == "deltanet" and meta["format_version"] is None
    assert meta["model_config"]["num_heads"] == 2 and meta["task"] is None

    loaded = models.load(tmp_path / "fla")
    assert loaded.arch == "deltanet"
    theirs = fla_model.state_dict()
    assert all(torch.equal(tensor, theirs[name]) for name, tensor in loaded.state_dict().items())
    assert loaded(tokens).shape == (2, 10, VOCAB)


def test_rotary_transformer_loads_with_a_longer_context(tmp_path):
    arch, config = CONFIGS["transformer-rotary"]
    model = models.build(arch, **config).eval()
    path = models.save(model, tmp_path / "rot")
    longer = models.load(path, n_ctx=30)
    assert longer.model_config["n_ctx"] == 30
    trace = torch.randint(0, VOCAB, (1, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        long_logits = longer(trace)
        # Same weights, same positions: the first 12 tokens give the same logits as before.
        torch.testing.assert_close(long_logits[:, :12], model(trace[:, :12]))
    with pytest.raises(DeltalensError, match="exceeds the Transformer's context of 12"):
        model(trace)


def test_learned_positions_cannot_be_stretched(tmp_path):
    arch, config = CONFIGS["transformer-learned"]
    path = models.save(models.build(arch, **config), tmp_path / "learned")
    message = load_error(path, n_ctx=30)
    assert "pos_embed.weight has shape (12, 16)" in message and "n_ctx=30" in message


def test_extra_values_are_converted_or_rejected(tmp_path):
    @dataclasses.dataclass
    class TrainingConfig:
        lr: float = 3e-4
        steps: int = 5

    model = models.build("lstm", **CONFIGS["lstm"][1])
    extra = {"training": TrainingConfig(), "metrics": {"loss": torch.tensor(0.5)}, "notes": "x"}
    path = models.save(model, tmp_path / "ck", extra=extra)
    meta = models.read_checkpoint_meta(path)
    assert meta["training"] == {"lr": 3e-4, "steps": 5}
    assert meta["metrics"] == {"loss": 0.5}
    assert meta["notes"] == "x" and meta["tokenizer"] is None

    with pytest.raises(DeltalensError, match="'metrics' cannot be written as JSON"):
        models.save(model, tmp_path / "bad", extra={"metrics": {"f": object()}})
    with pytest.raises(DeltalensError, match="'architecture'"):
        models.save(model, tmp_path / "bad", extra={"architecture": "gru"})
    assert not (tmp_path / "bad").exists()


def test_loading_never_unpickles(lstm_checkpoint, monkeypatch, tokens):
    model, path = lstm_checkpoint

    def refuse(*args, **kwargs):
        raise AssertionError("a checkpoint load tried to unpickle")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    assert torch.equal(models.load(path)(tokens), model(tokens))


# ----------------------------------------------------------------------------- atomic writes


def test_resaving_replaces_the_checkpoint_and_leaves_no_temp_dirs(lstm_checkpoint, tokens):
    model, path = lstm_checkpoint
    newer = models.build("lstm", **CONFIGS["lstm"][1])
    models.save(newer, path, extra={"metrics": {"accuracy": 0.9}})
    assert torch.equal(models.load(path)(tokens), newer(tokens))
    assert models.read_checkpoint_meta(path)["metrics"] == {"accuracy": 0.9}
    assert os.listdir(path.parent) == [path.name]


def test_failure_while_writing_leaves_the_old_checkpoint_intact(lstm_checkpoint, monkeypatch, tokens):
    model, path = lstm_checkpoint
    old_bytes = (path / "model.safetensors").read_bytes()

    def write_half_then_crash(model, file):
        file.write_bytes(old_bytes[: len(old_bytes) // 2])
        raise OSError("disk full")

    monkeypatch.setattr(hf_folder, "write_weights", write_half_then_crash)
    with pytest.raises(OSError, match="disk full"):
        models.save(models.build("lstm", **CONFIGS["lstm"][1]), path)
    assert os.listdir(path.parent) == [path.name]  # the temp dir is gone
    assert (path / "model.safetensors").read_bytes() == old_bytes
    assert torch.equal(models.load(path)(tokens), model(tokens))


def test_failure_while_swapping_puts_the_old_checkpoint_back(lstm_checkpoint, monkeypatch, tokens):
    model, path = lstm_checkpoint
    real_replace = os.replace
    calls = []

    def fail_second_rename(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # old -> backup succeeded; new -> target fails
            raise OSError("rename failed")
        return real_replace(src, dst)

    monkeypatch.setattr(checkpoint.os, "replace", fail_second_rename)
    with pytest.raises(OSError, match="rename failed"):
        models.save(models.build("lstm", **CONFIGS["lstm"][1]), path)
    monkeypatch.undo()
    assert len(calls) == 3  # the third call restored the backup
    assert os.listdir(path.parent) == [path.name]
    assert torch.equal(models.load(path)(tokens), model(tokens))


def test_save_refuses_to_replace_something_that_is_not_a_checkpoint(tmp_path):
    model = models.build("lstm", **CONFIGS["lstm"][1])
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    (tmp_path / "file").write_text("keep me")
    for target in ("notes", "file"):
        with pytest.raises(DeltalensError, match="is not a checkpoint directory, so it will not be replaced"):
            models.save(model, tmp_path / target)
    assert (tmp_path / "notes" / "todo.txt").read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["file", "notes"]


# ----------------------------------------------------------------------------- broken checkpoints


def test_missing_directory(tmp_path):
    message = load_error(tmp_path / "nope")
    assert "nope does not exist" in message
    with pytest.raises(DeltalensError, match="does not exist"):
        models.read_checkpoint_meta(tmp_path / "nope")


def test_path_is_a_file(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert "is not a checkpoint directory" in load_error(tmp_path / "model.safetensors")


def test_missing_config(lstm_checkpoint):
    _, path = lstm_checkpoint
    (path / "config.json").unlink()
    assert f"{path / 'config.json'} is missing" in load_error(path)


def test_invalid_json(lstm_checkpoint):
    _, path = lstm_checkpoint
    text = (path / "config.json").read_text()
    (path / "config.json").write_text(text[: len(text) // 2])
    message = load_error(path)
    assert "config.json is not valid JSON" in message and "line" in message
    with pytest.raises(DeltalensError, match="not valid JSON"):
        models.read_checkpoint_meta(path)


def test_json_that_is_not_an_object(lstm_checkpoint):
    _, path = lstm_checkpoint
    (path / "config.json").write_text("[1, 2]")
    assert "must hold a JSON object, not a list" in load_error(path)


def test_unknown_architecture(lstm_checkpoint):
    _, path = lstm_checkpoint
    config = json.loads((path / "config.json").read_text())
    config["deltalens"]["architecture"] = "gru"
    (path / "config.json").write_text(json.dumps(config))
    message = load_error(path)
    assert "names architecture 'gru', which deltalens does not know" in message


def test_config_of_some_other_model(lstm_checkpoint):
    _, path = lstm_checkpoint
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    message = load_error(path)
    assert "is a model of type 'llama', which deltalens does not open" in message
    assert "'delta_net'" in message  # and it names the types it does open


def test_model_config_that_does_not_build(lstm_checkpoint):
    _, path = lstm_checkpoint
    config = json.loads((path / "config.json").read_text())
    config["deltalens"]["model_config"]["n_layerz"] = 3
    (path / "config.json").write_text(json.dumps(config))
    message = load_error(path)
    assert "holds a model_config that cannot build a 'lstm' model: unknown lstm config key(s) 'n_layerz'" in message


def test_missing_weights(lstm_checkpoint):
    _, path = lstm_checkpoint
    (path / "model.safetensors").unlink()
    assert f"{path / 'model.safetensors'} is missing" in load_error(path)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
        pytest.param(lambda data: data[:6], id="truncated-header"),
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(lambda data: b"\xff" * len(data), id="garbage"),
        pytest.param(lambda data: data[:8] + b"{not json" + data[17:], id="corrupt-header"),
    ],
)
def test_truncated_or_corrupt_weights(lstm_checkpoint, damage):
    _, path = lstm_checkpoint
    weights = path / "model.safetensors"
    weights.write_bytes(damage(weights.read_bytes()))
    message = load_error(path)
    assert f"{weights} is truncated or corrupt (" in message


def _rewrite_weights(path, edit):
    tensors = load_file(str(path / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(path / "model.safetensors"))


def test_missing_tensor(lstm_checkpoint):
    _, path = lstm_checkpoint
    _rewrite_weights(path, lambda tensors: tensors.pop("blocks.1.lstm.weight_hh_l0"))
    message = load_error(path)
    assert "lacks tensor(s) the lstm needs: blocks.1.lstm.weight_hh_l0;" in message


def test_unexpected_tensor(lstm_checkpoint):
    _, path = lstm_checkpoint
    _rewrite_weights(path, lambda tensors: tensors.update({"blocks.2.lstm.weight_hh_l0": torch.zeros(64, 16)}))
    message = load_error(path)
    assert "holds tensor(s) the lstm does not have: blocks.2.lstm.weight_hh_l0;" in message


def test_shape_mismatch(lstm_checkpoint):
    _, path = lstm_checkpoint
    _rewrite_weights(path, lambda tensors: tensors.update({"embed.weight": torch.zeros(VOCAB + 1, 16)}))
    message = load_error(path)
    assert "tensor embed.weight has shape (10, 16) but the model config.json describes needs (9, 16)" in message


def test_weights_of_a_different_architecture(tmp_path, lstm_checkpoint):
    _, path = lstm_checkpoint
    arch, config = CONFIGS["transformer-learned"]
    other = models.save(models.build(arch, **config), tmp_path / "tf")
    (path / "model.safetensors").write_bytes((other / "model.safetensors").read_bytes())
    message = load_error(path)
    # embed.weight has the same name and shape in both; the LSTM's own tensors are what is missing.
    assert "lacks tensor(s) the lstm needs: blocks.0.lstm.weight_ih_l0, " in message
    assert message.endswith("and 5 more; the weights do not belong to the model config.json describes")


def test_saved_checkpoint_has_ordinary_permissions(tmp_path):
    target = models.save(models.build("lstm", d_vocab=8, d_model=8, n_layers=1), tmp_path / "ckpt")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o777 & ~umask
    for entry in target.iterdir():
        assert stat.S_IMODE(os.stat(entry).st_mode) == 0o666 & ~umask, entry.name

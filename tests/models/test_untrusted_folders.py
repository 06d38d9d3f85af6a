"""A model folder from elsewhere is checked before anything is allocated: config fields by type and
range, the weights' memory against the budget, weights' dtypes and values at load."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.models.build import weight_bytes
from deltalens.models.io.footprint import weights_lower_bound
from deltalens.models.io.named_folder import open_model_folder

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "checkpoints" / "s3-deltanet-neg-statement"

GQA = dict(num_heads=2, head_dim=8, num_v_heads=4)  # grouped value heads
PRODUCT = dict(num_heads=4, head_dim=8, num_householder=3)
CONFIGS = [
    ("deltanet", dict(vocab_size=32, hidden_size=64, num_hidden_layers=3, num_heads=4)),
    ("deltanet", dict(vocab_size=500, hidden_size=96, num_hidden_layers=2, num_heads=4, expand_k=0.5, use_gate=True)),
    ("deltanet", dict(vocab_size=32, hidden_size=64, num_hidden_layers=2, num_heads=2, tie_word_embeddings=True)),
    ("gated_deltanet", dict(vocab_size=32, hidden_size=64, num_hidden_layers=2, num_heads=2, head_dim=16)),
    ("gated_deltanet", dict(vocab_size=32, hidden_size=64, num_hidden_layers=2, **GQA)),
    ("deltaproduct", dict(vocab_size=32, hidden_size=64, num_hidden_layers=2, **PRODUCT)),
    ("lstm", dict(d_vocab=32, d_model=48, n_layers=3)),
    ("transformer", dict(d_vocab=32, d_model=64, n_layers=2, n_heads=4, n_ctx=128)),
]  # fmt: skip


@pytest.mark.parametrize("arch, config", CONFIGS)
def test_the_bound_from_the_config_never_exceeds_the_built_weights(arch, config):
    exact = weight_bytes(arch, **config)
    built = models.build(arch, **config)
    tensors = {id(t): t for t in [*built.parameters(), *built.buffers()]}.values()
    assert exact == sum(t.numel() * t.element_size() for t in tensors)
    bound = weights_lower_bound(arch, config)
    assert 0.5 * exact < bound <= exact  # a bound that is also a fair estimate


def test_the_exact_count_extrapolates_layers_without_building_them():
    config = dict(vocab_size=32, hidden_size=64, num_heads=4)
    one, two = (weight_bytes("deltanet", **config, num_hidden_layers=n) for n in (1, 2))
    assert weight_bytes("deltanet", **config, num_hidden_layers=10**5) == one + (10**5 - 1) * (two - one)


def hostile(tmp_path: Path, **fields) -> Path:
    folder = tmp_path / "hostile"
    shutil.copytree(SHIPPED, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(hidden_size=10**7), "GB (vocab_size=28, hidden_size=10000000"),
        (dict(num_hidden_layers=10**5), "num_hidden_layers=100000"),
        (dict(vocab_size=10**9), "vocab_size=1000000000"),
        (dict(hidden_size=-64), "hidden_size must be a whole number >= 1, got -64"),
        (dict(num_heads=0), "num_heads must be a whole number >= 1, got 0"),
        (dict(hidden_size=64.5), "hidden_size must be a whole number >= 1, got 64.5"),
        (dict(num_heads="four"), "num_heads must be a whole number >= 1, got 'four'"),
        (dict(norm_eps="tiny"), "norm_eps must be a number > 0, got 'tiny'"),
    ],
)
def test_a_hostile_config_is_refused_with_the_field_named(tmp_path, fields, words):
    folder = hostile(tmp_path, **fields)
    for check in (open_model_folder, models.load):
        with pytest.raises(DeltalensError, match="config.json holds a model_config that cannot build") as err:
            check(folder)
        assert words in str(err.value)


def test_the_cli_refuses_before_torch_is_imported(tmp_path):
    folder = hostile(tmp_path, hidden_size=10**7)
    code = (
        "import sys; from deltalens.cli.main import main; code = main(['eval', sys.argv[1]]); "
        "print(code, 'torch' in sys.modules, 'transformer_lens' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["2", "False", "False"], out.stderr
    assert "its weights alone would take" in out.stderr


def test_a_stated_memory_limit_is_honoured(monkeypatch):
    monkeypatch.setenv("DELTALENS_MAX_MODEL_GB", "0.0001")
    with pytest.raises(DeltalensError, match=r"DELTALENS_MAX_MODEL_GB=0.0001 allows"):
        models.load(SHIPPED)
    monkeypatch.setenv("DELTALENS_MAX_MODEL_GB", "lots")
    with pytest.raises(DeltalensError, match="must be a number of GB"):
        models.load(SHIPPED)


def damaged_weights(tmp_path: Path, change) -> Path:
    folder = tmp_path / "weights"
    shutil.copytree(SHIPPED, folder)
    tensors = load_file(str(folder / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def test_a_nan_weight_is_named_where_it_surfaces_not_scanned_at_load(tmp_path):
    """The load reads no tensor twice (issue 58: a finiteness scan made it 13x a plain read); the first forward
    whose logits a non-finite weight makes non-finite names the tensor, and so do the tools that run one."""
    import deltalens as dl

    name = "model.layers.0.attn.k_proj.weight"
    folder = damaged_weights(tmp_path, lambda t: t[name].view(-1).__setitem__(3, float("inf")))
    model = models.load(folder)  # no scan here
    tokens = torch.tensor([[1, 5, 6, 7, 8, 9]])
    with pytest.raises(DeltalensError, match=rf"tensor\(s\) {name} \(1 values\) hold non-finite values"):
        model(tokens)
    with pytest.raises(DeltalensError, match=name):
        dl.census(model, tokens)
    model.train()  # training: the loop's own loss check, no weight scan per step
    assert not torch.isfinite(model(tokens)).all()


def test_a_nan_set_in_memory_is_not_blamed_on_the_file():
    """A beta range is a buffer outside the weights: a NaN there says so, and set_beta_range refuses one."""
    model = models.load(SHIPPED)
    tokens = torch.tensor([[1, 5, 6, 7, 8, 9]])
    for lo, hi in [(float("nan"), 1.0), (1.0, 0.0), (-1.0, 3.0)]:
        with pytest.raises(DeltalensError, match=r"needs 0 <= lo <= hi <= 2"):
            model.set_beta_range(0, 3, lo, hi)
    try:
        model.blocks[0].attn.beta_lo[3] = float("nan")
        with pytest.raises(DeltalensError, match=r"beta_lo hold non-finite values set after loading") as caught:
            model(tokens)
        assert "checkpoint" not in str(caught.value) and "reset_beta_range" in str(caught.value)
    finally:
        model.reset_beta_range()
    assert torch.isfinite(model(tokens)).all()


def test_a_checkpoint_of_a_newer_format_is_refused(tmp_path):
    folder = tmp_path / "newer"
    shutil.copytree(SHIPPED, folder)
    config = json.loads((folder / "config.json").read_text())
    config["deltalens"]["format_version"] = 99
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(DeltalensError, match="checkpoint format 99, newer than this deltalens reads"):
        models.load(folder)


def test_integer_weights_for_a_float_parameter_are_refused(tmp_path):
    name = "lm_head.weight"
    folder = damaged_weights(tmp_path, lambda t: t.__setitem__(name, t[name].to(torch.int64)))
    with pytest.raises(DeltalensError, match=f"tensor {name} holds int64 values where the model has a float32"):
        models.load(folder)


def test_lower_precision_float_weights_still_load(tmp_path):
    folder = damaged_weights(tmp_path, lambda t: t.update({k: v.to(torch.bfloat16) for k, v in t.items()}))
    model = models.load(folder)
    assert next(model.parameters()).dtype == torch.float32

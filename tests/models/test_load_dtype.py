"""The memory bound in the precision the weights are loaded in (models/io/footprint.py, safetensors_header.py,
load_dtype.py): counted from the safetensors headers (shards included) without building anything, and a
model that fits only in bf16 accepted in bf16 and refused in fp32 with one sentence naming both figures."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import deltalens as dl
from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.models.io.footprint import estimate_weights, gigabytes, weights_lower_bound
from deltalens.models.io.model_folder import read_model_folder
from deltalens.models.io.safetensors_header import read_header, stored_tensors

CONFIG = dict(vocab_size=64, hidden_size=64, num_hidden_layers=2, num_heads=4)
SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints" / "s3-deltanet-neg-statement"


def saved(tmp_path: Path, dtype=torch.float32) -> Path:
    """A tiny DeltaNet checkpoint whose file holds `dtype` tensors."""
    folder = tmp_path / "tiny"
    models.save(models.build("deltanet", **CONFIG), folder)
    if dtype != torch.float32:
        tensors = load_file(str(folder / "model.safetensors"))
        save_file({k: v.to(dtype) for k, v in tensors.items()}, str(folder / "model.safetensors"))
    return folder


def file_values(folder: Path) -> int:
    return sum(t.numel() for t in load_file(str(folder / "model.safetensors")).values())


def between(folder: Path) -> str:
    """A $DELTALENS_MAX_MODEL_GB halfway between the bf16 and the fp32 weights."""
    values = file_values(folder)
    return repr((2 * values + 4 * values) / 2 / 2**30)


def test_the_header_gives_the_bound_in_each_precision_without_reading_tensors(tmp_path):
    fp32, bf16 = saved(tmp_path / "a"), saved(tmp_path / "b", torch.bfloat16)
    for folder in (fp32, bf16):
        estimate = estimate_weights("deltanet", CONFIG, folder / "model.safetensors")
        assert estimate.source == "safetensors header"
        assert estimate.values == file_values(folder)  # every float the file holds, in either stored dtype
        assert estimate.bytes("fp32") == 2 * estimate.bytes("bf16")  # no integer tensors: exactly 2
    stored = load_file(str(bf16 / "model.safetensors"))
    assert read_header(bf16 / "model.safetensors") == {k: ("BF16", tuple(v.shape)) for k, v in stored.items()}
    assert estimate.bytes("bf16") == sum(t.numel() * t.element_size() for t in stored.values())
    # the config's bound is a lower bound of the same count
    assert 0.5 * estimate.values < weights_lower_bound("deltanet", CONFIG, 1) <= estimate.values


def test_a_sharded_index_is_counted_shard_by_shard(tmp_path):
    folder = saved(tmp_path, torch.bfloat16)
    single = estimate_weights("deltanet", CONFIG, folder / "model.safetensors")
    tensors = load_file(str(folder / "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, held in shards.items():
        save_file({n: tensors[n] for n in held}, str(folder / shard))
    index = {"weight_map": {n: shard for shard, held in shards.items() for n in held}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "model.safetensors").unlink()
    sharded = estimate_weights("deltanet", CONFIG, folder / "model.safetensors")
    assert sharded == single and len(stored_tensors(folder / "model.safetensors")) == len(names)
    loaded = models.load(folder, dtype="bf16")  # the loader reads the same shards
    assert sum(p.numel() for p in loaded.parameters()) <= sharded.values
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"\xff" * 16)  # a damaged header: the config's bound
    assert estimate_weights("deltanet", CONFIG, folder / "model.safetensors").source == "config"


def test_a_model_that_fits_only_in_bf16_loads_in_bf16_and_is_refused_in_fp32(tmp_path, monkeypatch):
    folder = saved(tmp_path, torch.bfloat16)
    monkeypatch.setenv("DELTALENS_MAX_MODEL_GB", between(folder))
    model = models.load(folder, dtype="bf16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    for dtype in ("fp32", None):
        with pytest.raises(DeltalensError) as err:
            models.load(folder, dtype=dtype)
        said = str(err.value)
        values = file_values(folder)
        assert f"would take {gigabytes(4 * values)} GB (" in said and ") in fp32, more than the" in said
        assert f"but {gigabytes(2 * values)} GB in bf16, which fits" in said  # both figures named
        assert "\n" not in said and said.count("; ") == 0 and said.startswith(str(folder))
    auto = models.load(folder, dtype="auto")  # auto takes the precision that fits, small model or not
    assert next(auto.parameters()).dtype == torch.bfloat16


def test_nothing_is_refused_when_read_that_fits_in_bf16(tmp_path, monkeypatch):
    folder = saved(tmp_path, torch.bfloat16)
    monkeypatch.setenv("DELTALENS_MAX_MODEL_GB", between(folder))
    reading = read_model_folder(folder)  # the read checks the smallest precision only
    assert reading.estimate.source == "safetensors header" and reading.budget[0] is not None
    monkeypatch.setenv("DELTALENS_MAX_MODEL_GB", repr(1.9 * file_values(folder) / 2**30))
    with pytest.raises(DeltalensError, match=r"\) in bf16, [\d.]+ GB in fp32, more than the"):
        read_model_folder(folder)


def test_dl_load_defaults_to_auto_and_prints_a_big_models_estimate(tmp_path, monkeypatch, capsys):
    from deltalens.models.ops import bf16_check

    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    shipped = dl.load(SHIPPED)  # small: as built, nothing printed
    assert next(shipped.parameters()).dtype == torch.float32 and "deltalens:" not in capsys.readouterr().err
    monkeypatch.setattr(bf16_check, "AUTO_MIN_PARAMS", 1)  # every model is big now
    values = file_values(SHIPPED)
    monkeypatch.setenv("DELTALENS_MAX_MODEL_GB", repr(3 * values / 2**30))  # fp32 does not fit, bf16 does
    model = dl.load(SHIPPED)
    line = capsys.readouterr().err
    assert next(model.parameters()).dtype == torch.bfloat16
    assert f"{values:,} weights (from the safetensors header)" in line
    assert "GB in fp32" in line and "GB in bf16" in line and "loading in bf16 (fp32 would not fit;" in line


def test_a_production_model_is_loaded_in_the_chosen_dtype(tmp_path, monkeypatch):
    from production_standin import tiny_model

    folder = tmp_path / "olmo"
    tiny_model("olmo_hybrid").to(torch.bfloat16).save_pretrained(folder)
    values = estimate_weights("olmo_hybrid", {}, folder / "model.safetensors").values
    assert values == sum(math.prod(shape) for _, shape in read_header(folder / "model.safetensors").values())
    monkeypatch.setenv("DELTALENS_MAX_MODEL_GB", repr(3 * values / 2**30))
    loaded = models.load(folder, dtype="auto")  # fp32 does not fit: bf16, read as stored
    assert {p.dtype for p in loaded.parameters() if p.ndim >= 2} == {torch.bfloat16}  # (A_log stays fp32)
    with pytest.raises(DeltalensError, match=r"in fp32, more than the .* in bf16, which fits"):
        models.load(folder)

"""The published configurations of the production families (tests/fixtures/published/, each with its "_source"),
read as dl.load reads a config.json and built on the meta device: our hooked model holds exactly the parameters
of transformers' own class, about the size the release's name states, and the memory estimate is produced
(scripts/published_shapes.py prints docs/guide/production-models.md's published-shapes table from the same
measurement).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))  # published_shapes.py: a tool users run
from published_shapes import FIXTURES, NOMINAL, measure, published, table  # noqa: E402


def test_every_fixture_says_where_its_numbers_come_from():
    names = sorted(p.stem for p in FIXTURES.glob("*.json"))
    assert names == sorted(NOMINAL)
    for name in names:
        source = json.loads((FIXTURES / f"{name}.json").read_text())["_source"]
        assert source["model"] == NOMINAL[name][0] and source["where"] and source["what"]


@pytest.mark.parametrize("name", sorted(NOMINAL))
def test_published_config_builds_transformers_parameter_count_on_the_meta_device(name, tmp_path):
    shape = measure(name, tmp_path / name)
    assert shape.arch == published(name)["model_type"].removesuffix("_text")
    assert shape.ours == shape.theirs  # wrapping and hooks add and drop nothing
    # within 10% of the size the release's name states (Qwen3.5-0.8B's 0.75B: its vision tower and MTP layer
    # are not in the causal LM transformers builds and deltalens opens)
    assert 0.9 * NOMINAL[name][1] <= shape.theirs <= 1.1 * NOMINAL[name][1], shape.theirs
    # the bound dl.load checks before fetching any weight never overestimates, and is a fair estimate (MoE: all
    # routed experts counted, models/families/production_shared.py)
    assert 0.5 * shape.theirs < shape.config_bound <= shape.theirs
    if shape.budget is not None:  # refused before any weight exactly where the bound does not fit even in bf16
        assert (shape.refused is not None) == (2 * shape.config_bound > shape.budget), shape.refused


def test_the_memory_estimate_is_produced_for_each_precision(tmp_path):
    shapes = [measure(name, tmp_path / name) for name in ("qwen3_5_0_8b", "olmo_hybrid_7b")]
    seven_b = shapes[1].estimate()  # the load path's figures (models/io/footprint.py), exact from the meta count
    assert seven_b.values == shapes[1].theirs and seven_b.bytes("fp32") == 2 * seven_b.bytes("bf16")
    assert seven_b.bytes("bf16") > 12 * 2**30 and "GB in fp32" in seven_b.line() and "GB in bf16" in seven_b.line()
    text = table(shapes)
    assert "allenai/Olmo-Hybrid-7B" in text and f"{shapes[1].theirs:,}" in text
    assert all(shape.fits() in text for shape in shapes)


@pytest.mark.parametrize("kind", ["qwen3_next", "kimi_linear", "qwen3_5_moe_text", "glm5_next"])
def test_the_bound_counts_every_routed_expert_of_a_config_transformers_saved(kind):
    """The stand-in's config as transformers writes it (Kimi Linear: mlp_layer_types, not first_k_dense_replace;
    GLM-5 Next: the text tower under text_config)."""
    import importlib

    import torch
    from production_standin import tiny_config

    from deltalens.models.io.footprint import weights_lower_bound

    config = tiny_config(kind)
    with torch.device("meta"):
        arch = kind.removesuffix("_text")
        model = importlib.import_module(f"deltalens.models.production.{arch}").FAMILY.lm_class(config)
    experts = sum(p.numel() for name, p in model.named_parameters() if ".experts." in name)
    exact = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert experts < weights_lower_bound(arch, json.loads(config.to_json_string()), 1) <= exact


def test_a_multimodal_config_too_big_is_told_the_text_towers_fields(tmp_path, monkeypatch):
    """Qwen3.5-27B keeps its sizes under text_config; the refusal names them (it once read '... GB () ...')."""
    from deltalens.core.errors import DeltalensError
    from deltalens.models.io.model_folder import read_model_folder

    monkeypatch.setenv("DELTALENS_MAX_MODEL_GB", "1")
    config = json.loads((FIXTURES / "qwen3_5_27b.json").read_text())
    config.pop("_source")
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(DeltalensError) as err:
        read_model_folder(tmp_path)
    assert "text_config.hidden_size=5120" in str(err.value) and "()" not in str(err.value)


def test_an_infinite_size_field_is_one_sentence(tmp_path):
    """JSON's Infinity in a size field: a DeltalensError naming it, not an OverflowError from int(inf)."""
    from deltalens.core.errors import DeltalensError
    from deltalens.models.io.model_folder import read_model_folder

    config = json.loads((FIXTURES / "olmo_hybrid_7b.json").read_text())
    config.pop("_source")
    config["num_hidden_layers"] = float("inf")
    (tmp_path / "config.json").write_text(json.dumps(config))  # json writes Infinity
    with pytest.raises(DeltalensError, match="num_hidden_layers is inf, not a finite number"):
        read_model_folder(tmp_path)

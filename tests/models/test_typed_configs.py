"""The delta-rule family's configs (models/io/configs.py) are dataclasses: fla's fields as typed
attributes, unknown keys kept as Hugging Face keeps them, each known field checked at construction."""

import dataclasses
import json
import typing
from pathlib import Path

import pytest

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.models.io.configs import (
    FLA_DEFAULTS,
    GATED_DELTANET_DEFAULTS,
    GATED_DELTAPRODUCT_DEFAULTS,
    DeltaNetSettings,
    GatedDeltaNetSettings,
    GatedDeltaProductSettings,
)
from deltalens.models.io.deltalens_section import fla_build_config, read_config
from deltalens.models.registry import family

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "cls,table",
    [
        (DeltaNetSettings, FLA_DEFAULTS),
        (GatedDeltaNetSettings, GATED_DELTANET_DEFAULTS),
        (GatedDeltaProductSettings, GATED_DELTAPRODUCT_DEFAULTS),
    ],
)
def test_fla_fields_are_typed_dataclass_fields(cls, table):
    assert dataclasses.is_dataclass(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert {name: f.default for name, f in fields.items()} == table == cls.defaults
    hints = typing.get_type_hints(cls)
    assert hints["num_heads"] is int and hints["hidden_size"] is int and hints["norm_eps"] is float
    assert hints["allow_neg_eigval"] is bool and hints["vocab_size"] is int
    config = cls()
    assert config.num_heads == table["num_heads"] and vars(config) == table


def test_unknown_keys_are_kept_after_the_fields():
    config = DeltaNetSettings(num_heads=2, state_norm_every=8, note="mine")
    assert config.num_heads == 2 and config.state_norm_every == 8 and config.note == "mine"
    assert getattr(DeltaNetSettings(), "state_norm_every", None) is None
    assert list(config.to_dict())[-3:] == ["state_norm_every", "note", "model_type"]
    assert config.to_diff_dict() == {"num_heads": 2, "state_norm_every": 8, "note": "mine", "model_type": "delta_net"}
    assert repr(config) == "DeltaNetSettings(num_heads=2, state_norm_every=8, note='mine')"
    assert config == DeltaNetSettings(num_heads=2, state_norm_every=8, note="mine") != DeltaNetSettings(num_heads=2)


@pytest.mark.parametrize(
    "arch,field,value,rule",
    [
        ("deltanet", "num_heads", 0, "a whole number >= 1"),
        ("deltanet", "hidden_size", 16.0, "a whole number >= 1"),
        ("deltanet", "norm_eps", 0.0, "a number > 0"),
        ("deltanet", "vocab_size", True, "a whole number >= 1"),
        ("deltanet", "use_gate", "yes", "true or false"),
        ("deltanet", "qk_norm", None, "a string"),
        ("gated_deltanet", "num_v_heads", -2, "a whole number >= 1 or None"),
        ("deltaproduct", "num_householder", 2.5, "a whole number >= 1"),
    ],
)
def test_a_bad_field_is_refused_with_its_name(arch, field, value, rule):
    with pytest.raises(DeltalensError) as info:
        family(arch).settings(**{field: value})
    message = str(info.value)
    assert message == f"{arch} config field {field} must be {rule}, got {value!r}"
    with pytest.raises(DeltalensError, match=f"field {field} "):
        models.build(arch, **{**dict(vocab_size=11, hidden_size=16, num_hidden_layers=1, num_heads=2), field: value})


def test_zero_layers_and_token_id_zero_are_fine():
    config = DeltaNetSettings(num_hidden_layers=0, pad_token_id=0, bos_token_id=None, hidden_ratio=2.5)
    assert config.num_hidden_layers == 0 and config.hidden_ratio == 2.5


def test_every_shipped_family_checkpoint_builds_its_config():
    checked = 0
    for config_file in sorted(REPO.glob("checkpoints/*/config.json")):
        arch, _, _, raw = read_config(config_file)
        if family(arch).settings is not None:
            config = family(arch).settings(**fla_build_config(raw, arch))
            assert config.vocab_size == raw["vocab_size"]
            checked += 1
            assert json.loads(json.dumps(config.to_dict())) == config.to_dict()
    assert checked

"""One record per intervention kind (interp/intervention_kinds.py), read by the API, the sweep, the CLI and the page."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from deltalens.interp.head_sweep import sweep
from deltalens.interp.intervention_kinds import INTERVENTIONS, KINDS, applicable, kind, kind_of_sweep, lacks
from deltalens.interp.interventions import reveal_accuracy
from deltalens.loading.opened import open_checkpoint

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"


def test_each_record_names_a_function_that_takes_its_settings():
    for record in KINDS:
        parameters = inspect.signature(record.builder()).parameters
        wanted = {"to"} if record.to_range else {s.name for s in record.settings}
        assert wanted <= set(parameters), (record.key, wanted, list(parameters))
        assert ("factor" in parameters) == record.per_factor, record.key


def test_the_named_sweeps_are_the_records_sweeps():
    assert len(set(INTERVENTIONS)) == len(INTERVENTIONS)
    for name in INTERVENTIONS:
        assert name in kind_of_sweep(name).sweeps
    with pytest.raises(KeyError):
        kind_of_sweep("no-such-sweep")


def test_the_cli_has_one_flag_per_record_and_no_other_kind():
    shown = subprocess.run(
        [sys.executable, "-m", "deltalens.cli.main", "intervene", "--help"], capture_output=True, text=True
    ).stdout
    for record in KINDS:
        assert (record.flag in shown) == record.cli, record.key
    for name in INTERVENTIONS:
        assert name in shown


@pytest.fixture(scope="module")
def s3():
    checkpoint = open_checkpoint(CHECKPOINTS / "s3-deltanet-neg-statement")
    return checkpoint, checkpoint.batch(32, seed=3)


def test_every_sweep_setting_changes_the_model_at_the_tracking_head(s3):
    """A record's named setting is not the identity on the paper's model (its tracking head, L0H3)."""
    checkpoint, batch = s3
    model = checkpoint.model
    tokens = batch["tokens"]
    with torch.no_grad():
        clean = model(tokens)
    for record in KINDS:
        if record.key in ("ablate", "state-patch", "gate-range"):
            continue  # ablations: tests/interp/test_interventions.py; no gate and no donor here
        for name, named in record.sweeps.items():
            iv = record.build(model, 0, 3, named.values)
            with torch.no_grad(), iv.applied(model):
                changed = model(tokens)
            assert (changed - clean).abs().max() > 1e-3, name


def test_the_sweep_and_the_record_agree(s3):
    """`dl.sweep` with a record's sweep name and `record.build` with the same setting give the same accuracy."""
    checkpoint, batch = s3
    result = sweep(checkpoint.model, batch, "transition-clip", progress=False)
    row = result.frame.set_index(["layer", "head"]).loc[(0, 3)]
    record = kind("transition-clip")
    direct = reveal_accuracy(checkpoint.model, batch, record.build(checkpoint.model, 0, 3, {"hi": 1.0}))
    assert row["accuracy"] == pytest.approx(direct.reveal_accuracy)


def test_a_model_is_offered_the_kinds_it_has(s3):
    from deltalens import models
    from deltalens.models.capabilities import CAPABILITIES

    offered = {record.key for record in applicable(s3[0].model)}
    assert offered == {record.key for record in KINDS} - {"gate-range"}  # DeltaNet: no decay gate
    comba_model = models.build("comba", vocab_size=28, hidden_size=16, num_hidden_layers=2, num_heads=2, head_dim=8)
    comba = {record.key for record in applicable(comba_model)}
    assert "beta-range" in comba and "transition-clip" not in comba and "eigen-abs" not in comba
    assert lacks(kind("transition-clip"), comba_model) == [CAPABILITIES["householder"]]


def test_the_matrix_columns_of_a_kind_ask_what_its_record_needs():
    """models/capabilities.py's sweep columns (the conformance matrix's sample of kinds) agree with the records."""
    from deltalens.models.capabilities import TOOLS

    for tool, needs in TOOLS.items():
        if tool.startswith("sweep:") and tool != "sweep:factor" and kind_of_sweep(tool[6:]).key != "ablate":
            assert set(needs) == set(kind_of_sweep(tool[6:]).needs), tool

"""One writer of checkpoint folders (models/io/hf_folder.py): models.save and save_pretrained write
the same bytes for the same model, every architecture goes through it, and from_pretrained reads
through models/io too."""

import json
import re
from pathlib import Path

import pytest
import torch

from deltalens import ROOMS, models
from deltalens.core.errors import DeltalensError
from deltalens.models import checkpoint
from deltalens.models.io import hf_folder
from deltalens.models.io.deltalens_section import SECTION
from deltalens.models.lm.delta_lm import HookedDeltaLM
from deltalens.models.lm.deltanet import HookedDeltaNet
from deltalens.models.lm.gated_deltanet import HookedGatedDeltaNet

REPO = Path(__file__).resolve().parents[2]
SMALL = dict(vocab_size=11, hidden_size=16, num_hidden_layers=1, num_heads=2)
FAMILY = {
    "deltanet": dict(SMALL, allow_neg_eigval=True, state_norm_every=4),
    "deltanet-tied": dict(SMALL, tie_word_embeddings=True),
    "gated_deltanet": dict(SMALL, head_dim=8),
    "deltaproduct": dict(SMALL, head_dim=8, num_householder=2),
}
EXTRA = {"task": {"group": "S3"}, "metrics": {"accuracy": 0.5}}


def files_of(directory: Path) -> dict[str, bytes]:
    return {entry.name: entry.read_bytes() for entry in sorted(directory.iterdir())}


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_save_pretrained_and_models_save_write_the_same_bytes(tmp_path, name):
    arch = name.removesuffix("-tied")
    torch.manual_seed(0)
    model = models.build(arch, **FAMILY[name])
    saved = models.save(model, tmp_path / "saved", extra=EXTRA)
    section = json.loads((saved / "config.json").read_text())[SECTION]
    model.save_pretrained(tmp_path / "pretrained", extra_config={SECTION: section})
    assert files_of(saved) == files_of(tmp_path / "pretrained")
    text = (saved / "config.json").read_text()
    assert text.endswith("}\n") and list(json.loads(text)) == sorted(json.loads(text))  # HF's sorted keys


def test_tied_weights_are_written_once(tmp_path):
    model = models.build("deltanet", **FAMILY["deltanet-tied"])
    model.save_pretrained(tmp_path)
    names = set(hf_folder.read_weights(tmp_path / "model.safetensors"))
    assert "model.embeddings.weight" in names and "lm_head.weight" not in names
    again = HookedDeltaNet.from_pretrained(tmp_path)
    assert again.lm_head.weight.data_ptr() == again.model.embeddings.weight.data_ptr()


@pytest.mark.parametrize(
    "arch,config",
    [
        ("lstm", dict(d_vocab=9, d_model=16, n_layers=1)),
        ("transformer", dict(d_vocab=9, d_model=16, n_layers=1, n_heads=2)),
    ],
)
def test_baselines_go_through_the_same_writer(tmp_path, monkeypatch, arch, config):
    model = models.build(arch, **config)
    written = []
    real = hf_folder.write_model_folder

    def spy(*args, **kwargs):
        written.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoint, "write_model_folder", spy)
    path = models.save(model, tmp_path / "ck", extra=EXTRA)
    assert written == [model]
    on_disk = json.loads((path / "config.json").read_text())
    assert list(on_disk) == [SECTION] and list(on_disk[SECTION])[:3] == [
        "format_version",
        "architecture",
        "model_config",
    ]


def test_the_file_names_are_defined_once():
    assert checkpoint.CONFIG_NAME is hf_folder.CONFIG_NAME and checkpoint.WEIGHTS_NAME is hf_folder.WEIGHTS_NAME
    assert checkpoint.MissingCheckpointFile is hf_folder.MissingCheckpointFile
    definitions = [
        str(path.relative_to(REPO))
        for room in ROOMS[ROOMS.index("models") :]
        for path in (REPO / room).rglob("*.py")
        if re.search(r"^(CONFIG_NAME|WEIGHTS_NAME) = ", path.read_text(), re.MULTILINE)
    ]
    assert definitions == ["models/io/hf_folder.py"]


def test_from_pretrained_of_the_base_class_opens_the_right_architecture(tmp_path):
    model = models.build("gated_deltanet", **FAMILY["gated_deltanet"])
    model.save_pretrained(tmp_path)
    again = HookedDeltaLM.from_pretrained(tmp_path)
    assert type(again) is HookedGatedDeltaNet and not again.training
    assert again.model_config == model.model_config
    with pytest.raises(DeltalensError, match="holds a HookedGatedDeltaNet, not a HookedDeltaNet"):
        HookedDeltaNet.from_pretrained(tmp_path)


def test_from_pretrained_names_the_file_of_a_config_that_does_not_build(tmp_path):
    models.build("deltanet", **SMALL).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_heads": 0}))
    with pytest.raises(DeltalensError, match=r"config\.json holds a model_config .* field num_heads"):
        HookedDeltaNet.from_pretrained(tmp_path)

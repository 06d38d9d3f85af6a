"""Loading builds the model with its parameters on meta and assigns the file's memory-mapped tensors
(models/io/meta_build.py, models/io/hf_folder.py load_weights): the logits equal those of a model built
on the CPU with the file's tensors copied in, for every shipped family, an fla folder (bf16 too) and a
sharded folder; ties and buffers no file holds survive."""

import json
from pathlib import Path

import pytest
import torch
from fla.models import DeltaNetConfig, DeltaNetForCausalLM
from fla_on_cpu import randomise
from safetensors.torch import load_file, save_file

from deltalens import models
from deltalens.models.io.meta_build import meta_buffers, meta_tensors, parameters_on_meta
from deltalens.models.io.model_folder import read_model_folder
from deltalens.models.lm.deltanet import HookedDeltaNet

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"
SHIPPED = sorted(p.name for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file())


def copied_in(folder: Path):
    """What loading did before: a CPU build, the file's tensors copied into it."""
    read = read_model_folder(folder)
    model = models.build(read.arch, **read.build_config)
    tensors = {}
    for file in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(str(file)))
    model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=False)
    return model.eval()


def logits(model, vocab: int) -> torch.Tensor:
    tokens = torch.randint(0, vocab, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model(tokens)


def object_ties(model) -> list[list[str]]:
    by_object: dict[int, list[str]] = {}
    for name, tensor in model.named_parameters(remove_duplicate=False):
        by_object.setdefault(id(tensor), []).append(name)
    return sorted(names for names in by_object.values() if len(names) > 1)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_checkpoint_gives_the_logits_of_a_copied_in_load(name):
    folder = CHECKPOINTS / name
    loaded, reference = models.load(folder), copied_in(folder)
    assert not meta_tensors(loaded)
    assert object_ties(loaded) == object_ties(reference)  # e.g. the Transformer bridge's aliases
    for (key, ours), theirs in zip(loaded.named_buffers(), reference.buffers()):  # rotary caches, beta bounds
        assert torch.equal(ours, theirs), key
    assert torch.equal(logits(loaded, loaded.cfg.d_vocab), logits(reference, reference.cfg.d_vocab))


def test_delta_rule_parameters_are_built_on_meta_and_buffers_on_the_cpu():
    read = read_model_folder(CHECKPOINTS / "s3-deltanet-neg-statement")
    with parameters_on_meta():
        model = models.build(read.arch, **read.build_config)
    assert all(p.is_meta for p in model.parameters())
    assert not meta_buffers(model) and any(True for _ in model.buffers())
    assert not torch.nn.Linear(3, 3).weight.is_meta  # outside the block: as usual


def fla_folder(tmp_path: Path, dtype: torch.dtype, tied: bool) -> tuple[Path, torch.nn.Module]:
    cfg = DeltaNetConfig(hidden_size=32, num_heads=2, num_hidden_layers=2, vocab_size=37, tie_word_embeddings=tied)
    torch.manual_seed(0)
    theirs = randomise(DeltaNetForCausalLM(cfg), 0).to(dtype)
    theirs.save_pretrained(tmp_path)
    return tmp_path, HookedDeltaNet.from_fla(theirs.float())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tied", [False, True])
def test_an_fla_folder_loads_mapped_with_its_tie_and_one_dtype_conversion(tmp_path, dtype, tied):
    folder, reference = fla_folder(tmp_path, dtype, tied)
    loaded = models.load(folder)
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    assert (loaded.lm_head.weight is loaded.model.embeddings.weight) == tied
    assert torch.equal(logits(loaded, 37), logits(reference.eval(), 37))


def test_a_sharded_folder_loads_as_the_single_file(tmp_path):
    folder = CHECKPOINTS / "s3-deltanet-neg-statement"
    tensors = load_file(str(folder / "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in shards.items():
        save_file({n: tensors[n] for n in part}, str(tmp_path / file), metadata={"format": "pt"})
    weight_map = {n: file for file, part in shards.items() for n in part}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    loaded, reference = models.load(tmp_path), models.load(folder)
    assert torch.equal(logits(loaded, loaded.cfg.d_vocab), logits(reference, reference.cfg.d_vocab))


def test_writing_a_loaded_weight_leaves_the_file_alone(tmp_path):
    folder, _ = fla_folder(tmp_path, torch.float32, tied=False)
    before = load_file(str(folder / "model.safetensors"))["lm_head.weight"].clone()
    loaded = models.load(folder)
    with torch.no_grad():
        loaded.lm_head.weight.add_(1.0)  # the mapping is private: the edit is the model's alone
    assert torch.equal(load_file(str(folder / "model.safetensors"))["lm_head.weight"], before)
    assert torch.equal(models.load(folder).lm_head.weight, before)


def test_a_bf16_file_opened_in_bf16_is_never_widened(tmp_path):
    folder, _ = fla_folder(tmp_path, torch.bfloat16, tied=False)
    direct = models.load(folder, dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in direct.parameters())
    cast_after = models.load(folder).to(torch.bfloat16)  # what opening in bf16 did before
    for (key, ours), theirs in zip(direct.state_dict().items(), cast_after.state_dict().values()):
        assert torch.equal(ours, theirs), key
    assert torch.equal(logits(direct, 37), logits(cast_after, 37))


def mapped_from(pointer: int) -> str | None:
    """The file whose mapping holds address `pointer` (Linux /proc/self/maps), None for anonymous memory."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        start, end = (int(part, 16) for part in fields[0].split("-"))
        if start <= pointer < end:
            return fields[5] if len(fields) > 5 else None
    return None


def test_weights_are_the_files_pages_not_a_second_copy(tmp_path):
    folder, _ = fla_folder(tmp_path, torch.float32, tied=False)
    loaded = models.load(folder)
    weights = str((folder / "model.safetensors").resolve())
    assert {mapped_from(p.data_ptr()) for p in loaded.parameters()} == {weights}

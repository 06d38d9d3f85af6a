"""capture(..., to=DIR): shards and an index written a slice at a time, read back lazily by open_capture,
and the same numbers from the probes as an in-memory capture."""

import json

import pandas as pd
import pytest
import torch
from handset import swap_model
from safetensors.torch import load_file

from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import capture
from deltalens.interp.capture_disk import INDEX_NAME, LazyActs, open_capture
from deltalens.probes.eigenvalues import eigenvalue_report
from deltalens.probes.linear_probes import linear_probes
from deltalens.tasks import TokenKind, TraceSpec
from deltalens.tasks.dataset import make_batch

NAMES = ("beta", "k", "state", "resid")


@pytest.fixture(scope="module")
def hand():
    return swap_model()


@pytest.fixture(scope="module")
def ragged(hand):
    spec = TraceSpec(group="S3", action_set="swaps", actions=(4, 12), spacing=2)
    return make_batch(spec, hand.tokenizer, 6, seed=3)


@pytest.fixture(scope="module")
def both(hand, ragged, tmp_path_factory):
    """(in memory, on disk) captures of the same rows; the disk one streamed over 3 slices."""
    folder = tmp_path_factory.mktemp("captures") / "swap"
    memory = capture(hand.model, ragged, names=NAMES, with_logits=True)
    disk = capture(hand.model, ragged, names=NAMES, with_logits=True, batch_size=2, to=folder)
    return memory, disk, folder


def test_the_folder_is_an_index_and_safetensors_shards(both):
    memory, disk, folder = both
    index = json.loads((folder / INDEX_NAME).read_text())
    assert set(index["weight_map"]) == set(memory.names)
    assert index["slices"] == 3 and index["rows"] == len(memory)
    for name, file in index["weight_map"].items():  # each shard a plain safetensors file
        assert torch.equal(load_file(str(folder / file))[name], memory[name]), name
    assert not list(folder.parent.glob(".*partial"))  # the staging folder was renamed into place


def test_open_capture_reads_lazily_and_matches_the_in_memory_capture(both):
    memory, _, folder = both
    disk = open_capture(folder)
    assert isinstance(disk.acts, LazyActs) and disk.acts._open == {}  # opening read no activation
    assert disk.names == memory.names and len(disk) == len(memory)
    beta = disk.layer("beta", 1)
    assert list(disk.acts._open) == ["blocks.1.attn.hook_beta"]  # only what was read
    assert torch.equal(beta, memory.layer("beta", 1))
    for name in memory.names:
        assert torch.equal(disk[name], memory[name]), name
    for key, value in memory.labels.items():
        assert torch.equal(disk.labels[key], value), key
    assert torch.equal(disk.states, memory.states) and torch.equal(disk.lengths, memory.lengths)
    assert torch.equal(disk.logits, memory.logits)
    assert torch.equal(disk.padded("blocks.0.attn.hook_beta"), memory.padded("blocks.0.attn.hook_beta"))


def test_the_probes_read_a_capture_on_disk(both):
    memory, disk, _ = both
    on_disk, in_memory = eigenvalue_report(disk), eigenvalue_report(memory)
    pd.testing.assert_frame_equal(on_disk.heads, in_memory.heads)
    pd.testing.assert_frame_equal(on_disk.by_kind, in_memory.by_kind)
    assert "blocks.0.attn.hook_state" not in disk.acts._open  # the eigenvalues never touched the states
    probes_disk = linear_probes(disk, max_iter=30, at="all")
    probes_memory = linear_probes(memory, max_iter=30, at="all")
    pd.testing.assert_frame_equal(probes_disk.results, probes_memory.results)


def test_a_capture_over_the_memory_limit_goes_to_disk(hand, ragged, tmp_path):
    with pytest.raises(DeltalensError, match="more than the"):
        capture(hand.model, ragged, names=("state",), max_bytes=20_000)
    kept = capture(hand.model, ragged, names=("state",), max_bytes=20_000, to=tmp_path / "big")
    whole = capture(hand.model, ragged, names=("state",))
    assert kept.slices == len(ragged["tokens"])  # one trace at a time fits the limit
    assert torch.equal(kept["blocks.0.attn.hook_state"], whole["blocks.0.attn.hook_state"])


def test_filters_and_an_empty_selection(hand, ragged, tmp_path):
    kept = capture(hand.model, ragged, names="beta", kinds=TokenKind.REVEAL, layers=[0], to=tmp_path / "reveals")
    whole = capture(hand.model, ragged, names="beta", kinds=TokenKind.REVEAL, layers=[0])
    assert kept.names == whole.names and torch.equal(kept["blocks.0.attn.hook_beta"], whole["blocks.0.attn.hook_beta"])
    none = capture(hand.model, ragged, names="beta", positions=torch.zeros_like(ragged["tokens"], dtype=torch.bool),
                   to=tmp_path / "none")  # fmt: skip
    assert len(none) == 0 and none["blocks.0.attn.hook_beta"].shape[0] == 0


def test_refusals_are_sentences(hand, ragged, tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(DeltalensError, match="is not a capture folder"):
        capture(hand.model, ragged, names="beta", to=tmp_path / "other")
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
    with pytest.raises(DeltalensError, match="not a capture folder"):
        open_capture(tmp_path / "other")
    folder = tmp_path / "damaged"
    capture(hand.model, ragged, names="beta", to=folder)
    next(folder.glob("acts-*.safetensors")).unlink()
    with pytest.raises(DeltalensError, match="damaged capture"):
        open_capture(folder)

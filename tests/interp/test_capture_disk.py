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


# ---- issue 58: nothing lost, nothing half written, nothing trusted that does not fit --------------------------


def test_an_existing_capture_is_kept_unless_overwrite_and_then_only_its_files(hand, ragged, tmp_path):
    folder = tmp_path / "mine"
    capture(hand.model, ragged, names=("beta",), to=folder)
    (folder / "notes.txt").write_text("my notes")
    with pytest.raises(DeltalensError, match="holds a capture already; pass overwrite=True"):
        capture(hand.model, ragged, names=("beta",), to=folder)
    again = capture(hand.model, ragged, names=("k",), to=folder, overwrite=True)
    assert (folder / "notes.txt").read_text() == "my notes"  # the user's file, untouched
    assert again.names == [n for n in again.names if n.endswith("hook_k")] and len(again.names) == 2
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["notes.txt", INDEX_NAME, "acts-00000.safetensors", "acts-00001.safetensors", "labels.safetensors"]
    )
    assert not list(tmp_path.glob(".mine.partial*"))


def test_a_killed_capture_leaves_a_partial_folder_the_next_one_removes(hand, ragged, tmp_path):
    stale = tmp_path / ".cap.partial-deadbeef0000"
    stale.mkdir()
    (stale / "writer.pid").write_text("999999999")  # a writer that no longer runs
    (stale / "acts-00000.safetensors").write_bytes(b"x" * 1000)
    capture(hand.model, ragged, names=("beta",), to=tmp_path / "cap")
    assert not stale.exists() and open_capture(tmp_path / "cap").n_traces == ragged["tokens"].shape[0]


def test_a_read_only_folder_and_a_failing_disk_get_one_sentence_and_leave_nothing(hand, ragged, tmp_path, monkeypatch):
    import os

    if os.geteuid() == 0:  # root writes into read-only folders: stand in for the OS's refusal
        monkeypatch.setattr("pathlib.Path.mkdir", _refuse_mkdir(tmp_path / "ro"))
    else:
        (tmp_path / "ro").mkdir()
        (tmp_path / "ro").chmod(0o500)
    with pytest.raises(DeltalensError, match="is the folder read-only\\? Nothing was written"):
        capture(hand.model, ragged, names=("beta",), to=tmp_path / "ro" / "cap")
    monkeypatch.undo()

    from deltalens.interp import capture_disk

    def full(self, block):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(capture_disk._Shard, "write", full)
    with pytest.raises(DeltalensError, match="No space left on device.*nothing is left half written"):
        capture(hand.model, ragged, names=("beta",), to=tmp_path / "full")
    assert not (tmp_path / "full").exists() and not list(tmp_path.glob(".full.partial*"))


def _refuse_mkdir(where):
    real = __import__("pathlib").Path.mkdir

    def mkdir(self, *args, **kwargs):
        if str(self).startswith(str(where)):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    return mkdir


def test_open_capture_refuses_a_tampered_index_foreign_shards_and_a_truncated_shard(hand, ragged, tmp_path):
    import shutil

    a, b = tmp_path / "a", tmp_path / "b"
    capture(hand.model, ragged, names=("beta",), to=a)
    capture(hand.model, ragged, names=("beta",), to=b)
    index = json.loads((a / INDEX_NAME).read_text())
    (a / INDEX_NAME).write_text(json.dumps({**index, "rows": index["rows"] + 5}))
    with pytest.raises(DeltalensError, match="damaged capture .*rows"):
        open_capture(a)
    (a / INDEX_NAME).write_text(json.dumps(index))
    shutil.copy(b / "acts-00000.safetensors", a / "acts-00000.safetensors")  # another capture's shard
    with pytest.raises(DeltalensError, match="belongs to another capture"):
        open_capture(a)
    for file in b.iterdir():
        shutil.copy(file, a / file.name)
    assert open_capture(a).n_traces == index["n_traces"]  # all of b's: one capture again
    data = (a / "acts-00000.safetensors").read_bytes()
    (a / "acts-00000.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(DeltalensError, match="damaged capture"):
        open_capture(a)

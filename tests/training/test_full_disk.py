"""Training and exporting onto a full disk: one sentence naming the path and what is intact, no
staging folder left behind, the earlier checkpoint untouched. Needs root for a small tmpfs."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
from tiny_runs import tiny_config

from deltalens.core.errors import DeltalensError, StorageError
from deltalens.loading.export import export_run
from deltalens.training.loop import train

CONFIG_TEXT = "# the run's train.toml\n"


def _digest(folder: Path) -> str:
    digest = hashlib.sha1()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of `size` KB at tmp_path/disk, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = []

    def make(size_kb: int) -> Path:
        disk = tmp_path / f"disk{len(mounted)}"
        disk.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(disk)], check=True)
        mounted.append(disk)
        return disk

    yield make
    for disk in mounted:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".staging" in p.name or ".saving-" in p.name)


def test_training_onto_a_full_disk_keeps_the_last_checkpoint(tmp_path, small_disk):
    config = tiny_config(steps=6)  # checkpoints at steps 3 and 6
    reference = tmp_path / "reference"
    train(config, reference, progress=False)
    size_kb = sum(p.stat().st_size for p in (reference / "last").rglob("*") if p.is_file()) // 1024
    disk = small_disk(int(size_kb * 1.6))  # room for one checkpoint, not for its replacement beside it
    run = disk / "run"
    with pytest.raises(StorageError) as err:
        train(config, run, progress=False)
    assert str(err.value) == (
        f"cannot write {run / 'last'}: No space left on device; the checkpoint of step 3 is intact; "
        "free some space and continue with --resume"
    )
    assert _leftovers(disk) == []
    assert (run / "last" / "model.safetensors").is_file()


def test_exporting_onto_a_full_disk_keeps_the_old_export(tmp_path, small_disk):
    run = tmp_path / "run"
    train(tiny_config(steps=3), run, progress=False)
    reference = tmp_path / "reference"
    export_run(run, reference, CONFIG_TEXT, "deltalens train ...", n_traces=8)
    size_kb = sum(p.stat().st_size for p in reference.rglob("*") if p.is_file()) // 1024
    disk = small_disk(int(size_kb * 1.6))  # the export fits once, not twice
    target = disk / "exported"
    export_run(run, target, CONFIG_TEXT, "deltalens train ...", n_traces=8)
    before = _digest(target)
    with pytest.raises(DeltalensError, match=r"No space left on device; the checkpoint already there is intact"):
        export_run(run, target, CONFIG_TEXT, "deltalens train ...", n_traces=8, replace=True)
    assert _digest(target) == before and _leftovers(disk) == []


def test_an_atomic_file_write_onto_a_full_disk_keeps_the_old_file(small_disk):
    from deltalens.core.atomic import write_text_atomic

    disk = small_disk(64)
    target = disk / "result.json"
    write_text_atomic(target, "old\n")
    with pytest.raises(StorageError, match=r"result.json: No space left on device; the file there before is intact$"):
        write_text_atomic(target, "x" * 200_000)
    assert target.read_text() == "old\n" and sorted(p.name for p in disk.iterdir()) == ["result.json"]

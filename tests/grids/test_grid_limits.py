"""Grids at scale and with bad output paths: cells deduplicated in linear time under a stated cap,
lanes capped at the cores, every output folder checked before anything trains."""

from __future__ import annotations

import pytest
from tiny_runs import TINY

from deltalens.cli.main import main
from deltalens.core.errors import DeltalensError
from deltalens.grids.grid import capped_lanes
from deltalens.grids.grid_file import MAX_CELLS, load_grid


def big_sweep(tmp_path, n_groups: int, spacings: int, seeds: int = 1):
    groups = ", ".join(f'"S{n}"' for n in range(2, 2 + n_groups))
    text = TINY.format(steps=1).replace('groups = ["S3"]', f"groups = [{groups}]")
    text = text.replace("spacings = [1, 2]", f"spacings = {list(range(1, spacings + 1))}")
    text = text.replace("[sweep]\n", f"[sweep]\nseeds = {list(range(seeds))}\n")
    path = tmp_path / "big.toml"
    path.write_text(text + "\n[[grid]]\n" + text.split("[[grid]]\n")[1].split("\n\n")[0] + "\n")  # every cell twice
    return path


def test_thousands_of_cells_load_quickly_each_once(tmp_path):
    path = big_sweep(tmp_path, n_groups=8, spacings=100, seeds=5)  # 8 x 2 archs x 100 x 5 = 8,000 cells, twice
    sweep = load_grid(path)  # 0.5 s here; a list lookup per cell (quadratic) took 6.4 s
    assert len(sweep.cells) == 8_000 == len(set(sweep.cells))


def test_a_grid_above_the_cap_is_refused(tmp_path):
    path = big_sweep(tmp_path, n_groups=8, spacings=MAX_CELLS // 16 + 1, seeds=1)
    with pytest.raises(DeltalensError, match=f"more than {MAX_CELLS:,} cells"):
        load_grid(path)


def test_lanes_are_capped_at_the_cores_and_cells(capsys, monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    assert capped_lanes(10_000, 78) == 2
    assert "--lanes 10000 capped at 2 (2 core(s) here)" in capsys.readouterr().err
    assert capped_lanes(10_000, 1) == 1 and "(1 cell(s) to train)" in capsys.readouterr().err
    assert capped_lanes(2, 78) == 2 and capsys.readouterr().err == ""


def test_a_results_path_that_is_a_file_is_refused_before_training(tmp_path, capsys):
    (tmp_path / "tiny.toml").write_text(TINY.format(steps=2))
    (tmp_path / "results").write_text("not a folder")
    argv = ["reproduce", "--sweep", str(tmp_path / "tiny.toml"), "--results", str(tmp_path / "results")]
    code = main([*argv, "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--no-progress", "--no-pfsa"])
    err = capsys.readouterr().err
    assert code == 2 and "is a file, so" in err and "cannot hold the grid's output" in err, err
    assert not (tmp_path / "runs").exists()  # nothing trained


@pytest.mark.parametrize("flag", ["--grid", "--sweep"])  # --sweep: the flag's name before grids were called grids
def test_a_missing_grid_file_is_named_under_either_flag(tmp_path, capsys, flag):
    code = main(["reproduce", flag, str(tmp_path / "nowhere.toml"), "--no-train", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and f"grid file {tmp_path / 'nowhere.toml'} does not exist; pass --grid" in err, err

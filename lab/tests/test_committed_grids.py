"""Every committed file under lab/grids/ loads: a grid file through load_grid (which builds each
cell's TrainConfig, so a bad key or a model table the grid does not name fails here, not hours into
a run), a training config through load_config; and the command in its header names the file itself."""

import re
import tomllib
from pathlib import Path

import pytest

from deltalens.grids.grid_file import load_grid
from deltalens.training.config import load_config

REPO = Path(__file__).resolve().parents[2]
FILES = sorted((REPO / "lab" / "grids").rglob("*.toml"))


def test_the_sweep_folder_has_files():
    assert len(FILES) >= 10


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO / "lab" / "grids")))
def test_a_committed_file_loads_and_its_header_names_it(path):
    text = path.read_text()
    if "sweep" in tomllib.loads(text):
        names = [c.name for c in load_grid(path).cells]
        assert names and len(set(names)) == len(names)
    else:
        load_config(path)
    named = set(re.findall(r"(?:--grid|deltalens train) (\S+)", text))
    if path.name == "paper.toml":
        return  # the default sweep: `deltalens reproduce` with no --grid (docs/guide/training-and-grids.md)
    folder_form = f"{path.parent.relative_to(REPO)}/<file>"  # one command for a folder of per-group files
    assert named and named <= {str(path.relative_to(REPO)), folder_form}, named

"""An install without the repository's checkpoints/ (a wheel: `pip install .`) says how to get them, in
one sentence, instead of finding nothing; $DELTALENS_CHECKPOINTS then finds them."""

from __future__ import annotations

from pathlib import Path

import pytest

from deltalens.cli import app as app_command
from deltalens.cli.main import main
from deltalens.core.errors import DeltalensError
from deltalens.loading.opened import list_checkpoints
from deltalens.models.io import named_folder

REPO = Path(__file__).resolve().parents[2]
NAME = "s3-deltanet-neg-statement"


@pytest.fixture
def wheel_like(tmp_path, monkeypatch):
    """The layout of a non-editable install: no checkpoints/ beside the code, none named in the environment."""
    monkeypatch.setattr(named_folder, "SHIPPED", tmp_path / "site-packages" / "deltalens" / "checkpoints")
    monkeypatch.setattr(app_command, "SHIPPED", tmp_path / "site-packages" / "deltalens" / "checkpoints")
    monkeypatch.delenv("DELTALENS_CHECKPOINTS", raising=False)
    monkeypatch.delenv("DELTALENS_APP_CHECKPOINTS", raising=False)
    monkeypatch.chdir(tmp_path)


def test_a_shipped_name_says_how_to_get_the_checkpoints(wheel_like):
    with pytest.raises(
        DeltalensError, match=r"no shipped checkpoints .* set DELTALENS_CHECKPOINTS=<clone>/checkpoints"
    ):
        named_folder.resolve_checkpoint(NAME)


def test_list_checkpoints_says_so_instead_of_an_empty_table(wheel_like):
    with pytest.raises(DeltalensError, match="no shipped checkpoints"):
        list_checkpoints()


def test_the_dashboard_asks_for_checkpoints_before_it_starts(wheel_like, capsys):
    assert main(["app", "--headless"]) == 2  # refused before any server starts
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pass --checkpoints DIR_OR_ID" in err


def test_the_environment_finds_a_clone_s_checkpoints(wheel_like, monkeypatch):
    monkeypatch.setenv("DELTALENS_CHECKPOINTS", str(REPO / "checkpoints"))
    assert named_folder.resolve_checkpoint(NAME) == REPO / "checkpoints" / NAME
    assert NAME in set(list_checkpoints()["name"])


def test_the_repository_still_finds_its_own_checkpoints(monkeypatch):
    monkeypatch.delenv("DELTALENS_CHECKPOINTS", raising=False)
    assert not named_folder.no_shipped_checkpoints()
    assert named_folder.resolve_checkpoint(NAME) == named_folder.SHIPPED / NAME

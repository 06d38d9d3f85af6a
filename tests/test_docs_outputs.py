"""The outputs the guide quotes under its offline commands are what those commands print now.

In a ```bash block of a guide page, a `deltalens ...` line followed by `#  ` lines quotes that command's
output; each quoted line (but "..." lines, which summarise) must be a line of the output, spaces aside.
The commands run on the offline stand-ins (tests/hub_standin.py, tests/production_standin.py) in a fresh
HF cache, as the pages tell a reader to. A retrain that moves a number fails here, not in a reader's hands."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hub_standin import put_standin as put_hub_standin
from production_standin import put_standin as put_production_standin

from deltalens.cli.main import main

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide"
PAGES = ("open-a-model.md", "census.md")
BLOCK = re.compile(r"```bash\n(.*?)```", re.S)


def quoted_commands(page: str) -> list[tuple[str, list[str]]]:
    """(command, quoted output lines) for every command of the page's bash blocks that quotes its output."""
    found: list[tuple[str, list[str]]] = []
    for block in BLOCK.findall((GUIDE / page).read_text()):
        for line in block.splitlines():
            if line.startswith("deltalens "):
                found.append((line.split("  #")[0].strip(), []))
            elif line.startswith("#  ") and found:
                found[-1][1].append(line[3:])
    return [(command, lines) for command, lines in found if lines]


CASES = [(page, command, lines) for page in PAGES for command, lines in quoted_commands(page)]


def test_the_pages_quote_outputs():  # the parser finds what the pages hold: a guard on the test itself
    assert len(CASES) >= 5 and {page for page, _, _ in CASES} == set(PAGES)


@pytest.fixture(scope="module")
def offline_hub(tmp_path_factory):
    home = tmp_path_factory.mktemp("hf")
    put_hub_standin(home)
    for kind in ("olmo_hybrid", "qwen3_5"):
        put_production_standin(kind, home / "hub")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HOME", str(home))
        patch.delenv("HF_HUB_CACHE", raising=False)
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("DELTALENS_PROGRESS", "0")
        yield home


@pytest.mark.parametrize(("page", "command", "quoted"), CASES, ids=[f"{p}:{c}" for p, c, _ in CASES])
def test_a_quoted_output_is_what_the_command_prints(offline_hub, capsys, page, command, quoted):
    assert main(shlex.split(command)[1:]) in (0, None)
    printed = {" ".join(line.split()) for line in capsys.readouterr().out.splitlines()}
    for line in quoted:
        if "..." not in line:
            assert " ".join(line.split()) in printed, f"{page}: `{command}` no longer prints: {line}"

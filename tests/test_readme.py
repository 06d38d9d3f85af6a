"""The README is a front page: at most 250 lines; on its first screen the two set-up commands (CI's, verbatim) and
the file to read first; every link points at a file of the repository; its model table has one line per
registered family (the docs site shows the same table: docs/guide/models.md includes it)."""

from __future__ import annotations

import re
from pathlib import Path

from deltalens.models import registry

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
FIRST_SCREEN = 40  # lines a browser shows before the reader scrolls


def test_the_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move detail into docs/ (the front page keeps <= 250)"


def test_the_first_screen_has_the_two_commands_and_the_file_to_read_first():
    first = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]  # the test command CI runs
    assert ci == "bash scripts/setup.sh && python3 -m pytest" and f"\n{ci}  " in first
    assert "\nbash scripts/setup.sh && deltalens app  " in first  # the main job: the dashboard
    assert "Read [`models/paper_deltanet.py`](models/paper_deltanet.py) first" in first
    assert (REPO / "models" / "paper_deltanet.py").is_file()


def test_every_link_of_the_readme_points_at_a_file():
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)[^)]*\)", text) + re.findall(r'<img src="([^"]+)"', text)
    local = [target for target in targets if not target.startswith(("http://", "https://"))]
    assert len(local) > 20
    assert [target for target in local if not (REPO / target).exists()] == []


def model_table_rows() -> list[str]:
    text = README.read_text()
    start = text.index("## Models it opens")
    section = text[start : text.index("\n## ", start)]
    return re.findall(r"^\| `(\w+)` \|", section, re.M)


def test_the_model_table_has_one_line_per_registered_family():
    rows, registered = model_table_rows(), registry.architectures()
    assert len(rows) == len(set(rows)), "a family has two lines in README.md's model table"
    assert sorted(set(rows) - set(registered)) == [], "README.md's model table names families nobody registers"
    missing = sorted(set(registered) - set(rows))
    assert missing == [], (
        f"registered families without a line in README.md's model table (## Models it opens): {missing}; "
        "add one line each: | `arch` | what it opens | what it is |"
    )

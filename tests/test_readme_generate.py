"""The README's `model.generate` example shows something true: the shipped model completes a reveal with the
value the transcript (plain Python) gives the variable (issue 55 item 5)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import deltalens as dl

README = Path(__file__).resolve().parents[1] / "README.md"


def assigned(name: str) -> str:
    """The string literal the README's notebook block assigns to `name` (e.g. text = "..."), evaluated."""
    line = next(ln for ln in README.read_text().splitlines() if ln.startswith(f"{name} = "))
    return line.split(f"{name} = ", 1)[1].split("  #")[0]


def test_the_readme_generate_example_completes_a_reveal_truly():
    text = ast.literal_eval(assigned("text"))
    expression = assigned("prompt")
    assert expression.startswith("text + ")
    prompt = text + ast.literal_eval(expression[len("text + ") :])
    state: dict = {}
    for line in prompt.splitlines():  # the transcript is Python: run its statements for the true values
        if line.startswith(">>> ") and "print(" not in line:
            exec(line[4:], {}, state)
    variable = re.search(r"print\('(\w)', \w\)\n\w$", prompt).group(1)
    model = dl.load("s3-deltanet-neg-statement")
    completed = model.generate(prompt, max_new_tokens=1)
    assert completed.startswith(prompt) and completed[len(prompt) :] == f" {state[variable]}"
    assert f"{variable} {state[variable]}" in README.read_text()  # the comment says the value shown

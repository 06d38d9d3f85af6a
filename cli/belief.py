"""`deltalens belief --trace FILE [--json] [--representation joint|marginal]`: exact posteriors.

Reads a probabilistic REPL trace (the syntax of tasks/probabilistic.py: an ``import random``
header, init lines, tuple assignments, ``(..) if random.random() < p else (..)``,
``random.choice([...])`` and prints) and prints, for every printed value, the posterior
predictive of that variable given everything before the value: P(variable = v | past), from the
exact joint filter b_t of the PFSA-SR (tasks/pfsa.py).

* A line that prints several variables (``print(a, b, c)`` -> ``3 1 2``) gives one entry per
  variable, in print order; each is conditioned on the values printed before it on the same
  line (so the last one of a full reveal is always certain).
* The seed in ``random.seed(s)`` is NOT used: the filter is the belief of an observer who sees
  the statements and the printed values but cannot run the random generator. Traces without a
  seed (``>>> import random``, as ``tasks.adversary`` writes them) are read the same way.
* ``--representation marginal`` prints the n x n marginal filter's predictive instead
  (Sinkhorn-renormalised: an approximation, see tasks/pfsa.py).

``--json`` prints one object::

    {"n": 3, "representation": "joint", "log_likelihood": -2.1,
     "reveals": [{"line": 9, "variable": "a", "revealed": 3,
                  "predictive": {"1": 0.25, "2": 0.0, "3": 0.75}}, ...]}

``FILE`` may be ``-`` for stdin. A malformed or inconsistent trace (a printed value no outcome
allows) is one line on stderr naming the line, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from deltalens.core.errors import DeltalensError
from deltalens.tasks.pfsa import FilterResult, joint_filter, marginal_filter
from deltalens.tasks.probabilistic import parse_prob_trace


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "belief",
        help="exact posterior predictive of every printed value of a probabilistic trace",
        description="For every value a probabilistic REPL trace prints, the posterior predictive of that "
        "variable given everything before the value (exact Bayesian filtering over the n! states). "
        "A print of several variables gives one entry each, conditioned on the values printed before it "
        "on the same line. The random seed is not used.",
    )
    parser.add_argument("--trace", required=True, help="the trace file (code-format REPL text), or - for stdin")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--representation",
        choices=["joint", "marginal"],
        default="joint",
        help="joint: exact (default); marginal: the n x n Sinkhorn filter (approximate)",
    )
    parser.set_defaults(func=run)


def read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else type(err).__name__
        raise DeltalensError(f"cannot read the trace file {path!r} ({reason}); give a readable text file.") from None


def posteriors(text: str, representation: str = "joint") -> tuple[int, FilterResult]:
    program = parse_prob_trace(text)
    if representation == "joint":
        return program.n, joint_filter(program.pfsa(), program.events)
    return program.n, marginal_filter(program.n, program.q0, program.events)


def belief_json(text: str, representation: str = "joint") -> dict:
    n, result = posteriors(text, representation)
    reveals = []
    for post in result.reveals:
        entry = {"line": post.line, **post.to_dict()}
        entry["predictive"] = {k: round(v, 12) for k, v in entry["predictive"].items()}
        reveals.append(entry)
    return {"n": n, "representation": representation, "log_likelihood": result.log_likelihood, "reveals": reveals}


def run(args: argparse.Namespace) -> int:
    report = belief_json(read_text(args.trace), args.representation)
    if args.json:
        sys.stdout.write(json.dumps(report) + "\n")
        return 0
    print(
        f"# {report['n']} variables, {len(report['reveals'])} printed values, "
        f"log-likelihood {report['log_likelihood']:.4f} ({args.representation} filter)"
    )
    for entry in report["reveals"]:
        x = entry["variable"]
        probs = "  ".join(f"{v}: {p:.4f}" for v, p in entry["predictive"].items())
        chance = entry["predictive"][str(entry["revealed"])]
        print(
            f"line {entry['line']:>4}  {x} = {entry['revealed']:<3} P({x} = v | before): {probs}   "
            f"-> P(shown) = {chance:.4f}"
        )
    return 0

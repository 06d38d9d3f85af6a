"""`deltalens ptrace`: print one probabilistic REPL trace (real Python, hidden outcomes included).

    deltalens ptrace --group S3 --actions 12 --spacing 3 --seed 0
    deltalens ptrace --mix 0,1,0 --swap-prob 0.5 --full-reveal-prob 0     # random swaps only
    deltalens ptrace --json        # code-prob token ids, labels and the exact posterior of each reveal
    deltalens ptrace --seed 3 | deltalens belief --trace -

The text replays in ``python3 -i`` / ``code.InteractiveConsole`` to exactly its output lines: its
first line seeds Python's ``random`` and the generator resolves every hidden outcome with that
same stream (tasks/probabilistic.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from deltalens.cli import arguments
from deltalens.core.errors import DeltalensError
from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace, reveal_token_posteriors
from deltalens.tasks.tokenizers import ProbCodeTokenizer, TokenKind
from deltalens.tasks.traces import parse_action_count


def parse_mix(text: str) -> tuple[float, float, float]:
    try:
        weights = tuple(float(x) for x in str(text).split(","))
    except ValueError:
        weights = ()
    if len(weights) != 3 or not all(math.isfinite(w) and w >= 0 for w in weights):
        raise DeltalensError(
            "--mix takes three weights (finite, >= 0) like 0.4,0.4,0.2 (deterministic, swap, "
            f"choice), got {text[:60]!r}."
        )
    return weights


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "ptrace",
        help="print one probabilistic REPL trace",
        description="Print one probabilistic REPL trace: random swaps and random.choice statements mixed with "
        "deterministic actions, partial and full reveals; it replays in a real Python REPL.",
    )
    parser.add_argument("--group", default="S3", help="S<n> or A<n>, n up to 8 (default S3)")
    parser.add_argument(
        "--actions-set",
        "--action-set",
        dest="action_set",
        default="swaps",
        help="deterministic actions: swaps | cycles | full | generators (default swaps)",
    )
    parser.add_argument("--actions", default="12", help="number of actions, e.g. 12, or a range 8-16 (default 12)")
    parser.add_argument(
        "--mix",
        default="0.4,0.4,0.2",
        help="weights of deterministic, random-swap and random-choice actions (default 0.4,0.4,0.2)",
    )
    parser.add_argument(
        "--swap-prob", type=arguments.PROBABILITY, default=0.3, help="p of the random swap (default 0.3)"
    )
    parser.add_argument(
        "--choice-size", type=arguments.whole(2, 10), default=3, help="variables a random.choice rotates (default 3)"
    )
    arguments.add_reveal_schedule(parser, default_spacing=3)
    parser.add_argument(
        "--full-reveal-prob",
        type=arguments.PROBABILITY,
        default=0.2,
        help="probability that a reveal prints every variable (default 0.2)",
    )
    parser.add_argument("--identity-init", action="store_true", help="start from a = 1, b = 2, ...")
    parser.add_argument("--seed", type=arguments.SEED, default=0, help="trace seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print text, tokens, labels and posteriors as JSON")
    parser.set_defaults(func=run)


def spec_from_args(args: argparse.Namespace) -> ProbTraceSpec:
    spacing = args.spacing
    if spacing is None and args.reveal_prob is None and not args.no_reveals:
        spacing = 3
    return ProbTraceSpec(
        group=args.group,
        action_set=args.action_set,
        actions=parse_action_count(args.actions),
        mix=parse_mix(args.mix),
        swap_prob=args.swap_prob,
        choice_size=args.choice_size,
        spacing=spacing,
        reveal_prob=args.reveal_prob,
        full_reveal_prob=args.full_reveal_prob,
        identity_init=args.identity_init,
    )


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    trace = generate_prob_trace(spec, args.seed)
    if not args.json:
        sys.stdout.write(trace.text)
        return 0
    tokenizer = ProbCodeTokenizer(trace.n)
    enc = tokenizer.encode_trace(trace)
    predictive = reveal_token_posteriors(trace, enc)
    report = {
        "spec": spec.to_dict(),
        "seed": trace.seed,
        "python_seed": trace.python_seed,
        "tokenizer": tokenizer.to_spec(),
        "text": trace.text,
        "ids": enc.ids,
        "tokens": tokenizer.pieces(enc.ids),
        "kinds": [TokenKind(k).name.lower() for k in enc.kinds],
        "action_kinds": trace.kinds,
        "is_reveal": enc.is_reveal,
        "answers": enc.answers,
        "reveal_vars": enc.reveal_vars,
        "states": [list(s) for s in enc.states],
        "predictive": [None if row[0] != row[0] else [float(x) for x in row] for row in predictive],  # NaN -> None
        "reveals": [{"line": post.line, **post.to_dict()} for line in trace.posteriors for post in line],
    }
    sys.stdout.write(json.dumps(report) + "\n")
    return 0

"""`deltalens trace`: print one REPL trace, as text, as statement tokens, or as labelled JSON.

    deltalens trace --group S5 --actions 24 --spacing 4 --seed 0
    deltalens trace --group A5 --actions-set cycles --actions 16-32 --reveal-prob 0.25
    deltalens trace --format statement          # one token per [...], see below
    deltalens trace --json                      # token ids, strings and per-token labels

Output formats:
* ``--format code`` (default): exactly the REPL transcript, nothing else on stdout; it replays
  in ``python3 -i`` / ``code.InteractiveConsole``.
* ``--format statement``: the statement tokenizer's tokens, each in square brackets, with a
  newline inside a token shown as ``\\n`` and a line break after every token that ends a line:
  ``[>>> a, b = b, a\\n]`` then ``[a][ 3][\\n]`` for an output line.
* ``--json``: one JSON object: the spec, seed, text, and for the chosen tokenizer the token ids,
  token strings and labels (kind, action_pos, perm_id, is_reveal, answer, reveal_var, state).
"""

from __future__ import annotations

import argparse
import json
import sys

from deltalens.cli import arguments
from deltalens.tasks.tokenizers import Tokenizer, TokenKind, make_tokenizer
from deltalens.tasks.traces import Trace, TraceSpec, generate_trace, parse_action_count


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that define a TraceSpec (shared with commands that generate traces)."""
    parser.add_argument("--group", default="S5", help="S<n>, A<n>, Z<n> or D<n>, n up to 10 (default S5)")
    parser.add_argument(
        "--actions-set",
        "--action-set",
        dest="action_set",
        default="swaps",
        help="swaps | cycles | full | generators (default swaps)",
    )
    parser.add_argument("--actions", default="24", help="number of actions, e.g. 24, or a range 16-32 (default 24)")
    arguments.add_reveal_schedule(parser, default_spacing=4)
    parser.add_argument(
        "--reveal", choices=["one", "all"], default="one", help="print one random variable (default) or all of them"
    )
    parser.add_argument("--identity-init", action="store_true", help="start from a = 1, b = 2, ...")


def spec_from_args(args: argparse.Namespace) -> TraceSpec:
    spacing = args.spacing
    if spacing is None and args.reveal_prob is None and not args.no_reveals:
        spacing = 4
    return TraceSpec(
        group=args.group,
        action_set=args.action_set,
        actions=parse_action_count(args.actions),
        spacing=spacing,
        reveal_prob=args.reveal_prob,
        reveal=args.reveal,
        identity_init=args.identity_init,
    )


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "trace",
        help="print one REPL trace",
        description="Print one permutation-composition REPL trace (real Python).",
    )
    add_trace_arguments(parser)
    parser.add_argument("--seed", type=arguments.SEED, default=0, help="trace seed (default 0)")
    parser.add_argument(
        "--format",
        choices=["code", "statement"],
        default="code",
        help="code: the transcript itself; statement: bracketed statement tokens",
    )
    parser.add_argument("--json", action="store_true", help="print token ids and labels as one JSON object")
    parser.set_defaults(func=run)


def show_tokens(pieces: list[str]) -> str:
    """``[token]`` per token, "\\n" written as a backslash-n, a line break after line ends."""
    out = []
    for piece in pieces:
        out.append("[" + piece.replace("\n", "\\n") + "]")
        if piece.endswith("\n"):
            out.append("\n")
    return "".join(out)


def trace_json(trace: Trace, tokenizer: Tokenizer) -> dict:
    enc = tokenizer.encode_trace(trace)
    return {
        "spec": trace.spec.to_dict(),
        "seed": trace.seed,
        "tokenizer": tokenizer.to_spec(),
        "text": trace.text,
        "ids": enc.ids,
        "tokens": tokenizer.pieces(enc.ids),
        "kinds": [TokenKind(k).name.lower() for k in enc.kinds],
        "action_pos": enc.action_pos,
        "perm_ids": enc.perm_ids,
        "is_reveal": enc.is_reveal,
        "answers": enc.answers,
        "reveal_vars": enc.reveal_vars,
        "states": [list(s) for s in enc.states],
    }


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    trace = generate_trace(spec, args.seed)
    if args.json:
        tokenizer = make_tokenizer(args.format, spec)
        sys.stdout.write(json.dumps(trace_json(trace, tokenizer)) + "\n")
    elif args.format == "statement":
        tokenizer = make_tokenizer("statement", spec)
        sys.stdout.write(show_tokens(tokenizer.pieces(tokenizer.encode(trace.text))))
    else:
        sys.stdout.write(trace.text)
    return 0

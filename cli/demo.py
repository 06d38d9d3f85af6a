"""`deltalens demo`: the interim main job: one S5 trace, replayed in real Python, with its numbers.

Prints the transcript, then what it contains (actions, reveals, tokens under both tokenizers) and
whether Python's own REPL prints exactly the trace's output lines. Takes well under a second.
"""

from __future__ import annotations

import argparse

from deltalens.cli import arguments
from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import VARIABLE_NAMES
from deltalens.tasks.tokenizers import TRACE_SPEC_KINDS, make_tokenizer
from deltalens.tasks.traces import TraceSpec, generate_trace, replay_transcript


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="print one S5 trace and its statistics",
        description="Print one S5 swaps REPL trace, check it in a real Python REPL, and count its tokens.",
    )
    parser.add_argument("--seed", type=arguments.SEED, default=0, help="trace seed (default 0)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = TraceSpec(group="S5", action_set="swaps", actions=24, spacing=4)
    trace = generate_trace(spec, args.seed)
    replays = replay_transcript(trace.text) == trace.text
    if not replays:  # cannot happen unless the generator is broken; say so rather than print stats
        raise DeltalensError("the demo trace does not replay in Python's REPL; the trace generator is broken.")

    print(f"# one trace: {spec.describe()}, seed {args.seed}")
    print(trace.text, end="")
    print()
    print("# statistics")
    width = 24
    print(f"{'actions':<{width}}{trace.num_actions}")
    after = ", ".join(str(r.after_action) for r in trace.reveals)
    print(f"{'reveals':<{width}}{len(trace.reveals)} (after actions {after})")
    print(f"{'lines':<{width}}{len(trace.lines)}")
    for kind in TRACE_SPEC_KINDS:
        tokenizer = make_tokenizer(kind, spec)
        enc = tokenizer.encode_trace(trace, add_bos=False)
        label = f"tokens ({kind})"
        print(f"{label:<{width}}{len(enc)} ({sum(enc.is_reveal)} revealed values; vocabulary {tokenizer.vocab_size})")
    final = ", ".join(f"{VARIABLE_NAMES[i]}={v}" for i, v in enumerate(trace.states[-1]))
    print(f"{'final state':<{width}}{final}")
    print(f"{'replays in Python REPL':<{width}}{'yes' if replays else 'no'}")
    return 0

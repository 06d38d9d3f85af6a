"""`deltalens census MODEL [--text FILE] [--n-traces N] [--json] [--html FILE]`: per layer and head, the
share of transitions with beta > 1, the smallest eigenvalue (1 - beta, and with the decay) and the state's
effective rank (probes/census.py measures; this module parses and prints)."""

from __future__ import annotations

import json
from pathlib import Path

from deltalens.cli import arguments
from deltalens.core.errors import DeltalensError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "census",
        help="per layer and head: share of beta > 1 (negative eigenvalues), eigenvalues, state rank",
        description="Run a delta-rule model (a checkpoint, a folder or a Hub id) on held-out REPL traces, or on "
        "a text file, and count per layer and head the transitions with beta > 1 (eigenvalue 1 - beta < 0; on "
        "action tokens too, for traces), the smallest eigenvalue 1 - beta over the tokens (and with the decay, "
        "alpha (1 - beta)) and the effective rank "
        "of the state S_t.",
    )
    parser.add_argument("checkpoint", help="checkpoint folder, shipped name or Hugging Face Hub id")
    parser.add_argument("--text", type=Path, help="a UTF-8 text file to read instead of traces (one sequence)")
    parser.add_argument("--n-traces", type=arguments.COUNT, default=64, help="held-out traces (default 64)")
    parser.add_argument("--seed", type=arguments.SEED, default=0, help="trace seed (eval split)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--html", type=Path, help="also write the layer x head heatmap of beta > 1 here")
    arguments.add_dtype(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from deltalens.loading.opened import open_checkpoint
    from deltalens.probes.census import census, census_figure, check_census_size

    checkpoint = open_checkpoint(getattr(args, "folder", None) or args.checkpoint, dtype=args.dtype)
    model = checkpoint.model
    if args.text is not None:
        try:
            text = args.text.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise DeltalensError(
                f"{args.text} is not UTF-8 text (byte {err.start} cannot be decoded); give a text file"
            ) from None
        if not text.strip():
            raise DeltalensError(f"{args.text} is empty; give a file with some text to read")
        tokens, source = model.to_tokens(text), f"{args.text}"
    else:
        length = int(checkpoint.batch(1, seed=args.seed)["tokens"].shape[1])  # one trace: what each costs
        check_census_size(model, args.n_traces, length)  # before the traces are made
        tokens, source = checkpoint.batch(args.n_traces, seed=args.seed), f"{args.n_traces} held-out traces"
    result = census(model, tokens)
    if args.html is not None:
        census_figure(result).write_html(str(args.html))
    if args.json:
        print(json.dumps({"checkpoint": args.checkpoint, "source": source, **result.to_dict()}))
        return 0
    print(f"{args.checkpoint}  ({result.architecture}, {source})")
    print(result.table())
    column, top = result.most_reflecting()
    if top is not None:
        where = "action tokens" if column.endswith("_action") else "tokens"
        print(f"most reflecting head: layer {top[0]} head {top[1]} (eigenvalue below -0.9 on the most {where})")
    elif result.heads["beta_gt1"].max() > 0:
        print(f"no head reflects (no eigenvalue below -0.9) on these tokens; {result.negative_clause()}")
    else:
        print("no head has beta > 1 (no negative eigenvalue) on these tokens")
    return 0

"""`deltalens sae MODEL --layer L [--head H] [--site state] [--latents N] [--k K] [--steps S] [--out DIR]`: a
sparse dictionary of one site trained on held-out traces, scored against the true state and spliced back in
(probes/sparse_dictionary.py, probes/dictionary_scores.py, interp/dictionary_splice.py measure; this module
parses and prints)."""

from __future__ import annotations

import json
from pathlib import Path

from deltalens.cli import arguments
from deltalens.core.errors import DeltalensError


def register(subparsers) -> None:
    from deltalens.probes.dictionary_sites import SITES

    parser = subparsers.add_parser(
        "sae",
        help="train a sparse dictionary (TopK SAE) of a head's state, write or z, score it against the true state",
        description="Capture one site (a head's state S_t, its rows, its write beta k v^T, its z, or the residual "
        "stream after a layer) on held-out traces, train a TopK sparse dictionary on the even-numbered traces "
        "(EleutherAI's sparsify coder), score every latent against the facts 'variable x holds value v' on the "
        "odd-numbered ones, and splice the reconstruction back into the forward (reveal accuracy under it).",
    )
    parser.add_argument("checkpoint", help="checkpoint folder, shipped name or Hugging Face Hub id")
    parser.add_argument("--site", choices=SITES, default="state", help="what to code (default: state)")
    parser.add_argument("--layer", type=arguments.whole(0), required=True)
    parser.add_argument("--head", type=arguments.whole(0), help="the head (every site but resid)")
    parser.add_argument("--latents", type=arguments.COUNT, help="dictionary width (default 4 x the site's size)")
    parser.add_argument("--k", type=arguments.COUNT, default=8, help="latents active per row (default 8)")
    parser.add_argument("--steps", type=arguments.COUNT, default=2000, help="training steps (default 2000)")
    parser.add_argument("--n-traces", type=arguments.COUNT, default=256, help="held-out traces (default 256)")
    parser.add_argument("--seed", type=arguments.SEED, default=0, help="trace and initialisation seed")
    parser.add_argument(
        "--score-at",
        nargs="+",
        metavar="KIND",
        help="score only at these token kinds (e.g. print reveal); default: all",
    )
    parser.add_argument("--fact", help="also ablate one fact's latents, e.g. a=2 (variable a holds value 2)")
    parser.add_argument("--out", type=Path, help="save the dictionary here (sparsify's folder + deltalens.json)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def _fact(text: str | None, n_vars: int) -> tuple[int, int] | None:
    if text is None:
        return None
    from deltalens.tasks.groups import VARIABLE_NAMES

    name, _, value = text.partition("=")
    names = VARIABLE_NAMES[:n_vars]
    if name.strip() not in names or not value.strip().isdigit() or not 1 <= int(value) <= n_vars:
        raise DeltalensError(
            f"--fact takes VARIABLE=VALUE with a variable of {', '.join(names)} and a value 1-{n_vars}"
        )
    return names.index(name.strip()), int(value) - 1


def _check_before_training(args) -> None:
    """What would otherwise be refused only after the training (minutes at the default steps), refused first."""
    from deltalens.probes.dictionary_scores import _kind_ids

    if args.score_at is not None:
        _kind_ids(args.score_at)  # an unknown token kind: one sentence now
    if args.n_traces < 2:
        raise DeltalensError(f"--n-traces {args.n_traces}: a dictionary trains on even traces, is scored on odd ones")
    if args.fact is not None and args.site == "write":
        raise DeltalensError("--fact ablates a fact's latents in the splice, and a 'write' dictionary is not spliced")
    if args.out is not None and Path(args.out).exists():
        names = {p.name for p in Path(args.out).iterdir()} if Path(args.out).is_dir() else None
        if names:  # an earlier dictionary, or any other folder: never overwritten or mixed into
            raise DeltalensError(f"--out {args.out} exists and is not empty: choose a new folder (nothing was trained)")


def run(args) -> int:
    from deltalens.interp.capture import capture
    from deltalens.interp.dictionary_splice import splice_report
    from deltalens.loading.opened import open_checkpoint
    from deltalens.probes.dictionary_scores import score_sae
    from deltalens.probes.dictionary_sites import site_names
    from deltalens.probes.sparse_dictionary import train_sae

    if args.site != "resid" and args.head is None:
        raise DeltalensError(f"site {args.site!r} is one head's: give --head")
    _check_before_training(args)
    checkpoint = open_checkpoint(getattr(args, "folder", None) or args.checkpoint)
    model = checkpoint.model
    batch = checkpoint.batch(args.n_traces, seed=args.seed)
    if "states" not in batch:
        raise DeltalensError("scoring a dictionary needs traces with a known state; this checkpoint's task has none")
    fact = _fact(args.fact, int(batch["states"].shape[-1]))
    cap = capture(model, batch, names=site_names(args.site, args.layer))
    dictionary = train_sae(
        cap, site=args.site, layer=args.layer, head=args.head, num_latents=args.latents, k=args.k,
        steps=args.steps, seed=args.seed,
    )  # fmt: skip
    score = score_sae(dictionary, cap, kinds=args.score_at)
    test = checkpoint.batch(args.n_traces, seed=args.seed + 1)  # fresh traces for the splice
    splice = splice_report(model, dictionary, test, score, fact=fact) if args.site != "write" else None
    if args.out is not None:
        dictionary.meta["checkpoint"] = args.checkpoint
        dictionary.save(args.out)
    record = {
        "checkpoint": args.checkpoint,
        "site": args.site,
        "layer": args.layer,
        "head": args.head,
        "num_latents": dictionary.num_latents,
        "k": dictionary.k,
        "train": dictionary.meta,
        "score": {key: value for key, value in score.to_dict().items() if key != "features"},
        "splice": None if splice is None else splice.to_dict(),
    }
    if args.json:
        print(json.dumps(record, default=float))
        return 0
    where = f"L{args.layer}" + ("" if args.head is None else f"H{args.head}")
    print(f"{args.checkpoint}  {args.site} {where}: {dictionary.num_latents} latents, k = {dictionary.k}, "
          f"{dictionary.meta['steps']} steps in {dictionary.meta['train_seconds']:.0f} s")  # fmt: skip
    print(score.title())
    print(score.facts.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if score.arrangements is not None and len(score.arrangements) <= 24:  # S3, S4: one line per whole state
        print(score.arrangements.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if splice is not None:
        print(f"reveal accuracy: {splice.baseline:.3f} plain, {splice.spliced:.3f} with the dictionary spliced in")
        if fact is not None:
            print(
                f"without latents {splice.dropped} (the fact's): {splice.fact_accuracy_ablated:.3f} on its "
                f"{splice.fact_reveals} reveals (spliced: {splice.fact_accuracy_spliced:.3f}), "
                f"{splice.other_accuracy_ablated:.3f} on the others (spliced: {splice.other_accuracy_spliced:.3f})"
            )
    if args.out is not None:
        print(f"saved: {args.out}")
    return 0

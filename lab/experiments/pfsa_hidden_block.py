"""PFSA-SR on the hidden block: every trained model on the same adversary traces, one JSON each.

    python3 -m lab.experiments.pfsa_hidden_block CKPT [CKPT ...] --out lab/results/pfsa/hidden_block

CKPT: checkpoint folders trained from lab/grids/pfsa_hidden_block/<arch>.toml (`deltalens train ...
--export CKPT`), named <arch>-s<seed>. Per checkpoint (training/hidden_block_eval.py,
probes/belief_probes.py):

* ``query_kl``: KL(exact || model) at the query after H partial reveals, H in 10..300, 32 traces;
* ``family_kl``: mean KL at every reveal of 64 held-out traces of the training family (did it learn?);
* ``state_norms``: the recurrent state's norm at cycles 1..300 of 8 horizon-300 traces;
* ``probes``: R^2 of ridge probes of the joint and the marginal belief from the states (200 held-out
  family traces), and the decoded marginal's total-variation distance at the late queries.

``guesses.json`` holds the uniform, block-uniform and last-reveal guesses and the linear filter's block
mass on the same traces. ``--table`` prints the report's section
(lab/experiments/report/hidden_block_section.py) from --out.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from deltalens.cli import arguments
from deltalens.core.atomic import write_json_atomic
from deltalens.loading.opened import open_checkpoint
from deltalens.probes.belief_probes import decoded_marginal_tv, fit_belief_probes, state_norms
from deltalens.tasks.dataset import trace_seed
from deltalens.tasks.probabilistic import generate_prob_trace
from deltalens.training.belief_kl import reveal_kl
from deltalens.training.hidden_block_eval import HORIZONS, adversary_traces, guess_kl, query_kl
from lab.experiments import entry
from lab.experiments.report.hidden_block_section import hidden_block_lines

CYCLES = [1, 10, 25, 50, 100, 150, 200, 300]


def evaluate(path: Path, n_traces: int) -> dict:
    checkpoint = open_checkpoint(path)
    model, tokenizer, spec = checkpoint.model, checkpoint.tokenizer, checkpoint.spec
    started = time.perf_counter()
    rows = query_kl(model, tokenizer, spec, HORIZONS, n_traces)
    family = [generate_prob_trace(spec, trace_seed(0, "eval", i)) for i in range(264)]
    probes = fit_belief_probes(model, tokenizer, family[:200])
    record = {
        "checkpoint": path.name,
        "spec": spec.to_dict(),
        "query_kl": {},
        "family_kl": float(reveal_kl(model, tokenizer, family[200:], "family").kl.mean()),
        "state_norms": {
            "cycles": CYCLES,
            "norms": state_norms(model, tokenizer, adversary_traces(spec, 300, 8), CYCLES),
        },
        "probes": {
            "features": probes["features"],
            "r2_joint": probes["r2_joint"],
            "r2_marginal": probes["r2_marginal"],
            "query_tv": {
                h: decoded_marginal_tv(model, tokenizer, probes["probes"]["marginal"], adversary_traces(spec, h, 16))
                for h in (50, 300)
            },
        },
    }
    for horizon, part in rows.groupby("horizon"):
        if "error" in part and part["error"].notna().any():
            record["query_kl"][int(horizon)] = {"error": str(part["error"].dropna().iloc[0])}
            continue
        record["query_kl"][int(horizon)] = {
            "kl": float(part.kl.mean()),
            "kl_sem": float(part.kl.std(ddof=1) / np.sqrt(len(part))),
            "value_mass": float(part.value_mass.mean()),
            "traces": int(len(part)),
        }
    record["eval_s"] = round(time.perf_counter() - started, 1)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, default=Path("lab/results/pfsa/hidden_block"))
    parser.add_argument("--traces", type=arguments.COUNT, default=32, help="adversary traces per horizon")
    parser.add_argument("--table", action="store_true", help="print the markdown table of --out and exit")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.table:
        print("\n".join(hidden_block_lines(args.out)))
        return
    if not args.checkpoints:
        parser.error("give checkpoint folders, or --table")
    guesses = args.out / "guesses.json"
    spec = open_checkpoint(args.checkpoints[0], load_model=False).spec
    if not guesses.is_file():
        write_json_atomic(guesses, guess_kl(spec, HORIZONS, args.traces))
    for path in args.checkpoints:
        target = args.out / f"{path.name}.json"
        if target.is_file():
            print(f"{path.name}: done already ({target})")
            continue
        record = evaluate(path, args.traces)
        write_json_atomic(target, record)
        print(
            f"{path.name}: "
            + ", ".join(f"H={h} {v.get('kl', float('nan')):.3f}" for h, v in record["query_kl"].items())
        )


if __name__ == "__main__":
    entry.run(main)

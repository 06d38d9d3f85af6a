"""PFSA-SR at long horizons, three seeds per probabilistic checkpoint: train, evaluate, record.

For every shipped probabilistic checkpoint (checkpoints/*-prob: DeltaNet [0,2], [0,1] and
renormalised, the LSTM, the Transformer), seed 0 is the shipped checkpoint itself and seeds 1, 2
are trained here from its committed train.toml with only `run.seed` changed (runs/pfsa-seeds/,
resumable; a finished run is not retrained). Each model is then evaluated by
training/long_horizon.py: KL(exact posterior predictive || model) after 50, 150 and 300 partial
reveals since the last full reveal, on random and adversarial traces, in fp32, bf16 and fp16.
The models were trained on 16-action traces with full reveals (probability 0.2); these traces
have none after the initial assignment, so the long horizons are also a length extrapolation.
A rotary Transformer is loaded with a context long enough for the traces (its weights do not
depend on the context length).

Writes lab/results/pfsa/long_horizon.json, which the PFSA-SR section of `deltalens reproduce` reads.

    python3 -m lab.experiments.pfsa_long_horizon [--seeds 0 1 2] [--traces 32] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from deltalens import models
from deltalens.cli import arguments
from deltalens.core.atomic import write_json_atomic
from deltalens.core.display import progress
from deltalens.loading.opened import open_checkpoint
from deltalens.models.lm.lens import attach_tokenizer
from deltalens.training.config import load_config
from deltalens.training.long_horizon import at_horizons, long_horizon_kl
from deltalens.training.loop import LAST, TRAINER_STATE, train
from lab.experiments import entry

ROOT = Path(__file__).resolve().parents[2]  # the repository (lab/experiments/ is two below it)
HORIZONS = (50, 150, 300)


def seed_run(name: str, seed: int, runs: Path) -> Path:
    """The checkpoint folder of `name` trained with `seed` (seed 0: the shipped checkpoint)."""
    if seed == 0:
        return ROOT / "checkpoints" / name
    config = load_config(ROOT / "checkpoints" / name / "train.toml")
    config.run.seed = seed
    run_dir = runs / f"{name}-s{seed}"
    state = run_dir / LAST / TRAINER_STATE
    done = state.is_file() and json.loads(state.read_text())["step"] >= config.run.steps
    if not done:
        train(config, run_dir, resume=state.is_file(), progress=False)
    return run_dir / LAST


def evaluate(name: str, seed: int, path: Path, traces: int) -> dict:
    checkpoint = open_checkpoint(path if seed else name, load_model=False)
    long_context = {"n_ctx": 4096} if checkpoint.meta.get("architecture") == "transformer" else {}
    model = models.load(checkpoint.path, **long_context)
    model = attach_tokenizer(model, checkpoint.tokenizer)
    started = time.perf_counter()
    rows = long_horizon_kl(model, checkpoint.tokenizer, checkpoint.eval_spec(), horizons=HORIZONS, n_traces=traces)
    curve = compact_curve(rows) if seed == 0 else []  # the figure draws seed 0 only; keeps the file small
    return {
        "checkpoint": name,
        "seed": seed,
        "path": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
        "eval_s": round(time.perf_counter() - started, 1),
        "at_horizons": at_horizons(rows, HORIZONS),
        "curve": curve,
    }


def compact_curve(rows) -> list[dict]:
    """KL by partial-reveal count in fp32 and fp16 (the figure's lines), 4 significant digits."""
    if "kl" not in rows:
        return []
    part = rows[rows.dtype.isin(["float32", "float16"])].dropna(subset=["kl"])
    return [
        {"dtype": r.dtype, "kind": r.kind, "partial_reveals": int(r.partial_reveals), "kl": float(f"{r.kl:.4g}")}
        for r in part.itertuples()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=arguments.SEED, nargs="+", default=[0, 1, 2])
    parser.add_argument("--traces", type=arguments.COUNT, default=32, help="traces per kind (default 32)")
    parser.add_argument("--only", nargs="+", help="checkpoint names (default: every *-prob checkpoint)")
    parser.add_argument("--runs", default=str(ROOT / "runs" / "pfsa-seeds"))
    parser.add_argument("--out", default=str(ROOT / "lab" / "results" / "pfsa" / "long_horizon.json"))
    args = parser.parse_args()
    names = args.only or sorted(p.name for p in (ROOT / "checkpoints").iterdir() if p.name.endswith("-prob"))
    out = Path(args.out)
    record = json.loads(out.read_text()) if out.is_file() else {}
    record.update(
        {
            "horizons": list(HORIZONS),
            "traces_per_kind": args.traces,
            "dtypes": ["float32", "bfloat16", "float16"],
            "what": __doc__.split("\n\n")[1].replace("\n", " "),
        }
    )
    results = {(r["checkpoint"], r["seed"]): r for r in record.get("results", [])}
    for name, seed in progress([(n, s) for n in names for s in args.seeds], desc="pfsa", unit="model"):
        path = seed_run(name, seed, Path(args.runs))
        results[(name, seed)] = evaluate(name, seed, path, args.traces)
        record["results"] = sorted(results.values(), key=lambda r: (r["checkpoint"], r["seed"]))
        write_json_atomic(out, record)  # after every model: a kill loses at most one
    print(out)


if __name__ == "__main__":
    entry.run(main)

"""Training speed on this machine, printed as one JSON object.

* throughput: tokens per second of full optimiser steps (data, forward, backward, AdamW) for the
  shipped reference configs, measured side by side in this run (interleaved, best of 3 each): `before` with the torch
  kernels only (the CPU path before the C kernels), `after` with today's path (the C delta rule
  and short convolution, models/ops/native.py), and `speedup` = after / before. Two phases of the
  shipped recipe: `dense` (reveal spacing 1, the curriculum's start: longer traces) and `sparse`
  (spacing k, where most steps are). The Transformer runs neither kernel: its ratio shows the noise.
* transformer_attention: the same for the Transformer baselines (statement and code traces, the
  code ones ~4x longer), `before` with TransformerLens's attention, `after` with the fused kernel
  it takes in training (models/layers/transformer_attention.py).
* time to 99%: with `--time-to-99`, trains S3 and S5 DeltaNet [0, 2] from their shipped configs
  (seeds from --seeds) until held-out reveal accuracy at spacing 4 reaches 0.99, and reports the
  training wall time (evaluations excluded) with today's path.

    python3 benchmarks/training.py [--steps 20] [--time-to-99 [--seeds 0 1 2] | --from-runs] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from deltalens import models
from deltalens.models.layers.transformer_attention import fused_attention
from deltalens.models.ops.native import native_kernels
from deltalens.training.config import load_config
from deltalens.training.data import TrainingData
from deltalens.training.loop import next_token_loss, train

ROOT = Path(__file__).resolve().parent.parent

REFERENCE = [
    "s3-deltanet-neg-statement",
    "s5-deltanet-neg-statement",
    "s3-transformer-statement",
    "s3-deltanet-neg-code",
]
PHASES = {"dense": 0, "sparse": 10_000}  # a step of the curriculum's spacing-1 stage / of its last stage


def throughput(name: str, steps: int, phase: str = "sparse") -> dict:
    config = load_config(ROOT / "checkpoints" / name / "train.toml")
    data = TrainingData(config.task, seed=0)
    kwargs = {k: v for k, v in config.model.items() if k != "arch"}
    torch.manual_seed(0)
    model = models.build(config.model["arch"], vocab_size=data.tokenizer.vocab_size, **kwargs).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    first = PHASES[phase]
    tokens, started = 0, None
    for step in range(steps + 2):  # two warm-up steps are not timed
        if step == 2:
            started = time.perf_counter()
        batch = data.train_batch(first + step, config.optim.batch_size, config.run.steps)
        loss, _ = next_token_loss(model(batch["tokens"]), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step >= 2:
            tokens += int(batch["lengths"].sum())
    elapsed = time.perf_counter() - started
    return {
        "tokens_per_s": round(tokens / elapsed),
        "steps_per_s": round(steps / elapsed, 2),
        "tokens_per_step": tokens // steps,
        "batch_size": config.optim.batch_size,
    }


def side_by_side(name: str, steps: int, rounds: int = 3, switch=native_kernels) -> dict:
    """Before and after (`switch(False)`, `switch(True)`) interleaved `rounds` times, the best of
    each kept: other load on the machine slows both alike instead of whichever ran during it."""
    row = {}
    for phase in PHASES:
        runs = {"before": [], "after": []}
        for _ in range(rounds):
            for label, enabled in (("before", False), ("after", True)):
                with switch(enabled):
                    runs[label].append(throughput(name, steps, phase))
        before, after = (max(runs[k], key=lambda r: r["tokens_per_s"]) for k in ("before", "after"))
        row[phase] = {
            "before": before,
            "after": after,
            "speedup": round(after["tokens_per_s"] / before["tokens_per_s"], 2),
        }
    return row


def time_to_99(name: str, seed: int = 0) -> dict:
    config = load_config(ROOT / "checkpoints" / name / "train.toml")
    config.run.seed = seed
    config.run.early_stop_accuracy = 0.99
    config.run.checkpoint_every = 0
    with tempfile.TemporaryDirectory() as tmp:
        result = train(config, Path(tmp) / "run", progress=False)
    reached = next((h for h in result.history if h["reveal_accuracy"] >= 0.99), None)
    return {
        "seed": seed,
        "reached": reached is not None,
        "step": reached["step"] if reached else None,
        "train_wall_s": round(result.wall_time_s, 1),
        "history": result.history,
    }


def time_to_99_from_run(name: str) -> dict:
    """Time to 99% read from a finished run's record (runs/<name>, as scripts/train_checkpoints.sh
    leaves it) instead of training again: the training wall time at the first evaluation >= 0.99;
    runs older than the per-evaluation `train_wall_s` field get it prorated by steps."""
    state_file = ROOT / "runs" / name / "last" / "trainer_state.json"
    if not state_file.is_file():
        return {"error": f"no finished run at {state_file.parent.parent}; train it or use --time-to-99"}
    state = json.loads(state_file.read_text())
    reached = next((h for h in state["history"] if h["reveal_accuracy"] >= 0.99), None)
    if reached is None:
        return {"reached": False, "steps": state["step"], "train_wall_s": round(state["wall_time_s"], 1)}
    if "train_wall_s" in reached:
        wall, how = reached["train_wall_s"], "recorded"
    else:
        wall, how = state["wall_time_s"] * reached["step"] / state["step"], "prorated by steps"
    return {
        "reached": True,
        "step": reached["step"],
        "train_wall_s": round(wall, 1),
        "wall": how,
        "run_steps": state["step"],
        "run_wall_s": round(state["wall_time_s"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--time-to-99", action="store_true", help="train S3 and S5 until 99%% (minutes each)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds for --time-to-99")
    parser.add_argument(
        "--from-runs", action="store_true", help="time to 99%% from the finished runs in runs/ (no training)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = {
        "benchmark": "training",
        "threads": args.threads,
        "torch": torch.__version__,
        "throughput": {name: side_by_side(name, args.steps) for name in REFERENCE},
        "transformer_attention": {
            name: side_by_side(name, max(2, args.steps // 4), switch=fused_attention)
            for name in ("s3-transformer-statement", "s3-transformer-code")
        },
    }
    if args.time_to_99:
        out["time_to_99"] = {
            name: [time_to_99(name, seed) for seed in args.seeds]
            for name in ["s3-deltanet-neg-statement", "s5-deltanet-neg-statement"]
        }
    if args.from_runs:
        out["time_to_99_from_runs"] = {
            name: time_to_99_from_run(name) for name in ["s3-deltanet-neg-statement", "s5-deltanet-neg-statement"]
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()

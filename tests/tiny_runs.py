"""Tiny training configs and sweeps that tests in several rooms share (train, eval, reproduce)."""

from __future__ import annotations

from pathlib import Path

from deltalens.training.config import TrainConfig


def tiny_config(arch: str = "deltanet", steps: int = 6) -> TrainConfig:
    model = {
        "deltanet": {
            "arch": "deltanet",
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_heads": 2,
            "allow_neg_eigval": True,
        },
        "lstm": {"arch": "lstm", "d_model": 32, "n_layers": 1},
        "transformer": {"arch": "transformer", "d_model": 32, "n_layers": 1, "n_heads": 2, "n_ctx": 128},
    }[arch]
    return TrainConfig.from_dict(
        {
            "task": {"group": "S3", "actions": [4, 6], "spacing": [1, 2], "eval_spacing": 2},
            "model": model,
            "optim": {"batch_size": 4, "warmup_steps": 2, "lr": 3e-3},
            "run": {"steps": steps, "eval_every": 3, "eval_traces": 8, "checkpoint_every": 3, "threads": 1},
        }
    )


TINY = """
[sweep]
steps = {steps}
eval_multiples = [1, 2, 4]
eval_traces = 8

[[grid]]
groups = ["S3"]
archs = ["deltanet-neg", "lstm"]
spacings = [1, 2]
tokenizer = "statement"

[task]
actions = [4, 4]
reveal = "mixed"

[optim]
lr = 3e-3
warmup_steps = 1
batch_size = 4

[run]
eval_every = 0
eval_traces = 8
checkpoint_every = 1
threads = 1

[models.deltanet-neg]
arch = "deltanet"
hidden_size = 32
num_hidden_layers = 1
num_heads = 2
allow_neg_eigval = true

[models.lstm]
arch = "lstm"
d_model = 32
n_layers = 1
"""


def tiny_sweep(tmp_path, steps: int = 3) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.format(steps=steps))
    return path


# `deltalens reproduce` on tiny_sweep: its cells, the command, and a hand-made result file
TINY_CELLS = [
    "s3-deltanet-neg-statement-k1-s0",
    "s3-deltanet-neg-statement-k2-s0",
    "s3-lstm-statement-k1-s0",
    "s3-lstm-statement-k2-s0",
]


def reproduce_tiny(tmp_path, *extra: str) -> int:
    """`deltalens reproduce` on the tiny sweep written under tmp_path (tiny_sweep), in this process."""
    from deltalens.cli.main import main

    return main(
        [
            "reproduce",
            "--grid",
            str(tmp_path / "tiny.toml"),
            "--results",
            str(tmp_path / "results"),
            "--out",
            str(tmp_path / "reports"),
            "--runs",
            str(tmp_path / "runs"),
            "--no-progress",
            "--no-pfsa",
            *extra,
        ]
    )


def hand_result(arch: str, k: int, accs: list[float], group: str = "S3", tokenizer: str = "statement") -> dict:
    """A hand-made result file: reveal accuracy at 1x, 2x, 4x (16 actions)."""
    lengths = [{"actions": 16 * m, "x_train": float(m), "reveal_accuracy": a} for m, a in zip((1, 2, 4), accs)]
    return {"group": group, "arch": arch, "spacing": k, "tokenizer": tokenizer, "eval": {"lengths": lengths}}

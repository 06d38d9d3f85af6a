"""Training configuration: one TOML file, four tables, flag overrides on top.

```toml
[task]                      # what the model reads (see tasks.TraceSpec)
group = "S3"
[model]                     # any models.build architecture; the rest are its kwargs
arch = "deltanet"
[optim]                     # AdamW, linear warmup then cosine decay, gradient clipping
lr = 3e-3
[run]                       # seed, steps, evaluation and checkpoint cadence
steps = 4000
```

Overrides use dotted keys, `task.group=S5 optim.lr=1e-3 run.steps=100`, parsed as TOML values.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.models.architecture import ARCHITECTURES
from deltalens.models.ops.precision import PRECISIONS
from deltalens.tasks.traces import MAX_ACTIONS


@dataclass
class TaskConfig:
    group: str = "S3"  # permutation group, e.g. S3, S5, A4, Z6, D4
    action_set: str = "swaps"  # swaps | cycles | full | generators
    tokenizer: str = "statement"  # statement (one token per line) | code (Python tokens)
    actions: list[int] = field(default_factory=lambda: [16, 16])  # [lo, hi] actions per trace
    # Reveal spacing is drawn per trace uniformly from [lo, hi] ("mixed spacing"): the paper's
    # fixed sparse spacing is [k, k]. Sparse reveals alone rarely get off the ground; mixing in
    # dense traces gives the gradient signal that bootstraps tracking.
    spacing: list[int] = field(default_factory=lambda: [1, 4])
    # Spacing curriculum: [[from_step, lo, hi], ...] replaces `spacing` from each from_step on,
    # e.g. [[0, 1, 1], [1000, 1, 8]] = dense reveals first, sparse ones later (empty = off).
    spacing_schedule: list[list[int]] = field(default_factory=list)
    # one: print('a', a); all: print(a, b, c); mixed: each trace draws one or all (held-out
    # evaluation then uses one, the paper's setting, and the card reports all as well)
    reveal: str = "one"
    supervision: str = "reveal"  # reveal (loss on revealed values only) | all (every token)
    eval_spacing: int = 4  # spacing of the held-out evaluation traces
    # Length curriculum: the upper bound of `actions` grows linearly from curriculum_start
    # to actions[1] over the first curriculum_steps steps (0 = off).
    curriculum_steps: int = 0
    curriculum_start: int = 4
    # Probabilistic traces (PFSA-SR, tasks/probabilistic.py) when mix gives weight to hidden
    # outcomes: weights of deterministic / random-swap / random-choice actions ([1, 0, 0]:
    # deterministic traces, the fields below unused). A reveal then prints every variable with
    # probability full_reveal_prob, else one (`reveal` is not used); tokenizer statement-prob or code-prob.
    mix: list[float] = field(default_factory=lambda: [1.0, 0.0, 0.0])
    swap_prob: float = 0.5  # p of "a, b = (b, a) if random.random() < p else (a, b)"
    choice_size: int = 3  # random.choice over the rotations of this many variables
    full_reveal_prob: float = 0.2
    # The hidden-block family (tasks/hidden_block.py) when > 0: a block of this many variables that a
    # reveal prints with probability query_prob (else a probe variable); `actions` counts 2 per cycle.
    hidden_block: int = 0
    query_prob: float = 0.2
    probe_leak: float = 0.0  # share of leaks between two probe variables (the no-drain adversary's kind)


@dataclass
class OptimConfig:
    lr: float = 3e-3  # peak learning rate
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    warmup_steps: int = 100  # linear warmup from 0 to lr
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio at the last step
    grad_clip: float = 1.0  # max global gradient norm (0 = off)
    batch_size: int = 32


@dataclass
class RunConfig:
    seed: int = 0  # seeds initialisation and the training data stream
    steps: int = 4000
    eval_every: int = 250  # steps between held-out evaluations (0 = only at the end)
    eval_traces: int = 256  # held-out traces per evaluation
    checkpoint_every: int = 500  # steps between atomic checkpoints (0 = only at the end)
    early_stop_accuracy: float = 0.0  # stop once held-out reveal accuracy >= this (0 = never)
    # seed of the held-out traces evaluated during training (eval split, never a training trace);
    # -1 = `seed`. Set it apart from the test seed (0, that of `deltalens eval`) when these numbers
    # choose anything (a learning rate, when to stop), so that test traces never do.
    validation_seed: int = -1
    threads: int = 0  # torch threads (0 = torch's default)
    # fp32, or bf16: autocast around each training step (matmuls in bf16, the recurrence and its state,
    # the parameters and the optimiser in fp32; on CUDA fla's chunk kernels). models/ops/precision.py.
    precision: str = "fp32"


@dataclass
class TrainConfig:
    task: TaskConfig = field(default_factory=TaskConfig)
    model: dict[str, Any] = field(default_factory=lambda: {"arch": "deltanet"})
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        unknown = set(data) - {"task", "model", "optim", "run"}
        if unknown:
            raise DeltalensError(f"unknown config table(s) {sorted(unknown)}; expected task, model, optim, run")
        model = dict(data.get("model", {"arch": "deltanet"}))
        if "arch" not in model:
            raise DeltalensError(f"the [model] table needs an `arch` ({', '.join(ARCHITECTURES)})")
        return cls(
            task=_make(TaskConfig, data.get("task", {}), "task"),
            model=model,
            optim=_make(OptimConfig, data.get("optim", {}), "optim"),
            run=_make(RunConfig, data.get("run", {}), "run"),
        )


# (lo, hi, lo is exclusive) for every numeric field: checked here, once, with the field's name
RANGES: dict[str, tuple[float | None, float | None, bool]] = {
    "optim.lr": (0, 10, True),
    "optim.weight_decay": (0, None, False),
    "optim.betas": (0, 1, False),
    "optim.warmup_steps": (0, None, False),
    "optim.min_lr_ratio": (0, 1, False),
    "optim.grad_clip": (0, None, False),
    "optim.batch_size": (1, 100_000, False),
    "run.seed": (0, 2**62, False),
    "run.steps": (1, 100_000_000, False),
    "run.eval_every": (0, None, False),
    "run.eval_traces": (1, 1_000_000, False),
    "run.checkpoint_every": (0, None, False),
    "run.early_stop_accuracy": (0, 1, False),
    "run.threads": (0, 1024, False),
    "run.validation_seed": (-1, 2**62, False),
    "task.actions": (1, MAX_ACTIONS, False),
    "task.spacing": (1, MAX_ACTIONS, False),
    "task.eval_spacing": (1, MAX_ACTIONS, False),
    "task.curriculum_steps": (0, None, False),
    "task.curriculum_start": (1, MAX_ACTIONS, False),
    "task.mix": (0, None, False),
    "task.swap_prob": (0, 1, True),
    "task.choice_size": (2, 10, False),
    "task.full_reveal_prob": (0, 1, False),
}


def _check_range(table: str, key: str, value: Any) -> None:
    bounds = RANGES.get(f"{table}.{key}")
    if bounds is None:
        return
    lo, hi, open_lo = bounds
    for number in value if isinstance(value, list) else [value]:
        bad = (
            not math.isfinite(number)
            or (lo is not None and (number <= lo if open_lo else number < lo))
            or (hi is not None and number > hi)
        )
        if bad:
            low = "" if lo is None else f"{'>' if open_lo else '>='} {lo:g}"
            high = "" if hi is None else f"<= {hi:g}"
            bounds_text = " and ".join(filter(None, (low, high)))
            raise DeltalensError(f"[{table}] {key} = {value!r} must be finite and {bounds_text}")


def _make(cls, values: dict[str, Any], table: str):
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise DeltalensError(f"unknown key(s) {sorted(unknown)} in [{table}]; known keys: {sorted(names)}")
    values = dict(values)
    for key in ("actions", "spacing"):  # `16` is shorthand for [16, 16]
        if key in values and isinstance(values[key], int) and not isinstance(values[key], bool):
            values[key] = [values[key], values[key]]
    defaults = cls()
    for key, value in values.items():
        _check_type(table, key, value, getattr(defaults, key))
        _check_range(table, key, value)
    for key in ("actions", "spacing"):
        if key in values and not (len(values[key]) == 2 and 1 <= values[key][0] <= values[key][1]):
            raise DeltalensError(
                f"[{table}] {key} must be a number >= 1 or [lo, hi] with 1 <= lo <= hi, got {values[key]!r}"
            )
    if "precision" in values and values["precision"] not in PRECISIONS:
        raise DeltalensError(f"[{table}] precision = {values['precision']!r} must be one of {', '.join(PRECISIONS)}")
    for stage in values.get("spacing_schedule", []):
        if not (isinstance(stage, list) and len(stage) == 3 and 1 <= stage[1] <= stage[2]):
            raise DeltalensError(f"spacing_schedule entries are [from_step, lo, hi] with 1 <= lo <= hi, got {stage!r}")
    return cls(**values)


def _check_type(table: str, key: str, value: Any, default: Any) -> None:
    """Refuse a value whose type differs from the default's (ints pass where floats are expected)."""
    expected = type(default)
    ok = isinstance(value, expected) and not (isinstance(value, bool) and expected is not bool)
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if ok and expected is list and default and all(isinstance(d, (int, float)) for d in default):
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    if not ok:
        raise DeltalensError(f"[{table}] {key} = {value!r} should be a {expected.__name__} like {default!r}")


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `table.key=value` overrides (value parsed as TOML, bare words taken as strings)."""
    data = {table: dict(values) for table, values in data.items()}
    for item in overrides:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise DeltalensError(f"override {item!r} is not of the form table.key=value (e.g. optim.lr=1e-3)")
        key, raw = item.split("=", 1)
        table, name = key.split(".", 1)
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw  # a bare word such as S5 or deltanet
        data.setdefault(table, {})[name] = value
    return data


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> TrainConfig:
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if path.is_dir():
            raise DeltalensError(f"config file {path} is a folder: give the run's TOML file (e.g. {path}/train.toml)")
        if not path.is_file():
            raise DeltalensError(f"config file {path} does not exist")
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as err:
            raise DeltalensError(f"config file {path} is not valid TOML: {err}") from None
    return TrainConfig.from_dict(apply_overrides(data, list(overrides)))


def dump_toml(config: TrainConfig) -> str:
    """Write a config back as TOML (flat tables of scalars and lists: enough for our configs)."""
    lines = []
    for table, values in config.to_dict().items():
        lines.append(f"[{table}]")
        for key, value in values.items():
            lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)

"""The training loop: next-token prediction on REPL traces, with resumable atomic checkpoints.

A run directory holds `last/`, a checkpoint (models.save format) with the optimiser state and a
`trainer_state.json` beside the weights. The data of step s depends only on (seed, s), so a run
resumed from `last/` sees exactly the batches an unbroken run would have seen, and (on CPU, where
torch is deterministic) ends with the same weights.

The folder is the run's alone: a folder holding anything else is refused, a training holds a lock
on it while it runs, and Ctrl-C takes effect between optimiser steps (then the finished steps are
saved), so an interrupted run resumes as exactly as a killed one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from deltalens import models
from deltalens.core.atomic import recover_dir, replace_dir
from deltalens.core.display import progress as progress_bar
from deltalens.core.errors import DeltalensError, reporting_storage_failure
from deltalens.models.ops.precision import training_autocast
from deltalens.training.config import TrainConfig, dump_toml
from deltalens.training.data import TrainingData
from deltalens.training.evaluate import evaluate
from deltalens.training.history import TRAINER_STATE, read_trainer_state, training_history  # noqa: F401 (re-exported)
from deltalens.training.optimizer_state import load_optimizer, save_optimizer
from deltalens.training.schedule import learning_rate

LAST = "last"


@dataclass
class TrainResult:
    run_dir: Path
    step: int  # optimiser steps completed
    wall_time_s: float  # training time summed over all sessions of this run
    history: list[dict[str, Any]] = field(default_factory=list)  # one entry per evaluation
    stopped_early: bool = False

    @property
    def checkpoint(self) -> Path:
        return self.run_dir / LAST


def next_token_loss(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked cross-entropy of logits[:, t-1] against tokens[:, t]; also the reveal accuracy."""
    pred_logits = logits[:, :-1]  # (B, T-1, V): position t-1 predicts token t
    targets = batch["tokens"][:, 1:]
    mask = batch["loss_mask"][:, 1:]
    losses = F.cross_entropy(pred_logits.reshape(-1, pred_logits.shape[-1]), targets.reshape(-1), reduction="none")
    loss = (losses * mask.reshape(-1)).sum() / mask.sum().clamp(min=1)
    reveal = batch["reveal_mask"][:, 1:]
    correct = (pred_logits.argmax(-1) == targets) & reveal
    accuracy = correct.sum().float() / reveal.sum().clamp(min=1)
    return loss, accuracy


def train(
    config: TrainConfig,
    run_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    on_step: Callable[[int, float], None] | None = None,
    log: str | None = None,
) -> TrainResult:
    """Train `config` into `run_dir`; with `resume`, continue from `run_dir/last`.

    `on_step(step, loss)` is called after every optimiser step (tests use it to simulate a kill).
    `log="tensorboard"` also writes the loss, the learning rate and the held-out accuracy at 1x, 2x and
    4x the training length as TensorBoard events in run_dir/tensorboard (training/tensorboard_log.py).
    """
    run_dir = Path(run_dir)
    check_run_dir(run_dir)
    if config.run.threads:
        torch.set_num_threads(config.run.threads)
    data = TrainingData(config.task, config.run.seed)  # a bad task fails here, before any folder is made
    torch.manual_seed(config.run.seed)
    model_kwargs = {k: v for k, v in config.model.items() if k != "arch"}
    model = models.build(config.model["arch"], vocab_size=data.tokenizer.vocab_size, **model_kwargs)
    # CUDA when present (the DeltaNet mixer then calls fla's kernels), else the pure-torch CPU path
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with contextlib.redirect_stdout(sys.stderr):  # TransformerLens prints "Moving model to device": not on stdout
        model.to(device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.optim.lr, betas=tuple(config.optim.betas), weight_decay=config.optim.weight_decay
    )
    with RunLock(run_dir):  # a second writer of the same folder is refused before anything is read
        return _resume_and_train(config, run_dir, resume, progress, on_step, data, model, optimizer, device, log)


def _resume_and_train(
    config, run_dir: Path, resume: bool, progress: bool, on_step, data, model, optimizer, device, log=None
) -> TrainResult:
    step, wall, history, stopped_early = 0, 0.0, [], False
    last = run_dir / LAST
    recover_dir(last)  # killed between the two renames of replace_dir: that checkpoint is the run's
    if resume:
        if not (last / TRAINER_STATE).is_file():
            raise DeltalensError(f"cannot resume: {last} holds no trainer state; start without --resume")
        state = read_trainer_state(last)
        if _resume_key(state["config"]) != _resume_key(config.to_dict()):
            raise DeltalensError(
                f"cannot resume: the task, model, optimiser, seed or step budget differ from the config "
                f"{run_dir} was started with (only run.threads and the eval/checkpoint cadence may change)"
            )
        model.load_state_dict(models.load(last).state_dict())
        load_optimizer(optimizer, last)
        step, wall, history = state["step"], state["wall_time_s"], state["history"]
        stopped_early = state.get("stopped_early", False)
    elif last.exists():
        raise DeltalensError(f"{run_dir} already holds a run; pass --resume to continue it or choose another --out")
    (run_dir / "train.toml").write_text(dump_toml(config))
    from deltalens.training.tensorboard_log import make_log

    logger = make_log(log, run_dir, resume_step=step if resume else None)
    run = _Run(config, run_dir, data, model, optimizer, device, step, wall, history, stopped_early, logger)
    try:
        return _train_steps(run, progress, on_step)
    finally:
        if logger is not None:
            logger.close()


@dataclass
class _Run:
    """A run in progress (its folder locked, everything checked and prepared): what a step
    changes and what a checkpoint records."""

    config: TrainConfig
    run_dir: Path
    data: TrainingData
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    step: int  # optimiser steps completed
    wall: float  # training time so far, evaluations excluded
    history: list[dict[str, Any]]  # one entry per evaluation
    stopped_early: bool
    log: Any = None  # a TensorBoardLog (training/tensorboard_log.py), or None

    @property
    def last(self) -> Path:
        return self.run_dir / LAST

    def save(self, metrics: dict[str, Any]) -> None:
        """Checkpoint the model, the optimiser and the trainer state into `last/`, atomically."""
        config = self.config
        extra = {
            "tokenizer": self.data.tokenizer.to_spec(),
            "task": self.data.task_dict(),
            "training": {"config": config.to_dict(), "step": self.step, "wall_time_s": round(self.wall, 1)},
            "metrics": metrics,
        }
        staging = self.run_dir / f".{LAST}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        with reporting_storage_failure(self.last, self._what_is_intact()):
            try:
                self._write_checkpoint(staging, extra)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        replace_dir(staging, self.last)

    def _what_is_intact(self) -> str:
        try:
            step = json.loads((self.last / TRAINER_STATE).read_text())["step"]
        except (OSError, ValueError, KeyError, TypeError):
            return "no checkpoint of this run was written before (the partial copy was removed)"
        return f"the checkpoint of step {step} is intact; free some space and continue with --resume"

    def _write_checkpoint(self, staging: Path, extra: dict[str, Any]) -> None:
        config = self.config
        models.save(self.model, staging, extra=extra, files=self.data.tokenizer.files())
        save_optimizer(self.optimizer, staging)
        (staging / TRAINER_STATE).write_text(
            json.dumps(
                {
                    "step": self.step,
                    "wall_time_s": self.wall,
                    "history": self.history,
                    "config": config.to_dict(),
                    "stopped_early": self.stopped_early,
                }
            )
        )

    def run_eval(self) -> dict[str, Any]:
        """Held-out validation accuracy now, appended to the history."""
        config = self.config
        self.model.eval()
        result = evaluate(
            self.model,
            self.data.tokenizer,
            self.data.eval_spec(),
            n_traces=config.run.eval_traces,
            seed=validation_seed(config),
        )
        entry: dict[str, Any] = {
            "step": self.step,
            "reveal_accuracy": result.reveal_accuracy,
            "trace_accuracy": result.trace_accuracy,
            "train_wall_s": round(self.wall, 1),
        }  # training time so far, evaluations excluded
        if self.log is not None:  # the longer lengths too: what extrapolation looks like while training
            from deltalens.training.tensorboard_log import LENGTHS

            by_length = {1: result.reveal_accuracy}
            for multiple in LENGTHS[1:]:
                longer = self.data.eval_spec(actions=multiple * self.data.task.actions[1])  # eval_spec's length
                score = evaluate(
                    self.model, self.data.tokenizer, longer, config.run.eval_traces, validation_seed(config)
                )
                by_length[multiple] = score.reveal_accuracy
            entry["reveal_accuracy_by_length"] = {f"{k}x": v for k, v in by_length.items()}
            self.log.evaluation(self.step, by_length)
        self.model.train()
        self.history.append(entry)
        return entry

    def optimizer_step(self, bar) -> tuple[torch.Tensor, torch.Tensor, float]:
        """One AdamW step on batch `step` (loss, reveal accuracy, lr); a non-finite loss stops
        the run before the parameters change."""
        config, optimizer, total = self.config, self.optimizer, self.config.run.steps
        lr = learning_rate(self.step, total, config.optim.lr, config.optim.warmup_steps, config.optim.min_lr_ratio)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = self.data.train_batch(self.step, config.optim.batch_size, total)
        batch = {k: v.to(self.device) for k, v in batch.items()}
        with training_autocast(self.device, config.run.precision):  # bf16: autocast; fp32: nothing
            loss, accuracy = next_token_loss(self.model(batch["tokens"]), batch)
        if not torch.isfinite(loss):
            bar.close()
            raise DeltalensError(
                f"loss became {loss.item()} at step {self.step + 1}; stopped. The last good checkpoint "
                f"({self.last if self.last.exists() else 'none yet'}) is kept: lower optim.lr or raise "
                "optim.warmup_steps"
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.optim.grad_clip)
        optimizer.step()
        return loss, accuracy, lr

    def evaluate_and_checkpoint(self, bar, progress: bool) -> None:
        """After a step: evaluate (and maybe stop early) and checkpoint, each at its cadence."""
        run = self.config.run
        if run.eval_every and self.step % run.eval_every == 0:
            entry = self.run_eval()
            if progress:  # beside the bar, on stderr: a caller's stdout stays its own
                bar.write(f"step {self.step}: held-out reveal accuracy {entry['reveal_accuracy']:.4f}", file=sys.stderr)
            if run.early_stop_accuracy and entry["reveal_accuracy"] >= run.early_stop_accuracy:
                self.stopped_early = True
        if run.checkpoint_every and self.step % run.checkpoint_every == 0 and self.step < run.steps:
            self.save(self.history[-1] if self.history else {})


def _train_steps(run: _Run, progress: bool, on_step) -> TrainResult:
    """The loop itself: steps until the budget is spent or the run stops early, then a final
    evaluation and checkpoint; Ctrl-C checkpoints the finished steps."""
    total = run.config.run.steps
    bar = progress_bar(total=total, initial=run.step, enabled=progress, desc="train")
    run.model.train()
    in_step = False  # True while parameters and optimiser state are being changed
    try:
        with DeferredInterrupt() as ctrl_c:
            while run.step < total and not run.stopped_early:
                if ctrl_c.requested:
                    raise KeyboardInterrupt
                in_step = True
                started = time.perf_counter()
                loss, accuracy, lr = run.optimizer_step(bar)
                run.step += 1
                in_step = False
                run.wall += time.perf_counter() - started
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{accuracy.item():.3f}", lr=f"{lr:.1e}")
                if run.log is not None:
                    run.log.step(run.step, loss.item(), accuracy.item(), lr)
                if on_step is not None:
                    on_step(run.step, loss.item())
                run.evaluate_and_checkpoint(bar, progress)
    except KeyboardInterrupt:
        # Between steps the state is whole: checkpoint the finished steps, then stop as asked. Inside a
        # step (only a second, forcing Ctrl-C gets there) it may be torn: keep the last checkpoint.
        bar.close()
        if not in_step:
            run.save(run.history[-1] if run.history else {})
        raise
    bar.close()
    if not run.history or run.history[-1]["step"] != run.step:
        run.run_eval()
    run.save(run.history[-1])
    return TrainResult(run.run_dir, run.step, run.wall, run.history, run.stopped_early)


RUN_MARKER = ".deltalens-run"  # written into every run folder: what `--out` may reuse


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run folder that holds anything but a deltalens run: training never writes into
    (or over) files it did not create."""
    if run_dir.exists() and not run_dir.is_dir():
        raise DeltalensError(f"--out {run_dir} is a file, not a folder; choose a folder for the run")
    if not run_dir.is_dir():
        return
    entries = sorted(p.name for p in run_dir.iterdir())
    ours = RUN_MARKER in entries or ("train.toml" in entries and ({LAST, f".{LAST}.old"} & set(entries)))
    if entries and not ours:
        shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
        raise DeltalensError(
            f"--out {run_dir} is not empty and is not a deltalens training run (it holds {shown}); "
            "choose a new or empty folder; nothing was written"
        )


class RunLock:
    """An exclusive lock on a run folder while a training writes to it (a second writer is refused)."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir

    def __enter__(self) -> RunLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / RUN_MARKER).touch()
        self.handle = open(self.run_dir / ".lock", "a+")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.seek(0)
            holder = self.handle.read().strip() or "another process"
            self.handle.close()
            raise DeltalensError(
                f"{self.run_dir} is being written by another training ({holder}); wait for it "
                "to finish or choose another --out"
            ) from None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(f"pid {os.getpid()}")
        self.handle.flush()
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


class DeferredInterrupt:
    """Ctrl-C during training takes effect between optimiser steps, so no half-updated state is
    ever saved (the loop checks `requested` before each step); a second Ctrl-C stops at once."""

    def __enter__(self) -> DeferredInterrupt:
        self.requested = False
        self._previous = None
        if threading.current_thread() is threading.main_thread():  # signal handlers live there only
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def validation_seed(config: TrainConfig) -> int:
    """The eval-split seed of the held-out traces evaluated during training."""
    return config.run.seed if config.run.validation_seed < 0 else config.run.validation_seed


def _resume_key(config: dict[str, Any]) -> dict[str, Any]:
    """The parts of a config a resumed run must share with its start (the rest is cadence);
    keys added to the config since the run started count with their defaults."""
    config = TrainConfig.from_dict(config).to_dict()
    run = {
        k: v for k, v in config["run"].items() if k not in ("threads", "eval_every", "checkpoint_every", "eval_traces")
    }
    return {**config, "run": run}

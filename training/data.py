"""The training data stream: batch s is a pure function of (seed, s).

That makes `--resume` exact without saving any data-loader state, and lets mixed reveal spacing
and a length curriculum be drawn per trace from the step alone.
"""

from __future__ import annotations

from typing import Any

import torch

from deltalens.core.errors import DeltalensError
from deltalens.tasks import TraceSpec, generate_trace, make_tokenizer
from deltalens.tasks.dataset import collate, trace_seed
from deltalens.tasks.prob_spec import check_mix
from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace
from deltalens.training.config import TaskConfig


class TrainingData:
    def __init__(self, task: TaskConfig, seed: int, tokenizer=None):
        """tokenizer: the one to use instead of building it from task.tokenizer (an hf tokenizer read
        from a checkpoint's folder, whose recorded path may be elsewhere)."""
        self.task = task
        self.seed = seed
        if task.reveal not in ("one", "all", "mixed"):
            raise DeltalensError(f"task.reveal must be one, all or mixed, got {task.reveal!r}")
        # PFSA-SR traces when the mix gives weight to hidden outcomes (training.config.TaskConfig)
        self.probabilistic = len(task.mix) == 3 and sum(task.mix[1:]) > 0
        if self.probabilistic != task.tokenizer.endswith("-prob"):
            raise DeltalensError(
                "probabilistic traces (task.mix with weight on random swaps or choices) need the statement-prob "
                "or code-prob tokenizer, and those tokenizers need such a mix"
            )
        spec = self.eval_spec()  # validates group, action set and spacing before any training starts
        self.tokenizer = tokenizer or make_tokenizer(
            task.tokenizer, spec if self.probabilistic else task.group, action_set=task.action_set
        )

    def _prob_spec(self, actions, spacing: int) -> ProbTraceSpec:
        task = self.task
        return ProbTraceSpec(
            group=task.group,
            action_set=task.action_set,
            actions=actions,
            mix=check_mix(tuple(task.mix)),  # as the spec keeps it (the tuple: the same refusal)
            swap_prob=float(task.swap_prob),
            choice_size=task.choice_size,
            spacing=spacing,
            full_reveal_prob=task.full_reveal_prob,
            hidden_block=task.hidden_block,
            query_prob=float(task.query_prob),
            probe_leak=float(task.probe_leak),
        )

    def eval_spec(
        self, actions: int | None = None, spacing: int | None = None, reveal: str | None = None
    ) -> TraceSpec | ProbTraceSpec:
        """Held-out traces: the training length (or `actions`) at the evaluation spacing (a
        ProbTraceSpec for probabilistic tasks, whose reveals follow full_reveal_prob, not `reveal`)."""
        if self.probabilistic:
            return self._prob_spec(
                actions if actions is not None else self.task.actions[1],
                spacing if spacing is not None else self.task.eval_spacing,
            )
        return TraceSpec(
            group=self.task.group,
            action_set=self.task.action_set,
            actions=actions if actions is not None else self.task.actions[1],
            spacing=spacing if spacing is not None else self.task.eval_spacing,
            reveal=reveal or ("one" if self.task.reveal == "mixed" else self.task.reveal),
        )

    def task_dict(self) -> dict[str, Any]:
        """What a checkpoint records about its task (read back by loading/opened.py)."""
        return {"config": vars(self.task).copy(), "eval_spec": self.eval_spec().to_dict()}

    def max_actions(self, step: int, total_steps: int) -> int:
        lo, hi = self.task.actions
        if self.task.curriculum_steps <= 0 or step >= self.task.curriculum_steps:
            return hi
        start = max(lo, min(hi, self.task.curriculum_start))
        return start + (hi - start) * step // self.task.curriculum_steps

    def spacing_range(self, step: int) -> tuple[int, int]:
        lo, hi = self.task.spacing
        for from_step, stage_lo, stage_hi in sorted(self.task.spacing_schedule):
            if step >= from_step:
                lo, hi = stage_lo, stage_hi
        return lo, hi

    def train_batch(self, step: int, batch_size: int, total_steps: int) -> dict[str, torch.Tensor]:
        lo, _ = self.task.actions
        hi = self.max_actions(step, total_steps)
        spacing_lo, spacing_hi = self.spacing_range(step)
        encoded = []
        for i in range(batch_size):
            # train-split seeds never equal eval-split ones (tasks.trace_seed keeps them apart)
            seed = trace_seed(self.seed, "train", step * batch_size + i)
            spacing = spacing_lo + (seed >> 8) % (spacing_hi - spacing_lo + 1)
            if self.probabilistic:
                trace = generate_prob_trace(self._prob_spec((min(lo, hi), hi), spacing), seed, posteriors=False)
                encoded.append(self.tokenizer.encode_trace(trace))
                continue
            spec = TraceSpec(
                group=self.task.group,
                action_set=self.task.action_set,
                actions=(min(lo, hi), hi),
                spacing=spacing,
                reveal=self.task.reveal if self.task.reveal != "mixed" else ("one", "all")[(seed >> 16) % 2],
            )
            encoded.append(self.tokenizer.encode_trace(generate_trace(spec, seed)))
        return collate(encoded, supervision=self.task.supervision)

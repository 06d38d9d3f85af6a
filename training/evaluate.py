"""Held-out evaluation the way the paper measures it: is every revealed value predicted?

* reveal accuracy: fraction of revealed-value tokens whose argmax prediction (over the whole
  vocabulary, from the previous position) is the true value;
* trace accuracy: fraction of traces in which every reveal is right;
* accuracy by position: reveal accuracy bucketed by how many actions precede the reveal, which
  shows where tracking breaks down on traces longer than those seen in training.

Evaluation traces come from the "eval" split, whose seeds never overlap the training stream.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd
import torch

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.models.lm.chunked import argmax_in_chunks
from deltalens.tasks.dataset import make_batch
from deltalens.tasks.prob_spec import ProbTraceSpec
from deltalens.tasks.tokenizers import TokenKind
from deltalens.tasks.traces import Trace, TraceSpec, parse_trace


@dataclass(repr=False)
class EvalResult(Summary):
    reveal_accuracy: float
    trace_accuracy: float
    n_traces: int
    n_reveals: int
    # [{"actions_from": a, "actions_to": b, "accuracy": x, "count": n}, ...]
    by_position: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def title(self) -> str:
        return (
            f"EvalResult: reveal accuracy {self.reveal_accuracy:.4f}, trace accuracy {self.trace_accuracy:.4f} "
            f"({self.n_reveals} reveals in {self.n_traces} traces); by actions before the reveal:"
        )

    def display_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.by_position)


@torch.no_grad()
def score_batch(model, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-token correctness at reveal positions, with the action count before each reveal."""
    weight = next(model.parameters(), None)
    device = weight.device if weight is not None else torch.device("cpu")
    best = argmax_in_chunks(model, batch["tokens"].to(device)).cpu()  # long traces: chunks, state carried
    predicted = torch.zeros_like(batch["tokens"])
    predicted[:, 1:] = best[:, :-1]  # prediction made for token t, from position t-1
    reveal = batch["reveal_mask"].clone()
    reveal[:, 0] = False
    actions_before = batch["state_steps"]  # actions completed at each token (not action tokens: a
    # code-tokenizer action line has ~9 of them)
    return {"correct": (predicted == batch["tokens"]) & reveal, "reveal": reveal, "actions_before": actions_before}


@dataclass
class Tally:
    """Running counts of scored batches: evaluation keeps these, not the batches (memory stays
    that of one batch however many traces are scored)."""

    bucket: int = 8  # actions per by-position bucket
    correct: int = 0
    reveals: int = 0
    solved: int = 0  # traces whose every reveal is right (traces without reveals are skipped)
    with_reveals: int = 0
    traces: int = 0
    positions: dict[int, list[int]] = field(default_factory=dict)  # bucket -> [correct, count]

    def add(self, score: dict[str, torch.Tensor]) -> None:
        correct, reveal = score["correct"], score["reveal"]
        self.correct += int(correct.sum())
        self.reveals += int(reveal.sum())
        self.solved += int(((correct == reveal).all(1) & reveal.any(1)).sum())
        self.with_reveals += int(reveal.any(1).sum())
        self.traces += int(reveal.shape[0])
        buckets = score["actions_before"][reveal] // self.bucket
        for p, ok in zip(buckets.tolist(), correct[reveal].tolist()):
            entry = self.positions.setdefault(p, [0, 0])
            entry[0] += int(ok)
            entry[1] += 1

    def result(self) -> EvalResult:
        if self.reveals == 0:
            raise DeltalensError(
                "these traces reveal no values, so there is nothing to score; "
                "use longer traces or a smaller reveal spacing"
            )
        b = self.bucket
        by_position = [
            {"actions_from": p * b, "actions_to": p * b + b - 1, "accuracy": c / n, "count": n}
            for p, (c, n) in sorted(self.positions.items())
        ]
        return EvalResult(
            reveal_accuracy=self.correct / self.reveals,
            trace_accuracy=self.solved / max(1, self.with_reveals),
            n_traces=self.traces,
            n_reveals=self.reveals,
            by_position=by_position,
        )


def summarise(scores: list[dict[str, torch.Tensor]], bucket: int = 8) -> EvalResult:
    tally = Tally(bucket)
    for score in scores:
        tally.add(score)
    return tally.result()


def evaluate(
    model,
    tokenizer,
    spec: TraceSpec | ProbTraceSpec,
    n_traces: int = 256,
    seed: int = 0,
    batch_size: int = 64,
    bar=None,
) -> EvalResult:
    """Accuracy on `n_traces` fresh held-out traces drawn from `spec` (`bar`: a progress bar to advance
    by one per batch).

    >>> result = dl.evaluate(model, model.tokenizer, model.checkpoint.spec, n_traces=8)
    >>> result.reveal_accuracy > 0.99
    True
    """
    if n_traces < 1:
        raise DeltalensError(f"the number of evaluation traces must be at least 1, got {n_traces}")
    was_training = model.training
    model.eval()
    tally = Tally()
    try:
        for start in range(0, n_traces, batch_size):
            if bar is not None:
                bar.update(1)
            size = min(batch_size, n_traces - start)
            batch = make_batch(spec, tokenizer, size, seed=seed * 1_000_003 + start, split="eval")
            tally.add(score_batch(model, batch))
    finally:
        model.train(was_training)
    return tally.result()


@torch.no_grad()
def trace_predictions(model, tokenizer, trace: Trace | str, top_k: int = 3, hooks=()) -> pd.DataFrame:
    """What the model predicts at every token of one trace (a Trace, or a transcript to parse).

    One row per token after <bos>: position, line (0-based line of the transcript), token, kind,
    is_reveal, p_token (the probability the model gave this token, predicted from the previous
    position), correct (argmax == token), top (the top_k "token: p" strings) and state (the true
    values s_t at the token). `hooks` are forward hooks to run under (an intervention).
    """
    if isinstance(trace, str):
        trace = parse_trace(trace if trace.endswith("\n") else trace + "\n")
    encoded = tokenizer.encode_trace(trace)
    tokens = torch.tensor([encoded.ids])
    weight = next(model.parameters(), None)
    was_training = model.training
    model.eval()
    try:
        with model.hooks(fwd_hooks=list(hooks)):
            logits = model(tokens.to(weight.device if weight is not None else "cpu"))
    finally:
        model.train(was_training)
    probs = logits[0].float().softmax(-1).cpu()  # (T, vocab): row t predicts token t + 1
    top_p, top_i = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    rows, line = [], 0
    for t in range(1, len(encoded.ids)):
        token = int(encoded.ids[t])
        piece = tokenizer.token_of(token)
        rows.append(
            {
                "position": t,
                "line": line,
                "token": piece,
                "kind": TokenKind(encoded.kinds[t]).name.lower(),
                "is_reveal": bool(encoded.is_reveal[t]),
                "p_token": float(probs[t - 1, token]),
                "correct": int(probs[t - 1].argmax()) == token,
                "top": [f"{tokenizer.token_of(int(i))!r}: {float(p):.3f}" for p, i in zip(top_p[t - 1], top_i[t - 1])],
                "state": tuple(encoded.states[t]),
            }
        )
        line += piece.count("\n")
    return pd.DataFrame(rows)

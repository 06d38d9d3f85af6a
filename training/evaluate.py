"""Held-out evaluation the way the paper measures it: is every revealed value predicted?

* reveal accuracy: fraction of revealed-value tokens whose argmax prediction (over the whole
  vocabulary, from the previous position) is the true value;
* trace accuracy: fraction of traces in which every reveal is right;
* accuracy by position: reveal accuracy bucketed by how many actions precede the reveal, which
  shows where tracking breaks down on traces longer than those seen in training.

Evaluation traces come from the "eval" split, whose seeds never overlap the training stream.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from deltalens import models
from deltalens.core.display import Summary
from deltalens.core.display import progress as progress_bar
from deltalens.core.errors import DeltalensError
from deltalens.models.lm.chunked import argmax_in_chunks
from deltalens.tasks.dataset import collate, make_batch
from deltalens.tasks.tokenizers import TokenKind
from deltalens.tasks.traces import MAX_LINE, Trace, TraceSpec, parse_trace
from deltalens.training.opened import open_checkpoint


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
    model, tokenizer, spec: TraceSpec, n_traces: int = 256, seed: int = 0, batch_size: int = 64, bar=None
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


def evaluate_checkpoint(
    path,
    lengths: list[int] | None = None,
    spacing: int | None = None,
    n_traces: int = 512,
    seed: int = 0,
    reveal: str | None = None,
    progress: bool = False,
    dtype=None,
    folder=None,
) -> dict[str, Any]:
    """Accuracy of a checkpoint at several trace lengths (default 1x, 2x and 4x its training length),
    its weights in `dtype` ("fp32", "bf16"; None = as saved).

    The headline `reveal_accuracy` / `trace_accuracy` is the lowest over the lengths evaluated.
    A default length the model cannot take (past a Transformer's context) is listed under
    `skipped` with the reason; lengths asked for explicitly must all fit. `folder`: `path` already read
    (a ModelFolder, models/io/model_folder.py), so its config.json is not read again.

    >>> report = dl.evaluate_checkpoint("s3-deltanet-neg-statement", lengths=[16], n_traces=8)
    >>> report["reveal_accuracy"] > 0.99
    True
    """
    checkpoint = open_checkpoint(folder or path, dtype=dtype)
    data, model = checkpoint.require_task(), checkpoint.model
    task = data.task
    train_length = task.actions[1]
    defaults = not lengths
    lengths = lengths or [train_length, 2 * train_length, 4 * train_length]
    spacing = spacing or task.eval_spacing
    # probabilistic traces print one variable or all of them by their own full_reveal_prob
    reveal = "pfsa" if data.probabilistic else data.eval_spec(reveal=reveal).reveal
    rows, skipped = [], []
    bar = progress_bar(total=len(lengths) * -(-n_traces // 64), enabled=progress, desc="eval", unit="batch")
    for actions in lengths:
        spec = data.eval_spec(actions, spacing, reveal)
        try:
            result = evaluate(model, data.tokenizer, spec, n_traces=n_traces, seed=seed, bar=bar)
        except DeltalensError as err:
            if not defaults or not rows:
                raise
            skipped.append({"actions": actions, "error": str(err)})
            continue
        rows.append({"actions": actions, "x_train": actions / train_length, **result.to_dict()})
    bar.close()
    return {
        "checkpoint": str(path),
        "spacing": spacing,
        "reveal": reveal,
        "n_traces": n_traces,
        "reveal_accuracy": min(r["reveal_accuracy"] for r in rows),
        "trace_accuracy": min(r["trace_accuracy"] for r in rows),
        "lengths": rows,
        **({"skipped": skipped} if skipped else {}),
    }


MAX_TRACES_FILE = 500_000_000  # bytes: it is read as a stream, but hours of scoring are a typo


def read_transcripts(traces_file: str | Path) -> Iterator[tuple[int, str]]:
    """(first line number, text) of each blank-line-separated transcript of a file, read as a stream."""
    path = Path(traces_file)
    if path.is_dir():
        raise DeltalensError(f"traces file {path} is a folder; give a text file of REPL transcripts")
    if not path.is_file():
        raise DeltalensError(f"traces file {path} does not exist")
    if path.stat().st_size > MAX_TRACES_FILE:
        raise DeltalensError(
            f"traces file {path} has {path.stat().st_size:,} bytes; split it into files of at most {MAX_TRACES_FILE:,}"
        )
    block, start = [], 1
    try:
        with open(path, encoding="utf-8") as handle:  # universal newlines: CRLF files read as LF
            for lineno, line in enumerate(iter(lambda: handle.readline(MAX_LINE + 3), ""), start=1):
                if len(line) > MAX_LINE + 1:
                    raise DeltalensError(
                        f"{path} line {lineno} is longer than {MAX_LINE:,} characters, the most a "
                        "line of a trace has (is it a traces file?)"
                    )
                if line.strip():
                    if not block:
                        start = lineno
                    block.append(line if line.endswith("\n") else line + "\n")
                elif block:
                    yield start, "".join(block)
                    block = []
    except UnicodeDecodeError as err:
        raise DeltalensError(
            f"{path} is not UTF-8 text (bad byte at offset {err.start}); give REPL transcripts as text"
        ) from None
    except OSError as err:
        raise DeltalensError(f"cannot read traces file {path} ({err.strerror or type(err).__name__})") from None
    if block:
        yield start, "".join(block)


def _parse_at(text: str, path, start: int) -> Trace:
    """parse_trace, with line numbers in its errors counted in the file, not in the transcript."""
    try:
        return parse_trace(text)
    except DeltalensError as err:
        message = str(err)
        found = re.match(r"line (\d+)(.*)", message, re.S)
        if found:
            raise DeltalensError(f"{path} line {int(found.group(1)) + start - 1}{found.group(2)}") from None
        raise DeltalensError(f"{path}, the transcript at line {start}: {message}") from None


MAX_BATCH_TOKENS = 1 << 18  # tokens scored together: memory is set by this, not by the file


def evaluate_text_file(path, traces_file, batch_size: int = 64, folder=None) -> EvalResult:
    """Accuracy of a checkpoint on code-format REPL traces written elsewhere (blank-line separated),
    scored a batch at a time (`folder`: `path` already read, as for evaluate_checkpoint)."""
    checkpoint = open_checkpoint(folder or path, load_model=False)
    tokenizer = checkpoint.tokenizer
    if tokenizer is None:
        raise DeltalensError(
            f"{path} records no tokenizer, so its traces cannot be encoded; it is not a deltalens "
            "checkpoint (a plain fla DeltaNet?)"
        )
    transcripts = read_transcripts(traces_file)
    first = next(transcripts, None)
    if first is None:
        raise DeltalensError(f"{traces_file} holds no traces (expected REPL transcripts separated by blank lines)")
    model = models.load(checkpoint.folder)
    model.eval()
    tally, batch, tokens = Tally(), [], 0
    for start, text in itertools.chain([first], transcripts):
        trace = _parse_at(text, traces_file, start)
        try:
            batch.append(tokenizer.encode_trace(trace))
        except DeltalensError as err:
            raise DeltalensError(f"{traces_file}, the transcript at line {start}: {err}") from None
        del trace  # the encoding is what is scored; a 93,000-action trace's lines are ~100 MB
        tokens += len(batch[-1].ids)
        if len(batch) == batch_size or tokens >= MAX_BATCH_TOKENS:  # long traces: fewer at a time
            tally.add(score_batch(model, collate(batch)))
            batch, tokens = [], 0
    if batch:
        tally.add(score_batch(model, collate(batch)))
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

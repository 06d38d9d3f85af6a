"""A saved checkpoint evaluated: at several trace lengths of its own task (evaluate_checkpoint), or on
REPL transcripts written elsewhere, read as a stream (evaluate_text_file). The scoring itself is
training/evaluate.py's, which evaluates a model in memory."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from deltalens import models
from deltalens.core.display import progress as progress_bar
from deltalens.core.errors import DeltalensError
from deltalens.loading.opened import open_checkpoint
from deltalens.tasks.dataset import collate
from deltalens.tasks.tokenizers.hf import missing_tokenizer
from deltalens.tasks.traces import MAX_LINE, Trace, TraceSpec, parse_trace
from deltalens.training.evaluate import EvalResult, Tally, evaluate, score_batch


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
    held_out = data.eval_spec(reveal=reveal)
    reveal = held_out.reveal if isinstance(held_out, TraceSpec) else "pfsa"  # a ProbTraceSpec: probabilistic
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
        raise DeltalensError(missing_tokenizer(path))
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

"""Reveal accuracy of an LM with its own tokenizer, by how long ago the revealed variable was last seen.

    report = evaluate_since_reveal(model, tokenizer, spec, n_traces=64)
    report.rows     # one per "actions since the variable's value was last shown": accuracy, p, baselines

A reveal is one printed value (tasks/text_traces.py aligns it to the token or tokens whose prediction
is that value): it is right when every one of its tokens is the argmax prediction from the token
before, and its probability is the product of theirs (teacher forcing). Beside the model, two
baselines that need no model: chance (1/n: a value drawn uniformly) and the last revealed value (the
value the variable showed when it was last printed or initialised, right whenever the actions since
left it in place). A model that tracks the state beats the second at every distance; one that
copies the last print matches it; one that has learnt nothing sits at chance.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd
import torch

from deltalens.core.display import Summary
from deltalens.core.display import progress as progress_bar
from deltalens.core.errors import DeltalensError
from deltalens.models.lm.chunked import log_probs_at
from deltalens.tasks.dataset import collate, generate_any, trace_seed
from deltalens.tasks.text_traces import reveal_context
from deltalens.tasks.traces import TraceSpec


@dataclass(repr=False)
class SinceRevealReport(Summary):
    reveal_accuracy: float  # reveals with every token right
    mean_p: float  # mean probability of the revealed value
    last_value_baseline: float
    chance: float
    n_traces: int
    n_reveals: int
    spec: dict[str, Any] = field(default_factory=dict)
    text_format: dict[str, Any] = field(default_factory=dict)
    tokens_per_reveal: float = 1.0
    rows: list[dict[str, Any]] = field(default_factory=list)  # by actions since last shown

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def title(self) -> str:
        return (
            f"Reveal accuracy {self.reveal_accuracy:.4f} (mean p {self.mean_p:.3f}) on {self.n_reveals} reveals in "
            f"{self.n_traces} traces; last-revealed-value baseline {self.last_value_baseline:.4f}, chance "
            f"{self.chance:.4f}; by actions since the variable was last shown:"
        )

    def display_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


@torch.no_grad()
def score_reveals(model, tokenizer, traces) -> list[dict[str, Any]]:
    """One row per revealed value of `traces`: since, value, last_value, correct, p, tokens."""
    encoded = [tokenizer.encode_trace(trace) for trace in traces]
    if not all(hasattr(enc, "reveal_index") for enc in encoded):
        raise DeltalensError("scoring by reveal needs a tokenizer that aligns text (an hf tokenizer)")
    batch = collate(encoded)
    device = next(model.parameters()).device
    tokens = batch["tokens"]
    scored = []  # (trace, reveal, info, positions of the value's tokens)
    read = torch.zeros(tokens.shape, dtype=torch.bool)  # the positions whose next-token prediction is read
    for b, (trace, enc) in enumerate(zip(traces, encoded)):
        for r, info in enumerate(reveal_context(trace)):
            where = [t for t in enc.value_tokens[r] if t > 0]
            if not where:
                raise DeltalensError(f"reveal {r} of a trace has no token to score (it sits at the very start?)")
            read[b, torch.tensor(where) - 1] = True
            scored.append((b, info, where))
    # those rows alone, chunk by chunk with the state carried: long traces never hold (B, T, V) logits at once
    picked = log_probs_at(model, tokens.to(device), read.to(device)).cpu()
    index = {pos: i for i, pos in enumerate(zip(*(x.tolist() for x in read.nonzero(as_tuple=True))))}
    rows = []
    for b, info, where in scored:
        step = picked[[index[(b, t - 1)] for t in where]]  # (tokens, V): predictions of the value's tokens
        target = tokens[b, torch.tensor(where)]
        correct = bool((step.argmax(-1) == target).all())
        p = float(step.gather(1, target[:, None]).sum().exp())
        rows.append({**info, "correct": correct, "p": p, "tokens": len(where)})
    return rows


def evaluate_since_reveal(
    model,
    tokenizer,
    spec: TraceSpec,
    n_traces: int = 64,
    seed: int = 0,
    batch_size: int = 8,
    max_since: int = 16,
    progress: bool = False,
) -> SinceRevealReport:
    """Score `n_traces` held-out traces of `spec` (eval split) written and tokenized by `tokenizer`;
    reveals more than `max_since` actions after the last sight share the last row."""
    if isinstance(n_traces, bool) or not isinstance(n_traces, int) or n_traces < 1:
        raise DeltalensError(f"the number of evaluation traces must be a whole number >= 1, got {n_traces!r}")
    tokenizer.check_spec(spec)
    was_training = model.training
    model.eval()
    rows: list[dict[str, Any]] = []
    bar = progress_bar(total=-(-n_traces // batch_size), enabled=progress, desc="eval", unit="batch")
    try:
        for start in range(0, n_traces, batch_size):
            seeds = [trace_seed(seed, "eval", i) for i in range(start, min(n_traces, start + batch_size))]
            rows += score_reveals(model, tokenizer, [generate_any(spec, s) for s in seeds])
            bar.update(1)
    finally:
        bar.close()
        model.train(was_training)
    if not rows:
        raise DeltalensError("these traces reveal no values, so there is nothing to score; use a smaller spacing")
    frame = pd.DataFrame(rows)
    frame["since"] = frame["since"].clip(upper=max_since)
    frame["baseline"] = frame["last_value"] == frame["value"]
    table = []
    for since, group in frame.groupby("since"):
        table.append(
            {
                "actions_since": f"{since}+" if since == max_since else int(since),
                "count": len(group),
                "accuracy": round(float(group["correct"].mean()), 4),
                "mean_p": round(float(group["p"].mean()), 4),
                "last_value_baseline": round(float(group["baseline"].mean()), 4),
                "chance": round(1 / spec.n, 4),
            }
        )
    text_format = getattr(tokenizer, "text_format", None)
    return SinceRevealReport(
        reveal_accuracy=float(frame["correct"].mean()),
        mean_p=float(frame["p"].mean()),
        last_value_baseline=float(frame["baseline"].mean()),
        chance=1 / spec.n,
        n_traces=n_traces,
        n_reveals=len(frame),
        spec=spec.to_dict(),
        text_format=text_format.to_dict() if text_format is not None else {},
        tokens_per_reveal=float(frame["tokens"].mean()),
        rows=table,
    )
